/*
 * http_api.h - the HTTP contract of api/openapi.yaml, on libmicrohttpd's
 * epoll thread pool: what service.c starts, quiesces, drains and stops.
 * Its settings (http_api_options) are in http_options.h.
 *
 * The job endpoints (http_jobs.c) validate with job.c; new jobs go to the
 * group-commit writer (the connection is suspended until the commit),
 * reads and changes of existing jobs go to the store (store.h) directly;
 * jobs are answered as job_json.c writes them, errors as JSON
 * {"error": {"code", "message", "field"}} (http_reply.c).
 */
#ifndef RMQS_HTTP_API_H
#define RMQS_HTTP_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bulk.h"
#include "config.h"
#include "dispatcher.h"
#include "http_options.h"
#include "job.h"
#include "pubpol.h"
#include "rmqs.h"
#include "scheduler.h"
#include "stats.h"
#include "store.h"
#include "writer.h"

/* Bind and start serving. st, d and w are borrowed and must outlive the
 * API. RMQS_EINVAL (bad address) or RMQS_ESYS (bind failed) with err. */
rmqs_rc http_api_start(const http_api_options *opt, store_t *st, disp_t *d,
                       writer_t *w, http_api_t **out, rmqs_error *err);

/* Stop taking new connections: from now on each is closed as soon as it
 * is accepted (the listening socket closes in http_api_stop); the open
 * ones are still served, their answers with Connection: close. */
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
