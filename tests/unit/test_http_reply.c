/*
 * test_http_reply.c - the one reader of an integer query value
 * (http_parse_int in http_reply.c), as GET /jobs?limit, /jobs/count?max,
 * /schedules?limit, /schedules/{name}?count and /stats?window use it:
 * digits only, the bounds, and how many leading zeros pass.
 */
#include <criterion/criterion.h>

#include <stdint.h>

#include "http_reply.h"

/* text read with the bounds [1, hi]: ok, and the value if so. */
static const struct {
    const char *text;
    int64_t hi;
    bool ok;
    int64_t want;
} int_cases[] = {
    {"1", 1000, true, 1},
    {"100", 1000, true, 100},
    {"1000", 1000, true, 1000},
    {"01000", 1000, true, 1000}, /* one digit more than 1000 has */
    {"00001", 1000, true, 1},
    {"000001", 1000, false, 0}, /* two more: refused (was let in by
                                    /schedules' limit and count) */
    {"001000", 1000, false, 0},
    {"0", 1000, false, 0},
    {"1001", 1000, false, 0},
    {"99999", 1000, false, 0},
    {"99999999999999999999999", 1000, false, 0},
    {"", 1000, false, 0},
    {"+1", 1000, false, 0},
    {"-1", 1000, false, 0},
    {" 1", 1000, false, 0},
    {"1 ", 1000, false, 0},
    {"1e3", 1000, false, 0},
    {"0x10", 1000, false, 0},
    {"12a", 1000, false, 0},
    /* /jobs/count's max and /stats' window */
    {"10000000", 10000000, true, 10000000},
    {"010000000", 10000000, true, 10000000},
    {"0010000000", 10000000, false, 0},
    {"10000001", 10000000, false, 0},
    {"21600", 21600, true, 21600},
    {"021600", 21600, true, 21600},
    {"0021600", 21600, false, 0},
    {"21601", 21600, false, 0},
};

Test(http_reply, parse_int)
{
    for (size_t i = 0; i < sizeof(int_cases) / sizeof(int_cases[0]); i++) {
        int64_t v = -7;
        bool ok = http_parse_int(int_cases[i].text, 1, int_cases[i].hi, &v);

        cr_expect_eq(ok, int_cases[i].ok, "\"%s\": %d", int_cases[i].text, ok);
        cr_expect_eq(v, int_cases[i].ok ? int_cases[i].want : -7,
                     "\"%s\": %lld", int_cases[i].text, (long long)v);
    }
}
