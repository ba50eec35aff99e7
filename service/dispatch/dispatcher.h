/*
 * dispatcher.h - the timing loop: claims jobs from the store shortly before
 * they are due, publishes each the moment it is due through its own
 * amqp_publisher (pipelined confirms), and records what the broker said.
 *
 * Three threads (see dispatcher.c): a feeder that reads due jobs from a
 * snapshot (never waiting for a write), a publisher that owns the AMQP
 * connection and never waits for the database, and a recorder that writes
 * the claims and the outcomes.
 * disp_notify() wakes the feeder when a job is scheduled or rescheduled
 * sooner than it planned to look. While the broker is unreachable the
 * publisher reconnects with jittered exponential backoff and due jobs stay
 * pending; once connected they are published oldest first.
 */
#ifndef RMQS_DISPATCHER_H
#define RMQS_DISPATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "amqp_publisher.h"
#include "disp_types.h"
#include "flow.h"
#include "rmqs.h"
#include "store.h"

/* Create a dispatcher over st (borrowed) that owns pub (freed by
 * disp_free). Not started. NULL on ENOMEM (pub is then still the
 * caller's). */
disp_t *disp_new(store_t *st, amqpp_t *pub, const disp_options *opt);

/* Start the thread. RMQS_ESYS on failure. */
rmqs_rc disp_start(disp_t *d);

/* A job became due at due_at_ms: wake the thread if that is sooner than
 * what it sleeps for. Cheap; callable from any thread. */
void disp_notify(disp_t *d, int64_t due_at_ms);

/* The limits changed (PUT, PATCH, DELETE /limits): the feeder reads them
 * again at once (other instances' changes show within LIMITS_REFRESH_MS).
 * Any thread. */
void disp_limits_changed(disp_t *d);

/* The flow control the dispatcher applies, for its counts (flow_stats).
 * Lives as long as d. */
flow_t *disp_flow(disp_t *d);

/* Whether the broker blocks publishing (connection.blocked: a memory or
 * disk alarm), so everything waits (for /readyz and /metrics). Any
 * thread. */
bool disp_broker_blocked(disp_t *d);

/* Whether the AMQP connection is up (for /readyz). Any thread. */
bool disp_broker_connected(disp_t *d);

/* The broker as GET /status tells it: its state, since when it is in it
 * (wall ms; the dispatcher's creation for the first "down" before any
 * connection), and the error that last took it down or blocked it ("" if
 * none since start; kept once it is back up). Any thread. */
void disp_broker_status(disp_t *d, disp_broker_state *state, int64_t *since_ms,
                        char error[DISP_BROKER_ERROR_MAX]);

/* Stop: jobs claimed but not published are released, the unconfirmed ones
 * get their confirms (bounded by confirm_timeout_ms) and everything is
 * recorded; then join the three threads. */
void disp_stop(disp_t *d);
void disp_free(disp_t *d);

#endif
