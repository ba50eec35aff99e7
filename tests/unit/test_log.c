/*
 * test_log.c - service/util/log.c: what reaches stderr, above all the JSON
 * format (--log-format json), where every line must be one valid JSON
 * object with the documented keys, whatever the fields hold.
 *
 * The real write(2) to file descriptor 2 is captured (ut_capture) and each
 * line parsed with jansson. Level and format are process-wide settings;
 * Criterion runs every test in a process of its own, so they start at the
 * defaults (info, text) in each test.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "testutil.h"
#include "timeutil.h"

#define LINE_MAX_BYTES 2048 /* log.c's line buffer, newline included */

/* The lines of text (each must end in '\n'), parsed as JSON objects; the
 * caller json_decref's each and frees the array. */
static json_t **json_lines(const char *text, size_t *n_out)
{
    size_t n = 0, cap = 8;
    json_t **v = malloc(cap * sizeof(*v));

    cr_assert_not_null(v);
    while (*text != '\0') {
        const char *end = strchr(text, '\n');
        json_error_t e;
        cr_assert_not_null(end, "last line has no newline: %s", text);
        cr_assert_leq((size_t)(end - text) + 1, LINE_MAX_BYTES,
                      "line longer than the line buffer");
        for (const char *p = text; p < end; p++)
            cr_assert_geq((unsigned char)*p, 0x20,
                          "raw control byte 0x%02x in %.*s", (unsigned char)*p,
                          (int)(end - text), text);
        if (n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof(*v));
            cr_assert_not_null(v);
        }
        v[n] = json_loadb(text, (size_t)(end - text), 0, &e);
        cr_assert_not_null(v[n], "not JSON (%s): %.*s", e.text,
                           (int)(end - text), text);
        cr_assert(json_is_object(v[n]), "not an object: %.*s",
                  (int)(end - text), text);
        n++;
        text = end + 1;
    }
    *n_out = n;
    return v;
}

static size_t g_n; /* lines finish() parsed */

static void free_lines(json_t **v)
{
    for (size_t i = 0; i < g_n; i++)
        json_decref(v[i]);
    free(v);
}

static const char *str(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    cr_assert(json_is_string(v), "%s is not a string", key);
    return json_string_value(v);
}

/* The documented keys: time (RFC 3339, now), level, module, message. */
static void expect_envelope(json_t *o, const char *level, const char *module,
                            const char *message)
{
    const char *t = str(o, "time");
    int64_t ms = -1;

    cr_expect_eq(tu_parse_rfc3339(t, strlen(t), &ms), RMQS_OK, "time %s", t);
    cr_expect_lt(llabs(tu_now_ms() - ms), 60000, "time %s is not now", t);
    cr_expect_str_eq(str(o, "level"), level);
    cr_expect_str_eq(str(o, "module"), module);
    cr_expect_str_eq(str(o, "message"), message);
}

/* Log in JSON: start capturing; end with finish(). */
static ut_capture g_cap;

static void begin_json(void)
{
    log_set_format(LOG_FORMAT_JSON);
    ut_capture_start(&g_cap);
}

/* Stop capturing; the lines, which must be want (free_lines). */
static json_t **finish(size_t want)
{
    char *text = ut_capture_end(&g_cap);
    json_t **v = json_lines(text, &g_n);

    cr_assert_eq(g_n, want, "%zu lines instead of %zu:\n%s", g_n, want, text);
    free(text);
    return v;
}

/* ------------------------------------------------------------------------ */
/* The JSON object                                                          */

Test(log, json_line_has_the_documented_keys_and_typed_fields)
{
    json_t **v;

    begin_json();
    log_info("dispatcher", "published", "n=%d url=%s reason=\"%s\"", 12,
             "amqp://127.0.0.1:5672/", "all good");
    v = finish(1);

    expect_envelope(v[0], "info", "dispatcher", "published");
    cr_expect(json_is_integer(json_object_get(v[0], "n")));
    cr_expect_eq(json_integer_value(json_object_get(v[0], "n")), 12);
    cr_expect_str_eq(str(v[0], "url"), "amqp://127.0.0.1:5672/");
    cr_expect_str_eq(str(v[0], "reason"), "all good");
    cr_expect_eq(json_object_size(v[0]), 7);
    free_lines(v);
}

Test(log, json_fields_of_every_shape)
{
    json_t **v;

    begin_json();
    log_warn("m", "no fields", NULL);
    log_warn("m", "empty fields", "%s", "");
    log_warn(
        "m", "numbers",
        "a=0 b=-5 c=0123 d=12ab e=9223372036854775807 f=9223372036854775808");
    log_warn("m", "empty values", "a= b=\"\"");
    log_warn("m", "unterminated quote", "a=\"no end");
    log_warn("m", "text", "a=1 free text here");
    v = finish(6);

    for (size_t i = 0; i < g_n; i++)
        cr_expect_str_eq(str(v[i], "level"), "warn");
    cr_expect_eq(json_object_size(v[0]), 4);
    cr_expect_eq(json_object_size(v[1]), 4);
    cr_expect_eq(json_integer_value(json_object_get(v[2], "a")), 0);
    cr_expect_eq(json_integer_value(json_object_get(v[2], "b")), -5);
    cr_expect_str_eq(str(v[2], "c"), "0123", "a leading zero is not a number");
    cr_expect_str_eq(str(v[2], "d"), "12ab");
    cr_expect_eq(json_integer_value(json_object_get(v[2], "e")), INT64_MAX);
    cr_expect_str_eq(str(v[2], "f"), "9223372036854775808",
                     "a number past 64 bits must not change its value");
    cr_expect_str_eq(str(v[3], "a"), "");
    cr_expect_str_eq(str(v[3], "b"), "");
    cr_expect_str_eq(str(v[4], "a"), "no end");
    cr_expect_eq(json_integer_value(json_object_get(v[5], "a")), 1);
    cr_expect_str_eq(str(v[5], "extra"), "free text here");
    free_lines(v);
}

Test(log, quotes_backslashes_and_control_characters_are_escaped)
{
    json_t **v;

    begin_json();
    log_error("m\"od", "say \"hi\" \\ now", "path=\"%s\" ctl=\"%s\"", "a\\b",
              "x\ny\tz\x01\x1f");
    log_error("m", "newline\nin message", "k=%s", "v\r\n");
    /* a quote inside a quoted value is escaped: the value is whole */
    log_error("m", "broker said", "reason=\"%s\" after=1", "a \"quoted\" word");
    v = finish(3);

    expect_envelope(v[0], "error", "m\"od", "say \"hi\" \\ now");
    cr_expect_str_eq(str(v[0], "path"), "a\\b");
    cr_expect_str_eq(str(v[0], "ctl"), "x\ny\tz\x01\x1f");
    expect_envelope(v[1], "error", "m", "newline\nin message");
    cr_expect_str_eq(str(v[1], "k"), "v\r\n");
    expect_envelope(v[2], "error", "m", "broker said");
    cr_expect_str_eq(str(v[2], "reason"), "a \"quoted\" word");
    cr_expect_eq(json_integer_value(json_object_get(v[2], "after")), 1);
    free_lines(v);
}

Test(log, bytes_that_are_not_utf8_are_written_as_hex_escapes)
{
    json_t **v;

    begin_json();
    log_warn("m", "latin-1 path", "db=\"/data/caf\xe9.db\" n=1");
    log_warn("m\xff", "bad \xc3(", "k=\xf0\x28\x8c\x28");
    log_warn("m", "valid UTF-8", "city=\"Z\xc3\xbcrich\"");
    v = finish(3);

    cr_expect_str_eq(str(v[0], "db"), "/data/caf\\xe9.db");
    cr_expect_eq(json_integer_value(json_object_get(v[0], "n")), 1);
    expect_envelope(v[1], "warn", "m\\xff", "bad \\xc3(");
    cr_expect_str_eq(str(v[1], "k"), "\\xf0(\\x8c(");
    /* valid UTF-8 is kept as it is (written \u-escaped: ASCII lines) */
    cr_expect_str_eq(str(v[2], "city"), "Z\xc3\xbcrich");
    free_lines(v);
}

Test(log, a_line_too_long_is_shortened_but_stays_json)
{
    char *big = malloc(5000), *ctl = malloc(1001);
    json_t **v;

    cr_assert(big && ctl);
    memset(big, 'a', 4999);
    big[4999] = '\0';
    memset(ctl, '\x01', 1000); /* six bytes each once escaped */
    ctl[1000] = '\0';
    begin_json();
    log_error("m", "big value", "first=1 v=\"%s\"", big);
    log_error("m", "control bytes", "v=\"%s\"", ctl);
    log_error("m", "short", "n=2");
    v = finish(3);

    for (size_t i = 0; i < 2; i++) {
        expect_envelope(v[i], "error", "m",
                        i == 0 ? "big value" : "control bytes");
        cr_expect(json_is_true(json_object_get(v[i], "truncated")), "line %zu",
                  i);
        cr_expect_gt(strlen(str(v[i], "v")), 50, "line %zu lost its value", i);
    }
    cr_expect_eq(json_integer_value(json_object_get(v[0], "first")), 1);
    cr_expect_null(json_object_get(v[2], "truncated"));
    free_lines(v);
    free(big);
    free(ctl);
}

/* ------------------------------------------------------------------------ */
/* Levels and formats                                                       */

Test(log, levels_below_the_minimum_are_not_written)
{
    static const char *const want[] = {"info", "warn", "error", "warn",
                                       "error"};
    json_t **v;

    begin_json();
    log_debug("m", "debug at the default", NULL); /* default: info */
    log_info("m", "info", NULL);
    log_set_level(LOG_WARN);
    log_debug("m", "debug", NULL);
    log_info("m", "info", NULL);
    log_warn("m", "warn", NULL);
    log_error("m", "error", NULL);
    log_info("m", "info, still below", NULL);
    log_warn("m", "warn", NULL);
    log_error("m", "error", NULL);
    v = finish(5);

    for (size_t i = 0; i < g_n; i++)
        cr_expect_str_eq(str(v[i], "level"), want[i], "line %zu", i);
    free_lines(v);
}

Test(log, debug_level_writes_everything)
{
    json_t **v;

    log_set_level(LOG_DEBUG);
    begin_json();
    log_debug("m", "d", NULL);
    log_info("m", "i", NULL);
    v = finish(2);

    cr_expect_str_eq(str(v[0], "level"), "debug");
    free_lines(v);
}

Test(log, text_is_the_default)
{
    ut_capture cap;
    char *text;
    json_t **v;

    ut_capture_start(&cap);
    log_info("http", "scheduled", "job_id=%s n=%d", "abc", 3);
    text = ut_capture_end(&cap);
    cr_expect_not_null(strstr(text, " level=info module=http msg=\"scheduled\" "
                                    "job_id=abc n=3\n"),
                       "%s", text);
    cr_expect_eq(text[4], '-', "starts with the time: %s", text);
    free(text);

    begin_json();
    log_info("m", "json once set", NULL);
    v = finish(1);
    free_lines(v);
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                  */

#define THREADS 4
#define PER_THREAD 200

static void *log_many(void *arg)
{
    for (int i = 0; i < PER_THREAD; i++)
        log_info(
            "t", "line", "thread=%d i=%d pad=\"%s\"", *(int *)arg, i,
            "................................................................");
    return NULL;
}

Test(log, lines_from_several_threads_never_interleave)
{
    pthread_t th[THREADS];
    int ids[THREADS];
    int seen[THREADS] = {0};
    json_t **v;

    begin_json();
    for (int t = 0; t < THREADS; t++) {
        ids[t] = t;
        cr_assert_eq(pthread_create(&th[t], NULL, log_many, &ids[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    v = finish(THREADS * PER_THREAD);

    for (size_t i = 0; i < g_n; i++) {
        json_int_t t = json_integer_value(json_object_get(v[i], "thread"));
        cr_assert(t >= 0 && t < THREADS);
        cr_expect_eq(json_integer_value(json_object_get(v[i], "i")), seen[t],
                     "thread %lld out of order", (long long)t);
        seen[t]++;
    }
    free_lines(v);
}

/* ------------------------------------------------------------------------ */
/* A value cannot forge a field or a line (issue 21): the routing key, a   */
/* header or a filter is a client's text.                                   */

/* A client's value that would end its field, add fields and start a line
 * of its own if written as it is. */
#define FORGERY                                            \
    "x\n2026-01-01T00:00:00.000Z level=error module=auth " \
    "msg=\"forged\" user=\"root\"\r\t\\\x01\x7f end"

/* The text emit wrote to stderr as text lines (caller frees). */
static char *text_of(void (*emit)(void))
{
    ut_capture c;

    log_set_format(LOG_FORMAT_TEXT);
    ut_capture_start(&c);
    emit();
    return ut_capture_end(&c);
}

/* emit wrote exactly one text line, which ends with want. */
static void expect_line_ending(void (*emit)(void), const char *want)
{
    char *t = text_of(emit);

    cr_assert_eq(strchr(t, '\n'), t + strlen(t) - 1, "more than one line: %s",
                 t);
    cr_assert_geq(strlen(t), strlen(want), "%s", t);
    cr_expect_str_eq(t + strlen(t) - strlen(want), want);
    free(t);
}

static void emit_forgeries(void)
{
    log_warn("dispatcher", "publish failed",
             "routing_key=%s reason=\"%s\" n=%d", FORGERY, FORGERY, 3);
}

Test(log, text_values_are_escaped_so_a_value_is_one_field_of_one_line)
{
    expect_line_ending(
        emit_forgeries,
        " level=warn module=dispatcher msg=\"publish failed\" "
        "routing_key=\"x\\n"
        "2026-01-01T00:00:00.000Z level=error module=auth msg=\\\"forged\\\" "
        "user=\\\"root\\\"\\r\\t\\\\\\x01\\x7f end\" "
        "reason=\"x\\n2026-01-01T00:00"
        ":00.000Z level=error module=auth msg=\\\"forged\\\" "
        "user=\\\"root\\\"\\r"
        "\\t\\\\\\x01\\x7f end\" n=3\n");
}

static void emit_plain_and_empty(void)
{
    log_info("m", "plain", "a=%s b=%s c=\"%s\" d=%s", "amqp://h:5672/%2F", "",
             "two words", "k=v");
}

Test(log, text_bare_values_stay_bare_unless_they_need_quotes)
{
    expect_line_ending(emit_plain_and_empty,
                       " msg=\"plain\" a=amqp://h:5672/%2F b= c=\"two words\" "
                       "d=\"k=v\"\n");
}

Test(log, json_values_round_trip_exactly_and_cannot_set_a_key)
{
    json_t **v;

    begin_json();
    emit_forgeries();
    log_info("m", "reserved", "level=%s module=%s message=\"%s\"", "error",
             "auth", "forged");
    v = finish(2);

    expect_envelope(v[0], "warn", "dispatcher", "publish failed");
    cr_expect_str_eq(str(v[0], "routing_key"), FORGERY);
    cr_expect_str_eq(str(v[0], "reason"), FORGERY);
    cr_expect_eq(json_integer_value(json_object_get(v[0], "n")), 3);
    cr_expect_eq(json_object_size(v[0]), 7, "keys: %zu",
                 json_object_size(v[0]));

    expect_envelope(v[1], "info", "m", "reserved");
    cr_expect_str_eq(str(v[1], "_level"), "error");
    cr_expect_str_eq(str(v[1], "_module"), "auth");
    cr_expect_str_eq(str(v[1], "_message"), "forged");
    free_lines(v);
}

static void emit_conversions(void)
{
    log_info("m", "conv",
             "a=%d b=%zu c=%lld d=%llu e=%u f=%02x g=%.*s h=%-5s| i=%c j=%.6f "
             "k=%04lld l=%ld m=%%",
             -7, (size_t)42, -9000000000LL, 18000000000ULL, 7u, 10u, 3,
             "abcdef", "ab", 'z', 1.5, 12LL, -3L);
}

Test(log, text_conversions_other_than_strings_print_as_printf_would)
{
    expect_line_ending(
        emit_conversions,
        " msg=\"conv\" a=-7 b=42 c=-9000000000 d=18000000000 e=7 "
        "f=0a g=abc h=ab   | i=z j=1.500000 k=0012 l=-3 m=%\n");
}

static void emit_two_in_quotes(void)
{
    log_warn("m", "two", "reason=\"%s: %s\" n=1", "a \"b\"", "c\nd");
}

Test(log, several_values_inside_one_quoted_field_are_escaped_in_place)
{
    json_t **v;

    expect_line_ending(emit_two_in_quotes,
                       " msg=\"two\" reason=\"a \\\"b\\\": c\\nd\" n=1\n");
    begin_json();
    emit_two_in_quotes();
    v = finish(1);
    cr_expect_str_eq(str(v[0], "reason"), "a \"b\": c\nd");
    cr_expect_eq(json_integer_value(json_object_get(v[0], "n")), 1);
    free_lines(v);
}
