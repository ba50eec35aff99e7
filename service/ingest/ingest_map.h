/*
 * ingest_map.h - what a delivery from an ingest exchange becomes: the job
 * it is stored as (timing from x-delay / x-deliver-at, headers and
 * properties converted), and the idempotency key and fingerprint that let
 * a redelivered copy be recognised.
 *
 * It also checks the --ingest mappings themselves (names, loops) and
 * names their inbox queues.
 *
 * Why apart from amqp_ingest.c: this is the judgement (what a message
 * means, what it cannot carry, when it is due), and it is pure, so it is
 * unit-tested on hand-made envelopes (tests/unit/test_ingest_map.c) without
 * a broker. amqp_ingest.c keeps the thread, the connection, collecting,
 * storing and settling.
 *
 * Pure: no connection, no clock (the caller passes when the message was
 * received), no global state. Results are owned by the caller.
 */
#ifndef RMQS_INGEST_MAP_H
#define RMQS_INGEST_MAP_H

#include <amqp.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "job.h"
#include "rmqs.h"

/* Bytes of a routing key or message_id copied into a log line. */
#define INGEST_MAP_LOG_TEXT 96

/* The inbox queue of an ingest exchange is this prefix + its name. */
#define INGEST_MAP_INBOX_PREFIX "rmq-scheduler.inbox."

/* An idempotency request: "amqp:" and a SHA-256 fingerprint in hex. */
#define INGEST_MAP_REQUEST_LEN (5 + 64)

/*
 * Check the --ingest mappings and what --ingest-invalid needs: at least one
 * mapping; each ingest exchange named, short enough that its inbox name
 * fits an AMQP short string, UTF-8, not "amq." (the broker's), mapped once
 * and never a target (due messages would come straight back in); each
 * target at most 255 bytes of UTF-8 ("" is the default exchange); with
 * INGEST_INVALID_DEAD_LETTER a dead-letter exchange that is named and is no
 * ingest exchange. RMQS_OK, or RMQS_EINVAL with err (field "ingest",
 * "ingest-dead-letter-exchange" or "ingest-invalid") naming the problem.
 */
rmqs_rc ingest_map_check(const ingest_mapping *maps, size_t n,
                         ingest_invalid_rule rule, const char *dlx,
                         rmqs_error *err);

/*
 * Build a job (source AMQP, status pending, id not yet assigned) from one
 * delivery, to be published to target_exchange with the delivery's
 * routing key. received_ms is when it arrived; header x-delay (ms: any
 * AMQP integer type, a float/double truncated, or a string of an optional
 * sign and digits, as the delayed-message plugin reads it; <= 0 is due at
 * once) or x-deliver-at (RFC 3339 string, integer ms since the epoch, or an
 * AMQP timestamp in seconds) sets deliver_at;
 * both are removed from the stored headers. Body bytes are kept as binary;
 * properties map to the job's properties (a delivery_mode other than 2, or
 * none, -> persistent false, as the broker would treat it).
 *
 * RMQS_OK, or RMQS_EINVAL with err saying why: no or invalid x-delay /
 * x-deliver-at (then *out is still a valid job due at received_ms, for the
 * plugin's "route at once" rule), or a header the job model cannot carry
 * (table, array, bytes, decimal, void: *out is zeroed: the message can only
 * be dead-lettered). RMQS_ENOMEM (*out zeroed). *out is the caller's to
 * job_clear().
 */
rmqs_rc ingest_map_job(const amqp_envelope_t *env, const char *target_exchange,
                       int64_t received_ms, const job_limits *lim, job_t *out,
                       rmqs_error *err);

/*
 * The idempotency key and request of a delivery whose job (from
 * ingest_map_job on the same env) has a non-empty message_id: *key_out is
 * "amqp:<ingest exchange>:<message_id>" (malloc'd, the caller frees it) and
 * request "amqp:<fingerprint>", a SHA-256 of what makes two messages with
 * one message_id the same message (routing key, body, headers, properties,
 * the timing header as sent). Without a message_id: RMQS_OK, *key_out NULL,
 * request "". RMQS_ENOMEM (*key_out NULL) when memory or the digest fails.
 */
rmqs_rc ingest_map_idempotency(const amqp_envelope_t *env, const job_t *job,
                               const char *ingest_exchange, char **key_out,
                               char request[INGEST_MAP_REQUEST_LEN + 1]);

/*
 * A copy of p[0..len) for a log line: printable ASCII only ('?' for the
 * rest, and for quotes and backslashes), cut after INGEST_MAP_LOG_TEXT
 * bytes with "...". out (cap bytes, at least 1) is always NUL-terminated.
 */
void ingest_map_printable(char *out, size_t cap, const void *p, size_t len);

#endif
