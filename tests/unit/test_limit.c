/*
 * test_limit.c - a flow limit's rules (service/flow/limit.c): every rule of
 * a PUT body with the field its 400 names, the name rules, the canonical
 * spec (one text for one limit however it is written, defaults filled
 * in), PATCH merges, AMQP topic matching as RabbitMQ's topic exchange does
 * it (its tutorial's own bindings included), which jobs a limit matches,
 * and keys: parsing, their text and a job's key value.
 *
 * Bodies are written with ' in place of " (ut_json_quotes).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limit.h"
#include "testutil.h"

static rmqs_rc parse(const char *name, const char *body, limit_t *l,
                     char **spec, rmqs_error *err)
{
    char *t = ut_json_quotes(body);
    rmqs_rc rc = limit_from_request(name, t, strlen(t), l, spec, err);
    free(t);
    return rc;
}

/* The canonical spec of body (the caller frees it). */
static char *spec_of(const char *body)
{
    limit_t l;
    rmqs_error err = {0};
    char *spec = NULL;

    cr_assert_eq(parse("l1", body, &l, &spec, &err), RMQS_OK, "%s: %s (%s)",
                 body, err.message, err.field);
    limit_clear(&l);
    return spec;
}

static void expect_spec(const char *body, const char *want_q)
{
    char *spec = spec_of(body), *want = ut_json_quotes(want_q);

    cr_expect_str_eq(spec, want, "%s", body);
    free(spec);
    free(want);
}

/* ---- what a body gives ---------------------------------------------------- */

Test(limit, a_rate_alone_gets_its_defaults)
{
    limit_t l;
    rmqs_error err = {0};
    char *spec;

    cr_assert_eq(parse("orders", "{'rate_per_s':500}", &l, &spec, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_str_eq(l.name, "orders");
    cr_expect_null(l.match_exchange);
    cr_expect_null(l.match_routing_key);
    cr_expect_eq(l.rate_per_s, 500.0);
    cr_expect_eq(l.burst, 1, "burst defaults to 1");
    cr_expect_eq(l.key.kind, FLOW_KEY_NONE);
    cr_expect_null(l.key.header);
    cr_expect_null(l.hold_queue);
    cr_expect_str_eq(spec, "{\"burst\":1,\"rate_per_s\":500}");
    free(spec);
    limit_clear(&l);
    cr_expect(ut_is_zero(&l, sizeof l), "limit_clear zeroes");
}

Test(limit, every_member_is_read)
{
    limit_t l;
    rmqs_error err = {0};
    char *spec;

    cr_assert_eq(parse("eu-orders",
                       "{'match':{'exchange':'orders.*','routing_key':'eu.#'},"
                       "'rate_per_s':2.5,'burst':50,'key':'header:tenant',"
                       "'max_buckets':100,'hold_when_queue_ready_over':"
                       "{'queue':'billing','messages':1000}}",
                       &l, &spec, &err),
                 RMQS_OK, "%s (%s)", err.message, err.field);
    cr_expect_str_eq(l.match_exchange, "orders.", "the part before the '*'");
    cr_expect(l.match_exchange_prefix);
    cr_expect_str_eq(l.match_routing_key, "eu.#");
    cr_expect_eq(l.rate_per_s, 2.5);
    cr_expect_eq(l.burst, 50);
    cr_expect_eq(l.key.kind, FLOW_KEY_HEADER);
    cr_expect_str_eq(l.key.header, "tenant");
    cr_expect_eq(l.max_buckets, 100);
    cr_expect_str_eq(l.hold_queue, "billing");
    cr_expect_eq(l.hold_messages, 1000);
    {
        char *want = ut_json_quotes(
            "{'burst':50,'hold_when_queue_ready_over':{'messages':1000,"
            "'queue':'billing'},'key':'header:tenant','match':{'exchange':"
            "'orders.*','routing_key':'eu.#'},'max_buckets':100,"
            "'rate_per_s':2.5}");
        cr_expect_str_eq(spec, want);
        free(want);
    }
    free(spec);
    limit_clear(&l);
}

Test(limit, a_hold_alone_has_no_rate_and_no_bucket_defaults)
{
    limit_t l;
    rmqs_error err = {0};

    cr_assert_eq(parse("h",
                       "{'hold_when_queue_ready_over':{'queue':'q',"
                       "'messages':0}}",
                       &l, NULL, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_eq(l.rate_per_s, 0.0);
    cr_expect_str_eq(l.hold_queue, "q");
    cr_expect_eq(l.hold_messages, 0, "0: hold while any message is ready");
    limit_clear(&l);
    expect_spec("{'hold_when_queue_ready_over':{'queue':'q','messages':0}}",
                "{'hold_when_queue_ready_over':{'messages':0,'queue':'q'}}");
}

Test(limit, keys_by_routing_key_and_exchange_get_the_bucket_default)
{
    limit_t l;
    rmqs_error err = {0};

    cr_assert_eq(
        parse("k", "{'rate_per_s':1,'key':'routing_key'}", &l, NULL, &err),
        RMQS_OK);
    cr_expect_eq(l.key.kind, FLOW_KEY_ROUTING_KEY);
    cr_expect_eq(l.max_buckets, LIMIT_BUCKETS_DEFAULT);
    limit_clear(&l);
    expect_spec("{'rate_per_s':1,'key':'exchange'}",
                "{'burst':1,'key':'exchange','max_buckets':10000,"
                "'rate_per_s':1}");
}

Test(limit, the_bounds_themselves_are_accepted)
{
    static const char *const ok[] = {
        "{'rate_per_s':1000000,'burst':1000000,'key':'exchange',"
        "'max_buckets':1000000}",
        "{'rate_per_s':5e-324}",
        "{'rate_per_s':0.001,'burst':1,'key':'routing_key','max_buckets':1}",
        "{'hold_when_queue_ready_over':{'queue':'q','messages':1000000000}}",
        "{'match':{},'rate_per_s':1}",
        "{'match':{'exchange':''},'rate_per_s':1}",
        "{'match':{'exchange':'*'},'rate_per_s':1}",
        "{'match':{'routing_key':''},'rate_per_s':1}",
        "{'match':{'routing_key':'#'},'rate_per_s':1}",
        "{'match':{'routing_key':'*.*.#.a..b'},'rate_per_s':1}",
        "{'match':{'routing_key':'a\\tb'},'rate_per_s':1}",
        "{'rate_per_s':1,'key':'header:x-tenant id'}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        limit_t l;
        rmqs_error err = {0};
        cr_expect_eq(parse("l1", ok[i], &l, NULL, &err), RMQS_OK, "%s: %s (%s)",
                     ok[i], err.message, err.field);
        limit_clear(&l);
    }
}

/* ---- each rule's 400 -------------------------------------------------------- */

typedef struct bad_case {
    const char *name;
    const char *body;
    const char *field;
    const char *says; /* a part of the message */
} bad_case;

#define HOLD "'hold_when_queue_ready_over'"

static const bad_case bad_cases[] = {
    /* the body and its members */
    {"l1", "[1]", "", "JSON object"},
    {"l1", "'x'", "", "invalid JSON"},
    {"l1", "{'rate_per_s':1,'key':'header:a\\u0000b'}", "", "invalid JSON"},
    {"l1", "{'rate_per_s':", "", "invalid JSON"},
    {"l1", "{'rate_per_s':1,'rate_per_s':2}", "", "invalid JSON"},
    {"l1", "{'rate_per_s':NaN}", "", "invalid JSON"},
    {"l1", "{'rate_per_s':Infinity}", "", "invalid JSON"},
    {"l1", "{'rate_per_s':1e999}", "", "invalid JSON"},
    {"l1", "{'rate_per_s':99999999999999999999}", "", "invalid JSON"},
    {"l1", "{}", "rate_per_s", "one of rate_per_s or"},
    {"l1", "{'rate_per_s':1,'colour':'red'}", "colour", "unknown"},
    {"l1", "{'rate_per_s':1,'Rate_per_s':1}", "Rate_per_s", "unknown"},
    {"l1", "{'zz':1,'aa':2,'rate_per_s':1}", "aa", "unknown"},
    /* the name */
    {"", "{'rate_per_s':1}", "name", "1 to 200"},
    {"a/b", "{'rate_per_s':1}", "name", "1 to 200"},
    {"a\nb", "{'rate_per_s':1}", "name", "1 to 200"},
    {"caf\xc3\xa9", "{'rate_per_s':1}", "name", "1 to 200"},
    /* match */
    {"l1", "{'match':'orders','rate_per_s':1}", "match", "object"},
    {"l1", "{'match':null,'rate_per_s':1}", "match", "object"},
    {"l1", "{'match':{'queue':'q'},'rate_per_s':1}", "match.queue", "unknown"},
    {"l1", "{'match':{'exchange':5},'rate_per_s':1}", "match.exchange",
     "string"},
    {"l1", "{'match':{'exchange':'a*b'},'rate_per_s':1}", "match.exchange",
     "only at the end"},
    {"l1", "{'match':{'exchange':'**'},'rate_per_s':1}", "match.exchange",
     "only at the end"},
    {"l1", "{'match':{'exchange':'*a'},'rate_per_s':1}", "match.exchange",
     "only at the end"},
    {"l1", "{'match':{'exchange':'a\\nb'},'rate_per_s':1}", "match.exchange",
     "control"},
    {"l1", "{'match':{'routing_key':['a']},'rate_per_s':1}",
     "match.routing_key", "string"},
    {"l1", "{'match':{'routing_key':'a.b*'},'rate_per_s':1}",
     "match.routing_key", "alone"},
    {"l1", "{'match':{'routing_key':'a.#b.c'},'rate_per_s':1}",
     "match.routing_key", "alone"},
    {"l1", "{'match':{'routing_key':'**'},'rate_per_s':1}", "match.routing_key",
     "alone"},
    {"l1", "{'match':{'routing_key':'*#'},'rate_per_s':1}", "match.routing_key",
     "alone"},
    /* rate_per_s */
    {"l1", "{'rate_per_s':0}", "rate_per_s", "above 0"},
    {"l1", "{'rate_per_s':-0.0}", "rate_per_s", "above 0"},
    {"l1", "{'rate_per_s':-5}", "rate_per_s", "above 0"},
    {"l1", "{'rate_per_s':1000000.5}", "rate_per_s", "at most 1000000"},
    {"l1", "{'rate_per_s':1e300}", "rate_per_s", "at most 1000000"},
    {"l1", "{'rate_per_s':9223372036854775807}", "rate_per_s",
     "at most 1000000"},
    {"l1", "{'rate_per_s':'5'}", "rate_per_s", "a number"},
    {"l1", "{'rate_per_s':true}", "rate_per_s", "a number"},
    {"l1", "{'rate_per_s':null}", "rate_per_s", "a number"},
    /* burst */
    {"l1", "{'rate_per_s':1,'burst':0}", "burst", "from 1 to 1000000"},
    {"l1", "{'rate_per_s':1,'burst':1000001}", "burst", "from 1 to 1000000"},
    {"l1", "{'rate_per_s':1,'burst':2.5}", "burst", "integer"},
    {"l1", "{'rate_per_s':1,'burst':5.0}", "burst", "integer"},
    {"l1", "{'rate_per_s':1,'burst':'5'}", "burst", "integer"},
    {"l1", "{" HOLD ":{'queue':'q','messages':1},'burst':5}", "burst",
     "only with rate_per_s"},
    /* key */
    {"l1", "{'rate_per_s':1,'key':'tenant'}", "key", "header:NAME"},
    {"l1", "{'rate_per_s':1,'key':''}", "key", "header:NAME"},
    {"l1", "{'rate_per_s':1,'key':'Header:x'}", "key", "header:NAME"},
    {"l1", "{'rate_per_s':1,'key':'header:'}", "key", "1 to 255"},
    {"l1", "{'rate_per_s':1,'key':'header:a\\u0001'}", "key", "control"},
    {"l1", "{'rate_per_s':1,'key':7}", "key", "header:NAME"},
    {"l1", "{" HOLD ":{'queue':'q','messages':1},'key':'exchange'}", "key",
     "only with rate_per_s"},
    /* max_buckets */
    {"l1", "{'rate_per_s':1,'max_buckets':5}", "max_buckets", "only with key"},
    {"l1", "{'rate_per_s':1,'key':'exchange','max_buckets':0}", "max_buckets",
     "from 1 to 1000000"},
    {"l1", "{'rate_per_s':1,'key':'exchange','max_buckets':1000001}",
     "max_buckets", "from 1 to 1000000"},
    {"l1", "{'rate_per_s':1,'key':'exchange','max_buckets':[]}", "max_buckets",
     "integer"},
    /* hold_when_queue_ready_over */
    {"l1", "{" HOLD ":'q'}", "hold_when_queue_ready_over", "object"},
    {"l1", "{" HOLD ":{'messages':1}}", "hold_when_queue_ready_over.queue",
     "required"},
    {"l1", "{" HOLD ":{'queue':'','messages':1}}",
     "hold_when_queue_ready_over.queue", "empty"},
    {"l1", "{" HOLD ":{'queue':1,'messages':1}}",
     "hold_when_queue_ready_over.queue", "string"},
    {"l1", "{" HOLD ":{'queue':'a\\u007f','messages':1}}",
     "hold_when_queue_ready_over.queue", "control"},
    {"l1", "{" HOLD ":{'queue':'q'}}", "hold_when_queue_ready_over.messages",
     "required"},
    {"l1", "{" HOLD ":{'queue':'q','messages':-1}}",
     "hold_when_queue_ready_over.messages", "from 0 to 1000000000"},
    {"l1", "{" HOLD ":{'queue':'q','messages':1000000001}}",
     "hold_when_queue_ready_over.messages", "from 0 to 1000000000"},
    {"l1", "{" HOLD ":{'queue':'q','messages':'1'}}",
     "hold_when_queue_ready_over.messages", "integer"},
    {"l1", "{" HOLD ":{'queue':'q','messages':1,'vhost':'/'}}",
     "hold_when_queue_ready_over.vhost", "unknown"},
};

Test(limit, each_bad_member_is_refused_naming_it)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        limit_t l;
        rmqs_error err = {0};
        char *spec = (char *)"untouched";
        rmqs_rc rc = parse(c->name, c->body, &l, &spec, &err);

        cr_expect_eq(rc, RMQS_EINVAL, "%s", c->body);
        cr_expect_str_eq(err.field, c->field, "%s: field %s (%s)", c->body,
                         err.field, err.message);
        cr_expect(strstr(err.message, c->says) != NULL, "%s: message %s",
                  c->body, err.message);
        cr_expect(ut_is_zero(&l, sizeof l), "%s: *out not zeroed", c->body);
        cr_expect_null(spec, "%s", c->body);
        if (rc == RMQS_OK) {
            limit_clear(&l);
            free(spec);
        }
    }
}

/* jansson's parser refuses \u0000, but a JSON value built otherwise may
 * hold a NUL: it is refused, never cut short by a C string. */
Test(limit, a_nul_inside_a_string_is_refused)
{
    json_t *bodies[] = {
        json_pack("{s:{s:s#}, s:i}", "match", "routing_key", "a\0b", (size_t)3,
                  "rate_per_s", 1),
        json_pack("{s:{s:s#}, s:i}", "match", "exchange", "a\0b", (size_t)3,
                  "rate_per_s", 1),
        json_pack("{s:i, s:s#}", "rate_per_s", 1, "key", "header:a\0b",
                  (size_t)10),
        json_pack("{s:{s:s#, s:i}}", "hold_when_queue_ready_over", "queue",
                  "a\0b", (size_t)3, "messages", 1),
    };
    static const char *const fields[] = {"match.routing_key", "match.exchange",
                                         "key",
                                         "hold_when_queue_ready_over.queue"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        limit_t l;
        rmqs_error err = {0};
        cr_assert_not_null(bodies[i]);
        cr_expect_eq(limit_from_json("l1", bodies[i], &l, NULL, &err),
                     RMQS_EINVAL, "%s", fields[i]);
        cr_expect_str_eq(err.field, fields[i], "%s", err.message);
        json_decref(bodies[i]);
    }
}

Test(limit, long_strings_are_refused_at_256_bytes)
{
    static const struct {
        const char *before, *after, *field;
    } cases[] = {
        {"{'match':{'exchange':'", "'},'rate_per_s':1}", "match.exchange"},
        {"{'match':{'routing_key':'", "'},'rate_per_s':1}",
         "match.routing_key"},
        {"{'rate_per_s':1,'key':'header:", "'}", "key"},
        {"{" HOLD ":{'queue':'", "','messages':1}}",
         "hold_when_queue_ready_over.queue"},
    };
    char s[257], body[700];
    limit_t l;
    rmqs_error err = {0};

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t len = 255; len <= 256; len++) {
            memset(s, 'a', len);
            s[len] = '\0';
            snprintf(body, sizeof body, "%s%s%s", cases[i].before, s,
                     cases[i].after);
            rmqs_rc rc = parse("l1", body, &l, NULL, &err);
            if (len == 255) {
                cr_expect_eq(rc, RMQS_OK, "%s: %s", cases[i].field,
                             err.message);
                limit_clear(&l);
            } else {
                cr_expect_eq(rc, RMQS_EINVAL, "%s", cases[i].field);
                cr_expect_str_eq(err.field, cases[i].field);
            }
        }
    }
}

Test(limit, name_rules_are_the_schedules)
{
    char n200[201], n201[202];

    memset(n200, 'a', 200);
    n200[200] = '\0';
    memset(n201, 'a', 201);
    n201[201] = '\0';
    cr_expect(limit_name_valid("orders.eu-west_1:v2"));
    cr_expect(limit_name_valid(n200));
    cr_expect_not(limit_name_valid(n201));
    cr_expect_not(limit_name_valid(""));
    cr_expect_not(limit_name_valid(NULL));
    cr_expect_not(limit_name_valid("with space"));
    cr_expect_not(limit_name_valid("a%0Ab"));
    cr_expect_not(limit_name_valid("a\nb"));
}

/* ---- the canonical spec ------------------------------------------------------ */

Test(limit, one_limit_written_two_ways_is_one_spec)
{
    static const struct {
        const char *a, *b;
    } same[] = {
        /* key order, spacing, the defaults written out */
        {"{'rate_per_s':500,'burst':1}",
         "{ 'burst' : 1 , 'rate_per_s' : 500 }"},
        {"{'rate_per_s':500}", "{'burst':1,'rate_per_s':500}"},
        /* a whole rate written as a real, or with an exponent */
        {"{'rate_per_s':500}", "{'rate_per_s':500.0}"},
        {"{'rate_per_s':500}", "{'rate_per_s':5e2}"},
        {"{'rate_per_s':0.25}", "{'rate_per_s':2.5e-1}"},
        /* an empty match is no match */
        {"{'rate_per_s':1}", "{'rate_per_s':1,'match':{}}"},
        /* escapes in strings */
        {"{'rate_per_s':1,'match':{'exchange':'orders'}}",
         "{'rate_per_s':1,'match':{'exchange':'\\u006frders'}}"},
        /* max_buckets at its default */
        {"{'rate_per_s':1,'key':'header:t'}",
         "{'max_buckets':10000,'key':'header:t','rate_per_s':1}"},
        {"{'hold_when_queue_ready_over':{'queue':'q','messages':5}}",
         "{'hold_when_queue_ready_over':{'messages':5,'queue':'q'}}"},
    };
    static const struct {
        const char *a, *b;
    } other[] = {
        {"{'rate_per_s':500}", "{'rate_per_s':501}"},
        {"{'rate_per_s':500}", "{'rate_per_s':500,'burst':2}"},
        {"{'rate_per_s':1,'match':{'exchange':'a'}}",
         "{'rate_per_s':1,'match':{'exchange':'a*'}}"},
        {"{'rate_per_s':1,'match':{'exchange':''}}", "{'rate_per_s':1}"},
        {"{'rate_per_s':1,'key':'header:t'}",
         "{'rate_per_s':1,'key':'header:T'}"},
    };

    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char *a = spec_of(same[i].a), *b = spec_of(same[i].b);
        cr_expect_str_eq(a, b, "%s vs %s", same[i].a, same[i].b);
        cr_expect_null(strstr(a, ": "), "compact: %s", a);
        cr_expect_null(strstr(a, ", "), "compact: %s", a);
        free(a);
        free(b);
    }
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        char *a = spec_of(other[i].a), *b = spec_of(other[i].b);
        cr_expect_str_neq(a, b, "%s vs %s", other[i].a, other[i].b);
        free(a);
        free(b);
    }
}

Test(limit, a_stored_spec_reads_back_as_the_same_limit_and_text)
{
    static const char *const bodies[] = {
        "{'rate_per_s':0.1}",
        "{'rate_per_s':123456.789,'burst':7,'key':'header:tenant',"
        "'max_buckets':3,'match':{'exchange':'x*','routing_key':'a.*.#'}}",
        "{'hold_when_queue_ready_over':{'queue':'q','messages':9},"
        "'match':{'routing_key':''}}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        char *spec = spec_of(bodies[i]), *again = NULL;
        limit_t a, b;
        rmqs_error err = {0};

        cr_assert_eq(parse("l1", bodies[i], &a, NULL, &err), RMQS_OK);
        cr_assert_eq(limit_from_spec("l1", spec, &b, &err), RMQS_OK, "%s: %s",
                     spec, err.message);
        cr_expect_eq(a.rate_per_s, b.rate_per_s, "%s: the rate exactly", spec);
        cr_expect_eq(a.burst, b.burst);
        cr_expect_eq(a.key.kind, b.key.kind);
        cr_expect_eq(a.max_buckets, b.max_buckets);
        cr_expect_eq(a.match_exchange_prefix, b.match_exchange_prefix);
        cr_expect_eq(a.hold_messages, b.hold_messages);
        limit_clear(&b);
        cr_assert_eq(
            limit_from_request("l1", spec, strlen(spec), &b, &again, &err),
            RMQS_OK);
        cr_expect_str_eq(again, spec, "the canonical text is a fixed point");
        free(spec);
        free(again);
        limit_clear(&a);
        limit_clear(&b);
    }
    {
        limit_t l;
        rmqs_error err = {0};
        cr_expect_eq(limit_from_spec("l1", "{\"burst\":1}", &l, &err),
                     RMQS_EINVAL, "a spec that no longer validates");
        cr_expect_eq(limit_from_spec("l1", NULL, &l, &err), RMQS_EINVAL);
    }
}

/* ---- PATCH ------------------------------------------------------------------- */

/* Patch the canonical spec of spec_body with patch_q. */
static rmqs_rc patch(const char *spec_body, const char *patch_q, limit_t *l,
                     char **merged, rmqs_error *err)
{
    char *spec = spec_of(spec_body), *p = ut_json_quotes(patch_q);
    rmqs_rc rc = limit_patch("l1", spec, p, strlen(p), l, merged, err);
    free(spec);
    free(p);
    return rc;
}

static void expect_patch(const char *spec_body, const char *patch_q,
                         const char *want_body)
{
    limit_t l;
    rmqs_error err = {0};
    char *merged = NULL, *want = spec_of(want_body);

    cr_assert_eq(patch(spec_body, patch_q, &l, &merged, &err), RMQS_OK,
                 "%s + %s: %s (%s)", spec_body, patch_q, err.message,
                 err.field);
    cr_expect_str_eq(merged, want, "%s + %s", spec_body, patch_q);
    free(merged);
    free(want);
    limit_clear(&l);
}

static void expect_patch_fails(const char *spec_body, const char *patch_q,
                               const char *field)
{
    limit_t l;
    rmqs_error err = {0};
    char *merged = (char *)"untouched";

    cr_expect_eq(patch(spec_body, patch_q, &l, &merged, &err), RMQS_EINVAL,
                 "%s + %s", spec_body, patch_q);
    cr_expect_str_eq(err.field, field, "%s + %s: %s", spec_body, patch_q,
                     err.message);
    cr_expect_null(merged);
    cr_expect(ut_is_zero(&l, sizeof l));
}

#define FULL                                                               \
    "{'match':{'exchange':'orders','routing_key':'eu.#'},'rate_per_s':10," \
    "'burst':5,'key':'header:tenant','max_buckets':100}"

Test(limit, patch_merges_top_level_members)
{
    /* a change of rate keeps the rest */
    expect_patch(FULL, "{'rate_per_s':20}",
                 "{'match':{'exchange':'orders','routing_key':'eu.#'},"
                 "'rate_per_s':20,'burst':5,'key':'header:tenant',"
                 "'max_buckets':100}");
    /* null removes a member; its default applies again */
    expect_patch(FULL, "{'burst':null}",
                 "{'match':{'exchange':'orders','routing_key':'eu.#'},"
                 "'rate_per_s':10,'key':'header:tenant','max_buckets':100}");
    expect_patch(FULL, "{'match':null}",
                 "{'rate_per_s':10,'burst':5,'key':'header:tenant',"
                 "'max_buckets':100}");
    /* match is replaced whole, not merged */
    expect_patch(FULL, "{'match':{'routing_key':'us.*'}}",
                 "{'match':{'routing_key':'us.*'},'rate_per_s':10,'burst':5,"
                 "'key':'header:tenant','max_buckets':100}");
    /* so is the hold */
    expect_patch("{'hold_when_queue_ready_over':{'queue':'a','messages':1}}",
                 "{'hold_when_queue_ready_over':{'queue':'b','messages':2}}",
                 "{'hold_when_queue_ready_over':{'queue':'b','messages':2}}");
    /* nothing in the patch: the same spec */
    expect_patch(FULL, "{}", FULL);
}

Test(limit, removing_a_member_takes_its_dependants_only_at_their_default)
{
    /* the burst the spec filled in goes with the rate */
    expect_patch("{'rate_per_s':10,'hold_when_queue_ready_over':{'queue':'q',"
                 "'messages':1}}",
                 "{'rate_per_s':null}",
                 "{'hold_when_queue_ready_over':{'queue':'q','messages':1}}");
    /* the max_buckets it filled in goes with the key */
    expect_patch("{'rate_per_s':10,'key':'exchange'}", "{'key':null}",
                 "{'rate_per_s':10}");
    /* all at once */
    expect_patch("{'rate_per_s':10,'key':'exchange','hold_when_queue_ready_"
                 "over':{'queue':'q','messages':1}}",
                 "{'rate_per_s':null,'key':null}",
                 "{'hold_when_queue_ready_over':{'queue':'q','messages':1}}");
    /* a value the client chose stays, and fails as in a PUT */
    expect_patch_fails("{'rate_per_s':10,'burst':5,'hold_when_queue_ready_"
                       "over':{'queue':'q','messages':1}}",
                       "{'rate_per_s':null}", "burst");
    expect_patch_fails(FULL, "{'key':null}", "max_buckets");
    /* a key without the rate it needs */
    expect_patch_fails("{'rate_per_s':10,'key':'exchange','hold_when_queue_"
                       "ready_over':{'queue':'q','messages':1}}",
                       "{'rate_per_s':null}", "key");
    /* nothing left */
    expect_patch_fails("{'rate_per_s':10}", "{'rate_per_s':null}",
                       "rate_per_s");
}

Test(limit, patch_is_checked_as_a_put)
{
    expect_patch_fails(FULL, "{'rate_per_s':0}", "rate_per_s");
    expect_patch_fails(FULL, "{'match':{'routing_key':'a#'}}",
                       "match.routing_key");
    expect_patch_fails(FULL, "{'colour':'red'}", "colour");
    expect_patch_fails(FULL, "{'colour':null}", "colour");
    expect_patch_fails(FULL, "[]", "");
    expect_patch_fails(FULL, "{'burst':1,'burst':2}", "");
    {
        limit_t l;
        rmqs_error err = {0};
        char *merged;
        cr_expect_eq(limit_patch("l1", "not json", "{}", 2, &l, &merged, &err),
                     RMQS_EINVAL, "a stored spec that is not JSON");
        cr_expect_eq(limit_patch("bad name", "{\"rate_per_s\":1}", "{}", 2, &l,
                                 &merged, &err),
                     RMQS_EINVAL);
        cr_expect_str_eq(err.field, "name");
    }
}

/* ---- topic patterns ---------------------------------------------------------- */

typedef struct topic_case {
    const char *pattern, *key;
    bool match;
} topic_case;

static const topic_case topic_cases[] = {
    /* RabbitMQ's tutorial 5 (topics): Q1 binds "*.orange.*", Q2 binds
     * "*.*.rabbit" and "lazy.#" */
    {"*.orange.*", "quick.orange.rabbit", true},
    {"*.*.rabbit", "quick.orange.rabbit", true},
    {"lazy.#", "quick.orange.rabbit", false},
    {"*.orange.*", "lazy.orange.elephant", true},
    {"lazy.#", "lazy.orange.elephant", true},
    {"*.*.rabbit", "lazy.orange.elephant", false},
    {"*.orange.*", "quick.orange.fox", true},
    {"*.*.rabbit", "quick.orange.fox", false},
    {"lazy.#", "quick.orange.fox", false},
    {"lazy.#", "lazy.brown.fox", true},
    {"*.orange.*", "lazy.brown.fox", false},
    {"*.*.rabbit", "lazy.pink.rabbit", true},
    {"lazy.#", "lazy.pink.rabbit", true},
    {"*.orange.*", "quick.brown.fox", false},
    {"*.*.rabbit", "quick.brown.fox", false},
    {"lazy.#", "quick.brown.fox", false},
    {"*.orange.*", "orange", false},
    {"*.*.rabbit", "orange", false},
    {"*.orange.*", "quick.orange.new.rabbit", false},
    {"*.*.rabbit", "quick.orange.new.rabbit", false},
    {"lazy.#", "lazy.orange.new.rabbit", true},
    {"*.*.rabbit", "lazy.orange.new.rabbit", false},
    {"*.orange.*", "quick.orange.male.rabbit", false},
    {"lazy.#", "quick.orange.male.rabbit", false},
    /* '#': zero or more words */
    {"a.#", "a", true},
    {"a.#", "a.b", true},
    {"a.#", "a.b.c", true},
    {"a.#", "b", false},
    {"a.#", "ab", false},
    {"#", "", true},
    {"#", "a", true},
    {"#", "a.b.c", true},
    {"#.a", "a", true},
    {"#.a", "b.c.a", true},
    {"#.a", "a.b", false},
    {"a.#.b", "a.b", true},
    {"a.#.b", "a.x.y.b", true},
    {"a.#.b", "a.b.c", false},
    {"a.#.b", "a.b.b", true},
    {"#.b.#", "b", true},
    {"#.b.#", "a.b.c", true},
    {"#.b.#", "a.c", false},
    {"#.#", "", true},
    {"#.#", "a.b", true},
    {"a.#.#.b", "a.b", true},
    {"#.*", "", false},
    {"*.#", "", false},
    {"#.*.c", "a.b.c", true},
    {"#.*.c", "c", false},
    {"#.*", ".", true},
    {"*", ".", false},
    /* '*': exactly one word, maybe an empty one; "" has none */
    {"*", "", false}, /* "" has no word */
    {"*", "a", true},
    {"*", "a.b", false},
    {"*.*", "", false},
    {"*.*", ".", true},
    {"a.*", "a", false},
    {"a.*", "a.", true},
    {"a.*.b", "a..b", true},
    {"a.*.b", "a.b", false},
    {"a.*.b", "a.x.b", true},
    /* literal words, empty words, case */
    {"", "", true},
    {"", "a", false},
    {"a", "", false},
    {"a..b", "a..b", true},
    {"a..b", "a.b", false},
    {"a.", "a.", true},
    {"a.", "a", false},
    {".a", ".a", true},
    {"A", "a", false},
    {"orders.EU", "orders.eu", false},
    {"a", "*", false},
    {"*", "#", true},
    {"#", "*", true},
    {"a.b", "a.b.c", false},
    {"a.b.c", "a.b", false},
};

Test(limit, topic_patterns_match_as_rabbitmq_does)
{
    for (size_t i = 0; i < sizeof topic_cases / sizeof topic_cases[0]; i++) {
        const topic_case *c = &topic_cases[i];
        cr_expect_eq(topic_match(c->pattern, c->key), c->match,
                     "'%s' against '%s': want %s", c->pattern, c->key,
                     c->match ? "a match" : "none");
    }
    cr_expect(topic_match(NULL, ""), "NULL reads as \"\"");
    cr_expect_not(topic_match(NULL, "a"));
    cr_expect(topic_match("#", NULL));
}

Test(limit, many_hashes_against_a_long_key_end_quickly)
{
    char pattern[256] = "", key[256] = "";

    for (int i = 0; i < 60; i++)
        strcat(pattern, "#.");
    strcat(pattern, "x");
    for (int i = 0; i < 127; i++)
        strcat(key, "a.");
    strcat(key, "b");
    cr_expect_not(topic_match(pattern, key));
    key[strlen(key) - 1] = 'x';
    cr_expect(topic_match(pattern, key));
}

Test(limit, limit_matches_the_exchange_and_the_routing_key)
{
    static const struct {
        const char *body, *exchange, *routing_key;
        bool match;
    } cases[] = {
        {"{'rate_per_s':1}", "any", "thing", true},
        {"{'rate_per_s':1}", NULL, NULL, true},
        {"{'rate_per_s':1,'match':{'exchange':'orders'}}", "orders", "x", true},
        {"{'rate_per_s':1,'match':{'exchange':'orders'}}", "orders.eu", "x",
         false},
        {"{'rate_per_s':1,'match':{'exchange':'orders'}}", "Orders", "x",
         false},
        {"{'rate_per_s':1,'match':{'exchange':'orders*'}}", "orders", "x",
         true},
        {"{'rate_per_s':1,'match':{'exchange':'orders*'}}", "orders.eu", "x",
         true},
        {"{'rate_per_s':1,'match':{'exchange':'orders*'}}", "order", "x",
         false},
        {"{'rate_per_s':1,'match':{'exchange':''}}", "", "q", true},
        {"{'rate_per_s':1,'match':{'exchange':''}}", NULL, "q", true},
        {"{'rate_per_s':1,'match':{'exchange':''}}", "amq.direct", "q", false},
        {"{'rate_per_s':1,'match':{'exchange':'*'}}", "", "q", true},
        {"{'rate_per_s':1,'match':{'exchange':'*'}}", "anything", "q", true},
        {"{'rate_per_s':1,'match':{'routing_key':'eu.#'}}", "x", "eu.de", true},
        {"{'rate_per_s':1,'match':{'routing_key':'eu.#'}}", "x", "us.ny",
         false},
        {"{'rate_per_s':1,'match':{'exchange':'orders*','routing_key':'eu.*'}"
         "}",
         "orders.v2", "eu.de", true},
        {"{'rate_per_s':1,'match':{'exchange':'orders*','routing_key':'eu.*'}"
         "}",
         "billing", "eu.de", false},
        {"{'rate_per_s':1,'match':{'exchange':'orders*','routing_key':'eu.*'}"
         "}",
         "orders", "eu.de.x", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        limit_t l;
        rmqs_error err = {0};
        cr_assert_eq(parse("l1", cases[i].body, &l, NULL, &err), RMQS_OK);
        cr_expect_eq(limit_matches(&l, cases[i].exchange, cases[i].routing_key),
                     cases[i].match, "%s against (%s, %s)", cases[i].body,
                     cases[i].exchange, cases[i].routing_key);
        limit_clear(&l);
    }
}

/* ---- keys -------------------------------------------------------------------- */

Test(limit, keys_parse_and_format_back)
{
    static const char *const good[] = {"routing_key", "exchange",
                                       "header:tenant", "header:a:b c"};
    static const char *const bad[] = {
        "",  "tenant", "header:", "HEADER:x", "routing_key ", "header:a\tb",
        NULL};
    char buf[300];

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        flow_key k;
        rmqs_error err = {0};
        cr_assert_eq(flow_key_parse(good[i], &k, &err), RMQS_OK, "%s", good[i]);
        cr_expect_neq(k.kind, FLOW_KEY_NONE);
        flow_key_format(&k, buf, sizeof buf);
        cr_expect_str_eq(buf, good[i]);
        flow_key_clear(&k);
        cr_expect(ut_is_zero(&k, sizeof k));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        flow_key k;
        rmqs_error err = {0};
        cr_expect_eq(flow_key_parse(bad[i], &k, &err), RMQS_EINVAL, "%s",
                     bad[i] ? bad[i] : "NULL");
        cr_expect(err.message[0] != '\0');
        cr_expect(ut_is_zero(&k, sizeof k));
    }
    {
        flow_key none = {0};
        flow_key_format(&none, buf, sizeof buf);
        cr_expect_str_eq(buf, "");
        flow_key_format(NULL, buf, sizeof buf);
        cr_expect_str_eq(buf, "");
        flow_key_format(&none, buf, 0); /* nothing written, no crash */
    }
}

static size_t value_of(const char *key, const job_t *j, char *buf, size_t cap)
{
    flow_key k;
    rmqs_error err = {0};
    size_t n;

    cr_assert_eq(flow_key_parse(key, &k, &err), RMQS_OK, "%s", key);
    n = flow_key_value(&k, j, buf, cap);
    flow_key_clear(&k);
    return n;
}

Test(limit, a_jobs_key_value)
{
    job_t j;
    char buf[512], big[300];
    flow_key none = {0};

    ut_job_make(&j, 1, 1000);
    j.headers =
        json_pack("{s:s, s:i, s:f, s:b, s:b, s:n, s:{}, s:[], s:s#}", "tenant",
                  "acme", "int", 42, "real", 2.5, "yes", 1, "no", 0, "nul",
                  "obj", "arr", "zero", "a\0b", (size_t)3);
    cr_assert_not_null(j.headers);
    cr_expect_eq(value_of("exchange", &j, buf, sizeof buf), 2);
    cr_expect_str_eq(buf, "ex");
    cr_expect_eq(value_of("routing_key", &j, buf, sizeof buf), 2);
    cr_expect_str_eq(buf, "rk");
    cr_expect_eq(value_of("header:tenant", &j, buf, sizeof buf), 4);
    cr_expect_str_eq(buf, "acme");
    value_of("header:int", &j, buf, sizeof buf);
    cr_expect_str_eq(buf, "42");
    value_of("header:real", &j, buf, sizeof buf);
    cr_expect_str_eq(buf, "2.5");
    value_of("header:yes", &j, buf, sizeof buf);
    cr_expect_str_eq(buf, "true");
    value_of("header:no", &j, buf, sizeof buf);
    cr_expect_str_eq(buf, "false");
    for (size_t i = 0; i < 4; i++) {
        static const char *const empty[] = {"header:nul", "header:obj",
                                            "header:arr", "header:missing"};
        cr_expect_eq(value_of(empty[i], &j, buf, sizeof buf), 0, "%s",
                     empty[i]);
        cr_expect_str_eq(buf, "");
    }
    cr_expect_eq(value_of("header:zero", &j, buf, sizeof buf), 3,
                 "a NUL inside is kept");
    cr_expect_eq(memcmp(buf, "a\0b", 4), 0);
    cr_expect_eq(value_of("header:Tenant", &j, buf, sizeof buf), 0,
                 "header names are case-sensitive, as in AMQP tables");
    cr_expect_eq(flow_key_value(&none, &j, buf, sizeof buf), 0);
    cr_expect_str_eq(buf, "");
    cr_expect_eq(flow_key_value(NULL, &j, buf, sizeof buf), 0);

    /* cut at 255 bytes, and at cap - 1 */
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    json_object_set_new(j.headers, "big", json_string(big));
    cr_expect_eq(value_of("header:big", &j, buf, sizeof buf),
                 LIMIT_KEY_VALUE_MAX);
    cr_expect_eq(strlen(buf), LIMIT_KEY_VALUE_MAX);
    cr_expect_eq(value_of("header:tenant", &j, buf, 3), 2);
    cr_expect_str_eq(buf, "ac");
    cr_expect_eq(value_of("header:tenant", &j, buf, 1), 0);
    cr_expect_str_eq(buf, "");
    cr_expect_eq(value_of("header:tenant", &j, buf, 0), 0, "cap 0: nothing");

    /* no headers at all */
    json_decref(j.headers);
    j.headers = NULL;
    cr_expect_eq(value_of("header:tenant", &j, buf, sizeof buf), 0);
    cr_expect_str_eq(buf, "");
    job_clear(&j);
}
