/*
 * http_api.c - the HTTP contract (api/openapi.yaml) on libmicrohttpd.
 *
 * Why a module of its own: routing, body limits, content negotiation and the
 * mapping from rmqs_rc to HTTP status live in one place, so every endpoint
 * answers errors the same way: {"error": {"code", "message", "field"}}.
 *
 * libmicrohttpd calls the access handler several times per request: first
 * with no body (we allocate a request context), then with body chunks
 * (appended, or counted and dropped past the limit), then once more with no
 * data, when the request is routed and answered. The context is freed in
 * the request-completed callback.
 *
 * A body over --max-body-bytes is answered 413 only once it has been read
 * (and dropped, never buffered). libmicrohttpd 0.9.75 closes the connection
 * after an answer queued before the body, with the unread body still in
 * the socket, and the kernel then resets the connection: a client still
 * writing its body got EPIPE or a reset instead of the 413. Reading is
 * bounded: at most DISCARD_MAX bytes past the limit, and for at most the
 * connection timeout after the refusal; past either the connection is
 * closed without an answer. Two cases are answered at once, without
 * reading: an announced Content-Length past that bound, and "Expect:
 * 100-continue" (the client waits for our word before it sends the body,
 * and the 413 is that word).
 *
 * A job is answered as JSON written straight into one buffer
 * (job_write_json), not as a jansson tree; POST /schedule and
 * /schedule/batch honour "Prefer: return=minimal" (RFC 7240) with only each
 * job's id, status and deliver_at, a quarter of the bytes of a batch answer.
 */
#include "http_api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <strings.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "netaddr.h"
#include "metrics.h"
#include "timeutil.h"
#include "writer.h"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000
#define IDEM_KEY_MAX 200
#define BATCH_MAX 1000      /* jobs per POST /schedule/batch */
#define BATCH_ERRORS_MAX 50 /* per-item errors listed in a 400 */
/* Past the body limit, bytes are read and dropped so the client gets its
 * 413; past this many more, the connection is closed instead. */
#define DISCARD_MAX ((size_t)64 << 20)

struct http_api {
    struct MHD_Daemon *daemon;
    store_t *st;       /* borrowed */
    disp_t *disp;      /* borrowed */
    writer_t *writer;  /* borrowed */
    http_api_options opt;
    atomic_long inflight; /* requests begun and not yet completed */
    char *token;          /* owned copy of opt.api_token, or NULL */
    char **allow;         /* owned NULL-terminated list, or NULL: any */
    char *tls_cert, *tls_key; /* owned PEM contents, or NULL */
    MHD_socket quiesced_fd;   /* from MHD_quiesce_daemon: closed only after
                                 MHD_stop_daemon, as the library requires */
};

/* The status of the response this thread queued last (for metrics). */
static __thread unsigned tl_status;

typedef enum rq_state {
    RQ_READING, /* headers and body arriving */
    RQ_WAITING, /* suspended: the writer holds wr */
    RQ_WRITTEN  /* resumed: wr.ins holds the outcome */
} rq_state;

/* Per-request state, owned by libmicrohttpd's *con_cls slot. */
typedef struct http_req {
    struct MHD_Connection *conn;
    char *body;        /* accumulated body (NUL-terminated), owned */
    size_t len, cap;
    bool too_large;    /* the body passed max_body_bytes: answer 413 */
    bool unauthorized; /* no valid token: drop the body, answer 401 */
    size_t dropped;    /* body bytes dropped since then */
    int64_t refused_us; /* monotonic, when too_large was set */
    rq_state state;
    bool batch;        /* POST /schedule/batch */
    bool minimal;      /* Prefer: return=minimal (POST /schedule[/batch]) */
    writer_req wr;     /* the insert handed to the writer */
    writer_waiter waiter; /* queued for admission (see writer.h) */
    size_t admitted;   /* body bytes admitted by the writer; given back
                          when the request completes */
    job_t *jobs;       /* owned; what wr.ins.jobs points to */
    size_t njobs;
    char *canonical;   /* owned; the Idempotency-Key fingerprint */
    char *idem_key;    /* owned copy of the header */
    metrics_route route;
    unsigned status;   /* of the response queued, 0 until then */
    int64_t start_us;  /* monotonic, when the headers arrived */
} http_req;

static void rq_free_jobs(http_req *rq)
{
    for (size_t i = 0; i < rq->njobs; i++)
        job_clear(&rq->jobs[i]);
    free(rq->jobs);
    rq->jobs = NULL;
    rq->njobs = 0;
    job_clear(&rq->wr.ins.existing);
    free(rq->canonical);
    rq->canonical = NULL;
    free(rq->idem_key);
    rq->idem_key = NULL;
}

/* ---- responses --------------------------------------------------------- */

/* Queue resp_json (stolen) with status; extra header pairs may follow. */
static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status,
                                  json_t *resp_json, const char *h1,
                                  const char *v1)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    char *text = NULL;

    if (resp_json != NULL)
        text = json_dumps(resp_json, JSON_COMPACT);
    json_decref(resp_json);
    if (text == NULL) {
        static const char oom[] =
            "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r = MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom,
                                            MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(strlen(text), text,
                                            MHD_RESPMEM_MUST_FREE);
    }
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (h1 != NULL)
        MHD_add_response_header(r, h1, v1);
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        tl_status = status;
    return ret;
}

/* A JSON string of s, with bytes that are not valid UTF-8 (e.g. a
 * truncated character quoted in a parser message) replaced by '?'. */
static json_t *safe_string(const char *s)
{
    json_t *v = json_string(s);
    char *copy;

    if (v != NULL)
        return v;
    copy = strdup(s);
    if (copy == NULL)
        return NULL;
    for (char *p = copy; *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    v = json_string(copy);
    free(copy);
    return v;
}

static enum MHD_Result reply_error_h(struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *field,
                                     const char *message, const char *h1,
                                     const char *v1)
{
    json_t *e = json_pack("{s:s, s:o}", "code", code, "message",
                          safe_string(message));
    if (e != NULL && field != NULL && *field != '\0')
        json_object_set_new(e, "field", safe_string(field));
    return reply_json(c, status, e ? json_pack("{s:o}", "error", e) : NULL, h1,
                      v1);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status,
                                   const char *code, const char *field,
                                   const char *message)
{
    return reply_error_h(c, status, code, field, message, NULL, NULL);
}

/* Map a store/validation failure to its documented status and code. */
static enum MHD_Result reply_rc(struct MHD_Connection *c, rmqs_rc rc,
                                const rmqs_error *err, const char *what)
{
    const char *field = err != NULL ? err->field : NULL;
    const char *msg = err != NULL && err->message[0] ? err->message : what;

    switch (rc) {
    case RMQS_EINVAL:
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument", field, msg);
    case RMQS_ENOTFOUND:
        return reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL, "no such job");
    case RMQS_ECONFLICT:
        return reply_error(c, MHD_HTTP_CONFLICT, "conflict", NULL, msg);
    case RMQS_EFULL:
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "storage_full", NULL,
                           "the database is full; nothing was stored");
    case RMQS_EDB:
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable", NULL,
                           "the database is unavailable; nothing was stored");
    default:
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", NULL,
                           "internal error");
    }
}

/* The answer to Prefer: return=minimal says it was honoured (RFC 7240). */
#define PREFERENCE_APPLIED "Preference-Applied"

/*
 * Queue the JSON text in b (taken over: b is left empty) with status, the
 * Location of job_id if not NULL, and Preference-Applied if minimal. A
 * buffer that ran out of memory gives a 500.
 */
static enum MHD_Result reply_buf(struct MHD_Connection *c, unsigned status,
                                 job_buf *b, const char *job_id, bool minimal)
{
    char loc[sizeof("/jobs/") + JOB_ID_LEN];
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (b->oom || b->data == NULL) {
        job_buf_free(b);
        return reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    }
    r = MHD_create_response_from_buffer(b->len, b->data, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        job_buf_free(b);
        return MHD_NO;
    }
    memset(b, 0, sizeof(*b)); /* the response owns the text now */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (job_id != NULL) {
        snprintf(loc, sizeof(loc), "/jobs/%.36s", job_id);
        MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, loc);
    }
    if (minimal)
        MHD_add_response_header(r, PREFERENCE_APPLIED, "return=minimal");
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        tl_status = status;
    return ret;
}

/* One job; flags as job_write_json (JOB_WRITE_MINIMAL is announced). */
static enum MHD_Result reply_job(struct MHD_Connection *c, unsigned status,
                                 const job_t *job, bool location, unsigned flags)
{
    job_buf b = {0};

    job_write_json(&b, job, flags);
    return reply_buf(c, status, &b, location ? job->id : NULL,
                     (flags & JOB_WRITE_MINIMAL) != 0);
}

/* ---- request checks ----------------------------------------------------- */

static bool is_json_content(struct MHD_Connection *c)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t n = strlen("application/json");

    if (ct == NULL)
        return false;
    while (*ct == ' ')
        ct++;
    if (strncasecmp(ct, "application/json", n) != 0)
        return false;
    ct += n;
    while (*ct == ' ')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* Collect query arguments not in allowed[] (first one wins). */
typedef struct query_check {
    const char *const *allowed;
    const char *unknown;
} query_check;

static enum MHD_Result query_visit(void *cls, enum MHD_ValueKind kind,
                                   const char *key, const char *value)
{
    query_check *q = cls;
    for (const char *const *a = q->allowed; *a != NULL; a++)
        if (strcmp(*a, key) == 0)
            return MHD_YES;
    if (q->unknown == NULL)
        q->unknown = key;
    return MHD_YES;
}

static const char *query_unknown(struct MHD_Connection *c,
                                 const char *const *allowed)
{
    query_check q = {allowed, NULL};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_visit, &q);
    return q.unknown;
}

/* Compare in time that depends only on the expected token's length. */
static bool token_matches(const char *given, const char *expected)
{
    size_t gl = strlen(given), el = strlen(expected);
    unsigned char diff = gl != el;

    for (size_t i = 0; i < el; i++)
        diff |= (unsigned char)(expected[i] ^ given[i < gl ? i : 0]);
    return diff == 0;
}

static bool authorized(http_api_t *api, struct MHD_Connection *c)
{
    const char *h;

    if (api->token == NULL)
        return true;
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_AUTHORIZATION);
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    return token_matches(h, api->token);
}

static enum MHD_Result reply_unauthorized(struct MHD_Connection *c)
{
    return reply_error_h(c, MHD_HTTP_UNAUTHORIZED, "unauthorized", NULL,
                         "missing or wrong bearer token (Authorization: "
                         "Bearer <token>)",
                         MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                         "Bearer realm=\"rmq-scheduler\"");
}

static bool exchange_allowed(const http_api_t *api, const char *name)
{
    if (api->allow == NULL)
        return true;
    for (char **a = api->allow; *a != NULL; a++) {
        size_t n = strlen(*a);
        if (n > 0 && (*a)[n - 1] == '*') {
            if (strncmp(name, *a, n - 1) == 0)
                return true;
        } else if (strcmp(name, *a) == 0) {
            return true;
        }
    }
    return false;
}

static enum MHD_Result reply_forbidden_exchange(struct MHD_Connection *c,
                                                const char *name, long index)
{
    char msg[320], field[64];

    if (index >= 0)
        snprintf(field, sizeof(field), "jobs[%ld].exchange", index);
    else
        snprintf(field, sizeof(field), "exchange");
    snprintf(msg, sizeof(msg), "exchange '%.255s' is not in the allowed list",
             name);
    return reply_error(c, MHD_HTTP_FORBIDDEN, "forbidden", field, msg);
}

/* ---- handlers ----------------------------------------------------------- */

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
static bool admit(http_api_t *api, struct MHD_Connection *c, http_req *rq)
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

/* Suspend the connection and hand rq's jobs to the writer. */
static enum MHD_Result submit(http_api_t *api, struct MHD_Connection *c,
                              http_req *rq)
{
    rq->wr = (writer_req){.ins = {.jobs = rq->jobs, .n = rq->njobs,
                                  .idem_key = rq->idem_key,
                                  .idem_request = rq->canonical},
                          .done = on_written,
                          .cls = rq};
    rq->state = RQ_WAITING;
    /* Suspend first: resuming a connection not yet suspended is undefined. */
    MHD_suspend_connection(c);
    if (writer_submit(api->writer, &rq->wr) != RMQS_OK) {
        rq->wr.ins.rc = RMQS_EDB;
        rq->state = RQ_WRITTEN;
        MHD_resume_connection(c);
    }
    return MHD_YES;
}

static enum MHD_Result reply_written(http_api_t *api, struct MHD_Connection *c,
                                     http_req *rq)
{
    const store_insert_req *ins = &rq->wr.ins;
    unsigned minimal = rq->minimal ? JOB_WRITE_MINIMAL : 0;
    job_buf b = {0};

    if (ins->rc == RMQS_ECONFLICT && rq->idem_key != NULL)
        return reply_error(c, MHD_HTTP_CONFLICT, "conflict", "Idempotency-Key",
                           "Idempotency-Key was used before with a different "
                           "request");
    if (ins->rc != RMQS_OK) {
        if (ins->rc != RMQS_EINVAL && ins->rc != RMQS_ECONFLICT &&
            ins->rc != RMQS_EFULL) /* the writer logs those */
            log_error("http", "cannot store job", "jobs=%zu error=%s", rq->njobs,
                      rmqs_rc_name(ins->rc));
        return reply_rc(c, ins->rc == RMQS_ECONFLICT ? RMQS_EDB : ins->rc, NULL,
                        "cannot store the job");
    }
    if (ins->existed) /* stored by an earlier request: read back */
        return reply_job(c, MHD_HTTP_OK, &ins->existing, true, minimal);
    /* These jobs were validated here, so their JSON bodies are jansson's
     * compact text already (JOB_WRITE_OWN_BODY). */
    if (!rq->batch) {
        log_debug("http", "scheduled", "job_id=%s exchange=\"%s\" deliver_at=%lld",
                  rq->jobs[0].id, rq->jobs[0].exchange,
                  (long long)rq->jobs[0].deliver_at);
        return reply_job(c, MHD_HTTP_CREATED, &rq->jobs[0], true,
                         minimal | JOB_WRITE_OWN_BODY);
    }
    /* One allocation for the usual answer: a minimal item is about 100
     * bytes, a full one with a short body about 400. */
    job_buf_reserve(&b, rq->njobs * (minimal ? 110 : 420) + 16);
    job_buf_append(&b, "{\"jobs\":[", 9);
    for (size_t i = 0; i < rq->njobs; i++) {
        if (i > 0)
            job_buf_append(&b, ",", 1);
        job_write_json(&b, &rq->jobs[i], minimal | JOB_WRITE_OWN_BODY);
    }
    job_buf_append(&b, "]}", 2);
    log_debug("http", "scheduled batch", "jobs=%zu", rq->njobs);
    return reply_buf(c, MHD_HTTP_CREATED, &b, NULL, rq->minimal);
}

/* Prefer header lines are read in order until one has a return=. */
static enum MHD_Result prefer_visit(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value)
{
    job_prefer_return *ret = cls;

    if (strcasecmp(key, "Prefer") != 0)
        return MHD_YES;
    *ret = job_prefer_return_of(value);
    return *ret == JOB_RETURN_UNSET ? MHD_YES : MHD_NO;
}

/* Whether the client asked for Prefer: return=minimal (RFC 7240). */
static bool prefers_minimal(struct MHD_Connection *c)
{
    job_prefer_return ret = JOB_RETURN_UNSET;

    MHD_get_connection_values(c, MHD_HEADER_KIND, prefer_visit, &ret);
    return ret == JOB_RETURN_MINIMAL;
}

static enum MHD_Result h_schedule(http_api_t *api, struct MHD_Connection *c,
                                  http_req *rq)
{
    rmqs_error err = {0};
    const char *key;
    int64_t now = tu_now_ms();
    rmqs_rc rc;

    key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
    if (key != NULL) {
        size_t kl = strlen(key);
        bool ok = kl >= 1 && kl <= IDEM_KEY_MAX;
        for (size_t i = 0; ok && i < kl; i++)
            ok = key[i] > 0x20 && key[i] < 0x7f;
        if (!ok)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument",
                               "Idempotency-Key",
                               "Idempotency-Key: 1 to 200 printable ASCII "
                               "characters without spaces");
        rq->idem_key = strdup(key);
        if (rq->idem_key == NULL)
            return reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    }
    rq->minimal = prefers_minimal(c);
    rq->jobs = calloc(1, sizeof(*rq->jobs));
    if (rq->jobs == NULL)
        return reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    rc = job_from_request(rq->body ? rq->body : "", rq->len, &api->opt.limits,
                          now, &rq->jobs[0], key != NULL ? &rq->canonical : NULL,
                          &err);
    if (rc != RMQS_OK)
        return reply_rc(c, rc, &err, "invalid request");
    rq->njobs = 1;
    if (!exchange_allowed(api, rq->jobs[0].exchange))
        return reply_forbidden_exchange(c, rq->jobs[0].exchange, -1);
    rc = job_id_generate(now, rq->jobs[0].id);
    if (rc != RMQS_OK)
        return reply_rc(c, rc, NULL, "cannot generate a job id");
    return submit(api, c, rq);
}

/* POST /schedule/batch: a JSON array of up to BATCH_MAX jobs, stored all or
 * nothing; a 400 lists every invalid item (up to BATCH_ERRORS_MAX). */
static enum MHD_Result h_schedule_batch(http_api_t *api, struct MHD_Connection *c,
                                        http_req *rq)
{
    json_error_t jerr;
    json_t *root = NULL, *errors = NULL;
    rmqs_error err = {0};
    enum MHD_Result ret;
    int64_t now = tu_now_ms();
    size_t n, bad = 0;

    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key")) {
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument",
                           "Idempotency-Key",
                           "Idempotency-Key is only supported on POST /schedule");
    }
    if (rq->len > 0 && memchr(rq->body, '\0', rq->len) != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, "", "request body contains a NUL byte");
        return reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    root = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES,
                      &jerr);
    if (root == NULL) {
        rmqs_fail(&err, RMQS_EINVAL, "", "invalid JSON: %s (line %d, column %d)",
                  jerr.text, jerr.line, jerr.column);
        return reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    n = json_is_array(root) ? json_array_size(root) : 0;
    if (!json_is_array(root) || n == 0 || n > BATCH_MAX) {
        rmqs_fail(&err, RMQS_EINVAL, "", "request body must be a JSON array of "
                  "1 to %d jobs", BATCH_MAX);
        ret = reply_rc(c, RMQS_EINVAL, &err, NULL);
        goto out;
    }
    rq->batch = true;
    rq->minimal = prefers_minimal(c);
    rq->jobs = calloc(n, sizeof(*rq->jobs));
    errors = json_array();
    if (rq->jobs == NULL || errors == NULL) {
        ret = reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
        goto out;
    }
    rq->njobs = n;
    for (size_t i = 0; i < n; i++) {
        rmqs_rc rc = job_from_json(json_array_get(root, i), &api->opt.limits, now,
                                   &rq->jobs[i], NULL, &err);
        if (rc == RMQS_OK)
            rc = job_id_generate(now, rq->jobs[i].id);
        if (rc == RMQS_EINVAL) {
            if (++bad <= BATCH_ERRORS_MAX) {
                json_t *item = json_pack("{s:I, s:o}", "index", (json_int_t)i,
                                         "message", safe_string(err.message));
                if (item != NULL && err.field[0] != '\0')
                    json_object_set_new(item, "field", safe_string(err.field));
                json_array_append_new(errors, item);
            }
        } else if (rc != RMQS_OK) {
            ret = reply_rc(c, rc, NULL, "cannot read the batch");
            goto out;
        }
    }
    for (size_t i = 0; bad == 0 && i < n; i++) {
        if (!exchange_allowed(api, rq->jobs[i].exchange)) {
            ret = reply_forbidden_exchange(c, rq->jobs[i].exchange, (long)i);
            goto out;
        }
    }
    if (bad > 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "%zu of %zu jobs are invalid; none was stored",
                 bad, n);
        ret = reply_json(c, MHD_HTTP_BAD_REQUEST,
                         json_pack("{s:{s:s, s:s, s:s}, s:o}", "error", "code",
                                   "invalid_argument", "message", msg, "field",
                                   "jobs", "errors", errors),
                         NULL, NULL);
        errors = NULL;
        goto out;
    }
    ret = submit(api, c, rq);
out:
    json_decref(errors);
    json_decref(root);
    return ret;
}

static enum MHD_Result h_list(http_api_t *api, struct MHD_Connection *c)
{
    static const char *const allowed[] = {"status", "limit", "after", "source",
                                          "message_id", NULL};
    const char *source = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "source");
    const char *message_id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                         "message_id");
    store_filter filter = {.status = -1, .source = -1, .message_id = message_id};
    const char *status = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "status");
    const char *limit_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    const char *after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
    const char *unknown = query_unknown(c, allowed);
    job_t *jobs = NULL;
    size_t n = 0, limit = LIST_LIMIT_DEFAULT;
    char *next = NULL;
    json_t *arr = NULL, *resp;
    enum MHD_Result ret;
    rmqs_error err = {0};
    rmqs_rc rc;

    if (unknown != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, unknown, "unknown query parameter");
        ret = reply_rc(c, RMQS_EINVAL, &err, NULL);
        goto out;
    }
    if (status != NULL) {
        job_status s;
        if (job_status_parse(status, &s) != RMQS_OK) {
            rmqs_fail(&err, RMQS_EINVAL, "status",
                      "status: one of pending, publishing, sent, failed, cancelled");
            ret = reply_rc(c, RMQS_EINVAL, &err, NULL);
            goto out;
        }
        filter.status = (int)s;
    }
    if (source != NULL) {
        if (strcmp(source, "http") == 0) {
            filter.source = JOB_SOURCE_HTTP;
        } else if (strcmp(source, "amqp") == 0) {
            filter.source = JOB_SOURCE_AMQP;
        } else {
            rmqs_fail(&err, RMQS_EINVAL, "source", "source: http or amqp");
            ret = reply_rc(c, RMQS_EINVAL, &err, NULL);
            goto out;
        }
    }
    if (limit_s != NULL) {
        size_t v = 0, i = 0;
        for (; limit_s[i] >= '0' && limit_s[i] <= '9' && i < 5; i++)
            v = v * 10 + (size_t)(limit_s[i] - '0');
        if (i == 0 || limit_s[i] != '\0' || v < 1 || v > LIST_LIMIT_MAX) {
            rmqs_fail(&err, RMQS_EINVAL, "limit", "limit: an integer from 1 to %d",
                      LIST_LIMIT_MAX);
            ret = reply_rc(c, RMQS_EINVAL, &err, NULL);
            goto out;
        }
        limit = v;
    }
    rc = store_list(api->st, &filter, limit, after, &jobs, &n, &next);
    if (rc == RMQS_EINVAL) {
        rmqs_fail(&err, RMQS_EINVAL, "after", "after: not a cursor from this API");
        ret = reply_rc(c, rc, &err, NULL);
        goto out;
    }
    if (rc != RMQS_OK) {
        ret = reply_rc(c, rc, NULL, "cannot list jobs");
        goto out;
    }
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        if (json_array_append_new(arr, job_to_json(&jobs[i])) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    resp = arr ? json_pack("{s:o, s:s?}", "jobs", arr, "next", next) : NULL;
    if (resp != NULL && next == NULL)
        json_object_set_new(resp, "next", json_null());
    ret = resp ? reply_json(c, MHD_HTTP_OK, resp, NULL, NULL)
               : reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
out:
    for (size_t i = 0; i < n; i++)
        job_clear(&jobs[i]);
    free(jobs);
    free(next);
    return ret;
}

static enum MHD_Result h_job(http_api_t *api, struct MHD_Connection *c,
                             const char *method, const char *id, http_req *rq)
{
    job_t job = {0};
    rmqs_error err = {0};
    enum MHD_Result ret;
    rmqs_rc rc;

    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        rc = store_get(api->st, id, &job);
        ret = rc == RMQS_OK ? reply_job(c, MHD_HTTP_OK, &job, false, 0)
                            : reply_rc(c, rc, NULL, "cannot read the job");
    } else if (strcmp(method, "DELETE") == 0) {
        rc = store_cancel(api->st, id, tu_now_ms(), &job);
        if (rc == RMQS_ECONFLICT) {
            store_get(api->st, id, &job);
            rmqs_fail(&err, rc, NULL, "the job is %s and can no longer be cancelled",
                      job.id[0] ? job_status_name(job.status) : "not pending");
        } else if (rc == RMQS_OK) {
            log_info("http", "cancelled", "job_id=%s", job.id);
        }
        ret = rc == RMQS_OK ? reply_job(c, MHD_HTTP_OK, &job, false, 0)
                            : reply_rc(c, rc, &err, "cannot cancel the job");
    } else if (strcmp(method, "PATCH") == 0) {
        int64_t now = tu_now_ms(), deliver_at, delay_ms;
        if (!is_json_content(c)) {
            ret = reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                              "unsupported_media_type", NULL,
                              "Content-Type must be application/json");
            goto out;
        }
        rc = job_parse_reschedule(rq->body ? rq->body : "", rq->len,
                                  &api->opt.limits, now, &deliver_at, &delay_ms,
                                  &err);
        if (rc == RMQS_OK)
            rc = store_reschedule(api->st, id, deliver_at, delay_ms, now, &job);
        if (rc == RMQS_ECONFLICT) {
            job_clear(&job);
            store_get(api->st, id, &job);
            rmqs_fail(&err, rc, NULL, "the job is %s and can no longer be rescheduled",
                      job.id[0] ? job_status_name(job.status) : "not pending");
        }
        if (rc == RMQS_OK)
            disp_notify(api->disp, job.due_at);
        ret = rc == RMQS_OK ? reply_job(c, MHD_HTTP_OK, &job, false, 0)
                            : reply_rc(c, rc, &err, "cannot reschedule the job");
    } else {
        ret = reply_error_h(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                            NULL, "method not allowed", MHD_HTTP_HEADER_ALLOW,
                            "GET, PATCH, DELETE");
    }
out:
    job_clear(&job);
    return ret;
}

static enum MHD_Result h_readyz(http_api_t *api, struct MHD_Connection *c)
{
    bool db = store_ping(api->st) == RMQS_OK;
    bool full = writer_disk_full(api->writer);
    bool broker = disp_broker_connected(api->disp);
    bool has_ingest = api->opt.ingest_up != NULL;
    bool ingest = has_ingest && api->opt.ingest_up(api->opt.ingest_cls);
    char msg[128] = "";
    json_t *j;

    j = json_pack("{s:s, s:s, s:s}", "status", "ready", "database",
                  !db ? "down" : full ? "full" : "up", "broker",
                  broker ? "up" : "down");
    if (j == NULL)
        return reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    if (has_ingest)
        json_object_set_new(j, "ingest", json_string(ingest ? "up" : "down"));
    if (db && !full && broker && (!has_ingest || ingest))
        return reply_json(c, MHD_HTTP_OK, j, NULL, NULL);
    snprintf(msg, sizeof(msg), "down:%s%s%s%s", db ? "" : " database",
             full ? " disk full (new jobs refused; stored jobs still delivered)"
                  : "",
             broker ? "" : " broker",
             !has_ingest || ingest ? "" : " ingest consumer");
    json_object_set_new(j, "status", json_string("unavailable"));
    json_object_set_new(j, "error", json_pack("{s:s, s:s}", "code", "unavailable",
                                              "message", msg));
    return reply_json(c, MHD_HTTP_SERVICE_UNAVAILABLE, j, NULL, NULL);
}

static enum MHD_Result h_metrics(http_api_t *api, struct MHD_Connection *c)
{
    metrics_sources src = {0};
    struct MHD_Response *r;
    enum MHD_Result ret;
    char *text;

    src.have_counts = store_counts(api->st, src.jobs_by_status) == RMQS_OK;
    src.db_bytes = store_size_bytes(api->st);
    src.broker_connected = disp_broker_connected(api->disp);
    src.requests_waiting = (int64_t)writer_waiting(api->writer);
    text = metrics_render(&src);
    if (text == NULL)
        return reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        tl_status = MHD_HTTP_OK;
    return ret;
}

/* ---- routing ------------------------------------------------------------ */

static enum MHD_Result method_not_allowed(struct MHD_Connection *c,
                                          const char *allow)
{
    return reply_error_h(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                         NULL, "method not allowed", MHD_HTTP_HEADER_ALLOW, allow);
}

static enum MHD_Result route(http_api_t *api, struct MHD_Connection *c,
                             const char *url, const char *method, http_req *rq)
{
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

    if (rq->too_large) /* the connection is not worth keeping */
        return reply_error_h(c, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large",
                             NULL, "request body is over the configured limit",
                             MHD_HTTP_HEADER_CONNECTION, "close");
    if (strcmp(url, "/healthz") == 0) {
        if (!get)
            return method_not_allowed(c, "GET");
        return reply_json(c, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"),
                          NULL, NULL);
    }
    if (strcmp(url, "/readyz") == 0)
        return get ? h_readyz(api, c) : method_not_allowed(c, "GET");
    if (strcmp(url, "/metrics") == 0)
        return get ? h_metrics(api, c) : method_not_allowed(c, "GET");
    if (strcmp(url, "/schedule") == 0 || strcmp(url, "/schedule/batch") == 0) {
        if (strcmp(method, "POST") != 0)
            return method_not_allowed(c, "POST");
        if (!is_json_content(c))
            return reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                               "unsupported_media_type", NULL,
                               "Content-Type must be application/json");
        if (!admit(api, c, rq))
            return MHD_YES; /* suspended until the writer has room */
        return url[9] == '\0' ? h_schedule(api, c, rq)
                              : h_schedule_batch(api, c, rq);
    }
    if (strcmp(url, "/jobs") == 0 || strcmp(url, "/jobs/") == 0)
        return get ? h_list(api, c) : method_not_allowed(c, "GET");
    if (strncmp(url, "/jobs/", 6) == 0 && strchr(url + 6, '/') == NULL)
        return h_job(api, c, method, url + 6, rq);
    return reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL, "no such route");
}

/* The body is over the limit: what was kept of it goes, the rest will be
 * dropped as it arrives, and the answer is 413. */
static void refuse_body(http_req *rq)
{
    rq->too_large = true;
    rq->refused_us = tu_mono_us();
    free(rq->body);
    rq->body = NULL;
    rq->len = rq->cap = 0;
}

/* "Expect: 100-continue" on HTTP/1.1: the client sends the body only after
 * a 100 (libmicrohttpd sends it unless an answer is queued first). */
static bool expects_continue(struct MHD_Connection *c, const char *version)
{
    const char *e = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_EXPECT);
    return e != NULL && strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
           strcasecmp(e, "100-continue") == 0;
}

static enum MHD_Result on_request_inner(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_api_t *api = cls;
    http_req *rq = *con_cls;

    if (rq == NULL) { /* first call: headers only */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        rq = calloc(1, sizeof(*rq));
        if (rq == NULL)
            return MHD_NO;
        rq->conn = c;
        rq->route = metrics_route_of(url);
        rq->start_us = tu_mono_us();
        *con_cls = rq;
        atomic_fetch_add(&api->inflight, 1);
        char *end = NULL;
        unsigned long long v = cl != NULL ? strtoull(cl, &end, 10) : 0;
        if (strcmp(url, "/healthz") != 0 && !authorized(api, c)) {
            /* As for a 413: a client that writes its whole body before it
             * reads gets the 401 only if the body was read, so it is read and
             * dropped - but no more of it than an authorized request may
             * send, and a body announced bigger is answered at once. */
            rq->unauthorized = true;
            rq->refused_us = tu_mono_us();
            if ((cl != NULL && v > api->opt.max_body_bytes) ||
                expects_continue(c, version))
                return reply_unauthorized(c);
            return MHD_YES; /* the 401 at the end of the body */
        }
        if (cl != NULL) {
            if (end != cl && v > api->opt.max_body_bytes) {
                refuse_body(rq);
                /* Answered now, and libmicrohttpd closes the connection. */
                if (v - api->opt.max_body_bytes > DISCARD_MAX ||
                    expects_continue(c, version))
                    return route(api, c, url, method, rq);
                return MHD_YES; /* read and drop it, answer at the end */
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) { /* a body chunk */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->unauthorized) {
            rq->dropped += n;
            if (rq->dropped > api->opt.max_body_bytes ||
                tu_mono_us() - rq->refused_us >
                    (int64_t)api->opt.conn_timeout_s * 1000000)
                return MHD_NO; /* over what it could send with a token */
            return MHD_YES;
        }
        if (rq->too_large || rq->len + n > api->opt.max_body_bytes) {
            if (!rq->too_large)
                refuse_body(rq);
            rq->dropped += n;
            if (rq->dropped > DISCARD_MAX ||
                tu_mono_us() - rq->refused_us >
                    (int64_t)api->opt.conn_timeout_s * 1000000)
                return MHD_NO; /* endless or slow: close the connection */
            return MHD_YES; /* keep reading, drop the bytes, answer 413 */
        }
        if (rq->len + n + 1 > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 1024;
            char *nb;
            while (cap < rq->len + n + 1)
                cap *= 2;
            nb = realloc(rq->body, cap);
            if (nb == NULL)
                return MHD_NO;
            rq->body = nb;
            rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload_data, n);
        rq->len += n;
        rq->body[rq->len] = '\0';
        return MHD_YES;
    }
    if (rq->unauthorized)
        return reply_unauthorized(c);
    if (rq->state == RQ_WRITTEN)
        return reply_written(api, c, rq);
    return route(api, c, url, method, rq);
}

/* Wraps the handler to note which status it answered with. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    enum MHD_Result ret;
    http_req *rq;

    tl_status = 0;
    ret = on_request_inner(cls, c, url, method, version, upload_data,
                           upload_data_size, con_cls);
    rq = *con_cls;
    if (rq != NULL && tl_status != 0)
        rq->status = tl_status;
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_api_t *api = cls;
    http_req *rq = *con_cls;
    if (rq != NULL) {
        if (rq->admitted > 0)
            writer_release(api->writer, rq->admitted);
        atomic_fetch_sub(&api->inflight, 1);
        if (rq->status != 0)
            metrics_http(rq->route, rq->status, tu_mono_us() - rq->start_us);
        /* A suspended request is never completed before its resume. */
        rq_free_jobs(rq);
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's own messages (e.g. "connection limit reached"), at most
 * MHD_LOG_PER_S lines a second: an attack must not flood the log. */
#define MHD_LOG_PER_S 5

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int64_t window;   /* second of the current window */
    static unsigned in_window, suppressed;
    unsigned dropped = 0;
    int64_t now = tu_mono_ms() / 1000;
    char buf[512];
    size_t n;
    bool emit;

    pthread_mutex_lock(&mu);
    if (now != window) {
        window = now;
        in_window = 0;
    }
    emit = in_window < MHD_LOG_PER_S;
    if (emit) {
        in_window++;
        dropped = suppressed;
        suppressed = 0;
    } else {
        suppressed++;
    }
    pthread_mutex_unlock(&mu);
    if (!emit)
        return;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    for (char *p = buf; *p; p++)
        if (*p == '"')
            *p = '\'';
    log_warn("http", "libmicrohttpd", "detail=\"%s\" suppressed_before=%u", buf,
             dropped);
}

/* Split "host:port" / "[v6]:port" (netaddr) and resolve it (numeric hosts
 * or names). */
static rmqs_rc parse_listen(const char *listen, struct sockaddr_storage *ss,
                            socklen_t *sslen, bool *v6, rmqs_error *err)
{
    char host[NETADDR_HOST_MAX + 1], port[8];
    struct addrinfo hints = {0}, *res = NULL;
    unsigned port_n;
    rmqs_rc rc;
    int gai;

    rc = netaddr_split(listen, "listen", host, &port_n, err);
    if (rc != RMQS_OK)
        return rc;
    snprintf(port, sizeof(port), "%u", port_n);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return rmqs_fail(err, RMQS_EINVAL, "listen", "listen %s: %s", listen,
                         gai_strerror(gai));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = res->ai_addrlen;
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return RMQS_OK;
}

/* Read a whole (small) file into a malloc'd NUL-terminated string. */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && len < (1L << 20) &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1)) != NULL) {
        if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        } else {
            buf[len] = '\0';
        }
    }
    fclose(f);
    return buf;
}

/* Split "a,b, c*" into a NULL-terminated list of trimmed names. */
static char **split_list(const char *text)
{
    size_t n = 1, k = 0;
    char **list;
    const char *p = text;

    for (const char *q = text; *q; q++)
        n += *q == ',';
    list = calloc(n + 1, sizeof(*list));
    if (list == NULL)
        return NULL;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && *p == ' ') {
            p++;
            len--;
        }
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len > 0 && (list[k] = strndup(p, len)) != NULL)
            k++;
        p += end ? (size_t)(end - p) + 1 : strlen(p);
    }
    return list;
}

static void api_free(http_api_t *api)
{
    if (api == NULL)
        return;
    if (api->token != NULL) {
        explicit_bzero(api->token, strlen(api->token));
        free(api->token);
    }
    for (char **a = api->allow; a != NULL && *a != NULL; a++)
        free(*a);
    free(api->allow);
    free(api->tls_cert);
    if (api->tls_key != NULL) {
        explicit_bzero(api->tls_key, strlen(api->tls_key));
        free(api->tls_key);
    }
    free(api);
}

rmqs_rc http_api_start(const http_api_options *opt, store_t *st, disp_t *d,
                       writer_t *w, http_api_t **out, rmqs_error *err)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    bool v6 = false;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls[4] = {{MHD_OPTION_END, 0, NULL}};
    http_api_t *api;
    const union MHD_DaemonInfo *info;
    rmqs_rc rc;

    *out = NULL;
    rc = parse_listen(opt->listen, &ss, &sslen, &v6, err);
    if (rc != RMQS_OK)
        return rc;
    api = calloc(1, sizeof(*api));
    if (api == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    api->st = st;
    api->disp = d;
    api->writer = w;
    api->opt = *opt;
    api->quiesced_fd = MHD_INVALID_SOCKET;
    if ((opt->api_token && !(api->token = strdup(opt->api_token))) ||
        (opt->allow_exchanges && !(api->allow = split_list(opt->allow_exchanges)))) {
        rc = rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    api->opt.api_token = NULL; /* only the owned copy is used */
    if (opt->tls_cert_file != NULL) {
        if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
            rc = rmqs_fail(err, RMQS_EINVAL, "tls-cert-file",
                           "this libmicrohttpd has no TLS support");
            goto fail;
        }
        api->tls_cert = read_file(opt->tls_cert_file);
        if (api->tls_cert == NULL) {
            rc = rmqs_fail(err, RMQS_EINVAL, "tls-cert-file",
                           "cannot read the HTTPS certificate %s: %s",
                           opt->tls_cert_file, strerror(errno));
            goto fail;
        }
        api->tls_key = read_file(opt->tls_key_file);
        if (api->tls_key == NULL) {
            rc = rmqs_fail(err, RMQS_EINVAL, "tls-key-file",
                           "cannot read the HTTPS key %s: %s",
                           opt->tls_key_file, strerror(errno));
            goto fail;
        }
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, api->tls_cert};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, api->tls_key};
        /* TLS 1.2 at least, as on the AMQP side. */
        tls[2] = (struct MHD_OptionItem){
            MHD_OPTION_HTTPS_PRIORITIES, 0,
            (void *)"NORMAL:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1"};
    }
    if (v6)
        flags |= MHD_USE_IPv6;
    api->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, api,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, api, /* first, to catch all */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, opt->threads,
        MHD_OPTION_CONNECTION_TIMEOUT, opt->conn_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, opt->max_conns,
        /* One client (one IP) cannot take every connection (slowloris). */
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        opt->max_conns_per_ip > 0 ? opt->max_conns_per_ip
                                  : (opt->max_conns / 4 > 0 ? opt->max_conns / 4 : 1U),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, api,
        MHD_OPTION_ARRAY, tls,
        MHD_OPTION_END);
    if (api->daemon == NULL) {
        rc = rmqs_fail(err, RMQS_ESYS, "listen",
                       "cannot listen on %s (address in use or not available, "
                       "or a bad TLS certificate/key?)", opt->listen);
        goto fail;
    }
    info = MHD_get_daemon_info(api->daemon, MHD_DAEMON_INFO_BIND_PORT);
    log_info("http", "listening",
             "listen=%s port=%u threads=%u tls=%s auth=%s allow_exchanges=%s",
             opt->listen, info ? (unsigned)info->port : 0U, opt->threads,
             api->tls_cert ? "on" : "off", api->token ? "bearer" : "off",
             api->allow ? "list" : "any");
    *out = api;
    return RMQS_OK;
fail:
    api_free(api);
    return rc;
}

void http_api_quiesce(http_api_t *api)
{
    if (api == NULL || api->daemon == NULL ||
        api->quiesced_fd != MHD_INVALID_SOCKET)
        return;
    api->quiesced_fd = MHD_quiesce_daemon(api->daemon);
}

bool http_api_drain(http_api_t *api, int64_t timeout_ms)
{
    struct timespec tick = {0, 10 * 1000000};

    if (api == NULL)
        return true;
    for (int64_t waited = 0; atomic_load(&api->inflight) > 0; waited += 10) {
        if (waited >= timeout_ms)
            return false;
        nanosleep(&tick, NULL);
    }
    return true;
}

void http_api_stop(http_api_t *api)
{
    if (api == NULL)
        return;
    MHD_stop_daemon(api->daemon);
    if (api->quiesced_fd != MHD_INVALID_SOCKET)
        close(api->quiesced_fd);
    api_free(api);
}
