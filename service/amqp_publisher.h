/*
 * amqp_publisher.h - one AMQP connection with publisher confirms.
 *
 * rabbitmq-c connections are not thread-safe, so an amqpp_t belongs to the
 * one thread that calls it (the dispatcher). It publishes jobs with
 * mandatory=true on a confirm channel and reports, per job, what the broker
 * said: acked, returned (no queue bound), nacked, lost with the channel
 * (e.g. 404 exchange not found) or with the connection. rabbitmq-c 0.11 has
 * no confirm-wait helper: this module reads the frames itself.
 *
 * Heartbeats are only serviced while this module reads frames, so the owner
 * must call amqpp_service() at least every heartbeat/2 when idle.
 */
#ifndef RMQS_AMQP_PUBLISHER_H
#define RMQS_AMQP_PUBLISHER_H

#include <stdbool.h>
#include <stddef.h>

#include "job.h"
#include "rmqs.h"

typedef struct amqpp amqpp_t;

typedef struct amqpp_options {
    const char *url;        /* amqp://user:pass@host:port/vhost (copied) */
    int heartbeat_s;        /* requested heartbeat interval, 0 = off */
    int connect_timeout_ms; /* TCP connect + handshake bound */
    const char *ca_file;    /* amqps: trusted CAs (PEM); NULL = system store */
    const char *cert_file;  /* amqps: client certificate (PEM) or NULL */
    const char *key_file;   /* amqps: its private key (PEM) or NULL */
} amqpp_options;

typedef enum amqpp_result_kind {
    AMQPP_ACKED,    /* confirmed and routed: sent */
    AMQPP_RETURNED, /* basic.return (e.g. 312 NO_ROUTE): attempt failed */
    AMQPP_NACKED,   /* basic.nack: attempt failed */
    AMQPP_CLOSED,   /* the channel was closed by the broker because of this
                       job (e.g. 404 NOT_FOUND no exchange): attempt failed */
    AMQPP_LOST,     /* the connection died or the confirm timed out before
                       the broker settled it: attempt failed */
    AMQPP_UNSENT    /* never reached the broker because an earlier job broke
                       the channel: not an attempt, publish again */
} amqpp_result_kind;

typedef struct amqpp_result {
    amqpp_result_kind kind;
    char reason[256]; /* human-readable, e.g. "312 NO_ROUTE"; "" if acked */
} amqpp_result;

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
 * Read whatever frames are waiting, waiting at most timeout_ms (0: poll):
 * answers heartbeats and notices a dead or closed connection. Returns
 * RMQS_OK, or RMQS_EBROKER once the connection is gone (now disconnected).
 */
rmqs_rc amqpp_service(amqpp_t *p, int timeout_ms);

/*
 * Publish n jobs back to back and wait (at most confirm_timeout_ms) until the
 * broker has settled every one; results[i] tells what happened to jobs[i].
 * Returns RMQS_OK when every job has a result that came from the broker, or
 * RMQS_EBROKER when the connection was lost (the unsettled ones are
 * AMQPP_LOST and the publisher is now disconnected).
 */
rmqs_rc amqpp_publish(amqpp_t *p, const job_t *const *jobs, size_t n,
                      amqpp_result *results, int confirm_timeout_ms);

/* The URL with the password replaced by "***", for logs (borrowed). */
const char *amqpp_safe_url(const amqpp_t *p);

#endif
