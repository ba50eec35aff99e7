/*
 * test_tz.c - time zones from the system tzdata (service/schedules/tz.c).
 *
 * Transition instants were computed independently with Python's zoneinfo;
 * the years after 2037 check that GLib's reading of the TZif footer rule
 * (explicit transitions in the files end in 2037) is in force.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tz.h"

static tz_t *open_zone(const char *name)
{
    tz_t *z = NULL;
    rmqs_error err = {0};
    cr_assert_eq(tz_open(name, &z, &err), RMQS_OK, "%s: %s", name, err.message);
    cr_assert_str_eq(tz_name(z), name);
    return z;
}

Test(tz, offsets_after_2037_follow_the_footer_rule)
{
    static const struct {
        const char *zone;
        int64_t at;
        int32_t before, after;
    } cases[] = {
        {"Europe/Berlin", 2216250000, 3600, 7200}, /* 2040-03-25T01:00Z */
        {"Europe/Berlin", 2234998800, 7200, 3600}, /* 2040-10-28T01:00Z */
        {"Europe/Berlin", 3794173200, 3600, 7200}, /* 2090-03-26T01:00Z */
        {"Europe/Berlin", 3812922000, 7200, 3600}, /* 2090-10-29T01:00Z */
        {"America/New_York", 2215062000, -18000,
         -14400}, /* 2040-03-11T07:00Z */
        {"America/New_York", 2235621600, -14400,
         -18000}, /* 2040-11-04T06:00Z */
        {"America/New_York", 3792985200, -18000,
         -14400}, /* 2090-03-12T07:00Z */
        {"America/New_York", 3813544800, -14400,
         -18000}, /* 2090-11-05T06:00Z */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tz_t *z = open_zone(cases[i].zone);
        cr_expect_eq(tz_offset_at(z, cases[i].at - 1), cases[i].before,
                     "%s %lld", cases[i].zone, (long long)cases[i].at);
        cr_expect_eq(tz_offset_at(z, cases[i].at), cases[i].after, "%s %lld",
                     cases[i].zone, (long long)cases[i].at);
        int64_t t;
        int32_t b, a;
        cr_expect(tz_next_transition(z, cases[i].at - 86400, &t, &b, &a));
        cr_expect_eq(t, cases[i].at);
        cr_expect(tz_prev_transition(z, cases[i].at, &t, &b, &a));
        cr_expect_eq(t, cases[i].at);
        cr_expect_eq(b, cases[i].before);
        cr_expect_eq(a, cases[i].after);
        tz_free(z);
    }
}

Test(tz, fixed_and_odd_offsets)
{
    tz_t *z = open_zone("UTC");
    cr_expect_eq(tz_offset_at(z, 1800000000), 0);
    int64_t t;
    int32_t b, a;
    cr_expect(!tz_next_transition(z, 0, &t, &b, &a), "UTC has no transitions");
    tz_free(z);
    z = open_zone("Asia/Kathmandu");
    cr_expect_eq(tz_offset_at(z, 1800000000), 5 * 3600 + 45 * 60);
    tz_free(z);
    z = open_zone("Etc/GMT+5"); /* POSIX sign: 5 hours west */
    cr_expect_eq(tz_offset_at(z, 1800000000), -5 * 3600);
    tz_free(z);
    z = open_zone(
        "Pacific/Apia"); /* 2011-12-30 skipped: -10 -> +14 at 10:00Z */
    cr_expect_eq(tz_offset_at(z, 1325239199), -10 * 3600);
    cr_expect_eq(tz_offset_at(z, 1325239200), 14 * 3600);
    tz_free(z);
}

Test(tz, unknown_zones_are_rejected)
{
    static const char *const bad[] = {
        "", "Nowhere/Atlantis", "europe/berlin_x", "../etc/passwd",
        "/etc/passwd", "Europe//Berlin", "EST5EDT,M3.2.0,M11.1.0", "+01:00",
        "UTC+1", "Europe/", "tzdata.zi",
        /* files of tzdata that are not zones */
        "leapseconds", "SECURITY", "zone.tab", "iso3166.tab"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tz_t *z = (tz_t *)1;
        rmqs_error err = {0};
        cr_expect_eq(tz_open(bad[i], &z, &err), RMQS_EINVAL, "\"%s\"", bad[i]);
        cr_expect_null(z);
        cr_expect_str_eq(err.field, "timezone", "\"%s\"", bad[i]);
    }
    tz_t *z = NULL;
    cr_expect_eq(tz_open(NULL, &z, NULL), RMQS_EINVAL);
}

Test(tz, format_local)
{
    static const struct {
        const char *zone;
        int64_t ms;
        const char *want;
    } cases[] = {
        {"Europe/Berlin", 1838084400000, "2028-03-31T05:00:00.000+02:00"},
        {"Europe/Berlin", 1824512400123, "2027-10-26T03:00:00.123+02:00"},
        {"America/New_York", 1830834000000, "2028-01-07T00:00:00.000-05:00"},
        {"Australia/Lord_Howe", 1806940800000, "2027-04-06T02:30:00.000+10:30"},
        {"UTC", 0, "1970-01-01T00:00:00.000+00:00"},
        {"UTC", -1, "1969-12-31T23:59:59.999+00:00"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tz_t *z = open_zone(cases[i].zone);
        char buf[40];
        tz_format_local(z, cases[i].ms, buf);
        cr_expect_str_eq(buf, cases[i].want, "%s %lld", cases[i].zone,
                         (long long)cases[i].ms);
        tz_free(z);
    }
}

Test(tz, data_version_is_tzdata_zi_first_line)
{
    char want[32] = "unknown";
    FILE *f = fopen("/usr/share/zoneinfo/tzdata.zi", "r");
    if (f != NULL) {
        char line[128];
        if (fgets(line, sizeof line, f) != NULL)
            sscanf(line, "# version %31s", want);
        fclose(f);
    }
    cr_expect_str_eq(tz_data_version(), want);
    cr_expect_neq(strcmp(tz_data_version(), ""), 0);
}
