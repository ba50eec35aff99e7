/*
 * store_sqlite_indexer.c - fills the search's side tables (job_headers,
 * jobs_body_fts: migrations/sqlite/0007_search.sql) off the insert path.
 *
 * Why: kept by triggers inside the insert transaction, the header rows and
 * the FTS5 trigram postings made every POST /schedule pay for the search
 * (up to 7x slower inserts, tests/bench/README.md "search"), though jobs
 * are searched far less often than they are stored. The insert path now
 * writes the jobs row and its btree indexes only.
 *
 * How it works:
 *   - search_index.mark is the seq up to which every job is indexed (and
 *     none above it). A batch takes the next jobs above the mark in seq
 *     order, inserts their string headers and text/JSON bodies, and moves
 *     the mark to the last one, all in one transaction: a crash loses
 *     nothing (the batch is redone) and never indexes a job twice. It
 *     commits at synchronous=NORMAL (TX_RELAXED): after a power loss the
 *     batch may roll back with its mark, which is as consistent.
 *   - Searches (store_sqlite_search.c) read the side tables for seq <=
 *     mark and check the jobs above it directly, so they are exact at any
 *     lag; the lag only costs them time.
 *   - The thread (rmqs-indexer) sleeps until an insert kicks it (or 1 s
 *     passes: runs inserted by other paths, jobs written behind the
 *     store's back, the backlog after a restart). Each batch holds st->mu
 *     like any call of the store, sized to take about BATCH_TARGET_MS;
 *     between batches it lets every caller waiting for mu (sq_lock: the
 *     writer's group commit, the dispatcher's settles, reads) go first,
 *     for at most YIELD_MAX_MS, so it yields to the writer but always
 *     advances under a steady load.
 *   - Deletes (the purge) keep the side tables by a trigger (0007).
 */
#include "store_sqlite_core.h"

#include <stdlib.h>
#include <string.h>

#include "store_indexer.h"
#include "timeutil.h"

#define BATCH_MIN 64
#define BATCH_MAX 5000
#define BATCH_FIRST 500
#define BATCH_TARGET_MS 20 /* a batch holds mu about this long */
#define YIELD_MAX_MS 50    /* longest wait for others between batches */
#define IDLE_POLL_MS 1000  /* look for unkicked work this often */
#define RETRY_MS 5000      /* after a failed batch */
#define CKPT_EVERY_MS 500  /* while catching up: a checkpoint this often */

enum { IX_MARK, IX_UPTO, IX_HEADERS, IX_BODIES, IX_SET_MARK, IX_LAG };

static const char *const ix_sql[SQ_IX_NSTMT] = {
    [IX_MARK] = "SELECT mark FROM search_index",
    /* the batch: the jobs above the mark, at most ?2 of them */
    [IX_UPTO] = "SELECT max(seq), count(*) FROM (SELECT seq FROM jobs "
                "WHERE seq > ?1 ORDER BY seq LIMIT ?2)",
    /* OR IGNORE: a JSON object naming a header twice */
    [IX_HEADERS] = "INSERT OR IGNORE INTO job_headers (name, value, job_seq) "
                   "SELECT h.key, h.value, jobs.seq FROM jobs, "
                   "json_each(jobs.headers) AS h WHERE jobs.seq > ?1 AND "
                   "jobs.seq <= ?2 AND jobs.headers IS NOT NULL AND "
                   "h.type = 'text'",
    [IX_BODIES] = "INSERT INTO jobs_body_fts (rowid, body) SELECT seq, "
                  "CAST(body AS TEXT) FROM jobs WHERE seq > ?1 AND "
                  "seq <= ?2 AND body_kind < 2",
    [IX_SET_MARK] = "UPDATE search_index SET mark = ?1",
    [IX_LAG] = "SELECT coalesce((SELECT max(seq) FROM jobs), 0) - mark "
               "FROM search_index",
};

/* With mu held: the indexer's statements, prepared once. */
static rmqs_rc ix_prepare(store_backend *st)
{
    for (int i = 0; i < SQ_IX_NSTMT; i++) {
        int rc;
        if (st->ix_stmt[i] != NULL)
            continue;
        rc =
            sqlite3_prepare_v3(st->db, ix_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &st->ix_stmt[i], NULL);
        if (rc != SQLITE_OK)
            return sq_fail(st, rc, "index_prepare");
    }
    return RMQS_OK;
}

/* With mu held: step s (bound) for one row of int64 columns a (and b). */
static rmqs_rc ix_row(store_backend *st, sqlite3_stmt *s, int64_t *a,
                      int64_t *b)
{
    int rc = sqlite3_step(s);
    rmqs_rc out = RMQS_OK;

    if (rc == SQLITE_ROW) {
        *a = sqlite3_column_int64(s, 0);
        if (b != NULL)
            *b = sqlite3_column_int64(s, 1);
    } else {
        out =
            sq_fail(st, rc, rc == SQLITE_DONE ? "index_no_row" : "index_read");
    }
    sq_stmt_done(s);
    return out;
}

/* With mu held: one statement bound to (lo, hi) run to its end. */
static rmqs_rc ix_exec2(store_backend *st, int id, int64_t lo, int64_t hi)
{
    sqlite3_stmt *s = st->ix_stmt[id];
    int rc;

    sqlite3_bind_int64(s, 1, lo);
    sqlite3_bind_int64(s, 2, hi);
    rc = sq_stmt_exec(s);
    if (rc != SQLITE_OK) {
        rmqs_rc out = sq_fail(st, rc, "index_write");
        sq_stmt_done(s);
        return out;
    }
    return RMQS_OK;
}

/* With mu held: index the next (at most limit) jobs above the mark. */
static rmqs_rc ix_batch(store_backend *st, size_t limit, size_t *indexed)
{
    int64_t mark = 0, upto = 0, n = 0;
    rmqs_rc out;

    *indexed = 0;
    out = ix_prepare(st);
    if (out == RMQS_OK)
        out = ix_row(st, st->ix_stmt[IX_MARK], &mark, NULL);
    if (out != RMQS_OK)
        return out;
    sqlite3_bind_int64(st->ix_stmt[IX_UPTO], 1, mark);
    sqlite3_bind_int64(st->ix_stmt[IX_UPTO], 2, (sqlite3_int64)limit);
    out = ix_row(st, st->ix_stmt[IX_UPTO], &upto, &n);
    if (out != RMQS_OK || n == 0)
        return out;

    /* Only this connection writes, and mu is held: the mark read above
     * is the one the transaction moves. */
    out = sq_tx_begin(st, TX_RELAXED);
    if (out != RMQS_OK)
        return out;
    out = ix_exec2(st, IX_HEADERS, mark, upto);
    if (out == RMQS_OK)
        out = ix_exec2(st, IX_BODIES, mark, upto);
    if (out == RMQS_OK) {
        sqlite3_stmt *s = st->ix_stmt[IX_SET_MARK];
        int rc;
        sqlite3_bind_int64(s, 1, upto);
        rc = sq_stmt_exec(s);
        if (rc != SQLITE_OK) {
            out = sq_fail(st, rc, "index_mark");
            sq_stmt_done(s);
        }
    }
    if (out != RMQS_OK) {
        sq_tx_abort(st);
        return out;
    }
    out = sq_tx_commit(st);
    if (out == RMQS_OK)
        *indexed = (size_t)n;
    return out;
}

rmqs_rc sq_search_index(store_backend *st, size_t limit, size_t *indexed)
{
    size_t n = 0;
    rmqs_rc out;

    sq_lock(st);
    out = ix_batch(st, limit, &n);
    pthread_mutex_unlock(&st->mu);
    if (indexed != NULL)
        *indexed = n;
    return out;
}

int64_t sq_search_index_lag(store_backend *st)
{
    int64_t lag = -1;

    sq_lock(st);
    if (ix_prepare(st) != RMQS_OK ||
        ix_row(st, st->ix_stmt[IX_LAG], &lag, NULL) != RMQS_OK)
        lag = -1;
    pthread_mutex_unlock(&st->mu);
    return lag;
}

/* The thread's batch: mu as any call (not sq_lock: it waits for no one). */
static rmqs_rc thread_batch(void *arg, size_t limit, size_t *n, bool *more)
{
    store_backend *st = arg;
    rmqs_rc rc;

    pthread_mutex_lock(&st->mu);
    rc = ix_batch(st, limit, n);
    pthread_mutex_unlock(&st->mu);
    *more = rc == RMQS_OK && *n == limit;
    return rc;
}

/* Let whoever waits for mu go first, within limits. While it catches up,
 * a checkpoint between batches now and then: the janitor's (every second)
 * run beside back-to-back batches never finds the WAL wholly copied, so
 * the WAL would never start over and grew to ten times the database
 * (56 GB for 10M jobs) before this. With no batch running the checkpoint
 * completes, and the next batch restarts the WAL (cut back to
 * JOURNAL_SIZE_LIMIT). */
static bool thread_pause(void *arg, worker_t *wk)
{
    static _Thread_local int64_t last_ckpt;
    store_backend *st = arg;
    int64_t now = tu_mono_ms();

    if (now - last_ckpt >= CKPT_EVERY_MS) {
        (void)sq_checkpoint(st, NULL, NULL); /* logged there if it fails */
        last_ckpt = now;
    }

    for (int64_t waited = 0;
         waited < YIELD_MAX_MS && atomic_load(&st->mu_waiting) > 0; waited++)
        if (worker_sleep(wk, 1))
            return true;
    return false;
}

static const store_ix_ops sq_ix_ops = {
    .name = "rmqs-indexer",
    .batch = thread_batch,
    .pause = thread_pause,
    .first = BATCH_FIRST,
    .min = BATCH_MIN,
    .max = BATCH_MAX,
    .target_ms = BATCH_TARGET_MS,
    .poll_ms = IDLE_POLL_MS,
    .retry_ms = RETRY_MS,
};

/* Whether the schema has the search's mark (0007). */
static bool has_mark(store_backend *st)
{
    int rc;
    int64_t n;

    n = sq_query_int(st->db,
                     "SELECT count(*) FROM sqlite_schema WHERE type = 'table' "
                     "AND name = 'search_index'",
                     &rc);
    return rc == SQLITE_OK && n == 1;
}

rmqs_rc sq_ix_start(store_backend *st, rmqs_error *err)
{
    if (!has_mark(st))
        return RMQS_OK;
    return store_ix_start(&st->ix, &sq_ix_ops, st, err);
}

void sq_ix_stop(store_backend *st)
{
    store_ix_stop(&st->ix);
}

void sq_ix_kick(store_backend *st)
{
    store_ix_kick(st->ix);
}
