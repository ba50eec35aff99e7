/*
 * test_stats.c - service/dispatch/stats.c's pure parts: the fixed ring of samples
 * and the per-interval arithmetic (counter differences, lateness
 * percentiles from histogram bucket differences).
 *
 * What stats.h promises, and how a test sees it:
 *   - the ring holds at most its capacity, drops the oldest first, and
 *     stats_ring_since gives the samples after a time, oldest first, the
 *     newest ones when the room is short;
 *   - stats_quantile interpolates inside the bucket holding the rank (from
 *     0 for the first), answers the last bound for the +Inf bucket, and -1
 *     for an empty histogram;
 *   - stats_sample_between counts what happened between two snapshots
 *     only, so lateness of an earlier interval does not leak into the next.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "metrics.h"
#include "stats.h"

static stats_sample at(int64_t t)
{
    stats_sample s = {.t_ms = t, .scheduled = (uint64_t)t, .pending = -1};
    return s;
}

Test(stats, ring_keeps_the_newest_capacity_samples)
{
    stats_ring *r = stats_ring_new(3);
    stats_sample out[8];

    cr_assert_not_null(r);
    cr_assert_eq(stats_ring_len(r), 0);
    cr_assert_eq(stats_ring_since(r, 0, out, 8), 0);
    for (int64_t t = 1; t <= 5; t++) {
        stats_sample s = at(t * 10);
        stats_ring_push(r, &s);
    }
    cr_assert_eq(stats_ring_len(r), 3);
    cr_assert_eq(stats_ring_since(r, 0, out, 8), 3);
    cr_assert_eq(out[0].t_ms, 30);
    cr_assert_eq(out[1].t_ms, 40);
    cr_assert_eq(out[2].t_ms, 50);
    cr_assert_eq(out[2].scheduled, 50);
    stats_ring_free(r);
}

Test(stats, ring_since_skips_older_and_keeps_newest_when_short)
{
    stats_ring *r = stats_ring_new(10);
    stats_sample out[10];

    for (int64_t t = 1; t <= 7; t++) {
        stats_sample s = at(t * 10);
        stats_ring_push(r, &s);
    }
    cr_assert_eq(stats_ring_since(r, 40, out, 10), 3); /* 50, 60, 70 */
    cr_assert_eq(out[0].t_ms, 50);
    cr_assert_eq(stats_ring_since(r, 70, out, 10), 0);
    cr_assert_eq(stats_ring_since(r, 0, out, 2), 2);
    cr_assert_eq(out[0].t_ms, 60);
    cr_assert_eq(out[1].t_ms, 70);
    stats_ring_free(r);
    cr_assert_null(stats_ring_new(0));
}

Test(stats, quantile_interpolates_inside_the_bucket)
{
    const double bounds[] = {10, 20, 40};
    /* 10 in (0,10], 10 in (10,20], 0 in (20,40], 0 above */
    uint64_t counts[] = {10, 10, 0, 0};

    cr_assert_float_eq(stats_quantile(counts, bounds, 3, 0.5), 10.0, 1e-9);
    cr_assert_float_eq(stats_quantile(counts, bounds, 3, 0.25), 5.0, 1e-9);
    cr_assert_float_eq(stats_quantile(counts, bounds, 3, 0.9), 18.0, 1e-9);
    /* all in one bucket: 99 % of the way through it */
    uint64_t one[] = {0, 0, 100, 0};
    cr_assert_float_eq(stats_quantile(one, bounds, 3, 0.99), 39.8, 1e-9);
    cr_assert_float_eq(stats_quantile(one, bounds, 3, 0.5), 30.0, 1e-9);
}

Test(stats, quantile_of_inf_bucket_and_of_nothing)
{
    const double bounds[] = {10, 20};
    uint64_t above[] = {1, 0, 9};
    uint64_t none[] = {0, 0, 0};

    cr_assert_float_eq(stats_quantile(above, bounds, 2, 0.5), 20.0, 1e-9);
    cr_assert_float_eq(stats_quantile(above, bounds, 2, 0.05), 5.0, 1e-9);
    cr_assert_eq(stats_quantile(none, bounds, 2, 0.5), -1);
}

Test(stats, sample_counts_only_the_interval)
{
    metrics_snapshot a, b;
    stats_sample s;
    size_t nb;
    const double *bounds = metrics_late_bounds_ms(&nb);

    cr_assert_eq(nb + 1, METRICS_LATE_BUCKETS);
    cr_assert_float_eq(bounds[0], 1.0, 1e-9);
    memset(&a, 0, sizeof(a));
    a.scheduled = 100;
    a.sent = 90;
    a.failed = 1;
    a.late[10] = 50; /* an earlier interval: 1-2.5 s late */
    b = a;
    b.scheduled = 130;
    b.sent = 110;
    b.cancelled = 4;
    b.late[0] += 20; /* this interval: 20 sends within 1 ms */
    stats_sample_between(&a, &b, 12345, 7, &s);
    cr_assert_eq(s.t_ms, 12345);
    cr_assert_eq(s.scheduled, 30);
    cr_assert_eq(s.sent, 20);
    cr_assert_eq(s.failed, 0);
    cr_assert_eq(s.cancelled, 4);
    cr_assert_eq(s.pending, 7);
    cr_assert(s.late_p99_ms <= 1.0, "p99 %f", s.late_p99_ms);
    cr_assert_float_eq(s.late_p50_ms, 0.5, 1e-9);

    stats_sample_between(&b, &b, 1, -1, &s); /* nothing happened */
    cr_assert_eq(s.sent, 0);
    cr_assert_eq(s.late_p50_ms, -1);
    cr_assert_eq(s.late_p90_ms, -1);
    cr_assert_eq(s.pending, -1);
}
