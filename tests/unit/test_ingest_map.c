/*
 * test_ingest_map.c - service/ingest/ingest_map.c: a delivery from an ingest
 * exchange (built by hand as an amqp_envelope_t, as amqp_consume_message
 * would hand it over) becomes a job (ingest_map_job): timing headers, every
 * AMQP field type in headers, properties, and what cannot be carried; and
 * its idempotency key and fingerprint (ingest_map_idempotency); and the
 * checks of the --ingest mappings themselves (ingest_map_check).
 *
 * "received" is fixed at 2026-01-01T00:00:00Z; the horizon is 30 days. The
 * functions are pure and take "received" from the caller, so a fixed
 * instant keeps the expected times exact without depending on today.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amqp_message.h"
#include "ingest_map.h"
#include "job.h"
#include "job_json.h"
#include "testutil.h"

#define NOW 1767225600000LL /* 2026-01-01T00:00:00Z */
#define TARGET "orders"

static const job_limits LIM = {
    .default_max_attempts = 7,
    .max_max_attempts = 10,
    .max_delay_ms = 30 * UT_DAY,
};

/* A hand-made delivery: up to 16 headers, properties set by the test. */
typedef struct msg {
    amqp_envelope_t env;
    amqp_table_entry_t h[16];
} msg;

static void msg_init(msg *m, const char *routing_key, const char *body)
{
    memset(m, 0, sizeof *m);
    m->env.channel = 1;
    m->env.delivery_tag = 1;
    m->env.exchange = amqp_cstring_bytes("delayed");
    m->env.routing_key = amqp_cstring_bytes(routing_key);
    m->env.consumer_tag = amqp_cstring_bytes("rmq-scheduler.ingest.0");
    m->env.message.body = amqp_cstring_bytes(body);
    m->env.message.properties.headers.entries = m->h;
}

static amqp_field_value_t *add(msg *m, const char *key, uint8_t kind)
{
    amqp_basic_properties_t *p = &m->env.message.properties;
    amqp_table_entry_t *e = &m->h[p->headers.num_entries++];

    cr_assert(p->headers.num_entries <= 16);
    p->_flags |= AMQP_BASIC_HEADERS_FLAG;
    e->key = amqp_cstring_bytes(key);
    e->value.kind = kind;
    return &e->value;
}

static void add_i64(msg *m, const char *key, int64_t v)
{
    add(m, key, AMQP_FIELD_KIND_I64)->value.i64 = v;
}

static void add_str(msg *m, const char *key, const char *s)
{
    add(m, key, AMQP_FIELD_KIND_UTF8)->value.bytes = amqp_cstring_bytes(s);
}

static rmqs_rc convert(const msg *m, job_t *job, rmqs_error *err)
{
    memset(err, 0, sizeof *err);
    return ingest_map_job(&m->env, TARGET, NOW, &LIM, job, err);
}

/* ------------------------------------------------------------------ */
/* Timing                                                              */

Test(ingest_map, x_delay_sets_deliver_at_and_the_rest_of_the_job)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "order.created", "hello");
    add_i64(&m, "x-delay", 5000);
    add_str(&m, "tenant", "acme");
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);

    cr_expect_str_eq(job.id, "");
    cr_expect_eq(job.status, JOB_PENDING);
    cr_expect_eq(job.source, JOB_SOURCE_AMQP);
    cr_expect_str_eq(job.exchange, TARGET);
    cr_expect_str_eq(job.routing_key, "order.created");
    cr_expect_eq(job.deliver_at, NOW + 5000);
    cr_expect_eq(job.due_at, NOW + 5000);
    cr_expect_eq(job.delay_ms, 5000);
    cr_expect_eq(job.created_at, NOW);
    cr_expect_eq(job.updated_at, NOW);
    cr_expect_eq(job.sent_at, -1);
    cr_expect_eq(job.attempts, 0);
    cr_expect_eq(job.max_attempts, 7);
    cr_expect_null(job.last_error);
    cr_expect_eq(job.body_kind, JOB_BODY_BINARY);
    cr_assert_eq(job.body_len, 5);
    cr_expect(memcmp(job.body, "hello", 5) == 0);
    /* x-delay is consumed; the rest of the headers is kept */
    cr_assert_not_null(job.headers);
    cr_expect_eq(json_object_size(job.headers), 1);
    cr_expect_str_eq(json_string_value(json_object_get(job.headers, "tenant")),
                     "acme");
    cr_expect_null(json_object_get(job.headers, "x-delay"));
    /* no delivery_mode: transient, as RabbitMQ reads it */
    cr_assert_not_null(job.properties);
    cr_expect(json_is_false(json_object_get(job.properties, "persistent")));
    job_clear(&job);
}

Test(ingest_map, x_delay_any_integer_type)
{
    static const struct {
        uint8_t kind;
        int64_t want;
    } cases[] = {
        {AMQP_FIELD_KIND_I8, 100},      {AMQP_FIELD_KIND_U8, 200},
        {AMQP_FIELD_KIND_I16, 3000},    {AMQP_FIELD_KIND_U16, 60000},
        {AMQP_FIELD_KIND_I32, 70000},   {AMQP_FIELD_KIND_U32, 4000000},
        {AMQP_FIELD_KIND_I64, 5000000}, {AMQP_FIELD_KIND_U64, 6000000},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msg m;
        job_t job;
        rmqs_error err;
        amqp_field_value_t *v;

        msg_init(&m, "k", "");
        v = add(&m, "x-delay", cases[i].kind);
        switch (cases[i].kind) {
        case AMQP_FIELD_KIND_I8: v->value.i8 = (int8_t)cases[i].want; break;
        case AMQP_FIELD_KIND_U8: v->value.u8 = (uint8_t)cases[i].want; break;
        case AMQP_FIELD_KIND_I16: v->value.i16 = (int16_t)cases[i].want; break;
        case AMQP_FIELD_KIND_U16: v->value.u16 = (uint16_t)cases[i].want; break;
        case AMQP_FIELD_KIND_I32: v->value.i32 = (int32_t)cases[i].want; break;
        case AMQP_FIELD_KIND_U32: v->value.u32 = (uint32_t)cases[i].want; break;
        case AMQP_FIELD_KIND_I64: v->value.i64 = cases[i].want; break;
        default: v->value.u64 = (uint64_t)cases[i].want; break;
        }
        cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "kind %c: %s",
                     cases[i].kind, err.message);
        cr_expect_eq(job.deliver_at, NOW + cases[i].want, "kind %c",
                     cases[i].kind);
        cr_expect_eq(job.delay_ms, cases[i].want);
        cr_expect_null(job.headers, "only x-delay was sent");
        cr_expect_eq(job.body_len, 0);
        job_clear(&job);
    }
}

Test(ingest_map, x_delay_zero_is_due_at_once)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 0);
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK);
    cr_expect_eq(job.deliver_at, NOW);
    cr_expect_eq(job.delay_ms, 0);
    job_clear(&job);
}

/* Invalid timing: RMQS_EINVAL, and still a whole job due at once (the
 * "route" rule stores it as it is). */
static void expect_invalid_timing(msg *m, const char *field, const char *text)
{
    job_t job;
    rmqs_error err;

    cr_assert_eq(convert(m, &job, &err), RMQS_EINVAL);
    cr_expect_str_eq(err.field, field);
    cr_expect(strstr(err.message, text) != NULL, "message: %s", err.message);
    cr_assert_not_null(job.exchange, "a routable job is returned");
    cr_expect_str_eq(job.exchange, TARGET);
    cr_expect_eq(job.deliver_at, NOW);
    cr_expect_eq(job.due_at, NOW);
    cr_expect_eq(job.delay_ms, 0);
    cr_expect_eq(job.status, JOB_PENDING);
    cr_expect_eq(job.source, JOB_SOURCE_AMQP);
    cr_expect_null(job.headers ? json_object_get(job.headers, "x-delay")
                               : NULL);
    job_clear(&job);
}

Test(ingest_map, no_timing_header_is_invalid)
{
    msg m;

    msg_init(&m, "k", "b");
    expect_invalid_timing(&m, "headers.x-delay", "no x-delay or x-deliver-at");
    add_str(&m, "other", "v");
    expect_invalid_timing(&m, "headers.x-delay", "no x-delay or x-deliver-at");
}

/*
 * x-delay as the delayed-message plugin reads it (get_delay/1): every AMQP
 * field type, and the string forms Erlang's binary_to_integer/1 takes or
 * refuses. DELAYED: due at received + ms. AT_ONCE: valid, due at once (the
 * plugin routes zero and negative delays undelayed). INVALID: RMQS_EINVAL
 * with the text, a job due at once for --ingest-invalid route.
 */
enum outcome { DELAYED, AT_ONCE, INVALID };

static const struct xdelay_case {
    const char *name;
    uint8_t kind;
    int64_t i;     /* integer kinds, boolean, timestamp (as u64) */
    double d;      /* F32 / F64 */
    const char *s; /* UTF8 / BYTES */
    enum outcome want;
    int64_t ms;       /* DELAYED */
    const char *text; /* INVALID: part of the message */
} XDELAY_CASES[] = {
    {"I8 100", AMQP_FIELD_KIND_I8, 100, 0, NULL, DELAYED, 100, NULL},
    {"I8 -1", AMQP_FIELD_KIND_I8, -1, 0, NULL, AT_ONCE, 0, NULL},
    {"U8 200", AMQP_FIELD_KIND_U8, 200, 0, NULL, DELAYED, 200, NULL},
    {"I16 3000", AMQP_FIELD_KIND_I16, 3000, 0, NULL, DELAYED, 3000, NULL},
    {"U16 60000", AMQP_FIELD_KIND_U16, 60000, 0, NULL, DELAYED, 60000, NULL},
    {"I32 70000", AMQP_FIELD_KIND_I32, 70000, 0, NULL, DELAYED, 70000, NULL},
    {"I32 -3000", AMQP_FIELD_KIND_I32, -3000, 0, NULL, AT_ONCE, 0, NULL},
    {"U32 4000000", AMQP_FIELD_KIND_U32, 4000000, 0, NULL, DELAYED, 4000000,
     NULL},
    {"I64 5000000", AMQP_FIELD_KIND_I64, 5000000, 0, NULL, DELAYED, 5000000,
     NULL},
    {"I64 0", AMQP_FIELD_KIND_I64, 0, 0, NULL, AT_ONCE, 0, NULL},
    {"I64 -1", AMQP_FIELD_KIND_I64, -1, 0, NULL, AT_ONCE, 0, NULL},
    {"I64 min", AMQP_FIELD_KIND_I64, INT64_MIN, 0, NULL, AT_ONCE, 0, NULL},
    {"U64 6000000", AMQP_FIELD_KIND_U64, 6000000, 0, NULL, DELAYED, 6000000,
     NULL},
    {"F64 1500.7", AMQP_FIELD_KIND_F64, 0, 1500.7, NULL, DELAYED, 1500, NULL},
    {"F64 0.9", AMQP_FIELD_KIND_F64, 0, 0.9, NULL, AT_ONCE, 0, NULL},
    {"F64 -0.5", AMQP_FIELD_KIND_F64, 0, -0.5, NULL, AT_ONCE, 0, NULL},
    {"F64 -1e300", AMQP_FIELD_KIND_F64, 0, -1e300, NULL, AT_ONCE, 0, NULL},
    {"F64 1e300", AMQP_FIELD_KIND_F64, 0, 1e300, NULL, INVALID, 0, "horizon"},
    {"F64 NaN", AMQP_FIELD_KIND_F64, 0, NAN, NULL, INVALID, 0,
     "not a finite number"},
    {"F64 inf", AMQP_FIELD_KIND_F64, 0, INFINITY, NULL, INVALID, 0,
     "not a finite number"},
    {"F32 250.5", AMQP_FIELD_KIND_F32, 0, 250.5, NULL, DELAYED, 250, NULL},
    {"F32 -inf", AMQP_FIELD_KIND_F32, 0, -INFINITY, NULL, INVALID, 0,
     "not a finite number"},
    {"S \"500\"", AMQP_FIELD_KIND_UTF8, 0, 0, "500", DELAYED, 500, NULL},
    {"S \"0500\"", AMQP_FIELD_KIND_UTF8, 0, 0, "0500", DELAYED, 500, NULL},
    {"S \"+500\"", AMQP_FIELD_KIND_UTF8, 0, 0, "+500", DELAYED, 500, NULL},
    {"S \"-500\"", AMQP_FIELD_KIND_UTF8, 0, 0, "-500", AT_ONCE, 0, NULL},
    {"S \"0\"", AMQP_FIELD_KIND_UTF8, 0, 0, "0", AT_ONCE, 0, NULL},
    {"S huge negative", AMQP_FIELD_KIND_UTF8, 0, 0, "-99999999999999999999999",
     AT_ONCE, 0, NULL},
    {"S huge", AMQP_FIELD_KIND_UTF8, 0, 0, "99999999999999999999999", INVALID,
     0, "horizon"},
    {"S \" 500\"", AMQP_FIELD_KIND_UTF8, 0, 0, " 500", INVALID, 0,
     "not a decimal integer"},
    {"S \"500 \"", AMQP_FIELD_KIND_UTF8, 0, 0, "500 ", INVALID, 0,
     "not a decimal integer"},
    {"S \"5e2\"", AMQP_FIELD_KIND_UTF8, 0, 0, "5e2", INVALID, 0,
     "not a decimal integer"},
    {"S \"500.0\"", AMQP_FIELD_KIND_UTF8, 0, 0, "500.0", INVALID, 0,
     "not a decimal integer"},
    {"S \"0x10\"", AMQP_FIELD_KIND_UTF8, 0, 0, "0x10", INVALID, 0,
     "not a decimal integer"},
    {"S \"+\"", AMQP_FIELD_KIND_UTF8, 0, 0, "+", INVALID, 0, "without digits"},
    {"S \"\"", AMQP_FIELD_KIND_UTF8, 0, 0, "", INVALID, 0, "without digits"},
    {"x \"750\"", AMQP_FIELD_KIND_BYTES, 0, 0, "750", DELAYED, 750, NULL},
    {"x \"abc\"", AMQP_FIELD_KIND_BYTES, 0, 0, "abc", INVALID, 0,
     "not a decimal integer"},
    {"t true", AMQP_FIELD_KIND_BOOLEAN, 1, 0, NULL, INVALID, 0,
     "not a boolean"},
    {"T timestamp", AMQP_FIELD_KIND_TIMESTAMP, 1767225601, 0, NULL, INVALID, 0,
     "not a timestamp"},
    {"D decimal", AMQP_FIELD_KIND_DECIMAL, 0, 0, NULL, INVALID, 0,
     "not a decimal"},
    {"V void", AMQP_FIELD_KIND_VOID, 0, 0, NULL, INVALID, 0, "not void"},
    {"F table", AMQP_FIELD_KIND_TABLE, 0, 0, NULL, INVALID, 0, "not a table"},
    {"A array", AMQP_FIELD_KIND_ARRAY, 0, 0, NULL, INVALID, 0, "not an array"},
};

static void set_case_value(amqp_field_value_t *v, const struct xdelay_case *c)
{
    switch (c->kind) {
    case AMQP_FIELD_KIND_I8: v->value.i8 = (int8_t)c->i; break;
    case AMQP_FIELD_KIND_U8: v->value.u8 = (uint8_t)c->i; break;
    case AMQP_FIELD_KIND_I16: v->value.i16 = (int16_t)c->i; break;
    case AMQP_FIELD_KIND_U16: v->value.u16 = (uint16_t)c->i; break;
    case AMQP_FIELD_KIND_I32: v->value.i32 = (int32_t)c->i; break;
    case AMQP_FIELD_KIND_U32: v->value.u32 = (uint32_t)c->i; break;
    case AMQP_FIELD_KIND_I64: v->value.i64 = c->i; break;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP: v->value.u64 = (uint64_t)c->i; break;
    case AMQP_FIELD_KIND_BOOLEAN:
        v->value.boolean = (amqp_boolean_t)c->i;
        break;
    case AMQP_FIELD_KIND_F32: v->value.f32 = (float)c->d; break;
    case AMQP_FIELD_KIND_F64: v->value.f64 = c->d; break;
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        v->value.bytes = amqp_cstring_bytes(c->s);
        break;
    case AMQP_FIELD_KIND_DECIMAL:
        v->value.decimal.decimals = 1;
        v->value.decimal.value = 5000;
        break;
    default: break; /* void, empty table, empty array */
    }
}

Test(ingest_map, x_delay_every_field_type_as_the_plugin_reads_it)
{
    for (size_t i = 0; i < sizeof XDELAY_CASES / sizeof XDELAY_CASES[0]; i++) {
        const struct xdelay_case *c = &XDELAY_CASES[i];
        msg m;
        job_t job;
        rmqs_error err;
        rmqs_rc rc;

        msg_init(&m, "k", "b");
        set_case_value(add(&m, "x-delay", c->kind), c);
        rc = convert(&m, &job, &err);
        switch (c->want) {
        case DELAYED:
        case AT_ONCE:
            cr_expect_eq(rc, RMQS_OK, "%s: %s", c->name, err.message);
            cr_expect_eq(job.deliver_at, NOW + c->ms, "%s: deliver_at %+lld",
                         c->name, (long long)(job.deliver_at - NOW));
            cr_expect_eq(job.due_at, NOW + c->ms, "%s", c->name);
            cr_expect_eq(job.delay_ms, c->ms, "%s", c->name);
            break;
        case INVALID:
            cr_expect_eq(rc, RMQS_EINVAL, "%s: rc %d", c->name, rc);
            cr_expect_str_eq(err.field, "headers.x-delay", "%s", c->name);
            cr_expect(strstr(err.message, c->text) != NULL, "%s: message: %s",
                      c->name, err.message);
            cr_expect_not_null(job.exchange, "%s: still a routable job",
                               c->name);
            cr_expect_eq(job.deliver_at, NOW, "%s", c->name);
            cr_expect_eq(job.delay_ms, 0, "%s", c->name);
            break;
        }
        cr_expect_null(job.headers, "%s: x-delay is consumed", c->name);
        job_clear(&job);
    }
}

Test(ingest_map, x_delay_beyond_the_horizon_is_invalid)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 30 * UT_DAY);
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK,
                 "the horizon itself is fine");
    job_clear(&job);

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 30 * UT_DAY + 1);
    expect_invalid_timing(&m, "headers.x-delay", "horizon");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", INT64_MAX);
    expect_invalid_timing(&m, "headers.x-delay", "horizon");

    msg_init(&m, "k", "b");
    add(&m, "x-delay", AMQP_FIELD_KIND_U64)->value.u64 = UINT64_MAX;
    expect_invalid_timing(&m, "headers.x-delay", "horizon");
}

Test(ingest_map, both_timing_headers_are_invalid)
{
    msg m;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 10);
    add_str(&m, "x-deliver-at", "2026-01-01T00:00:10Z");
    expect_invalid_timing(&m, "headers.x-deliver-at", "both");
}

Test(ingest_map, x_deliver_at_rfc3339_string_or_bytes)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "b");
    add_str(&m, "x-deliver-at", "2026-01-01T08:00:01.5+08:00");
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(job.deliver_at, NOW + 1500);
    cr_expect_eq(job.delay_ms, 1500);
    cr_expect_null(job.headers);
    job_clear(&job);

    msg_init(&m, "k", "b");
    add(&m, "x-deliver-at", AMQP_FIELD_KIND_BYTES)->value.bytes =
        amqp_cstring_bytes("2026-01-02T00:00:00Z");
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(job.deliver_at, NOW + UT_DAY);
    cr_expect_eq(job.delay_ms, UT_DAY);
    job_clear(&job);
}

Test(ingest_map, x_deliver_at_integer_ms_and_timestamp_seconds)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-deliver-at", NOW + 2500);
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(job.deliver_at, NOW + 2500);
    cr_expect_eq(job.delay_ms, 2500);
    job_clear(&job);

    msg_init(&m, "k", "b");
    add(&m, "x-deliver-at", AMQP_FIELD_KIND_TIMESTAMP)->value.u64 =
        (uint64_t)(NOW / 1000 + 60);
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(job.deliver_at, NOW + 60000);
    job_clear(&job);
}

Test(ingest_map, x_deliver_at_in_the_past_is_due_at_once)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "b");
    add_str(&m, "x-deliver-at", "2025-12-31T23:59:00Z");
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(job.deliver_at, NOW - 60000, "kept as asked");
    cr_expect_eq(job.due_at, NOW, "due from when it arrived, not then");
    cr_expect_eq(job.delay_ms, 0);
    job_clear(&job);

    msg_init(&m, "k", "b");
    add_i64(&m, "x-deliver-at", INT64_MIN);
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(job.delay_ms, 0);
    job_clear(&job);
}

Test(ingest_map, bad_x_deliver_at_is_invalid)
{
    msg m;

    msg_init(&m, "k", "b");
    add_str(&m, "x-deliver-at", "tomorrow");
    expect_invalid_timing(&m, "headers.x-deliver-at", "RFC 3339");

    msg_init(&m, "k", "b");
    add_str(&m, "x-deliver-at", "2026-03-01T00:00:00Z");
    expect_invalid_timing(&m, "headers.x-deliver-at", "horizon");

    msg_init(&m, "k", "b");
    add(&m, "x-deliver-at", AMQP_FIELD_KIND_BOOLEAN)->value.boolean = 1;
    expect_invalid_timing(&m, "headers.x-deliver-at",
                          "RFC 3339 string or integer");

    msg_init(&m, "k", "b");
    add(&m, "x-deliver-at", AMQP_FIELD_KIND_U64)->value.u64 = UINT64_MAX;
    expect_invalid_timing(&m, "headers.x-deliver-at", "horizon");

    msg_init(&m, "k", "b");
    add(&m, "x-deliver-at", AMQP_FIELD_KIND_TIMESTAMP)->value.u64 = UINT64_MAX;
    expect_invalid_timing(&m, "headers.x-deliver-at", "horizon");
}

Test(ingest_map, timing_names_are_exact)
{
    msg m;
    job_t job;
    rmqs_error err;

    /* like the plugin: "X-Delay" is an ordinary header */
    msg_init(&m, "k", "b");
    add_i64(&m, "X-Delay", 5000);
    cr_assert_eq(convert(&m, &job, &err), RMQS_EINVAL);
    cr_expect_eq(json_integer_value(json_object_get(job.headers, "X-Delay")),
                 5000);
    job_clear(&job);
}

/* ------------------------------------------------------------------ */
/* Headers                                                             */

Test(ingest_map, header_types_that_are_carried)
{
    msg m;
    job_t job;
    rmqs_error err;
    json_t *h;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add(&m, "bool", AMQP_FIELD_KIND_BOOLEAN)->value.boolean = 1;
    add(&m, "i8", AMQP_FIELD_KIND_I8)->value.i8 = -8;
    add(&m, "u8", AMQP_FIELD_KIND_U8)->value.u8 = 255;
    add(&m, "i16", AMQP_FIELD_KIND_I16)->value.i16 = -16000;
    add(&m, "u16", AMQP_FIELD_KIND_U16)->value.u16 = 65535;
    add(&m, "i32", AMQP_FIELD_KIND_I32)->value.i32 = INT32_MIN;
    add(&m, "u32", AMQP_FIELD_KIND_U32)->value.u32 = UINT32_MAX;
    add(&m, "i64", AMQP_FIELD_KIND_I64)->value.i64 = INT64_MIN;
    add(&m, "u64", AMQP_FIELD_KIND_U64)->value.u64 = (uint64_t)INT64_MAX;
    add(&m, "f32", AMQP_FIELD_KIND_F32)->value.f32 = 1.5f;
    add(&m, "f64", AMQP_FIELD_KIND_F64)->value.f64 = -2.25;
    add(&m, "ts", AMQP_FIELD_KIND_TIMESTAMP)->value.u64 = 1767225600;
    add_str(&m, "str", "h\xc3\xa9llo");
    add(&m, "bytes", AMQP_FIELD_KIND_BYTES)->value.bytes =
        amqp_cstring_bytes("plain");
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);

    h = job.headers;
    cr_assert_not_null(h);
    cr_expect_eq(json_object_size(h), 14);
    cr_expect(json_is_true(json_object_get(h, "bool")));
    cr_expect_eq(json_integer_value(json_object_get(h, "i8")), -8);
    cr_expect_eq(json_integer_value(json_object_get(h, "u8")), 255);
    cr_expect_eq(json_integer_value(json_object_get(h, "i16")), -16000);
    cr_expect_eq(json_integer_value(json_object_get(h, "u16")), 65535);
    cr_expect_eq(json_integer_value(json_object_get(h, "i32")), INT32_MIN);
    cr_expect_eq(json_integer_value(json_object_get(h, "u32")), UINT32_MAX);
    cr_expect_eq(json_integer_value(json_object_get(h, "i64")), INT64_MIN);
    cr_expect_eq(json_integer_value(json_object_get(h, "u64")), INT64_MAX);
    cr_expect(json_is_real(json_object_get(h, "f32")));
    cr_expect_eq(json_real_value(json_object_get(h, "f32")), 1.5);
    cr_expect_eq(json_real_value(json_object_get(h, "f64")), -2.25);
    cr_expect(json_is_integer(json_object_get(h, "ts")));
    cr_expect_eq(json_integer_value(json_object_get(h, "ts")), 1767225600);
    cr_expect_str_eq(json_string_value(json_object_get(h, "str")),
                     "h\xc3\xa9llo");
    cr_expect_str_eq(json_string_value(json_object_get(h, "bytes")), "plain");
    job_clear(&job);
}

Test(ingest_map, header_string_with_nul_is_carried)
{
    msg m;
    job_t job;
    rmqs_error err;
    json_t *v;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add(&m, "nul", AMQP_FIELD_KIND_UTF8)->value.bytes =
        (amqp_bytes_t){3, (void *)"a\0b"};
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    v = json_object_get(job.headers, "nul");
    cr_assert(json_is_string(v));
    cr_expect_eq(json_string_length(v), 3);
    cr_expect(memcmp(json_string_value(v), "a\0b", 3) == 0);
    job_clear(&job);
}

/* A header the job model cannot carry: RMQS_EINVAL and a zeroed job. */
static void expect_uncarriable(msg *m, const char *text)
{
    job_t job;
    rmqs_error err;

    memset(&job, 0xAB, sizeof job);
    cr_assert_eq(convert(m, &job, &err), RMQS_EINVAL);
    cr_expect(ut_is_zero(&job, sizeof job), "the job is zeroed");
    cr_expect(strstr(err.message, "cannot be carried") != NULL, "%s",
              err.message);
    cr_expect(strstr(err.message, text) != NULL, "message: %s", err.message);
}

Test(ingest_map, header_types_that_cannot_be_carried)
{
    static const struct {
        uint8_t kind;
        const char *text;
    } cases[] = {
        {AMQP_FIELD_KIND_TABLE, "a table"},
        {AMQP_FIELD_KIND_ARRAY, "an array"},
        {AMQP_FIELD_KIND_DECIMAL, "a decimal"},
        {AMQP_FIELD_KIND_VOID, "void"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msg m;
        msg_init(&m, "k", "b");
        add_i64(&m, "x-delay", 1);
        add(&m, "bad", cases[i].kind);
        expect_uncarriable(&m, cases[i].text);
    }
}

Test(ingest_map, unsigned_64_above_int64_cannot_be_carried)
{
    msg m;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add(&m, "big", AMQP_FIELD_KIND_U64)->value.u64 = (uint64_t)INT64_MAX + 1;
    expect_uncarriable(&m, "big: an unsigned 64-bit integer");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add(&m, "ts", AMQP_FIELD_KIND_TIMESTAMP)->value.u64 = UINT64_MAX;
    expect_uncarriable(&m, "ts: a timestamp");
}

Test(ingest_map, non_finite_numbers_cannot_be_carried)
{
    msg m;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add(&m, "nan", AMQP_FIELD_KIND_F64)->value.f64 = NAN;
    expect_uncarriable(&m, "not a finite number");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add(&m, "inf", AMQP_FIELD_KIND_F32)->value.f32 = INFINITY;
    expect_uncarriable(&m, "not a finite number");
}

Test(ingest_map, invalid_utf8_cannot_be_carried)
{
    msg m;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add(&m, "raw", AMQP_FIELD_KIND_BYTES)->value.bytes =
        (amqp_bytes_t){2, (void *)"\xff\xfe"};
    expect_uncarriable(&m, "a byte array that is not valid UTF-8");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add_str(&m, "surrogate", "\xed\xa0\x80"); /* U+D800 */
    expect_uncarriable(&m, "a string that is not valid UTF-8");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add_str(&m, "overlong", "\xc0\xaf");
    expect_uncarriable(&m, "not valid UTF-8");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add_str(&m, "\xff", "name");
    expect_uncarriable(&m, "header name");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add_str(&m, "", "empty name");
    expect_uncarriable(&m, "header name");
}

Test(ingest_map, uncarriable_wins_over_invalid_timing)
{
    msg m;

    msg_init(&m, "k", "b");
    add(&m, "t", AMQP_FIELD_KIND_TABLE);
    expect_uncarriable(&m, "a table");
}

Test(ingest_map, routing_key_must_be_text)
{
    msg m;

    msg_init(&m, "k", "b");
    m.env.routing_key = (amqp_bytes_t){2, (void *)"\xc3("};
    add_i64(&m, "x-delay", 1);
    expect_uncarriable(&m, "routing key");

    msg_init(&m, "k", "b");
    m.env.routing_key = (amqp_bytes_t){3, (void *)"a\0b"};
    add_i64(&m, "x-delay", 1);
    expect_uncarriable(&m, "routing key");
}

Test(ingest_map, scheduler_headers_are_dropped)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    add_str(&m, "x-scheduler-job-id", "019ad2f4-5e1c-7b3a-9d0e-2f6a1c8b4e77");
    add_str(&m, "x-scheduled-at", "2026-01-01T00:00:00.000Z");
    add_str(&m, "keep", "me");
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(json_object_size(job.headers), 1);
    cr_expect_not_null(json_object_get(job.headers, "keep"));
    job_clear(&job);
}

/* ------------------------------------------------------------------ */
/* Properties and body                                                 */

Test(ingest_map, properties_are_mapped)
{
    msg m;
    job_t job;
    rmqs_error err;
    amqp_basic_properties_t *p;
    json_t *pr;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    p = &m.env.message.properties;
    p->_flags |= AMQP_BASIC_CONTENT_TYPE_FLAG |
                 AMQP_BASIC_CONTENT_ENCODING_FLAG |
                 AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_REPLY_TO_FLAG |
                 AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG |
                 AMQP_BASIC_APP_ID_FLAG | AMQP_BASIC_USER_ID_FLAG |
                 AMQP_BASIC_PRIORITY_FLAG | AMQP_BASIC_EXPIRATION_FLAG |
                 AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_TIMESTAMP_FLAG |
                 AMQP_BASIC_CLUSTER_ID_FLAG;
    p->content_type = amqp_cstring_bytes("application/json");
    p->content_encoding = amqp_cstring_bytes("gzip");
    p->correlation_id = amqp_cstring_bytes("corr-1");
    p->reply_to = amqp_cstring_bytes("replies");
    p->message_id = amqp_cstring_bytes("msg-1");
    p->type = amqp_cstring_bytes("order.created");
    p->app_id = amqp_cstring_bytes("shop");
    p->user_id = amqp_cstring_bytes("guest");
    p->priority = 7;
    p->expiration = amqp_cstring_bytes("60000");
    p->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p->timestamp = 1767225600;
    p->cluster_id = amqp_cstring_bytes("c1");
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK, "%s", err.message);

    pr = job.properties;
    cr_assert_not_null(pr);
    cr_expect_str_eq(json_string_value(json_object_get(pr, "content_type")),
                     "application/json");
    cr_expect_str_eq(json_string_value(json_object_get(pr, "content_encoding")),
                     "gzip");
    cr_expect_str_eq(json_string_value(json_object_get(pr, "correlation_id")),
                     "corr-1");
    cr_expect_str_eq(json_string_value(json_object_get(pr, "reply_to")),
                     "replies");
    cr_expect_str_eq(json_string_value(json_object_get(pr, "message_id")),
                     "msg-1");
    cr_expect_str_eq(json_string_value(json_object_get(pr, "type")),
                     "order.created");
    cr_expect_str_eq(json_string_value(json_object_get(pr, "app_id")), "shop");
    cr_expect_str_eq(json_string_value(json_object_get(pr, "user_id")),
                     "guest");
    cr_expect_eq(json_integer_value(json_object_get(pr, "priority")), 7);
    cr_expect_str_eq(json_string_value(json_object_get(pr, "expiration")),
                     "60000");
    /* persistent is the default: not stored; timestamp and cluster_id are
     * dropped */
    cr_expect_null(json_object_get(pr, "persistent"));
    cr_expect_null(json_object_get(pr, "timestamp"));
    cr_expect_null(json_object_get(pr, "cluster_id"));
    cr_expect_eq(json_object_size(pr), 10);
    job_clear(&job);
}

Test(ingest_map, delivery_mode_decides_persistent)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    m.env.message.properties._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
    m.env.message.properties.delivery_mode = AMQP_DELIVERY_NONPERSISTENT;
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK);
    cr_expect(json_is_false(json_object_get(job.properties, "persistent")));
    cr_expect_eq(json_object_size(job.properties), 1);
    job_clear(&job);

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    m.env.message.properties._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
    m.env.message.properties.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK);
    cr_expect_null(job.properties, "nothing but the default: no object");
    job_clear(&job);
}

Test(ingest_map, property_that_is_not_text_cannot_be_carried)
{
    msg m;

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    m.env.message.properties._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    m.env.message.properties.message_id = (amqp_bytes_t){3, (void *)"a\0b"};
    expect_uncarriable(&m, "properties.message_id");

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    m.env.message.properties._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
    m.env.message.properties.correlation_id = (amqp_bytes_t){1, (void *)"\x80"};
    expect_uncarriable(&m, "properties.correlation_id");
}

Test(ingest_map, binary_body_is_kept_byte_for_byte)
{
    static const unsigned char bytes[] = {0x00, 0xff, 0x10, 0x00, 0x7f};
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "k", "");
    m.env.message.body = (amqp_bytes_t){sizeof bytes, (void *)bytes};
    add_i64(&m, "x-delay", 1);
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK);
    cr_expect_eq(job.body_kind, JOB_BODY_BINARY);
    cr_assert_eq(job.body_len, sizeof bytes);
    cr_expect(memcmp(job.body, bytes, sizeof bytes) == 0);
    job_clear(&job);
}

Test(ingest_map, empty_target_and_routing_key)
{
    msg m;
    job_t job;
    rmqs_error err;

    msg_init(&m, "", "");
    add_i64(&m, "x-delay", 1);
    memset(&err, 0, sizeof err);
    cr_assert_eq(ingest_map_job(&m.env, "", NOW, &LIM, &job, &err), RMQS_OK);
    cr_expect_str_eq(job.exchange, "");
    cr_expect_str_eq(job.routing_key, "");
    cr_expect_eq(job.body_len, 0);
    job_clear(&job);
}

Test(ingest_map, job_reads_back_as_json)
{
    msg m;
    job_t job;
    rmqs_error err;
    job_buf b = {0};
    json_t *j;

    msg_init(&m, "k", "payload");
    add_i64(&m, "x-delay", 1000);
    cr_assert_eq(convert(&m, &job, &err), RMQS_OK);
    cr_assert_eq(job_id_generate(NOW, job.id), RMQS_OK);
    cr_assert_eq(job_write_json(&b, &job, 0), RMQS_OK);
    j = json_loads(b.data, 0, NULL);
    cr_assert_not_null(j, "%s", b.data);
    cr_expect_str_eq(json_string_value(json_object_get(j, "source")), "amqp");
    cr_expect_str_eq(json_string_value(json_object_get(j, "body_base64")),
                     "cGF5bG9hZA==");
    json_decref(j);
    job_buf_free(&b);
    job_clear(&job);
}

/* ------------------------------------------------------------------ */
/* Idempotency key and fingerprint                                     */

/* The delivery of the fingerprint's reference value (see below). */
static void reference_msg(msg *m)
{
    amqp_basic_properties_t *p = &m->env.message.properties;

    msg_init(m, "order.created", "hello");
    add_str(m, "tenant", "acme");
    add_i64(m, "x-delay", 5000);
    p->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    p->message_id = amqp_cstring_bytes("m-1");
}

/* Key and request of m (the job is made and cleared here). */
static void idem(const msg *m, char **key, char req[INGEST_MAP_REQUEST_LEN + 1])
{
    job_t job;
    rmqs_error err;

    cr_assert_eq(convert(m, &job, &err), RMQS_OK, "%s", err.message);
    cr_assert_eq(ingest_map_idempotency(&m->env, &job, "delayed", key, req),
                 RMQS_OK);
    job_clear(&job);
}

/*
 * The fingerprint is stored with every keyed job, so it must not change
 * from one version to the next: a message redelivered after an upgrade
 * would otherwise look like another message reusing its id, and be stored
 * twice. The reference value was computed apart from this code, in Python,
 * from the layout ingest_map.c documents (lengths as little-endian 64-bit):
 *   d = pack('<Q', 13) + b'order.created' + pack('<Q', 5) + b'hello'
 *       + b'{"tenant":"acme"}\0' + b'{"message_id":"m-1","persistent":false}\0'
 *       + b'x-delay' + b'l' + pack('<q', 5000) + b'\0'
 *   hashlib.sha256(d).hexdigest()
 */
Test(ingest_map, idempotency_key_and_stable_fingerprint)
{
    msg m;
    char *key;
    char req[INGEST_MAP_REQUEST_LEN + 1];

    reference_msg(&m);
    idem(&m, &key, req);
    cr_assert_not_null(key);
    cr_expect_str_eq(key, "amqp:delayed:m-1");
    cr_expect_str_eq(req, "amqp:a5b92563671d35e17272c5a870e837993595377d"
                          "2843f77f751d202221e25991");
    free(key);
}

Test(ingest_map, no_message_id_no_key)
{
    msg m;
    char *key = (char *)"unset";
    char req[INGEST_MAP_REQUEST_LEN + 1] = "unset";

    msg_init(&m, "k", "b");
    add_i64(&m, "x-delay", 1);
    idem(&m, &key, req);
    cr_expect_null(key);
    cr_expect_str_eq(req, "");

    /* an empty message_id recognises nothing either */
    key = (char *)"unset";
    m.env.message.properties._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    m.env.message.properties.message_id = amqp_cstring_bytes("");
    idem(&m, &key, req);
    cr_expect_null(key);
    cr_expect_str_eq(req, "");
}

Test(ingest_map, fingerprint_tells_messages_with_one_id_apart)
{
    char *ref_key, *key;
    char ref[INGEST_MAP_REQUEST_LEN + 1], req[INGEST_MAP_REQUEST_LEN + 1];
    msg m;

    reference_msg(&m);
    idem(&m, &ref_key, ref);

    /* The same message again (a redelivery): the same key and request. */
    reference_msg(&m);
    idem(&m, &key, req);
    cr_expect_str_eq(key, ref_key);
    cr_expect_str_eq(req, ref);
    free(key);

    /* Each part of the message counts; the key stays the same. */
    for (int change = 0; change < 6; change++) {
        reference_msg(&m);
        switch (change) {
        case 0: m.env.routing_key = amqp_cstring_bytes("order.paid"); break;
        case 1: m.env.message.body = amqp_cstring_bytes("hellO"); break;
        case 2: m.h[0].value.value.bytes = amqp_cstring_bytes("acmf"); break;
        case 3: /* the timing header is not among the job's headers */
            m.h[1].value.value.i64 = 5001;
            break;
        case 4: /* the same delay, written as a string */
            m.h[1].value.kind = AMQP_FIELD_KIND_UTF8;
            m.h[1].value.value.bytes = amqp_cstring_bytes("5000");
            break;
        case 5:
            m.env.message.properties._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
            m.env.message.properties.delivery_mode = AMQP_DELIVERY_PERSISTENT;
            break;
        }
        idem(&m, &key, req);
        cr_expect_str_eq(key, ref_key, "change %d", change);
        cr_expect_str_neq(req, ref, "change %d: the same fingerprint", change);
        free(key);
    }

    /* Header order does not: the converted headers are hashed sorted. */
    msg_init(&m, "order.created", "hello");
    add_i64(&m, "x-delay", 5000);
    add_str(&m, "tenant", "acme");
    m.env.message.properties._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    m.env.message.properties.message_id = amqp_cstring_bytes("m-1");
    idem(&m, &key, req);
    cr_expect_str_eq(req, ref);
    free(key);
    free(ref_key);
}

Test(ingest_map, printable_copy_for_logs)
{
    char out[INGEST_MAP_LOG_TEXT + 4];
    char long_text[200];

    ingest_map_printable(out, sizeof out, "a\"b\\c\n\xc3\xa9", 8);
    cr_expect_str_eq(out, "a?b?c???");

    memset(long_text, 'x', sizeof long_text);
    ingest_map_printable(out, sizeof out, long_text, sizeof long_text);
    cr_expect_eq(strlen(out), INGEST_MAP_LOG_TEXT + 3);
    cr_expect_str_eq(out + INGEST_MAP_LOG_TEXT, "...");

    /* a small buffer: cut, and still terminated inside it */
    memset(out, 'z', sizeof out);
    ingest_map_printable(out, 4, "abcdef", 6);
    cr_expect_lt(strlen(out), 4);
    cr_expect(strncmp(out, "abcdef", strlen(out)) == 0, "%s", out);
}


/* ------------------------------------------------------------------ */
/* The --ingest mappings                                               */

#define MAPS(...) ((const ingest_mapping[]){__VA_ARGS__})

static void expect_refused(const ingest_mapping *maps, size_t n,
                           ingest_invalid_rule rule, const char *dlx,
                           const char *field, const char *text)
{
    rmqs_error err = {{0}, {0}};

    cr_expect_eq(ingest_map_check(maps, n, rule, dlx, &err), RMQS_EINVAL,
                 "accepted; want: %s", text);
    cr_expect_str_eq(err.field, field, "%s", text);
    cr_expect(strstr(err.message, text) != NULL, "%s: got %s", text,
              err.message);
}

Test(ingest_map, mappings_that_are_accepted)
{
    rmqs_error err = {{0}, {0}};
    char longest[AMQPM_SHORTSTR_MAX + 1];
    size_t room = AMQPM_SHORTSTR_MAX - strlen(INGEST_MAP_INBOX_PREFIX);

    memset(longest, 'x', room);
    longest[room] = '\0'; /* its inbox name is exactly 255 bytes */
    cr_expect_eq(ingest_map_check(MAPS({"delayed", "orders"},
                                       {"caf\xc3\xa9", ""}, /* default exch. */
                                       {longest, "t"}),
                                  3, INGEST_INVALID_ROUTE, NULL, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_eq(ingest_map_check(MAPS({"delayed", "orders"}), 1,
                                  INGEST_INVALID_DEAD_LETTER, "dead", &err),
                 RMQS_OK, "%s", err.message);
}

Test(ingest_map, mappings_that_are_refused)
{
    char too_long[AMQPM_SHORTSTR_MAX + 2];
    size_t room = AMQPM_SHORTSTR_MAX - strlen(INGEST_MAP_INBOX_PREFIX);

    expect_refused(NULL, 0, INGEST_INVALID_ROUTE, NULL, "ingest",
                   "no ingest mapping");
    expect_refused(MAPS({"", "t"}), 1, INGEST_INVALID_ROUTE, NULL, "ingest",
                   "ingest exchange: an exchange name is required");
    memset(too_long, 'x', room + 1);
    too_long[room + 1] = '\0';
    expect_refused(MAPS({too_long, "t"}), 1, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "longer than 235 bytes");
    memset(too_long, 'x', AMQPM_SHORTSTR_MAX + 1);
    too_long[AMQPM_SHORTSTR_MAX + 1] = '\0';
    expect_refused(MAPS({"a", too_long}), 1, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "target exchange: exchange name longer than 255");
    expect_refused(MAPS({"a\xc0\xaf", "t"}), 1, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "ingest exchange: not valid UTF-8");
    expect_refused(MAPS({"a", "\xed\xa0\x80"}), 1, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "target exchange: not valid UTF-8");
    expect_refused(MAPS({"amq.delayed", "t"}), 1, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "reserved by the broker");
    expect_refused(MAPS({"a", "b"}, {"a", "c"}), 2, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "ingest exchange a is mapped twice");
    expect_refused(MAPS({"loop", "loop"}), 1, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "target exchange loop is also an ingest exchange");
    expect_refused(MAPS({"a", "b"}, {"b", "c"}), 2, INGEST_INVALID_ROUTE, NULL,
                   "ingest", "target exchange b is also an ingest exchange");
    expect_refused(MAPS({"a", "t"}), 1, INGEST_INVALID_DEAD_LETTER, NULL,
                   "ingest-dead-letter-exchange",
                   "dead-letter exchange: an exchange name is required");
    expect_refused(MAPS({"a", "t"}), 1, INGEST_INVALID_DEAD_LETTER, "a",
                   "ingest-dead-letter-exchange",
                   "dead-letter exchange a is an ingest exchange");
    expect_refused(MAPS({"a", "t"}), 1, (ingest_invalid_rule)7, NULL,
                   "ingest-invalid", "must be route or dead-letter");
}
