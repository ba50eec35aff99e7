/*
 * test_failgroup.c - failgroup.c: the normalised error (ids and numbers
 * out, codes and words kept) and the groups (by exchange and normalised
 * error, counted, the largest first, each with its latest job, at most
 * max).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "failgroup.h"

static void expect_norm(const char *in, const char *want)
{
    char *got = failgroup_normalise(in);

    cr_assert_not_null(got);
    cr_expect_str_eq(got, want, "normalise(\"%s\")", in ? in : "(null)");
    free(got);
}

Test(failgroup, normalise_keeps_codes_and_words_drops_ids)
{
    expect_norm(NULL, "");
    expect_norm("", "");
    expect_norm("312 NO_ROUTE", "312 NO_ROUTE");
    expect_norm("404 NOT_FOUND - no exchange 'orders' in vhost '/'",
                "404 NOT_FOUND - no exchange 'orders' in vhost '/'");
    expect_norm("404 NOT_FOUND - no exchange 'tmp-3f2a9c1d' in vhost '/'",
                "404 NOT_FOUND - no exchange '#' in vhost '/'");
    expect_norm("message 134217728 bytes larger than configured max size",
                "message # bytes larger than configured max size");
    expect_norm("job 01936f3a-5b1c-7d2e-9f00-1a2b3c4d5e6f refused",
                "job # refused");
    expect_norm("channel 3 closed: 406 PRECONDITION_FAILED",
                "channel 3 closed: 406 PRECONDITION_FAILED");
    expect_norm("missed its fire time by more than misfire_grace_ms",
                "missed its fire time by more than misfire_grace_ms");
}

Test(failgroup, groups_count_and_order)
{
    failgroup_in in[] = {
        {"id-1", "orders", "312 NO_ROUTE", 900},
        {"id-2", "orders", "312 NO_ROUTE", 950},
        {"id-3", "billing", "404 NOT_FOUND - no exchange 'x1234' in vhost '/'",
         500},
        {"id-4", "billing", "404 NOT_FOUND - no exchange 'x9876' in vhost '/'",
         700},
        {"id-5", "orders", "312 NO_ROUTE", 800},
        {"id-6", "billing", "312 NO_ROUTE", 1000},
        {"id-7", "", NULL, 100},
    };
    failgroup *g = NULL;
    size_t n = 0;

    cr_assert_eq(failgroup_build(in, 7, 20, &g, &n), RMQS_OK);
    cr_assert_eq(n, 4);
    cr_expect_str_eq(g[0].exchange, "orders");
    cr_expect_str_eq(g[0].error, "312 NO_ROUTE");
    cr_expect_eq(g[0].count, 3);
    cr_expect_eq(g[0].last_failed_at, 950);
    cr_expect_str_eq(g[0].example_job_id, "id-2");
    cr_expect_str_eq(g[1].exchange, "billing");
    cr_expect_str_eq(g[1].error,
                     "404 NOT_FOUND - no exchange '#' in vhost '/'");
    cr_expect_eq(g[1].count, 2);
    cr_expect_eq(g[1].last_failed_at, 700);
    cr_expect_str_eq(g[1].example_job_id, "id-4");
    /* two of one job each: the most recent first */
    cr_expect_str_eq(g[2].exchange, "billing");
    cr_expect_str_eq(g[2].error, "312 NO_ROUTE");
    cr_expect_eq(g[2].count, 1);
    cr_expect_str_eq(g[3].exchange, "");
    cr_expect_str_eq(g[3].error, "");
    cr_expect_str_eq(g[3].example_job_id, "id-7");
    failgroup_free(g, n);

    /* at most max, the largest */
    cr_assert_eq(failgroup_build(in, 7, 2, &g, &n), RMQS_OK);
    cr_assert_eq(n, 2);
    cr_expect_eq(g[0].count, 3);
    cr_expect_eq(g[1].count, 2);
    failgroup_free(g, n);

    cr_assert_eq(failgroup_build(in, 0, 20, &g, &n), RMQS_OK);
    cr_expect_eq(n, 0);
    cr_expect_null(g);
}
