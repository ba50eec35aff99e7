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
 *   (rabbitmq-c connections are not shared between threads). For each
 *   mapping it declares, idempotently: the ingest exchange (topic, durable)
 *   and the inbox queue "rmq-scheduler.inbox.<ingest exchange>" (durable,
 *   classic) bound to it with "#". With --ingest-invalid dead-letter the
 *   inbox carries x-dead-letter-exchange = the dead-letter exchange, which
 *   is made to exist first: a passive declare, and if that says 404 a
 *   declare as fanout, durable (an existing exchange of any type is used as
 *   it is; RabbitMQ would silently drop dead letters sent to a missing one).
 *   basic.qos(prefetch) is per consumer, so with several mappings up to
 *   prefetch x mappings deliveries are unacknowledged at once.
 * - The loop: amqp_consume_message() with a short timeout (which also
 *   services heartbeats while idle); once a delivery arrives, keep reading
 *   while more follow within COLLECT_GAP_MS (at most COLLECT_MAX_MS, at most
 *   the prefetch). Each delivery is turned into a job at once
 *   (ingest_job_from_message), its envelope destroyed and the connection's
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
 *   "amqp:<ingest exchange>:<message_id>" and, as the key's request, a
 *   SHA-256 fingerprint of the message (routing key, body, headers,
 *   properties, timing header). A crash (or a lost connection) between the
 *   commit and the ack redelivers the message; the copy finds its key with
 *   the same fingerprint (existed) and is acknowledged without being stored
 *   again. A *different* message that reuses a message_id (some publishers
 *   set a constant one) finds the key with another fingerprint (conflict):
 *   it is stored anyway, without a key, and a warning says so. A reused id
 *   therefore never loses a message; it only loses the duplicate
 *   protection. Keys live as long as their job (--retention-s after it
 *   finished).
 * - Without a message_id (or with an empty one) there is nothing to
 *   recognise a copy by: a crash between commit and ack stores the
 *   redelivered message a second time, so it is published twice. Delivery
 *   is at least once; publishers that care set message_id.
 *
 * Mapping a message to a job (ingest_job_from_message)
 * - Timing: x-delay in ms, counted from when this service takes the
 *   message off the inbox, read as the plugin's get_delay/1 reads it (see
 *   delay_value): any integer type, a float/double truncated toward zero,
 *   or a string of an optional sign and digits; zero or negative is due at
 *   once (the plugin routes those undelayed). Or x-deliver-at (RFC 3339
 *   string, integer ms since the epoch, or an AMQP timestamp in seconds).
 *   Both headers are consumed; a time in the past is due at once.
 *   Note: while the service is down messages wait in the inbox, and their
 *   x-delay then counts from when the service comes back.
 * - Invalid timing (missing, both given, another type, a string that is
 *   not an integer, NaN/infinity, beyond the --max-delay-days horizon)
 *   follows --ingest-invalid: "route" stores the
 *   job due at once (like the plugin, which routes such messages at once),
 *   "dead-letter" rejects it (requeue=false) to the dead-letter exchange.
 *   Either way a warning with exchange, routing key, message_id and reason
 *   is logged and counted.
 * - Headers: strings and byte arrays that are valid UTF-8 become JSON
 *   strings, every integer type an integer (an unsigned 64-bit value above
 *   2^63-1 cannot be carried), float/double a real (finite only), boolean a
 *   bool, timestamp an integer (seconds). Tables, arrays, decimals, void
 *   and anything else cannot be carried by the job model: such a message is
 *   rejected (requeue=false) whatever the rule, so with "route" it is
 *   dropped unless the inbox has a dead-letter exchange (e.g. by policy).
 *   x-scheduler-job-id and x-scheduled-at are dropped (set on publish).
 *   Names are matched exactly, as the plugin does.
 * - Properties: content_type, content_encoding, correlation_id, reply_to,
 *   message_id, type, app_id, user_id and expiration as strings (valid
 *   UTF-8 without NUL, or the message cannot be carried), priority as an
 *   integer. RabbitMQ treats a message as persistent only with
 *   delivery_mode 2; anything else (1 or absent) is "persistent": false,
 *   so the published copy keeps the durability it was sent with. The
 *   timestamp and cluster_id properties are dropped.
 * - Caveat: an "expiration" property meant for the final queue already
 *   applies in the inbox; a message that waits there longer (service down)
 *   expires (and is dead-lettered if the inbox has a dead-letter exchange).
 *
 * Liveness (rabbitmq-c 0.11; its traps are listed in amqp_publisher.c) as
 * there: every read has a deadline (the frames of a message
 * that has begun arriving, the heartbeat timeout), heartbeats are sent by
 * hand while the thread waits for the writer or pauses, TCP_USER_TIMEOUT
 * (2 x heartbeat) bounds stuck sends, RPCs and the handshake have timeouts
 * (5 s; 1 s for the polite close at stop). Lost
 * connections are rebuilt with jittered backoff (0.1 s to 5 s); the broker
 * requeues whatever was not acknowledged. A 406 on a declare (an exchange
 * of another type, an inbox declared with other arguments, e.g. after
 * switching --ingest-invalid) is logged with the broker's reason and
 * retried the same way: /readyz shows ingest down until an operator fixes
 * it.
 *
 * The connection itself (URL, TLS with the same certificate checks as the
 * publisher, login, TCP_USER_TIMEOUT, close) is amqp_conn.c's; logs use
 * its safe URL ("user:***@").
 */
#include "amqp_ingest.h"

#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "amqp_conn.h"
#include "amqp_message.h"
#include "log.h"
#include "timeutil.h"

#define MOD "ingest"
#define CHANNEL 1
#define QUEUE_PREFIX "rmq-scheduler.inbox."
#define TAG_PREFIX "rmq-scheduler.ingest."
#define POLL_MS 250           /* longest idle read: bounds the stop latency */
#define COLLECT_GAP_MS 2      /* a batch closes after this much silence */
#define COLLECT_MAX_MS 20     /* or this long after its first delivery */
#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
#define DB_PAUSE_MIN_MS 100
#define DB_PAUSE_MAX_MS 5000
#define TIMEOUT_MS 5000       /* connect, handshake, RPCs */
#define CLOSE_TIMEOUT_MS 1000 /* the polite close at stop */
#define LOG_TEXT 96           /* bytes of a routing key / message_id in logs */
#define FINGERPRINT_LEN 64    /* SHA-256 in hex */

typedef struct mapping {
    char *ingest_exchange;
    char *target_exchange;
    char *queue;
    char tag[48];             /* consumer tag: TAG_PREFIX + index */
} mapping;

/* What settling does with a delivery. */
typedef enum action {
    ACT_STORE,   /* handed to the writer: its rc decides */
    ACT_REJECT,  /* basic.reject requeue=false: dead-lettered or dropped */
    ACT_REQUEUE  /* basic.nack requeue=true: local trouble, try later */
} action;

typedef struct delivery {
    writer_req req;           /* ins.jobs points at job */
    job_t job;
    uint64_t tag;
    size_t map;               /* index into in->maps */
    action act;
    bool invalid;             /* counted as invalid (routed or rejected) */
    bool redelivered;
    bool retry;               /* store again without the key (conflict) */
    char *idem_key;           /* malloc'd, or NULL */
    char idem_request[8 + FINGERPRINT_LEN];
    char routing_key[LOG_TEXT + 4]; /* printable copies, for logs */
    char message_id[LOG_TEXT + 4];
    char reason[256];
} delivery;

struct ingest {
    /* configuration, fixed after ingest_new */
    amqpc_t *link;            /* URL, TLS, login (amqp_conn.h); its
                                 connection belongs to the thread */
    int heartbeat_s;
    mapping *maps;
    size_t n_maps;
    unsigned prefetch;
    ingest_invalid_rule rule;
    char *dlx;
    job_limits limits;
    writer_t *writer;         /* borrowed */
    disp_t *disp;             /* borrowed; the writer wakes it after commits */

    pthread_t thread;
    bool started;
    pthread_mutex_t mu;       /* guards stop and outstanding */
    pthread_cond_t cv;        /* stop (CLOCK_MONOTONIC) */
    pthread_cond_t done_cv;   /* outstanding reached 0 (CLOCK_MONOTONIC) */
    bool stop;
    size_t outstanding;       /* writer requests of the batch not done */
    atomic_bool connected;

    /* owned by the thread */
    amqp_connection_state_t conn; /* link's connection; NULL while
                                     disconnected */
    delivery *batch;
    size_t cap, n;
    int64_t db_pause_ms;
    int64_t t_first, t_read, t_stored; /* mono ms: the batch's timeline */
    uint64_t invalid_total;
    char last_error[300];     /* last connect failure, to log changes only */
};

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

/* RFC 3629 UTF-8: no overlongs, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        uint32_t cp;

        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < len) {
            return false;
        }
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return false;
            }
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += len;
    }
    return true;
}

/* Text a job can hold: valid UTF-8 without NUL. */
static bool plain_text(amqp_bytes_t b)
{
    return (b.len == 0 || memchr(b.bytes, '\0', b.len) == NULL) &&
           utf8_valid(b.bytes, b.len);
}

static bool bytes_eq(amqp_bytes_t b, const char *s)
{
    size_t len = strlen(s);
    return b.len == len && (len == 0 || memcmp(b.bytes, s, len) == 0);
}

/* A copy for a log line: printable ASCII only ('?' for the rest, no
 * quotes), cut at LOG_TEXT bytes with "...". */
static void printable(char *out, size_t cap, const void *p, size_t len)
{
    const unsigned char *s = p;
    size_t n = 0;

    for (size_t i = 0; i < len && n + 4 < cap; i++) {
        if (n >= LOG_TEXT) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        out[n++] = (s[i] < 0x20 || s[i] >= 0x7F || s[i] == '"' ||
                    s[i] == '\\')
                       ? '?'
                       : (char)s[i];
    }
    out[n] = '\0';
}

static char *dup_bytes(amqp_bytes_t b)
{
    char *s = malloc(b.len + 1);

    if (s) {
        if (b.len) {
            memcpy(s, b.bytes, b.len);
        }
        s[b.len] = '\0';
    }
    return s;
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
/* From a delivery to a job (pure)                                     */

static rmqs_rc cannot_carry(rmqs_error *err, const char *field,
                            const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static rmqs_rc cannot_carry(rmqs_error *err, const char *field,
                            const char *fmt, ...)
{
    char msg[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rmqs_fail(err, RMQS_EINVAL, field, "cannot be carried: %s", msg);
}

/* An AMQP integer of any width; false if v is not an integer. *above is
 * set for an unsigned value that does not fit in int64. */
static bool field_integer(const amqp_field_value_t *v, int64_t *out,
                          bool *above)
{
    *above = false;
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        *out = v->value.i8;
        return true;
    case AMQP_FIELD_KIND_U8:
        *out = v->value.u8;
        return true;
    case AMQP_FIELD_KIND_I16:
        *out = v->value.i16;
        return true;
    case AMQP_FIELD_KIND_U16:
        *out = v->value.u16;
        return true;
    case AMQP_FIELD_KIND_I32:
        *out = v->value.i32;
        return true;
    case AMQP_FIELD_KIND_U32:
        *out = v->value.u32;
        return true;
    case AMQP_FIELD_KIND_I64:
        *out = v->value.i64;
        return true;
    case AMQP_FIELD_KIND_U64:
        *above = v->value.u64 > (uint64_t)INT64_MAX;
        *out = *above ? INT64_MAX : (int64_t)v->value.u64;
        return true;
    default:
        return false;
    }
}

static const char *kind_name(uint8_t kind)
{
    switch (kind) {
    case AMQP_FIELD_KIND_BOOLEAN: return "a boolean";
    case AMQP_FIELD_KIND_F32: return "a float";
    case AMQP_FIELD_KIND_F64: return "a double";
    case AMQP_FIELD_KIND_DECIMAL: return "a decimal";
    case AMQP_FIELD_KIND_UTF8: return "a string";
    case AMQP_FIELD_KIND_BYTES: return "a byte array";
    case AMQP_FIELD_KIND_ARRAY: return "an array";
    case AMQP_FIELD_KIND_TABLE: return "a table";
    case AMQP_FIELD_KIND_TIMESTAMP: return "a timestamp";
    case AMQP_FIELD_KIND_VOID: return "void";
    default: return "an unknown field type";
    }
}

/*
 * One header value as JSON (new reference in *out). RMQS_EINVAL with err
 * when the job model cannot carry it, RMQS_ENOMEM.
 */
static rmqs_rc header_value(const amqp_field_value_t *v, const char *field,
                            json_t **out, rmqs_error *err)
{
    int64_t i;
    bool above;
    double d;

    *out = NULL;
    if (field_integer(v, &i, &above)) {
        if (above) {
            return cannot_carry(err, field, "%s: an unsigned 64-bit integer "
                                            "above 2^63-1", field);
        }
        *out = json_integer(i);
    } else {
        switch (v->kind) {
        case AMQP_FIELD_KIND_BOOLEAN:
            *out = json_boolean(v->value.boolean);
            break;
        case AMQP_FIELD_KIND_TIMESTAMP:
            if (v->value.u64 > (uint64_t)INT64_MAX) {
                return cannot_carry(err, field, "%s: a timestamp above 2^63-1",
                                    field);
            }
            *out = json_integer((json_int_t)v->value.u64);
            break;
        case AMQP_FIELD_KIND_F32:
        case AMQP_FIELD_KIND_F64:
            d = v->kind == AMQP_FIELD_KIND_F32 ? (double)v->value.f32
                                               : v->value.f64;
            if (!isfinite(d)) {
                return cannot_carry(err, field, "%s: not a finite number",
                                    field);
            }
            *out = json_real(d);
            break;
        case AMQP_FIELD_KIND_UTF8:
        case AMQP_FIELD_KIND_BYTES:
            if (!utf8_valid(v->value.bytes.bytes, v->value.bytes.len)) {
                return cannot_carry(err, field, "%s: %s that is not valid "
                                                "UTF-8", field,
                                    kind_name(v->kind));
            }
            *out = json_stringn(v->value.bytes.len ? v->value.bytes.bytes : "",
                                v->value.bytes.len);
            break;
        default:
            return cannot_carry(err, field, "%s: %s", field,
                                kind_name(v->kind));
        }
    }
    return *out ? RMQS_OK
                : rmqs_fail(err, RMQS_ENOMEM, field, "out of memory");
}

/*
 * The message's headers as a JSON object (NULL when none are left), minus
 * the timing headers, whose values go to *delay / *at (last one wins, like
 * the JSON object), and minus the headers the publisher sets itself.
 */
static rmqs_rc convert_headers(const amqp_table_t *t, json_t **out,
                               const amqp_field_value_t **delay,
                               const amqp_field_value_t **at, rmqs_error *err)
{
    json_t *obj = json_object();
    char field[64];
    rmqs_rc rc = RMQS_OK;

    *out = NULL;
    if (!obj) {
        return rmqs_fail(err, RMQS_ENOMEM, "headers", "out of memory");
    }
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        json_t *v;
        char *key;

        if (bytes_eq(e->key, AMQPM_HDR_DELAY)) {
            *delay = &e->value;
            continue;
        }
        if (bytes_eq(e->key, AMQPM_HDR_DELIVER_AT)) {
            *at = &e->value;
            continue;
        }
        if (bytes_eq(e->key, AMQPM_HDR_JOB_ID) ||
            bytes_eq(e->key, AMQPM_HDR_SCHEDULED_AT)) {
            continue;
        }
        printable(field, sizeof field, e->key.bytes, e->key.len);
        if (e->key.len == 0 || !plain_text(e->key)) {
            rc = cannot_carry(err, "headers", "a header name that is empty, "
                                              "not UTF-8 or holds NUL");
            goto fail;
        }
        rc = header_value(&e->value, field, &v, err);
        if (rc != RMQS_OK) {
            goto fail;
        }
        key = dup_bytes(e->key);
        if (!key || json_object_set_new(obj, key, v) != 0) {
            if (!key) {
                json_decref(v);
            }
            free(key);
            rc = rmqs_fail(err, RMQS_ENOMEM, "headers", "out of memory");
            goto fail;
        }
        free(key);
    }
    if (json_object_size(obj) > 0) {
        *out = obj;
    } else {
        json_decref(obj);
    }
    return RMQS_OK;
fail:
    json_decref(obj);
    return rc;
}

/* The job's properties object (NULL if it would be empty). */
static rmqs_rc convert_properties(const amqp_basic_properties_t *p,
                                  json_t **out, rmqs_error *err)
{
    json_t *obj = json_object();
    bool ok = obj != NULL;
    char field[64];

    *out = NULL;
    for (size_t i = 0; ok && i < amqpm_n_str_props; i++) {
        const amqp_bytes_t *b = amqpm_str_prop_cfield(p, i);
        if (!(p->_flags & amqpm_str_props[i].flag)) {
            continue;
        }
        if (!plain_text(*b)) {
            snprintf(field, sizeof field, "properties.%s",
                     amqpm_str_props[i].name);
            json_decref(obj);
            return cannot_carry(err, field, "%s: not UTF-8 text without NUL",
                                field);
        }
        ok = json_object_set_new(obj, amqpm_str_props[i].name,
                                 json_stringn(b->len ? b->bytes : "",
                                              b->len)) == 0;
    }
    if (ok && (p->_flags & AMQP_BASIC_PRIORITY_FLAG)) {
        ok = json_object_set_new(obj, "priority",
                                 json_integer(p->priority)) == 0;
    }
    /* RabbitMQ persists a message only with delivery_mode 2. */
    if (ok && !((p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) &&
                p->delivery_mode == AMQP_DELIVERY_PERSISTENT)) {
        ok = json_object_set_new(obj, "persistent", json_false()) == 0;
    }
    if (!ok) {
        json_decref(obj);
        return rmqs_fail(err, RMQS_ENOMEM, "properties", "out of memory");
    }
    if (json_object_size(obj) > 0) {
        *out = obj;
    } else {
        json_decref(obj);
    }
    return RMQS_OK;
}

/*
 * The delay an x-delay header asks for, read as the delayed-message plugin
 * reads it (rabbit_delayed_message_utils:get_delay/1): any integer type as
 * it is; a float or double truncated toward zero (1500.7 -> 1500); a
 * string (or byte array) that Erlang's binary_to_integer/1 takes, an
 * optional sign and one or more ASCII digits ("500", "+500", "-500",
 * "0500"), as that integer. *above when it exceeds int64 (beyond any
 * horizon). false with *why for anything else: a string with spaces, an
 * exponent, a fraction or no digits (" 500", "5e2", "500.0", ""), NaN or
 * infinity, and every other type (decimal, boolean, timestamp, void,
 * table, array; *why NULL). The sign is the caller's business.
 */
static bool delay_value(const amqp_field_value_t *v, int64_t *out, bool *above,
                        const char **why)
{
    *above = false;
    *why = NULL;
    if (field_integer(v, out, above)) {
        return true;
    }
    if (v->kind == AMQP_FIELD_KIND_F32 || v->kind == AMQP_FIELD_KIND_F64) {
        double d = v->kind == AMQP_FIELD_KIND_F32 ? (double)v->value.f32
                                                  : v->value.f64;
        if (!isfinite(d)) {
            *why = "not a finite number";
            return false;
        }
        /* 2^63 is exact as a double; anything at or past it is out. In
         * range, the conversion truncates toward zero, like Erlang's trunc. */
        if (d >= 9223372036854775808.0) {
            *above = true;
            *out = INT64_MAX;
        } else {
            *out = d < -9223372036854775808.0 ? INT64_MIN : (int64_t)d;
        }
        return true;
    }
    if (v->kind == AMQP_FIELD_KIND_UTF8 || v->kind == AMQP_FIELD_KIND_BYTES) {
        const char *s = v->value.bytes.bytes;
        size_t len = v->value.bytes.len, i = 0;
        bool neg = false;
        int64_t n = 0;

        if (len > 0 && (s[0] == '+' || s[0] == '-')) {
            neg = s[0] == '-';
            i = 1;
        }
        if (i == len) {
            *why = "a string without digits";
            return false;
        }
        for (; i < len; i++) {
            if (s[i] < '0' || s[i] > '9') {
                *why = "a string that is not a decimal integer (an "
                       "optional sign and digits only)";
                return false;
            }
            if (!*above && (__builtin_mul_overflow(n, 10, &n) ||
                            __builtin_add_overflow(n, s[i] - '0', &n))) {
                *above = true;
            }
        }
        if (neg) { /* at once, however far below zero */
            *out = *above ? INT64_MIN : -n;
            *above = false;
        } else {
            *out = *above ? INT64_MAX : n;
        }
        return true;
    }
    return false; /* a type the plugin does not take: *why stays NULL */
}

/*
 * deliver_at from the timing headers. RMQS_EINVAL with err when missing or
 * invalid (the caller then makes the job due at received_ms).
 */
static rmqs_rc convert_timing(const amqp_field_value_t *delay,
                              const amqp_field_value_t *at,
                              int64_t received_ms, const job_limits *lim,
                              int64_t *deliver_at, rmqs_error *err)
{
    int64_t v, t;
    bool above = false;

    if (!delay && !at) {
        return rmqs_fail(err, RMQS_EINVAL, "headers.x-delay",
                         "no x-delay or x-deliver-at header");
    }
    if (delay && at) {
        return rmqs_fail(err, RMQS_EINVAL, "headers.x-deliver-at",
                         "both x-delay and x-deliver-at; give one");
    }
    if (delay) {
        const char *why;

        if (!delay_value(delay, &v, &above, &why)) {
            if (why) {
                return rmqs_fail(err, RMQS_EINVAL, "headers.x-delay",
                                 "x-delay: %s", why);
            }
            return rmqs_fail(err, RMQS_EINVAL, "headers.x-delay",
                             "x-delay: must be an integer, a float or a "
                             "string of digits (ms), not %s",
                             kind_name(delay->kind));
        }
        if (v <= 0) { /* the plugin delivers these at once, as valid */
            *deliver_at = received_ms;
            return RMQS_OK;
        }
        if (above || v > lim->max_delay_ms ||
            __builtin_add_overflow(received_ms, v, deliver_at)) {
            return rmqs_fail(err, RMQS_EINVAL, "headers.x-delay",
                             "x-delay: beyond the scheduling horizon of %lld ms",
                             (long long)lim->max_delay_ms);
        }
        return RMQS_OK;
    }
    if (at->kind == AMQP_FIELD_KIND_UTF8 || at->kind == AMQP_FIELD_KIND_BYTES) {
        if (tu_parse_rfc3339(at->value.bytes.bytes, at->value.bytes.len, &t) !=
            RMQS_OK) {
            return rmqs_fail(err, RMQS_EINVAL, "headers.x-deliver-at",
                             "x-deliver-at: not an RFC 3339 timestamp");
        }
    } else if (at->kind == AMQP_FIELD_KIND_TIMESTAMP) {
        if (at->value.u64 > (uint64_t)(INT64_MAX / 1000)) {
            goto horizon;
        }
        t = (int64_t)at->value.u64 * 1000;
    } else if (field_integer(at, &t, &above)) {
        if (above) {
            goto horizon;
        }
    } else {
        return rmqs_fail(err, RMQS_EINVAL, "headers.x-deliver-at",
                         "x-deliver-at: must be an RFC 3339 string or integer "
                         "ms since the epoch, not %s", kind_name(at->kind));
    }
    /* The past, however far, is due at once; only the future has a bound. */
    if (t > received_ms &&
        (__builtin_sub_overflow(t, received_ms, &v) || v > lim->max_delay_ms)) {
        goto horizon;
    }
    *deliver_at = t;
    return RMQS_OK;
horizon:
    return rmqs_fail(err, RMQS_EINVAL, "headers.x-deliver-at",
                     "x-deliver-at: beyond the scheduling horizon of %lld ms",
                     (long long)lim->max_delay_ms);
}

rmqs_rc ingest_job_from_message(const amqp_envelope_t *env,
                                const char *target_exchange,
                                int64_t received_ms, const job_limits *lim,
                                job_t *out, rmqs_error *err)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    const amqp_field_value_t *delay = NULL, *at = NULL;
    amqp_bytes_t body = env->message.body;
    job_t job;
    rmqs_rc rc, timing;
    int64_t deliver_at = received_ms;
    rmqs_error terr = {{0}, {0}};

    memset(out, 0, sizeof *out);
    memset(&job, 0, sizeof job);
    if (!plain_text(env->routing_key)) {
        return cannot_carry(err, "routing_key",
                            "routing key is not UTF-8 text without NUL");
    }
    job.status = JOB_PENDING;
    job.source = JOB_SOURCE_AMQP;
    job.exchange = strdup(target_exchange ? target_exchange : "");
    job.routing_key = dup_bytes(env->routing_key);
    job.created_at = job.updated_at = received_ms;
    job.sent_at = -1;
    job.attempts = 0;
    job.max_attempts = lim->default_max_attempts;
    job.body_kind = JOB_BODY_BINARY;
    job.body_len = body.len;
    if (body.len > 0) {
        job.body = malloc(body.len);
        if (job.body) {
            memcpy(job.body, body.bytes, body.len);
        }
    }
    if (!job.exchange || !job.routing_key || (body.len > 0 && !job.body)) {
        rc = rmqs_fail(err, RMQS_ENOMEM, "", "out of memory");
        goto fail;
    }
    rc = convert_properties(p, &job.properties, err);
    if (rc != RMQS_OK) {
        goto fail;
    }
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
        rc = convert_headers(&p->headers, &job.headers, &delay, &at, err);
        if (rc != RMQS_OK) {
            goto fail;
        }
    }

    timing = convert_timing(delay, at, received_ms, lim, &deliver_at, &terr);
    if (timing != RMQS_OK) {
        deliver_at = received_ms; /* "route at once" */
        if (err) {
            *err = terr;
        }
    }
    job.deliver_at = deliver_at;
    job.due_at = deliver_at > received_ms ? deliver_at : received_ms;
    job.delay_ms = deliver_at > received_ms ? deliver_at - received_ms : 0;
    *out = job;
    return timing;

fail:
    job_clear(&job);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Configuration                                                       */

static rmqs_rc check_name(const char *name, size_t max, const char *field,
                          const char *what, bool allow_empty, rmqs_error *err)
{
    size_t len = name ? strlen(name) : 0;

    if (!name || (!allow_empty && len == 0)) {
        return rmqs_fail(err, RMQS_EINVAL, field, "%s: an exchange name is "
                                                  "required", what);
    }
    if (len > max) {
        return rmqs_fail(err, RMQS_EINVAL, field,
                         "%s: exchange name longer than %zu bytes", what, max);
    }
    if (!utf8_valid((const unsigned char *)name, len)) {
        return rmqs_fail(err, RMQS_EINVAL, field, "%s: not valid UTF-8", what);
    }
    return RMQS_OK;
}

static rmqs_rc check_options(const ingest_options *opt, rmqs_error *err)
{
    size_t max_ingest = AMQPM_SHORTSTR_MAX - strlen(QUEUE_PREFIX);
    rmqs_rc rc;

    if (opt->n_mappings == 0 || !opt->mappings) {
        return rmqs_fail(err, RMQS_EINVAL, "ingest", "no ingest mapping");
    }
    if (opt->prefetch < 1 || opt->prefetch > 65535) {
        return rmqs_fail(err, RMQS_EINVAL, "ingest-prefetch",
                         "ingest prefetch must be between 1 and 65535");
    }
    for (size_t i = 0; i < opt->n_mappings; i++) {
        const ingest_mapping *m = &opt->mappings[i];
        rc = check_name(m->ingest_exchange, max_ingest, "ingest",
                        "ingest exchange", false, err);
        if (rc == RMQS_OK) {
            rc = check_name(m->target_exchange, AMQPM_SHORTSTR_MAX, "ingest",
                            "target exchange", true, err);
        }
        if (rc != RMQS_OK) {
            return rc;
        }
        if (strncmp(m->ingest_exchange, "amq.", 4) == 0) {
            return rmqs_fail(err, RMQS_EINVAL, "ingest",
                             "ingest exchange %s: names starting with amq. "
                             "are reserved by the broker", m->ingest_exchange);
        }
        for (size_t k = 0; k < opt->n_mappings; k++) {
            if (k != i && strcmp(m->ingest_exchange,
                                 opt->mappings[k].ingest_exchange) == 0) {
                return rmqs_fail(err, RMQS_EINVAL, "ingest",
                                 "ingest exchange %s is mapped twice",
                                 m->ingest_exchange);
            }
            /* Due messages would come straight back in, forever. */
            if (strcmp(m->target_exchange, opt->mappings[k].ingest_exchange) ==
                0) {
                return rmqs_fail(err, RMQS_EINVAL, "ingest",
                                 "target exchange %s is also an ingest "
                                 "exchange (a loop)", m->target_exchange);
            }
        }
    }
    if (opt->invalid_rule == INGEST_INVALID_DEAD_LETTER) {
        rc = check_name(opt->dead_letter_exchange, AMQPM_SHORTSTR_MAX,
                        "ingest-dead-letter-exchange", "dead-letter exchange",
                        false, err);
        if (rc != RMQS_OK) {
            return rc;
        }
        for (size_t k = 0; k < opt->n_mappings; k++) {
            if (strcmp(opt->dead_letter_exchange,
                       opt->mappings[k].ingest_exchange) == 0) {
                return rmqs_fail(err, RMQS_EINVAL,
                                 "ingest-dead-letter-exchange",
                                 "dead-letter exchange %s is an ingest "
                                 "exchange (a loop)",
                                 opt->dead_letter_exchange);
            }
        }
    } else if (opt->invalid_rule != INGEST_INVALID_ROUTE) {
        return rmqs_fail(err, RMQS_EINVAL, "ingest-invalid",
                         "ingest-invalid must be route or dead-letter");
    }
    if (opt->limits.default_max_attempts < 1 || opt->limits.max_delay_ms < 0) {
        return rmqs_fail(err, RMQS_EINVAL, "max_attempts",
                         "invalid job limits");
    }
    return RMQS_OK;
}

ingest_t *ingest_new(const ingest_options *opt, writer_t *w, disp_t *d,
                     rmqs_error *err)
{
    ingest_t *in = NULL;
    pthread_condattr_t ca;

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
    pthread_mutex_init(&in->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&in->cv, &ca);
    pthread_cond_init(&in->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&in->connected, false);
    in->writer = w;
    in->disp = d;
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
        mapping *m = &in->maps[i];
        size_t qlen = strlen(QUEUE_PREFIX) +
                      strlen(opt->mappings[i].ingest_exchange) + 1;
        m->ingest_exchange = strdup(opt->mappings[i].ingest_exchange);
        m->target_exchange = strdup(opt->mappings[i].target_exchange);
        m->queue = malloc(qlen);
        if (!m->ingest_exchange || !m->target_exchange || !m->queue) {
            goto nomem;
        }
        snprintf(m->queue, qlen, "%s%s", QUEUE_PREFIX, m->ingest_exchange);
        snprintf(m->tag, sizeof m->tag, "%s%zu", TAG_PREFIX, i);
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
    amqpc_drop(in->link);
    in->conn = NULL;
    atomic_store(&in->connected, false);
    log_connection_lost(in, reason);
}

/* Why the last RPC failed, as "<what> <name>: <reply>": RMQS_EBROKER. */
static rmqs_rc rpc_failed(ingest_t *in, rmqs_error *err, const char *what,
                          const char *name)
{
    return amqpc_rpc_fail(err, amqp_get_rpc_reply(in->conn), "%s %s", what,
                          name);
}

/*
 * Whether exchange name exists (passive declare): 1 yes, 0 no (the 404
 * closed the channel; it is open again), -1 with err on any other failure.
 */
static int exchange_exists(ingest_t *in, const char *name, rmqs_error *err)
{
    amqp_channel_close_ok_t ok;

    if (amqp_exchange_declare(in->conn, CHANNEL, amqp_cstring_bytes(name),
                              amqp_cstring_bytes("fanout"), 1, 0, 0, 0,
                              amqp_empty_table)) {
        return 1;
    }
    if (channel_close_code(amqp_get_rpc_reply(in->conn)) != AMQP_NOT_FOUND) {
        rpc_failed(in, err, "exchange.declare (passive)", name);
        return -1;
    }
    memset(&ok, 0, sizeof ok);
    if (amqp_send_method(in->conn, CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD,
                         &ok) != AMQP_STATUS_OK ||
        !amqp_channel_open(in->conn, CHANNEL)) {
        rmqs_fail(err, RMQS_EBROKER, NULL, "reopening the channel failed");
        return -1;
    }
    return 0;
}

/* The dead-letter exchange must exist, or RabbitMQ drops dead letters: one
 * of any type is used as it is, a missing one is declared fanout, durable. */
static int ensure_dlx(ingest_t *in, rmqs_error *err)
{
    int e = exchange_exists(in, in->dlx, err);

    if (e != 0) {
        return e < 0 ? -1 : 0;
    }
    if (!amqp_exchange_declare(in->conn, CHANNEL, amqp_cstring_bytes(in->dlx),
                               amqp_cstring_bytes("fanout"), 0, 1, 0, 0,
                               amqp_empty_table)) {
        rpc_failed(in, err, "exchange.declare", in->dlx);
        return -1;
    }
    log_info(MOD, "dead-letter exchange declared", "exchange=\"%s\" type=fanout",
             in->dlx);
    return 0;
}

/* Exchanges, inboxes, bindings, qos and one consumer per inbox. */
static int declare_and_consume(ingest_t *in, rmqs_error *err)
{
    amqp_table_entry_t arg;
    amqp_table_t args = amqp_empty_table;

    if (in->dlx) {
        if (ensure_dlx(in, err) != 0) {
            return -1;
        }
        arg.key = amqp_cstring_bytes("x-dead-letter-exchange");
        arg.value.kind = AMQP_FIELD_KIND_UTF8;
        arg.value.value.bytes = amqp_cstring_bytes(in->dlx);
        args.num_entries = 1;
        args.entries = &arg;
    }
    for (size_t i = 0; i < in->n_maps; i++) {
        mapping *m = &in->maps[i];
        int e = *m->target_exchange
                    ? exchange_exists(in, m->target_exchange, err)
                    : 1; /* the default exchange always exists */
        if (e < 0) {
            return -1;
        }
        if (e == 0) { /* not ours to declare: its type and bindings */
            log_warn(MOD, "target exchange does not exist (yet); due "
                          "messages will fail until it does",
                     "exchange=\"%s\" target=\"%s\"", m->ingest_exchange,
                     m->target_exchange);
        }
        if (!amqp_exchange_declare(in->conn, CHANNEL,
                                   amqp_cstring_bytes(m->ingest_exchange),
                                   amqp_cstring_bytes("topic"), 0, 1, 0, 0,
                                   amqp_empty_table)) {
            rpc_failed(in, err, "exchange.declare", m->ingest_exchange);
            return -1;
        }
        if (!amqp_queue_declare(in->conn, CHANNEL, amqp_cstring_bytes(m->queue),
                                0, 1, 0, 0, args)) {
            rpc_failed(in, err, "queue.declare", m->queue);
            return -1;
        }
        if (!amqp_queue_bind(in->conn, CHANNEL, amqp_cstring_bytes(m->queue),
                             amqp_cstring_bytes(m->ingest_exchange),
                             amqp_cstring_bytes("#"), amqp_empty_table)) {
            rpc_failed(in, err, "queue.bind", m->queue);
            return -1;
        }
    }
    /* Per consumer (global=0): applies to the consumers started below. */
    if (!amqp_basic_qos(in->conn, CHANNEL, 0, (uint16_t)in->prefetch, 0)) {
        rpc_failed(in, err, "basic.qos", "");
        return -1;
    }
    for (size_t i = 0; i < in->n_maps; i++) {
        mapping *m = &in->maps[i];
        if (!amqp_basic_consume(in->conn, CHANNEL, amqp_cstring_bytes(m->queue),
                                amqp_cstring_bytes(m->tag), 0, 0, 0,
                                amqp_empty_table)) {
            rpc_failed(in, err, "basic.consume", m->queue);
            return -1;
        }
    }
    return 0;
}

static rmqs_rc ingest_connect(ingest_t *in, rmqs_error *err)
{
    if (amqpc_open(in->link, err) != RMQS_OK) {
        return RMQS_EBROKER;
    }
    in->conn = amqpc_state(in->link);
    if (!amqp_channel_open(in->conn, CHANNEL)) {
        rpc_failed(in, err, "channel.open", "");
        goto fail;
    }
    if (declare_and_consume(in, err) != 0) {
        goto fail;
    }
    return RMQS_OK;

fail:
    amqpc_drop(in->link);
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

static bool stopping(ingest_t *in)
{
    bool s;

    pthread_mutex_lock(&in->mu);
    s = in->stop;
    pthread_mutex_unlock(&in->mu);
    return s;
}

/* Sleep ms (heartbeats kept), unless asked to stop: returns true then. */
static bool pause_ms(ingest_t *in, int64_t ms)
{
    int64_t end = tu_mono_ms() + ms;

    for (;;) {
        int64_t left = end - tu_mono_ms();
        struct timespec until;
        bool s;

        if (left <= 0) {
            return stopping(in);
        }
        until = tu_mono_deadline(left < beat_ms(in) ? left : beat_ms(in));
        pthread_mutex_lock(&in->mu);
        while (!in->stop &&
               pthread_cond_timedwait(&in->cv, &in->mu, &until) == 0) {
        }
        s = in->stop;
        pthread_mutex_unlock(&in->mu);
        if (s) {
            return true;
        }
        send_heartbeat(in);
    }
}

/* ------------------------------------------------------------------ */
/* Reading deliveries                                                  */

/* A frame that is not a delivery is waiting (amqp_consume_message put it
 * back): act on it. Returns 0, or -1 once the connection is dropped. */
static int on_other_frame(ingest_t *in)
{
    struct timeval tv = {0, 0};
    amqp_frame_t f;
    char reason[256];
    int res;

    res = amqp_simple_wait_frame_noblock(in->conn, &f, &tv);
    if (res == AMQP_STATUS_TIMEOUT) {
        return 0;
    }
    if (res != AMQP_STATUS_OK) {
        drop(in, "%s", amqp_error_string2(res));
        return -1;
    }
    if (f.frame_type != AMQP_FRAME_METHOD) {
        return 0; /* stray content: nothing to do */
    }
    switch (f.payload.method.id) {
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *c = f.payload.method.decoded;
        amqp_connection_close_ok_t ok = {0};
        amqpc_reply_text(reason, sizeof reason, c->reply_code, c->reply_text);
        (void)amqp_send_method(in->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD,
                               &ok);
        drop(in, "connection closed by the broker: %s", reason);
        return -1;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *c = f.payload.method.decoded;
        amqpc_reply_text(reason, sizeof reason, c->reply_code, c->reply_text);
        /* A new connection declares and consumes again from scratch. */
        drop(in, "channel closed by the broker: %s", reason);
        return -1;
    }
    case AMQP_BASIC_CANCEL_METHOD:
        drop(in, "consumer cancelled by the broker (inbox queue deleted?)");
        return -1;
    case AMQP_CONNECTION_BLOCKED_METHOD:
        log_warn(MOD, "broker blocked the connection (resource alarm)",
                 "url=%s", amqpc_safe_url(in->link));
        return 0;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        log_info(MOD, "broker unblocked the connection", "url=%s",
                 amqpc_safe_url(in->link));
        return 0;
    default:
        log_debug(MOD, "ignored frame", "channel=%u method=%s",
                  (unsigned)f.channel, amqp_method_name(f.payload.method.id));
        return 0;
    }
}

/* The fingerprint of a delivery: what makes two messages with one
 * message_id the same message. */
static void fingerprint(const amqp_envelope_t *env, const job_t *job,
                        char out[FINGERPRINT_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    const amqp_basic_properties_t *p = &env->message.properties;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    char *h = NULL, *pr = NULL;
    uint64_t len;
    bool ok;

    out[0] = '\0';
    if (!ctx) {
        return;
    }
    h = job->headers ? json_dumps(job->headers, JSON_COMPACT | JSON_SORT_KEYS)
                     : NULL;
    pr = job->properties
             ? json_dumps(job->properties, JSON_COMPACT | JSON_SORT_KEYS)
             : NULL;
    ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    len = env->routing_key.len;
    ok = ok && EVP_DigestUpdate(ctx, &len, sizeof len) == 1 &&
         (len == 0 || EVP_DigestUpdate(ctx, env->routing_key.bytes, len) == 1);
    len = env->message.body.len;
    ok = ok && EVP_DigestUpdate(ctx, &len, sizeof len) == 1 &&
         (len == 0 || EVP_DigestUpdate(ctx, env->message.body.bytes, len) == 1);
    ok = ok && EVP_DigestUpdate(ctx, h ? h : "-", strlen(h ? h : "-") + 1) == 1;
    ok = ok && EVP_DigestUpdate(ctx, pr ? pr : "-", strlen(pr ? pr : "-") + 1) ==
                   1;
    /* The timing headers as sent (they are not in job->headers), by value
     * only: the rest of the field union is not initialised. */
    for (int i = 0; ok && (p->_flags & AMQP_BASIC_HEADERS_FLAG) &&
                    i < p->headers.num_entries;
         i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        const amqp_field_value_t *v = &e->value;
        unsigned char buf[16];
        size_t n = 0;
        int64_t iv;
        bool above;
        double dv;

        if (!bytes_eq(e->key, AMQPM_HDR_DELAY) &&
            !bytes_eq(e->key, AMQPM_HDR_DELIVER_AT)) {
            continue;
        }
        memset(buf, 0, sizeof buf);
        buf[n++] = v->kind;
        if (field_integer(v, &iv, &above)) {
            memcpy(buf + n, &iv, sizeof iv);
            n += sizeof iv;
            buf[n++] = above;
        } else if (v->kind == AMQP_FIELD_KIND_TIMESTAMP) {
            memcpy(buf + n, &v->value.u64, sizeof v->value.u64);
            n += sizeof v->value.u64;
        } else if (v->kind == AMQP_FIELD_KIND_F32 ||
                   v->kind == AMQP_FIELD_KIND_F64) {
            dv = v->kind == AMQP_FIELD_KIND_F32 ? (double)v->value.f32
                                                : v->value.f64;
            memcpy(buf + n, &dv, sizeof dv);
            n += sizeof dv;
        } else if (v->kind == AMQP_FIELD_KIND_BOOLEAN) {
            buf[n++] = v->value.boolean != 0;
        }
        ok = EVP_DigestUpdate(ctx, e->key.bytes, e->key.len) == 1 &&
             EVP_DigestUpdate(ctx, buf, n) == 1;
        if (ok && (v->kind == AMQP_FIELD_KIND_UTF8 ||
                   v->kind == AMQP_FIELD_KIND_BYTES)) {
            len = v->value.bytes.len;
            ok = EVP_DigestUpdate(ctx, &len, sizeof len) == 1 &&
                 (len == 0 ||
                  EVP_DigestUpdate(ctx, v->value.bytes.bytes, len) == 1);
        }
    }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &md_len) == 1 && md_len * 2 <=
                                                              FINGERPRINT_LEN;
    if (ok) {
        for (unsigned int i = 0; i < md_len; i++) {
            out[2 * i] = hex[md[i] >> 4];
            out[2 * i + 1] = hex[md[i] & 15];
        }
        out[2 * md_len] = '\0';
    }
    free(h);
    free(pr);
    EVP_MD_CTX_free(ctx);
}

static void on_done(writer_req *req, void *cls)
{
    ingest_t *in = cls;

    (void)req;
    pthread_mutex_lock(&in->mu);
    if (--in->outstanding == 0) {
        pthread_cond_broadcast(&in->done_cv);
    }
    pthread_mutex_unlock(&in->mu);
}

static void clear_delivery(delivery *d)
{
    job_clear(&d->job);
    job_clear(&d->req.ins.existing);
    free(d->idem_key);
    memset(d, 0, sizeof *d);
}

static void clear_batch(ingest_t *in)
{
    for (size_t i = 0; i < in->n; i++) {
        clear_delivery(&in->batch[i]);
    }
    in->n = 0;
}

/* Turn one envelope into the next delivery of the batch. */
static void take(ingest_t *in, const amqp_envelope_t *env)
{
    delivery *d = &in->batch[in->n++];
    const amqp_basic_properties_t *p = &env->message.properties;
    json_t *mid;
    rmqs_error err = {{0}, {0}};
    int64_t received = tu_now_ms();
    const mapping *m = NULL;
    rmqs_rc rc;

    memset(d, 0, sizeof *d);
    d->tag = env->delivery_tag;
    d->redelivered = env->redelivered != 0;
    printable(d->routing_key, sizeof d->routing_key, env->routing_key.bytes,
              env->routing_key.len);
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
        printable(d->message_id, sizeof d->message_id, p->message_id.bytes,
                  p->message_id.len);
    }
    for (size_t i = 0; i < in->n_maps && !m; i++) {
        if (bytes_eq(env->consumer_tag, in->maps[i].tag)) {
            m = &in->maps[i];
            d->map = i;
        }
    }
    if (!m) { /* cannot happen: we only consume with our own tags */
        d->act = ACT_REQUEUE;
        snprintf(d->reason, sizeof d->reason, "unknown consumer tag");
        return;
    }

    rc = ingest_job_from_message(env, m->target_exchange, received,
                                 &in->limits, &d->job, &err);
    d->act = ACT_STORE;
    if (rc == RMQS_EINVAL) {
        d->invalid = true;
        snprintf(d->reason, sizeof d->reason, "%s", err.message);
        if (!d->job.exchange || in->rule == INGEST_INVALID_DEAD_LETTER) {
            d->act = ACT_REJECT; /* cannot be carried, or the rule says so */
            job_clear(&d->job);
            return;
        }
    } else if (rc != RMQS_OK) {
        d->act = ACT_REQUEUE;
        snprintf(d->reason, sizeof d->reason, "%s", err.message);
        return;
    }
    if (job_id_generate(received, d->job.id) != RMQS_OK) {
        d->act = ACT_REQUEUE;
        snprintf(d->reason, sizeof d->reason, "no randomness for a job id");
        return;
    }
    mid = d->job.properties ? json_object_get(d->job.properties, "message_id")
                            : NULL;
    if (json_string_length(mid) > 0) {
        size_t len = strlen("amqp::") + strlen(m->ingest_exchange) +
                     json_string_length(mid) + 1;
        char fp[FINGERPRINT_LEN + 1];
        fingerprint(env, &d->job, fp);
        d->idem_key = malloc(len);
        if (!d->idem_key || !fp[0]) {
            d->act = ACT_REQUEUE;
            snprintf(d->reason, sizeof d->reason, "out of memory");
            return;
        }
        snprintf(d->idem_key, len, "amqp:%s:%s", m->ingest_exchange,
                 json_string_value(mid));
        snprintf(d->idem_request, sizeof d->idem_request, "amqp:%s", fp);
    }
    d->req.ins.jobs = &d->job;
    d->req.ins.n = 1;
    d->req.ins.idem_key = d->idem_key;
    d->req.ins.idem_request = d->idem_key ? d->idem_request : NULL;
    d->req.done = on_done;
    d->req.cls = in;
}

/*
 * Fill the batch: wait up to wait_ms for a first delivery, then take what
 * keeps coming (COLLECT_GAP_MS of silence or COLLECT_MAX_MS in all end it)
 * until it is full. Returns how many, or -1 if the connection was lost
 * (the batch is cleared: the broker requeues those deliveries).
 */
static long collect(ingest_t *in, int64_t wait_ms)
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
                take(in, &env);
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
            if (on_other_frame(in) != 0) {
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
    return (long)in->n;
lost:
    if (in->n > 0) {
        log_warn(MOD, "connection lost while reading a batch",
                 "n=%zu note=\"nothing was stored or acknowledged; the broker "
                 "delivers them again\"", in->n);
    }
    clear_batch(in);
    return -1;
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
    pthread_mutex_lock(&in->mu);
    in->outstanding = want;
    pthread_mutex_unlock(&in->mu);
    for (size_t i = 0; i < in->n; i++) {
        delivery *d = &in->batch[i];
        if (d->act != ACT_STORE || (retry && !d->retry)) {
            continue;
        }
        if (writer_submit(in->writer, &d->req) != RMQS_OK) {
            d->act = ACT_REQUEUE;
            snprintf(d->reason, sizeof d->reason, "the writer is stopping");
            pthread_mutex_lock(&in->mu);
            in->outstanding--;
            pthread_mutex_unlock(&in->mu);
        }
    }
    pthread_mutex_lock(&in->mu);
    while (in->outstanding > 0) {
        struct timespec until = tu_mono_deadline(beat_ms(in));
        if (pthread_cond_timedwait(&in->done_cv, &in->mu, &until) != 0 &&
            in->outstanding > 0) {
            pthread_mutex_unlock(&in->mu);
            waited += beat_ms(in);
            if (waited % 10000 < beat_ms(in)) {
                log_warn(MOD, "still waiting for the database", "n=%zu "
                         "waited_ms=%lld", want, (long long)waited);
            }
            send_heartbeat(in);
            pthread_mutex_lock(&in->mu);
        }
    }
    pthread_mutex_unlock(&in->mu);
}

/* Decide the action of every delivery the writer had (retry: those of the
 * second round) from its outcome. Returns how many conflicts (a message_id
 * reused by another message) there were: those are marked to be stored
 * again without a key. */
static size_t judge(ingest_t *in, bool retry, bool *db_trouble)
{
    size_t conflicts = 0;

    for (size_t i = 0; i < in->n; i++) {
        delivery *d = &in->batch[i];
        if (d->act != ACT_STORE || (retry && !d->retry)) {
            continue;
        }
        if (d->req.ins.rc == RMQS_ECONFLICT && d->req.ins.idem_key) {
            log_warn(MOD, "message_id reused by a different message; "
                          "stored without duplicate protection",
                     "exchange=\"%s\" routing_key=\"%s\" message_id=\"%s\"",
                     in->maps[d->map].ingest_exchange, d->routing_key,
                     d->message_id);
            d->req.ins.idem_key = NULL;
            d->req.ins.idem_request = NULL;
            d->req.ins.rc = RMQS_OK;
            d->retry = true;
            conflicts++;
            continue;
        }
        switch (d->req.ins.rc) {
        case RMQS_OK:
            break;
        case RMQS_ECONFLICT: /* without a key: not expected */
        case RMQS_EINVAL:
        case RMQS_ENOTFOUND:
            d->act = ACT_REJECT;
            d->invalid = true;
            snprintf(d->reason, sizeof d->reason, "the store refused it (%s)",
                     rmqs_rc_name(d->req.ins.rc));
            break;
        default: /* EDB, EFULL, ENOMEM...: the message waits in the broker */
            d->act = ACT_REQUEUE;
            snprintf(d->reason, sizeof d->reason, "database: %s",
                     rmqs_rc_name(d->req.ins.rc));
            *db_trouble = true;
            break;
        }
    }
    return conflicts;
}

static void log_invalid(ingest_t *in, const delivery *d, const char *what)
{
    in->invalid_total++;
    log_warn(MOD, "invalid message",
             "exchange=\"%s\" routing_key=\"%s\" message_id=\"%s\" "
             "reason=\"%s\" action=%s%s%s invalid_total=%llu",
             in->maps[d->map].ingest_exchange, d->routing_key, d->message_id,
             d->reason, what, d->job.id[0] ? " job_id=" : "", d->job.id,
             (unsigned long long)in->invalid_total);
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
            if (d->req.ins.existed) {
                dup++;
                log_debug(MOD, "already stored; acknowledged again",
                          "message_id=\"%s\" job_id=%s", d->message_id,
                          d->req.ins.existing.id);
            } else {
                stored++;
                if (d->invalid) {
                    log_invalid(in, d, "routed");
                }
                if (!d->req.ins.idem_key && d->redelivered) {
                    unkeyed++;
                }
            }
            ack_to = d->tag > ack_to ? d->tag : ack_to;
            break;
        case ACT_REJECT:
            log_invalid(in, d, in->dlx ? "dead-lettered" : "rejected");
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
                 "twice\"", stored + dup);
    }
    if (requeued > 0) {
        log_warn(MOD, "messages not stored; returned to the inbox",
                 "n=%zu exchange=\"%s\" message_id=\"%s\" reason=\"%s\"%s",
                 requeued, in->maps[first_requeued->map].ingest_exchange,
                 first_requeued->message_id, first_requeued->reason,
                 requeued > 1 ? " note=\"the first of them\"" : "");
    }
    if (unkeyed > 0) {
        log_warn(MOD, "redelivered messages without message_id stored",
                 "n=%zu note=\"if an earlier delivery was stored before a "
                 "crash, these are duplicates\"", unkeyed);
    }
    log_debug(MOD, "batch settled",
              "n=%zu stored=%zu duplicates=%zu rejected=%zu requeued=%zu "
              "read_ms=%lld store_ms=%lld", in->n, stored, dup, rejected,
              requeued, (long long)(in->t_read - in->t_first),
              (long long)(in->t_stored - in->t_read));
    return requeued;
}

static void run_batch(ingest_t *in)
{
    bool db_trouble = false;
    size_t requeued;

    store_batch(in, false);
    if (judge(in, false, &db_trouble) > 0) {
        store_batch(in, true);
        (void)judge(in, true, &db_trouble);
    }
    in->t_stored = tu_mono_ms();
    requeued = settle(in);
    clear_batch(in);
    if (in->conn) {
        amqp_maybe_release_buffers(in->conn);
    }
    /* What went back to the inbox comes straight back: do not spin. */
    if (requeued > 0) {
        log_warn(MOD, db_trouble ? "database trouble; pausing the inbox"
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

    while (!stopping(in)) {
        long n;

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
        n = collect(in, idle_ms);
        if (n > 0) {
            run_batch(in);
        }
    }
    disconnect(in);
    atomic_store(&in->connected, false);
    return NULL;
}

rmqs_rc ingest_start(ingest_t *in)
{
    if (!in || in->started) {
        return in ? RMQS_OK : RMQS_EINVAL;
    }
    if (pthread_create(&in->thread, NULL, ingest_main, in) != 0) {
        return RMQS_ESYS;
    }
    pthread_setname_np(in->thread, "rmqs-ingest");
    in->started = true;
    return RMQS_OK;
}

bool ingest_connected(ingest_t *in)
{
    return in && atomic_load(&in->connected);
}

void ingest_stop(ingest_t *in)
{
    if (!in || !in->started) {
        return;
    }
    pthread_mutex_lock(&in->mu);
    in->stop = true;
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
    pthread_join(in->thread, NULL);
    in->started = false;
}

void ingest_free(ingest_t *in)
{
    if (!in) {
        return;
    }
    ingest_stop(in);
    amqpc_free(in->link); /* and its connection, if any */
    if (in->batch) {
        clear_batch(in);
    }
    for (size_t i = 0; in->maps && i < in->n_maps; i++) {
        free(in->maps[i].ingest_exchange);
        free(in->maps[i].target_exchange);
        free(in->maps[i].queue);
    }
    free(in->maps);
    free(in->batch);
    free(in->dlx);
    pthread_cond_destroy(&in->cv);
    pthread_cond_destroy(&in->done_cv);
    pthread_mutex_destroy(&in->mu);
    free(in);
}
