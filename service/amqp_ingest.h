/*
 * amqp_ingest.h - a drop-in path off the delayed-message plugin: messages
 * published with an x-delay (or x-deliver-at) header to an ingest exchange
 * become ordinary jobs that are published, when due, to the mapped target
 * exchange with their original routing key, body, properties and headers.
 *
 * One thread with its own AMQP connection (rabbitmq-c connections are not
 * shared). For each mapping it declares, durable and idempotently, the
 * ingest exchange (topic) and one inbox queue bound to it with "#", and
 * consumes with manual acks and a bounded prefetch. Messages that arrive
 * together are handed to the group-commit writer together; each delivery is
 * acknowledged only after its job is committed, so a crash in between
 * redelivers it, and the (ingest exchange, message_id) idempotency key keeps
 * a redelivered message from being stored twice.
 */
#ifndef RMQS_AMQP_INGEST_H
#define RMQS_AMQP_INGEST_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dispatcher.h"
#include "job.h"
#include "rmqs.h"
#include "writer.h"

typedef struct ingest ingest_t;

/* ingest_mapping and ingest_invalid_rule come from config.h: the settings
 * parse into them, and the options take them as they are. */

typedef struct ingest_options {
    const char *url;           /* AMQP URL (copied; holds a credential) */
    int heartbeat_s;
    const char *ca_file, *cert_file, *key_file; /* amqps, as amqpp_options */
    const ingest_mapping *mappings; /* n_mappings entries (copied) */
    size_t n_mappings;
    unsigned prefetch;         /* unacknowledged deliveries per ingest
                                  exchange (basic.qos is per consumer) */
    ingest_invalid_rule invalid_rule;
    const char *dead_letter_exchange; /* for INGEST_INVALID_DEAD_LETTER */
    job_limits limits;         /* horizon and default max_attempts */
} ingest_options;

/* NULL with err on a bad URL or option, or ENOMEM. w and d are borrowed. */
ingest_t *ingest_new(const ingest_options *opt, writer_t *w, disp_t *d,
                     rmqs_error *err);
rmqs_rc ingest_start(ingest_t *in);

/* Whether the ingest connection is up and consuming (for /readyz). */
bool ingest_connected(ingest_t *in);

/* Stop consuming, let the batch in hand be committed and acknowledged,
 * close the connection, join the thread. */
void ingest_stop(ingest_t *in);
void ingest_free(ingest_t *in);

/*
 * Pure: build a job (source AMQP, status pending, id not yet assigned) from
 * one delivery, to be published to target_exchange with the delivery's
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
 * be dead-lettered). Exposed for unit tests.
 */
rmqs_rc ingest_job_from_message(const amqp_envelope_t *env,
                                const char *target_exchange,
                                int64_t received_ms, const job_limits *lim,
                                job_t *out, rmqs_error *err);

#endif
