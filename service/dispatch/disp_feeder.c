/*
 * disp_feeder.c - the dispatcher's feeder thread: claims the jobs due
 * within the lookahead from the store's snapshot, ahead of their time,
 * into `ahead` (due order), and queues their claims for the recorder; and
 * disp_feeder_plan() (disp_notify's work), which wakes it when a job is
 * due sooner than it planned to look. Never waits for a write nor the broker (dispatcher.c's file
 * comment says why; dispatcher_int.h what the threads share).
 */
#include "dispatcher_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "due_queue.h"
#include "flow.h"
#include "limit.h"
#include "log.h"
#include "worker.h"

#define MOD "dispatcher"

#define CLAIM_RETRY_MS 50 /* after a failed read: soon, no spin */

/* dispatcher_int.h; disp_notify()'s work, from any thread (the writer,
 * the store's wake-up, the recorder for a job pending again): the
 * feeder's plan moves sooner. */
void disp_feeder_plan(disp_t *d, int64_t due_at_ms)
{
    pthread_mutex_lock(&d->w.mu);
    if (due_at_ms < d->notified_due)
        d->notified_due = due_at_ms;
    if (due_at_ms - d->opt.lookahead_ms < d->next_claim_at && !d->kicked) {
        d->kicked = true;
        pthread_cond_signal(&d->w.cv);
    }
    pthread_mutex_unlock(&d->w.mu);
}

/* ------------------------------------------------------------------------ */
/* The feeder thread: claims ahead                                          */

/* Room for k more claims in d->claims. d->w.mu held (the recorder swaps the
 * array out under it). */
static bool claims_reserve_locked(disp_t *d, size_t k)
{
    size_t ncap = d->claims_cap ? d->claims_cap : 64;
    void *nc;

    if (d->claims_n + k <= d->claims_cap)
        return true;
    while (ncap < d->claims_n + k)
        ncap *= 2;
    nc = realloc(d->claims, ncap * sizeof(*d->claims));
    if (nc == NULL)
        return false;
    d->claims = nc;
    d->claims_cap = ncap;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Flow control: the limits, and what they do to a claim                    */

/* Read the limits from the store when LIMITS_REFRESH_MS have passed or
 * disp_limits_changed() asked; a limit that no longer validates is left
 * out (logged). On a store error the limits in force stay. */
static void read_limits(disp_t *d, int64_t now)
{
    store_limit *rows = NULL;
    limit_t *ls = NULL;
    const char **specs = NULL;
    size_t n = 0, m = 0;
    bool kick = atomic_exchange(&d->limits_kick, false);

    if (!kick && d->limits_read_at != INT64_MIN &&
        now - d->limits_read_at < LIMITS_REFRESH_MS)
        return;
    d->limits_read_at = now;
    if (store_limit_list(d->st, &rows, &n) != RMQS_OK)
        return; /* logged by the store */
    ls = n ? calloc(n, sizeof(*ls)) : NULL;
    specs = n ? calloc(n, sizeof(*specs)) : NULL;
    if (n > 0 && (ls == NULL || specs == NULL)) {
        log_error(MOD, "cannot read the limits", "error=\"out of memory\"");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        rmqs_error err = {0};
        if (limit_from_spec(rows[i].name, rows[i].spec, &ls[m], &err) !=
            RMQS_OK) {
            log_warn(MOD, "stored limit no longer valid; not applied",
                     "limit=\"%s\" field=%s error=\"%s\"", rows[i].name,
                     err.field, err.message);
            continue;
        }
        specs[m++] = rows[i].spec;
    }
    if (flow_set_limits(d->flow, ls, specs, m) != RMQS_OK)
        log_error(MOD, "cannot apply the limits", "error=\"out of memory\"");
out:
    for (size_t i = 0; ls != NULL && i < n; i++)
        limit_clear(&ls[i]);
    free(ls);
    free(specs);
    store_limits_free(rows, n);
}

/* dispatcher_int.h: name the limit that held j back and add what it cost
 * j. */
void disp_mark_held(job_t *j, const char *limit, int64_t until)
{
    char *name = strdup(limit);

    if (name != NULL) { /* out of memory: the reason goes unsaid */
        free(j->held_by);
        j->held_by = name;
    }
    if (until > j->due_at)
        j->held_ms += until - j->due_at;
}

/*
 * The limits' verdict on the claimed items[0..*n) (in claim order): those
 * a limit holds past the lookahead go to held[] (*n_held of them, each an
 * outcome STORE_OUT_HOLD at its slot), those it delays within it wait in
 * `ahead` for their slot (due_at moved, held_ms added); items[0..*n) keeps
 * the rest, in due order again.
 */
static void decide(disp_t *d, dueq_item **items, size_t *n, dueq_item **held,
                   size_t *n_held, int64_t now)
{
    size_t keep = 0;

    *n_held = 0;
    for (size_t i = 0; i < *n; i++) {
        dueq_item *it = items[i];
        flow_verdict v;

        flow_admit(d->flow, &it->job, now, now + d->opt.lookahead_ms, &v);
        if (v.hold) {
            disp_mark_held(&it->job, v.limit, v.send_at);
            it->out = (store_outcome){.id = it->job.id,
                                      .kind = STORE_OUT_HOLD,
                                      .retry_at = v.send_at,
                                      .held_by = it->job.held_by,
                                      .held_ms = it->job.held_ms};
            held[(*n_held)++] = it;
            continue;
        }
        if (v.limit != NULL && v.send_at > it->job.due_at) {
            disp_mark_held(&it->job, v.limit, v.send_at);
            it->job.due_at = v.send_at;
            it->delayed = true;
        }
        if (v.hold_queue != NULL) {
            snprintf(it->hold_limit, sizeof it->hold_limit, "%s", v.hold_limit);
            snprintf(it->hold_queue, sizeof it->hold_queue, "%s", v.hold_queue);
            it->hold_messages = v.hold_messages;
        }
        /* insertion: stable, and the claim was in order already */
        size_t k = keep++;
        while (k > 0 && (items[k - 1]->job.due_at > it->job.due_at ||
                         (items[k - 1]->job.due_at == it->job.due_at &&
                          items[k - 1]->job.claim_rank > it->job.claim_rank))) {
            items[k] = items[k - 1];
            k--;
        }
        items[k] = it;
    }
    *n = keep;
}

/* What decide() needs inside store_buckets_update's transaction. */
typedef struct shared_ctx {
    disp_t *d;
    dueq_item **items, **held;
    size_t *n, *n_held;
    int64_t now;
    flow_bucket_ref *refs;
    bool decided; /* decide() ran (its verdicts stand whatever the commit
                     did) */
} shared_ctx;

/* store_bucket_fn: the buckets' shared state (locked) into the flow, the
 * verdicts, and the state the verdicts left back to the store. */
static void decide_shared(void *cls, store_bucket *b, size_t m)
{
    shared_ctx *c = cls;

    for (size_t i = 0; i < m; i++)
        *c->refs[i].tat = b[i].tat_us;
    decide(c->d, c->items, c->n, c->held, c->n_held, c->now);
    c->decided = true;
    for (size_t i = 0; i < m; i++)
        b[i].tat_us = *c->refs[i].tat;
}

/* decide(), on the buckets every instance shares when the store is shared
 * (several instances on one database): they are locked in the store from
 * the read of their state to the write of the new one, so the rates hold
 * for the sum of the instances. Out of memory or a store error: decided on
 * this instance's copy (logged; the rates then hold per instance). */
static void apply_limits(disp_t *d, dueq_item **items, size_t *n,
                         dueq_item **held, size_t *n_held, int64_t now)
{
    job_t **jobs = NULL;
    flow_bucket_ref *refs = NULL;
    store_bucket *sb = NULL;
    size_t m = 0, cap;
    rmqs_rc rc = RMQS_ENOMEM;
    shared_ctx c = {.d = d,
                    .items = items,
                    .held = held,
                    .n = n,
                    .n_held = n_held,
                    .now = now};

    flow_sweep(d->flow, now);
    if (!store_buckets_shared(d->st)) {
        decide(d, items, n, held, n_held, now);
        return;
    }
    cap = *n * flow_limit_count(d->flow);
    jobs = calloc(*n, sizeof(*jobs));
    refs = cap ? calloc(cap, sizeof(*refs)) : NULL;
    sb = cap ? calloc(cap, sizeof(*sb)) : NULL;
    if (jobs != NULL && refs != NULL && sb != NULL) {
        c.refs = refs;
        for (size_t i = 0; i < *n; i++)
            jobs[i] = &items[i]->job;
        m = flow_touched(d->flow, (const job_t *const *)jobs, *n, now, refs,
                         cap);
        for (size_t i = 0; i < m; i++)
            sb[i] = (store_bucket){.limit = refs[i].limit, .key = refs[i].key};
        rc = m == 0
                 ? RMQS_OK
                 : store_buckets_update(d->st, sb, m, now, decide_shared, &c);
        if (m == 0) {
            decide(d, items, n, held, n_held, now);
            c.decided = true;
        }
    }
    if (rc != RMQS_OK) {
        log_warn(MOD, "shared limit buckets unavailable; decided here alone",
                 "error=%s", rmqs_rc_name(rc));
        if (!c.decided)
            decide(d, items, n, held, n_held, now);
    }
    free(jobs);
    free(refs);
    free(sb);
}

/* ------------------------------------------------------------------------ */
/* Claiming                                                                 */

/*
 * Claim what falls due before now + lookahead, as far as `ahead` has room.
 * Returns how many were claimed, or -1 on a store error (logged).
 */
static long feed(disp_t *d, size_t room, bool *more)
{
    job_t *jobs = NULL;
    dueq_item **items = NULL, **held = NULL;
    size_t n = 0, k = 0, n_ahead = 0, n_held = 0;
    int64_t now = disp_now(d);
    rmqs_rc rc;

    *more = false;
    rc = store_claim_ahead(d->st, now + d->opt.lookahead_ms, now, room, &jobs,
                           &n);
    if (rc != RMQS_OK) {
        /* retried every CLAIM_RETRY_MS: said once a second at most */
        int64_t mono = tu_mono_ms();
        d->claim_failures++;
        if (mono - d->claim_failed_logged >= 1000) {
            log_error(MOD, "cannot claim due jobs",
                      "error=%s failures=%" PRId64, rmqs_rc_name(rc),
                      d->claim_failures);
            d->claim_failed_logged = mono;
            d->claim_failures = 0;
        }
        return -1;
    }
    if (n == 0)
        return 0;
    *more = n == room;
    items = calloc(n, sizeof(*items));
    held = calloc(n, sizeof(*held));
    for (k = 0; items != NULL && held != NULL && k < n; k++) {
        items[k] = dueq_item_new(&jobs[k]); /* moves the job's allocations */
        if (items[k] == NULL)
            break;
    }
    /* The limits' verdicts before the lock: the publisher waits for it. */
    n_ahead = k;
    if (k > 0 && flow_limit_count(d->flow) > 0)
        apply_limits(d, items, &n_ahead, held, &n_held, now);
    /* One critical section from the room for the claims to the merge: the
     * recorder takes the claims array whenever it holds d->w.mu. */
    pthread_mutex_lock(&d->w.mu);
    if (k > 0 && !claims_reserve_locked(d, k)) {
        for (size_t i = 0; i < n_ahead; i++) { /* the jobs go back below */
            jobs[i] = items[i]->job;
            free(items[i]);
        }
        for (size_t i = 0; i < n_held; i++) {
            jobs[n_ahead + i] = held[i]->job;
            free(held[i]);
        }
        k = n_ahead = n_held = 0;
    }
    /* The claims first: the recorder writes each before its outcome. */
    for (size_t i = 0; i < n_ahead; i++)
        memcpy(d->claims[d->claims_n++], items[i]->job.id, JOB_ID_LEN + 1);
    for (size_t i = 0; i < n_held; i++) {
        memcpy(d->claims[d->claims_n++], held[i]->job.id, JOB_ID_LEN + 1);
        (void)dueq_done_push(d->q, held[i], now); /* pending again, held */
    }
    /* A later claim can hold jobs due before the last ones of an earlier
     * claim (a job scheduled at short notice): dueq_merge keeps due order.
     * It fits (the claim was bounded by the room); at stop the publisher
     * has handed back `ahead` already. */
    if (n_ahead > 0 &&
        (d->w.stop || dueq_merge(d->q, items, n_ahead) != RMQS_OK)) {
        for (size_t i = 0; i < n_ahead; i++)
            (void)dueq_release(d->q, items[i], now);
    }
    if (k > 0)
        pthread_cond_signal(&d->rec_cv);
    pthread_mutex_unlock(&d->w.mu);
    if (k < n) { /* out of memory: give the rest back untouched */
        store_outcome o;
        for (size_t i = k; i < n; i++) {
            o = (store_outcome){.id = jobs[i].id, .kind = STORE_OUT_RELEASE};
            store_settle(d->st, &o, 1, now);
            job_clear(&jobs[i]);
        }
        log_error(MOD, "out of memory; jobs released", "n=%zu", n - k);
        n = k;
    }
    if (n_ahead > 0)
        wake_publisher(d);
    free(items);
    free(held);
    free(jobs);
    return (long)n;
}

void *disp_feeder_main(void *arg)
{
    disp_t *d = arg;
    int64_t claim_retry_at = INT64_MIN; /* after a store error */

    for (;;) {
        size_t room;
        bool claim, more = false, any = false;
        int64_t now = disp_now(d), next = INT64_MAX, wait;

        read_limits(d, now); /* when changed, else once a second */
        pthread_mutex_lock(&d->w.mu);
        if (d->w.stop) {
            d->feeder_done = true;
            pthread_cond_signal(&d->rec_cv);
            pthread_mutex_unlock(&d->w.mu);
            break;
        }
        room = dueq_room(d->q);
        if (room > (size_t)d->opt.batch_size)
            room = (size_t)d->opt.batch_size; /* one claim's worth */
        claim = d->can_claim && room > 0 && now >= claim_retry_at &&
                (d->kicked || now >= d->next_claim_at);
        if (claim) {
            d->kicked = false;
            d->notified_due = INT64_MAX; /* this claim covers those */
        }
        pthread_mutex_unlock(&d->w.mu);

        if (claim) {
            long got = feed(d, room, &more);
            if (got < 0)
                claim_retry_at = disp_now(d) + CLAIM_RETRY_MS; /* no spinning */
            else if (!more && store_next_due(d->st, &any, &next) != RMQS_OK)
                any = false;
            pthread_mutex_lock(&d->w.mu);
            if (more) {
                d->next_claim_at = INT64_MIN; /* as soon as there is room */
            } else {
                /* Claim again lookahead before the next due job, but not
                 * sooner than a quarter of the lookahead from now: each
                 * claim then takes a bunch, still well ahead of time. */
                int64_t at = any ? next - d->opt.lookahead_ms : INT64_MAX;
                int64_t soonest = disp_now(d) + d->opt.lookahead_ms / 4;
                int64_t latest = disp_now(d) + DISP_REPLAN_MS;
                if (at > latest && store_has_peers(d->st))
                    at = latest; /* see what others stored unannounced */
                if (at < soonest)
                    at = soonest;
                if (d->notified_due != INT64_MAX &&
                    d->notified_due - d->opt.lookahead_ms < at)
                    at = d->notified_due - d->opt.lookahead_ms;
                d->next_claim_at = at;
            }
            pthread_mutex_unlock(&d->w.mu);
            continue; /* look at the plan again */
        }

        pthread_mutex_lock(&d->w.mu);
        now = disp_now(d);
        claim = !d->w.stop && d->can_claim && dueq_room(d->q) > 0 &&
                now >= claim_retry_at;
        if (!d->w.stop && !(claim && (d->kicked || now >= d->next_claim_at))) {
            wait = IDLE_CAP_MS;
            if (claim && d->next_claim_at < now + wait)
                wait = d->next_claim_at - now; /* > 0: checked above */
            else if (!claim && claim_retry_at > now &&
                     claim_retry_at < now + wait)
                wait = claim_retry_at - now;
            if (wait > 0)
                (void)worker_cond_wait_ms(&d->w.cv, &d->w.mu, wait);
        }
        pthread_mutex_unlock(&d->w.mu);
    }
    return NULL;
}
