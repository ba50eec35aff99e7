/*
 * test_schedule.c - the recurring-schedule model (service/schedules/schedule.c):
 * PUT body validation (each field's 400 with its field name; cron errors
 * with their position), the canonical spec, every_ms anchoring, start_at
 * and end_at, catch-up arithmetic, run ids, the run's job, PATCH merges.
 * The cron grammar and DST rules themselves are test_cron.c's.
 *
 * Bodies are written with ' in place of " (ut_json_quotes). "now" is a
 * fixed instant passed in, as the module takes it from its caller.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "testutil.h"
#include "timeutil.h"

#define NOW 1798761600000LL /* 2027-01-01T00:00:00Z */
#define JOB "'job':{'exchange':'','routing_key':'q','body':'hi'}"

static rmqs_rc parse(const char *name, const char *body, schedule_t *s,
                     char **spec, rmqs_error *err)
{
    char *t = ut_json_quotes(body);
    rmqs_rc rc = schedule_from_request(name, t, strlen(t), &ut_limits, NOW, s,
                                       spec, err);
    free(t);
    return rc;
}

static void parse_ok(const char *body, schedule_t *s)
{
    rmqs_error err = {0};
    rmqs_rc rc = parse("s1", body, s, NULL, &err);
    cr_assert_eq(rc, RMQS_OK, "%s: %s (%s)", body, err.message, err.field);
}

static int64_t ts(const char *text)
{
    int64_t ms = 0;
    cr_assert_eq(tu_parse_rfc3339(text, strlen(text), &ms), RMQS_OK, "%s",
                 text);
    return ms;
}

Test(schedule, minimal_cron_body_gets_the_defaults)
{
    schedule_t s;

    parse_ok("{'cron':'0 8 * * *'," JOB "}", &s);
    cr_expect_str_eq(s.name, "s1");
    cr_expect_str_eq(s.cron_text, "0 8 * * *");
    cr_expect_eq(s.every_ms, 0);
    cr_expect_str_eq(tz_name(s.tz), "UTC");
    cr_expect_eq(s.start_at, -1);
    cr_expect_eq(s.end_at, -1);
    cr_expect_not(s.paused);
    cr_expect_eq(s.misfire_grace_ms, 60000);
    /* a fixed hour: Debian cron's rules for fixed times */
    cr_expect_eq(s.dst.skipped, CRON_SKIPPED_NEXT);
    cr_expect_eq(s.dst.repeated, CRON_REPEATED_FIRST);
    cr_expect_str_eq(s.tmpl.routing_key, "q");
    cr_expect_eq(s.tmpl.max_attempts, ut_limits.default_max_attempts);
    schedule_clear(&s);
}

Test(schedule, dst_defaults_follow_the_expression_and_parts_override)
{
    schedule_t s;

    parse_ok("{'cron':'0 * * * *'," JOB "}", &s);
    cr_expect_eq(s.dst.skipped, CRON_SKIPPED_SKIP);   /* wildcard hour: */
    cr_expect_eq(s.dst.repeated, CRON_REPEATED_BOTH); /* real elapsed time */
    schedule_clear(&s);
    parse_ok("{'cron':'0 * * * *','dst':{'repeated':'first'}," JOB "}", &s);
    cr_expect_eq(s.dst.skipped, CRON_SKIPPED_SKIP); /* the other part kept */
    cr_expect_eq(s.dst.repeated, CRON_REPEATED_FIRST);
    schedule_clear(&s);
    parse_ok("{'cron':'30 2 * * *','timezone':'Europe/Berlin',"
             "'dst':{'skipped':'skip','repeated':'both'}," JOB "}",
             &s);
    cr_expect_eq(s.dst.skipped, CRON_SKIPPED_SKIP);
    cr_expect_eq(s.dst.repeated, CRON_REPEATED_BOTH);
    cr_expect_str_eq(tz_name(s.tz), "Europe/Berlin");
    schedule_clear(&s);
}

/* ---- each field's 400 ---------------------------------------------------- */

typedef struct bad_case {
    const char *name;
    const char *body;
    const char *field;
    const char *says; /* a part of the message */
} bad_case;

static const bad_case bad_cases[] = {
    {"s1", "{" JOB "}", "cron", "one of cron or every_ms"},
    {"s1", "{'cron':'* * * * *','every_ms':1000," JOB "}", "every_ms",
     "only one"},
    {"s1", "{'cron':5," JOB "}", "cron", "string"},
    {"s1", "{'cron':'0 0 32 * *'," JOB "}", "cron", "position 5"},
    {"s1", "{'cron':'0 0 30 2 *'," JOB "}", "cron", "never fires"},
    {"s1", "{'every_ms':999," JOB "}", "every_ms", "1000"},
    {"s1", "{'every_ms':31622400001," JOB "}", "every_ms", "366 days"},
    {"s1", "{'every_ms':'1000'," JOB "}", "every_ms", "integer"},
    {"s1", "{'cron':'* * * * *','timezone':'Mars/Olympus'," JOB "}", "timezone",
     ""},
    {"s1", "{'cron':'* * * * *','timezone':7," JOB "}", "timezone", "string"},
    {"s1", "{'cron':'* * * * *','start_at':'tomorrow'," JOB "}", "start_at",
     "RFC 3339"},
    {"s1", "{'cron':'* * * * *','end_at':12," JOB "}", "end_at", "RFC 3339"},
    {"s1",
     "{'cron':'* * * * *','start_at':'2027-06-01T00:00:00Z',"
     "'end_at':'2027-06-01T00:00:00Z'," JOB "}",
     "end_at", "after start_at"},
    {"s1", "{'cron':'* * * * *','misfire_grace_ms':-1," JOB "}",
     "misfire_grace_ms", "0 to"},
    {"s1", "{'cron':'* * * * *','misfire_grace_ms':604800001," JOB "}",
     "misfire_grace_ms", "7 days"},
    {"s1", "{'cron':'* * * * *','paused':'yes'," JOB "}", "paused",
     "true or false"},
    {"s1", "{'cron':'* * * * *','dst':'next'," JOB "}", "dst", "object"},
    {"s1", "{'cron':'* * * * *','dst':{'skipped':'later'}," JOB "}",
     "dst.skipped", "next"},
    {"s1", "{'cron':'* * * * *','dst':{'repeated':'twice'}," JOB "}",
     "dst.repeated", "both"},
    {"s1", "{'cron':'* * * * *','dst':{'gap':'next'}," JOB "}", "dst.gap",
     "unknown"},
    {"s1", "{'cron':'* * * * *'}", "job", "required"},
    {"s1", "{'cron':'* * * * *','job':[]}", "job", "object"},
    {"s1",
     "{'cron':'* * * * *','job':{'exchange':'','routing_key':'q','body':'x',"
     "'delay_ms':5}}",
     "job.delay_ms", "not allowed"},
    {"s1",
     "{'cron':'* * * * *','job':{'exchange':'','routing_key':'q','body':'x',"
     "'deliver_at':'2027-06-01T00:00:00Z'}}",
     "job.deliver_at", "not allowed"},
    {"s1", "{'cron':'* * * * *','job':{'exchange':'','body':'x'}}",
     "job.routing_key", "routing_key"},
    {"s1",
     "{'cron':'* * * * *','job':{'exchange':'','routing_key':'q','body':'x',"
     "'max_attempts':0}}",
     "job.max_attempts", "max_attempts"},
    {"s1",
     "{'cron':'* * * * *','job':{'exchange':'','routing_key':'q','body':'x',"
     "'colour':1}}",
     "job.colour", "unknown"},
    {"s1", "{'cron':'* * * * *','colour':'red'," JOB "}", "colour", "unknown"},
    {"", "{'cron':'* * * * *'," JOB "}", "name", "1 to 200"},
    {"a/b", "{'cron':'* * * * *'," JOB "}", "name", "1 to 200"},
    {"s1", "[1]", "", "JSON object"},
    {"s1", "{'cron':", "", "invalid JSON"},
};

Test(schedule, each_bad_field_is_a_400_naming_it)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        schedule_t s;
        rmqs_error err = {0};
        char *spec = (char *)"untouched";
        rmqs_rc rc = parse(c->name, c->body, &s, &spec, &err);

        cr_expect_eq(rc, RMQS_EINVAL, "%s", c->body);
        cr_expect_str_eq(err.field, c->field, "%s: field %s (%s)", c->body,
                         err.field, err.message);
        cr_expect(strstr(err.message, c->says) != NULL, "%s: message %s",
                  c->body, err.message);
        cr_expect(ut_is_zero(&s, sizeof s), "%s: *out not zeroed", c->body);
        cr_expect_null(spec, "%s", c->body);
        if (rc == RMQS_OK) {
            schedule_clear(&s);
            free(spec);
        }
    }
}

Test(schedule, name_rules)
{
    char n200[201], n201[202];

    memset(n200, 'a', 200);
    n200[200] = '\0';
    memset(n201, 'a', 201);
    n201[201] = '\0';
    cr_expect(schedule_name_valid("daily-digest.v2:eu_west"));
    cr_expect(schedule_name_valid(n200));
    cr_expect_not(schedule_name_valid(n201));
    cr_expect_not(schedule_name_valid(""));
    cr_expect_not(schedule_name_valid("with space"));
    cr_expect_not(schedule_name_valid("caf\xc3\xa9"));
}

/* ---- canonical spec --------------------------------------------------------- */

Test(schedule, the_same_body_gives_the_same_spec)
{
    schedule_t a, b, c;
    rmqs_error err = {0};
    char *sa, *sb, *sc;

    cr_assert_eq(
        parse("s1", "{'cron':'*/5 * * * *','timezone':'Europe/Berlin'," JOB "}",
              &a, &sa, &err),
        RMQS_OK);
    /* other key order, other spacing: one schedule */
    cr_assert_eq(
        parse("s1",
              "{ 'job' : {'body':'hi','routing_key':'q','exchange':''},"
              "  'timezone':'Europe/Berlin', 'cron':'*/5 * * * *' }",
              &b, &sb, &err),
        RMQS_OK);
    cr_assert_eq(
        parse("s1", "{'cron':'*/5 * * * *','timezone':'Europe/Paris'," JOB "}",
              &c, &sc, &err),
        RMQS_OK);
    cr_expect_str_eq(sa, sb);
    cr_expect_str_neq(sa, sc);
    cr_expect_eq(sa[0], '{');
    cr_expect_null(strstr(sa, ": "), "compact: %s", sa);
    free(sa);
    free(sb);
    free(sc);
    schedule_clear(&a);
    schedule_clear(&b);
    schedule_clear(&c);
}

/* ---- fire times -------------------------------------------------------------- */

Test(schedule, every_ms_without_start_at_is_anchored_at_the_put)
{
    schedule_t s;
    int64_t t;

    parse_ok("{'every_ms':30000," JOB "}", &s);
    cr_expect_eq(s.anchor, NOW);
    cr_expect_eq(s.dst.skipped, CRON_SKIPPED_SKIP,
                 "shown as real elapsed time");
    cr_expect_eq(s.dst.repeated, CRON_REPEATED_BOTH);
    cr_assert(schedule_next(&s, NOW, &t));
    cr_expect_eq(t, NOW + 30000);
    cr_assert(schedule_next(&s, NOW + 30000, &t));
    cr_expect_eq(t, NOW + 60000);
    cr_assert(schedule_next(&s, NOW + 45000, &t));
    cr_expect_eq(t, NOW + 60000, "on the series, not 30 s after any instant");
    /* the caller keeps a series' phase by moving the anchor to a fire time */
    s.anchor = NOW + 7;
    cr_assert(schedule_next(&s, NOW + 10, &t));
    cr_expect_eq(t, NOW + 30007);
    schedule_clear(&s);
}

Test(schedule, every_ms_with_start_at_fires_at_start_at_then_every_interval)
{
    schedule_t s;
    int64_t start = ts("2027-03-01T10:00:00.250Z"), t;

    parse_ok("{'every_ms':1000,'start_at':'2027-03-01T10:00:00.250Z'," JOB "}",
             &s);
    cr_expect_eq(s.anchor, start);
    cr_assert(schedule_next(&s, NOW, &t));
    cr_expect_eq(t, start, "nothing before start_at, start_at itself fires");
    cr_assert(schedule_next(&s, start, &t));
    cr_expect_eq(t, start + 1000);
    cr_assert(schedule_next(&s, start + 1500, &t));
    cr_expect_eq(t, start + 2000);
    schedule_clear(&s);
}

Test(schedule, cron_honours_start_at_and_end_at)
{
    schedule_t s;
    int64_t start = ts("2027-03-01T10:00:00.500Z"),
            end = ts("2027-03-01T10:00:03Z");
    int64_t t;

    parse_ok("{'cron':'* * * * * *','start_at':'2027-03-01T10:00:00.500Z',"
             "'end_at':'2027-03-01T10:00:03Z'," JOB "}",
             &s);
    cr_assert(schedule_next(&s, NOW, &t));
    cr_expect_eq(t, start + 500, "the first whole second at or after start_at");
    cr_assert(schedule_next(&s, end - 1000, &t));
    cr_expect_eq(t, end, "end_at itself still fires");
    cr_expect_not(schedule_next(&s, end, &t), "none after end_at: ended");
    schedule_clear(&s);
}

Test(schedule, every_ms_ends_at_end_at)
{
    schedule_t s;
    int64_t start = ts("2027-03-01T10:00:00Z"), t;

    parse_ok("{'every_ms':60000,'start_at':'2027-03-01T10:00:00Z',"
             "'end_at':'2027-03-01T10:02:30Z'," JOB "}",
             &s);
    cr_assert(schedule_next(&s, start + 60000, &t));
    cr_expect_eq(t, start + 120000);
    cr_expect_not(schedule_next(&s, start + 120000, &t));
    schedule_clear(&s);
}

Test(schedule, cron_in_a_time_zone)
{
    schedule_t s;
    int64_t t;

    /* 08:00 in Berlin is 07:00Z in winter */
    parse_ok("{'cron':'0 8 * * *','timezone':'Europe/Berlin'," JOB "}", &s);
    cr_assert(schedule_next(&s, NOW, &t));
    cr_expect_eq(t, ts("2027-01-01T07:00:00Z"));
    schedule_clear(&s);
}

Test(schedule, latest_fire_time_for_a_catch_up)
{
    schedule_t s;
    int64_t from = ts("2027-03-01T10:00:00Z"), latest = 0, skipped = 0;

    parse_ok("{'every_ms':1000,'start_at':'2027-03-01T10:00:00Z'," JOB "}", &s);
    cr_assert(schedule_latest(&s, from, from + 10500, &latest, &skipped));
    cr_expect_eq(latest, from + 10000);
    cr_expect_eq(skipped, 10, "fire times before the latest: %lld",
                 (long long)skipped);
    cr_expect_not(schedule_latest(&s, from, from - 1, &latest, &skipped));
    schedule_clear(&s);

    parse_ok("{'cron':'*/10 * * * * *'," JOB "}", &s);
    cr_assert(schedule_latest(&s, from, from + 65000, &latest, &skipped));
    cr_expect_eq(latest, from + 60000);
    cr_expect_eq(skipped, 6);
    schedule_clear(&s);

    /* more than the enumeration cap (100,000): estimated, latest exact */
    parse_ok("{'cron':'* * * * * *'," JOB "}", &s);
    cr_assert(schedule_latest(&s, from, from + 200000500LL, &latest, &skipped));
    cr_expect_eq(latest, from + 200000000LL);
    cr_expect(skipped > 199000 && skipped < 201000, "estimate %lld",
              (long long)skipped);
    schedule_clear(&s);
}

/* ---- runs -------------------------------------------------------------------- */

Test(schedule, run_ids_are_deterministic_time_ordered_uuids)
{
    char a[JOB_ID_LEN + 1], b[JOB_ID_LEN + 1], c[JOB_ID_LEN + 1],
        d[JOB_ID_LEN + 1], e[JOB_ID_LEN + 1];
    unsigned char bytes[JOB_ID_BYTES];
    int64_t fire = ts("2027-03-01T10:00:00Z");
    uint64_t first48 = 0;

    schedule_run_id("digest", 1, fire, a);
    schedule_run_id("digest", 1, fire, b);
    schedule_run_id("digest", 2, fire, c);
    schedule_run_id("digest", 1, fire + 1000, d);
    schedule_run_id("digest2", 1, fire, e);
    cr_expect_str_eq(a, b, "same (name, generation, fire time): same id");
    cr_expect_str_neq(a, c);
    cr_expect_str_neq(a, d);
    cr_expect_str_neq(a, e);
    cr_expect(strcmp(a, d) < 0, "time-ordered: %s < %s", a, d);
    cr_assert_eq(job_id_parse(a, bytes), RMQS_OK, "canonical UUID text: %s", a);
    for (int i = 0; i < 6; i++)
        first48 = first48 << 8 | bytes[i];
    cr_expect_eq((int64_t)first48, fire);
    cr_expect_eq(bytes[6] >> 4, 8, "version 8");
    cr_expect_eq(bytes[8] >> 6, 2, "variant 10");
}

Test(schedule, the_run_job_is_the_template_at_its_fire_time)
{
    schedule_t s;
    job_t j;
    char id[JOB_ID_LEN + 1];
    int64_t fire = NOW + 60000;

    parse_ok(
        "{'cron':'* * * * *','misfire_grace_ms':5000,'job':{'exchange':'ex',"
        "'routing_key':'rk','body':{'a':1},'headers':{'h':'v'},"
        "'properties':{'message_id':'m'},'max_attempts':3}}",
        &s);
    cr_assert_eq(schedule_make_run(&s, 4, fire, fire, NOW, &j), RMQS_OK);
    schedule_run_id("s1", 4, fire, id);
    cr_expect_str_eq(j.id, id);
    cr_expect_eq(j.status, JOB_PENDING);
    cr_expect_eq(j.source, JOB_SOURCE_SCHEDULE);
    cr_expect_str_eq(j.schedule, "s1");
    cr_expect_eq(j.fire_at, fire);
    cr_expect_eq(j.deliver_at, fire);
    cr_expect_eq(j.due_at, fire);
    cr_expect_eq(j.expires_at, fire + 5000);
    cr_expect_eq(j.created_at, NOW);
    cr_expect_eq(j.delay_ms, 60000);
    cr_expect_eq(j.sent_at, -1);
    cr_expect_eq(j.attempts, 0);
    cr_expect_eq(j.max_attempts, 3);
    cr_expect_str_eq(j.exchange, "ex");
    cr_expect_str_eq(j.routing_key, "rk");
    cr_expect_eq(j.body_kind, JOB_BODY_JSON);
    cr_expect_eq(j.body_len, strlen("{\"a\":1}"));
    cr_expect_eq(memcmp(j.body, "{\"a\":1}", j.body_len), 0);
    cr_expect_str_eq(json_string_value(json_object_get(j.headers, "h")), "v");
    cr_expect_str_eq(
        json_string_value(json_object_get(j.properties, "message_id")), "m");
    cr_expect_neq(j.headers, s.tmpl.headers, "the run owns its own copy");
    job_clear(&j);

    /* a misfire fired late: due now, still keyed by its fire time */
    cr_assert_eq(schedule_make_run(&s, 4, NOW - 3000, NOW, NOW, &j), RMQS_OK);
    cr_expect_eq(j.fire_at, NOW - 3000);
    cr_expect_eq(j.due_at, NOW);
    cr_expect_eq(j.delay_ms, 0);
    job_clear(&j);
    schedule_clear(&s);
}

/* ---- PATCH ------------------------------------------------------------------- */

static rmqs_rc patch(const char *spec_q, const char *patch_q, schedule_t *s,
                     char **merged, rmqs_error *err)
{
    char *spec = ut_json_quotes(spec_q), *p = ut_json_quotes(patch_q);
    rmqs_rc rc = schedule_patch("s1", spec, p, strlen(p), &ut_limits, NOW, s,
                                merged, err);
    free(spec);
    free(p);
    return rc;
}

Test(schedule, patch_merges_top_level_fields_into_the_spec)
{
    schedule_t s, direct;
    rmqs_error err = {0};
    char *merged = NULL, *expect = NULL;

    cr_assert_eq(
        patch("{'cron':'0 8 * * *','end_at':'2030-01-01T00:00:00Z'," JOB "}",
              "{'paused':true,'end_at':null}", &s, &merged, &err),
        RMQS_OK, "%s", err.message);
    cr_expect(s.paused);
    cr_expect_eq(s.end_at, -1, "null removes the field");
    cr_expect_str_eq(s.cron_text, "0 8 * * *");
    cr_assert_eq(parse("s1", "{'cron':'0 8 * * *','paused':true," JOB "}",
                       &direct, &expect, &err),
                 RMQS_OK);
    cr_expect_str_eq(merged, expect,
                     "the merge is the spec of the merged body");
    free(merged);
    free(expect);
    schedule_clear(&s);
    schedule_clear(&direct);

    /* job is replaced whole, not merged */
    cr_assert_eq(
        patch("{'cron':'0 8 * * *'," JOB "}",
              "{'job':{'exchange':'x','routing_key':'r','body_base64':'aGk='}}",
              &s, &merged, &err),
        RMQS_OK, "%s", err.message);
    cr_expect_str_eq(s.tmpl.exchange, "x");
    cr_expect_eq(s.tmpl.body_kind, JOB_BODY_BINARY);
    cr_expect_null(strstr(merged, "\"routing_key\":\"q\""), "%s", merged);
    free(merged);
    schedule_clear(&s);

    /* switching cron to every_ms needs the old one removed */
    cr_expect_eq(patch("{'cron':'0 8 * * *'," JOB "}", "{'every_ms':60000}", &s,
                       &merged, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "every_ms");
    cr_expect_null(merged);
    cr_assert_eq(patch("{'cron':'0 8 * * *'," JOB "}",
                       "{'every_ms':60000,'cron':null}", &s, &merged, &err),
                 RMQS_OK, "%s", err.message);
    cr_expect_eq(s.every_ms, 60000);
    free(merged);
    schedule_clear(&s);

    /* the merged body is validated as a PUT */
    cr_expect_eq(patch("{'cron':'0 8 * * *'," JOB "}",
                       "{'timezone':'Nowhere/Else'}", &s, &merged, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "timezone");
    cr_expect_eq(patch("{'cron':'0 8 * * *'," JOB "}", "{'cron':'0 0 30 2 *'}",
                       &s, &merged, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "cron");
    cr_expect_eq(patch("{'cron':'0 8 * * *'," JOB "}", "[]", &s, &merged, &err),
                 RMQS_EINVAL);
}

Test(schedule, spec_json_fills_in_the_defaults)
{
    schedule_t s;
    json_t *o, *runs;

    parse_ok("{'cron':'0 8 * * *','timezone':'Europe/Berlin'," JOB "}", &s);
    o = schedule_spec_json(&s);
    cr_assert_not_null(o);
    cr_expect_str_eq(json_string_value(json_object_get(o, "timezone")),
                     "Europe/Berlin");
    cr_expect_eq(json_integer_value(json_object_get(o, "misfire_grace_ms")),
                 60000);
    cr_expect(json_is_null(json_object_get(o, "start_at")));
    cr_expect(json_is_false(json_object_get(o, "paused")));
    cr_expect_str_eq(json_string_value(
                         json_object_get(json_object_get(o, "dst"), "skipped")),
                     "next");
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_object_get(o, "dst"), "repeated")),
                     "first");
    cr_expect_null(json_object_get(o, "every_ms"));
    json_decref(o);
    runs = schedule_next_runs_json(&s, NOW, 3);
    cr_assert_eq(json_array_size(runs), 3);
    cr_expect_str_eq(
        json_string_value(json_object_get(json_array_get(runs, 0), "utc")),
        "2027-01-01T07:00:00.000Z");
    cr_expect_str_eq(
        json_string_value(json_object_get(json_array_get(runs, 0), "local")),
        "2027-01-01T08:00:00.000+01:00");
    json_decref(runs);
    schedule_clear(&s);
}

Test(schedule, the_preview_stops_before_year_10000_in_utc_and_in_its_zone)
{
    schedule_t s;
    json_t *runs;

    /* every 365 days from 9998-12-31T12:00Z in a zone 14 hours ahead of
     * UTC: the second run is 9999-12-31T12:00Z, but 10000-01-01 there */
    parse_ok("{'every_ms': 31536000000, 'start_at': '9998-12-31T12:00:00Z', "
             "'timezone': 'Pacific/Kiritimati', " JOB "}",
             &s);
    runs = schedule_next_runs_json(&s, NOW, 10);
    cr_assert_not_null(runs);
    cr_expect_eq(json_array_size(runs), 1, "%zu runs", json_array_size(runs));
    for (size_t i = 0; i < json_array_size(runs); i++) {
        json_t *r = json_array_get(runs, i);
        const char *utc = json_string_value(json_object_get(r, "utc"));
        const char *local = json_string_value(json_object_get(r, "local"));
        cr_expect_eq(strlen(utc), 24, "%s", utc);
        cr_expect_eq(strncmp(local, "999", 3), 0, "%s", local);
        cr_expect_eq(local[4], '-', "%s", local);
    }
    json_decref(runs);
    schedule_clear(&s);
}
