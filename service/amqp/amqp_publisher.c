/*
 * amqp_publisher.c - publish jobs to RabbitMQ on a confirm channel and tell,
 * per job, what the broker said.
 *
 * Why this exists: a job may only be marked sent once the broker has taken
 * responsibility for it. That is a publisher confirm (basic.ack) for a message
 * that was routed (mandatory=1, so an unroutable one comes back first as
 * basic.return). rabbitmq-c 0.11 has no helper to wait for confirms
 * (amqp_publisher_confirm_wait arrived in 0.15), so this module reads every
 * frame itself with amqp_simple_wait_frame_noblock() and turns them into
 * events for the window of publishes still unconfirmed (confirm_window.c
 * keeps those books and decides each job's outcome).
 *
 * DESIGN
 * - Pipelined: amqpp_send() writes a message and returns; confirms are read
 *   whenever the owner calls amqpp_poll() (or the next sends poll), and each
 *   job is reported exactly once through the owner's report function. The
 *   dispatcher therefore publishes a job the moment it is due, whatever is
 *   still unconfirmed, and the broker, not a round trip per batch, sets the
 *   pace (the window bounds memory and what a lost connection repeats).
 * - One connection, one channel (1) in confirm mode. The broker numbers the
 *   publishes on a channel 1, 2, 3... from confirm.select on; the window
 *   hands out the same tags and starts again at 1 whenever the channel is
 *   (re)opened, which only happens with an empty window.
 * - basic.ack / basic.nack go to the window as they come.
 * - basic.return carries no delivery tag. It is followed by the returned
 *   message's content header (and body frames); the header's
 *   x-scheduler-job-id (or, failing that, message_id) names the job, and
 *   the window reports it AMQPP_RETURNED when its ack arrives (the broker
 *   acks unroutable mandatory messages). The content state machine
 *   (p->content) is independent of the window, so a return split across
 *   two reads is skipped correctly.
 * - channel.close (e.g. 404 NOT_FOUND no exchange 'x'): the broker drops
 *   every later publish on the channel. The window reports the jobs whose
 *   exchange is quoted in the reply text AMQPP_CLOSED and the others
 *   AMQPP_UNSENT (publish again). A reply that names no job charges
 *   nobody: all are AMQPP_UNSENT and the window takes the next ones one at
 *   a time, so the culprit closes a channel alone (confirm_window.h). The
 *   channel is reopened and confirm.select sent again.
 * - The publish policy (pubpol.h) is checked before each send: a job whose
 *   exchange --allow-exchanges refuses, or whose user_id is not this
 *   connection's login (RabbitMQ would close the channel under everyone's
 *   publishes), is reported AMQPP_REFUSED and never sent. Measured: a job published
 *   before the culprit is usually enqueued already, but its confirm dies
 *   with the channel, so publishing it again duplicates it (at-least-once;
 *   consumers dedupe on message_id / x-scheduler-job-id).
 * - connection.close, socket errors, heartbeat timeouts and a confirm that
 *   does not come within the confirm timeout drop the connection:
 *   unconfirmed jobs become AMQPP_LOST (the dispatcher publishes them
 *   again: at least once). With a URL list the next connection goes to the
 *   next node at once (amqpc_lost): a cluster node that went away is not
 *   tried again first, and no delay is added.
 * - Nacks: the nacked job is AMQPP_NACKED and the connection is dropped
 *   too (at most once per NACK_DROP_MS, so a queue that rejects publishes,
 *   x-overflow=reject-publish, costs one reconnect per 5 s, not one per
 *   nack). Why: in RabbitMQ 3.10.8, after kill -9 of the node that was both
 *   our node and a quorum queue's leader, a channel opened on another node
 *   during the election had every publish to that queue nacked for as long
 *   as it lived (68 s, 5,800 nacks, 5 of 5 tries); a new connection is
 *   acked (TESTING-NOTES.md). So a lost connection is replaced at once
 *   (a graceful node stop costs milliseconds), but after a nack-drop the
 *   next connection waits NACK_HOLD_MS (amqpp_connect refuses until then):
 *   measured here, a connection made again at once, 57 ms after the kill,
 *   was still inside the election and nacked everything too, while the
 *   election is over within 0.2-0.4 s. A late ack can never be credited to
 *   the wrong job: tags die with the channel, and on a kept channel they
 *   only grow (the window ignores acks for tags it has reported).
 * - connection.blocked (resource alarm) is remembered; while blocked,
 *   amqpp_can_send() is false and a send is reported AMQPP_UNSENT at once.
 *   RabbitMQ only sends connection.blocked to a connection that publishes,
 *   and then stops reading it: what stays unconfirmed past the confirm
 *   timeout is reported AMQPP_LOST, but the connection is kept, since a new
 *   one would only repeat it.
 * - A job that cannot be encoded (a header name over 255 bytes, headers
 *   larger than a frame, an expiration job.c would refuse...) is checked
 *   before anything is sent (amqpm_build, amqp_message.h) and reported
 *   AMQPP_NACKED "not publishable: ...": retrying cannot help, and an
 *   encoder error after basic.publish went out would break the connection.
 *   A build that runs out of memory is AMQPP_UNSENT (published again).
 *
 * Liveness (rabbitmq-c 0.11 traps; upstream amqp.h on heartbeats, issues
 * #418, #780 and #519):
 * - Heartbeats are only serviced while frames are read, so the owner calls
 *   amqpp_poll() when idle, and sends poll the socket every POLL_EVERY
 *   publishes (which also keeps the acks from piling up unread).
 * - Messages are sent with amqp_send_method() + amqp_send_frame() rather
 *   than amqp_basic_publish(): in 0.11 the latter, once the receive-heartbeat
 *   deadline has passed, reads with an infinite deadline (bug #780) and can
 *   block forever on a silent peer. Reads here always have a deadline.
 * - Sends have no deadline in 0.11 (#519), and a send still stuck when the
 *   heartbeat deadline passes falls into the same infinite read.
 *   TCP_USER_TIMEOUT (2 x heartbeat, amqp_conn.c) fails a send stuck
 *   that long, unacked or behind a zero window, so a stopped or vanished
 *   broker cannot hang the dispatcher thread (verified: SIGSTOP of the
 *   broker during a 128 MiB publish returns after ~4.3 s with heartbeat 2 s;
 *   without the option it hangs).
 * - The connection itself (URL, TLS, login, TCP_USER_TIMEOUT, close) is
 *   amqp_conn.c's, shared with the ingest.
 *
 * Frame memory belongs to the connection's pools: everything needed is
 * copied (reply texts into fixed buffers) before amqp_maybe_release_buffers().
 * Header tables for a message are built (amqpm_build) in the publisher's
 * amqp_pool_t, recycled after each message; the window is allocated once.
 * Nothing grows with the number of publishes.
 *
 * Logs and error messages use the safe URL ("user:***@", amqp_conn.h).
 */
#include "amqp_publisher.h"

#include <amqp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "amqp_conn.h"
#include "amqp_message.h"
#include "confirm_window.h"
#include "log.h"
#include "timeutil.h"

#define MOD "amqp"
#define CHANNEL 1
#define QUERY_CHANNEL \
    2                            /* passive queue.declare (amqpp_queue_ready): a
                           404 closes this channel, not the publishes' */
#define POLL_EVERY 64            /* publishes between two socket polls */
#define PUMP_MAX_FRAMES 256      /* frames handled before a poll returns */
#define DEFAULT_CONFIRM_MS 30000 /* confirm_timeout_ms <= 0 */
#define NACK_DROP_MS 5000        /* at most one nack-drop this often */
#define NACK_HOLD_MS 1000        /* no new connection this soon after one */

#define BLOCKED_REASON "broker blocked publishing (resource alarm)"

typedef enum content_state {
    CONTENT_NONE,   /* no returned message being read */
    CONTENT_HEADER, /* basic.return seen, its content header is next */
    CONTENT_BODY    /* skipping body_left bytes of body frames */
} content_state;

struct amqpp {
    amqpc_t *link;                /* URL, TLS, login (amqp_conn.h) */
    amqp_connection_state_t conn; /* link's connection; NULL while
                                     disconnected */
    int frame_max;
    bool blocked;

    content_state content;
    uint64_t body_left;
    char return_reason[256]; /* "312 NO_ROUTE" */
    char lost_reason[256];   /* why the connection was last dropped */

    cwin_t *win; /* owned; publishes not yet confirmed */
    size_t sent_since_poll;
    bool corked; /* TCP_CORK set: sends are held until flushed */
    int confirm_timeout_ms;
    amqpp_report_fn on_report;
    void *report_cls;
    amqp_pool_t pool;        /* header tables of the message being sent */
    int64_t nack_dropped_ms; /* tu_mono_ms() of the last nack-drop, or 0 */
    int64_t hold_until_ms;   /* amqpp_connect refuses before this */
    const pubpol_t *policy;  /* borrowed, or NULL */
    bool query_open;         /* QUERY_CHANNEL is open */
};

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

static void set_result(amqpp_result *r, amqpp_result_kind kind, const char *fmt,
                       ...) __attribute__((format(printf, 3, 4)));

static void set_result(amqpp_result *r, amqpp_result_kind kind, const char *fmt,
                       ...)
{
    va_list ap;

    r->kind = kind;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
}

static void copy_bytes(char *out, size_t cap, amqp_bytes_t b)
{
    size_t len = b.len < cap - 1 ? b.len : cap - 1;

    if (len) {
        memcpy(out, b.bytes, len);
    }
    out[len] = '\0';
}

/* ------------------------------------------------------------------ */
/* Feeding the window                                                  */

/* A basic.return's content header arrived: tell the window whose it is. */
static void match_return(amqpp_t *p, const amqp_basic_properties_t *props,
                         const char *reason)
{
    amqp_bytes_t id = {0, NULL};
    int e;

    if (props && (props->_flags & AMQP_BASIC_HEADERS_FLAG)) {
        for (e = 0; e < props->headers.num_entries; e++) {
            const amqp_table_entry_t *h = &props->headers.entries[e];
            if (h->key.len == strlen(AMQPM_HDR_JOB_ID) &&
                memcmp(h->key.bytes, AMQPM_HDR_JOB_ID, h->key.len) == 0 &&
                (h->value.kind == AMQP_FIELD_KIND_UTF8 ||
                 h->value.kind == AMQP_FIELD_KIND_BYTES)) {
                id = h->value.value.bytes;
                break;
            }
        }
    }
    if (!id.len && props && (props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)) {
        id = props->message_id;
    }
    if (!p->win || !cwin_return(p->win, id.bytes, id.len, reason)) {
        log_warn(MOD, "basic.return matches no unconfirmed publish",
                 "reason=\"%s\" id_len=%zu", reason, id.len);
    }
}

static void drop(amqpp_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A confirm from the broker (ack, or nack when !ack). A nack also drops
 * the connection (see DESIGN, nacks), at most once per NACK_DROP_MS. */
static void on_confirm(amqpp_t *p, uint64_t tag, bool multiple, bool ack)
{
    size_t n = 0;
    int64_t now;

    if (p->win) {
        n = ack ? cwin_ack(p->win, tag, multiple)
                : cwin_nack(p->win, tag, multiple);
    }
    if (n == 0) {
        log_debug(MOD, "confirm settled no publish", "tag=%llu multiple=%d",
                  (unsigned long long)tag, multiple);
    }
    if (ack || n == 0) {
        return;
    }
    now = tu_mono_ms();
    if (p->nack_dropped_ms != 0 && now - p->nack_dropped_ms < NACK_DROP_MS) {
        return;
    }
    p->nack_dropped_ms = now;
    p->hold_until_ms = now + NACK_HOLD_MS;
    drop(p,
         "the broker nacked a publish (tag %llu); a new connection, "
         "as a channel opened during a quorum leader election can nack "
         "everything",
         (unsigned long long)tag);
}

/* Hold (TCP_CORK) or push out what was sent. A message is three writes
 * (method, header, body frames); corked, a run of publishes leaves in full
 * segments instead of three small ones each, which on loopback also means
 * one wake-up of the broker instead of three per message. */
static void cork(amqpp_t *p, bool on)
{
    int v = on ? 1 : 0, fd;

    if (!p->conn || p->corked == on) {
        return;
    }
    fd = amqp_get_sockfd(p->conn);
    if (fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, sizeof v) == 0) {
        p->corked = on;
    }
}

/* ------------------------------------------------------------------ */
/* Connection life                                                     */

static void reset_state(amqpp_t *p)
{
    p->conn = NULL;
    p->blocked = false;
    p->content = CONTENT_NONE;
    p->body_left = 0;
    p->corked = false;
    p->query_open = false;
}

/* Drop the connection without a handshake (it is broken or we no longer
 * trust it) and remember why (declared above on_confirm). */
static void drop(amqpp_t *p, const char *fmt, ...)
{
    va_list ap;

    char lost[300];

    va_start(ap, fmt);
    vsnprintf(p->lost_reason, sizeof p->lost_reason, fmt, ap);
    va_end(ap);
    amqpc_lost(p->link); /* with a URL list, the next open moves on */
    snprintf(lost, sizeof lost, "connection lost: %s", p->lost_reason);
    if (p->win) {
        cwin_connection_lost(p->win, lost);
    }
    reset_state(p);
    log_warn(MOD, "connection dropped", "url=%s reason=\"%s\"",
             amqpc_safe_url(p->link), p->lost_reason);
}

/* Open CHANNEL and put it in confirm mode (a new channel: the window is
 * empty, its tags start again at 1). */
static rmqs_rc open_channel(amqpp_t *p, rmqs_error *err)
{
    if (!amqp_channel_open(p->conn, CHANNEL)) {
        return amqpc_rpc_fail(err, amqp_get_rpc_reply(p->conn),
                              "channel.open failed");
    }
    if (!amqp_confirm_select(p->conn, CHANNEL)) {
        return amqpc_rpc_fail(err, amqp_get_rpc_reply(p->conn),
                              "confirm.select failed");
    }
    p->content = CONTENT_NONE;
    return RMQS_OK;
}

amqpp_t *amqpp_new(const amqpp_options *opt, rmqs_error *err)
{
    amqpp_t *p;

    if (!opt || !opt->url || !*opt->url) {
        rmqs_fail(err, RMQS_EINVAL, "amqp_url", "AMQP URL is empty");
        return NULL;
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        return NULL;
    }
    init_amqp_pool(&p->pool, 4096);
    reset_state(p);
    p->policy = opt->policy;
    p->link = amqpc_new(&(amqpc_options){.url = opt->url,
                                         .name = "rmq-scheduler dispatcher",
                                         .heartbeat_s = opt->heartbeat_s,
                                         .timeout_ms = opt->connect_timeout_ms,
                                         .ca_file = opt->ca_file,
                                         .cert_file = opt->cert_file,
                                         .key_file = opt->key_file},
                        err);
    if (!p->link) {
        amqpp_free(p);
        return NULL;
    }
    return p;
}

void amqpp_free(amqpp_t *p)
{
    if (!p) {
        return;
    }
    amqpp_disconnect(p);
    amqpc_free(p->link);
    cwin_free(p->win);
    empty_amqp_pool(&p->pool);
    free(p);
}

bool amqpp_connected(const amqpp_t *p)
{
    return p && p->conn;
}

const char *amqpp_safe_url(const amqpp_t *p)
{
    return p ? amqpc_safe_url(p->link) : "";
}

rmqs_rc amqpp_connect(amqpp_t *p, rmqs_error *err)
{
    rmqs_error e = {{0}, {0}};
    rmqs_rc rc;

    if (p->conn) {
        return RMQS_OK;
    }
    if (tu_mono_ms() < p->hold_until_ms) { /* see DESIGN, nacks */
        return rmqs_fail(err, RMQS_EBROKER, NULL,
                         "holding off for %d ms after a nack before the "
                         "next connection",
                         NACK_HOLD_MS);
    }
    rc = amqpc_open(p->link, &e);
    if (rc == RMQS_OK) {
        p->conn = amqpc_state(p->link);
        rc = open_channel(p, &e);
    }
    if (rc != RMQS_OK) {
        /* Opened but no confirm channel: that node cannot serve us now. */
        amqpc_lost(p->link);
        reset_state(p);
        snprintf(p->lost_reason, sizeof p->lost_reason, "%s", e.message);
        return rmqs_fail(err, RMQS_EBROKER, NULL, "%s", e.message);
    }
    p->frame_max = amqpc_frame_max(p->link);
    p->blocked = false;
    log_info(MOD, "connected",
             "url=%s heartbeat_s=%d frame_max=%d broker_version=%s",
             amqpc_safe_url(p->link), amqpc_heartbeat_s(p->link), p->frame_max,
             amqpc_broker_version(p->link));
    return RMQS_OK;
}

void amqpp_disconnect(amqpp_t *p)
{
    if (!p || !p->conn) {
        return;
    }
    cork(p, false);
    amqpc_close(p->link, 0);
    if (p->win) {
        cwin_connection_lost(p->win, "connection closed before the confirm");
    }
    reset_state(p);
    log_info(MOD, "disconnected", "url=%s", amqpc_safe_url(p->link));
}

/* ------------------------------------------------------------------ */
/* Frames                                                              */

static void on_connection_method(amqpp_t *p, const amqp_method_t *m)
{
    char reason[256];

    switch (m->id) {
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *c = m->decoded;
        amqp_connection_close_ok_t ok = {0};
        amqpc_reply_text(reason, sizeof reason, c->reply_code, c->reply_text);
        (void)amqp_send_method(p->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD,
                               &ok);
        drop(p, "connection closed by the broker: %s", reason);
        break;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD: {
        const amqp_connection_blocked_t *bl = m->decoded;
        copy_bytes(reason, sizeof reason, bl->reason);
        p->blocked = true;
        log_warn(MOD, "broker blocked publishing", "url=%s reason=\"%s\"",
                 amqpc_safe_url(p->link), reason);
        break;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        p->blocked = false;
        log_info(MOD, "broker unblocked publishing", "url=%s",
                 amqpc_safe_url(p->link));
        break;
    default:
        log_debug(MOD, "ignored frame", "channel=0 method=%s",
                  amqp_method_name(m->id));
        break;
    }
}

static void on_channel_method(amqpp_t *p, const amqp_method_t *m)
{
    char reason[256];
    rmqs_error e;

    if (p->content != CONTENT_NONE) { /* a method ends any content */
        p->content = CONTENT_NONE;
    }
    switch (m->id) {
    case AMQP_BASIC_ACK_METHOD: {
        const amqp_basic_ack_t *a = m->decoded;
        on_confirm(p, a->delivery_tag, a->multiple != 0, true);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        const amqp_basic_nack_t *a = m->decoded;
        on_confirm(p, a->delivery_tag, a->multiple != 0, false);
        break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        const amqp_basic_return_t *r = m->decoded;
        amqpc_reply_text(p->return_reason, sizeof p->return_reason,
                         r->reply_code, r->reply_text);
        p->content = CONTENT_HEADER;
        break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *c = m->decoded;
        amqp_channel_close_ok_t ok = {0};
        int res;
        amqpc_reply_text(reason, sizeof reason, c->reply_code, c->reply_text);
        res = amqp_send_method(p->conn, CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD,
                               &ok);
        log_warn(MOD, "channel closed by the broker",
                 "channel=%d reason=\"%s\"", CHANNEL, reason);
        if (p->win) {
            cwin_channel_closed(p->win, reason);
            if (cwin_probing(p->win) > 0)
                log_warn(MOD,
                         "the close named no job: publishing one at a "
                         "time to find it",
                         "probe=%zu", cwin_probing(p->win));
        }
        if (res != AMQP_STATUS_OK) {
            drop(p, "sending channel.close-ok failed: %s",
                 amqp_error_string2(res));
        } else if (open_channel(p, &e) != RMQS_OK) {
            drop(p, "reopening the channel failed: %s", e.message);
        }
        break;
    }
    default:
        log_debug(MOD, "ignored frame", "channel=%d method=%s", CHANNEL,
                  amqp_method_name(m->id));
        break;
    }
}

static void on_frame(amqpp_t *p, const amqp_frame_t *f)
{
    if (f->frame_type == AMQP_FRAME_METHOD) {
        if (f->channel == 0) {
            on_connection_method(p, &f->payload.method);
        } else if (f->channel == CHANNEL) {
            on_channel_method(p, &f->payload.method);
        }
        return;
    }
    if (f->channel != CHANNEL) {
        return;
    }
    if (f->frame_type == AMQP_FRAME_HEADER && p->content == CONTENT_HEADER) {
        p->body_left = f->payload.properties.body_size;
        p->content = p->body_left ? CONTENT_BODY : CONTENT_NONE;
        match_return(p, f->payload.properties.decoded, p->return_reason);
    } else if (f->frame_type == AMQP_FRAME_BODY && p->content == CONTENT_BODY) {
        size_t len = f->payload.body_fragment.len;
        p->body_left -= len < p->body_left ? len : p->body_left;
        if (p->body_left == 0) {
            p->content = CONTENT_NONE;
        }
    }
}

/*
 * Read and handle every frame already there; with wait_ms > 0 first wait
 * that long for one to arrive. Bounded even if frames keep coming.
 * Returns RMQS_OK, or RMQS_EBROKER when the connection is gone (dropped,
 * p->lost_reason says why).
 */
static rmqs_rc pump(amqpp_t *p, int wait_ms)
{
    int64_t deadline = tu_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    bool got_frame = false;
    size_t n = 0;

    cork(p, false); /* never wait for an answer to something held back */
    for (;;) {
        amqp_frame_t f;
        struct timeval tv = {0, 0};
        int64_t left = deadline - tu_mono_ms();
        int res;

        if (!p->conn) {
            return RMQS_EBROKER;
        }
        if (got_frame && (left <= 0 || n >= PUMP_MAX_FRAMES) &&
            !amqp_data_in_buffer(p->conn) && !amqp_frames_enqueued(p->conn)) {
            return RMQS_OK;
        }
        if (n >= 4 * PUMP_MAX_FRAMES) {
            return RMQS_OK; /* a steady stream: let the caller work too */
        }
        if (!got_frame && left > 0) {
            tv.tv_sec = (time_t)(left / 1000);
            tv.tv_usec = (suseconds_t)((left % 1000) * 1000);
        }
        res = amqp_simple_wait_frame_noblock(p->conn, &f, &tv);
        if (res == AMQP_STATUS_TIMEOUT) {
            return RMQS_OK;
        }
        if (res != AMQP_STATUS_OK) {
            drop(p, "%s", amqp_error_string2(res));
            return RMQS_EBROKER;
        }
        got_frame = true;
        n++;
        on_frame(p, &f);
        if (!p->conn) {
            return RMQS_EBROKER;
        }
        amqp_maybe_release_buffers(p->conn);
    }
}

/* The oldest unconfirmed publish has waited longer than the confirm
 * timeout: the broker is not going to answer. */
static rmqs_rc check_confirm_deadline(amqpp_t *p)
{
    char lost[300];
    int64_t sent_ms;

    if (!p->win || !cwin_oldest(p->win, &sent_ms) ||
        tu_mono_ms() - sent_ms < p->confirm_timeout_ms) {
        return RMQS_OK;
    }
    snprintf(lost, sizeof lost, "no confirm within %d ms%s%s",
             p->confirm_timeout_ms, p->blocked ? ": " : "",
             p->blocked ? BLOCKED_REASON : "");
    if (p->blocked) {
        /* The broker is alive but stopped reading our socket (it only says
         * so once we publish). Dropping the connection would just repeat
         * that on the next one; keep it and send nothing until unblocked.
         * Tags only grow, so late acks for these are ignored, never
         * credited to a later job. */
        log_warn(MOD, "confirms withheld by a blocked broker",
                 "unconfirmed=%zu", cwin_unconfirmed(p->win));
        cwin_give_up(p->win, lost);
        return RMQS_OK;
    }
    drop(p, "%s", lost);
    return RMQS_EBROKER;
}

rmqs_rc amqpp_queue_ready(amqpp_t *p, const char *queue, int64_t *ready,
                          rmqs_error *err)
{
    amqp_queue_declare_ok_t *ok;
    amqp_rpc_reply_t r;

    if (!p->conn)
        return rmqs_fail(err, RMQS_EBROKER, "", "not connected");
    cork(p, false); /* what is held back goes before we wait */
    if (!p->query_open) {
        if (!amqp_channel_open(p->conn, QUERY_CHANNEL)) {
            r = amqp_get_rpc_reply(p->conn);
            drop(p, "channel.open of the query channel failed");
            return amqpc_rpc_fail(err, r, "channel.open failed");
        }
        p->query_open = true;
    }
    /* A synchronous call: frames of the publishing channel that arrive
     * meanwhile (confirms, returns) are queued by rabbitmq-c and read by
     * the next pump (amqpp_buffered says so). */
    ok = amqp_queue_declare(p->conn, QUERY_CHANNEL, amqp_cstring_bytes(queue),
                            1 /* passive */, 0, 0, 0, amqp_empty_table);
    r = amqp_get_rpc_reply(p->conn);
    if (ok != NULL) {
        *ready = (int64_t)ok->message_count;
        return RMQS_OK;
    }
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *m = r.reply.decoded;
        amqp_channel_close_ok_t close_ok = {0};
        int code = m->reply_code;
        (void)amqp_send_method(p->conn, QUERY_CHANNEL,
                               AMQP_CHANNEL_CLOSE_OK_METHOD, &close_ok);
        p->query_open = false;
        return rmqs_fail(err, code == 404 ? RMQS_ENOTFOUND : RMQS_EBROKER, "",
                         "queue.declare %s: %d %.*s", queue, code,
                         (int)m->reply_text.len,
                         (const char *)m->reply_text.bytes);
    }
    drop(p, "queue.declare of %s failed", queue);
    return amqpc_rpc_fail(err, r, "queue.declare failed");
}

void amqpp_flush(amqpp_t *p)
{
    cork(p, false);
}

rmqs_rc amqpp_poll(amqpp_t *p, int wait_ms)
{
    rmqs_rc rc;

    if (!p->conn) {
        return RMQS_EBROKER;
    }
    rc = pump(p, wait_ms);
    if (rc == RMQS_OK && amqpp_unconfirmed(p) > 0) {
        rc = check_confirm_deadline(p);
    }
    return rc;
}

int amqpp_fd(const amqpp_t *p)
{
    return p->conn ? amqp_get_sockfd(p->conn) : -1;
}

bool amqpp_buffered(const amqpp_t *p)
{
    return p->conn &&
           (amqp_data_in_buffer(p->conn) || amqp_frames_enqueued(p->conn));
}

/* basic.publish, content header and body frames. Not amqp_basic_publish():
 * see "Liveness" at the top. */
static int send_message(amqpp_t *p, const job_t *job,
                        const amqp_basic_properties_t *props)
{
    amqp_basic_publish_t m;
    amqp_frame_t f;
    size_t off = 0, chunk = (size_t)p->frame_max - AMQPM_FRAME_OVERHEAD;
    int res;

    memset(&m, 0, sizeof m);
    m.exchange = amqp_cstring_bytes(job->exchange ? job->exchange : "");
    m.routing_key =
        amqp_cstring_bytes(job->routing_key ? job->routing_key : "");
    m.mandatory = 1;
    m.immediate = 0;
    res = amqp_send_method(p->conn, CHANNEL, AMQP_BASIC_PUBLISH_METHOD, &m);
    if (res != AMQP_STATUS_OK) {
        return res;
    }
    memset(&f, 0, sizeof f);
    f.frame_type = AMQP_FRAME_HEADER;
    f.channel = CHANNEL;
    f.payload.properties.class_id = AMQP_BASIC_CLASS;
    f.payload.properties.body_size = job->body_len;
    f.payload.properties.decoded = (void *)props;
    res = amqp_send_frame(p->conn, &f);
    while (res == AMQP_STATUS_OK && off < job->body_len) {
        size_t len = job->body_len - off < chunk ? job->body_len - off : chunk;
        memset(&f, 0, sizeof f);
        f.frame_type = AMQP_FRAME_BODY;
        f.channel = CHANNEL;
        f.payload.body_fragment.len = len;
        f.payload.body_fragment.bytes = job->body + off;
        res = amqp_send_frame(p->conn, &f);
        off += len;
    }
    return res;
}

/* ------------------------------------------------------------------ */
/* Publishing                                                          */

rmqs_rc amqpp_set_window(amqpp_t *p, size_t window, int confirm_timeout_ms,
                         amqpp_report_fn fn, void *cls)
{
    rmqs_error e;
    cwin_t *win;

    if (window == 0 || !fn || (p->win && p->conn)) {
        return RMQS_EINVAL;
    }
    win = cwin_new(window, fn, cls, &e);
    if (!win) {
        return RMQS_ENOMEM;
    }
    cwin_free(p->win); /* disconnected: empty */
    p->win = win;
    p->confirm_timeout_ms =
        confirm_timeout_ms > 0 ? confirm_timeout_ms : DEFAULT_CONFIRM_MS;
    p->on_report = fn;
    p->report_cls = cls;
    return RMQS_OK;
}

bool amqpp_can_send(const amqpp_t *p)
{
    return p->conn && p->win && !p->blocked && !cwin_full(p->win);
}

size_t amqpp_unconfirmed(const amqpp_t *p)
{
    return p->win ? cwin_unconfirmed(p->win) : 0;
}

bool amqpp_blocked(const amqpp_t *p)
{
    return p->conn && p->blocked;
}

/* Whether the publish policy refuses job here and now: its exchange is not
 * (or no longer) in --allow-exchanges, or it carries what RabbitMQ answers
 * by closing the channel under every publish in flight (a user_id other
 * than this connection's login, a CC or BCC header that is not a list). Checked at each send, so jobs stored
 * before the list changed, retried, ingested or made by a schedule are
 * held to it too. */
static bool refused(const amqpp_t *p, const job_t *job, rmqs_error *err)
{
    amqpc_url_parts u;

    if (!pubpol_exchange_allowed(p->policy, job->exchange)) {
        rmqs_fail(err, RMQS_EINVAL, "exchange",
                  "exchange '%.200s' is not in --allow-exchanges",
                  job->exchange);
        return true;
    }
    if (job->headers != NULL) {
        const char *key;
        json_t *v;
        json_object_foreach(job->headers, key, v) {
            (void)v;
            if (amqpm_broker_refused_header(key)) {
                rmqs_fail(err, RMQS_EINVAL, "headers",
                          "header '%s' is not a list, which RabbitMQ refuses "
                          "by closing the channel",
                          key);
                return true;
            }
        }
    }
    amqpc_current(p->link, &u);
    return pubpol_check_user_id(p->policy, job->properties, u.user, err) !=
           RMQS_OK;
}

rmqs_rc amqpp_send(amqpp_t *p, const job_t *job, void *ctx)
{
    amqpp_result r;
    amqpm_message m;
    rmqs_error err;
    rmqs_rc rc;
    int res;

    if (!amqpp_can_send(p)) {
        set_result(&r, AMQPP_UNSENT, "not published: %s",
                   !p->conn     ? "not connected to the broker"
                   : p->blocked ? BLOCKED_REASON
                                : "too many unconfirmed publishes");
        p->on_report(p->report_cls, ctx, &r);
        return p->conn ? RMQS_OK : RMQS_EBROKER;
    }
    if (p->sent_since_poll >= POLL_EVERY) {
        /* Heartbeats, early acks, a channel.close or connection.blocked;
         * also keeps the acks from piling up unread during a burst. */
        p->sent_since_poll = 0;
        if (pump(p, 0) != RMQS_OK || !amqpp_can_send(p)) {
            return amqpp_send(p, job, ctx); /* reports it unsent */
        }
    }
    if (refused(p, job, &err)) {
        /* Never sent: the job fails now, and nobody else's does. */
        log_warn(MOD, "job refused by the publish policy",
                 "job_id=%s reason=\"%s\"", job->id, err.message);
        set_result(&r, AMQPP_REFUSED, "not published: %s", err.message);
        p->on_report(p->report_cls, ctx, &r);
        return RMQS_OK;
    }
    recycle_amqp_pool(&p->pool);
    rc = amqpm_build(job, p->frame_max, &p->pool, &m, &err);
    if (rc == RMQS_ENOMEM) {
        /* Nothing wrong with the job: publish it again later. */
        set_result(&r, AMQPP_UNSENT, "not published: %s", err.message);
        p->on_report(p->report_cls, ctx, &r);
        return RMQS_OK;
    }
    if (rc != RMQS_OK) {
        /* Retrying cannot help; let the attempt fail like a nack. */
        log_warn(MOD, "job not publishable", "job_id=%s reason=\"%s\"", job->id,
                 err.message);
        set_result(&r, AMQPP_NACKED, "not publishable: %s", err.message);
        p->on_report(p->report_cls, ctx, &r);
        return RMQS_OK;
    }
    cork(p, true);
    (void)cwin_publish(p->win, job->id, job->exchange, ctx, tu_mono_ms());
    p->sent_since_poll++;
    res = send_message(p, job, &m.props);
    recycle_amqp_pool(&p->pool);
    if (res != AMQP_STATUS_OK) {
        drop(p, "publish failed: %s", amqp_error_string2(res)); /* reports */
        return RMQS_EBROKER;
    }
    return RMQS_OK;
}
