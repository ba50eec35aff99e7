/*
 * test_cron.c - cron_parse, cron_default_dst and cron_next (service/schedules/cron.c).
 *
 * Table tests on given instants: each row is an expression, a zone, a
 * start and the local fire times expected after it, written out by hand
 * from the zone's rules (transition instants checked with Python's
 * zoneinfo: Europe/Berlin 2027-03-28 01:00Z / 2027-10-31 01:00Z,
 * America/New_York 2027-03-14 07:00Z / 2027-11-07 06:00Z,
 * Australia/Lord_Howe 2027-10-02 15:30Z (+10:30 -> +11) / 2027-04-03 15:00Z,
 * America/Havana at local midnight 2027-03-14 / 2027-11-07, Pacific/Apia's
 * skipped 2011-12-30). Fixed dates are fine here: they test arithmetic on
 * given instants, not "now".
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cron.h"
#include "timeutil.h"

enum { DST_DEFAULT, NEXT_FIRST, NEXT_BOTH, SKIP_FIRST, SKIP_BOTH };

struct next_case {
    const char *expr, *zone, *start;
    int dst;
    const char *want[7]; /* local RFC 3339, NULL-terminated; {NULL}: never */
};

static cron_dst dst_of(const cron_expr *e, int mode)
{
    switch (mode) {
    case NEXT_FIRST: return (cron_dst){CRON_SKIPPED_NEXT, CRON_REPEATED_FIRST};
    case NEXT_BOTH: return (cron_dst){CRON_SKIPPED_NEXT, CRON_REPEATED_BOTH};
    case SKIP_FIRST: return (cron_dst){CRON_SKIPPED_SKIP, CRON_REPEATED_FIRST};
    case SKIP_BOTH: return (cron_dst){CRON_SKIPPED_SKIP, CRON_REPEATED_BOTH};
    default: return cron_default_dst(e);
    }
}

static void run_cases(const struct next_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct next_case *c = &cases[i];
        cron_expr *e = NULL;
        tz_t *z = NULL;
        rmqs_error err = {0};
        cr_assert_eq(cron_parse(c->expr, &e, &err), RMQS_OK, "%s: %s", c->expr,
                     err.message);
        cr_assert_eq(tz_open(c->zone, &z, &err), RMQS_OK, "%s: %s", c->zone,
                     err.message);
        int64_t at;
        cr_assert_eq(tu_parse_rfc3339(c->start, strlen(c->start), &at),
                     RMQS_OK);
        cron_dst dst = dst_of(e, c->dst);
        size_t k = 0;
        for (; c->want[k] != NULL; k++) {
            int64_t next;
            bool ok = cron_next(e, z, dst, at, &next);
            cr_expect(ok, "%s in %s (dst %d) after %s: no fire #%zu, want %s",
                      c->expr, c->zone, c->dst, c->start, k, c->want[k]);
            if (!ok)
                break;
            char local[40];
            tz_format_local(z, next, local);
            cr_expect_str_eq(local, c->want[k],
                             "%s in %s (dst %d) after %s: fire #%zu", c->expr,
                             c->zone, c->dst, c->start, k);
            cr_expect_gt(next, at, "not strictly after the previous one");
            cr_expect_eq(next % 1000, 0, "fire instants are whole seconds");
            at = next;
        }
        if (k == 0) {
            int64_t next;
            cr_expect(!cron_next(e, z, dst, at, &next),
                      "%s in %s: fires, want never", c->expr, c->zone);
            cr_expect(!cron_ever_fires(e, z, dst), "%s: ever_fires", c->expr);
        }
        cron_free(e);
        tz_free(z);
    }
}

#define RUN(cases) run_cases(cases, sizeof cases / sizeof cases[0])

Test(cron, dst_berlin)
{
    static const struct next_case cases[] = {
        /* spring forward 2027-03-28: 02:00-03:00 does not exist */
        {"30 2 * * *",
         "Europe/Berlin",
         "2027-03-27T12:00:00Z",
         DST_DEFAULT,
         {"2027-03-28T03:00:00.000+02:00", "2027-03-29T02:30:00.000+02:00"}},
        {"30 2 * * *",
         "Europe/Berlin",
         "2027-03-27T12:00:00Z",
         SKIP_FIRST,
         {"2027-03-29T02:30:00.000+02:00"}},
        {"0 2 * * *",
         "Europe/Berlin",
         "2027-03-27T12:00:00Z",
         DST_DEFAULT,
         {"2027-03-28T03:00:00.000+02:00", "2027-03-29T02:00:00.000+02:00"}},
        {"0 2 * * *",
         "Europe/Berlin",
         "2027-03-27T12:00:00Z",
         SKIP_BOTH,
         {"2027-03-29T02:00:00.000+02:00"}},
        {"0 * * * *",
         "Europe/Berlin",
         "2027-03-28T00:30:00Z",
         DST_DEFAULT,
         {"2027-03-28T03:00:00.000+02:00", "2027-03-28T04:00:00.000+02:00"}},
        {"0 * * * *",
         "Europe/Berlin",
         "2027-03-28T00:30:00Z",
         NEXT_BOTH,
         {"2027-03-28T03:00:00.000+02:00", "2027-03-28T04:00:00.000+02:00"}},
        {"*/15 * * * *",
         "Europe/Berlin",
         "2027-03-28T00:40:00Z",
         DST_DEFAULT,
         {"2027-03-28T01:45:00.000+01:00", "2027-03-28T03:00:00.000+02:00",
          "2027-03-28T03:15:00.000+02:00"}},
        /* several gap times collapse into the one instant after the gap */
        {"*/15 2 * * *",
         "Europe/Berlin",
         "2027-03-28T00:40:00Z",
         DST_DEFAULT,
         {"2027-03-28T03:00:00.000+02:00", "2027-03-29T02:00:00.000+02:00"}},
        /* 02:00 collapses into 03:00, which matches too: one fire, not two */
        {"0 2,3 * * *",
         "Europe/Berlin",
         "2027-03-27T12:00:00Z",
         DST_DEFAULT,
         {"2027-03-28T03:00:00.000+02:00", "2027-03-29T02:00:00.000+02:00"}},
        /* fall back 2027-10-31: 02:00-03:00 happens twice */
        {"30 2 * * *",
         "Europe/Berlin",
         "2027-10-30T12:00:00Z",
         DST_DEFAULT,
         {"2027-10-31T02:30:00.000+02:00", "2027-11-01T02:30:00.000+01:00"}},
        {"30 2 * * *",
         "Europe/Berlin",
         "2027-10-30T12:00:00Z",
         NEXT_BOTH,
         {"2027-10-31T02:30:00.000+02:00", "2027-10-31T02:30:00.000+01:00",
          "2027-11-01T02:30:00.000+01:00"}},
        {"0 2 * * *",
         "Europe/Berlin",
         "2027-10-30T12:00:00Z",
         SKIP_FIRST,
         {"2027-10-31T02:00:00.000+02:00", "2027-11-01T02:00:00.000+01:00"}},
        {"0 * * * *",
         "Europe/Berlin",
         "2027-10-31T00:30:00Z",
         DST_DEFAULT,
         {"2027-10-31T02:00:00.000+01:00", "2027-10-31T03:00:00.000+01:00"}},
        {"0 * * * *",
         "Europe/Berlin",
         "2027-10-31T00:30:00Z",
         SKIP_FIRST,
         {"2027-10-31T03:00:00.000+01:00", "2027-10-31T04:00:00.000+01:00"}},
        {"*/15 * * * *",
         "Europe/Berlin",
         "2027-10-31T00:40:00Z",
         DST_DEFAULT,
         {"2027-10-31T02:45:00.000+02:00", "2027-10-31T02:00:00.000+01:00",
          "2027-10-31T02:15:00.000+01:00"}},
        {"*/15 * * * *",
         "Europe/Berlin",
         "2027-10-31T00:40:00Z",
         NEXT_FIRST,
         {"2027-10-31T02:45:00.000+02:00", "2027-10-31T03:00:00.000+01:00",
          "2027-10-31T03:15:00.000+01:00"}},
    };
    RUN(cases);
}

Test(cron, dst_new_york)
{
    static const struct next_case cases[] = {
        {"30 2 * * *",
         "America/New_York",
         "2027-03-13T12:00:00Z",
         DST_DEFAULT,
         {"2027-03-14T03:00:00.000-04:00", "2027-03-15T02:30:00.000-04:00"}},
        {"30 2 * * *",
         "America/New_York",
         "2027-03-13T12:00:00Z",
         SKIP_BOTH,
         {"2027-03-15T02:30:00.000-04:00"}},
        {"0 2 * * *",
         "America/New_York",
         "2027-03-13T12:00:00Z",
         DST_DEFAULT,
         {"2027-03-14T03:00:00.000-04:00", "2027-03-15T02:00:00.000-04:00"}},
        {"30 1 * * *",
         "America/New_York",
         "2027-11-06T12:00:00Z",
         DST_DEFAULT,
         {"2027-11-07T01:30:00.000-04:00", "2027-11-08T01:30:00.000-05:00"}},
        {"30 1 * * *",
         "America/New_York",
         "2027-11-06T12:00:00Z",
         SKIP_BOTH,
         {"2027-11-07T01:30:00.000-04:00", "2027-11-07T01:30:00.000-05:00",
          "2027-11-08T01:30:00.000-05:00"}},
        {"0 * * * *",
         "America/New_York",
         "2027-11-07T05:30:00Z",
         DST_DEFAULT,
         {"2027-11-07T01:00:00.000-05:00", "2027-11-07T02:00:00.000-05:00"}},
        {"0 * * * *",
         "America/New_York",
         "2027-11-07T05:30:00Z",
         NEXT_FIRST,
         {"2027-11-07T02:00:00.000-05:00", "2027-11-07T03:00:00.000-05:00"}},
        {"*/15 * * * *",
         "America/New_York",
         "2027-03-14T06:40:00Z",
         DST_DEFAULT,
         {"2027-03-14T01:45:00.000-05:00", "2027-03-14T03:00:00.000-04:00"}},
    };
    RUN(cases);
}

Test(cron, dst_lord_howe_half_hour)
{
    static const struct next_case cases[] = {
        /* 2027-10-03: 02:00-02:30 skipped (+10:30 -> +11) */
        {"15 2 * * *",
         "Australia/Lord_Howe",
         "2027-10-02T00:00:00Z",
         DST_DEFAULT,
         {"2027-10-03T02:30:00.000+11:00", "2027-10-04T02:15:00.000+11:00"}},
        {"15 2 * * *",
         "Australia/Lord_Howe",
         "2027-10-02T00:00:00Z",
         SKIP_FIRST,
         {"2027-10-04T02:15:00.000+11:00"}},
        {"0 * * * *",
         "Australia/Lord_Howe",
         "2027-10-02T15:00:00Z",
         DST_DEFAULT,
         {"2027-10-03T03:00:00.000+11:00"}},
        {"0 * * * *",
         "Australia/Lord_Howe",
         "2027-10-02T15:00:00Z",
         NEXT_BOTH,
         {"2027-10-03T02:30:00.000+11:00", "2027-10-03T03:00:00.000+11:00"}},
        /* 2027-04-04: 01:30-02:00 twice (+11 -> +10:30) */
        {"45 1 * * *",
         "Australia/Lord_Howe",
         "2027-04-03T00:00:00Z",
         DST_DEFAULT,
         {"2027-04-04T01:45:00.000+11:00", "2027-04-05T01:45:00.000+10:30"}},
        {"45 1 * * *",
         "Australia/Lord_Howe",
         "2027-04-03T00:00:00Z",
         SKIP_BOTH,
         {"2027-04-04T01:45:00.000+11:00", "2027-04-04T01:45:00.000+10:30",
          "2027-04-05T01:45:00.000+10:30"}},
        {"*/15 * * * *",
         "Australia/Lord_Howe",
         "2027-04-03T14:20:00Z",
         DST_DEFAULT,
         {"2027-04-04T01:30:00.000+11:00", "2027-04-04T01:45:00.000+11:00",
          "2027-04-04T01:30:00.000+10:30", "2027-04-04T01:45:00.000+10:30",
          "2027-04-04T02:00:00.000+10:30"}},
        {"*/15 * * * *",
         "Australia/Lord_Howe",
         "2027-04-03T14:20:00Z",
         SKIP_FIRST,
         {"2027-04-04T01:30:00.000+11:00", "2027-04-04T01:45:00.000+11:00",
          "2027-04-04T02:00:00.000+10:30", "2027-04-04T02:15:00.000+10:30"}},
    };
    RUN(cases);
}

Test(cron, dst_midnight_havana_and_apia)
{
    static const struct next_case cases[] = {
        /* Havana: midnight does not exist on 2027-03-14, happens twice on 2027-11-07 */
        {"0 0 * * *",
         "America/Havana",
         "2027-03-13T12:00:00Z",
         DST_DEFAULT,
         {"2027-03-14T01:00:00.000-04:00", "2027-03-15T00:00:00.000-04:00"}},
        {"0 0 * * *",
         "America/Havana",
         "2027-03-13T12:00:00Z",
         SKIP_FIRST,
         {"2027-03-15T00:00:00.000-04:00"}},
        {"30 0 * * *",
         "America/Havana",
         "2027-11-06T12:00:00Z",
         DST_DEFAULT,
         {"2027-11-07T00:30:00.000-04:00", "2027-11-08T00:30:00.000-05:00"}},
        {"30 0 * * *",
         "America/Havana",
         "2027-11-06T12:00:00Z",
         NEXT_BOTH,
         {"2027-11-07T00:30:00.000-04:00", "2027-11-07T00:30:00.000-05:00",
          "2027-11-08T00:30:00.000-05:00"}},
        /* Apia skipped 2011-12-30 (-10 -> +14): the whole day collapses into
         * the first instant after it under NEXT, is left out under SKIP */
        {"0 12 * * *",
         "Pacific/Apia",
         "2011-12-28T00:00:00Z",
         DST_DEFAULT,
         {"2011-12-28T12:00:00.000-10:00", "2011-12-29T12:00:00.000-10:00",
          "2011-12-31T00:00:00.000+14:00", "2011-12-31T12:00:00.000+14:00"}},
        {"0 12 * * *",
         "Pacific/Apia",
         "2011-12-28T00:00:00Z",
         SKIP_FIRST,
         {"2011-12-28T12:00:00.000-10:00", "2011-12-29T12:00:00.000-10:00",
          "2011-12-31T12:00:00.000+14:00"}},
        {"0 0 30 12 *",
         "Pacific/Apia",
         "2011-06-01T00:00:00Z",
         SKIP_FIRST,
         {"2012-12-30T00:00:00.000+14:00"}},
        {"0 */6 * * *",
         "Pacific/Apia",
         "2011-12-30T06:00:00Z",
         DST_DEFAULT,
         {"2011-12-31T00:00:00.000+14:00", "2011-12-31T06:00:00.000+14:00"}},
    };
    RUN(cases);
}

Test(cron, february_29)
{
    static const struct next_case cases[] = {
        {"0 0 29 2 *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2028-02-29T00:00:00.000+00:00", "2032-02-29T00:00:00.000+00:00"}},
        /* 2100 is not a leap year: 2096 -> 2104 */
        {"0 0 29 2 *",
         "UTC",
         "2096-03-01T00:00:00Z",
         DST_DEFAULT,
         {"2104-02-29T00:00:00.000+00:00", "2108-02-29T00:00:00.000+00:00"}},
        {"0 0 29 2 *",
         "Europe/Berlin",
         "2399-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2400-02-29T00:00:00.000+01:00"}},
        {"0 0 L 2 *",
         "UTC",
         "2099-12-01T00:00:00Z",
         DST_DEFAULT,
         {"2100-02-28T00:00:00.000+00:00", "2101-02-28T00:00:00.000+00:00"}},
    };
    RUN(cases);
}

Test(cron, last_weekday_nth)
{
    static const struct next_case cases[] = {
        {"0 0 L * *",
         "UTC",
         "2027-01-15T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-31T00:00:00.000+00:00", "2027-02-28T00:00:00.000+00:00",
          "2027-03-31T00:00:00.000+00:00", "2027-04-30T00:00:00.000+00:00"}},
        {"0 0 L-2 * *",
         "UTC",
         "2027-02-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-02-26T00:00:00.000+00:00", "2027-03-29T00:00:00.000+00:00"}},
        /* 2027-01-31 and 2027-02-28 are Sundays, 2027-07-31 a Saturday */
        {"0 0 LW * *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-29T00:00:00.000+00:00", "2027-02-26T00:00:00.000+00:00",
          "2027-03-31T00:00:00.000+00:00", "2027-04-30T00:00:00.000+00:00"}},
        {"0 0 LW 7 *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-07-30T00:00:00.000+00:00"}},
        /* 2027-05-15 is a Saturday, 2027-08-15 a Sunday */
        {"0 0 15W 5,8 *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-05-14T00:00:00.000+00:00", "2027-08-16T00:00:00.000+00:00"}},
        /* W never leaves the month: 2027-05-01 Saturday -> Monday 3rd, not
         * April 30th; 2027-10-31 Sunday -> Friday 29th, not November 1st */
        {"0 0 1W 5 *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-05-03T00:00:00.000+00:00"}},
        {"0 0 31W 10 *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-10-29T00:00:00.000+00:00"}},
        /* no 31st in a 30-day month: 31W does not fire there */
        {"0 0 31W 4,6,9,11 *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {NULL}},
        {"0 0 * * 5L",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-29T00:00:00.000+00:00", "2027-02-26T00:00:00.000+00:00",
          "2027-03-26T00:00:00.000+00:00", "2027-04-30T00:00:00.000+00:00"}},
        {"0 0 * * FRIL",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-29T00:00:00.000+00:00"}},
        {"0 0 * * 1#2",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-11T00:00:00.000+00:00", "2027-02-08T00:00:00.000+00:00",
          "2027-03-08T00:00:00.000+00:00"}},
        /* only months with a fifth Friday */
        {"0 0 * * 5#5",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-29T00:00:00.000+00:00", "2027-04-30T00:00:00.000+00:00",
          "2027-07-30T00:00:00.000+00:00", "2027-10-29T00:00:00.000+00:00"}},
    };
    RUN(cases);
}

Test(cron, names_sunday_or_rule)
{
    static const struct next_case cases[] = {
        {"0 9 * jan,JUL Mon-fri",
         "UTC",
         "2027-06-30T00:00:00Z",
         DST_DEFAULT,
         {"2027-07-01T09:00:00.000+00:00", "2027-07-02T09:00:00.000+00:00",
          "2027-07-05T09:00:00.000+00:00"}},
        {"0 0 * * 7",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-03T00:00:00.000+00:00", "2027-01-10T00:00:00.000+00:00"}},
        {"0 0 * * 0",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-03T00:00:00.000+00:00", "2027-01-10T00:00:00.000+00:00"}},
        {"0 0 * * sun",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-03T00:00:00.000+00:00"}},
        {"0 0 * * 5-7",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-02T00:00:00.000+00:00", "2027-01-03T00:00:00.000+00:00",
          "2027-01-08T00:00:00.000+00:00"}},
        /* both day fields restricted: OR (Friday or the 13th) */
        {"0 0 13 * 5",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-08T00:00:00.000+00:00", "2027-01-13T00:00:00.000+00:00",
          "2027-01-15T00:00:00.000+00:00"}},
        /* a day field starting with '*' is unrestricted: AND (odd days that are Fridays) */
        {"0 0 */2 * 5",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-15T00:00:00.000+00:00", "2027-01-29T00:00:00.000+00:00",
          "2027-02-05T00:00:00.000+00:00"}},
        {"0 0 ? * 5",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-08T00:00:00.000+00:00"}},
        {"15,45 30 8 * * *",
         "Asia/Kathmandu",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-01T08:30:15.000+05:45", "2027-01-01T08:30:45.000+05:45",
          "2027-01-02T08:30:15.000+05:45"}},
        {"@monthly",
         "UTC",
         "2027-01-15T00:00:00Z",
         DST_DEFAULT,
         {"2027-02-01T00:00:00.000+00:00"}},
        {"@weekly",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-03T00:00:00.000+00:00"}},
        {"@hourly",
         "UTC",
         "2027-01-01T00:00:00.001Z",
         DST_DEFAULT,
         {"2027-01-01T01:00:00.000+00:00"}},
        {"@yearly",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2028-01-01T00:00:00.000+00:00"}},
        /* strictly after: the start's own second is not a fire time */
        {"* * * * * *",
         "UTC",
         "2027-01-01T00:00:00.999Z",
         DST_DEFAULT,
         {"2027-01-01T00:00:01.000+00:00", "2027-01-01T00:00:02.000+00:00"}},
        {"10-20/5 * * * *",
         "UTC",
         "2027-01-01T00:12:00Z",
         DST_DEFAULT,
         {"2027-01-01T00:15:00.000+00:00", "2027-01-01T00:20:00.000+00:00",
          "2027-01-01T01:10:00.000+00:00"}},
        {"50/5 * * * *",
         "UTC",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {"2027-01-01T00:50:00.000+00:00", "2027-01-01T00:55:00.000+00:00",
          "2027-01-01T01:50:00.000+00:00"}},
    };
    RUN(cases);
}

Test(cron, impossible_never_fire)
{
    static const struct next_case cases[] = {
        {"0 0 30 2 *", "UTC", "2027-01-01T00:00:00Z", DST_DEFAULT, {NULL}},
        {"0 0 31 4,6,9,11 *",
         "Europe/Berlin",
         "2027-01-01T00:00:00Z",
         DST_DEFAULT,
         {NULL}},
        {"0 0 30W 2 *", "UTC", "2027-01-01T00:00:00Z", DST_DEFAULT, {NULL}},
        {"0 0 L-30 2,4 *", "UTC", "2027-01-01T00:00:00Z", DST_DEFAULT, {NULL}},
    };
    RUN(cases);
    cron_expr *e;
    tz_t *z;
    cr_assert_eq(cron_parse("0 0 29 2 *", &e, NULL), RMQS_OK);
    cr_assert_eq(tz_open("UTC", &z, NULL), RMQS_OK);
    cr_expect(cron_ever_fires(e, z, cron_default_dst(e)),
              "29 February fires in leap years");
    cron_free(e);
    tz_free(z);
}

Test(cron, default_dst_rules)
{
    static const struct {
        const char *expr;
        bool wild;
    } cases[] = {
        {"30 2 * * *", false}, {"0 1,2 * * *", false}, {"0 1-3 * * *", false},
        {"0 * * * *", true},   {"0 */2 * * *", true},  {"0 1-23/2 * * *", true},
        {"0 3/4 * * *", true}, {"* * * * * *", true},  {"*/5 7 * * *", false},
        {"@daily", false},     {"@hourly", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cron_expr *e;
        cr_assert_eq(cron_parse(cases[i].expr, &e, NULL), RMQS_OK, "%s",
                     cases[i].expr);
        cron_dst d = cron_default_dst(e);
        cr_expect_eq(d.skipped,
                     cases[i].wild ? CRON_SKIPPED_SKIP : CRON_SKIPPED_NEXT,
                     "%s", cases[i].expr);
        cr_expect_eq(d.repeated,
                     cases[i].wild ? CRON_REPEATED_BOTH : CRON_REPEATED_FIRST,
                     "%s", cases[i].expr);
        cron_free(e);
    }
}

Test(cron, parse_errors_name_position_and_field)
{
    static const struct {
        const char *expr, *message;
    } cases[] = {
        {"0 0 32 * *", "position 5 (day-of-month): 32 is out of 1-31"},
        {"61 * * * *", "position 1 (minute): 61 is out of 0-59"},
        {"0 24 * * *", "position 3 (hour): 24 is out of 0-23"},
        {"0 0 * 13 *", "position 7 (month): 13 is out of 1-12"},
        {"0 0 * * 8", "position 9 (day-of-week): 8 is out of 0-7"},
        {"60 0 0 * * *", "position 1 (second): 60 is out of 0-59"},
        {"0 0 0 * *", "position 5 (day-of-month): 0 is out of 1-31"},
        {"*/0 * * * *", "position 3 (minute): a step needs a number in 1-60"},
        {"5-2 * * * *", "position 3 (minute): range 5-2 is backwards"},
        {"? * * * *", "position 1 (minute): ? is only allowed in day-of-month "
                      "and day-of-week"},
        {"0 0 * * 1#6", "position 11 (day-of-week): x#n needs n in 1-5"},
        {"0 0 * FOO *", "position 7 (month): unexpected \"FOO\""},
        {"0 0 1,,2 * *", "position 7 (day-of-month): an empty list item"},
        {"0 0 * * 1-", "position 11 (day-of-week): a value is missing"},
        {"0 0 * * MON-", "position 13 (day-of-week): a value is missing"},
        {"0 0 L-31 * *", "position 7 (day-of-month): L-n needs n in 0-30"},
        {"0 0 1x * *", "position 6 (day-of-month): unexpected \"x\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cron_expr *e = (cron_expr *)1;
        rmqs_error err = {0};
        cr_expect_eq(cron_parse(cases[i].expr, &e, &err), RMQS_EINVAL, "%s",
                     cases[i].expr);
        cr_expect_null(e, "%s: *out is NULL on error", cases[i].expr);
        cr_expect_str_eq(err.field, "cron", "%s", cases[i].expr);
        cr_expect_str_eq(err.message, cases[i].message, "%s", cases[i].expr);
    }
    static const char *const bad[] = {
        "",          "   ",          "* * * *",  "* * * * * * *",
        "@every 5m", "@daily extra", "0 0 * * L"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cron_expr *e = NULL;
        rmqs_error err = {0};
        cr_expect_eq(cron_parse(bad[i], &e, &err), RMQS_EINVAL, "\"%s\"",
                     bad[i]);
        cr_expect(strstr(err.message, "position ") != NULL, "\"%s\": %s",
                  bad[i], err.message);
    }
}
