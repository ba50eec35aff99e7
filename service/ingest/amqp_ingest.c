/*
 * amqp_ingest.c - a drop-in path off the delayed-message plugin: messages
 * published with an x-delay (or x-deliver-at) header to an ingest exchange
 * become ordinary jobs, published when due to the mapped target exchange
 * with their original routing key, body, headers and properties.
 *
 * Why: applications written for rabbitmq-delayed-message-exchange publish
 * to one exchange with an x-delay header and nothing else. Pointing them at
 * an ingest exchange moves them onto rmq-scheduler (durable, listable,
 * cancellable jobs) without touching their code.
 *
 * DESIGN
 * - One thread, one connection, one channel (CHANNEL) in manual-ack mode
 *   (rabbitmq-c connections are not shared between threads). On every
 *   connection ingest_inbox.c declares, idempotently, per mapping the
 *   ingest exchange (topic, durable) and the inbox queue
 *   "rmq-scheduler.inbox.<ingest exchange>" (durable, classic; with
 *   --ingest-invalid dead-letter it carries x-dead-letter-exchange) bound
 *   to it with "#", and consumes. basic.qos(prefetch) is per consumer, so
 *   with several mappings up to prefetch x mappings deliveries are
 *   unacknowledged at once.
 * - The loop: amqp_consume_message() with a short timeout (which also
 *   services heartbeats while idle); once a delivery arrives, keep reading
 *   while more follow within COLLECT_GAP_MS (at most COLLECT_MAX_MS, at most
 *   the prefetch). Each delivery is turned into a job at once
 *   (ingest_map_job), its envelope destroyed and the connection's
 *   buffers released, so frame memory never outlives one delivery.
 * - Every valid delivery becomes its own writer_req (one bad row cannot
 *   take the others with it) in the writer's group commit; the thread waits
 *   on a condition variable until every done() has run, sending heartbeat
 *   frames meanwhile so a slow disk does not cost the connection. Then it
 *   settles: basic.reject / basic.nack for the deliveries that were not
 *   stored, first, then ONE basic.ack multiple=true up to the highest stored
 *   tag. Everything below that tag is either stored or already settled, and
 *   deliveries read later have higher tags, so the multiple ack covers
 *   exactly the stored ones. Nothing is ever acknowledged before its commit.
 * - What is not stored for a passing reason (the database failed:
 *   RMQS_EDB, RMQS_EFULL; out of memory) is nacked with requeue, and
 *   consuming pauses (100 ms doubling to 5 s, heartbeats kept) so the
 *   broker keeps the messages while the disk is full or broken. A row the
 *   store refuses by itself (RMQS_EINVAL) is invalid: rejected.
 *
 * Idempotency and what a crash does
 * - A delivery with a message_id is stored with the idempotency key
 *   "amqp:<ingest exchange>:<message_id>" and a SHA-256 fingerprint of the
 *   message as the key's request (ingest_map_idempotency). A crash (or a
 *   lost connection) between the commit and the ack redelivers the
 *   message; the copy finds its key with the same fingerprint (existed)
 *   and is acknowledged without being stored again. A *different* message
 *   that reuses a message_id (some publishers set a constant one) finds the
 *   key with another fingerprint (conflict): it is stored anyway, without a
 *   key, and a warning says so. A reused id never loses a message, only
 *   the duplicate protection. Keys live as long as their job
 *   (--retention-s after it finished).
 * - Without a message_id (or with an empty one) there is nothing to
 *   recognise a copy by: a crash between commit and ack stores the
 *   redelivered message a second time, so it is published twice. Delivery
 *   is at least once; publishers that care set message_id.
 *
 * Invalid messages. What a message means (timing, headers, properties) is
 * ingest_map.c's. Invalid timing follows --ingest-invalid: "route" stores
 * the job due at once (as the plugin routes such messages), "dead-letter"
 * rejects it (requeue=false) to the dead-letter exchange. A message the
 * job model cannot carry is rejected whatever the rule (with "route" it is
 * dropped unless the inbox has a dead-letter exchange, e.g. by policy).
 * Either way a warning with exchange, routing key, message_id and reason
 * is logged and counted. Caveats: while the service is down messages wait
 * in the inbox, and their x-delay then counts from when it comes back; an
 * "expiration" property meant for the final queue already applies in the
 * inbox (an expired message is dead-lettered if the inbox has a
 * dead-letter exchange).
 *
 * Liveness (rabbitmq-c 0.11; its traps are listed in amqp_publisher.c):
 * every read has a deadline (the frames of a message that has begun
 * arriving, the heartbeat timeout), heartbeats are sent by hand while the
 * thread waits for the writer or pauses, TCP_USER_TIMEOUT (2 x heartbeat)
 * bounds stuck sends, RPCs and the handshake have timeouts (5 s; 1 s for
 * the polite close at stop). Lost connections are rebuilt with jittered
 * backoff (0.1 s to 5 s); the broker requeues whatever was not
 * acknowledged. A 406 on a declare (an exchange of another type, an inbox
 * declared with other arguments, e.g. after switching --ingest-invalid) is
 * logged with the broker's reason and retried the same way: /readyz shows
 * ingest down until an operator fixes it.
 *
 * The connection itself (URL, TLS with the same certificate checks as the
 * publisher, login, TCP_USER_TIMEOUT, close) is amqp_conn.c's; logs use
 * its safe URL ("user:***@").
 */
#include "amqp_ingest.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amqp_conn.h"
#include "ingest_batch.h"
#include "ingest_inbox.h"
#include "ingest_map.h"
#include "log.h"
#include "timeutil.h"
#include "worker.h"

#define MOD "ingest"
#define CHANNEL 1
#define POLL_MS 250       /* longest idle read: bounds the stop latency */
#define COLLECT_GAP_MS 2  /* a batch closes after this much silence */
#define COLLECT_MAX_MS 20 /* or this long after its first delivery */
#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
#define DB_PAUSE_MIN_MS 100
#define DB_PAUSE_MAX_MS 5000
#define TIMEOUT_MS 5000       /* connect, handshake, RPCs */
#define CLOSE_TIMEOUT_MS 1000 /* the polite close at stop */

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv;

    if (ms < 0) {
        ms = 0;
    }
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

/* ------------------------------------------------------------------ */
/* Configuration                                                       */

static rmqs_rc check_options(const ingest_options *opt, rmqs_error *err)
{
    rmqs_rc rc =
        ingest_map_check(opt->mappings, opt->n_mappings, opt->invalid_rule,
                         opt->dead_letter_exchange, err);

    if (rc != RMQS_OK) {
        return rc;
    }
    if (opt->prefetch < 1 || opt->prefetch > 65535) {
        return rmqs_fail(err, RMQS_EINVAL, "ingest-prefetch",
                         "ingest prefetch must be between 1 and 65535");
    }
    if (opt->limits.default_max_attempts < 1 || opt->limits.max_delay_ms < 0) {
        return rmqs_fail(err, RMQS_EINVAL, "max_attempts",
                         "invalid job limits");
    }
    return RMQS_OK;
}

ingest_t *ingest_new(const ingest_options *opt, writer_t *w, rmqs_error *err)
{
    ingest_t *in = NULL;

    if (!opt || check_options(opt, err) != RMQS_OK) {
        if (!opt) {
            rmqs_fail(err, RMQS_EINVAL, "ingest", "no options");
        }
        return NULL;
    }
    in = calloc(1, sizeof *in);
    if (!in) {
        rmqs_fail(err, RMQS_ENOMEM, "ingest", "out of memory");
        return NULL;
    }
    if (worker_init(&in->wk, false) != RMQS_OK ||
        worker_cond_init(&in->done_cv) != RMQS_OK) {
        /* glibc's mutexes and condition variables hold nothing to free */
        free(in);
        rmqs_fail(err, RMQS_ESYS, "ingest", "cannot set up the thread");
        return NULL;
    }
    atomic_init(&in->connected, false);
    in->writer = w;
    in->heartbeat_s = opt->heartbeat_s;
    in->prefetch = opt->prefetch;
    in->rule = opt->invalid_rule;
    in->limits = opt->limits;
    in->db_pause_ms = DB_PAUSE_MIN_MS;
    in->link = amqpc_new(&(amqpc_options){.url = opt->url,
                                          .name = "rmq-scheduler ingest",
                                          .heartbeat_s = opt->heartbeat_s,
                                          .timeout_ms = TIMEOUT_MS,
                                          .ca_file = opt->ca_file,
                                          .cert_file = opt->cert_file,
                                          .key_file = opt->key_file},
                         err);
    if (!in->link) {
        goto fail;
    }
    if (opt->invalid_rule == INGEST_INVALID_DEAD_LETTER &&
        !(in->dlx = strdup(opt->dead_letter_exchange))) {
        goto nomem;
    }
    in->maps = calloc(opt->n_mappings, sizeof *in->maps);
    if (!in->maps) {
        goto nomem;
    }
    in->n_maps = opt->n_mappings;
    for (size_t i = 0; i < in->n_maps; i++) {
        if (ingest_inbox_init(&in->maps[i], &opt->mappings[i], i) != RMQS_OK) {
            goto nomem;
        }
    }
    in->cap = (size_t)in->prefetch * in->n_maps;
    in->batch = calloc(in->cap, sizeof *in->batch);
    if (!in->batch) {
        goto nomem;
    }
    return in;

nomem:
    rmqs_fail(err, RMQS_ENOMEM, "ingest", "out of memory");
fail:
    ingest_free(in);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Connection                                                          */

static void log_connection_lost(ingest_t *in, const char *reason)
{
    log_warn(MOD, "connection dropped", "url=%s reason=\"%s\"",
             amqpc_safe_url(in->link), reason);
}

/* Drop the connection without a handshake (broken or not trusted). */
static void drop(ingest_t *in, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void drop(ingest_t *in, const char *fmt, ...)
{
    char reason[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    log_connection_lost(in, reason);
    amqpc_lost(in->link); /* with a URL list, the next open moves on */
    in->conn = NULL;
    atomic_store(&in->connected, false);
}

static rmqs_rc ingest_connect(ingest_t *in, rmqs_error *err)
{
    if (amqpc_open(in->link, err) != RMQS_OK) {
        return RMQS_EBROKER;
    }
    in->conn = amqpc_state(in->link);
    if (!amqp_channel_open(in->conn, CHANNEL)) {
        amqpc_rpc_fail(err, amqp_get_rpc_reply(in->conn), "channel.open ");
        goto fail;
    }
    if (ingest_inbox_declare(in->conn, CHANNEL, in->maps, in->n_maps, in->dlx,
                             in->prefetch, err) != RMQS_OK) {
        goto fail;
    }
    return RMQS_OK;

fail:
    /* Opened but the inboxes could not be set up there (e.g. a classic
     * inbox whose node is down): with several URLs, try the next. */
    amqpc_lost(in->link);
    in->conn = NULL;
    return RMQS_EBROKER;
}

static void disconnect(ingest_t *in)
{
    if (!in->conn) {
        return;
    }
    /* Short: the answer does not matter, and a stopped broker must not eat
     * the shutdown grace period. Unacknowledged deliveries (read ahead,
     * never stored) go back to the inbox either way. */
    amqpc_close(in->link, CLOSE_TIMEOUT_MS);
    in->conn = NULL;
    atomic_store(&in->connected, false);
    log_info(MOD, "disconnected", "url=%s", amqpc_safe_url(in->link));
}

/* While the thread does not read (waiting for the writer, pausing), the
 * broker still needs to hear from us. */
static void send_heartbeat(ingest_t *in)
{
    amqp_frame_t f;
    int res;

    if (!in->conn || amqp_get_heartbeat(in->conn) <= 0) {
        return;
    }
    memset(&f, 0, sizeof f);
    f.frame_type = AMQP_FRAME_HEARTBEAT;
    f.channel = 0;
    res = amqp_send_frame(in->conn, &f);
    if (res != AMQP_STATUS_OK) {
        drop(in, "sending a heartbeat failed: %s", amqp_error_string2(res));
    }
}

/* How long the thread may go without reading or sending. */
static int64_t beat_ms(const ingest_t *in)
{
    int64_t ms = in->heartbeat_s > 0 ? (int64_t)in->heartbeat_s * 500 : 1000;
    return ms < 1000 ? ms : 1000;
}

/* Sleep ms (heartbeats kept), unless asked to stop: returns true then. */
static bool pause_ms(ingest_t *in, int64_t ms)
{
    int64_t end = tu_mono_ms() + ms;

    for (;;) {
        int64_t left = end - tu_mono_ms();

        if (left <= 0) {
            return worker_stopping(&in->wk);
        }
        if (worker_sleep(&in->wk, left < beat_ms(in) ? left : beat_ms(in))) {
            return true;
        }
        send_heartbeat(in);
    }
}

/* ------------------------------------------------------------------ */
/* Reading deliveries                                                  */

/* A frame that is not a delivery is waiting (amqp_consume_message put it
 * back): act on it. Returns RMQS_OK, or RMQS_EBROKER once the connection
 * is dropped. */
static rmqs_rc on_other_frame(ingest_t *in)
{
    struct timeval tv = {0, 0};
    amqp_frame_t f;
    char reason[256];
    int res;

    res = amqp_simple_wait_frame_noblock(in->conn, &f, &tv);
    if (res == AMQP_STATUS_TIMEOUT) {
        return RMQS_OK;
    }
    if (res != AMQP_STATUS_OK) {
        drop(in, "%s", amqp_error_string2(res));
        return RMQS_EBROKER;
    }
    if (f.frame_type != AMQP_FRAME_METHOD) {
        return RMQS_OK; /* stray content: nothing to do */
    }
    switch (f.payload.method.id) {
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *c = f.payload.method.decoded;
        amqp_connection_close_ok_t ok = {0};
        amqpc_reply_text(reason, sizeof reason, c->reply_code, c->reply_text);
        (void)amqp_send_method(in->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD,
                               &ok);
        drop(in, "connection closed by the broker: %s", reason);
        return RMQS_EBROKER;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *c = f.payload.method.decoded;
        amqpc_reply_text(reason, sizeof reason, c->reply_code, c->reply_text);
        /* A new connection declares and consumes again from scratch. */
        drop(in, "channel closed by the broker: %s", reason);
        return RMQS_EBROKER;
    }
    case AMQP_BASIC_CANCEL_METHOD:
        drop(in, "consumer cancelled by the broker (inbox queue deleted?)");
        return RMQS_EBROKER;
    case AMQP_CONNECTION_BLOCKED_METHOD:
        log_warn(MOD, "broker blocked the connection (resource alarm)",
                 "url=%s", amqpc_safe_url(in->link));
        return RMQS_OK;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        log_info(MOD, "broker unblocked the connection", "url=%s",
                 amqpc_safe_url(in->link));
        return RMQS_OK;
    default:
        log_debug(MOD, "ignored frame", "channel=%u method=%s",
                  (unsigned)f.channel, amqp_method_name(f.payload.method.id));
        return RMQS_OK;
    }
}

/*
 * Fill the batch: wait up to wait_ms for a first delivery, then take what
 * keeps coming (COLLECT_GAP_MS of silence or COLLECT_MAX_MS in all end it)
 * until it is full (in->n deliveries, maybe none). Returns RMQS_OK, or
 * RMQS_EBROKER if the connection was lost (the batch is cleared: the
 * broker requeues those deliveries).
 */
static rmqs_rc collect(ingest_t *in, int64_t wait_ms)
{
    int64_t first = 0;

    in->n = 0;
    while (in->n < in->cap) {
        amqp_envelope_t env;
        amqp_rpc_reply_t r;
        struct timeval tv;
        char detail[200];

        if (in->n == 0) {
            tv = tv_ms(wait_ms);
        } else {
            int64_t left = first + COLLECT_MAX_MS - tu_mono_ms();
            if (left <= 0) {
                break;
            }
            tv = tv_ms(left < COLLECT_GAP_MS ? left : COLLECT_GAP_MS);
        }
        r = amqp_consume_message(in->conn, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            if (env.channel == CHANNEL) {
                ingest_batch_take(in, &env);
                if (in->n == 1) {
                    first = in->t_first = tu_mono_ms();
                }
            }
            amqp_destroy_envelope(&env);
            amqp_maybe_release_buffers(in->conn);
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT) {
            break;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            if (on_other_frame(in) != RMQS_OK) {
                goto lost;
            }
            amqp_maybe_release_buffers(in->conn);
            if (in->n == 0) {
                break; /* back to the loop: stop flag, then wait again */
            }
            continue;
        }
        amqpc_rpc_text(r, detail, sizeof detail);
        drop(in, "%s", detail);
        goto lost;
    }
    in->t_read = tu_mono_ms();
    return RMQS_OK;
lost:
    if (in->n > 0) {
        log_warn(MOD, "connection lost while reading a batch",
                 "n=%zu note=\"nothing was stored or acknowledged; the broker "
                 "delivers them again\"",
                 in->n);
    }
    ingest_batch_clear(in);
    return RMQS_EBROKER;
}

/* ------------------------------------------------------------------ */
/* Storing and settling a batch                                        */

/* Hand every storable delivery of the batch (retry: only those marked
 * for a second try) to the writer and wait until all are done (heartbeats
 * go out meanwhile). */
static void store_batch(ingest_t *in, bool retry)
{
    size_t want = 0;
    int64_t waited = 0;

    for (size_t i = 0; i < in->n; i++) {
        if (in->batch[i].act == ACT_STORE && (!retry || in->batch[i].retry)) {
            want++;
        }
    }
    pthread_mutex_lock(&in->wk.mu);
    in->outstanding = want;
    pthread_mutex_unlock(&in->wk.mu);
    for (size_t i = 0; i < in->n; i++) {
        delivery *d = &in->batch[i];
        if (d->act != ACT_STORE || (retry && !d->retry)) {
            continue;
        }
        if (writer_submit(in->writer, &d->req) != RMQS_OK) {
            d->act = ACT_REQUEUE;
            snprintf(d->reason, sizeof d->reason, "the writer is stopping");
            pthread_mutex_lock(&in->wk.mu);
            in->outstanding--;
            pthread_mutex_unlock(&in->wk.mu);
        }
    }
    pthread_mutex_lock(&in->wk.mu);
    while (in->outstanding > 0) {
        if (!worker_cond_wait_ms(&in->done_cv, &in->wk.mu, beat_ms(in)) &&
            in->outstanding > 0) {
            pthread_mutex_unlock(&in->wk.mu);
            waited += beat_ms(in);
            if (waited % 10000 < beat_ms(in)) {
                log_warn(MOD, "still waiting for the database",
                         "n=%zu "
                         "waited_ms=%lld",
                         want, (long long)waited);
            }
            send_heartbeat(in);
            pthread_mutex_lock(&in->wk.mu);
        }
    }
    pthread_mutex_unlock(&in->wk.mu);
}

/* Reject/nack what was not stored, then ack the stored ones at once.
 * Returns how many went back to the inbox. */
static size_t settle(ingest_t *in)
{
    uint64_t ack_to = 0;
    size_t stored = 0, dup = 0, rejected = 0, requeued = 0, unkeyed = 0;
    const delivery *first_requeued = NULL;
    int res = AMQP_STATUS_OK;

    for (size_t i = 0; i < in->n; i++) {
        delivery *d = &in->batch[i];
        switch (d->act) {
        case ACT_STORE:
            if (d->existed) {
                dup++;
                log_debug(MOD, "already stored; acknowledged again",
                          "message_id=\"%s\" job_id=%s", d->message_id,
                          d->existing.id);
            } else {
                stored++;
                if (d->invalid) {
                    ingest_batch_log_invalid(in, d, "routed");
                }
                if (!d->req.ins.idem_keys && d->redelivered) {
                    unkeyed++;
                }
            }
            ack_to = d->tag > ack_to ? d->tag : ack_to;
            break;
        case ACT_REJECT:
            ingest_batch_log_invalid(in, d,
                                     in->dlx ? "dead-lettered" : "rejected");
            rejected++;
            if (in->conn) {
                res = amqp_basic_reject(in->conn, CHANNEL, d->tag, 0);
            }
            break;
        case ACT_REQUEUE:
            if (requeued++ == 0) {
                first_requeued = d;
            }
            if (in->conn) {
                res = amqp_basic_nack(in->conn, CHANNEL, d->tag, 0, 1);
            }
            break;
        }
        if (res != AMQP_STATUS_OK) {
            drop(in, "basic.reject/nack failed: %s", amqp_error_string2(res));
            res = AMQP_STATUS_OK;
        }
    }
    if (ack_to > 0 && in->conn) {
        res = amqp_basic_ack(in->conn, CHANNEL, ack_to, 1);
        if (res != AMQP_STATUS_OK) {
            drop(in, "basic.ack failed: %s", amqp_error_string2(res));
        }
    }
    if (ack_to > 0 && !in->conn) {
        log_warn(MOD, "connection lost before the acknowledgement",
                 "stored=%zu note=\"the broker delivers them again; copies "
                 "with a message_id are recognised, others are stored "
                 "twice\"",
                 stored + dup);
    }
    if (requeued > 0) {
        log_warn(MOD, "messages not stored; returned to the inbox",
                 "n=%zu exchange=\"%s\" message_id=\"%s\" reason=\"%s\" "
                 "shown=%s",
                 requeued, in->maps[first_requeued->map].ingest_exchange,
                 first_requeued->message_id, first_requeued->reason,
                 requeued > 1 ? "the_first" : "the_only");
    }
    if (unkeyed > 0) {
        log_warn(MOD, "redelivered messages without message_id stored",
                 "n=%zu note=\"if an earlier delivery was stored before a "
                 "crash, these are duplicates\"",
                 unkeyed);
    }
    log_debug(MOD, "batch settled",
              "n=%zu stored=%zu duplicates=%zu rejected=%zu requeued=%zu "
              "read_ms=%lld store_ms=%lld",
              in->n, stored, dup, rejected, requeued,
              (long long)(in->t_read - in->t_first),
              (long long)(in->t_stored - in->t_read));
    return requeued;
}

static void run_batch(ingest_t *in)
{
    bool db_trouble = false;
    size_t requeued;

    store_batch(in, false);
    if (ingest_batch_judge(in, false, &db_trouble) > 0) {
        store_batch(in, true);
        (void)ingest_batch_judge(in, true, &db_trouble);
    }
    in->t_stored = tu_mono_ms();
    requeued = settle(in);
    ingest_batch_clear(in);
    if (in->conn) {
        amqp_maybe_release_buffers(in->conn);
    }
    /* What went back to the inbox comes straight back: do not spin. */
    if (requeued > 0) {
        log_warn(MOD,
                 db_trouble ? "database trouble; pausing the inbox"
                            : "messages returned to the inbox; pausing",
                 "pause_ms=%lld", (long long)in->db_pause_ms);
        (void)pause_ms(in, in->db_pause_ms);
        in->db_pause_ms = in->db_pause_ms * 2 < DB_PAUSE_MAX_MS
                              ? in->db_pause_ms * 2
                              : DB_PAUSE_MAX_MS;
    } else {
        in->db_pause_ms = DB_PAUSE_MIN_MS;
    }
}

/* ------------------------------------------------------------------ */
/* The thread                                                          */

static void *ingest_main(void *arg)
{
    ingest_t *in = arg;
    int64_t reconnect_ms = RECONNECT_MIN_MS;
    int64_t idle_ms = POLL_MS < beat_ms(in) ? POLL_MS : beat_ms(in);
    bool down_logged = false;
    rmqs_error e;

    while (!worker_stopping(&in->wk)) {
        if (!in->conn) {
            atomic_store(&in->connected, false);
            if (ingest_connect(in, &e) != RMQS_OK) {
                if (!down_logged || strcmp(e.message, in->last_error) != 0) {
                    log_warn(MOD, "cannot consume the inboxes; retrying",
                             "url=%s error=\"%s\"", amqpc_safe_url(in->link),
                             e.message);
                    snprintf(in->last_error, sizeof in->last_error, "%s",
                             e.message);
                }
                down_logged = true;
                if (pause_ms(in, tu_jitter_ms(reconnect_ms))) {
                    break;
                }
                reconnect_ms = reconnect_ms * 2 < RECONNECT_MAX_MS
                                   ? reconnect_ms * 2
                                   : RECONNECT_MAX_MS;
                continue;
            }
            reconnect_ms = RECONNECT_MIN_MS;
            down_logged = false;
            in->last_error[0] = '\0';
            atomic_store(&in->connected, true);
            for (size_t i = 0; i < in->n_maps; i++) {
                log_info(MOD, "consuming",
                         "url=%s exchange=\"%s\" queue=\"%s\" target=\"%s\" "
                         "prefetch=%u invalid=%s heartbeat_s=%d",
                         amqpc_safe_url(in->link), in->maps[i].ingest_exchange,
                         in->maps[i].queue, in->maps[i].target_exchange,
                         in->prefetch, in->dlx ? "dead-letter" : "route",
                         amqp_get_heartbeat(in->conn));
            }
        }
        if (collect(in, idle_ms) == RMQS_OK && in->n > 0) {
            run_batch(in);
        }
    }
    disconnect(in);
    atomic_store(&in->connected, false);
    return NULL;
}

rmqs_rc ingest_start(ingest_t *in)
{
    if (!in || in->wk.thread.started) {
        return in ? RMQS_OK : RMQS_EINVAL;
    }
    return worker_start(&in->wk, "rmqs-ingest", ingest_main, in);
}

bool ingest_connected(ingest_t *in)
{
    return in && atomic_load(&in->connected);
}

void ingest_stop(ingest_t *in)
{
    if (!in || !in->wk.thread.started) {
        return;
    }
    worker_stop(&in->wk);
}

void ingest_free(ingest_t *in)
{
    if (!in) {
        return;
    }
    ingest_stop(in);
    amqpc_free(in->link); /* and its connection, if any */
    if (in->batch) {
        ingest_batch_clear(in);
    }
    for (size_t i = 0; in->maps && i < in->n_maps; i++) {
        ingest_inbox_clear(&in->maps[i]);
    }
    free(in->maps);
    free(in->batch);
    free(in->dlx);
    pthread_cond_destroy(&in->done_cv);
    worker_destroy(&in->wk);
    free(in);
}
