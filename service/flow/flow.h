/*
 * flow.h - flow control at dispatch: when a claimed job may go out under
 * the limits it matches (token buckets, one per limit or per key value),
 * and which limit holds it back.
 *
 * Why a module: the dispatcher must decide for every job it claims, at
 * claim time and without waiting for anything, whether a limit lets it go
 * now, a little later (still within the claim's lookahead: it waits in
 * memory for its slot) or much later (it goes back to the store, pending,
 * with held_by and its slot as its due time, where it can be seen,
 * searched, cancelled, and claimed again when its slot comes). The rules
 * are pure arithmetic on times the caller passes in, tested alone
 * (tests/unit/test_flow.c).
 *
 * The bucket is GCRA (the generic cell rate algorithm, a token bucket
 * written as one time per bucket): a limit of rate r and burst b has its
 * next free slot at tat - (b - 1) / r; a job takes the slot max(its due
 * time, that), and then tat = max(tat, slot) + 1 / r. Every decision takes
 * a slot, whether the job waits for it in memory or in the store, so slots
 * never overlap and a held job's due time is when it goes: it comes back
 * to its slot (held_by names the limit) and takes nothing again. Jobs take
 * slots in the order they are claimed (due time, priority, fair rank), so
 * a limit's queue is first come, first served: a slot given is kept (that
 * is what keeps the rate exact across instances, and next_attempt_at
 * true). A bucket whose tat has passed is as good as new and is dropped:
 * "live buckets" are those that remember something (flow_sweep drops the
 * others). A keyed limit keeps at most max_buckets live ones; past that,
 * new keys share one overflow bucket (counted).
 *
 * Not thread-safe for its decisions: the dispatcher's feeder thread alone
 * calls flow_set_limits and flow_admit; flow_stats may be called from any
 * thread (an internal mutex guards what it reads).
 */
#ifndef RMQS_FLOW_H
#define RMQS_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "limit.h"
#include "rmqs.h"

typedef struct flow flow_t;

flow_t *flow_new(void);
void flow_free(flow_t *f);

/* Replace the limits with limits[0..n) (taken over: each is zeroed) and
 * their canonical specs (copied). A limit of a name set before keeps its
 * buckets (the slots it gave) unless its key changed, and its counts if
 * its spec is the same; the others start full. RMQS_ENOMEM leaves the old
 * set. */
rmqs_rc flow_set_limits(flow_t *f, limit_t *limits, const char *const *specs,
                        size_t n);

/* How many limits are set. */
size_t flow_limit_count(const flow_t *f);

/* Drop the idle buckets of the keyed limits that are half full or more
 * (at most every 100 ms each): before a claim's verdicts, never between
 * flow_touched and the last flow_admit of a claim. Feeder thread. */
void flow_sweep(flow_t *f, int64_t now_ms);

typedef struct flow_verdict {
    int64_t send_at;   /* wall ms the job may go out at, >= its due_at */
    bool hold;         /* send_at is past the horizon: give it back */
    const char *limit; /* the limit that delays it most (borrowed from f
                          until the next flow_set_limits), or NULL when
                          no limit delays it (send_at == max(due, now)) */
    /* The first matching limit with hold_when_queue_ready_over, which the
     * publisher checks before it publishes (borrowed as limit), or NULL: */
    const char *hold_limit;
    const char *hold_queue;
    int64_t hold_messages;
} flow_verdict;

/*
 * Decide for job j, claimed at now_ms, that the caller can keep in memory
 * until horizon_ms (the claim's lookahead): the verdict in *v. A job no
 * limit matches goes at max(due_at, now_ms). A job some limits match takes
 * the earliest slot all of them have free (from each): within the horizon
 * it is granted, past it held (send_at is its slot, its due time in the
 * store). A job whose held_by names a matching limit comes back for the
 * slot it was given: it goes at max(due_at, now_ms) and takes nothing
 * (more than 250 ms late, it takes a new slot).
 */
void flow_admit(flow_t *f, const job_t *j, int64_t now_ms, int64_t horizon_ms,
                flow_verdict *v);

/*
 * Shared buckets (several instances on one database): the buckets the
 * jobs jobs[0..n) fall in, each once, into out[0..cap) (their state is
 * read and written through tat, in microseconds on the dispatcher's
 * clock); returns how many (at most cap). The caller puts
 * the shared state in, calls flow_admit for the jobs, and takes the state
 * out, all while the store holds the buckets locked. Feeder thread.
 */
typedef struct flow_bucket_ref {
    const char *limit; /* borrowed from f until the next flow_set_limits */
    char key[LIMIT_KEY_VALUE_MAX + 1]; /* "" for an unkeyed limit and the
                                          overflow bucket */
    int64_t *tat;                      /* the bucket in f */
} flow_bucket_ref;

size_t flow_touched(flow_t *f, const job_t *const *jobs, size_t n,
                    int64_t now_ms, flow_bucket_ref *out, size_t cap);

/* Count a job held back by limit's queue hold (the publisher's). Any
 * thread. */
void flow_count_held(flow_t *f, const char *limit);

/* What one limit did, for /metrics, /limits and the dashboard. */
typedef struct flow_limit_stats {
    char name[LIMIT_NAME_MAX + 1];
    uint64_t granted;    /* jobs let out since the limit was set */
    uint64_t held;       /* times a job was held back (given back) */
    uint64_t delayed;    /* jobs let out later than due, within the
                           lookahead */
    uint64_t overflow;   /* jobs of a new key put in the overflow bucket */
    size_t buckets;      /* live buckets now */
    double rate_now;     /* jobs let out per second over the last second
                           or so */
    uint64_t wait_count; /* jobs let out that a limit had held back */
    int64_t wait_p50_ms, wait_p99_ms; /* their wait in all, as the upper
                           bound of the histogram's bucket (-1: none; the
                           last bound for the +Inf bucket) */
} flow_limit_stats;

/* Up to cap limits' stats into out (name order as set); returns how many
 * limits there are. Any thread. */
size_t flow_stats(flow_t *f, int64_t now_ms, flow_limit_stats *out, size_t cap);

/* One limit's stats; false if f has no limit of that name (yet). Any
 * thread. */
bool flow_stats_of(flow_t *f, const char *name, int64_t now_ms,
                   flow_limit_stats *out);

/* The limits' metrics in the Prometheus text format (rmqs_limit_*:
 * granted, held, overflow, live buckets, rate over the last second, and
 * the wait histogram), malloc'd; NULL on ENOMEM. Any thread. */
char *flow_metrics_text(flow_t *f, int64_t now_ms);

#endif
