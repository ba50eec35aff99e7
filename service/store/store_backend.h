/*
 * store_backend.h - what a store backend implements (internal to the store:
 * store.c and store_<backend>*.c include it).
 *
 * Why: store.c is the thin front of store.h. It picks a backend from the
 * database setting, owns what is the same for every backend (the claimset
 * of jobs held by the dispatcher and its rules, id parsing, the listing
 * cursor text, the all-or-nothing insert wrapper) and calls the backend
 * through this table for everything that touches the database. Today the
 * backends are SQLite (store_sqlite.h) and PostgreSQL (store_pg.h, issue
 * 12), two tables behind the same front.
 *
 * Each op has the contract of the store.h call of the same name, with ids
 * already parsed (JOB_ID_BYTES binary) and these differences:
 *   - the backend serialises its own calls (it may be called from several
 *     threads at once), except read_due and next_due, which one dispatcher
 *     thread calls and which must never wait for a write in progress;
 *   - read_due and next_due skip every job claimset_held(held, id) says is
 *     held (the front owns the claimset and applies its take rules);
 *   - record gets binary ids; the front releases the settled jobs from the
 *     claimset after it returns RMQS_OK;
 *   - update leaves the claimset to the front (claimset_change_begin/end
 *     around it) and returns the current job on RMQS_ECONFLICT, as
 *     store_update documents;
 *   - every change of a job's status is counted with store_delta
 *     (store_common.h) in the transaction of the change.
 */
#ifndef RMQS_STORE_BACKEND_H
#define RMQS_STORE_BACKEND_H

#include <pthread.h>

#include "claimset.h"
#include "store_types.h"
#include "store_common.h"

/* A backend's own state, defined by each backend's files. */
typedef struct store_backend store_backend;

/*
 * The schedules of a backend (store.h's store_schedule_* calls, issue 13),
 * in a table of their own (store_<backend>_schedules.c). Each op has the
 * contract of the store.h call, checked by the front first (names non-NULL
 * and non-empty, limit >= 1), with these differences:
 *   - rows come back with last_job_status -1, except from due, which gives
 *     the status in the database (the front shows a run the dispatcher
 *     holds as publishing, as store_get does);
 *   - list gets the limit and the page budget max_bytes (store_page_take,
 *     applied while it collects) and returns *more (a row follows) instead
 *     of the cursor, which the front makes from the last name;
 *   - advance resets every a[i].applied/job_existed itself, and counts an
 *     inserted run (store_delta) and wakes the dispatchers as an insert.
 */
typedef struct store_schedule_ops {
    rmqs_rc (*put)(store_backend *b, const store_schedule *s, bool *created,
                   bool *unchanged, store_schedule *out);
    rmqs_rc (*update)(store_backend *b, const store_schedule *s,
                      int64_t expect_generation, store_schedule *out);
    rmqs_rc (*get)(store_backend *b, const char *name, store_schedule *out);
    rmqs_rc (*list)(store_backend *b, size_t limit, size_t max_bytes,
                    const char *after, store_schedule **rows, size_t *n,
                    bool *more);
    rmqs_rc (*del)(store_backend *b, const char *name);
    rmqs_rc (*due)(store_backend *b, int64_t by_ms, size_t limit,
                   store_schedule **rows, size_t *n);
    rmqs_rc (*next_at)(store_backend *b, bool *any, int64_t *at);
    rmqs_rc (*advance)(store_backend *b, store_advance *a, size_t n,
                       int64_t now_ms);
    rmqs_rc (*counts)(store_backend *b, int64_t counts[3]);
    /* out[0..n) zeroed by the front, names non-empty; last_status as in
     * the database */
    rmqs_rc (*recent)(store_backend *b, const char *const *names, size_t n,
                      int64_t now_ms, store_run_outcome *out);
} store_schedule_ops;

/*
 * The flow limits of a backend (store.h's store_limit_* calls, issue 23),
 * in a table of their own (store_<backend>_limits.c). Each op has the
 * contract of the store.h call, checked by the front first (names and
 * specs non-NULL and non-empty; created and unchanged never NULL, set
 * false by the front before the call).
 */
typedef struct store_limit_ops {
    rmqs_rc (*put)(store_backend *b, const char *name, const char *spec,
                   int64_t now_ms, int64_t max_limits, bool *created,
                   bool *unchanged, store_limit *out);
    rmqs_rc (*update)(store_backend *b, const char *name, const char *spec,
                      int64_t expect_generation, int64_t now_ms,
                      store_limit *out);
    rmqs_rc (*get)(store_backend *b, const char *name, store_limit *out);
    rmqs_rc (*list)(store_backend *b, store_limit **rows, size_t *n);
    rmqs_rc (*del)(store_backend *b, const char *name);
} store_limit_ops;

typedef struct store_ops {
    const char *name; /* "sqlite", "postgres": for logs */
    /* read_due writes the claim itself (PostgreSQL: several instances
     * claim from one database, so the claim and the read are one
     * statement); record's claims are then a no-op, and a job the front
     * does not keep after read_due must be given back with a RELEASE. */
    bool claims_in_read; /* also store_has_peers: the same cause */

    /* Open (creating if needed) what target names, apply migrations (n of
     * them), return the state in *out; errors as store_open. */
    rmqs_rc (*open)(const char *target, const store_options *opt,
                    const store_migration *migrations, size_t n,
                    store_backend **out, rmqs_error *err);
    void (*close)(store_backend *b);

    int (*schema_version)(store_backend *b);
    rmqs_rc (*purge)(store_backend *b, int64_t before_ms, size_t limit,
                     size_t *deleted);
    rmqs_rc (*checkpoint)(store_backend *b, int64_t *wal_frames,
                          int64_t *copied);
    rmqs_rc (*counts)(store_backend *b, int64_t counts[STORE_N_STATUS]);
    int64_t (*free_bytes)(store_backend *b);
    int64_t (*size_bytes)(store_backend *b);
    rmqs_rc (*ping)(store_backend *b);
    /* store_identity */
    rmqs_rc (*identity)(store_backend *b, char out[STORE_IDENTITY_MAX]);

    rmqs_rc (*insert_batch)(store_backend *b, store_insert_req *reqs, size_t n);
    rmqs_rc (*get)(store_backend *b, const unsigned char id[JOB_ID_BYTES],
                   job_t *out);
    /* A page of at most limit (>= 1) jobs matching f (checked by the
     * front) in (deliver_at, seq) order after *after (NULL: from the
     * start), within max_bytes by store_page_take (store_common.h), which
     * the backend applies while it collects: *n_out jobs in a malloc'd
     * *jobs_out, *more whether a job follows, *last the cursor of the last
     * one (when *n_out > 0). */
    rmqs_rc (*list)(store_backend *b, const store_filter *f, size_t limit,
                    size_t max_bytes, const store_cursor *after,
                    job_t **jobs_out, size_t *n_out, bool *more,
                    store_cursor *last);
    rmqs_rc (*update)(store_backend *b, const unsigned char id[JOB_ID_BYTES],
                      const store_change *ch, int64_t now_ms, job_t *out);
    /* store_count for a filter with more than a status (the front
     * answers status-only and empty filters from counts), and
     * store_explain (store_sqlite_search.c, store_pg_search.c). */
    rmqs_rc (*count)(store_backend *b, const store_filter *f, int64_t cap,
                     int64_t *count, bool *capped);
    rmqs_rc (*explain)(store_backend *b, const store_filter *f, bool count,
                       char **plan_out);
    /* store_failures_recent (limit >= 1, checked by the front). */
    rmqs_rc (*failures)(store_backend *b, size_t limit, store_failure **rows,
                        size_t *n);
    /* store_update_batch with binary ids (not held: the front checked),
     * kind CANCEL or RETRY; changed[] is all false on failure. */
    rmqs_rc (*update_batch)(store_backend *b,
                            const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                            const store_change *ch, int64_t now_ms,
                            bool *changed);

    rmqs_rc (*next_due)(store_backend *b, claimset_t *held, bool *any,
                        int64_t *due_at_out);
    /* One snapshot: up to limit pending jobs due by due_by_ms, not held, in
     * due order, into *c (grown as needed; *cap its size). On failure
     * *n_out is 0 and nothing is left in *c to clear. */
    rmqs_rc (*read_due)(store_backend *b, claimset_t *held, int64_t due_by_ms,
                        size_t limit, store_claimed **c, size_t *cap,
                        size_t *n_out);
    /* store_record with binary ids: claims[0..n_claims), then outcome i
     * for ids[i]. */
    rmqs_rc (*record)(store_backend *b,
                      const unsigned char (*claims)[JOB_ID_BYTES],
                      size_t n_claims, const store_outcome *o,
                      const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                      int64_t now_ms);
    rmqs_rc (*recover)(store_backend *b, size_t *n_out);

    /* Optional (NULL: never calls fn / 0 / INT64_MIN): store_set_wake,
     * store_clock_offset_ms, store_lease_renewed_until and
     * store_claims_valid_since, for backends shared by several instances. */
    void (*set_wake)(store_backend *b, store_wake_fn fn, void *arg);
    int64_t (*clock_offset_ms)(store_backend *b);
    int64_t (*lease_renewed_until)(store_backend *b);
    int64_t (*claims_valid_since)(store_backend *b);
    /* Optional (NULL: RMQS_OK with nothing indexed / 0): store_search_index
     * and store_search_index_lag, for backends that index off the insert
     * path. */
    rmqs_rc (*search_index)(store_backend *b, size_t limit, size_t *indexed);
    int64_t (*search_index_lag)(store_backend *b);
    /* Optional (NULL: the buckets are the caller's alone):
     * store_buckets_update, for backends shared by several instances;
     * called on the feeder's connection (store_backend.h's promise of one
     * feeder call at a time holds: the front takes feed_mu). */
    rmqs_rc (*buckets_update)(store_backend *b, store_bucket *bk, size_t n,
                              int64_t now_us, store_bucket_fn fn, void *cls);

    /* Recurring schedules (above). */
    const store_schedule_ops *sched;
    /* Flow limits (above). */
    const store_limit_ops *lim;
} store_ops;

/* The front's state (store.c, store_schedules.c, store_limits.c). */
struct store {
    const store_ops *ops; /* the backend's table */
    store_backend *b;     /* its state (ops->close) */
    claimset_t *held;     /* the dispatcher's held jobs (store.c's file
                             comment) */
    /* the feeder's calls (store_claim_ahead, store_next_due): one at a
     * time, as store_backend.h promises the backend */
    pthread_mutex_t feed_mu;
    size_t page_max_bytes; /* store_options.page_max_bytes, 0 made default */
};

#endif
