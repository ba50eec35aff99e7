/*
 * confirm_window.h - the bookkeeping of publishes a broker has not yet
 * confirmed: delivery tags to jobs, and each job's outcome, reported once.
 *
 * Why a module of its own: "every job handed to the publisher is reported
 * exactly once, with what the broker said" is the promise the dispatcher's
 * at-least-once delivery rests on, and the rules behind it (acks with
 * multiple=1, returns that carry no delivery tag, a channel the broker
 * closes, a connection that dies) are easy to get subtly wrong. Kept apart
 * from the AMQP I/O (amqp_publisher.c), they can be driven event by event
 * and tested without a broker (tests/unit/test_confirm_window.c).
 *
 * Pure: no socket, no clock (times come from the caller), no logging. The
 * caller turns frames into events: "published tag T for job J", "ack T
 * (multiple)", "nack T", "return for message id M", "channel closed",
 * "connection lost", "give up". Outcomes go to the report function given
 * to cwin_new(), called from inside those calls.
 *
 * Delivery tags mirror the broker's counter: 1, 2, 3... on a channel in
 * confirm mode, again from 1 on a new channel. cwin_publish() hands out the
 * next one, so the caller records a publish right as it sends it.
 */
#ifndef RMQS_CONFIRM_WINDOW_H
#define RMQS_CONFIRM_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rmqs.h"

typedef struct cwin cwin_t;

/* What became of a publish (amqp_publisher.h names them AMQPP_...). */
typedef enum cwin_outcome {
    CWIN_ACKED,    /* confirmed and routed: sent */
    CWIN_RETURNED, /* basic.return (e.g. 312 NO_ROUTE): attempt failed */
    CWIN_NACKED,   /* basic.nack: attempt failed */
    CWIN_CLOSED,   /* the channel was closed by the broker because of this
                      job (e.g. 404 NOT_FOUND no exchange): attempt failed */
    CWIN_LOST,     /* the connection died or the confirm timed out before
                      the broker settled it: attempt failed */
    CWIN_UNSENT,   /* never reached the broker because an earlier job broke
                      the channel: not an attempt, publish again */
    CWIN_REFUSED   /* never sent: the publish policy refuses it (exchange
                      not allowed, user_id not the login); the job fails
                      now (the publisher's, never the window's) */
} cwin_outcome;

typedef struct cwin_result {
    cwin_outcome kind;
    char reason[256]; /* human-readable, e.g. "312 NO_ROUTE"; "" if acked */
} cwin_result;

/* Called once per recorded publish with the ctx given to cwin_publish().
 * r is borrowed for the call. It must not call back into the window. */
typedef void (*cwin_report_fn)(void *cls, void *ctx, const cwin_result *r);

/* A window of at most cap (> 0) publishes in flight, reporting to fn(cls,
 * ...). Returns it (the caller frees it with cwin_free), or NULL with err:
 * RMQS_EINVAL (cap 0 or no fn), RMQS_ENOMEM. The first tag is 1. */
cwin_t *cwin_new(size_t cap, cwin_report_fn fn, void *cls, rmqs_error *err);

/* Frees the window. Reports nothing: end what is in flight first
 * (cwin_connection_lost). NULL is a no-op. */
void cwin_free(cwin_t *w);

/* Publishes recorded and not yet reported. */
size_t cwin_unconfirmed(const cwin_t *w);

/* No room for another publish: cap tags are between the oldest one not yet
 * reported and the next. */
bool cwin_full(const cwin_t *w);

/* The delivery tag the next publish gets. */
uint64_t cwin_next_tag(const cwin_t *w);

/*
 * Record a publish of job job_id (to exchange, "" for the default one) at
 * now_ms (monotonic), with ctx for its report. job_id and exchange are
 * borrowed until the job is reported. Returns its delivery tag, or 0 (and
 * records nothing) when the window is full.
 */
uint64_t cwin_publish(cwin_t *w, const char *job_id, const char *exchange,
                      void *ctx, int64_t now_ms);

/*
 * basic.ack / basic.nack for tag; with multiple, for every unsettled tag up
 * to it (multiple with tag 0: all of them). An acked job that was returned
 * before is reported CWIN_RETURNED (the broker acks an unroutable mandatory
 * message after returning it); a nack wins over a return. Tags already
 * reported, or never handed out, are ignored. Returns how many jobs were
 * reported.
 */
size_t cwin_ack(cwin_t *w, uint64_t tag, bool multiple);
size_t cwin_nack(cwin_t *w, uint64_t tag, bool multiple);

/*
 * basic.return of the message whose job id (x-scheduler-job-id, or else
 * message_id) is the id_len bytes at id, with the broker's reason ("312
 * NO_ROUTE", copied). Marks the first publish in flight with that id,
 * searching from just after the previous match (returns come in publish
 * order) and wrapping around; it is reported when its ack comes. Returns
 * whether a publish matched (never for id_len 0).
 */
bool cwin_return(cwin_t *w, const void *id, size_t id_len, const char *reason);

/*
 * The broker closed the channel with reason ("404 NOT_FOUND - no exchange
 * 'x' in vhost '/'"). Publishes to an exchange quoted in it are reported
 * CWIN_CLOSED, the others CWIN_UNSENT (the broker dropped them). If none is
 * quoted, the reply names no job ("406 PRECONDITION_FAILED - message size
 * ... is larger than configured max size"): with one publish in flight, it
 * is that one's (CWIN_CLOSED); with several, none is charged: all are
 * CWIN_UNSENT (the caller publishes them again), and the window probes:
 * until each of those jobs (by id) has been answered, it holds one publish
 * at a time (cwin_full while one is in flight), so the next close names
 * its job by being alone. A bound ends the probe if some never come back
 * (twice their number plus cap answers). Returned ones
 * are CWIN_RETURNED. The window is then empty and the next tag is 1 (a new
 * channel).
 */
void cwin_channel_closed(cwin_t *w, const char *reason);

/* How many jobs of a close that named no job are still to be answered one
 * publish at a time (0: the window pipelines). */
size_t cwin_probing(const cwin_t *w);

/* The connection is gone: every publish in flight is reported CWIN_LOST
 * with reason, the returned ones CWIN_RETURNED. The next tag is 1. */
void cwin_connection_lost(cwin_t *w, const char *reason);

/* The confirms will not come, but the channel stays: reported as for
 * cwin_connection_lost, while the tags go on counting, so a late ack of a
 * given-up publish is ignored, never credited to a later one. */
void cwin_give_up(cwin_t *w, const char *reason);

/* When the oldest publish in flight was recorded: true with *sent_ms, or
 * false when nothing is in flight. */
bool cwin_oldest(const cwin_t *w, int64_t *sent_ms);

#endif
