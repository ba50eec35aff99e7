/*
 * test_job.c - request validation and ids (the API representation of a job
 * is tested in test_job_json.c, base64 in test_base64.c).
 *
 * Request bodies in the tables are written with ' in place of " so they stay
 * readable; req() swaps them back before parsing (no test body needs a
 * literal apostrophe). "now" is fixed at 2026-01-01T00:00:00Z.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job.h"
#include "job_json.h"
#include "testutil.h"
#include "timeutil.h"

#define NOW 1767225600000LL /* 2026-01-01T00:00:00Z */

static const job_limits LIM = {
    .default_max_attempts = 5,
    .max_max_attempts = 10,
    .max_delay_ms = 30 * UT_DAY,
};

/* 255- and 256-byte strings for the short-string limits. */
#define S16 "aaaaaaaaaaaaaaaa"
#define S64 S16 S16 S16 S16
#define S255 S64 S64 S64 S16 S16 S16 "aaaaaaaaaaaaaaa"
#define S256 S255 "a"

static rmqs_rc req(const char *s, job_t *job, char **canonical, rmqs_error *err)
{
    char *t = ut_json_quotes(s);
    rmqs_rc rc = job_from_request(t, strlen(t), &LIM, NOW, job, canonical, err);
    free(t);
    return rc;
}

static rmqs_rc resched(const char *s, int64_t *at, int64_t *delay,
                       rmqs_error *err)
{
    char *t = ut_json_quotes(s);
    rmqs_rc rc = job_parse_reschedule(t, strlen(t), &LIM, NOW, at, delay, err);
    free(t);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* status, clear                                                             */

Test(job, status_names_round_trip)
{
    static const char *const names[] = {"pending", "publishing", "sent",
                                        "failed", "cancelled"};
    for (int s = JOB_PENDING; s <= JOB_CANCELLED; s++) {
        cr_expect_str_eq(job_status_name((job_status)s), names[s]);
        job_status back = (job_status)99;
        cr_expect_eq(job_status_parse(names[s], &back), RMQS_OK, "%s",
                     names[s]);
        cr_expect_eq(back, s, "%s", names[s]);
    }
    job_status out;
    cr_expect_eq(job_status_parse("PENDING", &out), RMQS_EINVAL);
    cr_expect_eq(job_status_parse("", &out), RMQS_EINVAL);
    cr_expect_eq(job_status_parse("pending ", &out), RMQS_EINVAL);
    cr_expect_eq(job_status_parse(NULL, &out), RMQS_EINVAL);
    cr_expect_str_eq(job_status_name((job_status)99), "unknown");
}

Test(job, clear_releases_and_zeroes)
{
    job_t j = {0};
    job_clear(&j); /* zeroed: no-op */
    cr_expect(ut_is_zero(&j, sizeof j));

    j.exchange = strdup("e");
    j.routing_key = strdup("r");
    j.last_error = strdup("boom");
    j.headers = json_pack("{s:i}", "a", 1);
    j.properties = json_object();
    j.body = malloc(3);
    j.body_len = 3;
    j.sent_at = 5;
    job_clear(&j); /* ASan reports anything left behind */
    cr_expect(ut_is_zero(&j, sizeof j));
    job_clear(NULL);
}

/* ------------------------------------------------------------------------ */
/* UUIDv7                                                                    */

Test(job, id_generate_shape)
{
    const int64_t ms = 1645557742000; /* RFC 9562 appendix A.6: 017f22e2-79b0 */
    for (int i = 0; i < 200; i++) {
        char id[JOB_ID_LEN + 1];
        cr_assert_eq(job_id_generate(ms, id), RMQS_OK);
        cr_assert_eq(strlen(id), JOB_ID_LEN);
        cr_expect_eq(strncmp(id, "017f22e2-79b0-7", 15), 0, "%s", id);
        cr_expect(strchr("89ab", id[19]) != NULL, "variant nibble in %s", id);
        for (int k = 0; k < JOB_ID_LEN; k++) {
            if (k == 8 || k == 13 || k == 18 || k == 23)
                cr_expect_eq(id[k], '-', "%s", id);
            else
                cr_expect(strchr("0123456789abcdef", id[k]) != NULL, "%s", id);
        }
        unsigned char b[JOB_ID_BYTES];
        cr_assert_eq(job_id_parse(id, b), RMQS_OK, "%s", id);
        cr_expect_eq(b[6] >> 4, 7, "version");
        cr_expect_eq(b[8] >> 6, 2, "variant");
        uint64_t ts = 0;
        for (int k = 0; k < 6; k++)
            ts = ts << 8 | b[k];
        cr_expect_eq(ts, (uint64_t)ms);
    }
}

Test(job, id_generate_time_ordered_and_unique)
{
    char prev[JOB_ID_LEN + 1] = "";
    for (int64_t ms = NOW; ms < NOW + 2000; ms++) {
        char id[JOB_ID_LEN + 1];
        cr_assert_eq(job_id_generate(ms, id), RMQS_OK);
        cr_assert_gt(strcmp(id, prev), 0, "%s after %s", id, prev);
        memcpy(prev, id, sizeof id);
    }
    /* same millisecond: 74 random bits keep them apart */
    enum { N = 500 };
    static char ids[N][JOB_ID_LEN + 1];
    for (int i = 0; i < N; i++)
        cr_assert_eq(job_id_generate(NOW, ids[i]), RMQS_OK);
    for (int i = 0; i < N; i++)
        for (int k = i + 1; k < N; k++)
            cr_assert_str_neq(ids[i], ids[k]);
}

Test(job, id_format_parse_round_trip)
{
    unsigned char in[JOB_ID_BYTES], out[JOB_ID_BYTES];
    for (int i = 0; i < JOB_ID_BYTES; i++)
        in[i] = (unsigned char)(i + 1 + (i == 15 ? 0xE0 : 0));
    char text[JOB_ID_LEN + 1];
    job_id_format(in, text);
    cr_expect_str_eq(text, "01020304-0506-0708-090a-0b0c0d0e0ff0");
    cr_assert_eq(job_id_parse(text, out), RMQS_OK);
    cr_expect_eq(memcmp(in, out, sizeof in), 0);
}

Test(job, id_parse_rejects)
{
    static const char *const bad[] = {
        "",
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398",   /* 35 */
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398fa", /* 37 */
        "017F22E2-79B0-7CC3-98C4-DC0C0C07398F",  /* upper case */
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398F",
        "017f22e279b0-7cc3-98c4-dc0c0c07398f0", /* dash missing */
        "017f22e2-79b07-cc3-98c4-dc0c0c07398f", /* dash misplaced */
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398g", /* not hex */
        "017f22e2_79b0_7cc3_98c4_dc0c0c07398f",
        "{017f22e2-79b0-7cc3-98c4-dc0c0c0739}",
        " 017f22e2-79b0-7cc3-98c4-dc0c0c07398",
        "017f22e279b07cc398c4dc0c0c07398f", /* no dashes */
    };
    unsigned char b[JOB_ID_BYTES];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(job_id_parse(bad[i], b), RMQS_EINVAL, "\"%s\" accepted",
                     bad[i]);
    cr_expect_eq(job_id_parse(NULL, b), RMQS_EINVAL);
    cr_expect_eq(job_id_parse("017f22e2-79b0-7cc3-98c4-dc0c0c07398f", b),
                 RMQS_OK);
}

/* ------------------------------------------------------------------------ */
/* job_from_request: valid bodies                                            */

/* A string literal and its length (without the NUL). */
#define RAW(s) s, sizeof(s) - 1

struct valid_req {
    const char *json;
    const char *exchange;
    const char *routing_key;
    job_body_kind kind;
    const char *body;
    size_t body_len;
    int64_t deliver_at;
    int64_t delay_ms;
    int max_attempts;
    size_t n_headers;         /* 0: headers must be NULL */
    size_t n_properties;      /* 0: properties must be NULL */
    const char *content_type; /* expected properties.content_type, or NULL */
};

Test(job, from_request_valid_table)
{
    static const struct valid_req cases[] = {
        {"{'exchange':'ex','routing_key':'rk','body':'hello','delay_ms':1000}",
         "ex", "rk", JOB_BODY_TEXT, RAW("hello"), NOW + 1000, 1000, 5, 0, 0,
         NULL},
        {"{'exchange':'','routing_key':'','body':'','delay_ms':0}", "", "",
         JOB_BODY_TEXT, RAW(""), NOW, 0, 5, 0, 0, NULL},
        {"{'exchange':'e','routing_key':'r','body':'h\\u00e9llo "
         "\\u2603','delay_ms':1}",
         "e", "r", JOB_BODY_TEXT, RAW("h\xc3\xa9llo \xe2\x98\x83"), NOW + 1, 1,
         5, 0, 0, NULL},
        {"{'exchange':'e','routing_key':'r','body':{'b':1,'a':[true,null,1.5]},"
         "'delay_ms':1}",
         "e", "r", JOB_BODY_JSON, RAW("{\"b\":1,\"a\":[true,null,1.5]}"),
         NOW + 1, 1, 5, 0, 1, "application/json"},
        {"{'exchange':'e','routing_key':'r','body':[],'delay_ms':1,"
         "'properties':{'content_type':'text/x'}}",
         "e", "r", JOB_BODY_JSON, RAW("[]"), NOW + 1, 1, 5, 0, 1, "text/x"},
        {"{'exchange':'e','routing_key':'r','body':{},'delay_ms':1,"
         "'properties':{'priority':3}}",
         "e", "r", JOB_BODY_JSON, RAW("{}"), NOW + 1, 1, 5, 0, 2,
         "application/json"},
        {"{'exchange':'e','routing_key':'r','body_base64':'AAEC/"
         "w==','delay_ms':1}",
         "e", "r", JOB_BODY_BINARY, RAW("\x00\x01\x02\xff"), NOW + 1, 1, 5, 0,
         0, NULL},
        {"{'exchange':'e','routing_key':'r','body_base64':'','delay_ms':1}",
         "e", "r", JOB_BODY_BINARY, RAW(""), NOW + 1, 1, 5, 0, 0, NULL},
        /* deliver_at: future, with offset, past (accepted, delay 0) */
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'2026-01-"
         "01T01:00:00Z'}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW + UT_HOUR, UT_HOUR, 5, 0, 0,
         NULL},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'2026-01-"
         "01T09:00:00.250+08:00'}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW + UT_HOUR + 250, UT_HOUR + 250,
         5, 0, 0, NULL},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'2025-12-"
         "31T23:00:00Z'}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW - UT_HOUR, 0, 5, 0, 0, NULL},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'0001-01-"
         "01T00:00:00Z'}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), -62135596800000, 0, 5, 0, 0, NULL},
        /* exactly at the horizon */
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':2592000000}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW + 30 * UT_DAY, 30 * UT_DAY, 5,
         0, 0, NULL},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'2026-01-"
         "31T00:00:00Z'}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW + 30 * UT_DAY, 30 * UT_DAY, 5,
         0, 0, NULL},
        /* max_attempts bounds */
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,'max_"
         "attempts':1}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW, 0, 1, 0, 0, NULL},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,'max_"
         "attempts':10}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW, 0, 10, 0, 0, NULL},
        /* 255-byte names; control characters are fine in a routing key */
        {"{'exchange':'" S255 "','routing_key':'" S255
         "','body':'x','delay_ms':0}",
         S255, S255, JOB_BODY_TEXT, RAW("x"), NOW, 0, 5, 0, 0, NULL},
        {"{'exchange':'amq.topic','routing_key':'a\\tb','body':'x','delay_ms':"
         "0}",
         "amq.topic", "a\tb", JOB_BODY_TEXT, RAW("x"), NOW, 0, 5, 0, 0, NULL},
        /* headers of every allowed type; reserved names only matter exactly */
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,"
         "'headers':{'s':'v','i':-3,'f':2.5,'t':true,'n':false,'x-delayed':'ok'"
         ",'" S255 "':1}}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW, 0, 5, 7, 0, NULL},
        /* empty objects are kept as NULL */
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,'headers':{"
         "},'properties':{}}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW, 0, 5, 0, 0, NULL},
        /* every property, at its bounds */
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,'"
         "properties':{"
         "'content_type':'text/"
         "plain','content_encoding':'gzip','correlation_id':'c',"
         "'reply_to':'q','message_id':'" S255
         "','type':'t','app_id':'a','user_id':'guest',"
         "'priority':255,'expiration':'4294967295','persistent':false}}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW, 0, 5, 0, 11, "text/plain"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,'"
         "properties':{"
         "'priority':0,'expiration':'0','persistent':true}}",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW, 0, 5, 0, 3, NULL},
        /* whitespace and key order do not matter */
        {" \n{ 'delay_ms' : 5 ,\t'body':'x', 'routing_key':'r','exchange':'e' "
         "}\n",
         "e", "r", JOB_BODY_TEXT, RAW("x"), NOW + 5, 5, 5, 0, 0, NULL},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct valid_req *c = &cases[i];
        job_t j;
        rmqs_error err;
        memset(&err, 0, sizeof err);
        char *canon = NULL;
        rmqs_rc rc = req(c->json, &j, &canon, &err);
        cr_expect_eq(rc, RMQS_OK, "case %zu: rc %d, field '%s': %s", i, rc,
                     err.field, err.message);
        if (rc != RMQS_OK)
            continue;
        cr_expect_str_eq(j.id, "", "case %zu", i);
        cr_expect_eq(j.status, JOB_PENDING, "case %zu", i);
        cr_expect_str_eq(j.exchange, c->exchange, "case %zu", i);
        cr_expect_str_eq(j.routing_key, c->routing_key, "case %zu", i);
        cr_expect_eq(j.body_kind, c->kind, "case %zu", i);
        cr_expect_eq(j.body_len, c->body_len, "case %zu", i);
        if (c->body_len > 0)
            cr_expect(j.body != NULL &&
                          memcmp(j.body, c->body, c->body_len) == 0,
                      "case %zu: body bytes", i);
        cr_expect_eq(j.deliver_at, c->deliver_at, "case %zu: deliver_at %lld",
                     i, (long long)j.deliver_at);
        /* due: deliver_at, or now when that is already past */
        cr_expect_eq(j.due_at, c->deliver_at > NOW ? c->deliver_at : NOW,
                     "case %zu", i);
        cr_expect_eq(j.delay_ms, c->delay_ms, "case %zu: delay %lld", i,
                     (long long)j.delay_ms);
        cr_expect_eq(j.created_at, NOW, "case %zu", i);
        cr_expect_eq(j.updated_at, NOW, "case %zu", i);
        cr_expect_eq(j.sent_at, -1, "case %zu", i);
        cr_expect_eq(j.attempts, 0, "case %zu", i);
        cr_expect_eq(j.max_attempts, c->max_attempts, "case %zu", i);
        cr_expect_null(j.last_error, "case %zu", i);
        if (c->n_headers == 0) {
            cr_expect_null(j.headers, "case %zu", i);
        } else {
            cr_expect(json_is_object(j.headers), "case %zu", i);
            cr_expect_eq(json_object_size(j.headers), c->n_headers, "case %zu",
                         i);
        }
        if (c->n_properties == 0) {
            cr_expect_null(j.properties, "case %zu", i);
        } else {
            cr_expect(json_is_object(j.properties), "case %zu", i);
            cr_expect_eq(json_object_size(j.properties), c->n_properties,
                         "case %zu", i);
        }
        const char *ct =
            json_string_value(json_object_get(j.properties, "content_type"));
        if (c->content_type == NULL)
            cr_expect_null(ct, "case %zu", i);
        else
            cr_expect(ct != NULL && strcmp(ct, c->content_type) == 0,
                      "case %zu: content_type %s", i, ct ? ct : "(none)");
        cr_expect_not_null(canon, "case %zu", i);
        free(canon);
        job_clear(&j);
    }
}

Test(job, from_request_header_values_kept)
{
    job_t j;
    rmqs_error err;
    cr_assert_eq(
        req("{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,"
            "'headers':{'s':'v','i':-3,'f':2.5,'t':true}}",
            &j, NULL, &err),
        RMQS_OK, "%s", err.message);
    json_t *want =
        json_pack("{s:s,s:i,s:f,s:b}", "s", "v", "i", -3, "f", 2.5, "t", 1);
    cr_expect(json_equal(j.headers, want));
    json_decref(want);
    job_clear(&j);
}

/* ------------------------------------------------------------------------ */
/* job_from_request: invalid bodies                                          */

struct invalid_req {
    const char *json;
    const char *field;
    const char *message; /* a substring of err.message */
};

#define OK_BASE "'exchange':'e','routing_key':'r','body':'x','delay_ms':0"

static void check_invalid(const struct invalid_req *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct invalid_req *c = &cases[i];
        job_t j;
        memset(&j, 0xAB, sizeof j); /* must come back zeroed */
        char *canon = (char *)"sentinel";
        rmqs_error err;
        memset(&err, 0, sizeof err);
        rmqs_rc rc = req(c->json, &j, &canon, &err);
        cr_expect_eq(rc, RMQS_EINVAL, "%s: rc %d", c->json, rc);
        cr_expect_str_eq(err.field, c->field, "%s: message '%s'", c->json,
                         err.message);
        cr_expect(strstr(err.message, c->message) != NULL,
                  "%s: message '%s' lacks '%s'", c->json, err.message,
                  c->message);
        cr_expect(ut_is_zero(&j, sizeof j), "%s: *out not zeroed", c->json);
        cr_expect_null(canon, "%s: canonical not NULL", c->json);
        if (rc == RMQS_OK) {
            job_clear(&j);
            free(canon);
        }
    }
}

Test(job, from_request_invalid_json)
{
    static const struct invalid_req cases[] = {
        {"", "", "invalid JSON: "},
        {"   ", "", "invalid JSON: "},
        {"{", "", "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0", "",
         "invalid JSON: "},
        {"{" OK_BASE ",}", "", "invalid JSON: "},
        {"{" OK_BASE "} {}", "", "invalid JSON: "},
        {"{'exchange':'e\\u0000'}", "", "invalid JSON: "},
        {"{'exchange':'a','exchange':'b','routing_key':'r','body':'x','delay_"
         "ms':0}",
         "", "duplicate"},
        {"{" OK_BASE ",'headers':{'a':1,'a':2}}", "", "duplicate"},
        {"42", "", "invalid JSON: "},
        {"'x'", "", "invalid JSON: "},
        {"null", "", "invalid JSON: "},
        {"["
         "{" OK_BASE "}"
         "]",
         "", "request body must be a JSON object"},
        {"[]", "", "request body must be a JSON object"},
    };
    check_invalid(cases, sizeof cases / sizeof cases[0]);

    /* the position is part of the message */
    rmqs_error err;
    job_t j;
    cr_expect_eq(req("{\n'exchange':}", &j, NULL, &err), RMQS_EINVAL);
    cr_expect(strstr(err.message, "(line 2, column") != NULL, "%s",
              err.message);
}

Test(job, from_request_invalid_fields)
{
    static const struct invalid_req cases[] = {
        /* unknown fields: the smallest name is reported */
        {"{" OK_BASE ",'foo':1}", "foo", "unknown field"},
        {"{" OK_BASE ",'zeta':1,'alpha':1,'mu':1}", "alpha", "unknown field"},
        {"{'mu':1," OK_BASE ",'alpha':1,'zeta':1}", "alpha", "unknown field"},
        {"{" OK_BASE ",'Exchange':'e'}", "Exchange", "unknown field"},
        {"{'foo':1}", "foo", "unknown field"},
        /* exchange */
        {"{'routing_key':'r','body':'x','delay_ms':0}", "exchange",
         "exchange: required"},
        {"{'exchange':1,'routing_key':'r','body':'x','delay_ms':0}", "exchange",
         "exchange: must be a string"},
        {"{'exchange':null,'routing_key':'r','body':'x','delay_ms':0}",
         "exchange", "exchange: must be a string"},
        {"{'exchange':'" S256 "','routing_key':'r','body':'x','delay_ms':0}",
         "exchange", "exchange: longer than 255 bytes"},
        {"{'exchange':'a\\u0001b','routing_key':'r','body':'x','delay_ms':0}",
         "exchange", "exchange: must not contain control characters"},
        {"{'exchange':'a\\nb','routing_key':'r','body':'x','delay_ms':0}",
         "exchange", "control characters"},
        {"{'exchange':'a\\u007fb','routing_key':'r','body':'x','delay_ms':0}",
         "exchange", "control characters"},
        /* routing_key */
        {"{'exchange':'e','body':'x','delay_ms':0}", "routing_key",
         "routing_key: required"},
        {"{'exchange':'e','routing_key':['r'],'body':'x','delay_ms':0}",
         "routing_key", "routing_key: must be a string"},
        {"{'exchange':'e','routing_key':'" S256 "','body':'x','delay_ms':0}",
         "routing_key", "routing_key: longer than 255 bytes"},
        /* body */
        {"{'exchange':'e','routing_key':'r','delay_ms':0}", "body",
         "one of body or body_base64 is required"},
        {"{'exchange':'e','routing_key':'r','body':'x','body_base64':'eA==','"
         "delay_ms':0}",
         "body_base64", "only one of body or body_base64 may be given"},
        {"{'exchange':'e','routing_key':'r','body':42,'delay_ms':0}", "body",
         "body: must be a string, an object or an array"},
        {"{'exchange':'e','routing_key':'r','body':null,'delay_ms':0}", "body",
         "body: must be a string, an object or an array"},
        {"{'exchange':'e','routing_key':'r','body':true,'delay_ms':0}", "body",
         "body: must be a string, an object or an array"},
        {"{'exchange':'e','routing_key':'r','body_base64':'abc','delay_ms':0}",
         "body_base64", "body_base64: not valid base64"},
        {"{'exchange':'e','routing_key':'r','body_base64':'Zm9v "
         "Yg==','delay_ms':0}",
         "body_base64", "body_base64: not valid base64"},
        {"{'exchange':'e','routing_key':'r','body_base64':'Zm9vYg','delay_ms':"
         "0}",
         "body_base64", "body_base64: not valid base64"},
        {"{'exchange':'e','routing_key':'r','body_base64':7,'delay_ms':0}",
         "body_base64", "body_base64: must be a string"},
        /* timing */
        {"{'exchange':'e','routing_key':'r','body':'x'}", "delay_ms",
         "one of delay_ms or deliver_at is required"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':0,"
         "'deliver_at':'2026-01-01T00:00:00Z'}",
         "deliver_at", "only one of delay_ms or deliver_at may be given"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':-1}",
         "delay_ms", "delay_ms: must not be negative"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':1.5}",
         "delay_ms", "delay_ms: must be an integer"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':1.0}",
         "delay_ms", "delay_ms: must be an integer"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':'100'}",
         "delay_ms", "delay_ms: must be an integer"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':null}",
         "delay_ms", "delay_ms: must be an integer"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':2592000001}",
         "delay_ms", "delay_ms: beyond the scheduling horizon of 30 days"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':"
         "9223372036854775807}",
         "delay_ms", "beyond the scheduling horizon"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':"
         "99999999999999999999}",
         "", "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'2026-01-"
         "31T00:00:00.001Z'}",
         "deliver_at", "deliver_at: beyond the scheduling horizon of 30 days"},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'9999-12-"
         "31T23:59:59Z'}",
         "deliver_at", "beyond the scheduling horizon"},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'tomorrow'"
         "}",
         "deliver_at", "deliver_at: not an RFC 3339 timestamp"},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'2026-01-"
         "01T00:00:00'}",
         "deliver_at", "deliver_at: not an RFC 3339 timestamp"},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':'2026-02-"
         "29T00:00:00Z'}",
         "deliver_at", "deliver_at: not an RFC 3339 timestamp"},
        {"{'exchange':'e','routing_key':'r','body':'x','deliver_at':"
         "1767225600000}",
         "deliver_at", "deliver_at: must be a string"},
        /* headers */
        {"{" OK_BASE ",'headers':[]}", "headers", "headers: must be an object"},
        {"{" OK_BASE ",'headers':null}", "headers",
         "headers: must be an object"},
        {"{" OK_BASE ",'headers':{'x-delay':1}}", "headers.x-delay",
         "reserved header"},
        {"{" OK_BASE ",'headers':{'X-Delay':1}}", "headers.X-Delay",
         "reserved header"},
        {"{" OK_BASE ",'headers':{'X-Scheduler-Job-Id':'a'}}",
         "headers.X-Scheduler-Job-Id", "reserved header"},
        {"{" OK_BASE ",'headers':{'x-scheduled-at':'a'}}",
         "headers.x-scheduled-at", "reserved header"},
        /* RabbitMQ closes the channel for a CC or BCC that is not a list */
        {"{" OK_BASE ",'headers':{'CC':'billing.eu'}}", "headers.CC",
         "CC and BCC only as lists"},
        {"{" OK_BASE ",'headers':{'BCC':5}}", "headers.BCC",
         "CC and BCC only as lists"},
        {"{" OK_BASE ",'headers':{'a':{'b':1}}}", "headers.a",
         "headers.a: must be a string, number or boolean"},
        {"{" OK_BASE ",'headers':{'a':[1]}}", "headers.a",
         "must be a string, number or boolean"},
        {"{" OK_BASE ",'headers':{'ok':1,'n':null}}", "headers.n",
         "must be a string, number or boolean"},
        {"{" OK_BASE ",'headers':{'b':null,'a':null}}", "headers.a",
         "must be a string, number or boolean"},
        {"{" OK_BASE ",'headers':{'':1}}", "headers", "must not be empty"},
        {"{" OK_BASE ",'headers':{'" S256 "':1}}", "headers",
         "longer than 255 bytes"},
        /* properties */
        {"{" OK_BASE ",'properties':'x'}", "properties",
         "properties: must be an object"},
        {"{" OK_BASE ",'properties':{'foo':1}}", "properties.foo",
         "unknown property"},
        {"{" OK_BASE ",'properties':{'headers':{}}}", "properties.headers",
         "unknown property"},
        {"{" OK_BASE ",'properties':{'delivery_mode':2}}",
         "properties.delivery_mode", "unknown property"},
        {"{" OK_BASE ",'properties':{'content_type':1}}",
         "properties.content_type",
         "properties.content_type: must be a string"},
        {"{" OK_BASE ",'properties':{'user_id':null}}", "properties.user_id",
         "must be a string"},
        {"{" OK_BASE ",'properties':{'message_id':'" S256 "'}}",
         "properties.message_id", "longer than 255 bytes"},
        {"{" OK_BASE ",'properties':{'reply_to':'a\\rb'}}",
         "properties.reply_to", "control characters"},
        {"{" OK_BASE ",'properties':{'priority':256}}", "properties.priority",
         "0 to 255"},
        {"{" OK_BASE ",'properties':{'priority':-1}}", "properties.priority",
         "0 to 255"},
        {"{" OK_BASE ",'properties':{'priority':1.5}}", "properties.priority",
         "integer"},
        {"{" OK_BASE ",'properties':{'priority':'5'}}", "properties.priority",
         "integer"},
        {"{" OK_BASE ",'properties':{'expiration':'abc'}}",
         "properties.expiration", "decimal digits"},
        {"{" OK_BASE ",'properties':{'expiration':''}}",
         "properties.expiration", "digits"},
        {"{" OK_BASE ",'properties':{'expiration':'-1'}}",
         "properties.expiration", "digits"},
        {"{" OK_BASE ",'properties':{'expiration':' 1'}}",
         "properties.expiration", "digits"},
        {"{" OK_BASE ",'properties':{'expiration':60000}}",
         "properties.expiration", "string"},
        {"{" OK_BASE ",'properties':{'expiration':'4294967296'}}",
         "properties.expiration", "4294967295"},
        {"{" OK_BASE ",'properties':{'expiration':'12345678901'}}",
         "properties.expiration", "digits"},
        {"{" OK_BASE ",'properties':{'persistent':'yes'}}",
         "properties.persistent", "properties.persistent: must be a boolean"},
        {"{" OK_BASE ",'properties':{'persistent':1}}", "properties.persistent",
         "boolean"},
        /* max_attempts */
        {"{" OK_BASE ",'max_attempts':0}", "max_attempts",
         "max_attempts: must be an integer from 1 to 10"},
        {"{" OK_BASE ",'max_attempts':11}", "max_attempts", "from 1 to 10"},
        {"{" OK_BASE ",'max_attempts':-5}", "max_attempts", "from 1 to 10"},
        {"{" OK_BASE ",'max_attempts':2.0}", "max_attempts", "integer"},
        {"{" OK_BASE ",'max_attempts':'3'}", "max_attempts", "integer"},
        {"{" OK_BASE ",'max_attempts':4294967297}", "max_attempts",
         "from 1 to 10"},
    };
    check_invalid(cases, sizeof cases / sizeof cases[0]);
}

/* Builds a request with n headers h0..h{n-1}. */
static char *request_with_headers(int n)
{
    size_t cap = 128 + (size_t)n * 16;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    size_t o = (size_t)snprintf(s, cap,
                                "{\"exchange\":\"e\",\"routing_key\":\"r\","
                                "\"body\":\"x\",\"delay_ms\":0,\"headers\":{");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(s + o, cap - o, "%s\"h%d\":%d", i ? "," : "", i,
                              i);
    snprintf(s + o, cap - o, "}}");
    return s;
}

Test(job, from_request_header_count_limit)
{
    job_t j;
    rmqs_error err;
    char *s = request_with_headers(128);
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_eq(json_object_size(j.headers), 128);
    job_clear(&j);
    free(s);

    s = request_with_headers(129);
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "headers");
    cr_expect_str_eq(err.message, "headers: more than 128 entries");
    free(s);
}

Test(job, from_request_horizon_message_not_in_days)
{
    job_limits lim = LIM;
    lim.max_delay_ms = 90000;
    job_t j;
    rmqs_error err;
    const char *s = "{\"exchange\":\"e\",\"routing_key\":\"r\",\"body\":\"x\","
                    "\"delay_ms\":90001}";
    cr_expect_eq(job_from_request(s, strlen(s), &lim, NOW, &j, NULL, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.message,
                     "delay_ms: beyond the scheduling horizon of 90000 ms");
    lim.max_delay_ms = UT_DAY;
    cr_expect_eq(job_from_request(s, strlen(s), &lim, NOW, &j, NULL, &err),
                 RMQS_OK);
    job_clear(&j);
}

Test(job, from_request_not_nul_terminated)
{
    const char *full = "{\"exchange\":\"e\",\"routing_key\":\"r\",\"body\":"
                       "\"x\",\"delay_ms\":7}";
    size_t n = strlen(full);
    char *copy = malloc(n); /* exact size: ASan catches any read past len */
    cr_assert_not_null(copy);
    memcpy(copy, full, n);
    job_t j;
    rmqs_error err;
    cr_expect_eq(job_from_request(copy, n, &LIM, NOW, &j, NULL, &err), RMQS_OK,
                 "%s", err.message);
    cr_expect_eq(j.delay_ms, 7);
    job_clear(&j);
    cr_expect_eq(job_from_request(copy, n - 1, &LIM, NOW, &j, NULL, &err),
                 RMQS_EINVAL);
    free(copy);
}

Test(job, from_request_null_err_is_fine)
{
    job_t j;
    cr_expect_eq(req("{'foo':1}", &j, NULL, NULL), RMQS_EINVAL);
    cr_expect(ut_is_zero(&j, sizeof j));
}

/* ------------------------------------------------------------------------ */
/* canonical form                                                            */

static char *canonical_of(const char *s)
{
    job_t j;
    rmqs_error err;
    char *canon = NULL;
    cr_assert_eq(req(s, &j, &canon, &err), RMQS_OK, "%s: %s", s, err.message);
    job_clear(&j);
    cr_assert_not_null(canon);
    return canon;
}

Test(job, canonical_sorted_compact)
{
    char *c = canonical_of(
        "{ 'routing_key' : 'r', 'exchange':'e',\n 'delay_ms':5, 'body':'x' }");
    cr_expect_str_eq(c, "{\"body\":\"x\",\"delay_ms\":5,\"exchange\":\"e\","
                        "\"routing_key\":\"r\"}");
    free(c);
}

Test(job, canonical_equal_for_key_order)
{
    char *a = canonical_of(
        "{'exchange':'e','routing_key':'r','body':{'x':1,'y':[1,2]},'delay_ms':"
        "5,"
        "'headers':{'a':1,'b':'2'},'properties':{'priority':1,'app_id':'z'}}");
    char *b = canonical_of(
        "{'properties':{'app_id':'z','priority':1},'headers':{'b':'2','a':1},"
        "'delay_ms':5,'body':{'y':[1,2],'x':1},'routing_key':'r','exchange':'e'"
        "}");
    cr_expect_str_eq(a, b);

    /* any difference in content changes it (array order included) */
    static const char *const others[] = {
        "{'exchange':'e','routing_key':'r','body':{'x':1,'y':[2,1]},'delay_ms':"
        "5,"
        "'headers':{'a':1,'b':'2'},'properties':{'priority':1,'app_id':'z'}}",
        "{'exchange':'e','routing_key':'r','body':{'x':1,'y':[1,2]},'delay_ms':"
        "6,"
        "'headers':{'a':1,'b':'2'},'properties':{'priority':1,'app_id':'z'}}",
        "{'exchange':'e','routing_key':'r','body':{'x':1,'y':[1,2]},'delay_ms':"
        "5,"
        "'headers':{'a':1,'b':2},'properties':{'priority':1,'app_id':'z'}}",
        "{'exchange':'e','routing_key':'r','body':{'x':1,'y':[1,2]},'delay_ms':"
        "5,"
        "'headers':{'a':1,'b':'2'},'properties':{'priority':1,'app_id':'z'},'"
        "max_attempts':5}",
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        char *o = canonical_of(others[i]);
        cr_expect_str_neq(a, o, "case %zu", i);
        free(o);
    }
    free(a);
    free(b);
}

Test(job, canonical_does_not_include_defaults)
{
    /* the content_type default is added to the job, not to the fingerprint */
    char *c = canonical_of(
        "{'exchange':'e','routing_key':'r','body':[1],'delay_ms':5}");
    cr_expect_str_eq(c, "{\"body\":[1],\"delay_ms\":5,\"exchange\":\"e\","
                        "\"routing_key\":\"r\"}");
    free(c);
}

/* ------------------------------------------------------------------------ */
/* job_parse_reschedule                                                      */

struct resched_ok {
    const char *json;
    int64_t deliver_at;
    int64_t delay_ms;
};

Test(job, reschedule_valid)
{
    static const struct resched_ok cases[] = {
        {"{'delay_ms':5000}", NOW + 5000, 5000},
        {"{'delay_ms':0}", NOW, 0},
        {"{'delay_ms':2592000000}", NOW + 30 * UT_DAY, 30 * UT_DAY},
        {"{'deliver_at':'2026-01-01T00:00:10Z'}", NOW + 10000, 10000},
        {"{'deliver_at':'2026-01-01T05:30:10-05:30'}",
         NOW + 11 * UT_HOUR + 10000, 11 * UT_HOUR + 10000},
        {"{'deliver_at':'2025-12-31T00:00:00Z'}", NOW - UT_DAY, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t at = 0, delay = -7;
        rmqs_error err;
        memset(&err, 0, sizeof err);
        cr_expect_eq(resched(cases[i].json, &at, &delay, &err), RMQS_OK,
                     "%s: %s", cases[i].json, err.message);
        cr_expect_eq(at, cases[i].deliver_at, "%s", cases[i].json);
        cr_expect_eq(delay, cases[i].delay_ms, "%s", cases[i].json);
    }
}

Test(job, reschedule_invalid)
{
    static const struct invalid_req cases[] = {
        {"", "", "invalid JSON: "},
        {"{'delay_ms':1", "", "invalid JSON: "},
        {"{'delay_ms':1,'delay_ms':2}", "", "duplicate"},
        {"[{'delay_ms':1}]", "", "request body must be a JSON object"},
        {"{}", "delay_ms", "one of delay_ms or deliver_at is required"},
        {"{'delay_ms':1,'deliver_at':'2026-01-01T00:00:10Z'}", "deliver_at",
         "only one of delay_ms or deliver_at may be given"},
        {"{'delay_ms':1,'exchange':'x'}", "exchange", "unknown field"},
        {"{'delay_ms':-1}", "delay_ms", "delay_ms: must not be negative"},
        {"{'delay_ms':1.5}", "delay_ms", "delay_ms: must be an integer"},
        {"{'delay_ms':2592000001}", "delay_ms",
         "beyond the scheduling horizon of 30 days"},
        {"{'deliver_at':'2026-01-31T00:00:01Z'}", "deliver_at",
         "beyond the scheduling horizon"},
        {"{'deliver_at':'soon'}", "deliver_at",
         "deliver_at: not an RFC 3339 timestamp"},
        {"{'deliver_at':null}", "deliver_at", "deliver_at: must be a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t at = 123, delay = 456;
        rmqs_error err;
        memset(&err, 0, sizeof err);
        cr_expect_eq(resched(cases[i].json, &at, &delay, &err), RMQS_EINVAL,
                     "%s", cases[i].json);
        cr_expect_str_eq(err.field, cases[i].field, "%s: %s", cases[i].json,
                         err.message);
        cr_expect(strstr(err.message, cases[i].message) != NULL,
                  "%s: message '%s' lacks '%s'", cases[i].json, err.message,
                  cases[i].message);
        cr_expect(at == 123 && delay == 456, "%s: outputs touched on failure",
                  cases[i].json);
    }
}

/* ------------------------------------------------------------------------ */
/* hostile input: what jansson rejects, and the limits AMQP and consumers    */
/* need (tests/integration/test_hostile_input.py sends the same over HTTP)   */

/* job_from_request on exactly len bytes (which may hold NULs). */
static rmqs_rc req_bytes(const char *bytes, size_t len, job_t *job,
                         rmqs_error *err)
{
    char *copy = malloc(len > 0 ? len : 1); /* exact size for ASan */
    cr_assert_not_null(copy);
    memcpy(copy, bytes, len);
    memset(err, 0, sizeof *err);
    rmqs_rc rc = job_from_request(copy, len, &LIM, NOW, job, NULL, err);
    free(copy);
    return rc;
}

Test(job, hostile_nul_bytes_and_escapes)
{
    /* \u0000 anywhere: jansson refuses it without JSON_ALLOW_NUL */
    static const struct invalid_req escapes[] = {
        {"{'exchange':'e','routing_key':'r\\u0000k','body':'x','delay_ms':0}",
         "", "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':'a\\u0000b','delay_ms':0}",
         "", "invalid JSON: "},
        {"{" OK_BASE ",'headers':{'a\\u0000b':1}}", "", "invalid JSON: "},
        {"{" OK_BASE ",'headers':{'h':'a\\u0000b'}}", "", "invalid JSON: "},
        {"{" OK_BASE ",'properties':{'message_id':'\\u0000'}}", "",
         "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':{'k\\u0000':1},'delay_ms':"
         "0}",
         "", "invalid JSON: "},
        {"{'deliver_at\\u0000':1}", "", "invalid JSON: "},
    };
    check_invalid(escapes, sizeof escapes / sizeof escapes[0]);

    /* raw 0x00 bytes: inside a string, between tokens, after the object */
    static const char in_string[] = "{\"exchange\":\"e\",\"routing_key\":"
                                    "\"r\0k\",\"body\":\"x\",\"delay_ms\":0}";
    static const char between[] = "{\"exchange\":\"e\",\0\"routing_key\":\"r\","
                                  "\"body\":\"x\",\"delay_ms\":0}";
    static const char after[] = "{\"exchange\":\"e\",\"routing_key\":\"r\","
                                "\"body\":\"x\",\"delay_ms\":0}\0";
    static const char only[] = "\0\0\0\0";
    /* jansson 2.14 on its own skips a NUL right after a number or literal */
    static const char after_number[] = "{\"exchange\":\"e\",\"routing_key\":"
                                       "\"r\",\"body\":\"x\",\"delay_ms\":0\0}";
    static const char after_literal[] =
        "{\"exchange\":\"e\",\"routing_key\":\"r\",\"body\":\"x\",\"delay_ms\":"
        "0,"
        "\"properties\":{\"persistent\":true\0}}";
    const struct {
        const char *bytes;
        size_t len;
    } raw[] = {
        {in_string, sizeof in_string - 1},
        {between, sizeof between - 1},
        {after, sizeof after - 1},
        {only, sizeof only - 1},
        {after_number, sizeof after_number - 1},
        {after_literal, sizeof after_literal - 1},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        job_t j;
        rmqs_error err;
        cr_expect_eq(req_bytes(raw[i].bytes, raw[i].len, &j, &err), RMQS_EINVAL,
                     "raw NUL case %zu accepted", i);
        cr_expect(strncmp(err.message, "invalid JSON: ", 14) == 0,
                  "case %zu: %s", i, err.message);
        cr_expect(ut_is_zero(&j, sizeof j));
    }

    /* the same for PATCH */
    int64_t at = 1, delay = 2;
    rmqs_error err;
    cr_expect_eq(job_parse_reschedule("{\"delay_ms\":5\0}", 15, &LIM, NOW, &at,
                                      &delay, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.message, "invalid JSON: NUL byte at offset 13");
    cr_expect(at == 1 && delay == 2);
}

Test(job, hostile_invalid_utf8)
{
    static const struct invalid_req cases[] = {
        {"{'exchange':'e','routing_key':'\xff','body':'x','delay_ms':0}", "",
         "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':'\xc0\xaf','delay_ms':0}",
         "", "invalid JSON: "}, /* overlong '/' */
        {"{'exchange':'e','routing_key':'r','body':'\xed\xa0\x80','delay_ms':"
         "0}",
         "", "invalid JSON: "}, /* UTF-16 surrogate encoded in UTF-8 */
        {"{'exchange':'e','routing_key':'r','body':'\xf4\x90\x80\x80','delay_"
         "ms':0}",
         "", "invalid JSON: "}, /* above U+10FFFF */
        {"{'exchange':'e','routing_key':'r','body':'\xe2\x82','delay_ms':0}",
         "", "invalid JSON: "}, /* truncated sequence */
        {"{'exchange':'e','routing_key':'r','body':'\x80','delay_ms':0}", "",
         "invalid JSON: "}, /* lone continuation byte */
        {"{" OK_BASE ",'headers':{'\xfe':1}}", "", "invalid JSON: "},
        {"{" OK_BASE ",'\xff':1}", "", "invalid JSON: "},
        /* escapes that are not Unicode scalar values */
        {"{'exchange':'e','routing_key':'\\ud800','body':'x','delay_ms':0}", "",
         "invalid JSON: "},
        {"{'exchange':'e','routing_key':'\\udc00','body':'x','delay_ms':0}", "",
         "invalid JSON: "},
        {"{'exchange':'e','routing_key':'\\ud800\\u0041','body':'x','delay_ms':"
         "0}",
         "", "invalid JSON: "},
    };
    check_invalid(cases, sizeof cases / sizeof cases[0]);

    /* valid multi-byte text and a surrogate pair are fine */
    job_t j;
    rmqs_error err;
    cr_assert_eq(req("{'exchange':'e','routing_key':'r\xc3\xa9\\ud83d\\ude00',"
                     "'body':'\xe2\x82\xac','delay_ms':0}",
                     &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_str_eq(j.routing_key, "r\xc3\xa9\xf0\x9f\x98\x80");
    cr_expect_eq(j.body_len, 3);
    job_clear(&j);
}

Test(job, hostile_huge_numbers)
{
    static const struct invalid_req cases[] = {
        /* beyond int64 or double: jansson's numeric overflow, invalid JSON */
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':"
         "9223372036854775808}",
         "", "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':-"
         "9223372036854775809}",
         "", "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':1e400}", "",
         "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':-1e400}", "",
         "invalid JSON: "},
        {"{" OK_BASE ",'headers':{'n':123456789012345678901234567890}}", "",
         "invalid JSON: "},
        {"{'exchange':'e','routing_key':'r','body':[1e999],'delay_ms':0}", "",
         "invalid JSON: "},
        /* within int64: each field's own range check */
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':-"
         "9223372036854775808}",
         "delay_ms", "delay_ms: must not be negative"},
        {"{'exchange':'e','routing_key':'r','body':'x','delay_ms':1e3}",
         "delay_ms", "delay_ms: must be an integer"},
        {"{" OK_BASE ",'max_attempts':9223372036854775807}", "max_attempts",
         "from 1 to 10"},
        {"{" OK_BASE ",'max_attempts':-9223372036854775808}", "max_attempts",
         "from 1 to 10"},
        {"{" OK_BASE ",'properties':{'priority':9223372036854775807}}",
         "properties.priority", "0 to 255"},
        {"{" OK_BASE ",'properties':{'priority':-9223372036854775808}}",
         "properties.priority", "0 to 255"},
    };
    check_invalid(cases, sizeof cases / sizeof cases[0]);

    /* int64 extremes are fine as header values (AMQP has 64-bit integers) */
    job_t j;
    rmqs_error err;
    cr_assert_eq(req("{" OK_BASE ",'headers':{'max':9223372036854775807,"
                     "'min':-9223372036854775808,'big':1e308}}",
                     &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_eq(json_integer_value(json_object_get(j.headers, "min")),
                 INT64_MIN);
    job_clear(&j);
}

/* now + delay and deliver_at - now never overflow (UBSan checks), even at
 * limits the configuration does not allow: the answer is the horizon 400. */
Test(job, hostile_time_arithmetic_does_not_overflow)
{
    job_limits lim = LIM;
    lim.max_delay_ms = INT64_MAX;
    const char *delay_max =
        "{\"exchange\":\"e\",\"routing_key\":\"r\",\"body\":\"x\","
        "\"delay_ms\":9223372036854775807}";
    const char *far =
        "{\"exchange\":\"e\",\"routing_key\":\"r\",\"body\":\"x\","
        "\"deliver_at\":\"9999-12-31T23:59:59.999Z\"}";
    const char *past =
        "{\"exchange\":\"e\",\"routing_key\":\"r\",\"body\":\"x\","
        "\"deliver_at\":\"0001-01-01T00:00:00Z\"}";
    job_t j;
    rmqs_error err;
    int64_t at, delay;

    /* delay within a horizon of INT64_MAX, but now + delay overflows */
    cr_expect_eq(job_from_request(delay_max, strlen(delay_max), &lim, NOW, &j,
                                  NULL, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "delay_ms");
    cr_expect(strstr(err.message, "beyond the scheduling horizon") != NULL,
              "%s", err.message);
    cr_expect_eq(job_parse_reschedule("{\"delay_ms\":9223372036854775807}", 32,
                                      &lim, NOW, &at, &delay, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "delay_ms");

    /* deliver_at - now overflows when now is very negative */
    cr_expect_eq(
        job_from_request(far, strlen(far), &lim, INT64_MIN + 1, &j, NULL, &err),
        RMQS_EINVAL);
    cr_expect_str_eq(err.field, "deliver_at");
    cr_expect(strstr(err.message, "beyond the scheduling horizon") != NULL,
              "%s", err.message);

    /* the earliest time with now at the top of int64: accepted, delay 0 */
    cr_expect_eq(
        job_from_request(past, strlen(past), &LIM, INT64_MAX, &j, NULL, &err),
        RMQS_OK, "%s", err.message);
    cr_expect_eq(j.deliver_at, -62135596800000);
    cr_expect_eq(j.delay_ms, 0);
    job_buf api = {0};
    cr_expect_eq(job_write_json(&api, &j, 0), RMQS_OK);
    cr_expect(strstr(api.data, "\"deliver_at\":\"0001-01-01T00:00:00.000Z\"") !=
                  NULL,
              "%s", api.data);
    job_buf_free(&api);
    job_clear(&j);

    /* a delay exactly at the configured horizon is still fine */
    cr_expect_eq(req("{'exchange':'e','routing_key':'r','body':'x','delay_ms':"
                     "2592000000}",
                     &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_eq(j.deliver_at, NOW + 30 * UT_DAY);
    job_clear(&j);
}

/* "[[...]]" with depth levels around a scalar, as a request body. */
static char *request_with_depth(int depth, char open, char close)
{
    size_t cap = 128 + 2 * (size_t)depth * 8;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    size_t o = (size_t)snprintf(s, cap,
                                "{\"exchange\":\"e\",\"routing_key\":\"r\","
                                "\"delay_ms\":0,\"body\":");
    for (int i = 0; i < depth; i++)
        o += (size_t)snprintf(s + o, cap - o, open == '{' ? "{\"k\":" : "[");
    o += (size_t)snprintf(s + o, cap - o, "1");
    for (int i = 0; i < depth; i++)
        s[o++] = close;
    snprintf(s + o, cap - o, "}");
    return s;
}

Test(job, hostile_body_nesting_limit)
{
    static const struct {
        int depth;
        char open, close;
        bool ok;
    } cases[] = {
        {1, '[', ']', true},     {32, '[', ']', true},  {33, '[', ']', false},
        {32, '{', '}', true},    {33, '{', '}', false}, {100, '[', ']', false},
        {2000, '[', ']', false}, /* jansson parses it; the limit refuses it */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s =
            request_with_depth(cases[i].depth, cases[i].open, cases[i].close);
        job_t j;
        rmqs_error err;
        memset(&err, 0, sizeof err);
        rmqs_rc rc = job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err);
        if (cases[i].ok) {
            cr_expect_eq(rc, RMQS_OK, "depth %d %c: %s", cases[i].depth,
                         cases[i].open, err.message);
            cr_expect_eq(j.body_kind, JOB_BODY_JSON);
        } else {
            cr_expect_eq(rc, RMQS_EINVAL, "depth %d %c accepted",
                         cases[i].depth, cases[i].open);
            cr_expect_str_eq(err.field, "body");
            cr_expect_str_eq(err.message,
                             "body: too deeply nested (more than 32 "
                             "levels of arrays and objects)");
            cr_expect(ut_is_zero(&j, sizeof j));
        }
        job_clear(&j);
        free(s);
    }

    /* past jansson's own limit (2048) the JSON itself is refused */
    char *s = request_with_depth(2100, '[', ']');
    job_t j;
    rmqs_error err;
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_EINVAL);
    cr_expect(strstr(err.message, "invalid JSON: ") != NULL, "%s", err.message);
    free(s);

    /* mixed nesting counts arrays and objects alike; width does not count */
    cr_expect_eq(req("{'exchange':'e','routing_key':'r','delay_ms':0,'body':"
                     "[{'a':[{'b':[]}]},[],{},[[1,2,3],{'c':{'d':'e'}}]]}",
                     &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    job_clear(&j);

    /* the same rule holds for a batch element (job_from_json) */
    s = request_with_depth(33, '[', ']');
    json_t *root = json_loads(s, 0, NULL);
    cr_assert_not_null(root);
    cr_expect_eq(job_from_json(root, &LIM, NOW, &j, NULL, &err), RMQS_EINVAL);
    cr_expect_str_eq(err.field, "body");
    json_decref(root);
    free(s);

    /* a deep string body or body_base64 is just bytes */
    cr_expect_eq(req("{'exchange':'e','routing_key':'r','delay_ms':0,"
                     "'body':'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[['}",
                     &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    job_clear(&j);
}

/*
 * A request with one string header "h" of vlen bytes and, if props, all
 * eight short-string properties at 255 bytes. Encoded size without props:
 * flags 2 + delivery mode 1 + default message_id 1+36 + table 4 +
 * x-scheduler-job-id 60 + x-scheduled-at 44 + x-delay 17 = 165, plus the
 * entry 1+1+1+4+vlen: 172 + vlen.
 */
static char *request_with_big_header(size_t vlen, bool props)
{
    size_t cap = 4096 + vlen;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    size_t o = (size_t)snprintf(s, cap,
                                "{\"exchange\":\"e\",\"routing_key\":\"r\","
                                "\"body\":\"x\",\"delay_ms\":0,%s"
                                "\"headers\":{\"h\":\"",
                                props ? "\"properties\":{"
                                        "\"content_type\":\"" S255 "\","
                                        "\"content_encoding\":\"" S255 "\","
                                        "\"correlation_id\":\"" S255 "\","
                                        "\"reply_to\":\"" S255 "\","
                                        "\"message_id\":\"" S255 "\","
                                        "\"type\":\"" S255 "\","
                                        "\"app_id\":\"" S255 "\","
                                        "\"user_id\":\"" S255 "\"},"
                                      : "");
    memset(s + o, 'v', vlen);
    o += vlen;
    snprintf(s + o, cap - o, "\"}}");
    return s;
}

Test(job, hostile_headers_too_big_for_amqp)
{
    job_t j;
    rmqs_error err;
    char *s;

    /* exactly 65536 bytes encoded: accepted; one more: refused */
    s = request_with_big_header(65536 - 172, false);
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    job_clear(&j);
    free(s);
    s = request_with_big_header(65536 - 172 + 1, false);
    memset(&j, 0xAB, sizeof j);
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "headers");
    cr_expect_str_eq(err.message,
                     "headers: headers and properties take 65537 bytes "
                     "in the AMQP message, more than 65536");
    cr_expect(ut_is_zero(&j, sizeof j));
    free(s);

    /* properties count too: 8 x 255-byte strings replace the default message_id
     * (8 x 256 - 37 = 2011 bytes more) */
    s = request_with_big_header(65536 - 172 - 2011, true);
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_OK, "%s", err.message);
    job_clear(&j);
    free(s);
    s = request_with_big_header(65536 - 172 - 2011 + 1, true);
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "headers");
    free(s);

    /* many medium headers: 128 x 600-byte values */
    size_t cap = 128 * 700 + 256, o;
    s = malloc(cap);
    cr_assert_not_null(s);
    o = (size_t)snprintf(s, cap,
                         "{\"exchange\":\"e\",\"routing_key\":\"r\","
                         "\"body\":\"x\",\"delay_ms\":0,\"headers\":{");
    for (int i = 0; i < 128; i++) {
        o +=
            (size_t)snprintf(s + o, cap - o, "%s\"h%03d\":\"", i ? "," : "", i);
        memset(s + o, 'v', 600);
        o += 600;
        s[o++] = '"';
    }
    snprintf(s + o, cap - o, "}}");
    cr_expect_eq(job_from_request(s, strlen(s), &LIM, NOW, &j, NULL, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "headers");
    cr_expect(strstr(err.message, "more than 65536") != NULL, "%s",
              err.message);
    free(s);

    /* the largest header table of small values stays well within the cap */
    cr_expect_eq(
        req("{" OK_BASE ",'headers':{'" S255 "':'" S255 "'}}", &j, NULL, &err),
        RMQS_OK, "%s", err.message);
    job_clear(&j);
}

/* true if s is valid UTF-8 (jansson's own check, as the HTTP layer uses). */
static bool utf8_ok(const char *s)
{
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

/*
 * Field names and messages built from client-chosen keys end up in JSON
 * answers: cut to fit rmqs_error, they must still be valid UTF-8. Cut inside
 * a character, the answer was a 500 "out of memory" (jansson refuses to
 * encode the message), lost its "field", or lost the item's entry in a
 * batch's error list.
 */
Test(job, hostile_error_text_is_valid_utf8)
{
    /* "é" x 127 + "a": 255 bytes; "😀" x 63 + "abc": 255 bytes */
    char e2[256], e4[256];
    size_t o = 0;
    for (int i = 0; i < 127; i++)
        o += (size_t)snprintf(e2 + o, sizeof e2 - o, "\xc3\xa9");
    snprintf(e2 + o, sizeof e2 - o, "a");
    o = 0;
    for (int i = 0; i < 63; i++)
        o += (size_t)snprintf(e4 + o, sizeof e4 - o, "\xf0\x9f\x98\x80");
    snprintf(e4 + o, sizeof e4 - o, "abc");
    cr_assert_eq(strlen(e2), 255);
    cr_assert_eq(strlen(e4), 255);

    struct {
        const char *before, *after; /* the key goes between */
        const char *field_prefix;
    } cases[] = {
        {"{" OK_BASE ",'headers':{'", "':null}}", "headers."},
        {"{" OK_BASE ",'headers':{'", "':[1]}}", "headers."},
        {"{" OK_BASE ",'properties':{'", "':1}}", "properties."},
        {"{" OK_BASE ",'", "':1}", ""},
    };
    const char *keys[] = {e2, e4};
    rmqs_error err;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t k = 0; k < 2; k++) {
            char body[1024];
            snprintf(body, sizeof body, "%s%s%s", cases[c].before, keys[k],
                     cases[c].after);
            job_t j;
            memset(&err, 0, sizeof err);
            cr_expect_eq(req(body, &j, NULL, &err), RMQS_EINVAL, "case %zu/%zu",
                         c, k);
            cr_expect(utf8_ok(err.field), "case %zu/%zu: field not UTF-8: %s",
                      c, k, err.field);
            cr_expect(utf8_ok(err.message),
                      "case %zu/%zu: message not UTF-8: %s", c, k, err.message);
            cr_expect(strncmp(err.field, cases[c].field_prefix,
                              strlen(cases[c].field_prefix)) == 0,
                      "case %zu/%zu: field %s", c, k, err.field);
            cr_expect_gt(strlen(err.field), strlen(cases[c].field_prefix) + 40,
                         "case %zu/%zu: field cut too short: %s", c, k,
                         err.field);
            cr_expect_leq(strlen(err.field), 63);
        }
    }

    /* jansson's "near ..." context, cut inside a character (found by
     * tests/fuzz/fuzz_job_request.c): the invalid byte becomes '?' */
    static const char *const bad_escapes[] = {
        "{'body':'\\u00e\xcf\x87'}",        /* \u00e then U+03C7 */
        "{'body':'\\u00\xf0\x9f\x98\x80'}", /* \u00 then U+1F600 */
        "{'exchange':'e\\u000\xcf\x87\xdd\xd4','routing_key':'r'}",
    };
    for (size_t i = 0; i < sizeof bad_escapes / sizeof bad_escapes[0]; i++) {
        job_t j;
        memset(&err, 0, sizeof err);
        cr_expect_eq(req(bad_escapes[i], &j, NULL, &err), RMQS_EINVAL, "%s",
                     bad_escapes[i]);
        cr_expect(strncmp(err.message, "invalid JSON: ", 14) == 0, "%s",
                  err.message);
        cr_expect(utf8_ok(err.message), "message not UTF-8: %s", err.message);
        int64_t at, delay;
        char *t = ut_json_quotes(bad_escapes[i]);
        cr_expect_eq(
            job_parse_reschedule(t, strlen(t), &LIM, NOW, &at, &delay, &err),
            RMQS_EINVAL);
        cr_expect(utf8_ok(err.message), "PATCH message not UTF-8: %s",
                  err.message);
        free(t);
    }

    /* the same for PATCH */
    char body[512];
    int64_t at, delay;
    snprintf(body, sizeof body, "{\"delay_ms\":1,\"%s\":1}", e4);
    cr_expect_eq(
        job_parse_reschedule(body, strlen(body), &LIM, NOW, &at, &delay, &err),
        RMQS_EINVAL);
    cr_expect(utf8_ok(err.field), "field not UTF-8: %s", err.field);
    cr_expect_eq(strlen(err.field), 60,
                 "4-byte characters: 15 fit in 63 bytes");

    /* short keys are not cut */
    job_t j;
    cr_expect_eq(req("{" OK_BASE ",'headers':{'\xc3\xa9t\xc3\xa9':null}}", &j,
                     NULL, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "headers.\xc3\xa9t\xc3\xa9");
}

/* ------------------------------------------------------------------------ */
/* ids from the per-thread random buffer                                     */

static int cmp_id(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

Test(job, id_generate_unique_across_buffer_refills)
{
    /* 10 random bytes per id, 4 KiB per refill: 20,000 ids use ~49 refills */
    enum { N = 20000 };
    static char ids[N][JOB_ID_LEN + 1];
    for (int i = 0; i < N; i++)
        cr_assert_eq(job_id_generate(NOW, ids[i]), RMQS_OK);
    qsort(ids, N, sizeof ids[0], cmp_id);
    for (int i = 1; i < N; i++)
        cr_assert_str_neq(ids[i - 1], ids[i], "duplicate id at %d", i);
}

Test(job, id_generate_child_process_does_not_repeat_the_parent)
{
    /* The parent's buffer holds bytes it has not handed out yet; a child
     * must not hand out the same ones (a forking server, a test harness). */
    enum { N = 100 };
    char mine[N][JOB_ID_LEN + 1], theirs[N][JOB_ID_LEN + 1];
    int fd[2];

    cr_assert_eq(job_id_generate(NOW, mine[0]), RMQS_OK); /* fills the buffer */
    cr_assert_eq(pipe(fd), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        for (int i = 0; i < N; i++) {
            char id[JOB_ID_LEN + 1];
            if (job_id_generate(NOW, id) != RMQS_OK ||
                write(fd[1], id, sizeof id) != (ssize_t)sizeof id)
                _exit(1);
        }
        _exit(0);
    }
    close(fd[1]);
    for (int i = 0; i < N; i++)
        cr_assert_eq(job_id_generate(NOW, mine[i]), RMQS_OK);
    size_t got = 0;
    while (got < sizeof theirs) {
        ssize_t r = read(fd[0], (char *)theirs + got, sizeof theirs - got);
        cr_assert_gt(r, 0, "child gave %zu bytes", got);
        got += (size_t)r;
    }
    close(fd[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < N; k++)
            cr_assert_str_neq(mine[i], theirs[k], "parent %d == child %d", i,
                              k);
}
