/*
 * http_internal.h - what the files of the HTTP layer share; not a contract
 * for any other module (that is http_api.h).
 *
 * The layer is several rooms: http_api.c (the daemon, reading bodies, limits,
 * authentication, routing, health and metrics, and the one path that
 * queues a response), http_jobs.c (the job endpoints: POST /schedule,
 * /schedule/batch, GET /jobs, /jobs/{id}, PATCH, DELETE) and
 * http_schedules.c (the recurring schedules: /schedules, /schedules/{name})
 * and http_ui.c (the dashboard at /ui/ and the read-only mode).
 * All see the daemon's state and a request's state, defined here.
 */
#ifndef RMQS_HTTP_INTERNAL_H
#define RMQS_HTTP_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_api.h"
#include "http_deadline.h"
#include "taskpool.h"
#include "http_origin.h"
#include "job_json.h"
#include "metrics.h"

struct http_api {
    struct MHD_Daemon *daemon;
    store_t *st;       /* borrowed */
    disp_t *disp;      /* borrowed */
    writer_t *writer;  /* borrowed */
    http_api_options opt;
    atomic_long inflight; /* requests begun and not yet completed */
    atomic_long conns;    /* connections open (accepted, not yet closed) */
    atomic_bool stopping; /* quiesced: answers say Connection: close */
    char *token;          /* owned copy of opt.api_token, or NULL */
    const pubpol_t *policy; /* borrowed (service.c): exchanges, user_id */
    http_origins *origins; /* owned: which Host and Origin are let in */
    char *tls_cert, *tls_key; /* owned PEM contents, or NULL */
    char *ui_broker_urls;     /* owned copy of opt.ui_broker_urls, or NULL */
    http_deadline *deadline;  /* owned: cuts slow headers and bodies */
    taskpool_t *searches;     /* owned: runs GET /jobs and /jobs/count */
    MHD_socket quiesced_fd;   /* from MHD_quiesce_daemon: closed only after
                                 MHD_stop_daemon, as the library requires */
};

typedef enum rq_state {
    RQ_READING, /* headers and body arriving */
    RQ_WAITING, /* suspended: the writer holds wr */
    RQ_WRITTEN, /* resumed: wr.ins holds the outcome */
    RQ_SEARCHING, /* suspended: the search pool runs rq->search */
    RQ_SEARCHED /* resumed: rq->search holds the outcome */
} rq_state;

typedef struct http_search http_search; /* http_jobs.c */

/* Per-request state, owned by libmicrohttpd's *con_cls slot. */
typedef struct http_req {
    struct MHD_Connection *conn;
    char *body;        /* accumulated body (NUL-terminated), owned */
    size_t len, cap;
    bool too_large;    /* the body passed max_body_bytes: answer 413 */
    bool unauthorized; /* no valid token: drop the body, answer 401 */
    int site_refused;  /* http_api.c's site check said no (its reason):
                          drop the body, answer 403 or 415 */
    size_t dropped;    /* body bytes dropped since then */
    int64_t refused_us; /* monotonic, when the body was refused (401 or 413) */
    rq_state state;
    bool batch;        /* POST /schedule/batch */
    bool minimal;      /* Prefer: return=minimal (POST /schedule[/batch]) */
    writer_req wr;     /* the insert handed to the writer */
    bool writer_gone;  /* the writer had stopped (shutdown): nothing stored */
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
    http_search *search; /* owned: GET /jobs or /jobs/count's search */
} http_req;

/* ---- responses (http_api.c) ---------------------------------------------
 * Each queues one answer on c and returns libmicrohttpd's result. Extra
 * header pairs (h1, v1) may be NULL. */

/* resp_json (stolen, NULL: out of memory) as compact JSON with status. */
enum MHD_Result http_reply_json(struct MHD_Connection *c, unsigned status,
                                json_t *resp_json, const char *h1,
                                const char *v1);
/* {"error":{"code","message"[,"field"]}}; field NULL or "" leaves it out. */
enum MHD_Result http_reply_error(struct MHD_Connection *c, unsigned status,
                                 const char *code, const char *field,
                                 const char *message);
enum MHD_Result http_reply_error_h(struct MHD_Connection *c, unsigned status,
                                   const char *code, const char *field,
                                   const char *message, const char *h1,
                                   const char *v1);
/* A store/validation failure as its documented status and code; err (may
 * be NULL) gives field and message, what the message otherwise. */
enum MHD_Result http_reply_rc(struct MHD_Connection *c, rmqs_rc rc,
                              const rmqs_error *err, const char *what);
/* The JSON text in b (taken over: b is left empty) with status, the
 * Location of job_id if not NULL, and Preference-Applied if minimal. A
 * buffer that ran out of memory gives a 500. */
enum MHD_Result http_reply_buf(struct MHD_Connection *c, unsigned status,
                               job_buf *b, const char *job_id, bool minimal);
/* A JSON string of s (new reference), bytes that are not UTF-8 as '?'. */
json_t *http_safe_string(const char *s);

/* text (len bytes, malloc'd, taken over; NULL: a JSON 500) with
 * content_type and hdrs (NULL, or name/value pairs ended by a NULL name). */
enum MHD_Result http_reply_raw(struct MHD_Connection *c, unsigned status,
                               const char *content_type, char *text, size_t len,
                               const char *const *hdrs);

/* Whether the request carries the bearer token (true when none is set). */
bool http_authorized(http_api_t *api, struct MHD_Connection *c);

/* An answer without a body (204). */
enum MHD_Result http_reply_empty(struct MHD_Connection *c, unsigned status);

/* A request's handler begins on this thread for api: no status is noted
 * yet, and the answers say Connection: close while api is stopping. */
void http_reply_begin(http_api_t *api);
/* The status of the answer this thread queued since http_reply_begin, or
 * 0 if none. */
unsigned http_reply_status(void);

/* ---- request checks shared by the endpoints (http_jobs.c) --------------- */

/* Whether Content-Type is application/json (parameters allowed). */
bool http_is_json_content(struct MHD_Connection *c);
/* The first query argument not in allowed (NULL-terminated), or NULL. */
const char *http_query_unknown(struct MHD_Connection *c,
                               const char *const *allowed);
/* The same, with the job filter's parameters (http_filter.h) allowed too. */
const char *http_query_unknown_filter(struct MHD_Connection *c,
                                      const char *const *allowed);
/* Whether --allow-exchanges lets a job publish to name. */
bool http_exchange_allowed(const http_api_t *api, const char *name);

/* ---- the job endpoints (http_jobs.c) ----------------------------------- */

/* POST /schedule (batch false) or /schedule/batch: checks the content
 * type, waits for admission by the writer, validates, hands the jobs to
 * the writer (the connection is suspended until the commit). */
enum MHD_Result http_jobs_schedule(http_api_t *api, struct MHD_Connection *c,
                                   http_req *rq, bool batch);
/* The answer once the writer has committed (rq->state == RQ_WRITTEN). */
enum MHD_Result http_jobs_written(http_api_t *api, struct MHD_Connection *c,
                                  http_req *rq);
/* GET /jobs. */
enum MHD_Result http_jobs_list(http_api_t *api, struct MHD_Connection *c,
                               http_req *rq);
/* GET /jobs/count: the jobs GET /jobs's filter selects, counted up to max. */
enum MHD_Result http_jobs_count(http_api_t *api, struct MHD_Connection *c,
                                http_req *rq);
/* The answer once a search has run (rq->state == RQ_SEARCHED). */
enum MHD_Result http_jobs_searched(http_api_t *api, struct MHD_Connection *c,
                                   http_req *rq);
/* GET, PATCH, DELETE /jobs/{id}. */
enum MHD_Result http_jobs_one(http_api_t *api, struct MHD_Connection *c,
                              const char *method, const char *id, http_req *rq);
/* POST /jobs/{id}/run (action "run") or /jobs/{id}/retry ("retry"). */
enum MHD_Result http_jobs_action(http_api_t *api, struct MHD_Connection *c,
                                 const char *method, const char *id,
                                 const char *action, http_req *rq);
/* ---- the schedule endpoints (http_schedules.c) ------------------------- */

/* GET /schedules. */
enum MHD_Result http_schedules_list(http_api_t *api, struct MHD_Connection *c);
/* PUT, GET, PATCH, DELETE /schedules/{name}. */
enum MHD_Result http_schedules_one(http_api_t *api, struct MHD_Connection *c,
                                   const char *method, const char *name,
                                   http_req *rq);

/* POST /jobs/bulk (id NULL) and GET /jobs/bulk/{id} (http_bulk.c). */
enum MHD_Result http_bulk(http_api_t *api, struct MHD_Connection *c,
                          const char *method, const char *id, http_req *rq);

/* GET /stats (http_stats.c). */
enum MHD_Result http_stats_get(http_api_t *api, struct MHD_Connection *c);

/* ---- the dashboard (http_ui.c) ------------------------------------------ */

/* Whether url is the dashboard's (/ui, /ui/...) and the UI is not off:
 * served without the token check (config.json checks it itself). */
bool http_ui_public(const http_api_t *api, const char *url);
/* Whether http_ui_serve answers url: the dashboard's paths, and "/" for a
 * browser (Accept: text/html; API clients keep their 404). */
bool http_ui_handles(const http_api_t *api, struct MHD_Connection *c,
                     const char *url);
/* GET/HEAD of a file, /ui/config.json, or a redirect to /ui/. */
enum MHD_Result http_ui_serve(http_api_t *api, struct MHD_Connection *c,
                              const char *url, const char *method);
/* A change (not GET, HEAD, OPTIONS) refused: from a page of another
 * origin (403 cross_origin), or from a browser while the dashboard is
 * read-only (403 ui_read_only). True when answered (*ret). */
bool http_ui_refused(http_api_t *api, struct MHD_Connection *c,
                     const char *method, enum MHD_Result *ret);

/* Free what the job endpoints keep in rq (jobs, fingerprint, key). */
void http_jobs_release(http_req *rq);

#endif
