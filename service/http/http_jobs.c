/*
 * http_jobs.c - the job endpoints of the HTTP contract (api/openapi.yaml):
 * POST /schedule and /schedule/batch, GET /jobs, GET/PATCH/DELETE
 * /jobs/{id}, POST /jobs/{id}/run and /jobs/{id}/retry.
 *
 * Why a room of its own: http_api.c is the transport (the daemon, bodies,
 * limits, authentication, routing), http_reply.c how an answer is made;
 * this file is what the API does with jobs. Requests are validated by
 * job.c, new jobs go to the group-commit writer (the connection is
 * suspended until the commit, after admission by the writer), reads and
 * changes of existing jobs go to the store directly, and every job in an
 * answer is written by job_json.c. POST /schedule and /schedule/batch
 * honour "Prefer: return=minimal" (RFC 7240, http_prefer.c) with only each
 * job's id, status and deliver_at, a quarter of the bytes of a batch
 * answer.
 */
#include "http_handlers.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_filter.h"
#include "http_prefer.h"
#include "log.h"
#include "timeutil.h"
#include "writer.h"

#define MOD "http"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000
#define IDEM_KEY_MAX 200
#define BATCH_MAX 1000      /* jobs per POST /schedule/batch */
#define BATCH_ERRORS_MAX 50 /* per-item errors listed in a 400 */

/* A search handed to the search pool (see http_jobs_list). */
struct http_search {
    http_api_t *api;
    http_req *rq;
    bool count;
    bool refused;        /* the pool's queue was full: 503 */
    store_filter filter; /* its strings point into the request's query
                              arguments, which outlive the search */
    size_t limit;
    const char *after;
    int64_t cap;
    rmqs_rc rc; /* the outcome, and what it found */
    job_t *jobs;
    size_t n;
    char *next;
    int64_t counted;
    bool capped;
};

void http_jobs_release(http_req *rq)
{
    if (rq->search != NULL) {
        for (size_t i = 0; i < rq->search->n; i++)
            job_clear(&rq->search->jobs[i]);
        free(rq->search->jobs);
        free(rq->search->next);
        free(rq->search);
        rq->search = NULL;
    }
    /* item_keys, existed and existing have njobs entries */
    for (size_t i = 0; rq->existing != NULL && i < rq->njobs; i++)
        job_clear(&rq->existing[i]);
    free(rq->existing);
    rq->existing = NULL;
    free(rq->existed);
    rq->existed = NULL;
    for (size_t i = 0; rq->item_keys != NULL && i < rq->njobs; i++) {
        free(rq->item_keys[i]);
        free(rq->item_canon[i]);
    }
    free(rq->item_keys);
    free(rq->item_canon);
    rq->item_keys = rq->item_canon = NULL;
    for (size_t i = 0; i < rq->njobs; i++)
        job_clear(&rq->jobs[i]);
    free(rq->jobs);
    rq->jobs = NULL;
    rq->njobs = 0;
    free(rq->canonical);
    rq->canonical = NULL;
    free(rq->idem_key);
    rq->idem_key = NULL;
}


/* One job; flags as job_write_json (JOB_WRITE_MINIMAL is announced). */
static enum MHD_Result reply_job(struct MHD_Connection *c, unsigned status,
                                 const job_t *job, bool location,
                                 unsigned flags)
{
    job_buf b = {0};

    job_write_json(&b, job, flags);
    return http_reply_buf(c, status, &b, location ? job->id : NULL,
                          (flags & JOB_WRITE_MINIMAL) != 0);
}

/* 403 for job index of a batch (index >= 0) or of a single request. */
static enum MHD_Result reply_forbidden_exchange(struct MHD_Connection *c,
                                                const char *name, long index)
{
    char field[64];

    if (index >= 0)
        snprintf(field, sizeof(field), "jobs[%ld].exchange", index);
    else
        snprintf(field, sizeof(field), "exchange");
    return http_reply_forbidden_exchange(c, field, name);
}

/* The writer has stopped (shutdown): the request is refused whole. */
static enum MHD_Result reply_stopping(struct MHD_Connection *c)
{
    return http_reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable",
                            NULL,
                            "the service is stopping; nothing was stored");
}

/* Writer thread: the insert is committed (or failed); wake the request. */
static void on_written(writer_req *wr, void *cls)
{
    http_req *rq = cls;
    rq->state = RQ_WRITTEN;
    MHD_resume_connection(rq->conn); /* thread-safe; handler runs again */
}

/* Writer side: the request waiting for admission may go on. */
static void on_admitted(void *cls)
{
    http_req *rq = cls;
    MHD_resume_connection(rq->conn); /* the handler runs route() again */
}

/*
 * Admission before parsing (writer.h): whether rq may be parsed and handed
 * to the writer now. If not, the connection is suspended until the writer
 * has room; route() runs again then. Parsed jobs waiting for the writer are
 * what a flood of batch clients would otherwise grow memory with.
 */
bool http_jobs_admit(http_api_t *api, struct MHD_Connection *c, http_req *rq)
{
    size_t bytes = rq->len > 0 ? rq->len : 1;

    if (rq->admitted > 0)
        return true;
    if (rq->waiter.granted) {
        rq->admitted = rq->waiter.bytes;
        return true;
    }
    if (writer_admit(api->writer, bytes, NULL)) { /* the usual case */
        rq->admitted = bytes;
        return true;
    }
    rq->waiter = (writer_waiter){.wake = on_admitted, .cls = rq};
    /* Suspend first: the wake may come at once from another thread. */
    MHD_suspend_connection(c);
    if (writer_admit(api->writer, bytes, &rq->waiter)) { /* room meanwhile */
        rq->admitted = bytes;
        MHD_resume_connection(c);
    }
    return false;
}

/* Suspend the connection and hand rq's jobs to the writer. The keys go as
 * arrays of njobs (store_types.h): a batch's items' own, or the
 * Idempotency-Key header of a single job as an array of one. */
enum MHD_Result http_jobs_submit(http_api_t *api, struct MHD_Connection *c,
                                 http_req *rq)
{
    const char *const *keys = NULL, *const *reqs = NULL;

    if (rq->item_keys != NULL) {
        keys = (const char *const *)rq->item_keys;
        reqs = (const char *const *)rq->item_canon;
    } else if (rq->idem_key != NULL) {
        keys = (const char *const *)&rq->idem_key;
        reqs = (const char *const *)&rq->canonical;
    }
    if (keys != NULL) {
        rq->existed = calloc(rq->njobs, sizeof(*rq->existed));
        rq->existing = calloc(rq->njobs, sizeof(*rq->existing));
        if (rq->existed == NULL || rq->existing == NULL)
            return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    }
    rq->wr = (writer_req){.ins = {.jobs = rq->jobs,
                                  .n = rq->njobs,
                                  .idem_keys = keys,
                                  .idem_requests = reqs,
                                  .existed = rq->existed,
                                  .existing = rq->existing},
                          .done = on_written,
                          .cls = rq};
    rq->state = RQ_WAITING;
    /* Suspend first: resuming a connection not yet suspended is undefined. */
    MHD_suspend_connection(c);
    if (writer_submit(api->writer, &rq->wr) != RMQS_OK) {
        rq->wr.ins.rc = RMQS_ESYS;
        rq->writer_gone = true;
        rq->state = RQ_WRITTEN;
        MHD_resume_connection(c);
    }
    return MHD_YES;
}

/* A batch whose item i's idempotency_key was used before with another
 * request: nothing of it was stored. */
static enum MHD_Result reply_item_conflict(struct MHD_Connection *c, size_t i)
{
    char field[64], msg[160];

    snprintf(field, sizeof(field), "jobs[%zu].idempotency_key", i);
    snprintf(msg, sizeof(msg),
             "jobs[%zu].idempotency_key was used before with a different "
             "request; none was stored",
             i);
    return http_reply_error(c, MHD_HTTP_CONFLICT, "conflict", field, msg);
}

enum MHD_Result http_jobs_written(http_api_t *api, struct MHD_Connection *c,
                                  http_req *rq)
{
    const store_insert_req *ins = &rq->wr.ins;
    unsigned minimal = rq->minimal ? JOB_WRITE_MINIMAL : 0;
    unsigned own = JOB_WRITE_OWN_BODY;
    job_buf b = {0};

    if (ins->rc == RMQS_ECONFLICT && rq->item_keys != NULL &&
        ins->failed_index < rq->njobs &&
        rq->item_keys[ins->failed_index] != NULL)
        return reply_item_conflict(c, ins->failed_index);
    if (ins->rc == RMQS_ECONFLICT && !rq->batch && rq->idem_key != NULL)
        return http_reply_error(
            c, MHD_HTTP_CONFLICT, "conflict", "Idempotency-Key",
            "Idempotency-Key was used before with a different "
            "request");
    if (rq->writer_gone)
        return reply_stopping(c);
    if (ins->rc != RMQS_OK) {
        if (ins->rc != RMQS_EINVAL && ins->rc != RMQS_ECONFLICT &&
            ins->rc != RMQS_EFULL) /* the writer logs those */
            log_error(MOD, "cannot store job", "jobs=%zu error=%s", rq->njobs,
                      rmqs_rc_name(ins->rc));
        return http_reply_rc(c, ins->rc == RMQS_ECONFLICT ? RMQS_EDB : ins->rc,
                             NULL, "cannot store the job");
    }
    if (!rq->batch && ins->nexisted == 1) /* stored by an earlier request */
        return reply_job(c, MHD_HTTP_OK, &rq->existing[0], true, minimal);
    /* These jobs were validated here, so their JSON bodies are jansson's
     * compact text already (JOB_WRITE_OWN_BODY). */
    if (!rq->batch) {
        log_debug(MOD, "scheduled", "job_id=%s exchange=\"%s\" deliver_at=%lld",
                  rq->jobs[0].id, rq->jobs[0].exchange,
                  (long long)rq->jobs[0].deliver_at);
        return reply_job(c, MHD_HTTP_CREATED, &rq->jobs[0], true,
                         minimal | JOB_WRITE_OWN_BODY);
    }
    /* A batch's items stored by an earlier request are answered, in their
     * places, with the jobs stored then (read back: their bodies are
     * written again, not copied). */
    for (size_t i = 0; ins->nexisted > 0 && i < rq->njobs; i++) {
        if (rq->existed[i]) {
            job_clear(&rq->jobs[i]);
            rq->jobs[i] = rq->existing[i];
            memset(&rq->existing[i], 0, sizeof(rq->existing[i]));
            rq->existed[i] = false;
            own = 0;
        }
    }
    job_write_batch(&b, rq->jobs, rq->njobs, minimal | own);
    log_debug(MOD, "scheduled batch", "jobs=%zu existed=%zu", rq->njobs,
              ins->nexisted);
    return http_reply_buf(
        c, ins->nexisted == rq->njobs ? MHD_HTTP_OK : MHD_HTTP_CREATED, &b,
        NULL, rq->minimal);
}

/* Prefer header lines are read in order until one has a return=. */
static enum MHD_Result prefer_visit(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value)
{
    http_prefer_return *ret = cls;

    if (strcasecmp(key, "Prefer") != 0)
        return MHD_YES;
    *ret = http_prefer_return_of(value);
    return *ret == HTTP_RETURN_UNSET ? MHD_YES : MHD_NO;
}

/* Whether the client asked for Prefer: return=minimal (RFC 7240). */
static bool prefers_minimal(struct MHD_Connection *c)
{
    http_prefer_return ret = HTTP_RETURN_UNSET;

    MHD_get_connection_values(c, MHD_HEADER_KIND, prefer_visit, &ret);
    return ret == HTTP_RETURN_MINIMAL;
}

/* An idempotency key, the header's or a batch item's: 1 to IDEM_KEY_MAX
 * printable ASCII characters without spaces. */
static bool idem_key_valid(const char *key)
{
    size_t kl = strlen(key);
    bool ok = kl >= 1 && kl <= IDEM_KEY_MAX;

    for (size_t i = 0; ok && i < kl; i++)
        ok = key[i] > 0x20 && key[i] < 0x7f;
    return ok;
}

/*
 * A batch item's idempotency_key (item i of root): checked, kept in
 * rq->item_keys[i] and taken out of the item, so that the item is
 * validated as a POST /schedule body and its canonical request (the one
 * compared when the key comes again) is the job's alone: a retry of the
 * same item matches, and so does the same body sent to POST /schedule
 * with the key as its header (one namespace of keys). RMQS_EINVAL with
 * err filled for a bad key, or one an earlier item has: seen maps each key
 * taken so far to its index + 1 (a hash, not a scan of the earlier items:
 * a batch of 1000 keys would compare half a million pairs).
 */
static rmqs_rc item_key(http_req *rq, json_t *item, size_t i, size_t n,
                        GHashTable *seen, rmqs_error *err)
{
    size_t earlier;
    json_t *v =
        json_is_object(item) ? json_object_get(item, "idempotency_key") : NULL;
    const char *key;

    if (v == NULL)
        return RMQS_OK;
    key = json_string_value(v);
    if (key == NULL || !idem_key_valid(key))
        return rmqs_fail(err, RMQS_EINVAL, "idempotency_key",
                         "idempotency_key: 1 to 200 printable ASCII "
                         "characters without spaces");
    earlier = GPOINTER_TO_SIZE(g_hash_table_lookup(seen, key));
    if (earlier > 0)
        return rmqs_fail(err, RMQS_EINVAL, "idempotency_key",
                         "idempotency_key: the same as jobs[%zu]'s; "
                         "each item needs its own key",
                         earlier - 1);
    if (rq->item_keys == NULL) {
        rq->item_keys = calloc(n, sizeof(*rq->item_keys));
        rq->item_canon = calloc(n, sizeof(*rq->item_canon));
        if (rq->item_keys == NULL || rq->item_canon == NULL) {
            free(rq->item_keys);
            free(rq->item_canon);
            rq->item_keys = rq->item_canon = NULL;
            return RMQS_ENOMEM;
        }
    }
    rq->item_keys[i] = strdup(key);
    if (rq->item_keys[i] == NULL)
        return RMQS_ENOMEM;
    g_hash_table_insert(seen, rq->item_keys[i], GSIZE_TO_POINTER(i + 1));
    json_object_del(item, "idempotency_key");
    return RMQS_OK;
}

bool http_jobs_idem_key(struct MHD_Connection *c, http_req *rq,
                        enum MHD_Result *ret)
{
    const char *key =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");

    if (key == NULL)
        return false;
    if (!idem_key_valid(key)) {
        *ret = http_reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument",
                                "Idempotency-Key",
                                "Idempotency-Key: 1 to 200 printable ASCII "
                                "characters without spaces");
        return true;
    }
    free(rq->idem_key);
    rq->idem_key = strdup(key);
    if (rq->idem_key == NULL) {
        *ret = http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
        return true;
    }
    return false;
}

static enum MHD_Result h_schedule(http_api_t *api, struct MHD_Connection *c,
                                  http_req *rq)
{
    rmqs_error err = {0};
    enum MHD_Result ret;
    const char *key;
    int64_t now = tu_now_ms();
    rmqs_rc rc;

    if (http_jobs_idem_key(c, rq, &ret))
        return ret;
    key = rq->idem_key;
    rq->minimal = prefers_minimal(c);
    rq->jobs = calloc(1, sizeof(*rq->jobs));
    if (rq->jobs == NULL)
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    rc = job_from_request(rq->body ? rq->body : "", rq->len, &api->opt.limits,
                          now, &rq->jobs[0],
                          key != NULL ? &rq->canonical : NULL, &err);
    if (rc == RMQS_OK) {
        rq->njobs = 1; /* the request's to free from here on */
        rc = pubpol_check_user_id(api->policy, rq->jobs[0].properties, NULL,
                                  &err);
    }
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, &err, "invalid request");
    if (!http_exchange_allowed(api, rq->jobs[0].exchange))
        return reply_forbidden_exchange(c, rq->jobs[0].exchange, -1);
    rc = job_id_generate(now, rq->jobs[0].id);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot generate a job id");
    return http_jobs_submit(api, c, rq);
}

/* POST /schedule/batch: a JSON array of up to BATCH_MAX jobs, stored all or
 * nothing; a 400 lists every invalid item (up to BATCH_ERRORS_MAX). An item
 * may carry its own idempotency_key (item_key): a client batching many
 * callers' calls retries the batch without duplicating any of them. */
static enum MHD_Result h_schedule_batch(http_api_t *api,
                                        struct MHD_Connection *c, http_req *rq)
{
    json_error_t jerr;
    json_t *root = NULL, *errors = NULL;
    GHashTable *keys = NULL; /* the items' idempotency keys (item_key) */
    rmqs_error err = {0};
    enum MHD_Result ret;
    int64_t now = tu_now_ms();
    size_t n, bad = 0;

    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key")) {
        return http_reply_error(
            c, MHD_HTTP_BAD_REQUEST, "invalid_argument", "Idempotency-Key",
            "Idempotency-Key is only supported on POST /schedule; "
            "give each item of a batch its own idempotency_key");
    }
    if (rq->len > 0 && memchr(rq->body, '\0', rq->len) != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, "", "request body contains a NUL byte");
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    root = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES,
                      &jerr);
    if (root == NULL) {
        rmqs_fail(&err, RMQS_EINVAL, "",
                  "invalid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                  jerr.column);
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    n = json_is_array(root) ? json_array_size(root) : 0;
    if (!json_is_array(root) || n == 0 || n > BATCH_MAX) {
        rmqs_fail(&err, RMQS_EINVAL, "",
                  "request body must be a JSON array of "
                  "1 to %d jobs",
                  BATCH_MAX);
        ret = http_reply_rc(c, RMQS_EINVAL, &err, NULL);
        goto out;
    }
    rq->batch = true;
    rq->minimal = prefers_minimal(c);
    rq->jobs = calloc(n, sizeof(*rq->jobs));
    errors = json_array();
    keys = g_hash_table_new(g_str_hash, g_str_equal);
    if (rq->jobs == NULL || errors == NULL) {
        ret = http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
        goto out;
    }
    rq->njobs = n;
    for (size_t i = 0; i < n; i++) {
        json_t *elem = json_array_get(root, i);
        rmqs_rc rc = item_key(rq, elem, i, n, keys, &err);

        if (rc == RMQS_OK)
            rc = job_from_json(
                elem, &api->opt.limits, now, &rq->jobs[i],
                rq->item_keys && rq->item_keys[i] ? &rq->item_canon[i] : NULL,
                &err);
        if (rc == RMQS_OK)
            rc = pubpol_check_user_id(api->policy, rq->jobs[i].properties, NULL,
                                      &err);
        if (rc == RMQS_OK)
            rc = job_id_generate(now, rq->jobs[i].id);
        if (rc == RMQS_EINVAL) {
            if (++bad <= BATCH_ERRORS_MAX) {
                json_t *item =
                    json_pack("{s:I, s:o}", "index", (json_int_t)i, "message",
                              http_safe_string(err.message));
                if (item != NULL && err.field[0] != '\0')
                    json_object_set_new(item, "field",
                                        http_safe_string(err.field));
                json_array_append_new(errors, item);
            }
        } else if (rc != RMQS_OK) {
            ret = http_reply_rc(c, rc, NULL, "cannot read the batch");
            goto out;
        }
    }
    for (size_t i = 0; bad == 0 && i < n; i++) {
        if (!http_exchange_allowed(api, rq->jobs[i].exchange)) {
            ret = reply_forbidden_exchange(c, rq->jobs[i].exchange, (long)i);
            goto out;
        }
    }
    if (bad > 0) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "%zu of %zu jobs are invalid; none was stored", bad, n);
        ret = http_reply_json(c, MHD_HTTP_BAD_REQUEST,
                              json_pack("{s:{s:s, s:s, s:s}, s:o}", "error",
                                        "code", "invalid_argument", "message",
                                        msg, "field", "jobs", "errors", errors),
                              NULL, NULL);
        errors = NULL;
        goto out;
    }
    ret = http_jobs_submit(api, c, rq);
out:
    if (keys != NULL)
        g_hash_table_destroy(keys);
    json_decref(errors);
    json_decref(root);
    return ret;
}

/*
 * GET /jobs and GET /jobs/count: the parameters are checked on the HTTP
 * thread, the search runs on the search pool (taskpool.h: a search may
 * take up to --search-timeout-ms, and an HTTP thread serves many
 * connections in turn), the answer is written once the connection is
 * resumed (http_jobs_searched).
 */

static void run_search(void *arg)
{
    http_search *s = arg;

    if (s->count)
        s->rc = store_count(s->api->st, &s->filter, s->cap, &s->counted,
                            &s->capped);
    else
        s->rc = store_list(s->api->st, &s->filter, s->limit, s->after, &s->jobs,
                           &s->n, &s->next);
    s->rq->state = RQ_SEARCHED;
    MHD_resume_connection(s->rq->conn); /* thread-safe; handler runs again */
}

static enum MHD_Result search_submit(http_api_t *api, struct MHD_Connection *c,
                                     http_req *rq)
{
    rq->state = RQ_SEARCHING;
    /* Suspend first: resuming a connection not yet suspended is undefined. */
    MHD_suspend_connection(c);
    if (!taskpool_submit(api->searches, run_search, rq->search)) {
        rq->search->refused = true;
        rq->state = RQ_SEARCHED;
        MHD_resume_connection(c);
    }
    return MHD_YES;
}

static http_search *search_new(http_api_t *api, http_req *rq, bool count)
{
    http_search *s = calloc(1, sizeof(*s));

    if (s != NULL) {
        s->api = api;
        s->rq = rq;
        s->count = count;
        rq->search = s;
    }
    return s;
}

#define COUNT_MAX_LIMIT 10000000

/* GET /jobs?order=: due (the default), -due, created, -created. */
static bool parse_order(const char *v, store_order *out)
{
    static const struct {
        const char *name;
        store_order order;
    } orders[] = {{"due", STORE_ORDER_DUE},
                  {"-due", STORE_ORDER_DUE_DESC},
                  {"created", STORE_ORDER_CREATED},
                  {"-created", STORE_ORDER_CREATED_DESC}};

    *out = STORE_ORDER_DUE;
    if (v == NULL)
        return true;
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        if (strcmp(v, orders[i].name) == 0) {
            *out = orders[i].order;
            return true;
        }
    }
    return false;
}

/* GET /jobs (count false; limit: the page's size) or GET /jobs/count
 * (count true; max: where counting stops): the query checked, the search
 * handed to the pool. */
static enum MHD_Result search_start(http_api_t *api, struct MHD_Connection *c,
                                    http_req *rq, bool count)
{
    static const char *const list_allowed[] = {"limit", "after", "order", NULL};
    static const char *const count_allowed[] = {"max", "order", NULL};
    const char *unknown =
        http_query_unknown_filter(c, count ? count_allowed : list_allowed);
    const char *key = count ? "max" : "limit";
    int64_t hi = count ? COUNT_MAX_LIMIT : LIST_LIMIT_MAX;
    int64_t v = count ? STORE_COUNT_CAP_DEFAULT : LIST_LIMIT_DEFAULT;
    rmqs_error err = {0};
    http_search *s;

    if (unknown != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, unknown, "unknown query parameter");
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    if (!http_query_int(c, key, 1, hi, &v)) {
        rmqs_fail(&err, RMQS_EINVAL, key, "%s: an integer from 1 to %lld", key,
                  (long long)hi);
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    s = search_new(api, rq, count);
    if (s == NULL)
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    if (http_filter_from_query(c, &s->filter, &err) != RMQS_OK)
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    /* a count takes the list's order too (and ignores it), so a page can
     * pass one query string to both */
    if (!parse_order(
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order"),
            &s->filter.order)) {
        rmqs_fail(&err, RMQS_EINVAL, "order",
                  "order: due, -due, created or -created");
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    if (count) {
        s->cap = v;
    } else {
        s->limit = (size_t)v;
        s->after =
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
    }
    return search_submit(api, c, rq);
}

enum MHD_Result http_jobs_list(http_api_t *api, struct MHD_Connection *c,
                               http_req *rq)
{
    return search_start(api, c, rq, false);
}

enum MHD_Result http_jobs_count(http_api_t *api, struct MHD_Connection *c,
                                http_req *rq)
{
    return search_start(api, c, rq, true);
}

enum MHD_Result http_jobs_searched(http_api_t *api, struct MHD_Connection *c,
                                   http_req *rq)
{
    http_search *s = rq->search;
    rmqs_error err = {0};
    job_buf b = {0};

    (void)api;
    if (s->refused)
        return http_reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                                "search_timeout", NULL,
                                "too many searches are running or "
                                "waiting: try again in a moment, or narrow "
                                "the search");
    if (s->count) {
        if (s->rc != RMQS_OK)
            return http_reply_rc(c, s->rc, NULL, "cannot count jobs");
        return http_reply_json(c, MHD_HTTP_OK,
                               json_pack("{sIsb}", "count",
                                         (json_int_t)s->counted, "capped",
                                         s->capped),
                               NULL, NULL);
    }
    if (s->rc == RMQS_EINVAL) {
        rmqs_fail(&err, RMQS_EINVAL, "after",
                  "after: not a cursor from this API for this order");
        return http_reply_rc(c, s->rc, &err, NULL);
    }
    if (s->rc != RMQS_OK)
        return http_reply_rc(c, s->rc, NULL, "cannot list jobs");
    job_write_page(&b, s->jobs, s->n, s->next);
    return http_reply_buf(c, MHD_HTTP_OK, &b, NULL, false);
}

enum MHD_Result http_jobs_one(http_api_t *api, struct MHD_Connection *c,
                              const char *method, const char *id, http_req *rq)
{
    job_t job = {0};
    rmqs_error err = {0};
    enum MHD_Result ret;
    rmqs_rc rc;

    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        rc = store_get(api->st, id, &job);
        ret = rc == RMQS_OK
                  ? reply_job(c, MHD_HTTP_OK, &job, false, JOB_WRITE_ATTEMPTS)
                  : http_reply_rc(c, rc, NULL, "cannot read the job");
    } else if (strcmp(method, "DELETE") == 0) {
        store_change cancel = {.kind = STORE_CHANGE_CANCEL};
        int64_t now = tu_now_ms();
        /* on a conflict the store returns the job as it is */
        rc = store_update(api->st, id, &cancel, now, &job);
        if (rc == RMQS_ECONFLICT) {
            rmqs_fail(&err, rc, NULL,
                      "the job is %s and can no longer be cancelled",
                      job.id[0] ? job_status_name(job.status) : "not pending");
        } else if (rc == RMQS_OK && job.updated_at == now) {
            /* (a job cancelled before keeps its earlier updated_at) */
            metrics_jobs_cancelled(1);
            log_info(MOD, "cancelled", "job_id=%s", job.id);
        }
        ret = rc == RMQS_OK
                  ? reply_job(c, MHD_HTTP_OK, &job, false, 0)
                  : http_reply_rc(c, rc, &err, "cannot cancel the job");
    } else if (strcmp(method, "PATCH") == 0) {
        int64_t now = tu_now_ms(), deliver_at, delay_ms;
        if (!http_is_json_content(c)) {
            ret = http_reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                   "unsupported_media_type", NULL,
                                   "Content-Type must be application/json");
            goto out;
        }
        rc = job_parse_reschedule(rq->body ? rq->body : "", rq->len,
                                  &api->opt.limits, now, &deliver_at, &delay_ms,
                                  &err);
        if (rc == RMQS_OK) {
            store_change to = {.kind = STORE_CHANGE_RESCHEDULE,
                               .deliver_at = deliver_at,
                               .delay_ms = delay_ms};
            /* on a conflict the store returns the job as it is */
            rc = store_update(api->st, id, &to, now, &job);
        }
        if (rc == RMQS_ECONFLICT) {
            rmqs_fail(&err, rc, NULL,
                      "the job is %s and can no longer be rescheduled",
                      job.id[0] ? job_status_name(job.status) : "not pending");
        }
        if (rc == RMQS_OK) {
            log_info(MOD, "rescheduled", "job_id=%s deliver_at=%lld", job.id,
                     (long long)job.deliver_at);
            disp_notify(api->disp, job.due_at);
        }
        ret = rc == RMQS_OK
                  ? reply_job(c, MHD_HTTP_OK, &job, false, 0)
                  : http_reply_rc(c, rc, &err, "cannot reschedule the job");
    } else {
        ret = http_reply_error_h(
            c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", NULL,
            "method not allowed", MHD_HTTP_HEADER_ALLOW, "GET, PATCH, DELETE");
    }
out:
    job_clear(&job);
    return ret;
}

enum MHD_Result http_jobs_action(http_api_t *api, struct MHD_Connection *c,
                                 const char *method, const char *id,
                                 const char *action, http_req *rq)
{
    bool retry = strcmp(action, "retry") == 0;
    store_change ch = {.kind = retry ? STORE_CHANGE_RETRY : STORE_CHANGE_RUN};
    int64_t now = tu_now_ms();
    job_t job = {0};
    rmqs_error err = {0};
    enum MHD_Result ret;
    rmqs_rc rc = RMQS_OK;

    if (strcmp(method, "POST") != 0)
        return http_reply_error_h(
            c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", NULL,
            "method not allowed", MHD_HTTP_HEADER_ALLOW, "POST");
    if (retry && rq->len > 0 && !http_is_json_content(c))
        return http_reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                "unsupported_media_type", NULL,
                                "Content-Type must be application/json");
    if (retry)
        rc =
            job_parse_retry(rq->body ? rq->body : "", rq->len, &api->opt.limits,
                            now, &ch.deliver_at, &ch.delay_ms, &err);
    if (rc == RMQS_OK && pubpol_has_list(api->policy)) {
        /* A job stored before --allow-exchanges closed its exchange is
         * not sent off again (the publisher would fail it anyway). */
        rc = store_get(api->st, id, &job);
        if (rc == RMQS_OK && !http_exchange_allowed(api, job.exchange)) {
            ret = reply_forbidden_exchange(c, job.exchange, -1);
            job_clear(&job);
            return ret;
        }
        job_clear(&job);
        if (rc == RMQS_ENOTFOUND)
            rc = RMQS_OK; /* the update says so, as without a list */
    }
    if (rc == RMQS_OK) /* on a conflict the store returns the job as it is */
        rc = store_update(api->st, id, &ch, now, &job);
    if (rc == RMQS_ECONFLICT)
        rmqs_fail(&err, rc, NULL, "the job is %s; only a %s job can be %s",
                  job.id[0] ? job_status_name(job.status) : "changing",
                  retry ? "failed" : "pending", retry ? "retried" : "run now");
    if (rc == RMQS_OK) {
        if (retry)
            log_info(MOD, "retried", "job_id=%s deliver_at=%lld", job.id,
                     (long long)job.deliver_at);
        else
            log_info(MOD, "run now", "job_id=%s", job.id);
        disp_notify(api->disp, job.due_at);
    }
    ret = rc == RMQS_OK ? reply_job(c, MHD_HTTP_OK, &job, false, 0)
                        : http_reply_rc(c, rc, &err,
                                        retry ? "cannot retry the job"
                                              : "cannot run the job");
    job_clear(&job);
    return ret;
}

enum MHD_Result http_jobs_schedule(http_api_t *api, struct MHD_Connection *c,
                                   http_req *rq, bool batch)
{
    if (!http_is_json_content(c))
        return http_reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                "unsupported_media_type", NULL,
                                "Content-Type must be application/json");
    if (!http_jobs_admit(api, c, rq))
        return MHD_YES; /* suspended until the writer has room */
    /* Let in by the stop: answered now, not parsed first - at a SIGTERM
     * with many waiting, parsing them all delayed the answers past the
     * stop's drain, and their connections closed unanswered (CI, ASan). */
    if (rq->waiter.stopping)
        return reply_stopping(c);
    return batch ? h_schedule_batch(api, c, rq) : h_schedule(api, c, rq);
}
