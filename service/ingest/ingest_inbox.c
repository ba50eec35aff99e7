/*
 * ingest_inbox.c - the ingest's exchanges, inbox queues, bindings and
 * consumers on the broker (see ingest_inbox.h).
 *
 * Why this way: an inbox must survive a restart of the service and of the
 * broker, so everything is durable and declared again, idempotently, on
 * every connection. The target and dead-letter exchanges belong to the
 * operator: the target is only looked at (passive declare), and the
 * dead-letter exchange is declared only when it is missing, because
 * RabbitMQ silently drops dead letters sent to an exchange that does not
 * exist. A passive declare of a missing exchange closes the channel with
 * 404: it is acknowledged and opened again, so the caller's channel is
 * still usable afterwards.
 */
#include "ingest_inbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp_conn.h"
#include "ingest_map.h"
#include "log.h"

#define MOD "ingest"
#define TAG_PREFIX "rmq-scheduler.ingest."

rmqs_rc ingest_inbox_init(ingest_inbox *b, const ingest_mapping *m,
                          size_t index)
{
    size_t qlen =
        strlen(INGEST_MAP_INBOX_PREFIX) + strlen(m->ingest_exchange) + 1;

    memset(b, 0, sizeof *b);
    b->ingest_exchange = strdup(m->ingest_exchange);
    b->target_exchange = strdup(m->target_exchange);
    b->queue = malloc(qlen);
    if (!b->ingest_exchange || !b->target_exchange || !b->queue) {
        return RMQS_ENOMEM;
    }
    snprintf(b->queue, qlen, "%s%s", INGEST_MAP_INBOX_PREFIX,
             b->ingest_exchange);
    snprintf(b->tag, sizeof b->tag, "%s%zu", TAG_PREFIX, index);
    return RMQS_OK;
}

void ingest_inbox_clear(ingest_inbox *b)
{
    free(b->ingest_exchange);
    free(b->target_exchange);
    free(b->queue);
    memset(b, 0, sizeof *b);
}

bool ingest_inbox_has_tag(const ingest_inbox *b, amqp_bytes_t tag)
{
    size_t len = strlen(b->tag);

    return tag.len == len && memcmp(tag.bytes, b->tag, len) == 0;
}

/* Why the last RPC failed, as "<what> <name>: <reply>": RMQS_EBROKER. */
static rmqs_rc rpc_failed(amqp_connection_state_t conn, rmqs_error *err,
                          const char *what, const char *name)
{
    return amqpc_rpc_fail(err, amqp_get_rpc_reply(conn), "%s %s", what, name);
}

/* The reply code of a server exception that closed the channel, else 0. */
static unsigned channel_close_code(amqp_rpc_reply_t r)
{
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        return ((const amqp_channel_close_t *)r.reply.decoded)->reply_code;
    }
    return 0;
}

/*
 * Whether exchange name exists (passive declare), into *exists: false when
 * the 404 closed the channel (it is open again). RMQS_EBROKER with err on
 * any other failure.
 */
static rmqs_rc exchange_exists(amqp_connection_state_t conn, amqp_channel_t ch,
                               const char *name, bool *exists, rmqs_error *err)
{
    amqp_channel_close_ok_t ok;

    *exists = true;
    if (amqp_exchange_declare(conn, ch, amqp_cstring_bytes(name),
                              amqp_cstring_bytes("fanout"), 1, 0, 0, 0,
                              amqp_empty_table)) {
        return RMQS_OK;
    }
    if (channel_close_code(amqp_get_rpc_reply(conn)) != AMQP_NOT_FOUND) {
        return rpc_failed(conn, err, "exchange.declare (passive)", name);
    }
    memset(&ok, 0, sizeof ok);
    if (amqp_send_method(conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) !=
            AMQP_STATUS_OK ||
        !amqp_channel_open(conn, ch)) {
        return rmqs_fail(err, RMQS_EBROKER, NULL,
                         "reopening the channel failed");
    }
    *exists = false;
    return RMQS_OK;
}

/* The dead-letter exchange must exist, or RabbitMQ drops dead letters: one
 * of any type is used as it is, a missing one is declared fanout, durable. */
static rmqs_rc ensure_dlx(amqp_connection_state_t conn, amqp_channel_t ch,
                          const char *dlx, rmqs_error *err)
{
    bool exists;
    rmqs_rc rc = exchange_exists(conn, ch, dlx, &exists, err);

    if (rc != RMQS_OK || exists) {
        return rc;
    }
    if (!amqp_exchange_declare(conn, ch, amqp_cstring_bytes(dlx),
                               amqp_cstring_bytes("fanout"), 0, 1, 0, 0,
                               amqp_empty_table)) {
        return rpc_failed(conn, err, "exchange.declare", dlx);
    }
    log_info(MOD, "dead-letter exchange declared",
             "exchange=\"%s\" type=fanout", dlx);
    return RMQS_OK;
}

/*
 * The inbox's declare failed. A 406 PRECONDITION_FAILED means it exists
 * with other arguments: typically the operator declared it a quorum queue
 * so that it survives a cluster node (RabbitMQ 3.10 refuses a declare
 * without x-queue-type for it). Then it is used as it is (a passive
 * declare confirms it exists; the channel is opened again). Anything else
 * is the declare's error.
 */
static rmqs_rc inbox_as_it_is(amqp_connection_state_t conn, amqp_channel_t ch,
                              const char *queue, rmqs_error *err)
{
    amqp_channel_close_ok_t ok;
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);

    if (channel_close_code(r) != AMQP_PRECONDITION_FAILED) {
        return rpc_failed(conn, err, "queue.declare", queue);
    }
    memset(&ok, 0, sizeof ok);
    if (amqp_send_method(conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) !=
            AMQP_STATUS_OK ||
        !amqp_channel_open(conn, ch)) {
        return rmqs_fail(err, RMQS_EBROKER, NULL,
                         "reopening the channel failed");
    }
    if (!amqp_queue_declare(conn, ch, amqp_cstring_bytes(queue), 1, 1, 0, 0,
                            amqp_empty_table)) {
        return rpc_failed(conn, err, "queue.declare (passive)", queue);
    }
    log_info(MOD, "inbox exists with its own arguments; used as it is",
             "queue=\"%s\" note=\"a dead-letter exchange must then be "
             "its own x-dead-letter-exchange\"",
             queue);
    return RMQS_OK;
}

/* The ingest exchange, its inbox and the binding; the target looked at. */
static rmqs_rc declare_one(amqp_connection_state_t conn, amqp_channel_t ch,
                           const ingest_inbox *b, amqp_table_t args,
                           rmqs_error *err)
{
    bool exists = true; /* the default exchange always exists */
    rmqs_rc rc =
        *b->target_exchange
            ? exchange_exists(conn, ch, b->target_exchange, &exists, err)
            : RMQS_OK;

    if (rc != RMQS_OK) {
        return rc;
    }
    if (!exists) { /* not ours to declare: its type and bindings */
        log_warn(MOD,
                 "target exchange does not exist (yet); due "
                 "messages will fail until it does",
                 "exchange=\"%s\" target=\"%s\"", b->ingest_exchange,
                 b->target_exchange);
    }
    if (!amqp_exchange_declare(conn, ch, amqp_cstring_bytes(b->ingest_exchange),
                               amqp_cstring_bytes("topic"), 0, 1, 0, 0,
                               amqp_empty_table)) {
        return rpc_failed(conn, err, "exchange.declare", b->ingest_exchange);
    }
    if (!amqp_queue_declare(conn, ch, amqp_cstring_bytes(b->queue), 0, 1, 0, 0,
                            args) &&
        inbox_as_it_is(conn, ch, b->queue, err) != RMQS_OK) {
        return RMQS_EBROKER;
    }
    if (!amqp_queue_bind(conn, ch, amqp_cstring_bytes(b->queue),
                         amqp_cstring_bytes(b->ingest_exchange),
                         amqp_cstring_bytes("#"), amqp_empty_table)) {
        return rpc_failed(conn, err, "queue.bind", b->queue);
    }
    return RMQS_OK;
}

rmqs_rc ingest_inbox_declare(amqp_connection_state_t conn, amqp_channel_t ch,
                             const ingest_inbox *boxes, size_t n,
                             const char *dlx, unsigned prefetch,
                             rmqs_error *err)
{
    amqp_table_entry_t arg;
    amqp_table_t args = amqp_empty_table;

    if (dlx) {
        if (ensure_dlx(conn, ch, dlx, err) != RMQS_OK) {
            return RMQS_EBROKER;
        }
        arg.key = amqp_cstring_bytes("x-dead-letter-exchange");
        arg.value.kind = AMQP_FIELD_KIND_UTF8;
        arg.value.value.bytes = amqp_cstring_bytes(dlx);
        args.num_entries = 1;
        args.entries = &arg;
    }
    for (size_t i = 0; i < n; i++) {
        if (declare_one(conn, ch, &boxes[i], args, err) != RMQS_OK) {
            return RMQS_EBROKER;
        }
    }
    /* Per consumer (global=0): applies to the consumers started below. */
    if (!amqp_basic_qos(conn, ch, 0, (uint16_t)prefetch, 0)) {
        return rpc_failed(conn, err, "basic.qos", "");
    }
    for (size_t i = 0; i < n; i++) {
        if (!amqp_basic_consume(conn, ch, amqp_cstring_bytes(boxes[i].queue),
                                amqp_cstring_bytes(boxes[i].tag), 0, 0, 0,
                                amqp_empty_table)) {
            return rpc_failed(conn, err, "basic.consume", boxes[i].queue);
        }
    }
    return RMQS_OK;
}
