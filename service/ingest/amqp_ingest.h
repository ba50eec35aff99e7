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
 * a redelivered message from being stored twice. What a delivery becomes
 * (the job, its fingerprint) is ingest_map.h's.
 */
#ifndef RMQS_AMQP_INGEST_H
#define RMQS_AMQP_INGEST_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "job.h"
#include "rmqs.h"
#include "writer.h"

typedef struct ingest ingest_t;

/* ingest_mapping and ingest_invalid_rule come from config.h: the settings
 * parse into them, and the options take them as they are. */

typedef struct ingest_options {
    const char *url; /* AMQP URL (copied; holds a credential) */
    int heartbeat_s;
    const char *ca_file, *cert_file, *key_file; /* amqps, as amqpp_options */
    const ingest_mapping *mappings; /* n_mappings entries (copied) */
    size_t n_mappings;
    unsigned prefetch; /* unacknowledged deliveries per ingest
                                  exchange (basic.qos is per consumer) */
    ingest_invalid_rule invalid_rule;
    const char *dead_letter_exchange; /* for INGEST_INVALID_DEAD_LETTER */
    job_limits limits;                /* horizon and default max_attempts */
} ingest_options;

/* NULL with err on a bad URL or option, or ENOMEM. w is borrowed (it
 * wakes the dispatcher after each commit, so ingest needs no link to it). */
ingest_t *ingest_new(const ingest_options *opt, writer_t *w, rmqs_error *err);
rmqs_rc ingest_start(ingest_t *in);

/* Whether the ingest connection is up and consuming (for /readyz). */
bool ingest_connected(ingest_t *in);

/* Stop consuming, let the batch in hand be committed and acknowledged,
 * close the connection, join the thread. */
void ingest_stop(ingest_t *in);
void ingest_free(ingest_t *in);

#endif
