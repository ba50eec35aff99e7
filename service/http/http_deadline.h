/*
 * http_deadline.h - deadlines for a request's headers and for its body,
 * however slowly they trickle in.
 *
 * Why: libmicrohttpd 0.9.75 has only an idle timeout
 * (MHD_OPTION_CONNECTION_TIMEOUT), which a client sending one byte every
 * few seconds never trips: a few hundred such connections held every slot
 * of --http-max-conns and /healthz went unanswered (issue 21). This module
 * knows nothing of libmicrohttpd: the HTTP layer tells it when a
 * connection opens (its socket), when a request's headers are in, when its
 * body has ended, when the request is done (a kept-alive connection then
 * waits for the next one's headers) and when the connection closes.
 *
 * A thread (rmqs-http-dl) looks every DEADLINE_TICK_MS (http_deadline.c)
 * and shuts down (shutdown(2), never close(2): the socket stays the HTTP
 * library's, which sees the error and closes it) the socket of a
 * connection whose headers are not in header_ms after its request began
 * (the connection was accepted, or its previous request was done), or
 * whose body has not ended body_ms after its headers (so a kept-alive
 * connection idle for header_ms between requests is closed too: reason
 * keepalive_timeout, logged only at debug level on its own). Counted in
 * rmqs_http_connections_cut_total{reason} and logged, one line a second at
 * most.
 *
 * Memory: one small entry per open connection, which the HTTP server's
 * connection limit bounds; every call takes one mutex for a few
 * instructions.
 */
#ifndef RMQS_HTTP_DEADLINE_H
#define RMQS_HTTP_DEADLINE_H

#include <stdint.h>

#include "rmqs.h"

typedef struct http_deadline http_deadline;
typedef struct http_deadline_conn http_deadline_conn;

/* Start the thread; header_ms and body_ms > 0. RMQS_ENOMEM or RMQS_ESYS
 * with err. */
rmqs_rc http_deadline_new(int64_t header_ms, int64_t body_ms,
                          http_deadline **out, rmqs_error *err);

/* Stop the thread and free, with any connection still tracked. NULL: a
 * no-op. */
void http_deadline_free(http_deadline *d);

/* A connection on socket fd was accepted: its first request's header
 * deadline runs from now. Returns its entry (owned by d until
 * http_deadline_close), or NULL when out of memory (the connection then
 * has only the idle timeout). */
http_deadline_conn *http_deadline_open(http_deadline *d, int fd);

/* The connection is closing: its entry is freed, and its socket is never
 * touched again. Must come before the socket is closed. c NULL: a no-op. */
void http_deadline_close(http_deadline *d, http_deadline_conn *c);

/* The current request's headers are in: its body deadline runs from now. */
void http_deadline_headers(http_deadline *d, http_deadline_conn *c);

/* The current request's body has ended (or it had none): no deadline until
 * the request is done. Calling it again changes nothing. */
void http_deadline_body_end(http_deadline *d, http_deadline_conn *c);

/* The current request is done (answered): the next request's header
 * deadline runs from now. */
void http_deadline_request_end(http_deadline *d, http_deadline_conn *c);

#endif
