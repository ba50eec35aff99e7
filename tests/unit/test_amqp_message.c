/*
 * test_amqp_message.c - the one header-size calculator against rabbitmq-c's
 * own encoder: the same properties and headers, built as the publisher
 * builds them, must encode to exactly the bytes amqpm_encoded_size() says.
 * And the names table the publisher, the ingest and job.c share, and
 * amqpm_build, the message the publisher sends, against both.
 */
#include <criterion/criterion.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <string.h>

#include "amqp_message.h"
#include "job.h"
#include "timeutil.h"

#define ID "0190d6e2-7b3c-7d4e-8f00-123456789abc"

static amqp_table_entry_t entry(const char *key, amqp_field_value_t v)
{
    return (amqp_table_entry_t){amqp_cstring_bytes(key), v};
}

static amqp_field_value_t utf8(const char *s)
{
    amqp_field_value_t v = {.kind = AMQP_FIELD_KIND_UTF8};
    v.value.bytes = amqp_cstring_bytes(s);
    return v;
}

static amqp_field_value_t i64(int64_t n)
{
    amqp_field_value_t v = {.kind = AMQP_FIELD_KIND_I64};
    v.value.i64 = n;
    return v;
}

/* What rabbitmq-c writes for these properties (flags included). */
static size_t encoded(amqp_basic_properties_t *p)
{
    static char buf[65536];
    int n = amqp_encode_properties(AMQP_BASIC_CLASS, p,
                                   (amqp_bytes_t){sizeof buf, buf});
    cr_assert(n > 0, "amqp_encode_properties: %d", n);
    return (size_t)n;
}

/* The three headers the publisher adds, after n entries of the job's. */
static int add_ours(amqp_table_entry_t *e, int n, char *scheduled_at)
{
    tu_format_rfc3339(1767225600123, scheduled_at);
    e[n++] = entry(AMQPM_HDR_JOB_ID, utf8(ID));
    e[n++] = entry(AMQPM_HDR_SCHEDULED_AT, utf8(scheduled_at));
    e[n++] = entry(AMQPM_HDR_DELAY, i64(-600000));
    return n;
}

Test(amqp_message, size_of_a_bare_job_matches_the_encoder)
{
    amqp_table_entry_t e[3];
    char at[TU_RFC3339_LEN + 1];
    amqp_basic_properties_t p;

    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
               AMQP_BASIC_HEADERS_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.message_id = amqp_cstring_bytes(ID);
    p.headers.num_entries = add_ours(e, 0, at);
    p.headers.entries = e;
    cr_expect_eq(amqpm_encoded_size(NULL, NULL, strlen(ID)), encoded(&p));
}

Test(amqp_message, size_of_every_header_and_property_kind_matches_the_encoder)
{
    json_error_t jerr;
    json_t *headers = json_loads(
        "{\"s\": \"text\", \"i\": -7, \"r\": 1.5, \"b\": true, \"n\": null,"
        " \"t\": {\"k\": \"v\", \"z\": [1, \"x\"]},"
        " \"x-delay\": 5, \"x-scheduled-at\": \"dropped\"}",
        0, &jerr);
    json_t *props = json_loads(
        "{\"content_type\": \"application/json\", \"correlation_id\": \"c1\","
        " \"reply_to\": \"r\", \"app_id\": \"shop\", \"priority\": 3,"
        " \"expiration\": \"60000\", \"persistent\": false}",
        0, &jerr);
    amqp_field_value_t arr[2] = {i64(1), utf8("x")};
    amqp_table_entry_t inner[2], e[9];
    amqp_field_value_t v;
    char at[TU_RFC3339_LEN + 1];
    amqp_basic_properties_t p;
    int n = 0;

    cr_assert(headers && props, "%s", jerr.text);
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG |
               AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_REPLY_TO_FLAG |
               AMQP_BASIC_APP_ID_FLAG | AMQP_BASIC_PRIORITY_FLAG |
               AMQP_BASIC_EXPIRATION_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
               AMQP_BASIC_HEADERS_FLAG;
    p.delivery_mode = AMQP_DELIVERY_NONPERSISTENT;
    p.content_type = amqp_cstring_bytes("application/json");
    p.correlation_id = amqp_cstring_bytes("c1");
    p.reply_to = amqp_cstring_bytes("r");
    p.app_id = amqp_cstring_bytes("shop");
    p.priority = 3;
    p.expiration = amqp_cstring_bytes("60000");
    p.message_id = amqp_cstring_bytes(ID);

    e[n++] = entry("s", utf8("text"));
    e[n++] = entry("i", i64(-7));
    v = (amqp_field_value_t){.kind = AMQP_FIELD_KIND_F64};
    v.value.f64 = 1.5;
    e[n++] = entry("r", v);
    v = (amqp_field_value_t){.kind = AMQP_FIELD_KIND_BOOLEAN};
    v.value.boolean = 1;
    e[n++] = entry("b", v);
    e[n++] = entry("n", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_VOID});
    v = (amqp_field_value_t){.kind = AMQP_FIELD_KIND_ARRAY};
    v.value.array = (amqp_array_t){2, arr};
    inner[0] = entry("k", utf8("v"));
    inner[1] = entry("z", v);
    v = (amqp_field_value_t){.kind = AMQP_FIELD_KIND_TABLE};
    v.value.table = (amqp_table_t){2, inner};
    e[n++] = entry("t", v);
    /* the job's own x-delay and x-scheduled-at are replaced by ours */
    p.headers.num_entries = add_ours(e, n, at);
    p.headers.entries = e;

    cr_expect_eq(amqpm_encoded_size(headers, props, strlen(ID)), encoded(&p));
    json_decref(headers);
    json_decref(props);
}

Test(amqp_message, a_given_message_id_replaces_the_default)
{
    json_t *props = json_pack("{s:s}", "message_id", "m-1");

    cr_expect_eq(amqpm_encoded_size(NULL, props, strlen(ID)),
                 amqpm_encoded_size(NULL, NULL, strlen(ID)) - strlen(ID) +
                     strlen("m-1"));
    json_decref(props);
}

Test(amqp_message, the_names_table)
{
    static const char *const names[] = {
        "content_type", "content_encoding", "correlation_id",
        "reply_to",     "message_id",       "type",
        "app_id",       "user_id",          "expiration"};
    amqp_basic_properties_t p;

    cr_assert_eq(amqpm_n_str_props, sizeof names / sizeof names[0]);
    memset(&p, 0, sizeof p);
    p.reply_to = amqp_cstring_bytes("r");
    for (size_t i = 0; i < amqpm_n_str_props; i++) {
        cr_expect_str_eq(amqpm_str_props[i].name, names[i]);
        if (strcmp(names[i], "reply_to") == 0) {
            cr_expect_eq(amqpm_str_prop_cfield(&p, i)->bytes, p.reply_to.bytes);
            cr_expect_eq(amqpm_str_props[i].flag, AMQP_BASIC_REPLY_TO_FLAG);
        }
    }
    cr_expect_eq(amqpm_str_props[amqpm_n_str_props - 1].flag,
                 AMQP_BASIC_EXPIRATION_FLAG, "expiration comes last");
    cr_expect(amqpm_reserved_header("x-scheduler-job-id"));
    cr_expect(amqpm_reserved_header("x-scheduled-at"));
    cr_expect(amqpm_reserved_header("x-delay"));
    cr_expect(!amqpm_reserved_header("x-deliver-at"));
    cr_expect(!amqpm_reserved_header("X-Delay"), "exact names");
}

Test(amqp_message, the_table_names_every_property_a_job_carries)
{
    for (size_t i = 0; i < amqpm_n_str_props; i++)
        cr_expect(amqpm_property_known(amqpm_str_props[i].name), "%s",
                  amqpm_str_props[i].name);
    cr_expect(amqpm_property_known("priority"));
    cr_expect(amqpm_property_known("persistent"));
    cr_expect_not(amqpm_property_known("delivery_mode"));
    cr_expect_not(amqpm_property_known("timestamp"));
    cr_expect_not(amqpm_property_known("headers"));
}

Test(amqp_message, one_expiration_rule)
{
    static const char *const ok[] = {"0", "60000", "4294967295", "0000000001"};
    static const char *const bad[] = {"",           "-1",          " 1", "1.5",
                                      "4294967296", "12345678901", "1e3"};
    json_t *v;

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        v = json_string(ok[i]);
        cr_expect(amqpm_expiration_valid(v), "%s", ok[i]);
        json_decref(v);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = json_string(bad[i]);
        cr_expect_not(amqpm_expiration_valid(v), "%s", bad[i]);
        json_decref(v);
    }
    v = json_integer(60000);
    cr_expect_not(amqpm_expiration_valid(v), "an integer is not the string");
    json_decref(v);
    cr_expect_not(amqpm_expiration_valid(NULL));
}

/* A job whose properties are props (JSON text), built into m. */
static rmqs_rc build(const char *props, amqp_pool_t *pool, amqpm_message *m,
                     rmqs_error *err)
{
    job_t job = {0};
    rmqs_rc rc;

    memcpy(job.id, ID, sizeof job.id);
    job.exchange = "";
    job.routing_key = "q";
    job.deliver_at = 1767225600123;
    job.delay_ms = 600000;
    job.properties = props != NULL ? json_loads(props, 0, NULL) : NULL;
    rc = amqpm_build(&job, 131072, pool, m, err);
    /* x-delay fits in 32 bits here: 4 bytes fewer than the most counted */
    cr_expect(rc != RMQS_OK ||
                  encoded(&m->props) + 4 ==
                      amqpm_encoded_size(NULL, job.properties, strlen(ID)),
              "what amqpm_build makes is what amqpm_encoded_size counts");
    json_decref(job.properties);
    return rc;
}

Test(amqp_message, build_follows_the_table_and_the_expiration_rule)
{
    amqp_pool_t pool;
    amqpm_message m;
    rmqs_error err = {0};

    init_amqp_pool(&pool, 4096);
    cr_expect_eq(build(NULL, &pool, &m, &err), RMQS_OK, "%s", err.message);
    cr_expect_eq(m.props.delivery_mode, AMQP_DELIVERY_PERSISTENT);
    cr_expect(m.props._flags & AMQP_BASIC_MESSAGE_ID_FLAG);
    cr_expect_eq(m.props.headers.num_entries, 3);

    cr_expect_eq(build("{\"expiration\": \"60000\", \"priority\": 9,"
                       " \"persistent\": false, \"app_id\": \"shop\"}",
                       &pool, &m, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect(m.props._flags & AMQP_BASIC_EXPIRATION_FLAG);
    cr_expect_eq(m.props.expiration.len, 5);
    cr_expect_eq(m.props.priority, 9);
    cr_expect_eq(m.props.delivery_mode, AMQP_DELIVERY_NONPERSISTENT);
    cr_expect(m.props._flags & AMQP_BASIC_APP_ID_FLAG);

    /* one expiration rule: what job.c refuses, the publisher does not send */
    cr_expect_eq(build("{\"expiration\": \"abc\"}", &pool, &m, &err),
                 RMQS_EINVAL);
    cr_expect(strstr(err.message, "expiration") != NULL, "%s", err.message);
    cr_expect_eq(build("{\"expiration\": 60000}", &pool, &m, &err),
                 RMQS_EINVAL);
    cr_expect_eq(build("{\"expiration\": \"4294967296\"}", &pool, &m, &err),
                 RMQS_EINVAL);
    cr_expect_eq(build("{\"priority\": 256}", &pool, &m, &err), RMQS_EINVAL);
    empty_amqp_pool(&pool);
}
