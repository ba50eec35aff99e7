/*
 * ingest_map.c - from a delivery off an ingest exchange to the job it is
 * stored as, and the fingerprint that recognises a redelivered copy (see
 * ingest_map.h).
 *
 * Why: the x-delay drop-in (amqp_ingest.c) must read a message the way the
 * delayed-message plugin would, and carry everything a job can carry. That
 * judgement is pure and worth testing field type by field type, so it
 * lives here, away from the connection and the thread.
 *
 * Mapping a message to a job (ingest_map_job)
 * - Timing: x-delay in ms, counted from when this service takes the
 *   message off the inbox (received_ms), read as the plugin's get_delay/1
 *   reads it (see delay_value): any integer type, a float/double truncated
 *   toward zero, or a string of an optional sign and digits; zero or
 *   negative is due at once (the plugin routes those undelayed). Or
 *   x-deliver-at (RFC 3339 string, integer ms since the epoch, or an AMQP
 *   timestamp in seconds). Both headers are consumed; a time in the past
 *   is due at once.
 * - Invalid timing (missing, both given, another type, a string that is
 *   not an integer, NaN/infinity, beyond the --max-delay-days horizon) is
 *   RMQS_EINVAL with a job that is still due at received_ms: the caller's
 *   --ingest-invalid rule decides between routing it at once (as the
 *   plugin does) and dead-lettering it.
 * - Headers: strings and byte arrays that are valid UTF-8 become JSON
 *   strings, every integer type an integer (an unsigned 64-bit value above
 *   2^63-1 cannot be carried), float/double a real (finite only), boolean a
 *   bool, timestamp an integer (seconds). Tables, arrays, decimals, void
 *   and anything else cannot be carried by the job model: RMQS_EINVAL with
 *   no job at all, so the message can only be rejected, whatever the rule.
 *   x-scheduler-job-id and x-scheduled-at are dropped (set on publish).
 *   Names are matched exactly, as the plugin does.
 * - Properties: content_type, content_encoding, correlation_id, reply_to,
 *   message_id, type, app_id, user_id and expiration as strings (valid
 *   UTF-8 without NUL, or the message cannot be carried), priority as an
 *   integer. RabbitMQ treats a message as persistent only with
 *   delivery_mode 2; anything else (1 or absent) is "persistent": false,
 *   so the published copy keeps the durability it was sent with. The
 *   timestamp and cluster_id properties are dropped.
 *
 * The fingerprint (ingest_map_idempotency)
 * - A delivery with a message_id gets the key "amqp:<ingest
 *   exchange>:<message_id>" and, as the key's request, a SHA-256 over the
 *   routing key, the body, the converted headers and properties (compact
 *   JSON, keys sorted) and the timing header as sent, by value. The same
 *   message redelivered has the same fingerprint; a different message that
 *   reuses the message_id has another (amqp_ingest.c says what follows).
 */
#include "ingest_map.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp_message.h"
#include "timeutil.h"
#include "utf8.h"

#define FINGERPRINT_LEN 64 /* SHA-256 in hex */

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

static bool bytes_eq(amqp_bytes_t b, const char *s)
{
    size_t len = strlen(s);
    return b.len == len && (len == 0 || memcmp(b.bytes, s, len) == 0);
}

/* Text a job can hold: valid UTF-8 without NUL. */
static bool plain_text(amqp_bytes_t b)
{
    return utf8_text(b.bytes, b.len);
}

void ingest_map_printable(char *out, size_t cap, const void *p, size_t len)
{
    const unsigned char *s = p;
    size_t n = 0;

    /* Room for a character or "..." and the NUL while n + 4 <= cap. */
    for (size_t i = 0; i < len && n + 4 <= cap; i++) {
        if (n >= INGEST_MAP_LOG_TEXT) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        out[n++] = (s[i] < 0x20 || s[i] >= 0x7F || s[i] == '"' || s[i] == '\\')
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

/* ------------------------------------------------------------------ */
/* From a delivery to a job (pure)                                     */

static rmqs_rc cannot_carry(rmqs_error *err, const char *field, const char *fmt,
                            ...) __attribute__((format(printf, 3, 4)));

static rmqs_rc cannot_carry(rmqs_error *err, const char *field, const char *fmt,
                            ...)
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
    case AMQP_FIELD_KIND_I8: *out = v->value.i8; return true;
    case AMQP_FIELD_KIND_U8: *out = v->value.u8; return true;
    case AMQP_FIELD_KIND_I16: *out = v->value.i16; return true;
    case AMQP_FIELD_KIND_U16: *out = v->value.u16; return true;
    case AMQP_FIELD_KIND_I32: *out = v->value.i32; return true;
    case AMQP_FIELD_KIND_U32: *out = v->value.u32; return true;
    case AMQP_FIELD_KIND_I64: *out = v->value.i64; return true;
    case AMQP_FIELD_KIND_U64:
        *above = v->value.u64 > (uint64_t)INT64_MAX;
        *out = *above ? INT64_MAX : (int64_t)v->value.u64;
        return true;
    default: return false;
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
            return cannot_carry(err, field,
                                "%s: an unsigned 64-bit integer "
                                "above 2^63-1",
                                field);
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
                return cannot_carry(err, field,
                                    "%s: %s that is not valid "
                                    "UTF-8",
                                    field, kind_name(v->kind));
            }
            *out = json_stringn(v->value.bytes.len ? v->value.bytes.bytes : "",
                                v->value.bytes.len);
            break;
        default:
            return cannot_carry(err, field, "%s: %s", field,
                                kind_name(v->kind));
        }
    }
    return *out ? RMQS_OK : rmqs_fail(err, RMQS_ENOMEM, field, "out of memory");
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
        ingest_map_printable(field, sizeof field, e->key.bytes, e->key.len);
        if (e->key.len == 0 || !plain_text(e->key)) {
            rc = cannot_carry(err, "headers",
                              "a header name that is empty, "
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
        ok = json_object_set_new(
                 obj, amqpm_str_props[i].name,
                 json_stringn(b->len ? b->bytes : "", b->len)) == 0;
    }
    if (ok && (p->_flags & AMQP_BASIC_PRIORITY_FLAG)) {
        ok = json_object_set_new(obj, AMQPM_PROP_PRIORITY,
                                 json_integer(p->priority)) == 0;
    }
    /* RabbitMQ persists a message only with delivery_mode 2. */
    if (ok && !((p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) &&
                p->delivery_mode == AMQP_DELIVERY_PERSISTENT)) {
        ok = json_object_set_new(obj, AMQPM_PROP_PERSISTENT, json_false()) == 0;
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
                              const amqp_field_value_t *at, int64_t received_ms,
                              const job_limits *lim, int64_t *deliver_at,
                              rmqs_error *err)
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
            return rmqs_fail(
                err, RMQS_EINVAL, "headers.x-delay",
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
                         "ms since the epoch, not %s",
                         kind_name(at->kind));
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

rmqs_rc ingest_map_job(const amqp_envelope_t *env, const char *target_exchange,
                       int64_t received_ms, const job_limits *lim, job_t *out,
                       rmqs_error *err)
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
/* Settings                                                            */

static rmqs_rc check_name(const char *name, size_t max, const char *field,
                          const char *what, bool allow_empty, rmqs_error *err)
{
    size_t len = name ? strlen(name) : 0;

    if (!name || (!allow_empty && len == 0)) {
        return rmqs_fail(err, RMQS_EINVAL, field,
                         "%s: an exchange name is "
                         "required",
                         what);
    }
    if (len > max) {
        return rmqs_fail(err, RMQS_EINVAL, field,
                         "%s: exchange name longer than %zu bytes", what, max);
    }
    if (!utf8_valid(name, len)) {
        return rmqs_fail(err, RMQS_EINVAL, field, "%s: not valid UTF-8", what);
    }
    return RMQS_OK;
}

rmqs_rc ingest_map_check(const ingest_mapping *maps, size_t n,
                         ingest_invalid_rule rule, const char *dlx,
                         rmqs_error *err)
{
    size_t max_ingest = AMQPM_SHORTSTR_MAX - strlen(INGEST_MAP_INBOX_PREFIX);
    rmqs_rc rc;

    if (n == 0 || !maps) {
        return rmqs_fail(err, RMQS_EINVAL, "ingest", "no ingest mapping");
    }
    for (size_t i = 0; i < n; i++) {
        const ingest_mapping *m = &maps[i];
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
                             "are reserved by the broker",
                             m->ingest_exchange);
        }
        for (size_t k = 0; k < n; k++) {
            if (k != i &&
                strcmp(m->ingest_exchange, maps[k].ingest_exchange) == 0) {
                return rmqs_fail(err, RMQS_EINVAL, "ingest",
                                 "ingest exchange %s is mapped twice",
                                 m->ingest_exchange);
            }
            /* Due messages would come straight back in, forever. */
            if (strcmp(m->target_exchange, maps[k].ingest_exchange) == 0) {
                return rmqs_fail(err, RMQS_EINVAL, "ingest",
                                 "target exchange %s is also an ingest "
                                 "exchange (a loop)",
                                 m->target_exchange);
            }
        }
    }
    if (rule == INGEST_INVALID_DEAD_LETTER) {
        rc = check_name(dlx, AMQPM_SHORTSTR_MAX, "ingest-dead-letter-exchange",
                        "dead-letter exchange", false, err);
        if (rc != RMQS_OK) {
            return rc;
        }
        for (size_t k = 0; k < n; k++) {
            if (strcmp(dlx, maps[k].ingest_exchange) == 0) {
                return rmqs_fail(err, RMQS_EINVAL,
                                 "ingest-dead-letter-exchange",
                                 "dead-letter exchange %s is an ingest "
                                 "exchange (a loop)",
                                 dlx);
            }
        }
    } else if (rule != INGEST_INVALID_ROUTE) {
        return rmqs_fail(err, RMQS_EINVAL, "ingest-invalid",
                         "ingest-invalid must be route or dead-letter");
    }
    return RMQS_OK;
}

/* ------------------------------------------------------------------ */
/* Idempotency                                                         */

/* The fingerprint of a delivery: what makes two messages with one
 * message_id the same message. out is "" if the digest failed. */
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
    ok = ok &&
         EVP_DigestUpdate(ctx, pr ? pr : "-", strlen(pr ? pr : "-") + 1) == 1;
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
    ok = ok && EVP_DigestFinal_ex(ctx, md, &md_len) == 1 &&
         md_len * 2 <= FINGERPRINT_LEN;
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

_Static_assert(INGEST_MAP_REQUEST_LEN == 5 + FINGERPRINT_LEN,
               "a request is \"amqp:\" and the fingerprint");

rmqs_rc ingest_map_idempotency(const amqp_envelope_t *env, const job_t *job,
                               const char *ingest_exchange, char **key_out,
                               char request[INGEST_MAP_REQUEST_LEN + 1])
{
    json_t *mid =
        job->properties ? json_object_get(job->properties, "message_id") : NULL;
    char fp[FINGERPRINT_LEN + 1];
    size_t len;

    *key_out = NULL;
    request[0] = '\0';
    if (json_string_length(mid) == 0) {
        return RMQS_OK;
    }
    len = strlen("amqp::") + strlen(ingest_exchange) + json_string_length(mid) +
          1;
    fingerprint(env, job, fp);
    if (!fp[0] || !(*key_out = malloc(len))) {
        return RMQS_ENOMEM;
    }
    snprintf(*key_out, len, "amqp:%s:%s", ingest_exchange,
             json_string_value(mid));
    snprintf(request, INGEST_MAP_REQUEST_LEN + 1, "amqp:%s", fp);
    return RMQS_OK;
}
