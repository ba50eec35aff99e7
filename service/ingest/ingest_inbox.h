/*
 * ingest_inbox.h - what the x-delay ingest sets up on the broker each time
 * it connects: per --ingest mapping the ingest exchange, its inbox queue
 * and the binding between them, the dead-letter exchange where
 * --ingest-invalid=dead-letter sends messages, basic.qos and one consumer
 * per inbox.
 *
 * Why apart from amqp_ingest.c: the set-up is a sequence of RPCs with its
 * own rules (what may be declared, what must only be looked at), run once
 * per connection; amqp_ingest.c keeps the thread that reads, stores and
 * settles. Both use the same ingest_inbox records, which amqp_ingest owns.
 */
#ifndef RMQS_INGEST_INBOX_H
#define RMQS_INGEST_INBOX_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "rmqs.h"

/* One mapping as the broker sees it. Strings are owned by the record. */
typedef struct ingest_inbox {
    char *ingest_exchange; /* where publishers send (topic, durable) */
    char *target_exchange; /* where due jobs go ("": the default exchange) */
    char *queue;           /* "rmq-scheduler.inbox.<ingest exchange>" */
    char tag[48];          /* consumer tag: "rmq-scheduler.ingest.<index>" */
} ingest_inbox;

/* Fill b from mapping m (checked by ingest_map_check), the index-th of the
 * list. RMQS_ENOMEM (b is then for ingest_inbox_clear all the same). */
rmqs_rc ingest_inbox_init(ingest_inbox *b, const ingest_mapping *m,
                          size_t index);
void ingest_inbox_clear(ingest_inbox *b);

/* Whether tag (a delivery's consumer tag) is b's. */
bool ingest_inbox_has_tag(const ingest_inbox *b, amqp_bytes_t tag);

/*
 * On conn's open channel ch: with a dead-letter exchange dlx (NULL: none)
 * make it exist (a passive declare; if missing, declared fanout, durable;
 * one of any type is used as it is, for RabbitMQ drops dead letters sent to
 * a missing one); for each inbox look at the target exchange (a missing
 * one is logged, not declared: its type and bindings are not ours), declare
 * the ingest exchange and the inbox queue (with x-dead-letter-exchange =
 * dlx), bind them with "#"; then basic.qos(prefetch, per consumer) and one
 * consumer per inbox with manual acks. Every declare is idempotent.
 * RMQS_OK, or RMQS_EBROKER with err "<method> <name>: <broker's reply>"
 * (a 406 for an exchange of another type or an inbox declared with other
 * arguments); the connection should then be dropped.
 */
rmqs_rc ingest_inbox_declare(amqp_connection_state_t conn, amqp_channel_t ch,
                             const ingest_inbox *boxes, size_t n,
                             const char *dlx, unsigned prefetch,
                             rmqs_error *err);

#endif
