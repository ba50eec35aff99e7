/*
 * stats.c - the sampled history of GET /stats (see stats.h).
 *
 * The sampler wakes every interval on the monotonic clock, reads the
 * counters (atomics, no lock) and the store's counts (the same cheap read
 * as /metrics: a table kept current, not a count), subtracts the previous
 * reading and pushes the difference. Intervals are counted from the
 * thread's start, so a slow tick does not shift the next ones.
 */
#include "stats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"
#include "worker.h"

/* ---- ring ---------------------------------------------------------------- */

struct stats_ring {
    stats_sample *s;       /* cap slots */
    size_t cap, head, len; /* head: the next slot written */
};

stats_ring *stats_ring_new(size_t cap)
{
    stats_ring *r;

    if (cap == 0)
        return NULL;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->s = calloc(cap, sizeof(*r->s));
    if (r->s == NULL) {
        free(r);
        return NULL;
    }
    r->cap = cap;
    return r;
}

void stats_ring_free(stats_ring *r)
{
    if (r == NULL)
        return;
    free(r->s);
    free(r);
}

void stats_ring_push(stats_ring *r, const stats_sample *s)
{
    r->s[r->head] = *s;
    r->head = (r->head + 1) % r->cap;
    if (r->len < r->cap)
        r->len++;
}

size_t stats_ring_len(const stats_ring *r)
{
    return r->len;
}

size_t stats_ring_since(const stats_ring *r, int64_t since_ms,
                        stats_sample *out, size_t max)
{
    size_t first = (r->head + r->cap - r->len) % r->cap; /* the oldest */
    size_t skip = 0, n;

    /* samples are in time order: skip the old ones from the start */
    while (skip < r->len && r->s[(first + skip) % r->cap].t_ms <= since_ms)
        skip++;
    n = r->len - skip;
    if (n > max) { /* keep the newest */
        skip += n - max;
        n = max;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = r->s[(first + skip + i) % r->cap];
    return n;
}

/* ---- arithmetic ---------------------------------------------------------- */

double stats_quantile(const uint64_t *counts, const double *bounds,
                      size_t n_bounds, double q)
{
    uint64_t total = 0, below = 0;
    double rank;

    for (size_t i = 0; i <= n_bounds; i++)
        total += counts[i];
    if (total == 0 || n_bounds == 0)
        return -1;
    rank = q * (double)total;
    for (size_t i = 0; i <= n_bounds; i++) {
        if (counts[i] == 0 || (double)(below + counts[i]) < rank) {
            below += counts[i];
            continue;
        }
        if (i == n_bounds) /* above every bound: the best we can say */
            return bounds[n_bounds - 1];
        double lo = i == 0 ? 0 : bounds[i - 1], hi = bounds[i];
        return lo + (hi - lo) * ((rank - (double)below) / (double)counts[i]);
    }
    return bounds[n_bounds - 1]; /* not reached: rank <= total */
}

static uint64_t diff(uint64_t cur, uint64_t prev)
{
    return cur > prev ? cur - prev : 0;
}

void stats_sample_between(const metrics_snapshot *prev,
                          const metrics_snapshot *cur, int64_t t_ms,
                          int64_t pending, stats_sample *out)
{
    uint64_t late[METRICS_LATE_BUCKETS];
    size_t nb;
    const double *bounds = metrics_late_bounds_ms(&nb);

    memset(out, 0, sizeof(*out));
    out->t_ms = t_ms;
    out->scheduled = diff(cur->scheduled, prev->scheduled);
    out->sent = diff(cur->sent, prev->sent);
    out->failed = diff(cur->failed, prev->failed);
    out->cancelled = diff(cur->cancelled, prev->cancelled);
    out->pending = pending;
    for (size_t i = 0; i < METRICS_LATE_BUCKETS; i++)
        late[i] = diff(cur->late[i], prev->late[i]);
    out->late_p50_ms = stats_quantile(late, bounds, nb, 0.50);
    out->late_p90_ms = stats_quantile(late, bounds, nb, 0.90);
    out->late_p99_ms = stats_quantile(late, bounds, nb, 0.99);
}

/* ---- sampler ------------------------------------------------------------- */

struct stats {
    store_t *st; /* borrowed */
    int64_t interval_ms;
    worker_t w;              /* the sampler thread; w.mu guards only stop */
    pthread_mutex_t ring_mu; /* the ring: sampler pushes, readers copy */
    stats_ring *ring;
};

static int64_t pending_now(store_t *st)
{
    int64_t counts[5];

    return store_counts(st, counts) == RMQS_OK ? counts[JOB_PENDING] : -1;
}

static void *stats_main(void *arg)
{
    stats_t *s = arg;
    metrics_snapshot prev, cur;
    int64_t next = tu_mono_ms() + s->interval_ms;

    metrics_read(&prev);
    for (;;) {
        int64_t wait = next - tu_mono_ms();
        stats_sample sample;

        if (wait > 0 && worker_sleep(&s->w, wait))
            break;
        metrics_read(&cur);
        stats_sample_between(&prev, &cur, tu_now_ms(), pending_now(s->st),
                             &sample);
        prev = cur;
        pthread_mutex_lock(&s->ring_mu);
        stats_ring_push(s->ring, &sample);
        pthread_mutex_unlock(&s->ring_mu);
        next += s->interval_ms;
        if (next < tu_mono_ms()) /* fell behind (a stopped process): skip */
            next = tu_mono_ms() + s->interval_ms;
    }
    return NULL;
}

stats_t *stats_new(store_t *st, int64_t interval_ms)
{
    stats_t *s;

    if (interval_ms < 1)
        return NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->st = st;
    s->interval_ms = interval_ms;
    s->ring = stats_ring_new(STATS_RING_SAMPLES);
    if (s->ring == NULL || pthread_mutex_init(&s->ring_mu, NULL) != 0) {
        stats_ring_free(s->ring);
        free(s);
        return NULL;
    }
    if (worker_init(&s->w, false) != RMQS_OK) {
        pthread_mutex_destroy(&s->ring_mu);
        stats_ring_free(s->ring);
        free(s);
        return NULL;
    }
    return s;
}

rmqs_rc stats_start(stats_t *s)
{
    return worker_start(&s->w, "rmqs-stats", stats_main, s);
}

void stats_free(stats_t *s)
{
    if (s == NULL)
        return;
    worker_stop(&s->w);
    worker_destroy(&s->w);
    pthread_mutex_destroy(&s->ring_mu);
    stats_ring_free(s->ring);
    free(s);
}

int64_t stats_interval_ms(const stats_t *s)
{
    return s->interval_ms;
}

rmqs_rc stats_window(stats_t *s, int64_t now_ms, int64_t window_ms,
                     stats_sample **out, size_t *n)
{
    stats_sample *buf = malloc(STATS_RING_SAMPLES * sizeof(*buf));

    *out = NULL;
    *n = 0;
    if (buf == NULL)
        return RMQS_ENOMEM;
    pthread_mutex_lock(&s->ring_mu);
    *n = stats_ring_since(s->ring, now_ms - window_ms, buf, STATS_RING_SAMPLES);
    pthread_mutex_unlock(&s->ring_mu);
    if (*n == 0) {
        free(buf);
        return RMQS_OK;
    }
    *out = buf;
    return RMQS_OK;
}
