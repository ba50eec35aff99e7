/*
 * stats.h - the history behind GET /stats: every interval (10 s by default,
 * --stats-interval-ms) a sample of the counters the service already keeps
 * (metrics.h: jobs scheduled, sent, failed, cancelled, the publish
 * lateness histogram) turned into what happened in that interval, plus the
 * pending gauge, in a fixed ring of STATS_RING_SAMPLES samples (6 h at
 * 10 s) allocated once. The dashboard's Overview charts draw it; no
 * external Prometheus needed. It lives in memory: a restart starts an
 * empty history.
 *
 * Why a module: the ring and the percentile arithmetic are pure and tested
 * on their own (tests/unit/test_stats.c); the sampler is a thread of its
 * own that only reads atomics (metrics_read) and the store's counts, so
 * the dispatcher's publish path never waits on anything of it. The ring's
 * mutex is shared by the sampler (one push per interval) and HTTP readers
 * (one copy per GET /stats), nobody else.
 */
#ifndef RMQS_STATS_H
#define RMQS_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "rmqs.h"
#include "store.h"

#define STATS_RING_SAMPLES 2160 /* 6 h of 10 s samples */

/* What happened in one interval, ending at t_ms (wall clock, ms). */
typedef struct stats_sample {
    int64_t t_ms;
    uint64_t scheduled, sent, failed, cancelled; /* jobs, in the interval */
    int64_t pending; /* pending jobs at t_ms; -1 if the store did not say */
    /* publish lateness of the jobs sent in the interval (from histogram
     * bucket differences, interpolated inside a bucket); -1: none sent */
    double late_p50_ms, late_p90_ms, late_p99_ms;
} stats_sample;

/* ---- the pure parts ----------------------------------------------------- */

typedef struct stats_ring stats_ring;

/* A ring of cap (>= 1) samples, allocated once; NULL on ENOMEM. */
stats_ring *stats_ring_new(size_t cap);
void stats_ring_free(stats_ring *r);
/* Append s, dropping the oldest once the ring is full. */
void stats_ring_push(stats_ring *r, const stats_sample *s);
/* Samples held (<= cap). */
size_t stats_ring_len(const stats_ring *r);
/* Copy the samples with t_ms > since_ms, oldest first, into out (room for
 * max); returns how many were copied (the newest ones if more match). */
size_t stats_ring_since(const stats_ring *r, int64_t since_ms,
                        stats_sample *out, size_t max);

/* The q-quantile (0 < q < 1) of a histogram given per bucket (counts[i]
 * observations <= bounds[i] and above bounds[i-1]; counts[n_bounds]: above
 * every bound): linear inside the bucket that holds it, from 0 for the
 * first; the last bound for the +Inf bucket. -1 if counts are all 0. */
double stats_quantile(const uint64_t *counts, const double *bounds,
                      size_t n_bounds, double q);

/* The sample of the interval from prev to cur (counters that went back,
 * which they never do, count 0), at t_ms with pending. */
void stats_sample_between(const metrics_snapshot *prev,
                          const metrics_snapshot *cur, int64_t t_ms,
                          int64_t pending, stats_sample *out);

/* ---- the sampler -------------------------------------------------------- */

typedef struct stats stats_t;

/* A sampler of st (borrowed, outlives it) every interval_ms (>= 1). NULL on
 * ENOMEM. */
stats_t *stats_new(store_t *st, int64_t interval_ms);
rmqs_rc stats_start(stats_t *s);
/* Stop the thread (if started) and free; NULL is fine. */
void stats_free(stats_t *s);
int64_t stats_interval_ms(const stats_t *s);
/* The samples of the last window_ms (t_ms > now_ms - window_ms), oldest
 * first, in a malloc'd *out (caller frees; NULL when *n is 0). */
rmqs_rc stats_window(stats_t *s, int64_t now_ms, int64_t window_ms,
                     stats_sample **out, size_t *n);

#endif
