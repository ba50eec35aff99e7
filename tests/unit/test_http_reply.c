/*
 * test_http_reply.c - the one reader of an integer query value
 * (http_parse_int in http_reply.c), as GET /jobs?limit, /jobs/count?max,
 * /schedules?limit, /schedules/{name}?count and /stats?window use it:
 * digits only, the bounds, and how many leading zeros pass.
 */
#include <criterion/criterion.h>

#include <stdint.h>

#include "http_reply.h"

struct int_case {
    const char *text;
    bool ok;
    int64_t want;
};

Test(http_reply, parse_int)
{
    static const struct int_case cases[] = {
        {"1", true, 1},
        {"100", true, 100},
        {"1000", true, 1000},
        {"01000", true, 1000},   /* one digit more than 1000 has */
        {"00001", true, 1},
        {"000001", false, 0},    /* two more: refused (was let in by
                                    /schedules' limit and count) */
        {"001000", false, 0},
        {"0", false, 0},
        {"1001", false, 0},
        {"99999", false, 0},
        {"99999999999999999999999", false, 0},
        {"", false, 0},
        {"+1", false, 0},
        {"-1", false, 0},
        {" 1", false, 0},
        {"1 ", false, 0},
        {"1e3", false, 0},
        {"0x10", false, 0},
        {"12a", false, 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t v = -7;
        bool ok = http_parse_int(cases[i].text, 1, 1000, &v);
        cr_expect_eq(ok, cases[i].ok, "\"%s\": %d", cases[i].text, ok);
        cr_expect_eq(v, cases[i].ok ? cases[i].want : -7, "\"%s\": %lld",
                     cases[i].text, (long long)v);
    }
}

Test(http_reply, parse_int_wide_bounds)
{
    int64_t v = 0;

    cr_expect(http_parse_int("10000000", 1, 10000000, &v) && v == 10000000);
    cr_expect(http_parse_int("010000000", 1, 10000000, &v) && v == 10000000);
    cr_expect(!http_parse_int("10000001", 1, 10000000, &v));
    cr_expect(!http_parse_int("0010000000", 1, 10000000, &v));
    cr_expect(http_parse_int("21600", 1, 21600, &v) && v == 21600);
    cr_expect(http_parse_int("021600", 1, 21600, &v) && v == 21600);
    cr_expect(!http_parse_int("0021600", 1, 21600, &v));
    cr_expect(!http_parse_int("21601", 1, 21600, &v));
}
