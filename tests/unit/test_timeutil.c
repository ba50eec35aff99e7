/*
 * test_timeutil.c - RFC 3339 parsing/formatting and the clocks.
 *
 * Expected values were computed independently (Python datetime) or taken
 * from RFC 3339 section 5.8; the calendar sweep checks the hand-written
 * day arithmetic against glibc's timegm/gmtime_r over years 0001-9999.
 */
#include <criterion/criterion.h>
#include <stdbool.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "timeutil.h"

static rmqs_rc parse(const char *s, int64_t *ms)
{
    return tu_parse_rfc3339(s, strlen(s), ms);
}

struct valid_case {
    const char *text;
    int64_t ms;
};

Test(timeutil, parse_valid_table)
{
    static const struct valid_case cases[] = {
        {"1970-01-01T00:00:00Z", 0},
        {"1970-01-01T00:00:00.001Z", 1},
        {"1969-12-31T23:59:59.999Z", -1},
        {"2026-01-01T00:00:00Z", 1767225600000},
        {"2026-11-30T14:00:00Z", 1796047200000},
        {"2026-11-30T22:00:00.5+08:00", 1796047200500},
        {"2026-11-30T08:30:00.5-05:30", 1796047200500},
        {"2026-11-30T14:00:00.5+00:00", 1796047200500},
        {"2026-11-30T14:00:00.5-00:00", 1796047200500},
        {"2026-11-30t14:00:00.5z", 1796047200500},
        /* fractions of 1..9 digits (and more): truncated, never rounded */
        {"2026-11-30T14:00:00.1Z", 1796047200100},
        {"2026-11-30T14:00:00.12Z", 1796047200120},
        {"2026-11-30T14:00:00.123Z", 1796047200123},
        {"2026-11-30T14:00:00.1239Z", 1796047200123},
        {"2026-11-30T14:00:00.12399Z", 1796047200123},
        {"2026-11-30T14:00:00.123999Z", 1796047200123},
        {"2026-11-30T14:00:00.1239999Z", 1796047200123},
        {"2026-11-30T14:00:00.12399999Z", 1796047200123},
        {"2026-11-30T14:00:00.123999999Z", 1796047200123},
        {"2026-11-30T14:00:00.99999999999999999999Z", 1796047200999},
        {"2026-11-30T14:00:00.000Z", 1796047200000},
        /* calendar edges */
        {"2024-02-29T12:34:56Z", 1709210096000},
        {"2000-02-29T00:00:00Z", 951782400000},
        {"1900-03-01T00:00:00Z", -2203891200000},
        {"0001-01-01T00:00:00Z", -62135596800000},
        {"9999-12-31T23:59:59.999Z", 253402300799999},
        /* offsets at their limits */
        {"2026-01-01T23:59:00+23:59", 1767225600000},
        {"2025-12-31T00:01:00-23:59", 1767225600000},
        /* leap second: read as :59.999 */
        {"2016-12-31T23:59:60Z", 1483228799999},
        {"2016-12-31T23:59:60.5Z", 1483228799999},
        /* RFC 3339 section 5.8 examples */
        {"1985-04-12T23:20:50.52Z", 482196050520},
        {"1996-12-19T16:39:57-08:00", 851042397000},
        {"1990-12-31T23:59:60Z", 662687999999},
        {"1990-12-31T15:59:60-08:00", 662687999999},
        {"1937-01-01T12:00:27.87+00:20", -1041337172130},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t ms = 42;
        rmqs_rc rc = parse(cases[i].text, &ms);
        cr_expect_eq(rc, RMQS_OK, "%s: rc %d", cases[i].text, rc);
        cr_expect_eq(ms, cases[i].ms, "%s: got %lld, want %lld", cases[i].text,
                     (long long)ms, (long long)cases[i].ms);
    }
}

Test(timeutil, parse_invalid_table)
{
    static const char *const cases[] = {
        "",
        "2026",
        "2026-01-01",
        "2026-01-01T",
        "2026-01-01T00:00Z",       /* no seconds */
        "2026-01-01T00:00:00",     /* no offset */
        "2026-01-01T00:00:00.123", /* no offset after fraction */
        "2026-01-01T00:00:00.Z",   /* empty fraction */
        "2026-01-01T00:00:00,5Z",  /* comma fraction */
        "2026-01-01 00:00:00Z",    /* space separator */
        "2026-01-01X00:00:00Z",
        "2026-01-01T00:00:00ZZ", /* trailing junk */
        "2026-01-01T00:00:00Zjunk",
        "2026-01-01T00:00:00Z ",
        " 2026-01-01T00:00:00Z", /* leading whitespace */
        "2026-01-01T00:00:00+05:30:00",
        "2026-01-01T00:00:00UTC",
        "2026-01-01T00:00:00+0530", /* offset without colon */
        "2026-01-01T00:00:00+05",
        "2026-01-01T00:00:00+5:30",
        "2026-01-01T00:00:00+24:00", /* offset hour 24 */
        "2026-01-01T00:00:00+05:60", /* offset minute 60 */
        "2026-1-01T00:00:00Z",       /* missing zero padding */
        "2026-01-1T00:00:00Z",
        "2026-01-01T0:00:00Z",
        "20260101T000000Z", /* basic format is not RFC 3339 */
        "+2026-01-01T00:00:00Z",
        "-0001-01-01T00:00:00Z",
        "0000-01-01T00:00:00Z", /* year 0000 */
        "10000-01-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "2026-01-32T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2023-02-29T00:00:00Z", /* not a leap year */
        "1900-02-29T00:00:00Z", /* century, not a leap year */
        "2026-01-01T24:00:00Z", /* hour 24 */
        "2026-01-01T23:60:00Z",
        "2026-01-01T23:59:61Z",
        "2026-01-01T00:00:0aZ",
        "2026-01-01T00:00:00.1a2Z",
        "2026-01-01T00:00:00.-1Z",
        "2026-01-01T00:00:00z+01:00",
        "2026\xe2\x80\x93"
        "01-01T00:00:00Z", /* en dash */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t ms = 42;
        rmqs_rc rc = parse(cases[i], &ms);
        cr_expect_eq(rc, RMQS_EINVAL, "\"%s\" was accepted (ms %lld)", cases[i],
                     (long long)ms);
    }
}

Test(timeutil, parse_uses_len_not_nul)
{
    const char *s = "2026-01-01T00:00:00Zxyz";
    int64_t ms = 0;
    cr_expect_eq(tu_parse_rfc3339(s, 20, &ms), RMQS_OK);
    cr_expect_eq(ms, 1767225600000);
    cr_expect_eq(tu_parse_rfc3339(s, 21, &ms), RMQS_EINVAL, "junk within len");
    cr_expect_eq(tu_parse_rfc3339(s, 19, &ms), RMQS_EINVAL, "offset cut off");

    /* not NUL-terminated at all: an exact-size heap copy (ASan checks reads) */
    const char *frac = "2026-01-01T00:00:00.123456+01:00";
    size_t n = strlen(frac);
    char *copy = malloc(n);
    cr_assert_not_null(copy);
    memcpy(copy, frac, n);
    cr_expect_eq(tu_parse_rfc3339(copy, n, &ms), RMQS_OK);
    cr_expect_eq(ms, 1767225600000 - 3600000 + 123);
    for (size_t k = 0; k < n; k++)
        cr_expect_eq(tu_parse_rfc3339(copy, k, &ms), RMQS_EINVAL,
                     "prefix of %zu bytes accepted", k);
    free(copy);

    cr_expect_eq(tu_parse_rfc3339(NULL, 0, &ms), RMQS_EINVAL);
}

struct format_case {
    int64_t ms;
    const char *text;
};

Test(timeutil, format_table)
{
    static const struct format_case cases[] = {
        {0, "1970-01-01T00:00:00.000Z"},
        {1, "1970-01-01T00:00:00.001Z"},
        {-1, "1969-12-31T23:59:59.999Z"},
        {-999, "1969-12-31T23:59:59.001Z"},
        {-1000, "1969-12-31T23:59:59.000Z"},
        {-86400000, "1969-12-31T00:00:00.000Z"},
        {-86400001, "1969-12-30T23:59:59.999Z"},
        {951782400000, "2000-02-29T00:00:00.000Z"},
        {1796047200500, "2026-11-30T14:00:00.500Z"},
        {-2203891200000, "1900-03-01T00:00:00.000Z"},
        {-62135596800000, "0001-01-01T00:00:00.000Z"},
        {-62135596800001, "0000-12-31T23:59:59.999Z"},
        {-62167219200000, "0000-01-01T00:00:00.000Z"},
        {253402300799999, "9999-12-31T23:59:59.999Z"},
        /* beyond four-digit years: clamped to the representable range */
        {-62167219200001, "0000-01-01T00:00:00.000Z"},
        {253402300800000, "9999-12-31T23:59:59.999Z"},
        {INT64_MIN, "0000-01-01T00:00:00.000Z"},
        {INT64_MAX, "9999-12-31T23:59:59.999Z"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[TU_RFC3339_LEN + 1];
        memset(out, 'X', sizeof out);
        tu_format_rfc3339(cases[i].ms, out);
        cr_expect_str_eq(out, cases[i].text, "ms %lld", (long long)cases[i].ms);
        cr_expect_eq(strlen(out), TU_RFC3339_LEN);
    }
}

/* parse(format(ms)) == ms for ms across the whole 0001-9999 range. */
Test(timeutil, round_trip_parse_format)
{
    const int64_t lo = -62135596800000, hi = 253402300799999;
    static const int64_t fixed[] = {0,
                                    -1,
                                    1,
                                    951782400000,
                                    -62135596800000,
                                    253402300799999,
                                    1483228799999};
    uint64_t x = 0x9E3779B97F4A7C15ULL; /* xorshift: deterministic spread */
    for (int i = 0; i < 20000; i++) {
        int64_t ms;
        if (i < (int)(sizeof fixed / sizeof fixed[0])) {
            ms = fixed[i];
        } else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ms = lo + (int64_t)(x % (uint64_t)(hi - lo + 1));
        }
        char buf[TU_RFC3339_LEN + 1];
        tu_format_rfc3339(ms, buf);
        int64_t back = 0;
        cr_assert_eq(tu_parse_rfc3339(buf, strlen(buf), &back), RMQS_OK, "%s",
                     buf);
        cr_assert_eq(back, ms, "%lld -> %s -> %lld", (long long)ms, buf,
                     (long long)back);
    }
}

/* format(parse(s)) == s for canonical strings. */
Test(timeutil, round_trip_format_parse)
{
    static const char *const cases[] = {
        "2026-11-30T14:00:00.500Z", "0001-01-01T00:00:00.000Z",
        "9999-12-31T23:59:59.999Z", "2024-02-29T23:59:59.999Z",
        "1969-07-20T20:17:40.000Z",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t ms;
        char out[TU_RFC3339_LEN + 1];
        cr_assert_eq(parse(cases[i], &ms), RMQS_OK, "%s", cases[i]);
        tu_format_rfc3339(ms, out);
        cr_expect_str_eq(out, cases[i]);
    }
}

/* Every 7th day from 0001 to 9999 against glibc's calendar. */
Test(timeutil, calendar_matches_glibc)
{
    struct tm tm = {0};
    tm.tm_year = 1 - 1900;
    tm.tm_mon = 0;
    tm.tm_mday = 1;
    time_t t = timegm(&tm);
    for (; t < (time_t)253402300799; t += 7 * 86400 + 3661) {
        struct tm g;
        cr_assert_not_null(gmtime_r(&t, &g));
        char text[64];
        snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02dZ",
                 g.tm_year + 1900, g.tm_mon + 1, g.tm_mday, g.tm_hour, g.tm_min,
                 g.tm_sec);
        int64_t ms = 0;
        cr_assert_eq(parse(text, &ms), RMQS_OK, "%s", text);
        cr_assert_eq(ms, (int64_t)t * 1000, "%s", text);

        char out[TU_RFC3339_LEN + 1], want[64];
        tu_format_rfc3339((int64_t)t * 1000 + 7, out);
        snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d.007Z",
                 g.tm_year + 1900, g.tm_mon + 1, g.tm_mday, g.tm_hour, g.tm_min,
                 g.tm_sec);
        cr_assert_str_eq(out, want);
    }
}

Test(timeutil, now_is_wall_clock)
{
    int64_t before = (int64_t)time(NULL) * 1000;
    int64_t now = tu_now_ms();
    int64_t after = (int64_t)time(NULL) * 1000 + 1000;
    cr_expect_geq(now, before);
    cr_expect_lt(now, after);
}

Test(timeutil, mono_advances)
{
    int64_t a = tu_mono_ms();
    struct timespec ts = {0, 30 * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    int64_t b = tu_mono_ms();
    cr_expect_geq(b - a, 29, "slept 30 ms, monotonic moved %lld",
                  (long long)(b - a));
    cr_expect_lt(b - a, 10000);
}

/*
 * The year range 0001-9999 applies to the instant (UTC), not only to the
 * local text: an offset can push a time at either end out of it, where the
 * formatter cannot show it (year 0000, or clamped to 9999). Found by
 * tests/fuzz/fuzz_rfc3339.c: "0001-01-01T00:00:00.5+08:00" was accepted and
 * formatted as "0000-12-31T16:00:00.500Z", which does not parse.
 */
Test(timeutil, offset_cannot_leave_the_year_range)
{
    static const char *const rejected[] = {
        "0001-01-01T00:00:00.5+08:00", /* the fuzzer's input */
        "0001-01-01T00:00:00+00:01",   "0001-01-01T23:58:59.999+23:59",
        "9999-12-31T23:59:59-00:01",   "9999-12-31T23:59:60-23:59",
        "9999-12-31T00:01:00-23:59",
    };
    for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
        int64_t ms = 42;
        cr_expect_eq(parse(rejected[i], &ms), RMQS_EINVAL,
                     "\"%s\" accepted (%lld)", rejected[i], (long long)ms);
        cr_expect_eq(ms, 42, "%s: output written on failure", rejected[i]);
    }

    /* the first and last instants stay reachable through an offset */
    static const struct valid_case edges[] = {
        {"0001-01-01T23:59:00+23:59", -62135596800000},
        {"0001-01-01T00:00:00-00:01", -62135596740000},
        {"9999-12-31T00:00:59.999-23:59", 253402300799999},
        {"9999-12-31T23:59:59.999+00:01", 253402300739999},
        {"9999-12-31T23:59:60+00:00", 253402300799999},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        int64_t ms = 42, back = 0;
        char out[TU_RFC3339_LEN + 1];
        cr_expect_eq(parse(edges[i].text, &ms), RMQS_OK, "%s", edges[i].text);
        cr_expect_eq(ms, edges[i].ms, "%s: got %lld", edges[i].text,
                     (long long)ms);
        tu_format_rfc3339(ms, out);
        cr_expect_eq(parse(out, &back), RMQS_OK, "%s -> %s", edges[i].text,
                     out);
        cr_expect_eq(back, ms, "%s -> %s", edges[i].text, out);
    }
}

/* Every accepted text round-trips, over a sweep of offsets at both ends of
 * the range (what the fuzz target checks, made exhaustive where cheap). */
Test(timeutil, accepted_times_round_trip_at_the_range_ends)
{
    static const char *const locals[] = {
        "0001-01-01T00:00:00.000", "0001-01-01T12:00:00.000",
        "0001-01-01T23:59:59.999", "0001-01-02T00:00:00.000",
        "9999-12-30T23:59:59.999", "9999-12-31T00:00:00.000",
        "9999-12-31T12:00:00.000", "9999-12-31T23:59:59.999",
    };
    for (size_t i = 0; i < sizeof locals / sizeof locals[0]; i++) {
        for (int off = -(23 * 60 + 59); off <= 23 * 60 + 59; off += 7) {
            char text[64], out[TU_RFC3339_LEN + 1];
            int a = off < 0 ? -off : off;
            snprintf(text, sizeof text, "%s%c%02d:%02d", locals[i],
                     off < 0 ? '-' : '+', a / 60, a % 60);
            int64_t ms, back;
            if (parse(text, &ms) != RMQS_OK)
                continue;
            cr_assert(ms >= -62135596800000 && ms <= 253402300799999, "%s",
                      text);
            tu_format_rfc3339(ms, out);
            cr_assert_eq(parse(out, &back), RMQS_OK, "%s -> %s", text, out);
            cr_assert_eq(back, ms, "%s -> %s", text, out);
        }
    }
}

Test(timeutil, mono_deadline_is_ms_ahead_and_normalised)
{
    struct timespec before, dl;
    int64_t before_ns, dl_ns;

    for (int64_t ms = 0; ms <= 2500; ms += 499) {
        clock_gettime(CLOCK_MONOTONIC, &before);
        dl = tu_mono_deadline(ms);
        cr_assert(dl.tv_nsec >= 0 && dl.tv_nsec < 1000000000L);
        before_ns = (int64_t)before.tv_sec * 1000000000 + before.tv_nsec;
        dl_ns = (int64_t)dl.tv_sec * 1000000000 + dl.tv_nsec;
        cr_assert_geq(dl_ns - before_ns, ms * 1000000);
        cr_assert_lt(dl_ns - before_ns, ms * 1000000 + 100000000); /* +100 ms */
    }
}

Test(timeutil, jitter_stays_between_half_and_whole)
{
    bool below_three_quarters = false, above = false;

    for (int i = 0; i < 2000; i++) {
        int64_t j = tu_jitter_ms(1000);
        cr_assert(j >= 500 && j <= 1000, "jitter %lld", (long long)j);
        below_three_quarters |= j < 750;
        above |= j >= 750;
    }
    cr_assert(below_three_quarters && above, "not spread over the range");
    cr_assert_eq(tu_jitter_ms(0), 0);
    for (int i = 0; i < 20; i++) {
        int64_t one = tu_jitter_ms(1);
        cr_assert(one == 0 || one == 1);
    }
}
