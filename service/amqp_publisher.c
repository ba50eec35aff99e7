/*
 * amqp_publisher.c - publish jobs to RabbitMQ on a confirm channel and tell,
 * per job, what the broker said.
 *
 * Why this exists: a job may only be marked sent once the broker has taken
 * responsibility for it. That is a publisher confirm (basic.ack) for a message
 * that was routed (mandatory=1, so an unroutable one comes back first as
 * basic.return). rabbitmq-c 0.11 has no helper to wait for confirms
 * (amqp_publisher_confirm_wait arrived in 0.15), so this module reads every
 * frame itself with amqp_simple_wait_frame_noblock() and keeps the
 * bookkeeping of the publishes still unconfirmed (the window).
 *
 * DESIGN
 * - Pipelined: amqpp_send() writes a message and returns; confirms are read
 *   whenever the owner calls amqpp_poll() (or the next sends poll), and each
 *   job is reported exactly once through the owner's report function. The
 *   dispatcher therefore publishes a job the moment it is due, whatever is
 *   still unconfirmed, and the broker, not a round trip per batch, sets the
 *   pace (the window bounds memory and what a lost connection repeats).
 * - One connection, one channel (1) in confirm mode. The broker numbers the
 *   publishes on a channel 1, 2, 3... from confirm.select on; p->next_tag
 *   mirrors that counter and starts again at 1 whenever the channel is
 *   (re)opened, which only happens with an empty window. Tag t lives in
 *   win[(t - 1) % cap]; low_tag is the oldest tag not yet reported, so a
 *   run of multiple acks costs O(window) in total.
 * - basic.ack / basic.nack settle one tag, or with multiple=1 every
 *   unsettled tag up to it.
 * - basic.return carries no delivery tag. It is followed by the returned
 *   message's content header (and body frames); the header's
 *   x-scheduler-job-id (or, failing that, message_id) names the job. Returns
 *   come in publish order, always before the ack of the same message, so the
 *   search starts after the previous match. A returned job is reported
 *   AMQPP_RETURNED when its ack arrives (the broker acks unroutable mandatory
 *   messages). The content state machine (p->content) is independent of the
 *   window, so a return split across two reads is skipped correctly.
 * - channel.close (e.g. 404 NOT_FOUND no exchange 'x'): the broker drops
 *   every later publish on the channel. Unconfirmed jobs whose exchange is
 *   quoted in the reply text get AMQPP_CLOSED; if none is, all of them do;
 *   the others get AMQPP_UNSENT (publish again). The channel is reopened and
 *   confirm.select sent again (tags restart at 1). Measured: a job published
 *   before the culprit is usually enqueued already, but its confirm dies
 *   with the channel, so publishing it again duplicates it (at-least-once;
 *   consumers dedupe on message_id / x-scheduler-job-id).
 * - connection.close, socket errors, heartbeat timeouts and a confirm that
 *   does not come within the confirm timeout drop the connection:
 *   unconfirmed jobs become AMQPP_LOST. A late ack can never be credited to
 *   the wrong job: tags die with the channel, and on a kept channel they
 *   only grow (acks below low_tag are ignored).
 * - connection.blocked (resource alarm) is remembered; while blocked,
 *   amqpp_can_send() is false and a send is reported AMQPP_UNSENT at once.
 *   RabbitMQ only sends connection.blocked to a connection that publishes,
 *   and then stops reading it: what stays unconfirmed past the confirm
 *   timeout is reported AMQPP_LOST, but the connection is kept, since a new
 *   one would only repeat it.
 * - A job that cannot be encoded (a header name over 255 bytes, headers
 *   larger than a frame...) is checked before anything is sent and reported
 *   AMQPP_NACKED "not publishable: ...": retrying cannot help, and an
 *   encoder error after basic.publish went out would break the connection.
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
 *   TCP_USER_TIMEOUT (2 x heartbeat) makes the kernel fail a send stuck
 *   that long, unacked or behind a zero window, so a stopped or vanished
 *   broker cannot hang the dispatcher thread (verified: SIGSTOP of the
 *   broker during a 128 MiB publish returns after ~4.3 s with heartbeat 2 s;
 *   without the option it hangs).
 * - amqps:// uses the system trust store (SSL_CTX_set_default_verify_paths,
 *   so SSL_CERT_FILE / SSL_CERT_DIR apply), peer and host name verified,
 *   TLS 1.2 at least. libssl comes with the rabbitmq::rabbitmq target.
 *
 * Frame memory belongs to the connection's pools: everything needed is
 * copied (reply texts into fixed buffers) before amqp_maybe_release_buffers().
 * Header tables for a message are built in the publisher's amqp_pool_t,
 * recycled after each message; the window is one array of `window` slots
 * allocated once. Nothing grows with the number of publishes.
 *
 * The password is copied once, used only for the login and wiped on free;
 * logs and error messages use the safe URL ("user:***@").
 */
#include "amqp_publisher.h"

#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <arpa/inet.h>
#include <openssl/x509v3.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "timeutil.h"

#define MOD "amqp"
#define CHANNEL 1
#define POLL_EVERY 64            /* publishes between two socket polls */
#define PUMP_MAX_FRAMES 256      /* frames handled before a poll returns */
#define FRAME_OVERHEAD 8         /* type, channel, size, end marker */
#define HEADER_PAYLOAD_FIXED 14  /* class, weight, body size, flags */
#define MAX_HEADER_DEPTH 8       /* nested tables/arrays in headers */
#define DEFAULT_TIMEOUT_MS 10000 /* connect/handshake/RPC when not set */
#define DEFAULT_CONFIRM_MS 30000 /* confirm_timeout_ms <= 0 */
#define SHORTSTR_MAX 255

#define HDR_JOB_ID "x-scheduler-job-id"
#define HDR_SCHEDULED_AT "x-scheduled-at"
#define HDR_DELAY "x-delay"

#define BLOCKED_REASON "broker blocked publishing (resource alarm)"

typedef enum content_state {
    CONTENT_NONE,   /* no returned message being read */
    CONTENT_HEADER, /* basic.return seen, its content header is next */
    CONTENT_BODY    /* skipping body_left bytes of body frames */
} content_state;

/* One unconfirmed publish. */
enum flight_state {
    FL_FREE = 0,  /* slot unused (reported) */
    FL_INFLIGHT,  /* published, not settled */
    FL_RETURNED   /* published, returned, its ack still due */
};

typedef struct flight {
    const job_t *job;  /* borrowed from the caller until reported */
    void *ctx;         /* the caller's, given back in the report */
    int64_t sent_ms;   /* monotonic */
    unsigned char state;
    char reason[256];  /* FL_RETURNED: "312 NO_ROUTE" */
} flight;

struct amqpp {
    char *host;
    char *vhost;
    char *user;
    char *password; /* wiped on free */
    int port;
    bool tls;
    char *safe_url;
    char *ca_file, *cert_file, *key_file; /* amqps options, or NULL */
    int heartbeat_s;
    int timeout_ms; /* connect, handshake and RPC bound */

    amqp_connection_state_t conn; /* NULL while disconnected */
    int frame_max;
    bool blocked;
    uint64_t next_tag; /* delivery tag of the next publish on CHANNEL */

    content_state content;
    uint64_t body_left;
    char return_reason[256]; /* "312 NO_ROUTE" */
    char lost_reason[256];   /* why the connection was last dropped */

    /* The window: publishes not yet confirmed, by delivery tag. Tags
     * low_tag..next_tag-1 live in win[(tag - 1) % cap]; every tag below
     * low_tag has been reported. */
    flight *win;
    size_t cap;
    uint64_t low_tag;
    uint64_t return_cursor;  /* where the next basic.return match starts */
    size_t unconfirmed;      /* slots not FL_FREE */
    size_t sent_since_poll;
    bool corked;             /* TCP_CORK set: sends are held until flushed */
    int confirm_timeout_ms;
    amqpp_report_fn on_report;
    void *report_cls;
    amqp_pool_t pool;        /* header tables of the message being sent */
};

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

static void set_result(amqpp_result *r, amqpp_result_kind kind,
                       const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_result(amqpp_result *r, amqpp_result_kind kind,
                       const char *fmt, ...)
{
    va_list ap;

    r->kind = kind;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
}

/* "<code> <text>" from a reply code and pool-owned, unterminated text. */
static void format_reply(char *out, size_t cap, unsigned code, amqp_bytes_t text)
{
    int len = text.len > 200 ? 200 : (int)text.len;

    snprintf(out, cap, "%u %.*s", code, len,
             text.bytes ? (const char *)text.bytes : "");
}

static void describe_rpc(amqp_rpc_reply_t r, char *out, size_t cap)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        snprintf(out, cap, "ok");
        break;
    case AMQP_RESPONSE_NONE:
        snprintf(out, cap, "no RPC reply");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(out, cap, "%s", amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            const amqp_connection_close_t *c = r.reply.decoded;
            format_reply(out, cap, c->reply_code, c->reply_text);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            const amqp_channel_close_t *c = r.reply.decoded;
            format_reply(out, cap, c->reply_code, c->reply_text);
        } else {
            snprintf(out, cap, "unexpected %s", amqp_method_name(r.reply.id));
        }
        break;
    default:
        snprintf(out, cap, "unknown RPC reply type %d", (int)r.reply_type);
        break;
    }
}

/* Append s to out, percent-encoding what is not unreserved (RFC 3986). */
static void pct_append(char *out, size_t cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t len = strlen(out);

    for (; *s && len + 4 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
            c == '~') {
            out[len++] = (char)c;
        } else {
            out[len++] = '%';
            out[len++] = hex[c >> 4];
            out[len++] = hex[c & 15];
        }
    }
    out[len] = '\0';
}

/* amqp[s]://user:***@host:port/vhost, rebuilt from the parsed parts so the
 * password cannot leak through any odd spelling of the original. */
static char *make_safe_url(const amqpp_t *p)
{
    size_t cap = 3 * (strlen(p->user) + strlen(p->vhost)) + strlen(p->host) +
                 64;
    char *out = malloc(cap);
    bool v6 = strchr(p->host, ':') != NULL;

    if (!out) {
        return NULL;
    }
    snprintf(out, cap, "%s://", p->tls ? "amqps" : "amqp");
    pct_append(out, cap, p->user);
    snprintf(out + strlen(out), cap - strlen(out), ":***@%s%s%s:%d/",
             v6 ? "[" : "", p->host, v6 ? "]" : "", p->port);
    pct_append(out, cap, p->vhost);
    return out;
}

/* Whether 'name' appears, single-quoted, in text (RabbitMQ's reply texts
 * quote names: "NOT_FOUND - no exchange 'x' in vhost '/'"). */
static bool quoted_in(const char *text, const char *name)
{
    size_t len = strlen(name);
    const char *q;

    for (q = strchr(text, '\''); q; q = strchr(q + 1, '\'')) {
        if (strncmp(q + 1, name, len) == 0 && q[1 + len] == '\'') {
            return true;
        }
    }
    return false;
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
/* The window of unconfirmed publishes                                 */

static flight *slot(amqpp_t *p, uint64_t tag)
{
    return &p->win[(tag - 1) % p->cap];
}

/* Tell the owner what became of f's job and free the slot. */
static void report(amqpp_t *p, flight *f, const amqpp_result *r)
{
    void *ctx = f->ctx;

    f->state = FL_FREE;
    f->job = NULL;
    f->ctx = NULL;
    p->unconfirmed--;
    p->on_report(p->report_cls, ctx, r);
}

static void report_kind(amqpp_t *p, flight *f, amqpp_result_kind kind,
                        const char *reason)
{
    amqpp_result r;

    set_result(&r, kind, "%s", reason);
    report(p, f, &r);
}

/* Move low_tag past the slots already reported. */
static void advance_low(amqpp_t *p)
{
    while (p->low_tag < p->next_tag && slot(p, p->low_tag)->state == FL_FREE) {
        p->low_tag++;
    }
}

static void settle_one(amqpp_t *p, flight *f, bool ack)
{
    switch (f->state) {
    case FL_INFLIGHT:
        report_kind(p, f, ack ? AMQPP_ACKED : AMQPP_NACKED,
                    ack ? "" : "nacked by the broker");
        break;
    case FL_RETURNED:
        /* The broker acks an unroutable mandatory message after returning
         * it: the return is the answer. A nack still wins. */
        report_kind(p, f, ack ? AMQPP_RETURNED : AMQPP_NACKED,
                    ack ? f->reason : "nacked by the broker");
        break;
    default:
        break;
    }
}

static void settle_tags(amqpp_t *p, uint64_t tag, bool multiple, bool ack)
{
    uint64_t lo, hi, t;

    if (p->low_tag >= p->next_tag) {
        return; /* nothing unconfirmed */
    }
    if (multiple && tag == 0) { /* AMQP: "all outstanding" */
        hi = p->next_tag - 1;
    } else if (tag < p->low_tag) {
        return; /* settled already (or given up on: confirm timeout) */
    } else if (tag >= p->next_tag) {
        if (!multiple) {
            log_debug(MOD, "confirm for an unknown delivery tag", "tag=%llu",
                      (unsigned long long)tag);
            return;
        }
        hi = p->next_tag - 1;
    } else {
        hi = tag;
    }
    lo = multiple ? p->low_tag : hi;
    for (t = lo; t <= hi; t++) {
        settle_one(p, slot(p, t), ack);
    }
    advance_low(p);
}

/* A basic.return's content header arrived: find its publish. Returns come
 * in publish order, so the search starts after the previous match. */
static void match_return(amqpp_t *p, const amqp_basic_properties_t *props,
                         const char *reason)
{
    amqp_bytes_t id = {0, NULL};
    uint64_t span = p->next_tag - p->low_tag, c, t;
    int e;

    if (props && (props->_flags & AMQP_BASIC_HEADERS_FLAG)) {
        for (e = 0; e < props->headers.num_entries; e++) {
            const amqp_table_entry_t *h = &props->headers.entries[e];
            if (h->key.len == strlen(HDR_JOB_ID) &&
                memcmp(h->key.bytes, HDR_JOB_ID, h->key.len) == 0 &&
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
    if (p->return_cursor < p->low_tag || p->return_cursor >= p->next_tag) {
        p->return_cursor = p->low_tag;
    }
    for (c = 0; id.len && c < span; c++) {
        flight *f;
        t = p->low_tag + (p->return_cursor - p->low_tag + c) % span;
        f = slot(p, t);
        if (f->state == FL_INFLIGHT && strlen(f->job->id) == id.len &&
            memcmp(f->job->id, id.bytes, id.len) == 0) {
            f->state = FL_RETURNED;
            snprintf(f->reason, sizeof f->reason, "%s", reason);
            p->return_cursor = t + 1;
            return;
        }
    }
    log_warn(MOD, "basic.return matches no unconfirmed publish",
             "reason=\"%s\" id_len=%zu", reason, id.len);
}

/* The broker closed the channel: every unconfirmed publish gets its result
 * (the culprits AMQPP_CLOSED, the others AMQPP_UNSENT: publish again). */
static void close_window(amqpp_t *p, const char *reason)
{
    char unsent[300];
    size_t matched = 0;
    uint64_t t;

    for (t = p->low_tag; t < p->next_tag; t++) {
        flight *f = slot(p, t);
        if (f->state == FL_INFLIGHT &&
            quoted_in(reason, f->job->exchange ? f->job->exchange : "")) {
            report_kind(p, f, AMQPP_CLOSED, reason);
            matched++;
        }
    }
    snprintf(unsent, sizeof unsent,
             "channel closed by the broker before the confirm: %.200s", reason);
    for (t = p->low_tag; t < p->next_tag; t++) {
        flight *f = slot(p, t);
        if (f->state == FL_INFLIGHT) {
            report_kind(p, f, matched ? AMQPP_UNSENT : AMQPP_CLOSED,
                        matched ? unsent : reason);
        } else if (f->state == FL_RETURNED) {
            report_kind(p, f, AMQPP_RETURNED, f->reason);
        }
    }
    p->low_tag = p->next_tag;
}

/* The connection is gone (or the confirms will not come): unconfirmed
 * publishes are lost, returned ones keep the broker's answer. */
static void lose_window(amqpp_t *p, const char *reason)
{
    uint64_t t;

    if (!p->win) {
        return;
    }
    for (t = p->low_tag; t < p->next_tag; t++) {
        flight *f = slot(p, t);
        if (f->state == FL_INFLIGHT) {
            report_kind(p, f, AMQPP_LOST, reason);
        } else if (f->state == FL_RETURNED) {
            report_kind(p, f, AMQPP_RETURNED, f->reason);
        }
    }
    p->low_tag = p->next_tag;
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
    p->next_tag = 1;
    p->low_tag = 1;
    p->return_cursor = 1;
    p->content = CONTENT_NONE;
    p->body_left = 0;
    p->corked = false;
}

/* Drop the connection without a handshake (it is broken or we no longer
 * trust it) and remember why. */
static void drop(amqpp_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void drop(amqpp_t *p, const char *fmt, ...)
{
    va_list ap;

    char lost[300];

    va_start(ap, fmt);
    vsnprintf(p->lost_reason, sizeof p->lost_reason, fmt, ap);
    va_end(ap);
    if (p->conn) {
        amqp_destroy_connection(p->conn);
    }
    snprintf(lost, sizeof lost, "connection lost: %s", p->lost_reason);
    lose_window(p, lost);
    reset_state(p);
    log_warn(MOD, "connection dropped", "url=%s reason=\"%s\"", p->safe_url,
             p->lost_reason);
}

/* Open CHANNEL and put it in confirm mode; tags restart at 1. */
static int open_channel(amqpp_t *p, char *why, size_t cap)
{
    char detail[200];

    if (!amqp_channel_open(p->conn, CHANNEL)) {
        describe_rpc(amqp_get_rpc_reply(p->conn), detail, sizeof detail);
        snprintf(why, cap, "channel.open failed: %s", detail);
        return -1;
    }
    if (!amqp_confirm_select(p->conn, CHANNEL)) {
        describe_rpc(amqp_get_rpc_reply(p->conn), detail, sizeof detail);
        snprintf(why, cap, "confirm.select failed: %s", detail);
        return -1;
    }
    p->next_tag = 1; /* the window is empty here */
    p->low_tag = 1;
    p->return_cursor = 1;
    p->content = CONTENT_NONE;
    return 0;
}

static void set_user_timeout(amqpp_t *p, int heartbeat_s)
{
    unsigned int ms = (unsigned int)heartbeat_s * 2000u;
    int fd = amqp_get_sockfd(p->conn);

    if (heartbeat_s <= 0 || fd < 0) {
        return;
    }
    if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) != 0) {
        log_debug(MOD, "TCP_USER_TIMEOUT not set", "errno=%d", errno);
    }
}

static void server_version(amqp_connection_state_t conn, char *out, size_t cap)
{
    const amqp_table_t *t = amqp_get_server_properties(conn);
    int i;

    snprintf(out, cap, "unknown");
    for (i = 0; t && i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == 7 && memcmp(e->key.bytes, "version", 7) == 0 &&
            (e->value.kind == AMQP_FIELD_KIND_UTF8 ||
             e->value.kind == AMQP_FIELD_KIND_BYTES)) {
            copy_bytes(out, cap, e->value.value.bytes);
        }
    }
}

amqpp_t *amqpp_new(const amqpp_options *opt, rmqs_error *err)
{
    struct amqp_connection_info ci;
    amqpp_t *p = NULL;
    char *buf = NULL;
    size_t buf_len = 0;

    if (!opt || !opt->url || !*opt->url) {
        rmqs_fail(err, RMQS_EINVAL, "amqp_url", "AMQP URL is empty");
        goto fail;
    }
    if (opt->heartbeat_s < 0 || opt->heartbeat_s > 65535) {
        rmqs_fail(err, RMQS_EINVAL, "heartbeat_s",
                  "heartbeat must be between 0 and 65535 seconds");
        goto fail;
    }
    buf_len = strlen(opt->url);
    buf = strdup(opt->url); /* amqp_parse_url writes into its input */
    if (!buf) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        goto fail;
    }
    /* Never echo the URL: it holds the password. */
    if (amqp_parse_url(buf, &ci) != AMQP_STATUS_OK) {
        rmqs_fail(err, RMQS_EINVAL, "amqp_url",
                  "invalid AMQP URL (expected "
                  "amqp[s]://user:password@host:port/vhost)");
        goto fail;
    }
    if (!*ci.host) {
        rmqs_fail(err, RMQS_EINVAL, "amqp_url", "AMQP URL has no host");
        goto fail;
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        goto fail;
    }
    init_amqp_pool(&p->pool, 4096);
    p->host = strdup(ci.host);
    /* "amqp://host/" strictly names the vhost "", which RabbitMQ cannot
     * have; like most clients, read it (and no path) as the default "/". */
    p->vhost = strdup(*ci.vhost ? ci.vhost : "/");
    p->user = strdup(ci.user);
    p->password = strdup(ci.password);
    p->port = ci.port;
    p->tls = ci.ssl != 0;
    p->heartbeat_s = opt->heartbeat_s;
    if ((opt->ca_file && !(p->ca_file = strdup(opt->ca_file))) ||
        (opt->cert_file && !(p->cert_file = strdup(opt->cert_file))) ||
        (opt->key_file && !(p->key_file = strdup(opt->key_file)))) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        goto fail;
    }
    if ((p->cert_file == NULL) != (p->key_file == NULL)) {
        rmqs_fail(err, RMQS_EINVAL, "amqp-cert-file",
                  "a client certificate needs both a certificate and a key file");
        goto fail;
    }
    p->timeout_ms = opt->connect_timeout_ms > 0 ? opt->connect_timeout_ms
                                                : DEFAULT_TIMEOUT_MS;
    reset_state(p);
    if (!p->host || !p->vhost || !p->user || !p->password) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        goto fail;
    }
    p->safe_url = make_safe_url(p);
    if (!p->safe_url) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        goto fail;
    }
    explicit_bzero(buf, buf_len);
    free(buf);
    return p;

fail:
    if (buf) {
        explicit_bzero(buf, buf_len);
        free(buf);
    }
    amqpp_free(p);
    return NULL;
}

void amqpp_free(amqpp_t *p)
{
    if (!p) {
        return;
    }
    amqpp_disconnect(p);
    if (p->password) {
        explicit_bzero(p->password, strlen(p->password));
    }
    free(p->password);
    free(p->host);
    free(p->vhost);
    free(p->ca_file);
    free(p->cert_file);
    free(p->key_file);
    free(p->user);
    free(p->safe_url);
    free(p->win);
    empty_amqp_pool(&p->pool);
    free(p);
}

bool amqpp_connected(const amqpp_t *p)
{
    return p && p->conn;
}

const char *amqpp_safe_url(const amqpp_t *p)
{
    return p ? p->safe_url : "";
}

static bool is_ip_literal(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The socket for the URL's scheme. For amqps: peer and host name are
 * verified against the system trust store (SSL_CERT_FILE/SSL_CERT_DIR are
 * honoured), TLS 1.2 at least. */
static amqp_socket_t *new_socket(amqpp_t *p, amqp_connection_state_t conn,
                                 char *why, size_t cap)
{
    amqp_socket_t *s;
    SSL_CTX *ctx;

    if (!p->tls) {
        s = amqp_tcp_socket_new(conn);
        if (!s) {
            snprintf(why, cap, "cannot create a TCP socket");
        }
        return s;
    }
    s = amqp_ssl_socket_new(conn);
    if (!s) {
        snprintf(why, cap, "cannot create a TLS socket");
        return NULL;
    }
    amqp_ssl_socket_set_verify_peer(s, 1);
    ctx = amqp_ssl_socket_get_context(s);
    if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
        snprintf(why, cap, "cannot configure TLS");
        return NULL;
    }
    if (is_ip_literal(p->host)) {
        /* rabbitmq-c 0.11 checks names against DNS entries only, so a
         * certificate for IP:127.0.0.1 never matches: let OpenSSL check the
         * IP address during verification instead. */
        amqp_ssl_socket_set_verify_hostname(s, 0);
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_CTX_get0_param(ctx), p->host) != 1) {
            snprintf(why, cap, "cannot set up verification of %s", p->host);
            return NULL;
        }
    } else {
        amqp_ssl_socket_set_verify_hostname(s, 1);
    }
    if (p->ca_file != NULL) {
        if (amqp_ssl_socket_set_cacert(s, p->ca_file) != AMQP_STATUS_OK) {
            snprintf(why, cap, "cannot load the CA file %s", p->ca_file);
            return NULL;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        snprintf(why, cap, "cannot load the system trust store");
        return NULL;
    }
    if (p->cert_file != NULL &&
        amqp_ssl_socket_set_key(s, p->cert_file, p->key_file) != AMQP_STATUS_OK) {
        snprintf(why, cap, "cannot load the client certificate %s / key %s",
                 p->cert_file, p->key_file);
        return NULL;
    }
    return s;
}

rmqs_rc amqpp_connect(amqpp_t *p, rmqs_error *err)
{
    amqp_connection_state_t conn = NULL;
    amqp_socket_t *sock;
    amqp_rpc_reply_t reply;
    amqp_table_entry_t caps[1], props[4];
    amqp_table_t caps_table, props_table;
    struct timeval tv;
    char why[240], detail[200], version[32];
    rmqs_rc rc = RMQS_EBROKER;
    int res;

    if (p->conn) {
        return RMQS_OK;
    }
    tv.tv_sec = p->timeout_ms / 1000;
    tv.tv_usec = (p->timeout_ms % 1000) * 1000;

    conn = amqp_new_connection();
    if (!conn) {
        rc = rmqs_fail(err, RMQS_EBROKER, NULL,
                       "cannot create an AMQP connection: out of memory");
        goto fail;
    }
    sock = new_socket(p, conn, why, sizeof why);
    if (!sock) {
        rc = rmqs_fail(err, RMQS_EBROKER, NULL, "%s", why);
        goto fail;
    }
    res = amqp_socket_open_noblock(sock, p->host, p->port, &tv);
    if (res != AMQP_STATUS_OK) {
        /* errno is not meaningful here (non-blocking connect). */
        rc = rmqs_fail(err, RMQS_EBROKER, NULL, "connect to %s:%d failed: %s",
                       p->host, p->port, amqp_error_string2(res));
        goto fail;
    }
    amqp_set_handshake_timeout(conn, &tv);
    amqp_set_rpc_timeout(conn, &tv);

    /* Merged by rabbitmq-c with its own (authentication_failure_close,
     * exchange_exchange_bindings, product...): ours win. */
    caps[0].key = amqp_cstring_bytes("connection.blocked");
    caps[0].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[0].value.value.boolean = 1;
    caps_table.num_entries = 1;
    caps_table.entries = caps;
    props[0].key = amqp_cstring_bytes("product");
    props[0].value.kind = AMQP_FIELD_KIND_UTF8;
    props[0].value.value.bytes = amqp_cstring_bytes("rmq-scheduler");
    props[1].key = amqp_cstring_bytes("version");
    props[1].value.kind = AMQP_FIELD_KIND_UTF8;
    props[1].value.value.bytes = amqp_cstring_bytes(RMQS_VERSION);
    props[2].key = amqp_cstring_bytes("connection_name");
    props[2].value.kind = AMQP_FIELD_KIND_UTF8;
    props[2].value.value.bytes = amqp_cstring_bytes("rmq-scheduler dispatcher");
    props[3].key = amqp_cstring_bytes("capabilities");
    props[3].value.kind = AMQP_FIELD_KIND_TABLE;
    props[3].value.value.table = caps_table;
    props_table.num_entries = 4;
    props_table.entries = props;

    reply = amqp_login_with_properties(conn, p->vhost, 0,
                                       AMQP_DEFAULT_FRAME_SIZE, p->heartbeat_s,
                                       &props_table, AMQP_SASL_METHOD_PLAIN,
                                       p->user, p->password);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
        describe_rpc(reply, detail, sizeof detail);
        rc = rmqs_fail(err, RMQS_EBROKER, NULL, "login %s on %s:%d: %s",
                       reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION
                           ? "refused"
                           : "failed",
                       p->host, p->port, detail);
        goto fail;
    }
    p->conn = conn;
    if (open_channel(p, why, sizeof why) != 0) {
        p->conn = NULL;
        rc = rmqs_fail(err, RMQS_EBROKER, NULL, "%s", why);
        goto fail;
    }
    p->frame_max = amqp_get_frame_max(conn);
    p->blocked = false;
    set_user_timeout(p, amqp_get_heartbeat(conn));
    server_version(conn, version, sizeof version);
    log_info(MOD, "connected",
             "url=%s heartbeat_s=%d frame_max=%d broker_version=%s",
             p->safe_url, amqp_get_heartbeat(conn), p->frame_max, version);
    return RMQS_OK;

fail:
    if (conn) {
        amqp_destroy_connection(conn);
    }
    reset_state(p);
    if (err) {
        snprintf(p->lost_reason, sizeof p->lost_reason, "%s", err->message);
    }
    return rc;
}

void amqpp_disconnect(amqpp_t *p)
{
    if (!p || !p->conn) {
        return;
    }
    /* Bounded by the RPC timeout; the answer does not matter. */
    cork(p, false);
    (void)amqp_connection_close(p->conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(p->conn);
    lose_window(p, "connection closed before the confirm");
    reset_state(p);
    log_info(MOD, "disconnected", "url=%s", p->safe_url);
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
        format_reply(reason, sizeof reason, c->reply_code, c->reply_text);
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
                 p->safe_url, reason);
        break;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        p->blocked = false;
        log_info(MOD, "broker unblocked publishing", "url=%s", p->safe_url);
        break;
    default:
        log_debug(MOD, "ignored frame", "channel=0 method=%s",
                  amqp_method_name(m->id));
        break;
    }
}

static void on_channel_method(amqpp_t *p, const amqp_method_t *m)
{
    char reason[256], why[240];

    if (p->content != CONTENT_NONE) { /* a method ends any content */
        p->content = CONTENT_NONE;
    }
    switch (m->id) {
    case AMQP_BASIC_ACK_METHOD: {
        const amqp_basic_ack_t *a = m->decoded;
        settle_tags(p, a->delivery_tag, a->multiple != 0, true);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        const amqp_basic_nack_t *a = m->decoded;
        settle_tags(p, a->delivery_tag, a->multiple != 0, false);
        break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        const amqp_basic_return_t *r = m->decoded;
        format_reply(p->return_reason, sizeof p->return_reason, r->reply_code,
                     r->reply_text);
        p->content = CONTENT_HEADER;
        break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *c = m->decoded;
        amqp_channel_close_ok_t ok = {0};
        int res;
        format_reply(reason, sizeof reason, c->reply_code, c->reply_text);
        res = amqp_send_method(p->conn, CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD,
                               &ok);
        log_warn(MOD, "channel closed by the broker", "channel=%d reason=\"%s\"",
                 CHANNEL, reason);
        close_window(p, reason);
        if (res != AMQP_STATUS_OK) {
            drop(p, "sending channel.close-ok failed: %s",
                 amqp_error_string2(res));
        } else if (open_channel(p, why, sizeof why) != 0) {
            drop(p, "reopening the channel failed: %s", why);
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
    uint64_t t;

    for (t = p->low_tag; t < p->next_tag; t++) {
        flight *f = slot(p, t);
        if (f->state == FL_FREE) {
            continue;
        }
        if (tu_mono_ms() - f->sent_ms < p->confirm_timeout_ms) {
            return RMQS_OK;
        }
        break;
    }
    if (t == p->next_tag) {
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
                 "unconfirmed=%zu", p->unconfirmed);
        lose_window(p, lost);
        return RMQS_OK;
    }
    drop(p, "%s", lost);
    return RMQS_EBROKER;
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
    if (rc == RMQS_OK && p->unconfirmed > 0) {
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

/* ------------------------------------------------------------------ */
/* Building a message                                                  */

static int build_value(amqp_pool_t *pool, json_t *v, amqp_field_value_t *out,
                       int depth, size_t *size, char *why, size_t cap);

static int build_table(amqp_pool_t *pool, json_t *obj, amqp_table_t *out,
                       int depth, size_t *size, char *why, size_t cap)
{
    const char *key;
    json_t *v;
    int n = 0;

    out->num_entries = 0;
    out->entries = NULL;
    *size += 4;
    if (json_object_size(obj) == 0) {
        return 0;
    }
    out->entries = amqp_pool_alloc(pool, json_object_size(obj) *
                                             sizeof(amqp_table_entry_t));
    if (!out->entries) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    json_object_foreach(obj, key, v) {
        size_t klen = strlen(key);
        if (klen == 0 || klen > SHORTSTR_MAX) {
            snprintf(why, cap, "header name of %zu bytes (1-255 allowed)",
                     klen);
            return -1;
        }
        out->entries[n].key = amqp_cstring_bytes(key);
        *size += 1 + klen;
        if (build_value(pool, v, &out->entries[n].value, depth + 1, size, why,
                        cap) != 0) {
            return -1;
        }
        n++;
    }
    out->num_entries = n;
    return 0;
}

static int build_value(amqp_pool_t *pool, json_t *v, amqp_field_value_t *out,
                       int depth, size_t *size, char *why, size_t cap)
{
    size_t i, n;

    if (depth > MAX_HEADER_DEPTH) {
        snprintf(why, cap, "headers nested deeper than %d levels",
                 MAX_HEADER_DEPTH);
        return -1;
    }
    *size += 1; /* kind */
    switch (json_typeof(v)) {
    case JSON_STRING:
        out->kind = AMQP_FIELD_KIND_UTF8;
        out->value.bytes.len = json_string_length(v);
        out->value.bytes.bytes = (void *)json_string_value(v);
        *size += 4 + out->value.bytes.len;
        return 0;
    case JSON_INTEGER:
        out->kind = AMQP_FIELD_KIND_I64;
        out->value.i64 = (int64_t)json_integer_value(v);
        *size += 8;
        return 0;
    case JSON_REAL:
        out->kind = AMQP_FIELD_KIND_F64;
        out->value.f64 = json_real_value(v);
        *size += 8;
        return 0;
    case JSON_TRUE:
    case JSON_FALSE:
        out->kind = AMQP_FIELD_KIND_BOOLEAN;
        out->value.boolean = json_is_true(v);
        *size += 1;
        return 0;
    case JSON_NULL:
        out->kind = AMQP_FIELD_KIND_VOID;
        return 0;
    case JSON_OBJECT:
        out->kind = AMQP_FIELD_KIND_TABLE;
        return build_table(pool, v, &out->value.table, depth, size, why, cap);
    case JSON_ARRAY:
        out->kind = AMQP_FIELD_KIND_ARRAY;
        n = json_array_size(v);
        out->value.array.num_entries = (int)n;
        out->value.array.entries = NULL;
        *size += 4;
        if (n == 0) {
            return 0;
        }
        out->value.array.entries =
            amqp_pool_alloc(pool, n * sizeof(amqp_field_value_t));
        if (!out->value.array.entries) {
            snprintf(why, cap, "out of memory");
            return -1;
        }
        for (i = 0; i < n; i++) {
            if (build_value(pool, json_array_get(v, i),
                            &out->value.array.entries[i], depth + 1, size, why,
                            cap) != 0) {
                return -1;
            }
        }
        return 0;
    }
    snprintf(why, cap, "unsupported header value");
    return -1;
}

/* Short-string basic properties taken from job->properties as they are. */
static const struct {
    const char *name;
    amqp_flags_t flag;
    size_t offset;
} STR_PROPS[] = {
    {"content_type", AMQP_BASIC_CONTENT_TYPE_FLAG,
     offsetof(amqp_basic_properties_t, content_type)},
    {"content_encoding", AMQP_BASIC_CONTENT_ENCODING_FLAG,
     offsetof(amqp_basic_properties_t, content_encoding)},
    {"correlation_id", AMQP_BASIC_CORRELATION_ID_FLAG,
     offsetof(amqp_basic_properties_t, correlation_id)},
    {"reply_to", AMQP_BASIC_REPLY_TO_FLAG,
     offsetof(amqp_basic_properties_t, reply_to)},
    {"message_id", AMQP_BASIC_MESSAGE_ID_FLAG,
     offsetof(amqp_basic_properties_t, message_id)},
    {"type", AMQP_BASIC_TYPE_FLAG, offsetof(amqp_basic_properties_t, type)},
    {"app_id", AMQP_BASIC_APP_ID_FLAG,
     offsetof(amqp_basic_properties_t, app_id)},
    {"user_id", AMQP_BASIC_USER_ID_FLAG,
     offsetof(amqp_basic_properties_t, user_id)},
};

/* Per-message storage the properties point into. */
typedef struct msg_buf {
    amqp_basic_properties_t props;
    char scheduled_at[TU_RFC3339_LEN + 1];
    char expiration[24];
} msg_buf;

static bool reserved_header(const char *key)
{
    return strcmp(key, HDR_JOB_ID) == 0 || strcmp(key, HDR_SCHEDULED_AT) == 0 ||
           strcmp(key, HDR_DELAY) == 0;
}

/*
 * Fill m->props for job (pointers into the job, m and pool). Returns 0, or
 * -1 with why when the job cannot be encoded (its result is then decided
 * without the broker).
 */
static int build_message(const amqpp_t *p, amqp_pool_t *pool, const job_t *job,
                         msg_buf *m, char *why, size_t cap)
{
    amqp_basic_properties_t *pr = &m->props;
    json_t *props = job->properties, *v;
    amqp_table_entry_t *e;
    const char *key;
    size_t size = 2, i, n = 0; /* property flags */

    memset(pr, 0, sizeof *pr);
    if ((job->exchange && strlen(job->exchange) > SHORTSTR_MAX) ||
        (job->routing_key && strlen(job->routing_key) > SHORTSTR_MAX)) {
        snprintf(why, cap, "exchange or routing key longer than 255 bytes");
        return -1;
    }
    if (props && !json_is_object(props)) {
        snprintf(why, cap, "properties is not an object");
        return -1;
    }
    if (job->headers && !json_is_object(job->headers)) {
        snprintf(why, cap, "headers is not an object");
        return -1;
    }

    pr->_flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
    pr->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    size += 1;
    v = props ? json_object_get(props, "persistent") : NULL;
    if (v && !json_is_boolean(v)) {
        snprintf(why, cap, "property persistent is not a boolean");
        return -1;
    }
    if (v && json_is_false(v)) {
        pr->delivery_mode = AMQP_DELIVERY_NONPERSISTENT;
    }

    for (i = 0; props && i < sizeof STR_PROPS / sizeof STR_PROPS[0]; i++) {
        amqp_bytes_t *dst =
            (amqp_bytes_t *)(void *)((char *)pr + STR_PROPS[i].offset);
        v = json_object_get(props, STR_PROPS[i].name);
        if (!v) {
            continue;
        }
        if (!json_is_string(v) || json_string_length(v) > SHORTSTR_MAX) {
            snprintf(why, cap, "property %s is not a string of at most 255 "
                               "bytes", STR_PROPS[i].name);
            return -1;
        }
        dst->len = json_string_length(v);
        dst->bytes = (void *)json_string_value(v);
        pr->_flags |= STR_PROPS[i].flag;
        size += 1 + dst->len;
    }
    if (!(pr->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)) {
        pr->message_id = amqp_cstring_bytes(job->id);
        pr->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        size += 1 + pr->message_id.len;
    }
    v = props ? json_object_get(props, "expiration") : NULL;
    if (v) {
        if (json_is_string(v) && json_string_length(v) <= SHORTSTR_MAX) {
            pr->expiration.len = json_string_length(v);
            pr->expiration.bytes = (void *)json_string_value(v);
        } else if (json_is_integer(v) && json_integer_value(v) >= 0) {
            snprintf(m->expiration, sizeof m->expiration, "%" JSON_INTEGER_FORMAT,
                     json_integer_value(v));
            pr->expiration = amqp_cstring_bytes(m->expiration);
        } else {
            snprintf(why, cap, "property expiration is not a string or a "
                               "non-negative integer");
            return -1;
        }
        pr->_flags |= AMQP_BASIC_EXPIRATION_FLAG;
        size += 1 + pr->expiration.len;
    }
    v = props ? json_object_get(props, "priority") : NULL;
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 255) {
            snprintf(why, cap, "property priority is not an integer 0-255");
            return -1;
        }
        pr->priority = (uint8_t)json_integer_value(v);
        pr->_flags |= AMQP_BASIC_PRIORITY_FLAG;
        size += 1;
    }

    /* Headers: the job's own, then ours (which win over same-named ones). */
    e = amqp_pool_alloc(pool, (json_object_size(job->headers) + 3) *
                                  sizeof(amqp_table_entry_t));
    if (!e) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    size += 4;
    if (job->headers) {
        json_object_foreach(job->headers, key, v) {
            size_t klen = strlen(key);
            if (reserved_header(key)) {
                continue;
            }
            if (klen == 0 || klen > SHORTSTR_MAX) {
                snprintf(why, cap, "header name of %zu bytes (1-255 allowed)",
                         klen);
                return -1;
            }
            e[n].key = amqp_cstring_bytes(key);
            size += 1 + klen;
            if (build_value(pool, v, &e[n].value, 1, &size, why, cap) != 0) {
                return -1;
            }
            n++;
        }
    }
    tu_format_rfc3339(job->deliver_at, m->scheduled_at);
    e[n].key = amqp_cstring_bytes(HDR_JOB_ID);
    e[n].value.kind = AMQP_FIELD_KIND_UTF8;
    e[n].value.value.bytes = amqp_cstring_bytes(job->id);
    n++;
    e[n].key = amqp_cstring_bytes(HDR_SCHEDULED_AT);
    e[n].value.kind = AMQP_FIELD_KIND_UTF8;
    e[n].value.value.bytes = amqp_cstring_bytes(m->scheduled_at);
    n++;
    /* x-delay as the plugin (3.x) writes it on delivery: minus the delay,
     * a signed 32-bit integer ("I"), which every client decodes alike
     * (python3-pika 1.2 reads a 64-bit "l" as unsigned); only a delay
     * beyond int32 (2^31 ms, about 24.9 days) needs a 64-bit long. */
    e[n].key = amqp_cstring_bytes(HDR_DELAY);
    if (job->delay_ms >= -(int64_t)INT32_MAX &&
        job->delay_ms <= -(int64_t)INT32_MIN) {
        e[n].value.kind = AMQP_FIELD_KIND_I32;
        e[n].value.value.i32 = (int32_t)-job->delay_ms;
        size += 1 + strlen(HDR_DELAY) + 1 + 4;
    } else {
        e[n].value.kind = AMQP_FIELD_KIND_I64;
        e[n].value.value.i64 = -job->delay_ms;
        size += 1 + strlen(HDR_DELAY) + 1 + 8;
    }
    n++;
    size += (1 + strlen(HDR_JOB_ID) + 1 + 4 + strlen(job->id)) +
            (1 + strlen(HDR_SCHEDULED_AT) + 1 + 4 + strlen(m->scheduled_at));
    pr->headers.num_entries = (int)n;
    pr->headers.entries = e;
    pr->_flags |= AMQP_BASIC_HEADERS_FLAG;

    /* The content header must fit in one frame, or the encoder fails after
     * the publish method went out (and the connection is unusable). */
    if (size + HEADER_PAYLOAD_FIXED + FRAME_OVERHEAD > (size_t)p->frame_max) {
        snprintf(why, cap, "headers and properties take %zu bytes, more than "
                           "the frame size %d allows", size, p->frame_max);
        return -1;
    }
    return 0;
}

/* basic.publish, content header and body frames. Not amqp_basic_publish():
 * see "Liveness" at the top. */
static int send_message(amqpp_t *p, const job_t *job,
                        const amqp_basic_properties_t *props)
{
    amqp_basic_publish_t m;
    amqp_frame_t f;
    size_t off = 0, chunk = (size_t)p->frame_max - FRAME_OVERHEAD;
    int res;

    memset(&m, 0, sizeof m);
    m.exchange = amqp_cstring_bytes(job->exchange ? job->exchange : "");
    m.routing_key = amqp_cstring_bytes(job->routing_key ? job->routing_key : "");
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
    flight *win;

    if (window == 0 || !fn || p->unconfirmed > 0) {
        return RMQS_EINVAL;
    }
    win = calloc(window, sizeof *win);
    if (!win) {
        return RMQS_ENOMEM;
    }
    free(p->win);
    p->win = win;
    p->cap = window;
    p->low_tag = p->next_tag;
    p->confirm_timeout_ms = confirm_timeout_ms > 0 ? confirm_timeout_ms
                                                   : DEFAULT_CONFIRM_MS;
    p->on_report = fn;
    p->report_cls = cls;
    return RMQS_OK;
}

bool amqpp_can_send(const amqpp_t *p)
{
    return p->conn && p->win && !p->blocked &&
           p->next_tag - p->low_tag < p->cap;
}

size_t amqpp_unconfirmed(const amqpp_t *p)
{
    return p->unconfirmed;
}

bool amqpp_blocked(const amqpp_t *p)
{
    return p->conn && p->blocked;
}

rmqs_rc amqpp_send(amqpp_t *p, const job_t *job, void *ctx)
{
    amqpp_result r;
    msg_buf m;
    char why[240];
    flight *f;
    int res;

    if (!amqpp_can_send(p)) {
        set_result(&r, AMQPP_UNSENT, "not published: %s",
                   !p->conn      ? "not connected to the broker"
                   : p->blocked  ? BLOCKED_REASON
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
    recycle_amqp_pool(&p->pool);
    if (build_message(p, &p->pool, job, &m, why, sizeof why) != 0) {
        /* Retrying cannot help; let the attempt fail like a nack. */
        log_warn(MOD, "job not publishable", "job_id=%s reason=\"%s\"",
                 job->id, why);
        set_result(&r, AMQPP_NACKED, "not publishable: %s", why);
        p->on_report(p->report_cls, ctx, &r);
        return RMQS_OK;
    }
    cork(p, true);
    f = slot(p, p->next_tag);
    f->job = job;
    f->ctx = ctx;
    f->state = FL_INFLIGHT;
    f->sent_ms = tu_mono_ms();
    f->reason[0] = '\0';
    p->next_tag++;
    p->unconfirmed++;
    p->sent_since_poll++;
    res = send_message(p, job, &m.props);
    recycle_amqp_pool(&p->pool);
    if (res != AMQP_STATUS_OK) {
        drop(p, "publish failed: %s", amqp_error_string2(res)); /* reports */
        return RMQS_EBROKER;
    }
    return RMQS_OK;
}
