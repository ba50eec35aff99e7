/*
 * amqp_publisher.h - one AMQP connection with publisher confirms.
 *
 * rabbitmq-c connections are not thread-safe, so an amqpp_t belongs to the
 * one thread that calls it (the dispatcher). It publishes jobs with
 * mandatory=true on a confirm channel and reports, per job, what the broker
 * said: acked, returned (no queue bound), nacked, lost with the channel
 * (e.g. 404 exchange not found) or with the connection. rabbitmq-c 0.11 has
 * no confirm-wait helper: this module reads the frames itself and hands
 * them to its confirm window (confirm_window.h), which keeps the books.
 *
 * Heartbeats are only serviced while this module reads frames, so the owner
 * must call amqpp_poll() at least every heartbeat/2 when idle.
 */
#ifndef RMQS_AMQP_PUBLISHER_H
#define RMQS_AMQP_PUBLISHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "confirm_window.h"
#include "job.h"
#include "pubpol.h"
#include "rmqs.h"

typedef struct amqpp amqpp_t;

typedef struct amqpp_options {
    const char *url;        /* amqp://user:pass@host:port/vhost (copied) */
    int heartbeat_s;        /* requested heartbeat interval, 0 = off */
    int connect_timeout_ms; /* TCP connect + handshake bound */
    const char *ca_file;    /* amqps: trusted CAs (PEM); NULL = system store */
    const char *cert_file;  /* amqps: client certificate (PEM) or NULL */
    const char *key_file;   /* amqps: its private key (PEM) or NULL */
    const pubpol_t *policy; /* borrowed, or NULL: any exchange and user_id */
} amqpp_options;

/* What the broker said about a job: the confirm window's outcomes
 * (confirm_window.h documents each), under this module's names. */
typedef cwin_outcome amqpp_result_kind;
#define AMQPP_ACKED CWIN_ACKED
#define AMQPP_RETURNED CWIN_RETURNED
#define AMQPP_NACKED CWIN_NACKED
#define AMQPP_CLOSED CWIN_CLOSED
#define AMQPP_LOST CWIN_LOST
#define AMQPP_UNSENT CWIN_UNSENT
#define AMQPP_REFUSED CWIN_REFUSED
typedef cwin_result amqpp_result; /* kind, and reason ("" if acked) */

/* Parse options (the URL) and return a disconnected publisher, or NULL with
 * err filled (RMQS_EINVAL for a bad URL). Never logs the password. */
amqpp_t *amqpp_new(const amqpp_options *opt, rmqs_error *err);
void amqpp_free(amqpp_t *p);

/* Connect, log in, open the confirm channel. RMQS_EBROKER with err on
 * failure (the publisher stays disconnected). */
rmqs_rc amqpp_connect(amqpp_t *p, rmqs_error *err);
bool amqpp_connected(const amqpp_t *p);

/* Close the connection politely if it is healthy, otherwise drop it. */
void amqpp_disconnect(amqpp_t *p);

/*
 * Publishing is pipelined: amqpp_send() puts a message on the wire and
 * returns; the broker's answer comes later, through the report function
 * given to amqpp_set_window(), called once for every job handed to
 * amqpp_send() (from inside amqpp_send, amqpp_poll or amqpp_disconnect, on
 * the owner's thread; it must not call back into this module). At most
 * `window` publishes are unconfirmed at a time.
 */
typedef void (*amqpp_report_fn)(void *cls, void *ctx, const amqpp_result *r);

/* Set up the window (before the first send; it can be replaced only while
 * disconnected). RMQS_EINVAL, RMQS_ENOMEM. */
rmqs_rc amqpp_set_window(amqpp_t *p, size_t window, int confirm_timeout_ms,
                         amqpp_report_fn fn, void *cls);

/* Connected, not blocked by the broker, and room in the window. */
bool amqpp_can_send(const amqpp_t *p);
bool amqpp_blocked(const amqpp_t *p);
size_t amqpp_unconfirmed(const amqpp_t *p);

/*
 * Publish job (borrowed until reported) with ctx for its report. A job that
 * cannot be sent now (see amqpp_can_send) or cannot be encoded is reported
 * at once (AMQPP_UNSENT / AMQPP_NACKED). Returns RMQS_OK, or RMQS_EBROKER
 * once the connection is gone (everything unconfirmed has been reported
 * AMQPP_LOST and the publisher is disconnected).
 */
rmqs_rc amqpp_send(amqpp_t *p, const job_t *job, void *ctx);

/* Sends are held back (corked) so that a run of them leaves in full
 * segments: push them out after the last one (amqpp_poll also does). */
void amqpp_flush(amqpp_t *p);

/*
 * Read and handle the frames that arrived (acks, returns, heartbeats,
 * channel or connection close), first waiting up to wait_ms for one; gives
 * up on confirms older than the confirm timeout. Returns RMQS_OK, or
 * RMQS_EBROKER once the connection is gone (now disconnected).
 */
rmqs_rc amqpp_poll(amqpp_t *p, int wait_ms);

/*
 * How many messages are ready in queue (a passive queue.declare on a
 * channel of its own, not the management API), into *ready. A
 * synchronous round trip: the caller's publishes wait for it. RMQS_OK;
 * RMQS_ENOTFOUND if there is no such queue (err says so; the connection
 * stays); RMQS_EBROKER if the connection went (disconnected now, as
 * amqpp_poll).
 */
rmqs_rc amqpp_queue_ready(amqpp_t *p, const char *queue, int64_t *ready,
                          rmqs_error *err);

/* The socket to wait on (-1 when disconnected), and whether frames are
 * already read into memory (then do not wait on the socket). */
int amqpp_fd(const amqpp_t *p);
bool amqpp_buffered(const amqpp_t *p);

/* The URL with the password replaced by "***", for logs (borrowed). */
const char *amqpp_safe_url(const amqpp_t *p);

#endif
