/*
 * flow.c - token buckets of the limits and the verdict for a claimed job
 * (flow.h says why and how; the bucket arithmetic is GCRA in microseconds).
 */
#include "flow.h"

#include <glib.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define US 1000 /* microseconds in a ms */
#define SWEEP_EVERY_US \
    100000 /* a full keyed limit looks for idle buckets
                                  at most this often */
#define RATE_SLOTS \
    32 /* rate_now: grants per 100 ms slot (the
                                  past second and the lookahead ahead) */
#define RATE_SLOT_US 100000
#define BACK_GRACE_US \
    250000 /* a held job claimed this long after its
                                slot (a burst being held took the feeder's
                                time first, or its claimer died and the
                                lease ran out) takes a new slot: going at
                                once would exceed the rate */

/* rmqs_limit_wait_seconds: how long limits held a job in all, observed
 * when it is let out; upper bounds in ms, the last bucket +Inf. */
static const int64_t wait_bounds_ms[] = {
    10, 50, 100, 500, 1000, 5000, 10000, 30000, 60000, 300000, 1800000};
#define WAIT_N (sizeof wait_bounds_ms / sizeof wait_bounds_ms[0])

typedef struct bucket {
    int64_t tat; /* theoretical arrival time, us: the next conforming
                    instant once the burst is used up (the next free slot
                    is tat - tau) */
} bucket;

typedef struct lim {
    limit_t l;
    char *spec;
    int64_t t_us;      /* 1 / rate, us (>= 1) */
    int64_t tau_us;    /* (burst - 1) / rate, us */
    bucket one;        /* an unkeyed limit's bucket, and the overflow
                           bucket of a keyed one */
    GHashTable *keyed; /* key value -> bucket* (keyed limits) */
    int64_t swept_at;  /* us */
    uint64_t granted, held, delayed, overflow;
    int64_t slot_at[RATE_SLOTS]; /* which 100 ms slot each count is of */
    uint64_t slot_n[RATE_SLOTS];
    uint64_t wait[WAIT_N + 1]; /* per bucket, not cumulative */
    int64_t wait_sum_ms;
} lim;

struct flow {
    pthread_mutex_t mu; /* guards lims for flow_stats against a set */
    lim *lims;
    size_t n;
};

static void lim_clear(lim *x)
{
    limit_clear(&x->l);
    free(x->spec);
    if (x->keyed != NULL)
        g_hash_table_destroy(x->keyed);
    memset(x, 0, sizeof *x);
}

flow_t *flow_new(void)
{
    flow_t *f = calloc(1, sizeof *f);

    if (f != NULL)
        pthread_mutex_init(&f->mu, NULL);
    return f;
}

void flow_free(flow_t *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n; i++)
        lim_clear(&f->lims[i]);
    free(f->lims);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

size_t flow_limit_count(const flow_t *f)
{
    return f->n;
}

/* The old limit of this name, or NULL. */
static lim *find_named(flow_t *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->lims[i].l.name != NULL && strcmp(f->lims[i].l.name, name) == 0)
            return &f->lims[i];
    return NULL;
}

/* Whether two limits' keys make the same buckets. */
static bool same_key(const flow_key *a, const flow_key *b)
{
    return a->kind == b->kind &&
           (a->kind != FLOW_KEY_HEADER || strcmp(a->header, b->header) == 0);
}

rmqs_rc flow_set_limits(flow_t *f, limit_t *limits, const char *const *specs,
                        size_t n)
{
    lim *nl = n > 0 ? calloc(n, sizeof *nl) : NULL;
    lim *old;
    size_t old_n;

    if (n > 0 && nl == NULL)
        return RMQS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        nl[i].spec = strdup(specs[i]);
        if (nl[i].spec == NULL) {
            for (size_t k = 0; k < i; k++)
                free(nl[k].spec);
            free(nl);
            return RMQS_ENOMEM;
        }
    }
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < n; i++) {
        lim *x = &nl[i], *was = find_named(f, limits[i].name);

        x->l = limits[i];
        memset(&limits[i], 0, sizeof limits[i]);
        if (x->l.rate_per_s > 0) {
            double t = 1e6 / x->l.rate_per_s;
            x->t_us = t < 1 ? 1 : (int64_t)(t + 0.5);
            x->tau_us = (int64_t)((double)(x->l.burst - 1) * t + 0.5);
        }
        if (was != NULL && strcmp(was->spec, x->spec) == 0) {
            /* unchanged: its counts go on */
            x->granted = was->granted;
            x->held = was->held;
            x->delayed = was->delayed;
            x->overflow = was->overflow;
            memcpy(x->slot_at, was->slot_at, sizeof x->slot_at);
            memcpy(x->slot_n, was->slot_n, sizeof x->slot_n);
            memcpy(x->wait, was->wait, sizeof x->wait);
            x->wait_sum_ms = was->wait_sum_ms;
        }
        if (was != NULL && same_key(&was->l.key, &x->l.key)) {
            /* the slots it gave are kept, whatever else changed (as the
             * rows of a shared store are): a new rate applies from the
             * next free slot on */
            x->one = was->one;
            x->keyed = was->keyed;
            x->swept_at = was->swept_at;
            was->keyed = NULL; /* moved */
        } else {
            x->one.tat = INT64_MIN / 2;
            if (x->l.key.kind != FLOW_KEY_NONE)
                x->keyed = g_hash_table_new_full(g_str_hash, g_str_equal,
                                                 g_free, g_free);
        }
    }
    old = f->lims;
    old_n = f->n;
    f->lims = nl;
    f->n = n;
    pthread_mutex_unlock(&f->mu);
    for (size_t i = 0; i < old_n; i++)
        lim_clear(&old[i]);
    free(old);
    return RMQS_OK;
}

/* Drop the buckets that remember nothing (their tat has passed). */
static void sweep(lim *x, int64_t now)
{
    GHashTableIter it;
    gpointer k, v;

    x->swept_at = now;
    g_hash_table_iter_init(&it, x->keyed);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        const bucket *b = v;
        if (b->tat <= now)
            g_hash_table_iter_remove(&it);
    }
}

void flow_sweep(flow_t *f, int64_t now_ms)
{
    int64_t now = now_ms * US;

    pthread_mutex_lock(&f->mu);
    for (size_t k = 0; k < f->n; k++)
        if (f->lims[k].keyed != NULL &&
            (int64_t)g_hash_table_size(f->lims[k].keyed) >=
                f->lims[k].l.max_buckets / 2 &&
            now - f->lims[k].swept_at >= SWEEP_EVERY_US)
            sweep(&f->lims[k], now);
    pthread_mutex_unlock(&f->mu);
}

/* The bucket of job j under keyed limit x (created full); the overflow
 * bucket when max_buckets are live; NULL only out of memory (then the
 * overflow bucket too). */
static bucket *bucket_of(lim *x, const job_t *j, char *key, bool count)
{
    bucket *b;

    key[0] = '\0';
    if (x->keyed == NULL)
        return &x->one;
    (void)flow_key_value(&x->l.key, j, key, LIMIT_KEY_VALUE_MAX + 1);
    b = g_hash_table_lookup(x->keyed, key);
    if (b != NULL)
        return b;
    if ((int64_t)g_hash_table_size(x->keyed) >= x->l.max_buckets) {
        x->overflow += count; /* counted once: by flow_admit */
        key[0] = '\0';        /* the overflow bucket is the unkeyed one */
        return &x->one;
    }
    b = g_new(bucket, 1);
    b->tat = INT64_MIN / 2;
    g_hash_table_insert(x->keyed, g_strdup(key), b);
    return b;
}

static void count_grant(lim *x, int64_t at)
{
    int64_t slot = at / RATE_SLOT_US;
    int i = (int)(slot % RATE_SLOTS);

    if (x->slot_at[i] != slot) {
        x->slot_at[i] = slot;
        x->slot_n[i] = 0;
    }
    x->slot_n[i]++;
}

#define MAX_MATCH 16 /* limits one job waits for, at most (more: the first) */

/* Whether j comes back for the slot limit x gave it when it held j: its
 * held_by names x (a reschedule, retry or run clears held_by). */
static bool returning(const job_t *j, const lim *x)
{
    return j->held_by != NULL && strcmp(j->held_by, x->l.name) == 0;
}

void flow_admit(flow_t *f, const job_t *j, int64_t now_ms, int64_t horizon_ms,
                flow_verdict *v)
{
    int64_t now = now_ms * US, due = j->due_at * US;
    int64_t t0 = due > now ? due : now, send = t0;
    lim *hit[MAX_MATCH];
    bucket *bk[MAX_MATCH];
    size_t m = 0;
    const char *back = NULL; /* the limit it comes back to */

    v->send_at = t0 / US;
    v->hold = false;
    v->limit = NULL;
    v->hold_limit = v->hold_queue = NULL;
    v->hold_messages = 0;
    if (f->n == 0)
        return;
    pthread_mutex_lock(&f->mu); /* flow_stats reads the counts */
    for (size_t i = 0; i < f->n && m < MAX_MATCH; i++) {
        lim *x = &f->lims[i];
        char key[LIMIT_KEY_VALUE_MAX + 1];
        int64_t e;

        if (!limit_matches(&x->l, j->exchange ? j->exchange : "",
                           j->routing_key ? j->routing_key : ""))
            continue;
        if (x->l.hold_queue != NULL && v->hold_queue == NULL) {
            v->hold_limit = x->l.name;
            v->hold_queue = x->l.hold_queue;
            v->hold_messages = x->l.hold_messages;
        }
        if (x->t_us == 0)
            continue; /* a queue hold only */
        bk[m] = bucket_of(x, j, key, true);
        hit[m++] = x;
        if (back == NULL && returning(j, x))
            back = x->l.name;
        e = bk[m - 1]->tat - x->tau_us;
        if (e > send) { /* the one that delays it most names it */
            send = e;
            v->limit = x->l.name;
        }
    }
    if (m == 0) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    if (back != NULL && now - due > BACK_GRACE_US) {
        back = NULL; /* its slot is long gone: a new one, as a new job */
        v->limit = NULL;
        send = t0;
        for (size_t i = 0; i < m; i++) {
            int64_t e = bk[i]->tat - hit[i]->tau_us;
            if (e > send) {
                send = e;
                v->limit = hit[i]->l.name;
            }
        }
    }
    if (back) {
        /* Its slot was taken from every bucket when it was held: it goes at
         * its due time, which is that slot (or now, if late), and takes
         * nothing again. Buckets that do not know of the slot (a SQLite
         * service restarted since) put new jobs after it. */
        send = t0;
        v->limit = back;
        for (size_t i = 0; i < m; i++)
            if (bk[i]->tat < send + hit[i]->t_us)
                bk[i]->tat = send + hit[i]->t_us;
    } else {
        /* The slot is taken now, whether the job waits for it in memory or
         * in the store: every decision takes the next slot of each bucket,
         * so the slots never overlap and the held jobs' due times are when
         * they go. */
        for (size_t i = 0; i < m; i++)
            bk[i]->tat = (bk[i]->tat > send ? bk[i]->tat : send) + hit[i]->t_us;
    }
    /* round up to the ms: never before the slot */
    v->send_at = (send + US - 1) / US;
    if (v->send_at > horizon_ms) {
        v->hold = true;
        for (size_t i = 0; i < m; i++)
            hit[i]->held++;
        pthread_mutex_unlock(&f->mu);
        return;
    }
    for (size_t i = 0; i < m; i++) {
        hit[i]->granted++;
        if (send > t0)
            hit[i]->delayed++;
        count_grant(hit[i], send);
    }
    /* the wait in all (earlier holds and this one), on the limit that
     * named it */
    int64_t waited =
        j->held_ms + (v->send_at > j->due_at ? v->send_at - j->due_at : 0);
    if (waited > 0) {
        lim *x = hit[0];
        size_t b = 0;
        for (size_t i = 0; v->limit != NULL && i < m; i++)
            if (strcmp(hit[i]->l.name, v->limit) == 0)
                x = hit[i];
        while (b < WAIT_N && waited > wait_bounds_ms[b])
            b++;
        x->wait[b]++;
        x->wait_sum_ms += waited;
    }
    pthread_mutex_unlock(&f->mu);
}

size_t flow_touched(flow_t *f, const job_t *const *jobs, size_t n,
                    int64_t now_ms, flow_bucket_ref *out, size_t cap)
{
    size_t m = 0;

    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < n; i++) {
        const job_t *j = jobs[i];
        for (size_t k = 0; k < f->n; k++) {
            lim *x = &f->lims[k];
            char key[LIMIT_KEY_VALUE_MAX + 1];
            bucket *b;
            bool seen = false;

            if (x->t_us == 0 ||
                !limit_matches(&x->l, j->exchange ? j->exchange : "",
                               j->routing_key ? j->routing_key : ""))
                continue;
            b = bucket_of(x, j, key, false);
            for (size_t r = 0; r < m && !seen; r++)
                seen = out[r].tat == &b->tat;
            if (seen || m == cap)
                continue;
            out[m].limit = x->l.name;
            snprintf(out[m].key, sizeof out[m].key, "%s", key);
            out[m].tat = &b->tat;
            m++;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return m;
}

void flow_count_held(flow_t *f, const char *limit)
{
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->lims[i].l.name, limit) == 0)
            f->lims[i].held++;
    pthread_mutex_unlock(&f->mu);
}

/* x's stats into *out. f->mu held. */
static void stats_locked(const lim *x, int64_t now_ms, flow_limit_stats *out)
{
    int64_t now_slot = now_ms * US / RATE_SLOT_US;
    uint64_t sum = 0, n = 0, seen = 0;

    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", x->l.name);
    out->granted = x->granted;
    out->held = x->held;
    out->delayed = x->delayed;
    out->overflow = x->overflow;
    out->buckets =
        x->keyed != NULL ? g_hash_table_size(x->keyed) : (x->t_us > 0);
    for (int s = 0; s < RATE_SLOTS; s++)
        if (x->slot_at[s] < now_slot && x->slot_at[s] >= now_slot - 10)
            sum += x->slot_n[s];
    out->rate_now = (double)sum; /* the last 10 slots: one second */
    for (size_t b = 0; b <= WAIT_N; b++)
        n += x->wait[b];
    out->wait_count = n;
    out->wait_p50_ms = out->wait_p99_ms = -1;
    for (size_t b = 0; n > 0 && b <= WAIT_N; b++) {
        int64_t bound = wait_bounds_ms[b < WAIT_N ? b : WAIT_N - 1];
        seen += x->wait[b];
        if (out->wait_p50_ms < 0 && seen * 2 >= n)
            out->wait_p50_ms = bound;
        if (out->wait_p99_ms < 0 && seen * 100 >= n * 99)
            out->wait_p99_ms = bound;
    }
}

size_t flow_stats(flow_t *f, int64_t now_ms, flow_limit_stats *out, size_t cap)
{
    size_t n;

    pthread_mutex_lock(&f->mu);
    n = f->n;
    for (size_t i = 0; i < n && i < cap; i++)
        stats_locked(&f->lims[i], now_ms, &out[i]);
    pthread_mutex_unlock(&f->mu);
    return n;
}

bool flow_stats_of(flow_t *f, const char *name, int64_t now_ms,
                   flow_limit_stats *out)
{
    bool found = false;

    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n && !found; i++) {
        if (strcmp(f->lims[i].l.name, name) == 0) {
            stats_locked(&f->lims[i], now_ms, out);
            found = true;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return found;
}

/* Append printf-style text to a growing buffer; false once out of
 * memory. */
typedef struct text {
    char *p;
    size_t len, cap;
    bool oom;
} text;

static void add(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0,
                      fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if (t->p != NULL && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t ncap = t->cap ? t->cap * 2 : 4096;
        while (ncap < t->len + (size_t)n + 1)
            ncap *= 2;
        char *np = realloc(t->p, ncap);
        if (np == NULL) {
            t->oom = true;
            return;
        }
        t->p = np;
        t->cap = ncap;
    }
}

/* A limit's name as a Prometheus label value: names are [A-Za-z0-9._:-]
 * (limit_name_valid), nothing to escape. */
char *flow_metrics_text(flow_t *f, int64_t now_ms)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"rmqs_limit_granted_total", "counter",
         "Jobs a limit let out (published or about to be)"},
        {"rmqs_limit_held_total", "counter",
         "Times a limit held a job back (given back to the store, pending)"},
        {"rmqs_limit_overflow_total", "counter",
         "Jobs of a new key put in the shared overflow bucket (max_buckets)"},
        {"rmqs_limit_buckets", "gauge", "Live buckets of a limit"},
        {"rmqs_limit_rate_per_second", "gauge",
         "Jobs a limit let out over the last second"},
    };
    text t = {0};
    int64_t now_slot = now_ms * US / RATE_SLOT_US;

    add(&t, "%s", "");
    pthread_mutex_lock(&f->mu);
    for (size_t k = 0; k < sizeof fam / sizeof fam[0]; k++) {
        add(&t, "# HELP %s %s\n# TYPE %s %s\n", fam[k].name, fam[k].help,
            fam[k].name, fam[k].type);
        for (size_t i = 0; i < f->n; i++) {
            const lim *x = &f->lims[i];
            double v = 0;
            switch (k) {
            case 0: v = (double)x->granted; break;
            case 1: v = (double)x->held; break;
            case 2: v = (double)x->overflow; break;
            case 3:
                v = x->keyed != NULL ? (double)g_hash_table_size(x->keyed)
                                     : (double)(x->t_us > 0);
                break;
            default:
                for (int s = 0; s < RATE_SLOTS; s++)
                    if (x->slot_at[s] < now_slot &&
                        x->slot_at[s] >= now_slot - 10)
                        v += (double)x->slot_n[s];
                break;
            }
            add(&t, "%s{limit=\"%s\"} %.17g\n", fam[k].name, x->l.name, v);
        }
    }
    add(&t, "# HELP rmqs_limit_wait_seconds How long limits held a job in "
            "all, when it was let out\n"
            "# TYPE rmqs_limit_wait_seconds histogram\n");
    for (size_t i = 0; i < f->n; i++) {
        const lim *x = &f->lims[i];
        uint64_t cum = 0;
        for (size_t b = 0; b <= WAIT_N; b++) {
            cum += x->wait[b];
            if (b < WAIT_N)
                add(&t,
                    "rmqs_limit_wait_seconds_bucket{limit=\"%s\",le=\"%g\"} "
                    "%llu\n",
                    x->l.name, (double)wait_bounds_ms[b] / 1000,
                    (unsigned long long)cum);
            else
                add(&t,
                    "rmqs_limit_wait_seconds_bucket{limit=\"%s\",le=\"+Inf\"} "
                    "%llu\n",
                    x->l.name, (unsigned long long)cum);
        }
        add(&t, "rmqs_limit_wait_seconds_sum{limit=\"%s\"} %.3f\n", x->l.name,
            (double)x->wait_sum_ms / 1000);
        add(&t, "rmqs_limit_wait_seconds_count{limit=\"%s\"} %llu\n", x->l.name,
            (unsigned long long)cum);
    }
    pthread_mutex_unlock(&f->mu);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
