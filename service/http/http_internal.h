/*
 * http_internal.h - the state the files of the HTTP layer share: the
 * daemon's (struct http_api) and a request's (http_req). Not a contract for
 * any other module (that is http_api.h).
 *
 * The layer, from the top down; each file calls only files below it:
 *   http_api.c       the router: the daemon and its libmicrohttpd
 *                    callbacks, reading bodies, limits, the site check and
 *                    authentication, the route table, /healthz, /readyz
 *                    and /metrics, the server's start and stop
 *   http_handlers.h  the endpoints the router calls:
 *     http_jobs.c       POST /schedule and /schedule/batch, GET /jobs and
 *                       /jobs/count, GET/PATCH/DELETE /jobs/{id}, POST
 *                       /jobs/{id}/run and /jobs/{id}/retry
 *     http_schedules.c  /schedules and /schedules/{name}
 *     http_limits.c     /limits and /limits/{name}
 *     http_bulk.c       POST /jobs/bulk and GET /jobs/bulk/{id}
 *     http_stats.c      GET /stats
 *     http_status.c     GET /status (and the overdue count of /metrics)
 *     http_ui.c         the dashboard at /ui/ and the read-only mode
 *   http_reply.c     the reply layer: respond(), the one path that queues
 *                    an answer, the http_reply_* helpers, the thread-local
 *                    request state, and the request checks and query
 *                    readers the endpoints share
 *   this header      the daemon's and a request's state
 *   http_options.h   the settings (http_api_options)
 * Beside them, each with a header of its own and no part of the HTTP
 * layer above: http_filter.c (a job filter from a query or JSON),
 * http_prefer.c (the Prefer header) and http_deadline.c (the header and
 * body deadlines).
 */
#ifndef RMQS_HTTP_INTERNAL_H
#define RMQS_HTTP_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dispatcher.h"
#include "http_options.h"
#include "http_deadline.h"
#include "taskpool.h"
#include "http_origin.h"
#include "job_json.h"
#include "metrics.h"
#include "store.h"
#include "writer.h"

/* The database as GET /status names it (http_status.c). */
typedef enum http_db_state {
    HTTP_DB_UP,
    HTTP_DB_DOWN,
    HTTP_DB_FULL
} http_db_state;

struct http_api {
    struct MHD_Daemon *daemon;
    store_t *st;      /* borrowed */
    disp_t *disp;     /* borrowed */
    writer_t *writer; /* borrowed */
    http_api_options opt;
    atomic_long inflight;     /* requests begun and not yet completed */
    atomic_long conns;        /* connections open (accepted, not yet closed) */
    atomic_bool stopping;     /* quiesced: new connections are closed at
                                 once, answers say Connection: close */
    char *token;              /* owned copy of opt.api_token, or NULL */
    const pubpol_t *policy;   /* borrowed (service.c): exchanges, user_id */
    http_origins *origins;    /* owned: which Host and Origin are let in */
    char *tls_cert, *tls_key; /* owned PEM contents, or NULL */
    char *ui_broker_urls;     /* owned copy of opt.ui_broker_urls, or NULL */
    http_deadline *deadline;  /* owned: cuts slow headers and bodies */
    taskpool_t *searches;     /* owned: runs GET /jobs and /jobs/count */
    /* the database's state as last seen (http_db_check): since when (wall
     * ms) and the error that last took it down or filled it ("": none) */
    pthread_mutex_t db_mu;
    http_db_state db_state;
    int64_t db_since_ms;
    char db_error[160];
};

typedef enum rq_state {
    RQ_READING,   /* headers and body arriving */
    RQ_WAITING,   /* suspended: the writer holds wr */
    RQ_WRITTEN,   /* resumed: wr.ins holds the outcome */
    RQ_SEARCHING, /* suspended: the search pool runs rq->search */
    RQ_SEARCHED   /* resumed: rq->search holds the outcome */
} rq_state;

typedef struct http_search http_search; /* http_jobs.c */

/* Per-request state, owned by libmicrohttpd's *con_cls slot. */
typedef struct http_req {
    struct MHD_Connection *conn;
    char *body; /* accumulated body (NUL-terminated), owned */
    size_t len, cap;
    bool too_large;     /* the body passed max_body_bytes: answer 413 */
    bool unauthorized;  /* no valid token: drop the body, answer 401 */
    int site_refused;   /* http_api.c's site check said no (its reason):
                          drop the body, answer 403 or 415 */
    size_t dropped;     /* body bytes dropped since then */
    int64_t refused_us; /* monotonic, when the body was refused (401 or 413) */
    rq_state state;
    bool batch;       /* POST /schedule/batch */
    bool minimal;     /* Prefer: return=minimal (POST /schedule[/batch]) */
    writer_req wr;    /* the insert handed to the writer */
    bool writer_gone; /* the writer had stopped (shutdown): nothing stored */
    writer_waiter waiter; /* queued for admission (see writer.h) */
    size_t admitted;      /* body bytes admitted by the writer; given back
                          when the request completes */
    job_t *jobs;          /* owned; what wr.ins.jobs points to */
    size_t njobs;
    char *canonical; /* owned; the Idempotency-Key fingerprint */
    char *idem_key;  /* owned copy of the header */
    /* POST /schedule/batch: per item, its idempotency_key and canonical
     * request (owned, NULL entries where none), or NULL without keys */
    char **item_keys;
    char **item_canon;
    /* with a key: njobs answers of the store (store_insert_req) */
    bool *existed;
    job_t *existing;
    metrics_route route;
    metrics_method method;
    unsigned status;     /* of the response queued, 0 until then */
    int64_t start_us;    /* monotonic, when the headers arrived */
    http_search *search; /* owned: GET /jobs or /jobs/count's search */
} http_req;

#endif
