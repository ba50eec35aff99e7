/*
 * http_api.h - the HTTP contract of api/openapi.yaml: routing, request
 * limits and handlers, on libmicrohttpd's epoll thread pool.
 *
 * Handlers validate with job.c, store with store.c and wake the dispatcher;
 * errors are JSON {"error": {"code", "message", "field"}}.
 */
#ifndef RMQS_HTTP_API_H
#define RMQS_HTTP_API_H

#include <stddef.h>
#include <stdint.h>

#include "dispatcher.h"
#include "job.h"
#include "rmqs.h"
#include "store.h"

typedef struct http_api http_api_t;

typedef struct http_api_options {
    const char *listen;         /* "host:port", "[::1]:port" */
    size_t max_body_bytes;
    unsigned threads;
    unsigned conn_timeout_s;
    unsigned max_conns;
    job_limits limits;
} http_api_options;

/* Bind and start serving. st and d are borrowed and must outlive the API.
 * RMQS_EINVAL (bad address) or RMQS_ESYS (bind failed) with err. */
rmqs_rc http_api_start(const http_api_options *opt, store_t *st, disp_t *d,
                       http_api_t **out, rmqs_error *err);

/* Stop accepting, finish requests in progress, free. */
void http_api_stop(http_api_t *api);

#endif
