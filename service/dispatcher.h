/*
 * dispatcher.h - the timing loop: sleeps until the next job is due, claims
 * due jobs from the store, publishes them through its own amqp_publisher and
 * records what the broker said.
 *
 * One thread, which owns the AMQP connection. It sleeps on a monotonic
 * condition variable until the earliest due_at (capped so heartbeats are
 * serviced and wall-clock steps are noticed) and is woken early by
 * disp_notify() when a job is scheduled or rescheduled sooner. While the
 * broker is unreachable it reconnects with jittered exponential backoff and
 * leaves due jobs pending; once connected it publishes them oldest first.
 */
#ifndef RMQS_DISPATCHER_H
#define RMQS_DISPATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "amqp_publisher.h"
#include "rmqs.h"
#include "store.h"

typedef struct disp disp_t;

typedef struct disp_options {
    int batch_size;            /* jobs claimed and published per round */
    int64_t backoff_base_ms;   /* first retry delay after a failed attempt */
    int64_t backoff_cap_ms;    /* retry delay never exceeds this */
    int confirm_timeout_ms;    /* a batch not confirmed by then: connection
                                  presumed dead */
    int heartbeat_s;           /* to bound idle sleeps (service heartbeats) */
} disp_options;

/* Create a dispatcher over st (borrowed) that owns pub (freed by
 * disp_free). Not started. NULL on ENOMEM. */
disp_t *disp_new(store_t *st, amqpp_t *pub, const disp_options *opt);

/* Start the thread. RMQS_ESYS on failure. */
rmqs_rc disp_start(disp_t *d);

/* A job became due at due_at_ms: wake the thread if that is sooner than
 * what it sleeps for. Cheap; callable from any thread. */
void disp_notify(disp_t *d, int64_t due_at_ms);

/* Whether the AMQP connection is up (for /readyz). Any thread. */
bool disp_broker_connected(disp_t *d);

/* Ask the thread to stop after the batch in flight is confirmed and
 * settled, and join it. */
void disp_stop(disp_t *d);
void disp_free(disp_t *d);

/* Retry delay after the given failed attempt (1-based): base * 2^(n-1),
 * capped. Pure; exposed for unit tests. */
int64_t disp_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms);

#endif
