/*
 * test_job_json.c - the one JSON representation of a job (job_json.c).
 *
 * Two oracles, so that no second serializer is needed to check the first:
 * jansson itself (every text must parse and dump back byte for byte in
 * jansson's compact form, the form the API had when it dumped jansson
 * trees) and fixed answers (the GOLDEN_* texts below were written by that
 * jansson serializer before it was removed, and pin member order and
 * spelling). The field tests then read values out of the parsed text.
 *
 * Request bodies are written with ' in place of " (ut_json_quotes). "now"
 * is fixed at 2026-01-01T00:00:00Z.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "job_json.h"
#include "testutil.h"

#define NOW 1767225600000LL /* 2026-01-01T00:00:00Z */
#define ID "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"

/* A job from a request body (with ' for "), with the id ID. */
static job_t job_of(const char *s)
{
    job_t j;
    rmqs_error err;
    char *t = ut_json_quotes(s);
    cr_assert_eq(
        job_from_request(t, strlen(t), &ut_limits, NOW, &j, NULL, &err),
        RMQS_OK, "%s: %s", s, err.message);
    free(t);
    memcpy(j.id, ID, JOB_ID_LEN + 1);
    return j;
}

/* Fails the test unless text is what jansson writes for what it reads in
 * text: parsed (NULs allowed, as a body may hold one) and dumped compact,
 * it gives text back byte for byte. */
static void expect_jansson_form(const char *text, const char *what)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(v, "%s: does not parse (%s): %s", what, jerr.text, text);
    char *again = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    cr_assert_not_null(again);
    cr_expect_str_eq(text, again, "%s: not in jansson's compact form", what);
    free(again);
    json_decref(v);
}

/* job_write_json(j, flags) as a malloc'd string, checked to be complete
 * and in jansson's form. */
static char *written(const job_t *j, unsigned flags, const char *what)
{
    job_buf b = {0};
    cr_assert_eq(job_write_json(&b, j, flags), RMQS_OK, "%s", what);
    cr_assert_not_null(b.data, "%s", what);
    cr_expect_eq(b.len, strlen(b.data), "%s: len", what);
    cr_expect(!b.oom);
    expect_jansson_form(b.data, what);
    return b.data; /* taken over from the buffer */
}

/* The written job, parsed (new reference). */
static json_t *parsed(const job_t *j)
{
    char *text = written(j, 0, "job");
    json_t *o = json_loads(text, JSON_ALLOW_NUL, NULL);
    free(text);
    cr_assert_not_null(o);
    return o;
}

/* ------------------------------------------------------------------------ */
/* the fields                                                                */

static const char *const api_keys[] = {
    "id",           "status",     "source",          "exchange",
    "routing_key",  "deliver_at", "next_attempt_at", "created_at",
    "updated_at",   "sent_at",    "failed_at",       "attempts",
    "max_attempts", "priority",   "held_by",         "held_ms",
    "last_error",   "headers",    "properties",
};
#define N_KEYS (sizeof api_keys / sizeof api_keys[0])

/* Every member, in the documented order, then body_key and nothing else. */
static void expect_keys_in_order(json_t *o, const char *body_key)
{
    const char *key;
    json_t *v;
    size_t i = 0;

    json_object_foreach(o, key, v) {
        const char *want = i < N_KEYS    ? api_keys[i]
                           : i == N_KEYS ? body_key
                                         : "(none)";
        cr_expect_str_eq(key, want, "member %zu", i);
        i++;
    }
    cr_expect_eq(i, N_KEYS + 1, "number of members");
}

static const char *str_of(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : "(not a string)";
}

Test(job_json, text_pending)
{
    job_t j = job_of(
        "{'exchange':'e','routing_key':'r','body':'hello','delay_ms':1500}");
    json_t *o = parsed(&j);
    expect_keys_in_order(o, "body");
    cr_expect_str_eq(str_of(o, "id"), ID);
    cr_expect_str_eq(str_of(o, "status"), "pending");
    cr_expect_str_eq(str_of(o, "source"), "http");
    cr_expect_str_eq(str_of(o, "exchange"), "e");
    cr_expect_str_eq(str_of(o, "routing_key"), "r");
    cr_expect_str_eq(str_of(o, "deliver_at"), "2026-01-01T00:00:01.500Z");
    cr_expect_str_eq(str_of(o, "next_attempt_at"), "2026-01-01T00:00:01.500Z");
    cr_expect_str_eq(str_of(o, "created_at"), "2026-01-01T00:00:00.000Z");
    cr_expect_str_eq(str_of(o, "updated_at"), "2026-01-01T00:00:00.000Z");
    cr_expect(json_is_null(json_object_get(o, "sent_at")));
    cr_expect(json_is_null(json_object_get(o, "last_error")));
    cr_expect_eq(json_integer_value(json_object_get(o, "attempts")), 0);
    cr_expect_eq(json_integer_value(json_object_get(o, "max_attempts")), 5);
    cr_expect(json_is_object(json_object_get(o, "headers")));
    cr_expect_eq(json_object_size(json_object_get(o, "headers")), 0);
    cr_expect_eq(json_object_size(json_object_get(o, "properties")), 0);
    cr_expect_str_eq(str_of(o, "body"), "hello");
    json_decref(o);
    job_clear(&j);
}

Test(job_json, json_body)
{
    job_t j =
        job_of("{'exchange':'e','routing_key':'r','body':{'a':[1,{'b':null}]},"
               "'delay_ms':0,'headers':{'h':1}}");
    json_t *o = parsed(&j);
    expect_keys_in_order(o, "body");
    json_t *want = json_pack("{s:[i,{s:n}]}", "a", 1, "b");
    cr_expect(json_equal(json_object_get(o, "body"), want),
              "body is the JSON value");
    json_decref(want);
    cr_expect_str_eq(str_of(json_object_get(o, "properties"), "content_type"),
                     "application/json");
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(o, "headers"), "h")),
        1);
    json_decref(o);
    job_clear(&j);
}

Test(job_json, binary_body)
{
    job_t j = job_of("{'exchange':'e','routing_key':'r','body_base64':'AAEC/"
                     "w==','delay_ms':0}");
    json_t *o = parsed(&j);
    expect_keys_in_order(o, "body_base64");
    cr_expect_str_eq(str_of(o, "body_base64"), "AAEC/w==");
    json_decref(o);
    job_clear(&j);
}

Test(job_json, sent_and_failed)
{
    job_t j =
        job_of("{'exchange':'e','routing_key':'r','body':'x','delay_ms':0}");
    j.status = JOB_SENT;
    j.sent_at = NOW + 2;
    j.attempts = 1;
    j.updated_at = NOW + 2;
    json_t *o = parsed(&j);
    cr_expect_str_eq(str_of(o, "status"), "sent");
    cr_expect(json_is_null(json_object_get(o, "next_attempt_at")),
              "not pending");
    cr_expect_str_eq(str_of(o, "sent_at"), "2026-01-01T00:00:00.002Z");
    cr_expect_str_eq(str_of(o, "updated_at"), "2026-01-01T00:00:00.002Z");
    cr_expect_eq(json_integer_value(json_object_get(o, "attempts")), 1);
    json_decref(o);

    j.status = JOB_FAILED;
    j.sent_at = -1;
    j.last_error = ut_strdup("NOT_FOUND - no exchange 'e' \xff");
    o = parsed(&j);
    cr_expect_str_eq(str_of(o, "status"), "failed");
    cr_expect(json_is_null(json_object_get(o, "sent_at")));
    cr_expect_str_eq(str_of(o, "last_error"), "NOT_FOUND - no exchange 'e' ?",
                     "invalid UTF-8 replaced, not an error");
    json_decref(o);
    job_clear(&j);
}

Test(job_json, zeroed_job)
{
    job_t j = {0};
    j.sent_at = -1;
    json_t *o = parsed(&j);
    expect_keys_in_order(o, "body");
    cr_expect_str_eq(str_of(o, "id"), "");
    cr_expect_str_eq(str_of(o, "exchange"), "");
    cr_expect_str_eq(str_of(o, "body"), "");
    cr_expect_str_eq(str_of(o, "deliver_at"), "1970-01-01T00:00:00.000Z");
    json_decref(o);
}

Test(job_json, damaged_body_shown_as_base64)
{
    job_t j = {0};
    j.sent_at = -1;
    j.body_kind = JOB_BODY_JSON;
    j.body = (unsigned char *)ut_strdup("{not json");
    j.body_len = 9;
    json_t *o = parsed(&j);
    expect_keys_in_order(o, "body_base64");
    cr_expect_str_eq(str_of(o, "body_base64"), "e25vdCBqc29u");
    json_decref(o);
    job_clear(&j);
}

/* ------------------------------------------------------------------------ */
/* the exact text                                                            */

#define GOLDEN_PENDING                                                     \
    "{\"id\":\"" ID "\",\"status\":\"pending\",\"source\":\"http\","       \
    "\"exchange\":\"e\",\"routing_key\":\"r\","                            \
    "\"deliver_at\":\"2026-01-01T00:00:01.500Z\","                         \
    "\"next_attempt_at\":\"2026-01-01T00:00:01.500Z\","                    \
    "\"created_at\":\"2026-01-01T00:00:00.000Z\","                         \
    "\"updated_at\":\"2026-01-01T00:00:00.000Z\",\"sent_at\":null,"        \
    "\"failed_at\":null,\"attempts\":0,\"max_attempts\":5,\"priority\":0," \
    "\"held_by\":null,"                                                    \
    "\"held_ms\":0,\"last_error\":null,\"headers\":{},"                    \
    "\"properties\":{},\"body\":\"hello\"}"
#define GOLDEN_FAILED                                                       \
    "{\"id\":\"" ID "\",\"status\":\"failed\",\"source\":\"amqp\","         \
    "\"exchange\":\"e\",\"routing_key\":\"r\","                             \
    "\"deliver_at\":\"2026-01-01T00:00:01.500Z\",\"next_attempt_at\":null," \
    "\"created_at\":\"2026-01-01T00:00:00.000Z\","                          \
    "\"updated_at\":\"2026-01-01T00:00:00.002Z\",\"sent_at\":null,"         \
    "\"failed_at\":\"2026-01-01T00:00:00.002Z\",\"attempts\":5,\"max_"      \
    "attempts\":5,\"priority\":0,\"held_by\":null,"                         \
    "\"held_ms\":0,\"last_error\":\"NO_ROUTE ?\","                          \
    "\"headers\":{},\"properties\":{},\"body\":\"hello\"}"
#define GOLDEN_JSON_BODY                                                     \
    "{\"id\":\"" ID "\",\"status\":\"pending\",\"source\":\"http\","         \
    "\"exchange\":\"billing\",\"routing_key\":\"invoice.overdue\","          \
    "\"deliver_at\":\"2026-01-01T00:00:00.000Z\","                           \
    "\"next_attempt_at\":\"2026-01-01T00:00:00.000Z\","                      \
    "\"created_at\":\"2026-01-01T00:00:00.000Z\","                           \
    "\"updated_at\":\"2026-01-01T00:00:00.000Z\",\"sent_at\":null,"          \
    "\"failed_at\":null,\"attempts\":0,\"max_attempts\":5,\"priority\":0,"   \
    "\"held_by\":null,"                                                      \
    "\"held_ms\":0,\"last_error\":null,"                                     \
    "\"headers\":{\"h\":true},"                                              \
    "\"properties\":{\"priority\":5,\"content_type\":\"application/json\"}," \
    "\"body\":{\"n\":[1,2.5,null],\"s\":\"\xc3\xa9\\n\"}}"
#define GOLDEN_MINIMAL(status)                      \
    "{\"id\":\"" ID "\",\"status\":\"" status "\"," \
    "\"deliver_at\":\"2026-01-01T00:00:01.500Z\"}"

#define REQ_TEXT \
    "{'exchange':'e','routing_key':'r','body':'hello','delay_ms':1500}"
#define REQ_JSON                                               \
    "{'exchange':'billing','routing_key':'invoice.overdue',"   \
    "'body':{'n':[1,2.5,null],'s':'\\u00e9\\n'},'delay_ms':0," \
    "'headers':{'h':true},'properties':{'priority':5}}"

Test(job_json, exact_text)
{
    job_t j = job_of(REQ_TEXT);
    char *t = written(&j, 0, "pending");
    cr_expect_str_eq(t, GOLDEN_PENDING);
    free(t);

    j.status = JOB_FAILED;
    j.attempts = 5;
    j.last_error = ut_strdup("NO_ROUTE \xff");
    j.source = JOB_SOURCE_AMQP;
    j.updated_at += 2;
    j.failed_at = j.updated_at;
    t = written(&j, 0, "failed");
    cr_expect_str_eq(t, GOLDEN_FAILED);
    free(t);
    /* the attempts only with JOB_WRITE_ATTEMPTS (GET /jobs/{id}), times
     * in RFC 3339, an element the stores never write left out */
    j.attempt_errors = json_pack(
        "[{sisIss}, {sisIss}, {si}]", "attempt", 1, "at",
        (json_int_t)j.updated_at - 1, "error", "312 NO_ROUTE", "attempt", 2,
        "at", (json_int_t)j.updated_at, "error", "NO_ROUTE \xc3\xa9", "x", 1);
    cr_assert_not_null(j.attempt_errors);
    t = written(&j, 0, "failed, attempts not asked for");
    cr_expect_str_eq(t, GOLDEN_FAILED);
    free(t);
    job_buf ab = {0};
    cr_assert_eq(job_write_json(&ab, &j, JOB_WRITE_ATTEMPTS), RMQS_OK);
    cr_expect(strstr(ab.data, "\"last_error\":\"NO_ROUTE ?\","
                              "\"attempt_errors\":[{\"attempt\":1,\"at\":"
                              "\"2026-01-01T00:00:00.001Z\",\"error\":"
                              "\"312 NO_ROUTE\"},{\"attempt\":2,\"at\":"
                              "\"2026-01-01T00:00:00.002Z\",\"error\":"
                              "\"NO_ROUTE \xc3\xa9\"}],\"headers\":{}") != NULL,
              "%s", ab.data);
    job_buf_free(&ab);
    job_clear(&j);

    j = job_of(REQ_JSON);
    t = written(&j, 0, "JSON body, parsed again");
    cr_expect_str_eq(t, GOLDEN_JSON_BODY);
    free(t);
    t = written(&j, JOB_WRITE_OWN_BODY, "JSON body, copied");
    cr_expect_str_eq(t, GOLDEN_JSON_BODY);
    free(t);
    job_clear(&j);
}

Test(job_json, requests_are_written_in_janssons_form)
{
    static const char *const reqs[] = {
        "{'exchange':'e','routing_key':'r','body':'hello','delay_ms':1500}",
        "{'exchange':'','routing_key':'','body':'','delay_ms':0}",
        /* every escape jansson writes, and characters it does not escape */
        "{'exchange':'e/\\\\x','routing_key':'q\\\"t','body':"
        "'\\u0001\\b\\f\\n\\r\\t\\u001f\\u007f/"
        "\\u00e9\\u20ac\\ud83d\\ude00','delay_ms':0}",
        "{'exchange':'caf\xc3\xa9','routing_key':'\xe2\x82\xac."
        "\xf0\x9f\x98\x80',"
        "'body':'x','delay_ms':0}",
        "{'exchange':'e','routing_key':'r','body':{'a':[1,{'b':null}],'c':true,"
        "'d':-0.0,'e':1.5e300,'f':0.1,'g':-12,'h':'\\u0001\\\"'},'delay_ms':0,"
        "'headers':{'h':1,'s':'v\\n','b':false,'r':2.5},'properties':{'"
        "priority':5,"
        "'app_id':'z','persistent':false}}",
        "{'exchange':'e','routing_key':'r','body':[],'deliver_at':'2025-06-"
        "01T00:00:00Z'}",
        "{'exchange':'e','routing_key':'r','body':{},'delay_ms':3,"
        "'properties':{'content_type':'text/x'}}",
        "{'exchange':'e','routing_key':'r','body_base64':'AAEC/"
        "w==','delay_ms':0,"
        "'max_attempts':7}",
        "{'exchange':'e','routing_key':'r','body_base64':'','delay_ms':0}",
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        job_t j = job_of(reqs[i]);
        char *req = ut_json_quotes(reqs[i]);
        json_t *in = json_loads(req, 0, NULL);
        char *full = written(&j, 0, reqs[i]);
        char *own = written(&j, JOB_WRITE_OWN_BODY, reqs[i]);
        json_t *out = json_loads(full, 0, NULL);

        cr_expect_str_eq(
            own, full, "%s: a copied body reads as one parsed again", reqs[i]);
        cr_assert_not_null(in);
        cr_assert_not_null(out);
        /* what was asked for is what is shown */
        cr_expect_str_eq(str_of(out, "exchange"), str_of(in, "exchange"), "%s",
                         reqs[i]);
        cr_expect_str_eq(str_of(out, "routing_key"), str_of(in, "routing_key"),
                         "%s", reqs[i]);
        if (json_object_get(in, "body") != NULL)
            cr_expect(json_equal(json_object_get(out, "body"),
                                 json_object_get(in, "body")),
                      "%s: body", reqs[i]);
        else
            cr_expect_str_eq(str_of(out, "body_base64"),
                             str_of(in, "body_base64"), "%s", reqs[i]);
        if (json_object_get(in, "headers") != NULL)
            cr_expect(json_equal(json_object_get(out, "headers"),
                                 json_object_get(in, "headers")),
                      "%s: headers", reqs[i]);
        json_decref(out);
        json_decref(in);
        free(own);
        free(full);
        free(req);
        job_clear(&j);
    }
}

Test(job_json, stored_jobs_are_written_in_janssons_form)
{
    job_t j =
        job_of("{'exchange':'e','routing_key':'r','body':'x','delay_ms':0}");
    char *t;

    j.status = JOB_SENT;
    j.sent_at = NOW + 2;
    j.attempts = 3;
    j.source = JOB_SOURCE_AMQP;
    free(written(&j, 0, "sent, from amqp"));

    j.status = JOB_FAILED;
    j.sent_at = -1;
    j.last_error = ut_strdup("NOT_FOUND - no exchange 'e' \xff \"q\"\n");
    t = written(&j, 0, "failed, invalid UTF-8 in last_error");
    cr_expect(
        strstr(
            t,
            "\"last_error\":\"NOT_FOUND - no exchange 'e' ? \\\"q\\\"\\n\"") !=
            NULL,
        "%s", t);
    free(t);
    free(j.exchange);
    j.exchange = ut_strdup("bad\xc3(");
    t = written(&j, 0, "invalid UTF-8 in exchange");
    cr_expect(strstr(t, "\"exchange\":\"bad?(\"") != NULL, "%s", t);
    free(t);
    job_clear(&j);

    job_t z = {0};
    z.sent_at = -1;
    free(written(&z, 0, "zeroed job"));
    z.body_kind = JOB_BODY_JSON;
    t = written(&z, 0, "JSON body without bytes");
    cr_expect(strstr(t, ",\"body_base64\":\"\"}") != NULL, "%s", t);
    free(t);

    /* damaged bodies read back from storage: shown as base64 */
    z.body = (unsigned char *)ut_strdup("{not json");
    z.body_len = 9;
    free(written(&z, 0, "damaged JSON body"));
    free(z.body);
    z.body_kind = JOB_BODY_TEXT;
    z.body = (unsigned char *)ut_strdup("a\xff");
    z.body_len = 2;
    t = written(&z, 0, "text body that is not UTF-8");
    cr_expect(strstr(t, ",\"body_base64\":\"Yf8=\"}") != NULL, "%s", t);
    free(t);
    z.body[1] = '\0'; /* text bodies may hold NUL (from AMQP ingest) */
    t = written(&z, 0, "text body with a NUL");
    cr_expect(strstr(t, ",\"body\":\"a\\u0000\"}") != NULL, "%s", t);
    free(t);
    z.body_kind = JOB_BODY_BINARY;
    t = written(&z, 0, "binary body");
    cr_expect(strstr(t, ",\"body_base64\":\"YQA=\"}") != NULL, "%s", t);
    free(t);
    /* a JSON body that jansson writes differently is written again */
    free(z.body);
    z.body_kind = JOB_BODY_JSON;
    z.body = (unsigned char *)ut_strdup("{ \"a\" : 1.50 }");
    z.body_len = strlen((char *)z.body);
    t = written(&z, 0, "JSON body not in jansson's form");
    cr_expect(strstr(t, ",\"body\":{\"a\":1.5}}") != NULL, "%s", t);
    free(t);
    job_clear(&z);
}

Test(job_json, appends_and_minimal)
{
    job_t j = job_of(REQ_TEXT);
    job_buf b = {0};

    cr_assert_eq(job_buf_append(&b, "[", 1), RMQS_OK);
    cr_assert_eq(job_write_json(&b, &j, JOB_WRITE_MINIMAL), RMQS_OK);
    cr_assert_eq(job_buf_append(&b, ",", 1), RMQS_OK);
    j.status = JOB_CANCELLED;
    cr_assert_eq(job_write_json(&b, &j, JOB_WRITE_MINIMAL | JOB_WRITE_OWN_BODY),
                 RMQS_OK);
    cr_assert_eq(job_buf_append(&b, "]", 1), RMQS_OK);
    cr_expect_str_eq(b.data, "[" GOLDEN_MINIMAL("pending") "," GOLDEN_MINIMAL(
                                 "cancelled") "]");
    cr_expect_eq(b.len, strlen(b.data));
    cr_expect(!b.oom);
    job_buf_free(&b);
    cr_expect_null(b.data);

    /* reserve only saves reallocations; the text is the same */
    j.status = JOB_PENDING;
    cr_assert_eq(job_buf_reserve(&b, 100000), RMQS_OK);
    cr_expect_geq(b.cap, 100001);
    cr_assert_eq(job_write_json(&b, &j, 0), RMQS_OK);
    cr_expect_str_eq(b.data, GOLDEN_PENDING);
    job_buf_free(&b);
    job_clear(&j);
}

/* ------------------------------------------------------------------------ */
/* lists: the batch answer and the GET /jobs page                            */

Test(job_json, batch_answer)
{
    job_t jobs[2] = {job_of(REQ_TEXT), job_of(REQ_TEXT)};
    job_buf b = {0};

    jobs[1].status = JOB_CANCELLED;
    cr_assert_eq(job_write_batch(&b, jobs, 2, JOB_WRITE_MINIMAL), RMQS_OK);
    cr_expect_str_eq(b.data,
                     "{\"jobs\":[" GOLDEN_MINIMAL("pending") "," GOLDEN_MINIMAL(
                         "cancelled") "]}");
    job_buf_free(&b);
    jobs[1].status = JOB_PENDING;
    cr_assert_eq(job_write_batch(&b, jobs, 2, JOB_WRITE_OWN_BODY), RMQS_OK);
    cr_expect_str_eq(b.data,
                     "{\"jobs\":[" GOLDEN_PENDING "," GOLDEN_PENDING "]}");
    expect_jansson_form(b.data, "batch");
    job_buf_free(&b);
    job_clear(&jobs[0]);
    job_clear(&jobs[1]);
}

Test(job_json, list_page)
{
    job_t jobs[2] = {job_of(REQ_JSON), job_of(REQ_JSON)};
    job_buf b = {0};

    /* as the jansson tree {"jobs":[...],"next":null} was dumped */
    cr_assert_eq(job_write_page(&b, jobs, 2, NULL), RMQS_OK);
    cr_expect_str_eq(b.data, "{\"jobs\":[" GOLDEN_JSON_BODY "," GOLDEN_JSON_BODY
                             "],\"next\":null}");
    expect_jansson_form(b.data, "page");
    job_buf_free(&b);

    cr_assert_eq(job_write_page(&b, jobs, 0, "a\"b"), RMQS_OK);
    cr_expect_str_eq(b.data, "{\"jobs\":[],\"next\":\"a\\\"b\"}");
    job_buf_free(&b);
    job_clear(&jobs[0]);
    job_clear(&jobs[1]);
}

/* A run of a recurring schedule says which schedule and fire time it is
 * for, right after its source; other jobs have none of the three. */
Test(job_json, schedule_run_fields)
{
    job_t j = job_of(
        "{'exchange':'e','routing_key':'r','body':'tick','delay_ms':60000}");
    json_t *o;
    const char *key;
    json_t *v;
    size_t i = 0;
    static const char *const first[] = {"id",       "status",  "source",
                                        "schedule", "fire_at", "expires_at",
                                        "exchange"};

    o = parsed(&j);
    cr_expect_null(json_object_get(o, "schedule"));
    cr_expect_null(json_object_get(o, "fire_at"));
    cr_expect_null(json_object_get(o, "expires_at"));
    json_decref(o);

    j.source = JOB_SOURCE_SCHEDULE;
    j.schedule = strdup("daily \"digest\"");
    j.fire_at = NOW + 60000;
    j.expires_at = NOW + 120000;
    o = parsed(&j);
    json_object_foreach(o, key, v) {
        if (i < sizeof first / sizeof first[0])
            cr_expect_str_eq(key, first[i], "member %zu", i);
        i++;
    }
    cr_expect_eq(i, N_KEYS + 3 + 1, "the run's three members more");
    cr_expect_str_eq(str_of(o, "source"), "schedule");
    cr_expect_str_eq(str_of(o, "schedule"), "daily \"digest\"");
    cr_expect_str_eq(str_of(o, "fire_at"), "2026-01-01T00:01:00.000Z");
    cr_expect_str_eq(str_of(o, "expires_at"), "2026-01-01T00:02:00.000Z");
    json_decref(o);
    j.expires_at = 0; /* no expiry: null */
    o = parsed(&j);
    cr_expect(json_is_null(json_object_get(o, "expires_at")));
    json_decref(o);
    job_clear(&j);
}
