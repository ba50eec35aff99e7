/*
 * http_api.h - the HTTP contract of api/openapi.yaml: routing, request
 * limits and handlers, on libmicrohttpd's epoll thread pool.
 *
 * The job endpoints (http_jobs.c) validate with job.c; new jobs go to the
 * group-commit writer (the connection is suspended until the commit),
 * reads and changes of existing jobs go to the store (store.h) directly;
 * jobs are answered as job_json.c writes them, errors as JSON
 * {"error": {"code", "message", "field"}}.
 */
#ifndef RMQS_HTTP_API_H
#define RMQS_HTTP_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bulk.h"
#include "config.h"
#include "dispatcher.h"
#include "job.h"
#include "pubpol.h"
#include "rmqs.h"
#include "scheduler.h"
#include "stats.h"
#include "store.h"
#include "writer.h"

typedef struct http_api http_api_t;

typedef struct http_api_options {
    const char *listen;         /* "host:port", "[::1]:port" */
    size_t max_body_bytes;
    unsigned threads;
    unsigned conn_timeout_s;
    unsigned max_conns;
    unsigned max_conns_per_ip;  /* 0: a tenth of max_conns (at least 1) */
    unsigned header_timeout_s;  /* headers in by then (http_deadline.h) */
    unsigned body_timeout_s;    /* body in by then after its headers */
    job_limits limits;
    const char *api_token;       /* NULL: no authentication (borrowed) */
    const pubpol_t *policy;      /* borrowed: --allow-exchanges, the login */
    int64_t max_schedules;       /* a PUT creating one more is refused */
    const char *public_origins;  /* --public-origin (http_origin.h); NULL:
                                    none (copied) */
    const char *tls_cert_file;   /* both set: serve HTTPS */
    const char *tls_key_file;
    /* Optional readiness of the AMQP ingest consumer for /readyz (NULL: no
     * ingest configured). */
    bool (*ingest_up)(void *cls);
    void *ingest_cls;
    /* Told of every schedule change (PUT, PATCH, DELETE /schedules); may be
     * NULL (borrowed, outlives the API). */
    scheduler_t *scheduler;
    /* The sampled history for GET /stats; may be NULL (404 then). Borrowed,
     * outlives the API. */
    stats_t *stats;
    /* The bulk action runner for POST /jobs/bulk; may be NULL (503).
     * Borrowed, outlives the API. */
    bulk_t *bulk;
    /* The tzdata release the time zones come from, for /metrics
     * (rmqs_build_info); NULL: "unknown". */
    const char *tzdata_version;
    /* The dashboard (http_ui.c): its mode, resolved (UI_MODE_AUTO counts
     * as off); the settings its About page shows, never a secret (NULL:
     * none; borrowed, outlives the API); the broker URLs with their
     * passwords replaced, comma-separated (copied). */
    ui_mode ui;
    const config *ui_settings;
    const char *ui_broker_urls;
} http_api_options;

/* Bind and start serving. st, d and w are borrowed and must outlive the
 * API. RMQS_EINVAL (bad address) or RMQS_ESYS (bind failed) with err. */
rmqs_rc http_api_start(const http_api_options *opt, store_t *st, disp_t *d,
                       writer_t *w, http_api_t **out, rmqs_error *err);

/* Stop accepting new connections (the listening socket is closed); the
 * open ones are still served. */
void http_api_quiesce(http_api_t *api);

/* Wait until no request is in progress (answers sent) and, with
 * conns_too, until every connection is closed (after http_api_quiesce,
 * answers carry Connection: close), at most timeout_ms. Returns false on
 * timeout. */
bool http_api_drain(http_api_t *api, int64_t timeout_ms, bool conns_too);

/* Close every connection and free. Every request handed to the writer must
 * have completed first (writer_stop), or libmicrohttpd aborts. */
void http_api_stop(http_api_t *api);

#endif
