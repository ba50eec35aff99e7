/*
 * store_sqlite_core.h - the SQLite backend's insides, shared by its files
 * only. From the bottom up:
 *   - store_sqlite_core.c: the statements (prepared once at open), errors
 *     and statement helpers, the transaction discipline and the sync
 *     switch, rows -> jobs, a page of rows, the passive checkpoint;
 *   - store_sqlite_schema.c: pragmas, migrations runner, sync policy, the
 *     read connection; store_sqlite_dispatch.c: the dispatcher's calls;
 *   - store_sqlite_indexer.c: the search's side tables, filled off the
 *     insert path; store_sqlite_search.c: lists and counts under a filter;
 *   - store_sqlite_jobs.c: the clients' calls; store_sqlite_schedules.c:
 *     the schedule ops; store_sqlite_limits.c: the flow limit ops;
 *   - store_sqlite.c: open and close, the small calls, the ops table and
 *     the test hooks (store_sqlite.h, all that store.c sees).
 * Each file calls only files below it.
 *
 * Why one header for these files: they work on one connection with one
 * set of prepared statements and one transaction discipline; splitting
 * the rooms by who calls them keeps each readable without a second copy
 * of the helpers.
 */
#ifndef RMQS_STORE_SQLITE_CORE_H
#define RMQS_STORE_SQLITE_CORE_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>

#include "store_backend.h"
#include "store_indexer.h"

#define BUSY_TIMEOUT_MS 5000
/* Searches that run side by side; more wait for one of these. Three: the
 * HTTP search pool has two threads (http_api.c), so one connection is
 * always there for the service's own short lookups (the scheduler's check
 * of a schedule's earlier run, a bulk action's page, a schedule change)
 * whatever clients search. */
#define SQ_SEARCHERS 3
#define JOURNAL_SIZE_LIMIT (64 * 1024 * 1024) /* bytes the WAL is cut back to */

/* The columns every job-returning statement yields, in row_to_job order. */
#define JOB_COLS                                                             \
    "seq, id, status, exchange, routing_key, deliver_at, due_at, delay_ms, " \
    "created_at, updated_at, sent_at, attempts, max_attempts, last_error, "  \
    "headers, properties, body_kind, body, source, schedule, fire_at, "      \
    "expires_at, priority, claim_rank, held_by, held_ms, failed_at"

enum {
    COL_SEQ,
    COL_ID,
    COL_STATUS,
    COL_EXCHANGE,
    COL_ROUTING_KEY,
    COL_DELIVER_AT,
    COL_DUE_AT,
    COL_DELAY_MS,
    COL_CREATED_AT,
    COL_UPDATED_AT,
    COL_SENT_AT,
    COL_ATTEMPTS,
    COL_MAX_ATTEMPTS,
    COL_LAST_ERROR,
    COL_HEADERS,
    COL_PROPERTIES,
    COL_BODY_KIND,
    COL_BODY,
    COL_SOURCE,
    COL_SCHEDULE,
    COL_FIRE_AT,
    COL_EXPIRES_AT,
    COL_PRIORITY,
    COL_CLAIM_RANK,
    COL_HELD_BY,
    COL_HELD_MS,
    COL_FAILED_AT,
    COL_COUNT,
    /* S_GET alone: JOB_COLS, then this one */
    COL_ATTEMPT_ERRORS = COL_COUNT
};

/* Statements of store_sqlite_schedules.c (its own table). */
#define SQ_SCHED_NSTMT 11
/* Statements of store_sqlite_limits.c (its own table). */
#define SQ_LIM_NSTMT 7
/* Statements of store_sqlite_indexer.c. */
#define SQ_IX_NSTMT 6

/* Every statement of the store, prepared once at open. */
typedef enum stmt_id {
    S_BEGIN,
    S_COMMIT,
    S_ROLLBACK,
    S_SAVEPOINT,
    S_RELEASE_SP,
    S_ROLLBACK_SP,
    S_PING,
    S_VERSION,
    S_INSERT,
    S_INSERT_RUN,
    S_IDEM_LOOKUP,
    S_IDEM_INSERT,
    S_GET,
    S_LIST_ALL,
    S_LIST_ALL_AFTER,
    S_LIST_STATUS,
    S_LIST_STATUS_AFTER,
    S_RESCHEDULE,
    S_CANCEL,
    S_SETTLE_SENT,
    S_SETTLE_RETRY,
    S_SETTLE_RELEASE,
    S_SETTLE_EXPIRE,
    S_SETTLE_FAIL,
    S_SETTLE_HOLD,
    S_RECOVER,
    S_CLAIM_HELD,
    S_COUNTS,
    S_COUNTS_ADD,
    S_RETRY, /* a client's retry of a failed job (issue 14) */
    S_COUNT
} stmt_id;

typedef struct stmt_def {
    const char *name; /* for logs and the test hook store__sql() */
    const char *sql;
} stmt_def;

/* The table, by stmt_id (store_sqlite_core.c). */
extern const stmt_def sq_stmt_defs[S_COUNT];

/* The dispatcher's reads on the read connection (claiming ahead): pending
 * jobs in due order; the caller stops stepping when it has enough. */
#define RD_DUE_SQL                                       \
    "SELECT " JOB_COLS " FROM jobs INDEXED BY jobs_due " \
    "WHERE status = 0 AND due_at <= ?1 ORDER BY due_at, claim_rank, seq"
#define RD_NEXT_SQL                                                     \
    "SELECT id, due_at FROM jobs INDEXED BY jobs_due WHERE status = 0 " \
    "ORDER BY due_at, claim_rank, seq"

struct store_backend {
    pthread_mutex_t mu; /* held by every call but the read connection's */
    /* Callers waiting for mu (sq_lock): the indexer lets them go first. */
    atomic_int mu_waiting;
    sqlite3 *db;
    sqlite3_stmt *stmt[S_COUNT];
    sqlite3_stmt *purge; /* prepared on first use (needs migration 0003) */
    /* A second connection for WAL checkpoints, so they run beside the
     * writers instead of inside their commits. Opened on first use. */
    pthread_mutex_t ckpt_mu;
    sqlite3 *ckpt_db;
    char *path; /* the database file, set at open; read without mu */
    char *dir;  /* its folder, for statvfs */
    /* The open transaction's change to job_counts, by status: what its
     * statements did to jobs so far (store_common.h). Zero outside a
     * transaction. */
    store_delta delta;
    bool sync_full;    /* opened with synchronous=FULL */
    bool sync_relaxed; /* the connection is at NORMAL just now (dispatcher) */
    /* Claiming ahead (store.c): a read-only connection of the dispatcher's,
     * never behind mu. */
    pthread_mutex_t rd_mu; /* the read connection (one feeder uses it) */
    sqlite3 *rd_db;
    sqlite3_stmt *rd_due, *rd_next;
    /* Lists, counts and searches: read-only connections of their own
     * (opened on first use), so a search never holds mu and every write
     * behind it; each under its sr_mu, ended at search_budget_ms by a
     * progress handler (store_sqlite_search.c). */
    pthread_mutex_t sr_mu[SQ_SEARCHERS];
    sqlite3 *sr_db[SQ_SEARCHERS];
    _Atomic unsigned sr_next;
    int64_t search_budget_ms;
    /* The schedules' statements (store_sqlite_schedules.c), prepared at
     * open after the jobs' ones, used under mu. */
    sqlite3_stmt *sched[SQ_SCHED_NSTMT];
    /* The limits' statements (store_sqlite_limits.c), prepared on first
     * use, used under mu. */
    sqlite3_stmt *lim[SQ_LIM_NSTMT];
    /* The search indexer: its thread (NULL: none, index_manual or a schema
     * before 0007) and its statements, prepared on first use under mu. */
    store_ix *ix;
    sqlite3_stmt *ix_stmt[SQ_IX_NSTMT];
};

/* Take st->mu as a caller the indexer must not hold up (every call of the
 * backend but the indexer's own batches). */
static inline void sq_lock(store_backend *st)
{
    atomic_fetch_add(&st->mu_waiting, 1);
    pthread_mutex_lock(&st->mu);
    atomic_fetch_sub(&st->mu_waiting, 1);
}

/* How a transaction's COMMIT must reach the disk. */
typedef enum tx_sync {
    TX_DURABLE, /* fsynced when the store was opened FULL: API writes */
    TX_RELAXED  /* NORMAL: the dispatcher's status changes (the sync policy,
                   store_sqlite_schema.c) */
} tx_sync;

/* store_sqlite_core.c: errors and statement helpers. */
rmqs_rc sq_fail_on(sqlite3 *db, int rc, const char *op);
rmqs_rc sq_fail(store_backend *st, int rc, const char *op);
sqlite3_stmt *sq_stmt(store_backend *st, stmt_id id);
void sq_stmt_done(sqlite3_stmt *s);
int sq_stmt_exec(sqlite3_stmt *s);
rmqs_rc sq_stmt_fail(store_backend *st, sqlite3_stmt *s, int rc, stmt_id id);
int sq_bind_text_or_null(sqlite3_stmt *s, int i, const char *v);

/* store_sqlite_core.c: transactions (BEGIN IMMEDIATE; counts flushed before
 * COMMIT; every end zeroes the delta and restores FULL). */
rmqs_rc sq_tx_begin(store_backend *st, tx_sync how);
void sq_tx_abort(store_backend *st);
rmqs_rc sq_tx_commit(store_backend *st);

/* store_sqlite_core.c: rows <-> jobs. */
rmqs_rc sq_row_to_job(sqlite3_stmt *s, job_t *out, int64_t *seq_out);
/* The page budget's bytes of the current row of s (JOB_COLS):
 * store_item_bytes of its body and texts, read without copying them. */
size_t sq_row_bytes(sqlite3_stmt *s);
rmqs_rc sq_step_one_job(store_backend *st, sqlite3_stmt *s, stmt_id sid,
                        job_t *out);
rmqs_rc sq_get_by_id(store_backend *st, const unsigned char id[JOB_ID_BYTES],
                     job_t *out);

/* store_sqlite_schema.c: open-time helpers, migrations, sync policy
 * (sq_sync_set, the switch itself: store_sqlite_core.c). */
int sq_run_once(sqlite3 *db, const char *sql, char *buf, size_t len);
int64_t sq_query_int(sqlite3 *db, const char *sql, int *rc_out);
rmqs_rc sq_open_fail(rmqs_error *err, sqlite3 *db, const char *path,
                     const char *what, int rc);
void sq_global_config(void);
rmqs_rc sq_open_configure(sqlite3 *db, const char *path, bool sync_full,
                          rmqs_error *err);
rmqs_rc sq_migrate(sqlite3 *db, const char *path, const store_migration *m,
                   size_t n, rmqs_error *err);
rmqs_rc sq_rd_open(store_backend *st, const char *path, rmqs_error *err);
rmqs_rc sq_sync_set(store_backend *st, bool relaxed);

/* store_sqlite_jobs.c: inside the caller's transaction, insert one job
 * (id parsed) with statement sid: S_INSERT (a duplicate id is
 * RMQS_ECONFLICT) or S_INSERT_RUN (insert if absent: *inserted false when
 * the id exists). *seq_out the new row's seq. Counts nothing: the caller
 * adds the row to its delta. */
rmqs_rc sq_insert_job(store_backend *st, stmt_id sid, const job_t *job,
                      const unsigned char id[JOB_ID_BYTES], int64_t *seq_out,
                      bool *inserted);

/* store_sqlite_jobs.c: the clients' ops. */
rmqs_rc sq_insert_batch(store_backend *st, store_insert_req *reqs, size_t n);
rmqs_rc sq_get(store_backend *st, const unsigned char id[JOB_ID_BYTES],
               job_t *out);
rmqs_rc sq_list(store_backend *st, const store_filter *f, size_t limit,
                size_t max_bytes, const store_cursor *after, job_t **jobs_out,
                size_t *n_out, bool *more, store_cursor *last);
rmqs_rc sq_update(store_backend *st, const unsigned char id[JOB_ID_BYTES],
                  const store_change *ch, int64_t now_ms, job_t *out);
rmqs_rc sq_update_batch(store_backend *st,
                        const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                        const store_change *ch, int64_t now_ms, bool *changed);

/* store_sqlite_core.c: step s (bound; the caller resets or finalizes it)
 * for a page of at most limit jobs within max_bytes (store_page_take, each
 * row measured before it is copied), as the list op returns them (more: a
 * row follows; last: the cursor of the last one); op names s in logs. */
rmqs_rc sq_collect_page(store_backend *st, sqlite3_stmt *s, const char *op,
                        size_t limit, size_t max_bytes, job_t **jobs_out,
                        size_t *n_out, bool *more, store_cursor *last);

/* store_sqlite_search.c: a page of jobs for any filter but none or the
 * status alone (sq_list's own statements), the count and the plan. */
rmqs_rc sq_search_list(store_backend *st, const store_filter *f, size_t limit,
                       size_t max_bytes, const store_cursor *after,
                       job_t **jobs_out, size_t *n_out, bool *more,
                       store_cursor *last);
rmqs_rc sq_count(store_backend *st, const store_filter *f, int64_t cap,
                 int64_t *count, bool *capped);
rmqs_rc sq_failures(store_backend *st, size_t limit, store_failure **rows,
                    size_t *n);
rmqs_rc sq_explain(store_backend *st, const store_filter *f, bool count,
                   char **plan_out);

/* store_sqlite_core.c: store_checkpoint (PASSIVE, on a connection of its own,
 * without mu). */
rmqs_rc sq_checkpoint(store_backend *st, int64_t *wal_frames, int64_t *copied);

/* store_sqlite_indexer.c: the search's side tables (job_headers,
 * jobs_body_fts) up to search_index.mark. sq_ix_start (at open, unless
 * opt->index_manual; a schema without search_index starts nothing) starts
 * the indexer thread; sq_ix_stop (at close, before the connection goes;
 * safe when none started) ends it; sq_ix_kick (after a commit that
 * inserted jobs, without mu) wakes it. The ops: one batch of at most
 * limit jobs (store_search_index) and the lag (store_search_index_lag). */
rmqs_rc sq_ix_start(store_backend *st, rmqs_error *err);
void sq_ix_stop(store_backend *st);
void sq_ix_kick(store_backend *st);
rmqs_rc sq_search_index(store_backend *st, size_t limit, size_t *indexed);
int64_t sq_search_index_lag(store_backend *st);

/* store_sqlite_dispatch.c: the dispatcher's ops. */
rmqs_rc sq_next_due(store_backend *st, claimset_t *held, bool *any,
                    int64_t *due_at_out);
rmqs_rc sq_read_due(store_backend *st, claimset_t *held, int64_t due_by_ms,
                    size_t limit, store_claimed **c, size_t *cap,
                    size_t *n_out);
rmqs_rc sq_record(store_backend *st,
                  const unsigned char (*claims)[JOB_ID_BYTES], size_t n_claims,
                  const store_outcome *o,
                  const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                  int64_t now_ms);
rmqs_rc sq_recover(store_backend *st, size_t *n_out);

/* store_sqlite_schedules.c: the schedule ops (store_backend.h); prepare
 * its statements at open (RMQS_EDB with the reason in err) and finalize
 * them at close (safe on a half-opened backend); the SQL text of one by
 * name for the store__sql test hook, or NULL. */
extern const store_schedule_ops sq_schedule_ops;
rmqs_rc sq_sched_prepare(store_backend *st, const char *path, rmqs_error *err);
void sq_sched_finalize(store_backend *st);
const char *sq_sched__sql(const char *name);

/* store_sqlite_limits.c: the flow limit ops (store_backend.h), their
 * statements prepared on first use and finalized at close (safe when none
 * was prepared). */
extern const store_limit_ops sq_limit_ops;
void sq_lim_finalize(store_backend *st);
const char *sq_lim__sql(const char *name);

#endif
