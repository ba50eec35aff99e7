/*
 * test_reqparse.c - the request-parsing kit (service/job/reqparse.c) that
 * job.c, schedule.c, limit.c and http_filter.c share: field names cut at a
 * UTF-8 character boundary, the smallest unknown key whatever the hash
 * order, the "invalid JSON" answers, short strings and resource names; and, through schedule.c and http_filter.c,
 * that the parsers which once had their own copies now answer alike.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_filter.h"
#include "reqparse.h"
#include "schedule.h"
#include "testutil.h"
#include "utf8.h"

#define NOW 1798761600000LL /* 2027-01-01T00:00:00Z */

/* "é" (2 bytes) n times. */
static char *accents(size_t n)
{
    char *s = malloc(2 * n + 1);
    cr_assert_not_null(s);
    for (size_t i = 0; i < n; i++)
        memcpy(s + 2 * i, "\xc3\xa9", 2);
    s[2 * n] = '\0';
    return s;
}

Test(reqparse, key_field_fits_and_never_cuts_inside_a_character)
{
    char out[RP_FIELD_MAX + 1];
    char *key = accents(40); /* 80 bytes */

    for (size_t plen = 0; plen < 6; plen++) {
        char prefix[8] = "abcdef";
        prefix[plen] = '\0';
        rp_key_field(out, prefix, key);
        cr_expect(strlen(out) <= RP_FIELD_MAX);
        cr_expect(utf8_valid(out, strlen(out)), "prefix %zu: %s", plen, out);
        cr_expect(strlen(out) >= RP_FIELD_MAX - 1,
                  "cut at most one byte short");
        cr_expect(strncmp(out, prefix, plen) == 0);
    }
    cr_expect_str_eq(rp_key_field(out, "headers.", "x"), "headers.x");
    free(key);
}

static bool is_m(const char *key)
{
    return strcmp(key, "m") == 0;
}

Test(reqparse, unknown_key_is_the_smallest_one)
{
    static const char *const allowed[] = {"a", "b"};
    json_t *o =
        json_pack("{s:i, s:i, s:i, s:i}", "zz", 1, "a", 1, "m", 1, "q", 1);

    cr_assert_not_null(o);
    cr_expect_str_eq(rp_unknown_key(o, allowed, 2, NULL), "m");
    cr_expect_str_eq(rp_unknown_key(o, allowed, 2, is_m), "q");
    json_object_del(o, "m");
    json_object_del(o, "q");
    json_object_del(o, "zz");
    cr_expect_null(rp_unknown_key(o, allowed, 2, NULL));
    json_decref(o);
}

Test(reqparse, parse_object_answers)
{
    rmqs_error err = {0};
    json_t *root = NULL;

    cr_expect_eq(rp_parse_object("{\"a\":1}", 7, &root, &err), RMQS_OK);
    cr_expect(json_is_object(root));
    json_decref(root);
    cr_expect_eq(rp_parse_object("[1]", 3, &root, &err), RMQS_EINVAL);
    cr_expect_null(root);
    cr_expect(strstr(err.message, "must be a JSON object") != NULL, "%s",
              err.message);
    cr_expect_eq(rp_parse_object("{\"a\":1}\0", 8, &root, &err), RMQS_EINVAL);
    cr_expect(strstr(err.message, "NUL byte at offset 7") != NULL, "%s",
              err.message);
    cr_expect_eq(rp_parse_object("{\"a\":1,\"a\":2}", 13, &root, &err),
                 RMQS_EINVAL);
    cr_expect(strncmp(err.message, "invalid JSON: ", 14) == 0, "%s",
              err.message);
    cr_expect_eq(rp_parse_object(NULL, 0, &root, &err), RMQS_EINVAL);
    cr_expect_eq(rp_parse_object(NULL, 3, &root, &err), RMQS_EINVAL);
    cr_expect(strstr(err.message, "missing") != NULL, "%s", err.message);
}

/* schedule.c once cut "job.<field>" at a byte (field_of). */
Test(reqparse, schedule_fields_are_cut_at_a_character)
{
    char *key = accents(40), body[512];
    rmqs_error err;
    schedule_t s;

    for (size_t i = 0; i < 3; i++) {
        if (i == 0)
            snprintf(body, sizeof body, "{\"every_ms\":60000,\"%s\":1}", key);
        else if (i == 1)
            snprintf(body, sizeof body,
                     "{\"every_ms\":60000,\"dst\":{\"%s\":1},\"job\":{}}", key);
        else
            snprintf(body, sizeof body,
                     "{\"every_ms\":60000,\"job\":{\"exchange\":\"\","
                     "\"routing_key\":\"q\",\"body\":\"x\",\"%s\":1}}",
                     key);
        memset(&err, 0, sizeof err);
        cr_expect_eq(schedule_from_request("s1", body, strlen(body), &ut_limits,
                                           NOW, &s, NULL, &err),
                     RMQS_EINVAL, "%s", body);
        cr_expect(utf8_valid(err.field, strlen(err.field)), "case %zu: %s", i,
                  err.field);
        cr_expect(strlen(err.field) >= RP_FIELD_MAX - 1, "case %zu: %s", i,
                  err.field);
        cr_expect(strncmp(err.field,
                          i == 2   ? "job."
                          : i == 1 ? "dst."
                                   : "",
                          i == 0 ? 0 : 4) == 0,
                  "case %zu: %s", i, err.field);
    }
    free(key);
}

/* http_filter.c once cut "filter.<key>" at a byte, and named the first
 * unknown key in hash order. */
Test(reqparse, filter_names_the_smallest_unknown_key_cut_at_a_character)
{
    char *key = accents(40);
    json_t *f =
        json_pack("{s:s, s:s, s:s}", key, "x", "zzz", "x", "status", "sent");
    rmqs_error err = {0};
    store_filter sf;

    cr_assert_not_null(f);
    cr_expect_eq(http_filter_from_json(f, &sf, &err), RMQS_EINVAL);
    cr_expect_str_eq(err.field, "filter.zzz"); /* "z" < "\xc3" */
    json_object_del(f, "zzz");
    cr_expect_eq(http_filter_from_json(f, &sf, &err), RMQS_EINVAL);
    cr_expect(utf8_valid(err.field, strlen(err.field)), "%s", err.field);
    cr_expect(strncmp(err.field, "filter.\xc3\xa9", 9) == 0, "%s", err.field);
    json_decref(f);
    free(key);
}

Test(reqparse, known_keys_and_one_of)
{
    static const char *const allowed[] = {"a", "b"};
    json_t *o = json_pack("{s:i, s:i}", "a", 1, "b", 2), *va, *vb;
    rmqs_error err = {0};

    cr_assert_not_null(o);
    cr_expect_eq(rp_known_keys(o, "x.", allowed, 2, &err), RMQS_OK);
    cr_expect_eq(rp_one_of(o, "a", "b", &va, &vb, &err), RMQS_EINVAL);
    cr_expect_str_eq(err.field, "b");
    cr_expect_str_eq(err.message, "only one of a or b may be given");
    json_object_del(o, "a");
    cr_expect_eq(rp_one_of(o, "a", "b", &va, &vb, &err), RMQS_OK);
    cr_expect_null(va);
    cr_expect_eq(json_integer_value(vb), 2);
    json_object_del(o, "b");
    cr_expect_eq(rp_one_of(o, "a", "b", &va, &vb, &err), RMQS_EINVAL);
    cr_expect_str_eq(err.field, "a");
    cr_expect_str_eq(err.message, "one of a or b is required");
    json_object_set_new(o, "c", json_true());
    cr_expect_eq(rp_known_keys(o, "x.", allowed, 2, &err), RMQS_EINVAL);
    cr_expect_str_eq(err.field, "x.c");
    cr_expect_str_eq(err.message, "unknown field");
    json_decref(o);
}

/* job.c (exchange, routing_key, string properties) and limit.c (match,
 * queue) read short strings with the one helper. */
Test(reqparse, short_strings)
{
    char s256[257];
    json_t *o;
    const char *out = "x";
    rmqs_error err = {0};

    memset(s256, 'a', 256);
    s256[256] = '\0';
    o = json_pack("{s:s, s:s, s:i, s:s, s:s#}", "ok", "orders", "tab", "a\tb",
                  "num", 5, "long", s256, "max", s256, (size_t)255);
    cr_assert_not_null(o);
    cr_expect_eq(
        rp_short_string(json_object_get(o, "ok"), "ok", true, true, &out, &err),
        RMQS_OK);
    cr_expect_str_eq(out, "orders");
    cr_expect_eq(rp_short_string(json_object_get(o, "max"), "max", true, true,
                                 &out, &err),
                 RMQS_OK);
    cr_expect_eq(rp_short_string(NULL, "gone", false, true, &out, &err),
                 RMQS_OK);
    cr_expect_null(out, "absent and optional: NULL");
    cr_expect_eq(rp_short_string(NULL, "gone", true, true, &out, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.message, "gone: required");
    cr_expect_eq(rp_short_string(json_object_get(o, "num"), "num", true, false,
                                 &out, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.message, "num: must be a string");
    cr_expect_eq(rp_short_string(json_object_get(o, "long"), "long", true,
                                 false, &out, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.message, "long: longer than 255 bytes");
    cr_expect_eq(rp_short_string(json_object_get(o, "tab"), "tab", true, false,
                                 &out, &err),
                 RMQS_OK, "control characters allowed");
    cr_expect_eq(rp_short_string(json_object_get(o, "tab"), "tab", true, true,
                                 &out, &err),
                 RMQS_EINVAL);
    cr_expect_str_eq(err.field, "tab");
    cr_expect_str_eq(err.message, "tab: must not contain control characters");
    cr_expect(rp_has_control("a\x7f", 2));
    cr_expect_not(rp_has_control("caf\xc3\xa9", 5));
    json_decref(o);
}

/* A schedule's name and a limit's follow the one rule. */
Test(reqparse, resource_names)
{
    cr_expect(rp_name_valid("a-b_c.d:e9", 200));
    cr_expect(rp_name_valid("abc", 3));
    cr_expect_not(rp_name_valid("abcd", 3));
    cr_expect_not(rp_name_valid("", 200));
    cr_expect_not(rp_name_valid(NULL, 200));
    cr_expect_not(rp_name_valid("a b", 200));
    cr_expect_not(rp_name_valid("a/b", 200));
    cr_expect_not(rp_name_valid("a*", 200));
}
