/*
 * job.c - validation of client requests into jobs.
 *
 * Why it exists: every rule about what a client may ask for (which fields,
 * which types, which limits) lives in one pure module with no database,
 * socket or clock, so each rule is unit tested on its own
 * (tests/unit/test_job.c) and the HTTP layer only maps rmqs_rc to a status.
 *
 * How it works: job_from_request() parses the body once with jansson
 * (duplicate keys rejected; the request-parsing kit reqparse.c, shared
 * with schedule.c and http_filter.c), then checks the fields in a fixed
 * order: unknown keys, exchange, routing_key, body (a JSON body at most 32
 * levels deep), timing, headers, properties (their names and the
 * expiration rule are amqp_message.h's), the size headers and properties
 * take in the AMQP message (at most 64 KiB), max_attempts. The first
 * failure wins and is reported as a field name plus a message that starts
 * with that field ("delay_ms: must be an integer").
 * Where a rule looks at several keys of one object (unknown keys, headers)
 * it reports the smallest key in byte order, so the answer does not depend
 * on jansson's hash order. The job is built in a local job_t and moved to
 * *out only when everything passed.
 *
 * Also here: UUIDv7 ids (RFC 9562) from getrandom(2) (buffered per
 * thread). The other direction, a job as the API's JSON, is job_json.c;
 * body_base64 is decoded by base64.c.
 */
#include "job.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "amqp_message.h"
#include "base64.h"
#include "hexdigit.h"
#include "reqparse.h"
#include "timeutil.h"

#define JOB_MAX_HEADERS 128
#define MS_PER_DAY 86400000LL
/* exchange and routing_key are checked by rp_short_string */
_Static_assert(JOB_MAX_SHORTSTR == RP_SHORTSTR_MAX, "one short-string bound");

/*
 * What AMQP and consumers can carry. The message's properties (headers
 * included) travel in one content-header frame, which must fit in the
 * connection's frame_max (rabbitmq-c asks 131072): a job whose headers take
 * more would be accepted and then never be publishable, so the total is
 * capped at half a frame, computed as the AMQP encoder counts it
 * (amqpm_encoded_size(), shared with the publisher). A JSON body is
 * published as compact JSON; nesting deeper than JOB_MAX_BODY_DEPTH levels
 * of arrays/objects is refused, since
 * consumers' parsers commonly stop far below jansson's 2048.
 */
#define JOB_MAX_PROPS_BYTES 65536
#define JOB_MAX_BODY_DEPTH 32

/* ------------------------------------------------------------------------ */
/* job_t basics                                                              */

void job_clear(job_t *job)
{
    if (job == NULL)
        return;
    free(job->exchange);
    free(job->routing_key);
    free(job->last_error);
    json_decref(job->headers);
    json_decref(job->properties);
    free(job->body);
    free(job->schedule);
    free(job->held_by);
    json_decref(job->attempt_errors);
    memset(job, 0, sizeof *job);
}

static const char *const status_names[] = {
    [JOB_PENDING] = "pending",     [JOB_PUBLISHING] = "publishing",
    [JOB_SENT] = "sent",           [JOB_FAILED] = "failed",
    [JOB_CANCELLED] = "cancelled",
};
#define N_STATUS (sizeof status_names / sizeof status_names[0])

const char *job_status_name(job_status s)
{
    if ((unsigned)s >= N_STATUS)
        return "unknown";
    return status_names[s];
}

rmqs_rc job_status_parse(const char *s, job_status *out)
{
    if (s == NULL)
        return RMQS_EINVAL;
    for (size_t i = 0; i < N_STATUS; i++) {
        if (strcmp(s, status_names[i]) == 0) {
            if (out != NULL)
                *out = (job_status)i;
            return RMQS_OK;
        }
    }
    return RMQS_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* ids: UUIDv7                                                               */

/*
 * Random bytes for ids, from a per-thread buffer that one getrandom(2)
 * call refills: one system call per RAND_BUF_BYTES / 10 ids (409) instead
 * of one per id, which a batch of 1000 jobs made 1000 calls. The bytes are
 * the kernel CSPRNG's, each handed out once (ids are public, so nothing
 * needs wiping). A child process must not hand out its parent's bytes
 * again (two processes would make the same ids): a fork handler empties the
 * buffer of the thread that forked, the only thread a child has.
 */
#define RAND_BUF_BYTES 4096

static __thread unsigned char tl_rand[RAND_BUF_BYTES];
static __thread size_t tl_rand_left; /* unused bytes at the end of tl_rand */
static pthread_once_t rand_once = PTHREAD_ONCE_INIT;

static void rand_forget_in_child(void)
{
    tl_rand_left = 0;
}

static void rand_register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, rand_forget_in_child);
}

/* Fill buf with n bytes from the kernel CSPRNG; retries EINTR and short
 * reads. Blocks only until the pool is initialised, once per boot. */
static rmqs_rc getrandom_all(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return RMQS_ESYS;
        }
        got += (size_t)r;
    }
    return RMQS_OK;
}

/* n (<= RAND_BUF_BYTES) random bytes from this thread's buffer. */
static rmqs_rc random_bytes(unsigned char *out, size_t n)
{
    pthread_once(&rand_once, rand_register_fork_handler);
    if (tl_rand_left < n) {
        if (getrandom_all(tl_rand, sizeof tl_rand) != RMQS_OK)
            return RMQS_ESYS;
        tl_rand_left = sizeof tl_rand;
    }
    tl_rand_left -= n;
    memcpy(out, tl_rand + tl_rand_left, n);
    return RMQS_OK;
}

rmqs_rc job_id_generate(int64_t now_ms, char out[JOB_ID_LEN + 1])
{
    unsigned char b[JOB_ID_BYTES];
    /* bytes 0-5: 48-bit big-endian unix_ts_ms; the rest starts random */
    if (random_bytes(b + 6, sizeof b - 6) != RMQS_OK) {
        out[0] = '\0';
        return RMQS_ESYS;
    }
    uint64_t ts = (uint64_t)now_ms & 0xFFFFFFFFFFFFULL;
    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(ts >> (8 * (5 - i)));
    b[6] = (unsigned char)(0x70 | (b[6] & 0x0F)); /* version 7 */
    b[8] = (unsigned char)(0x80 | (b[8] & 0x3F)); /* variant 10 */
    job_id_format(b, out);
    return RMQS_OK;
}

/* A digit of a canonical id: upper case is not canonical. */
static int id_hex_digit(char c)
{
    return c >= 'A' && c <= 'F' ? -1 : hex_digit(c);
}

static bool is_dash_pos(size_t i)
{
    return i == 8 || i == 13 || i == 18 || i == 23;
}

rmqs_rc job_id_parse(const char *text, unsigned char out[JOB_ID_BYTES])
{
    if (text == NULL || strnlen(text, JOB_ID_LEN + 1) != JOB_ID_LEN)
        return RMQS_EINVAL;
    unsigned char b[JOB_ID_BYTES];
    size_t n = 0;
    for (size_t i = 0; i < JOB_ID_LEN; i++) {
        if (is_dash_pos(i)) {
            if (text[i] != '-')
                return RMQS_EINVAL;
            continue;
        }
        int hi = id_hex_digit(text[i]);
        int lo = id_hex_digit(text[i + 1]);
        if (hi < 0 || lo < 0)
            return RMQS_EINVAL;
        b[n++] = (unsigned char)(hi << 4 | lo);
        i++;
    }
    memcpy(out, b, sizeof b);
    return RMQS_OK;
}

void job_id_format(const unsigned char in[JOB_ID_BYTES],
                   char out[JOB_ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < JOB_ID_BYTES; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[in[i] >> 4];
        out[o++] = hex[in[i] & 0x0F];
    }
    out[o] = '\0';
}

/* ------------------------------------------------------------------------ */
/* request validation helpers                                                */

/* "30 days", "1 day" or "90000 ms", for horizon messages. */
static void horizon_text(int64_t ms, char *buf, size_t n)
{
    if (ms > 0 && ms % MS_PER_DAY == 0) {
        long long days = ms / MS_PER_DAY;
        snprintf(buf, n, "%lld day%s", days, days == 1 ? "" : "s");
    } else {
        snprintf(buf, n, "%lld ms", (long long)ms);
    }
}

/*
 * The timing pair shared by POST and PATCH: exactly one of delay_ms (an
 * integer in [0, horizon]) or deliver_at (RFC 3339; the past is accepted,
 * beyond the horizon is not). Outputs the absolute time and the delay it
 * represents from now (>= 0).
 */
static rmqs_rc parse_timing(json_t *root, const job_limits *lim, int64_t now_ms,
                            int64_t *deliver_at_out, int64_t *delay_out,
                            rmqs_error *err)
{
    json_t *delay, *at;
    char horizon[48];
    int64_t deliver_at;
    rmqs_rc rc = rp_one_of(root, "delay_ms", "deliver_at", &delay, &at, err);

    if (rc != RMQS_OK)
        return rc;
    horizon_text(lim->max_delay_ms, horizon, sizeof horizon);

    if (delay != NULL) {
        if (!json_is_integer(delay))
            return rmqs_fail(err, RMQS_EINVAL, "delay_ms",
                             "delay_ms: must be an integer");
        json_int_t d = json_integer_value(delay);
        if (d < 0)
            return rmqs_fail(err, RMQS_EINVAL, "delay_ms",
                             "delay_ms: must not be negative");
        if (d > lim->max_delay_ms)
            return rmqs_fail(err, RMQS_EINVAL, "delay_ms",
                             "delay_ms: beyond the scheduling horizon of %s",
                             horizon);
        if (__builtin_add_overflow(now_ms, (int64_t)d, &deliver_at))
            return rmqs_fail(err, RMQS_EINVAL, "delay_ms",
                             "delay_ms: beyond the scheduling horizon of %s",
                             horizon);
    } else {
        if (!json_is_string(at))
            return rmqs_fail(err, RMQS_EINVAL, "deliver_at",
                             "deliver_at: must be a string");
        if (tu_parse_rfc3339(json_string_value(at), json_string_length(at),
                             &deliver_at) != RMQS_OK)
            return rmqs_fail(err, RMQS_EINVAL, "deliver_at",
                             "deliver_at: not an RFC 3339 timestamp");
        /* Only a time ahead of now can pass the horizon; the past (however
         * far, even when deliver_at - now would not fit in int64) is due. */
        int64_t ahead;
        if (deliver_at > now_ms &&
            (__builtin_sub_overflow(deliver_at, now_ms, &ahead) ||
             ahead > lim->max_delay_ms))
            return rmqs_fail(err, RMQS_EINVAL, "deliver_at",
                             "deliver_at: beyond the scheduling horizon of %s",
                             horizon);
    }

    int64_t d;
    if (__builtin_sub_overflow(deliver_at, now_ms, &d) || d < 0)
        d = 0;
    *deliver_at_out = deliver_at;
    *delay_out = d;
    return RMQS_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Validate "headers" (v may be NULL). On success *out is a new reference to
 * the same object, or NULL when absent or empty.
 */
static rmqs_rc check_headers(json_t *v, json_t **out, rmqs_error *err)
{
    static const char *const reserved[] = {
        AMQPM_HDR_JOB_ID, AMQPM_HDR_SCHEDULED_AT, AMQPM_HDR_DELAY};
    const char *keys[JOB_MAX_HEADERS];
    const char *key;
    json_t *val;
    size_t n = 0;
    char field[RP_FIELD_MAX + 1];

    *out = NULL;
    if (v == NULL)
        return RMQS_OK;
    if (!json_is_object(v))
        return rmqs_fail(err, RMQS_EINVAL, "headers",
                         "headers: must be an object");
    if (json_object_size(v) > JOB_MAX_HEADERS)
        return rmqs_fail(err, RMQS_EINVAL, "headers",
                         "headers: more than %d entries", JOB_MAX_HEADERS);
    if (json_object_size(v) == 0)
        return RMQS_OK;

    json_object_foreach(v, key, val) {
        keys[n++] = key;
    }
    qsort(keys, n, sizeof keys[0], cmp_str);

    for (size_t i = 0; i < n; i++) {
        size_t klen = strlen(keys[i]);
        if (klen == 0)
            return rmqs_fail(err, RMQS_EINVAL, "headers",
                             "headers: a header name must not be empty");
        if (klen > JOB_MAX_SHORTSTR)
            return rmqs_fail(err, RMQS_EINVAL, "headers",
                             "headers: a header name is longer than %d bytes",
                             JOB_MAX_SHORTSTR);
        rp_key_field(field, "headers.", keys[i]);
        if (amqpm_broker_refused_header(keys[i]))
            return rmqs_fail(err, RMQS_EINVAL, field,
                             "%s: RabbitMQ takes CC and BCC only as lists of "
                             "routing keys, which job headers cannot carry; "
                             "any other value makes it close the publish "
                             "channel",
                             field);
        for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
            if (strcasecmp(keys[i], reserved[r]) == 0)
                return rmqs_fail(err, RMQS_EINVAL, field, "%s: reserved header",
                                 field);
        val = json_object_get(v, keys[i]);
        bool ok = json_is_string(val) || json_is_integer(val) ||
                  json_is_boolean(val) ||
                  (json_is_real(val) && isfinite(json_real_value(val)));
        if (!ok)
            return rmqs_fail(err, RMQS_EINVAL, field,
                             "%s: must be a string, number or boolean", field);
    }
    *out = json_incref(v);
    return RMQS_OK;
}

/*
 * Validate "properties" (v may be NULL). On success *out is a new object (a
 * copy, so the request stays as sent for the canonical form) with
 * content_type defaulted to application/json for JSON bodies; NULL if it
 * would be empty.
 */
static rmqs_rc check_properties(json_t *v, bool json_body, json_t **out,
                                rmqs_error *err)
{
    char field[RP_FIELD_MAX + 1];
    json_t *props = NULL;
    const char *s;
    rmqs_rc rc;

    *out = NULL;
    if (v != NULL) {
        if (!json_is_object(v))
            return rmqs_fail(err, RMQS_EINVAL, "properties",
                             "properties: must be an object");
        const char *unknown = rp_unknown_key(v, NULL, 0, amqpm_property_known);
        if (unknown != NULL) {
            rp_key_field(field, "properties.", unknown);
            return rmqs_fail(err, RMQS_EINVAL, field, "%s: unknown property",
                             field);
        }
        for (size_t i = 0; i < amqpm_n_str_props; i++) {
            if (amqpm_str_props[i].flag == AMQP_BASIC_EXPIRATION_FLAG)
                continue; /* its own rule, below */
            rp_key_field(field, "properties.", amqpm_str_props[i].name);
            rc = rp_short_string(json_object_get(v, amqpm_str_props[i].name),
                                 field, false, true, &s, err);
            if (rc != RMQS_OK)
                return rc;
        }
        json_t *p = json_object_get(v, AMQPM_PROP_PRIORITY);
        if (p != NULL && (!json_is_integer(p) || json_integer_value(p) < 0 ||
                          json_integer_value(p) > AMQPM_PRIORITY_MAX))
            return rmqs_fail(
                err, RMQS_EINVAL, "properties.priority",
                "properties.priority: must be an integer from 0 to %d",
                AMQPM_PRIORITY_MAX);
        json_t *e = json_object_get(v, "expiration");
        if (e != NULL && !amqpm_expiration_valid(e))
            return rmqs_fail(err, RMQS_EINVAL, "properties.expiration",
                             "properties.expiration: must be a string of "
                             "decimal digits (milliseconds, at most %llu)",
                             AMQPM_EXPIRATION_MAX);
        json_t *pe = json_object_get(v, AMQPM_PROP_PERSISTENT);
        if (pe != NULL && !json_is_boolean(pe))
            return rmqs_fail(err, RMQS_EINVAL, "properties.persistent",
                             "properties.persistent: must be a boolean");
        props = json_copy(v);
    } else if (json_body) {
        props = json_object();
    } else {
        return RMQS_OK; /* nothing to add: no empty object to make and free */
    }
    if (props == NULL)
        return rp_fail_nomem(err);

    if (json_body && json_object_get(props, "content_type") == NULL &&
        json_object_set_new(props, "content_type",
                            json_string("application/json")) != 0) {
        json_decref(props);
        return rp_fail_nomem(err);
    }
    if (json_object_size(props) == 0) {
        json_decref(props);
        props = NULL;
    }
    *out = props;
    return RMQS_OK;
}

/*
 * True if v has more than max levels of arrays/objects ("[]" is one level,
 * a scalar none). Recurses at most max + 1 deep, whatever the input.
 */
static bool nested_deeper_than(json_t *v, int max)
{
    const char *key;
    json_t *x;
    size_t i;

    if (!json_is_array(v) && !json_is_object(v))
        return false;
    if (max <= 0)
        return true;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x) {
            if (nested_deeper_than(x, max - 1))
                return true;
        }
    } else {
        json_object_foreach(v, key, x) {
            if (nested_deeper_than(x, max - 1))
                return true;
        }
    }
    return false;
}

/* Fill job's body from "body" / "body_base64". */
static rmqs_rc check_body(json_t *root, job_t *job, rmqs_error *err)
{
    json_t *body, *b64;
    rmqs_rc rc = rp_one_of(root, "body", "body_base64", &body, &b64, err);

    if (rc != RMQS_OK)
        return rc;

    if (b64 != NULL) {
        if (!json_is_string(b64))
            return rmqs_fail(err, RMQS_EINVAL, "body_base64",
                             "body_base64: must be a string");
        rc = base64_decode(json_string_value(b64), json_string_length(b64),
                           &job->body, &job->body_len);
        if (rc == RMQS_ENOMEM)
            return rp_fail_nomem(err);
        if (rc != RMQS_OK)
            return rmqs_fail(err, RMQS_EINVAL, "body_base64",
                             "body_base64: not valid base64");
        job->body_kind = JOB_BODY_BINARY;
        return RMQS_OK;
    }

    if (json_is_string(body)) {
        size_t len = json_string_length(body);
        job->body = malloc(len > 0 ? len : 1);
        if (job->body == NULL)
            return rp_fail_nomem(err);
        memcpy(job->body, json_string_value(body), len);
        job->body_len = len;
        job->body_kind = JOB_BODY_TEXT;
        return RMQS_OK;
    }
    if (json_is_object(body) || json_is_array(body)) {
        if (nested_deeper_than(body, JOB_MAX_BODY_DEPTH))
            return rmqs_fail(err, RMQS_EINVAL, "body",
                             "body: too deeply nested (more than %d levels of "
                             "arrays and objects)",
                             JOB_MAX_BODY_DEPTH);
        char *text = json_dumps(body, JSON_COMPACT);
        if (text == NULL)
            return rp_fail_nomem(err);
        job->body = (unsigned char *)text; /* the NUL stays, uncounted */
        job->body_len = strlen(text);
        job->body_kind = JOB_BODY_JSON;
        return RMQS_OK;
    }
    return rmqs_fail(err, RMQS_EINVAL, "body",
                     "body: must be a string, an object or an array");
}

/* ------------------------------------------------------------------------ */
/* public validation entry points                                            */

rmqs_rc job_from_request(const char *buf, size_t len, const job_limits *lim,
                         int64_t now_ms, job_t *out, char **canonical_out,
                         rmqs_error *err)
{
    json_t *root = NULL;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (canonical_out != NULL)
        *canonical_out = NULL;
    rc = rp_parse_object(buf, len, &root, err);
    if (rc != RMQS_OK)
        return rc;
    rc = job_from_json(root, lim, now_ms, out, canonical_out, err);
    json_decref(root);
    return rc;
}

rmqs_rc job_from_json(json_t *root, const job_limits *lim, int64_t now_ms,
                      job_t *out, char **canonical_out, rmqs_error *err)
{
    static const char *const allowed[] = {
        "exchange",   "routing_key", "body",       "body_base64",  "delay_ms",
        "deliver_at", "headers",     "properties", "max_attempts", "priority"};
    job_t job = {0};
    char *canonical = NULL;
    const char *exchange, *routing_key;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (canonical_out != NULL)
        *canonical_out = NULL;
    if (out == NULL || lim == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "", "internal: missing argument");

    if (!json_is_object(root)) {
        rc = rmqs_fail(err, RMQS_EINVAL, "", "a job must be a JSON object");
        goto out;
    }

    rc = rp_known_keys(root, "", allowed, sizeof allowed / sizeof allowed[0],
                       err);
    if (rc != RMQS_OK)
        goto out;

    rc = rp_short_string(json_object_get(root, "exchange"), "exchange", true,
                         true, &exchange, err);
    if (rc != RMQS_OK)
        goto out;
    rc = rp_short_string(json_object_get(root, "routing_key"), "routing_key",
                         true, false, &routing_key, err);
    if (rc != RMQS_OK)
        goto out;

    rc = check_body(root, &job, err);
    if (rc != RMQS_OK)
        goto out;

    rc = parse_timing(root, lim, now_ms, &job.deliver_at, &job.delay_ms, err);
    if (rc != RMQS_OK)
        goto out;

    rc = check_headers(json_object_get(root, "headers"), &job.headers, err);
    if (rc != RMQS_OK)
        goto out;

    rc = check_properties(json_object_get(root, "properties"),
                          job.body_kind == JOB_BODY_JSON, &job.properties, err);
    if (rc != RMQS_OK)
        goto out;

    size_t props_bytes =
        amqpm_encoded_size(job.headers, job.properties, JOB_ID_LEN);
    if (props_bytes > JOB_MAX_PROPS_BYTES) {
        rc = rmqs_fail(err, RMQS_EINVAL, "headers",
                       "headers: headers and properties take %zu bytes in the "
                       "AMQP message, more than %d",
                       props_bytes, JOB_MAX_PROPS_BYTES);
        goto out;
    }

    job.max_attempts = lim->default_max_attempts;
    json_t *ma = json_object_get(root, "max_attempts");
    if (ma != NULL) {
        if (!json_is_integer(ma) || json_integer_value(ma) < 1 ||
            json_integer_value(ma) > lim->max_max_attempts) {
            rc = rmqs_fail(err, RMQS_EINVAL, "max_attempts",
                           "max_attempts: must be an integer from 1 to %d",
                           lim->max_max_attempts);
            goto out;
        }
        job.max_attempts = (int)json_integer_value(ma);
    }
    json_t *pr = json_object_get(root, "priority");
    if (pr != NULL) {
        if (!json_is_integer(pr) || json_integer_value(pr) < 0 ||
            json_integer_value(pr) > JOB_PRIORITY_MAX) {
            rc = rmqs_fail(err, RMQS_EINVAL, "priority",
                           "priority: must be an integer from 0 to %d",
                           JOB_PRIORITY_MAX);
            goto out;
        }
        job.priority = (int)json_integer_value(pr);
    }
    job.claim_rank = -((int64_t)job.priority << 32);

    job.exchange = strdup(exchange);
    job.routing_key = strdup(routing_key);
    if (job.exchange == NULL || job.routing_key == NULL) {
        rc = rp_fail_nomem(err);
        goto out;
    }
    if (canonical_out != NULL) {
        canonical = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
        if (canonical == NULL) {
            rc = rp_fail_nomem(err);
            goto out;
        }
    }

    job.id[0] = '\0';
    job.status = JOB_PENDING;
    /* A time already past is due now, not then: the dispatcher (and its
     * lateness metric) measure from the later of the two. */
    job.due_at = job.deliver_at > now_ms ? job.deliver_at : now_ms;
    job.created_at = now_ms;
    job.updated_at = now_ms;
    job.sent_at = -1;
    job.fire_at = -1; /* not a schedule's run; expires_at 0: never */
    job.attempts = 0;
    job.last_error = NULL;

    /* success: move everything to the caller */
    *out = job;
    memset(&job, 0, sizeof job);
    if (canonical_out != NULL) {
        *canonical_out = canonical;
        canonical = NULL;
    }
    rc = RMQS_OK;

out:
    job_clear(&job);
    free(canonical);
    return rc;
}

/* The timing object of PATCH /jobs/{id} (and of a retry: now_if_empty,
 * where {} means due now). */
static rmqs_rc parse_change_timing(const char *buf, size_t len,
                                   const job_limits *lim, int64_t now_ms,
                                   bool now_if_empty, int64_t *deliver_at_out,
                                   int64_t *delay_ms_out, rmqs_error *err)
{
    static const char *const allowed[] = {"deliver_at", "delay_ms"};
    json_t *root = NULL;
    int64_t deliver_at, delay;
    rmqs_rc rc;

    if (lim == NULL || deliver_at_out == NULL || delay_ms_out == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "", "internal: missing argument");

    rc = rp_parse_object(buf, len, &root, err);
    if (rc != RMQS_OK)
        goto out;
    rc = rp_known_keys(root, "", allowed, sizeof allowed / sizeof allowed[0],
                       err);
    if (rc != RMQS_OK)
        goto out;
    if (now_if_empty && json_object_size(root) == 0) {
        *deliver_at_out = now_ms;
        *delay_ms_out = 0;
        goto out;
    }
    rc = parse_timing(root, lim, now_ms, &deliver_at, &delay, err);
    if (rc != RMQS_OK)
        goto out;
    *deliver_at_out = deliver_at;
    *delay_ms_out = delay;

out:
    json_decref(root);
    return rc;
}

rmqs_rc job_parse_reschedule(const char *buf, size_t len, const job_limits *lim,
                             int64_t now_ms, int64_t *deliver_at_out,
                             int64_t *delay_ms_out, rmqs_error *err)
{
    return parse_change_timing(buf, len, lim, now_ms, false, deliver_at_out,
                               delay_ms_out, err);
}

rmqs_rc job_parse_retry(const char *buf, size_t len, const job_limits *lim,
                        int64_t now_ms, int64_t *deliver_at_out,
                        int64_t *delay_ms_out, rmqs_error *err)
{
    if (len == 0 && lim != NULL && deliver_at_out != NULL &&
        delay_ms_out != NULL) { /* no body: due now */
        *deliver_at_out = now_ms;
        *delay_ms_out = 0;
        return RMQS_OK;
    }
    return parse_change_timing(buf, len, lim, now_ms, true, deliver_at_out,
                               delay_ms_out, err);
}
