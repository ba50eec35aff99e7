/*
 * store_types.h - the types the store's front (store.h) and its backends
 * (store_backend.h) both speak: options, insert requests, filters, client
 * changes, dispatcher outcomes, schedules and their advances, flow limits,
 * and the embedded migrations. What each means for a call is said at the call in
 * store.h. A header of its own so that the backends, which sit below the
 * front, need not include the front's header.
 */
#ifndef RMQS_STORE_TYPES_H
#define RMQS_STORE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "rmqs.h"

/* One embedded migration: version (>= 1, ascending) and its SQL text. */
typedef struct store_migration {
    int version;
    const char *name; /* file name, for logs and schema_migrations */
    const char *sql;
} store_migration;

typedef struct store_options {
    bool synchronous_full;    /* true: fsync every commit (default) */
    bool manual_checkpoint;   /* true: no automatic WAL checkpoints in commits;
                               the owner calls store_checkpoint() */
    int64_t lease_ms;         /* PostgreSQL: how long a claim holds without
                               renewal (0: 10000; at least 500) */
    int64_t wake_horizon_ms;  /* PostgreSQL: a commit wakes the other
                               instances (NOTIFY) only for a job due within
                               this of now: their feeders look again at least
                               every DISP_REPLAN_MS (0: every commit) */
    int64_t db_timeout_ms;    /* PostgreSQL: the longest one call may take
                               (statement_timeout; the answer is awaited a
                               second longer, then the connection is given
                               up); 0: 5000 */
    bool index_manual;        /* SQLite: no search indexer thread; the owner
                               calls store_search_index() (tests) */
    int64_t search_budget_ms; /* a list, count or search ends after this
                                 (RMQS_ETIMEDOUT; a count: capped); 0:
                                 unbounded */
    size_t page_max_bytes;    /* a page of store_list or store_schedule_list
                               stops at this many bytes of its items (0:
                               4 MiB; see store_common.h's page budgets) */
} store_options;

/*
 * One all-or-nothing request of a group commit (store_insert_batch). Any of
 * its jobs may carry an idempotency key (POST /schedule's header, a POST
 * /schedule/batch item's idempotency_key, an ingested message_id): one
 * mechanism for one job or a thousand. Per keyed job, in the request's
 * transaction: the key unknown - the job is inserted with its key row; known
 * with the same canonical request - the job is not inserted again,
 * existed[i] is set and existing[i] gets the earlier job; known with another
 * request - the whole request fails RMQS_ECONFLICT with failed_index i and
 * nothing of it is stored. Keys of one request must differ.
 */
typedef struct store_insert_req {
    const job_t *jobs; /* in: n jobs with ids assigned (borrowed) */
    size_t n;          /* in: >= 1 */
    /* in: NULL (no job keyed), or n keys, NULL where a job has none */
    const char *const *idem_keys;
    /* in: with idem_keys, n canonical requests (read where keyed) */
    const char *const *idem_requests;
    bool *existed;       /* with idem_keys: the caller's n flags (out) */
    job_t *existing;     /* with idem_keys: the caller's n zeroed jobs, the
                             earlier job where existed (caller clears) */
    rmqs_rc rc;          /* out: this request's outcome */
    size_t failed_index; /* out: on RMQS_EINVAL/ECONFLICT, which job */
    size_t nexisted;     /* out: how many jobs existed (n: none inserted) */
} store_insert_req;

/* Longest id_prefix: a whole id's hex digits. */
#define STORE_ID_PREFIX_MAX (2 * JOB_ID_BYTES)

/* The order of a page of jobs (GET /jobs?order=, issue 25); a cursor
 * holds the order it was made in (store_common.h). Zero is the default. */
typedef enum store_order {
    STORE_ORDER_DUE = 0,     /* deliver_at, then insertion (seq) */
    STORE_ORDER_DUE_DESC,    /* the newest deliver_at first, ties newest
                                 inserted first */
    STORE_ORDER_CREATED,     /* insertion order (seq), oldest first */
    STORE_ORDER_CREATED_DESC /* newest inserted first */
} store_order;

/*
 * What GET /jobs, GET /jobs/count and POST /jobs/bulk select (filled by
 * http_filter.c, the one parser); every member set must hold (AND). -1 /
 * NULL / false / "" : any, so a zeroed filter with status and source -1
 * matches every job. Strings are borrowed from the request.
 */
/* The longest store_identity, its NUL included. */
#define STORE_IDENTITY_MAX 64

typedef struct store_filter {
    int status;              /* a job_status, or -1 */
    int source;              /* a job_source, or -1 */
    const char *message_id;  /* the message_id property, or NULL */
    const char *schedule;    /* runs of this schedule (job_t.schedule), or
                               NULL (GET /jobs?schedule=) */
    const char *held_by;     /* jobs this limit held back (job_t.held_by),
                               or NULL (GET /jobs?held_by=) */
    const char *exchange;    /* exact, or NULL ("" is the default exchange) */
    const char *routing_key; /* exact, or NULL */
    bool has_deliver_from;   /* deliver_at >= deliver_from (inclusive) */
    int64_t deliver_from;
    bool has_deliver_to; /* deliver_at < deliver_to (exclusive) */
    int64_t deliver_to;
    /* the id's first hex digits, lowercase, no dashes (4 to
     * STORE_ID_PREFIX_MAX of them), or "" */
    char id_prefix[STORE_ID_PREFIX_MAX + 1];
    /* a string header whose value is exactly header_value: the name is
     * header_name[0..header_name_len) (not NUL-terminated: it is the part
     * of "name:value" before the ':'); header_name NULL: any */
    const char *header_name;
    size_t header_name_len;
    const char *header_value;
    /* a substring of the body, bytewise (so case-sensitive), of text and
     * JSON bodies only (never binary ones); valid UTF-8, at least 3
     * characters; or NULL */
    const char *q;
    /* the order of a page (store_list, store_explain); store_count
     * ignores it */
    store_order order;
} store_filter;

/* A failed job as GET /stats/failures groups it (store_failures_recent,
 * issue 25). */
typedef struct store_failure {
    char id[JOB_ID_LEN + 1];
    char *exchange;    /* owned */
    char *error;       /* owned: last_error, its first
                          JOB_ATTEMPT_ERROR_CHARS characters; NULL if none */
    int64_t failed_at; /* ms */
} store_failure;

/* Clear n failures and free the array (NULL is fine; store_common.c). */
void store_failures_free(store_failure *rows, size_t n);

/* A client's change to a job (PATCH and DELETE /jobs/{id}, POST
 * /jobs/{id}/run and /retry, POST /jobs/bulk). */
typedef enum store_change_kind {
    STORE_CHANGE_RESCHEDULE, /* pending: deliver_at and due_at set, delay_ms
                                recorded */
    STORE_CHANGE_CANCEL,     /* pending: cancelled (idempotent on a
                                cancelled job) */
    STORE_CHANGE_RUN,        /* pending: due now (deliver_at = due_at =
                                now_ms, delay_ms 0): a reschedule to now */
    STORE_CHANGE_RETRY       /* failed: pending again with attempts 0,
                                deliver_at and delay_ms as for RESCHEDULE
                                (due_at: not before now); last_error is
                                kept (history) until an attempt replaces it */
} store_change_kind;

typedef struct store_change {
    store_change_kind kind;
    int64_t deliver_at;   /* RESCHEDULE, RETRY: the new time (due_at: not
                           before now) */
    int64_t delay_ms;     /* RESCHEDULE, RETRY: as requested, for the x-delay
                           header */
    bool keep_deliver_at; /* RETRY: keep each job's deliver_at (due now
                             all the same), as a bulk retry does */
} store_change;

typedef enum store_outcome_kind {
    STORE_OUT_SENT,    /* confirmed by the broker: sent, sent_at = now,
                          held_ms and held_by (if not NULL) as given */
    STORE_OUT_RETRY,   /* the attempt failed: last_error set; failed if
                          attempts >= max_attempts, else pending at retry_at */
    STORE_OUT_RELEASE, /* not attempted after all: pending again at due_at
                          unchanged, attempts - 1 */
    STORE_OUT_EXPIRE,  /* not published: claimed after its expires_at;
                          cancelled, last_error = error (the caller's
                          reason), attempts as claimed */
    STORE_OUT_FAIL,    /* not published and never will be (the exchange
                          allow-list or the broker login refuses it):
                          failed now, last_error = error, attempts as
                          claimed */
    STORE_OUT_HOLD     /* held back by a limit (flow/flow.h): pending
                          again at due_at = retry_at, attempts - 1, held_by
                          and held_ms as given */
} store_outcome_kind;

typedef struct store_outcome {
    const char *id; /* job id text (borrowed) */
    store_outcome_kind kind;
    const char *error;   /* RETRY, EXPIRE, FAIL: why (borrowed), else NULL */
    int64_t retry_at;    /* RETRY, HOLD: next due_at */
    const char *held_by; /* SENT, HOLD: the limit that held it (borrowed),
                            or NULL (SENT: left as it was) */
    int64_t held_ms;     /* SENT, HOLD: how long limits held it in all */
} store_outcome;

typedef enum store_schedule_state {
    STORE_SCHED_ACTIVE, /* not paused, next_fire_at >= 0 */
    STORE_SCHED_PAUSED, /* paused (whatever next_fire_at) */
    STORE_SCHED_ENDED   /* not paused, next_fire_at = -1: no more runs */
} store_schedule_state;

typedef struct store_schedule {
    char *name;         /* owned */
    char *spec;         /* owned: canonical JSON of the accepted PUT body
                              (compact, sorted keys) */
    int64_t generation; /* 1 at creation, +1 at every effective change
                              (PUT with another body, PATCH) */
    int64_t created_at, updated_at; /* ms */
    bool paused;
    int64_t next_fire_at; /* the next fire time whose run is NOT yet
                              created; -1: none (ended) */
    int64_t last_fire_at; /* fire time of the last run created, -1 if none */
    char last_job_id[JOB_ID_LEN + 1]; /* "" if none */
    int last_job_status;              /* filled by store_schedule_due only: the
                              job_status of last_job_id as store_get would
                              show it (a run the dispatcher holds is
                              publishing), -1 if none or gone (purged);
                              -1 from every other call */
} store_schedule;

/* Release what s owns and zero it. Safe on a zeroed one (store_common.c). */
void store_schedule_clear(store_schedule *s);
/* Clear n schedules and free the array (NULL is fine). */
void store_schedules_free(store_schedule *rows, size_t n);

/* A schedule's recent runs as an operator reads them
 * (store_schedule_recent, issue 25): the last run whose time has come and
 * how many of its latest finished runs failed in a row. */
#define STORE_STREAK_CAP 100
typedef struct store_run_outcome {
    bool has_last;                /* false: no run due yet (or all purged) */
    char last_id[JOB_ID_LEN + 1]; /* the last run: its id, */
    int64_t last_fire_at;         /* its fire time (-1 if it has none), */
    int last_status;              /* its job_status (a run the dispatcher
                                     holds is publishing, as store_get), */
    char *last_error;             /* owned: its last_error, or NULL */
    int failure_streak;           /* 0..STORE_STREAK_CAP */
    bool streak_capped;           /* more than STORE_STREAK_CAP failed in a
                                     row: failure_streak says the cap */
} store_run_outcome;

/* Release what o owns and zero it. Safe on a zeroed one (store_common.c). */
void store_run_outcome_clear(store_run_outcome *o);

/* One advance of store_schedule_advance (store.h). */
typedef struct store_advance {
    const char *name; /* borrowed */
    int64_t generation;
    int64_t old_next;          /* the next_fire_at the caller read */
    int64_t new_next;          /* the one to store; -1: ended */
    const job_t *job;          /* borrowed, id assigned (schedule_run_id), or
                             NULL (a fire time skipped) */
    bool applied, job_existed; /* out */
} store_advance;

/* A flow limit as kept (store.h, "Flow limits"; issue 23). */
typedef struct store_limit {
    char *name;         /* owned */
    char *spec;         /* owned: the limit's canonical JSON (limit.h) */
    int64_t generation; /* 1 at creation, +1 at every effective change */
    int64_t created_at, updated_at; /* ms */
} store_limit;

/* Release what l owns and zero it. Safe on a zeroed one (store_common.c). */
void store_limit_clear(store_limit *l);
/* Clear n limits and free the array (NULL is fine). */
void store_limits_free(store_limit *rows, size_t n);

/* Called (from a thread of the store's own) when a job due at due_at_ms
 * was stored or rescheduled by any instance sharing the database, so the
 * dispatcher can wake if it sleeps past it. SQLite, where this instance is
 * the only writer (the writer wakes the dispatcher itself), never calls
 * it. */
typedef void (*store_wake_fn)(void *arg, int64_t due_at_ms);

/* One token bucket of a limit (flow/flow.h), shared by every instance of
 * a shared store: its state in microseconds on the dispatcher's clock.
 * store_buckets_update reads it into tat_us, and stores what its callback
 * leaves there. */
typedef struct store_bucket {
    const char *limit; /* the limit's name (borrowed) */
    const char *key;   /* the bucket's key value, "" for an unkeyed limit
                          (borrowed) */
    int64_t tat_us;    /* GCRA's theoretical arrival time */
} store_bucket;

/* The decision on buckets b[0..n), locked (store_buckets_update). */
typedef void (*store_bucket_fn)(void *cls, store_bucket *b, size_t n);

/* A bucket that was never used: full. */
#define STORE_BUCKET_NEW (INT64_MIN / 2)

/* The cap of a count (store_count) without one. */
#define STORE_COUNT_CAP_DEFAULT 100000 /* GET /jobs/count without max */

#endif
