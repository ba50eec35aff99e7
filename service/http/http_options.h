/*
 * http_options.h - the settings of the HTTP API (http_api_options) and its
 * handle type: what service.c fills in (http_api.h) and what every file of
 * the HTTP layer reads from the daemon's state (http_internal.h).
 *
 * A header of its own so that the files below the router (the reply layer,
 * the endpoints) need not include the router's header to know them.
 */
#ifndef RMQS_HTTP_OPTIONS_H
#define RMQS_HTTP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bulk.h"
#include "config.h"
#include "job.h"
#include "pubpol.h"
#include "scheduler.h"
#include "stats.h"

typedef struct http_api http_api_t;

typedef struct http_api_options {
    const char *listen; /* "host:port", "[::1]:port" */
    size_t max_body_bytes;
    unsigned threads;
    unsigned conn_timeout_s;
    unsigned max_conns;
    unsigned max_conns_per_ip; /* 0: a tenth of max_conns (at least 1) */
    unsigned header_timeout_s; /* headers in by then (http_deadline.h) */
    unsigned body_timeout_s;   /* body in by then after its headers */
    job_limits limits;
    const char *api_token;      /* NULL: no authentication (borrowed) */
    const pubpol_t *policy;     /* borrowed: --allow-exchanges, the login */
    int64_t max_schedules;      /* a PUT creating one more is refused */
    int64_t max_limits;         /* PUT /limits creating one more is refused
                                    (409); 0: 1000 */
    const char *public_origins; /* --public-origin (http_origin.h); NULL:
                                    none (copied) */
    const char *tls_cert_file;  /* both set: serve HTTPS */
    const char *tls_key_file;
    /* Optional readiness of the AMQP ingest consumer for /readyz (NULL: no
     * ingest configured). */
    bool (*ingest_up)(void *cls);
    void *ingest_cls;
    /* Told of every schedule change (PUT, PATCH, DELETE /schedules); may be
     * NULL (borrowed, outlives the API). */
    scheduler_t *scheduler;
    /* Called with limits_cls after every change of a limit that the store
     * committed: a PUT that created or replaced one, a PATCH that changed
     * one, a DELETE (the same body again changes nothing and calls
     * nothing). On an HTTP thread, several at once: quick and
     * thread-safe. May be NULL. */
    void (*limits_changed)(void *cls);
    void *limits_cls;
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

#endif
