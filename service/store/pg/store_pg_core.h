/*
 * store_pg_core.h - the PostgreSQL backend's insides, shared by its files
 * only. From the bottom up:
 *   - store_pg_url.c (store_pg_url.h): URLs, their secrets, SQLSTATE ->
 *     rmqs_rc; pure;
 *   - store_pg_conn.c (store_pg_conn.h): the wire: connections and their
 *     repair, bounded waits, statements in as few round trips as they can
 *     (prepared, pipelined, a COPY with its surroundings);
 *   - store_pg_core.c: transactions with their count deltas and
 *     notifications, page measuring, rows -> jobs;
 *   - store_pg_presence.c: this instance's session (its ids, the
 *     presence lock, LISTEN) and the watch for dead instances;
 *   - store_pg_dispatch.c: claim, record, lease renewal and reclaim,
 *     the clock; store_pg_indexer.c: the search's side
 *     table, filled off the insert path; store_pg_search.c: lists and
 *     counts under a filter;
 *   - store_pg_jobs.c: the clients' calls; store_pg_schedules.c: the
 *     schedule ops; store_pg_limits.c: the flow limit ops;
 *   - store_pg.c: the migrations runner, open and close, the small calls
 *     and the ops table (store_pg.h, all that store.c sees).
 * Each file calls only files below it.
 *
 * Why one header for these files: they share the backend, the
 * transaction discipline and the row decoding; each file is one room (who
 * calls it), as for SQLite (store_sqlite_core.h). The wire alone has its
 * own (store_pg_conn.h): it knows nothing of the backend above it.
 *
 * Connections, one per role, each with its own mutex (a libpq connection is
 * used by one thread at a time):
 *   - wr: HTTP and ingest calls (insert, get, list, update, counts, purge,
 *     ping), serialised like SQLite's writer;
 *   - feed: the dispatcher's feeder (read_due = the claim,
 *     next_due), so a claim never waits for the writer's commit;
 *   - disp: record, recover and the housekeeping thread (lease renewal,
 *     reclaim of expired leases, the clock offset);
 *   - lsn: the listener thread's session (LISTEN rmqs_due, and the lock
 *     that marks this instance alive: store_pg_presence.c).
 * A connection found broken is closed and opened again on the next call
 * (a fresh PQconnectdb of the same URL: a multi-host URL with
 * target_session_attrs=read-write then lands on whichever host is now the
 * primary); the call that found it broken fails with RMQS_EDB.
 */
#ifndef RMQS_STORE_PG_CORE_H
#define RMQS_STORE_PG_CORE_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store_backend.h"
#include "store_indexer.h"
#include "worker.h"
#include "store_pg_conn.h"
#include "store_pg_url.h"

#define PG_SLOTS 64  /* job_counts slots (migration 0001) */
#define PG_ID_LEN 25 /* an instance id: 24 hex digits and a NUL */
#define PG_OWNED_IDS 8
#define PG_OWNED_LEN (PG_OWNED_IDS * PG_ID_LEN + 3) /* "{id,id,...}" */
/* How often each instance looks for instances whose session ended. */
#define PG_WATCH_MS 250
#define PG_DEFAULT_LEASE_MS 10000
#define PG_MIN_LEASE_MS 500
#define PG_NOTIFY_CHANNEL "rmqs_due"
/* Shares of the due jobs among the instances that claim
 * (store_pg_dispatch.c, migration 0007): runs of PG_SHARE_RUN consecutive
 * seq (a group commit's jobs, neighbours in the table's pages) go to one
 * claimer; another claimer's job is taken once it is due PG_STEAL_MS
 * before the claim's horizon and still unclaimed. An instance counts among
 * the claimers for PG_CLAIMER_MS after it last said it claims. */
#define PG_SHARE_RUN "16"
#define PG_STEAL_MS 250
#define PG_CLAIMER_MS 3000

/* The database clock in ms, in SQL. clock_timestamp(), not now(): now() is
 * the start of the transaction. */
#define PG_NOW_MS "floor(extract(epoch from clock_timestamp()) * 1000)::bigint"

/* The columns every job-returning statement yields, in pg_row_to_job
 * order. */
#define PG_JOB_COLS                                                          \
    "seq, id, status, exchange, routing_key, deliver_at, due_at, delay_ms, " \
    "created_at, updated_at, sent_at, attempts, max_attempts, last_error, "  \
    "headers, properties, body_kind, body, source, lease_until, schedule, "  \
    "fire_at, expires_at, priority, claim_rank, held_by, held_ms, failed_at"

enum {
    PC_SEQ,
    PC_ID,
    PC_STATUS,
    PC_EXCHANGE,
    PC_ROUTING_KEY,
    PC_DELIVER_AT,
    PC_DUE_AT,
    PC_DELAY_MS,
    PC_CREATED_AT,
    PC_UPDATED_AT,
    PC_SENT_AT,
    PC_ATTEMPTS,
    PC_MAX_ATTEMPTS,
    PC_LAST_ERROR,
    PC_HEADERS,
    PC_PROPERTIES,
    PC_BODY_KIND,
    PC_BODY,
    PC_SOURCE,
    PC_LEASE_UNTIL,
    PC_SCHEDULE,
    PC_FIRE_AT,
    PC_EXPIRES_AT,
    PC_PRIORITY,
    PC_CLAIM_RANK,
    PC_HELD_BY,
    PC_HELD_MS,
    PC_FAILED_AT,
    PC_COUNT
};


/* Lists, counts and searches that run side by side (store_pg_search.c):
 * two for the HTTP search pool's threads, one always free for the
 * service's own short lookups (scheduler, bulk pages, schedule changes). */
#define PG_SEARCHERS 3

struct store_backend {
    pg_target db; /* the URL (secret), its form for logs, the bound */
    /* This instance's ids (store_pg_presence.c): one per database
     * session, the current one at id_at, the last PG_OWNED_IDS kept (the
     * owners whose claims settles still match); under id_mu */
    pthread_mutex_t id_mu;
    char ids[PG_OWNED_IDS][PG_ID_LEN];
    int id_at;
    /* pg_claims_valid_since: database-clock ms the session began,
     * INT64_MAX while there is none */
    _Atomic int64_t present_since;
    pg_conn lsn; /* the session: LISTEN and the presence lock */
    int64_t lease_ms;
    int64_t wake_horizon_ms; /* store_options.wake_horizon_ms (0: none) */
    pg_conn wr, feed, disp;
    /* the scheduler's thread (store_schedule_due/next_at/advance), so
     * creating runs never queues behind HTTP writes; connected on first
     * use, durable like the writer's */
    pg_conn sched;
    /* lists, counts and searches: connections of their own (connected on
     * first use), never the writer's, each with statement_timeout at the
     * search budget */
    pg_conn search[PG_SEARCHERS];
    _Atomic unsigned search_next;
    /* the search indexer's connection (connected on first use) and its
     * state under ix.mu: the safe bound and the mark last seen (-1:
     * unknown); its thread, NULL when none (index_manual) */
    pg_conn ix;
    int64_t ix_safe, ix_mark;
    int64_t ix_safe_at; /* tu_mono_ms() of the last bound read */
    store_ix *indexer;
    _Atomic int64_t clock_offset; /* store_clock_offset_ms */
    /* The shares (store_pg_presence.c's watch, read by the claim): how
     * many instances claim, this one included, << 32 | its rank among
     * them; 1 << 32 (all of it) until known. claimed_at: tu_mono_ms of the
     * last claim; claimer_until: the database-clock end of this instance's
     * mark as a claimer (the keeper's thread only). */
    _Atomic int64_t shares, claimed_at;
    int64_t claimer_until;
    int64_t buckets_cleaned_us; /* store_pg_buckets.c's last clean-up (the
                                   feeder's, under feed's mutex) */
    /* store_lease_renewed_until, and the end of the lease the last
     * continuous renewal wrote (0: the chain broke; store_pg_dispatch.c) */
    _Atomic int64_t renewed_until, renew_chain;
    /* wake callback (store_set_wake), read by the listener thread */
    pthread_mutex_t wake_mu;
    store_wake_fn wake_fn;
    void *wake_arg;
    /* housekeeping and listener threads, stopped at close */
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    bool stopping;
    int stop_pipe[2];               /* wakes the listener's poll at close,
                                       and for pg_session_doubt */
    atomic_bool session_doubt;      /* pg_session_doubt: end the session */
    worker_thread keeper, listener; /* rmqs-pg-keeper, rmqs-pg-listen */
};

/* ---- store_pg_core.c ---- */

/* Transactions on pc. pg_tx_begin clears delta and notify_due and sends
 * nothing: the BEGIN goes with the transaction's first statements. Commit
 * adds the deltas to job_counts and COMMITs in one round trip and, in the
 * same message, wakes the others (pg_notify_due's statement, in a
 * transaction of its own after the COMMIT); abort rolls back. Both end
 * with delta cleared. */
rmqs_rc pg_tx_begin(store_backend *b, pg_conn *pc);
/* As pg_tx_begin for a transaction that inserts jobs: it also takes
 * PG_INSERT_LOCK shared (store_pg_indexer.c's safe bound). */
rmqs_rc pg_tx_begin_insert(store_backend *b, pg_conn *pc);
rmqs_rc pg_tx_commit(store_backend *b, pg_conn *pc);
/* pg_tx_commit with stmts[0..n) (one statement each; a COPY among them,
 * as pg_exec_text) ahead of the commit in the same message: the whole
 * transaction in one round trip, two with the COPY. If one of them fails,
 * *failed_at is its index and the transaction is left open, failed: the
 * caller rolls back to a savepoint, or aborts. Otherwise *failed_at is -1
 * and the transaction is over: committed (RMQS_OK) or rolled back. */
rmqs_rc pg_tx_commit_with(store_backend *b, pg_conn *pc, const char *op,
                          const char *const *stmts, size_t n, const void *copy,
                          size_t copy_len, int *failed_at);
void pg_tx_abort(pg_conn *pc);

/* A pending job due at due_at was stored in pc's transaction. */
void pg_note_due(pg_conn *pc, int64_t due_at);
/* After statements that count their own moves (PG_COUNTED) committed: wake
 * the other instances for pc->notify_due, if it is due soon enough
 * (store_options.wake_horizon_ms), in a transaction of its own, and clear
 * it. Why not inside the transaction: PostgreSQL holds one lock for every
 * NOTIFY of the database from the statement to the end of its commit, the
 * flush included, so every instance's notifying commits would wait for
 * each other. A failure is only logged: the dispatchers look again within
 * a second anyway. */
void pg_notify_due(store_backend *b, pg_conn *pc);

/*
 * The count of the jobs one statement moves between statuses, kept by the
 * statement itself: the dispatcher's statements (claim, settle, reclaim,
 * the watch), whose number of moved jobs only their result knows, so a
 * delta for pg_tx_commit would cost a second round trip. The statement is
 * "WITH moved AS (UPDATE jobs ... RETURNING ..., status AS moved_to)"
 * followed by this: the jobs of moved left status `from` (SQL) for
 * moved_to, added to the job_counts slot `slot` (a parameter: the
 * connection's own slot, pc->slot).
 */
#define PG_COUNTED(from, slot)                                            \
    ", counted AS (INSERT INTO job_counts (slot, status, n) "             \
    "SELECT " slot "::smallint, v.s, v.d FROM (SELECT count(*) AS a, "    \
    "count(*) FILTER (WHERE moved_to = 0) AS s0, "                        \
    "count(*) FILTER (WHERE moved_to = 1) AS s1, "                        \
    "count(*) FILTER (WHERE moved_to = 2) AS s2, "                        \
    "count(*) FILTER (WHERE moved_to = 3) AS s3, "                        \
    "count(*) FILTER (WHERE moved_to = 4) AS s4 FROM moved) c, "          \
    "LATERAL (VALUES (" from ", -c.a), (0, c.s0), (1, c.s1), (2, c.s2), " \
    "(3, c.s3), (4, c.s4)) AS v(s, d) WHERE v.d <> 0 "                    \
    "ON CONFLICT (slot, status) DO UPDATE SET n = job_counts.n + EXCLUDED.n) "

/* Row r of res (PG_JOB_COLS, binary) into *out (zeroed first); *seq_out
 * may be NULL. */
rmqs_rc pg_row_to_job(const PGresult *res, int r, job_t *out, int64_t *seq_out);
/*
 * Page budgets (store_common.h) on PostgreSQL. libpq holds a whole result
 * in memory, so the rows of a page cannot be measured as they arrive (as
 * SQLite steps them): a page is read in two statements of one snapshot.
 * pg_page_measure begins a REPEATABLE READ READ ONLY transaction on pc
 * (locked by pg_use) and runs sql, whose rows are the sizes of the page's
 * candidates in page order, one beyond page->limit (PG_SIZE_COLS: body
 * kind, body bytes, text bytes; no body is read), taking them into page
 * (store_page_take): page->n is then how many rows the caller fetches with
 * its rows statement, which sees the rows measured. pg_page_end commits
 * (nothing was written) or, after a failure, rolls back.
 */
#define PG_JOB_SIZE_COLS                                                 \
    "body_kind, octet_length(body), octet_length(exchange) + "           \
    "octet_length(routing_key) + coalesce(octet_length(schedule), 0) + " \
    "coalesce(octet_length(last_error), 0) + "                           \
    "coalesce(octet_length(headers), 0) + "                              \
    "coalesce(octet_length(properties), 0)"
rmqs_rc pg_page_measure(pg_conn *pc, const char *op, const char *sql, int n,
                        const char *const *vals, const int *lens,
                        const int *bin, store_page *page);
void pg_page_end(pg_conn *pc);

/* An integer column (int2, int4 or int8, binary) of row r; 0 if NULL. */
int64_t pg_int(const PGresult *res, int r, int c);

/* Decimal text of v into buf (24 bytes). */
const char *pg_i64(char buf[24], int64_t v);

/* ---- store_pg_copy.c: the binary COPY stream of new jobs ---- */
#define PG_JOB_NCOLS 24 /* the columns of a new job's row */
#define PG_COPY_COLS_LIST                                                   \
    "id, status, exchange, routing_key, deliver_at, due_at, delay_ms, "     \
    "created_at, updated_at, sent_at, attempts, max_attempts, last_error, " \
    "headers, properties, body_kind, body, source, message_id, schedule, "  \
    "fire_at, expires_at, priority, claim_rank"
#define PG_COPY_COLS "(" PG_COPY_COLS_LIST ")"
#define PG_COPY_SQL "COPY jobs " PG_COPY_COLS " FROM STDIN (FORMAT binary)"

typedef struct pg_copy_buf {
    unsigned char *p; /* malloc'd; the caller frees it */
    size_t n;
} pg_copy_buf;

/* The binary COPY stream of jobs[0..n) into *out: PG_COPY_COLS, in their
 * order. due_at as store_pg_jobs.c's DUE_AT_SQL does, with this host's
 * clock plus the offset (a lower bound of the database's) for the
 * database's. RMQS_EINVAL with *bad the index of a job whose id does not
 * parse or whose body is too long (nothing is encoded), RMQS_ENOMEM. */
rmqs_rc pg_copy_jobs(const job_t *const *jobs, size_t n, int64_t offset,
                     pg_copy_buf *out, size_t *bad);

/* ---- store_pg_jobs.c ---- */
/* Insert jobs[0..n) in pc's open transaction, each unless its id exists
 * already (a schedule's runs: store_schedule_advance): inserted[i] whether
 * it was; counts those (pc->delta) and notes their due times for the
 * NOTIFY at commit. RMQS_EINVAL for a job the schema refuses (the
 * transaction is then aborted: PostgreSQL). */
rmqs_rc pg_insert_runs(store_backend *b, pg_conn *pc, const job_t *const *jobs,
                       size_t n, bool *inserted);
rmqs_rc pg_insert_batch(store_backend *b, store_insert_req *reqs, size_t n);
rmqs_rc pg_get(store_backend *b, const unsigned char id[JOB_ID_BYTES],
               job_t *out);
rmqs_rc pg_update(store_backend *b, const unsigned char id[JOB_ID_BYTES],
                  const store_change *ch, int64_t now_ms, job_t *out);
rmqs_rc pg_update_batch(store_backend *b,
                        const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                        const store_change *ch, int64_t now_ms, bool *changed);

/* ---- store_pg_search.c: lists, counts and plans under a filter ---- */
rmqs_rc pg_list(store_backend *b, const store_filter *f, size_t limit,
                size_t max_bytes, const store_cursor *after, job_t **jobs_out,
                size_t *n_out, bool *more, store_cursor *last);
rmqs_rc pg_count(store_backend *b, const store_filter *f, int64_t cap,
                 int64_t *count, bool *capped);
rmqs_rc pg_explain(store_backend *b, const store_filter *f, bool count,
                   char **plan_out);
rmqs_rc pg_failures(store_backend *b, size_t limit, store_failure **rows,
                    size_t *n);

/* ---- store_pg_indexer.c: job_text up to search_index.mark ---- */
/* Start (at open, unless index_manual) / stop (at close; safe when none
 * started) the indexer thread; wake it after a commit that inserted jobs. */
rmqs_rc pg_ix_start(store_backend *b, rmqs_error *err);
void pg_ix_stop(store_backend *b);
void pg_ix_kick(store_backend *b);
rmqs_rc pg_search_index(store_backend *b, size_t limit, size_t *indexed);
int64_t pg_search_index_lag(store_backend *b);

/* ---- store_pg_schedules.c ---- */
extern const store_schedule_ops pg_schedule_ops;

/* ---- store_pg_limits.c ---- */
extern const store_limit_ops pg_limit_ops;

/* ---- store_pg_presence.c: the session, wake-ups, the watch ---- */
/* A random id (24 hex digits) into out. */
rmqs_rc pg_new_id(char out[PG_ID_LEN]);
/* The current id (the owner of the claims made now). */
void pg_owner_current(store_backend *b, char out[PG_ID_LEN]);
/* The last PG_OWNED_IDS ids as an array literal (settles match these). */
void pg_owner_mine(store_backend *b, char out[PG_OWNED_LEN]);
/* Database-clock ms: claims made before it are no longer this instance's
 * for sure (store_claims_valid_since); INT64_MAX without a session. */
int64_t pg_claims_valid_since(store_backend *b);
/* Begin the session at open, on b->lsn (the listener thread keeps it, and
 * begins it again when lost). */
rmqs_rc pg_presence_open(store_backend *b);
void *pg_listener_main(void *arg);
/* A claim's COMMIT went unanswered: it may hold jobs nobody here knows of,
 * which the keeper would renew for ever. The listener ends the session
 * (its claims go back to pending through the watch) and begins a new one.
 * Any thread. */
void pg_session_doubt(store_backend *b);
void pg_set_wake(store_backend *b, store_wake_fn fn, void *arg);
/* On pc (locked, up), in one round trip: the instances whose session
 * ended, their rows deleted and their claimed jobs pending again (*n_out
 * how many jobs; the others woken for them), and the shares of the
 * claimers read again (b->shares; this instance's mark as a claimer kept
 * while it claims; the dispatcher woken when they change). */
rmqs_rc pg_watch(store_backend *b, pg_conn *pc, size_t *n_out);

/* ---- store_pg_dispatch.c ---- */
/* The SQL text of the claim, the statement of read_due (store_pg_dispatch.c):
 * test_store_pg_dispatch.c checks its plan. */
extern const char pg_claim_sql[];
rmqs_rc pg_next_due(store_backend *b, claimset_t *held, bool *any,
                    int64_t *due_at_out);
rmqs_rc pg_read_due(store_backend *b, claimset_t *held, int64_t due_by_ms,
                    size_t limit, store_claimed **c, size_t *cap,
                    size_t *n_out);
rmqs_rc pg_record(store_backend *b, const unsigned char (*claims)[JOB_ID_BYTES],
                  size_t n_claims, const store_outcome *o,
                  const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                  int64_t now_ms);
rmqs_rc pg_recover(store_backend *b, size_t *n_out);
int64_t pg_clock_offset_ms(store_backend *b);
int64_t pg_lease_renewed_until(store_backend *b);
/* Measure the clock offset on pc (locked, up) and store it. */
rmqs_rc pg_measure_clock(store_backend *b, pg_conn *pc);
/* Start / stop the housekeeping and listener threads. */
rmqs_rc pg_threads_start(store_backend *b, rmqs_error *err);
void pg_threads_stop(store_backend *b);

/* Array literals for a parameter ($1::text[], $1::bigint[]): v[0..n),
 * a NULL string as NULL; malloc'd, NULL on ENOMEM. */
char *pg_text_array(const char *const *v, size_t n);
char *pg_int_array(const int64_t *v, size_t n);

/* store_buckets_update (store_pg_buckets.c). */
rmqs_rc pg_buckets_update(store_backend *b, store_bucket *bk, size_t n,
                          int64_t now_us, store_bucket_fn fn, void *cls);

#endif
