/*
 * bulk.c - the bulk action runner (see bulk.h).
 *
 * The operations live in a fixed array of BULK_KEEP slots (the oldest
 * finished one is reused), guarded by the worker's mutex: the HTTP threads
 * submit and read, the runner thread updates the counts after each page.
 * The runner holds the mutex only to copy or update counts, never across
 * a store call.
 */
#include "bulk.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "timeutil.h"
#include "worker.h"

#define MOD "bulk"

typedef enum bulk_state { BULK_RUNNING, BULK_DONE, BULK_FAILED } bulk_state;

typedef struct bulk_op {
    bool used;
    char id[JOB_ID_LEN + 1];
    bulk_action action;
    json_t *filter_json; /* owned */
    store_filter f;      /* its strings point into filter_json */
    bulk_state state;
    uint64_t matched, done, skipped, errors;
    int64_t started_at, finished_at; /* ms; finished_at -1 while running */
} bulk_op;

struct bulk {
    store_t *st; /* borrowed */
    disp_t *d;   /* borrowed */
    int64_t pause_ms;
    worker_t w; /* w.mu guards ops and todo */
    bulk_op ops[BULK_KEEP];
    bulk_op *todo;    /* submitted, not yet taken by the runner */
    bulk_op *running; /* taken, not yet finished */
};

static const char *action_name(bulk_action a)
{
    return a == BULK_CANCEL ? "cancel" : "retry";
}

/* A compact text of the filter, for logs (malloc'd; may be NULL). */
static char *filter_text(const json_t *f)
{
    return json_dumps(f, JSON_COMPACT | JSON_SORT_KEYS);
}

/* One page: apply the action to the jobs in the right status. False when
 * the operation must end (a database failure). */
static bool run_page(bulk_t *b, bulk_op *op, job_t *jobs, size_t n, int64_t now)
{
    const char *ids[STORE_BATCH_MAX];
    bool changed[STORE_BATCH_MAX];
    job_status want = op->action == BULK_CANCEL ? JOB_PENDING : JOB_FAILED;
    store_change ch = {.kind = op->action == BULK_CANCEL ? STORE_CHANGE_CANCEL
                                                         : STORE_CHANGE_RETRY,
                       .keep_deliver_at = true};
    size_t m = 0, n_changed = 0;
    rmqs_rc rc;

    for (size_t i = 0; i < n; i++)
        if (jobs[i].status == want)
            ids[m++] = jobs[i].id;
    rc = store_update_batch(b->st, ids, m, &ch, now, changed, &n_changed);
    pthread_mutex_lock(&b->w.mu);
    op->matched += n;
    if (rc == RMQS_OK) {
        op->done += n_changed;
        op->skipped += n - n_changed;
    } else {
        op->errors += m;
        op->skipped += n - m;
    }
    pthread_mutex_unlock(&b->w.mu);
    if (rc != RMQS_OK) {
        log_error(MOD, "page failed", "bulk_id=%s action=%s jobs=%zu error=%s",
                  op->id, action_name(op->action), m, rmqs_rc_name(rc));
        return false;
    }
    if (n_changed > 0 && op->action == BULK_CANCEL)
        metrics_jobs_cancelled(n_changed);
    if (n_changed > 0 && op->action == BULK_RETRY)
        disp_notify(b->d, now);
    return true;
}

static void run_op(bulk_t *b, bulk_op *op)
{
    char *cursor = NULL, *text = filter_text(op->filter_json);
    bool ok = true, stopped = false;

    log_info(MOD, "started", "bulk_id=%s action=%s filter=%s", op->id,
             action_name(op->action), text ? text : "?");
    for (;;) {
        job_t *jobs = NULL;
        size_t n = 0;
        char *next = NULL;
        rmqs_rc rc = store_list(b->st, &op->f, STORE_BATCH_MAX, cursor, &jobs,
                                &n, &next);
        if (rc != RMQS_OK) {
            log_error(MOD, "cannot list jobs", "bulk_id=%s error=%s", op->id,
                      rmqs_rc_name(rc));
            ok = false;
            break;
        }
        ok = run_page(b, op, jobs, n, tu_now_ms());
        for (size_t i = 0; i < n; i++)
            job_clear(&jobs[i]);
        free(jobs);
        free(cursor);
        cursor = next;
        if (!ok || cursor == NULL)
            break;
        pthread_mutex_lock(&b->w.mu);
        stopped = b->w.stop;
        pthread_mutex_unlock(&b->w.mu);
        if (stopped || (b->pause_ms > 0 && worker_sleep(&b->w, b->pause_ms))) {
            stopped = true;
            break;
        }
    }
    free(cursor);
    pthread_mutex_lock(&b->w.mu);
    op->state = ok && !stopped ? BULK_DONE : BULK_FAILED;
    op->finished_at = tu_now_ms();
    if (!ok)
        op->errors += op->errors == 0 ? 1 : 0; /* a failure is never silent */
    log_info(MOD, ok && !stopped ? "finished" : "ended early",
             "bulk_id=%s action=%s filter=%s matched=%llu done=%llu "
             "skipped=%llu errors=%llu stopping=%s",
             op->id, action_name(op->action), text ? text : "?",
             (unsigned long long)op->matched, (unsigned long long)op->done,
             (unsigned long long)op->skipped, (unsigned long long)op->errors,
             stopped ? "true" : "false");
    b->running = NULL;
    pthread_mutex_unlock(&b->w.mu);
    free(text);
}

static void *bulk_main(void *arg)
{
    bulk_t *b = arg;

    pthread_mutex_lock(&b->w.mu);
    for (;;) {
        while (!b->w.stop && b->todo == NULL)
            worker_cond_wait_ms(&b->w.cv, &b->w.mu, -1);
        if (b->w.stop)
            break;
        b->running = b->todo;
        b->todo = NULL;
        pthread_mutex_unlock(&b->w.mu);
        run_op(b, b->running);
        pthread_mutex_lock(&b->w.mu);
    }
    if (b->todo != NULL) { /* submitted, never begun */
        b->todo->state = BULK_FAILED;
        b->todo->finished_at = tu_now_ms();
        b->todo = NULL;
    }
    pthread_mutex_unlock(&b->w.mu);
    return NULL;
}

bulk_t *bulk_new(store_t *st, disp_t *d, int64_t pause_ms)
{
    bulk_t *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->st = st;
    b->d = d;
    b->pause_ms = pause_ms > 0 ? pause_ms : 0;
    if (worker_init(&b->w, false) != RMQS_OK) {
        free(b);
        return NULL;
    }
    return b;
}

rmqs_rc bulk_start(bulk_t *b)
{
    return worker_start(&b->w, "rmqs-bulk", bulk_main, b);
}

void bulk_free(bulk_t *b)
{
    if (b == NULL)
        return;
    worker_stop(&b->w);
    worker_destroy(&b->w);
    for (size_t i = 0; i < BULK_KEEP; i++)
        json_decref(b->ops[i].filter_json);
    free(b);
}

rmqs_rc bulk_submit(bulk_t *b, bulk_action a, json_t *filter_json,
                    const store_filter *f, char id_out[JOB_ID_LEN + 1])
{
    int64_t now = tu_now_ms();
    bulk_op *slot = NULL;
    char id[JOB_ID_LEN + 1];
    rmqs_rc rc = job_id_generate(now, id);

    if (rc != RMQS_OK) {
        json_decref(filter_json);
        return rc;
    }
    pthread_mutex_lock(&b->w.mu);
    if (b->w.stop) {
        rc = RMQS_ESYS;
    } else if (b->todo != NULL || b->running != NULL) {
        memcpy(id_out, (b->todo ? b->todo : b->running)->id, JOB_ID_LEN + 1);
        rc = RMQS_ECONFLICT;
    } else {
        /* a free slot, else the one finished first (none is running) */
        slot = &b->ops[0];
        for (size_t i = 1; i < BULK_KEEP && slot->used; i++)
            if (!b->ops[i].used || b->ops[i].finished_at < slot->finished_at)
                slot = &b->ops[i];
        json_decref(slot->filter_json);
        *slot = (bulk_op){.used = true,
                          .action = a,
                          .filter_json = filter_json,
                          .f = *f,
                          .state = BULK_RUNNING,
                          .started_at = now,
                          .finished_at = -1};
        filter_json = NULL;
        memcpy(slot->id, id, sizeof(id));
        memcpy(id_out, id, sizeof(id));
        b->todo = slot;
        pthread_cond_broadcast(&b->w.cv);
    }
    pthread_mutex_unlock(&b->w.mu);
    json_decref(filter_json);
    return rc;
}

static json_t *time_or_null(int64_t ms)
{
    char t[TU_RFC3339_LEN + 1];

    if (ms < 0)
        return json_null();
    tu_format_rfc3339(ms, t);
    return json_string(t);
}

json_t *bulk_get_json(bulk_t *b, const char *id)
{
    static const char *const states[] = {"running", "done", "failed"};
    json_t *out = NULL;

    pthread_mutex_lock(&b->w.mu);
    for (size_t i = 0; i < BULK_KEEP; i++) {
        bulk_op *op = &b->ops[i];
        if (!op->used || strcmp(op->id, id) != 0)
            continue;
        out = json_pack(
            "{s:s, s:s, s:O, s:s, s:I, s:I, s:I, s:I, s:o, s:o}", "id", op->id,
            "action", action_name(op->action), "filter", op->filter_json,
            "state", states[op->state], "matched_so_far",
            (json_int_t)op->matched, "done", (json_int_t)op->done, "skipped",
            (json_int_t)op->skipped, "errors", (json_int_t)op->errors,
            "started_at", time_or_null(op->started_at), "finished_at",
            time_or_null(op->finished_at));
        break;
    }
    pthread_mutex_unlock(&b->w.mu);
    return out;
}
