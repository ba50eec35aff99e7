/*
 * store_pg_indexer.c - fills job_text, the search's side table on
 * PostgreSQL (migrations/postgres/0003_search.sql), off the insert path.
 *
 * Why: the GIN indexes of the header and body searches (jsonb_path_ops,
 * pg_trgm) on jobs itself cut POST /schedule/batch from about 120k to 35k
 * jobs/s (tests/bench/README.md "search"); on a side table filled in the
 * background the insert pays for the btrees only.
 *
 * How it works (as store_sqlite_indexer.c, with what several instances on
 * one database and an identity seq add):
 *   - search_index.mark: every job with seq <= mark is in job_text. A batch
 *     copies the next jobs above it (headers as jsonb, text and JSON
 *     bodies as encode(body, 'escape')) and moves the mark, in one
 *     transaction, under pg_try_advisory_xact_lock: one instance indexes at
 *     a time, the others find the lock taken and wait for the next round.
 *   - The safe bound: seqs are handed out before commit, so a job with a
 *     lower seq may become visible after a higher one. The mark never
 *     passes b->ix_safe, the max(seq) read while holding the exclusive
 *     side of the advisory lock every inserting transaction holds shared
 *     (pg_tx_begin_insert): at that moment no insert is in progress, so
 *     every seq up to it is committed or never will be. The exclusive lock
 *     is held for that one read, once the mark has reached the last bound;
 *     its wait is cut at 100 ms (lock_timeout), as inserts queue behind it.
 *   - The thread (rmqs-pg-indexer) sleeps until an insert of this instance
 *     kicks it, or 1 s passes (other instances' inserts, a backlog after a
 *     restart); batches are sized to take about BATCH_TARGET_MS.
 *   - Deletes: the foreign key's cascade; job_text rows need no trigger.
 *   - The connection is its own (b->ix, synchronous_commit off: a lost
 *     batch is redone from the mark), connected on first use.
 */
#include "store_pg_core.h"

#include <stdlib.h>
#include <string.h>

#include "store_indexer.h"
#include "timeutil.h"

#define BATCH_MIN 200
#define BATCH_MAX 20000
#define BATCH_FIRST 2000
#define BATCH_TARGET_MS 100
#define IDLE_POLL_MS 1000
#define RETRY_MS 5000
/* The thread reads a new safe bound at most this often: each read makes
 * the inserts in progress finish before new ones start. */
#define BOUND_EVERY_MS 1000

#define INDEXER_LOCK "hashtext('rmqs-search-indexer')"

/* On b->ix (locked, up): a fresh safe bound (see the file comment). */
static rmqs_rc read_safe_bound(store_backend *b)
{
    pg_conn *pc = &b->ix;
    PGresult *res;
    rmqs_rc rc, unlock_rc;

    /* While it waits for the inserts in progress, new ones queue behind
     * it: a long insert transaction (a bulk load) must not stall every
     * POST, so it gives up after a moment and tries again later. */
    rc = pg_exec_simple(pc, "index_lock",
                        "SET lock_timeout = '100ms'; "
                        "SELECT pg_advisory_lock(" PG_INSERT_LOCK ")");
    if (rc != RMQS_OK)
        return rc;
    res = pg_exec(pc, "index_bound", "SELECT coalesce(max(seq), 0) FROM jobs",
                  0, NULL, NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1)
        b->ix_safe = pg_int(res, 0, 0);
    PQclear(res);
    /* a broken connection took its session lock with it */
    unlock_rc =
        pc->c == NULL
            ? RMQS_OK
            : pg_exec_simple(pc, "index_unlock",
                             "SELECT pg_advisory_unlock(" PG_INSERT_LOCK ")");
    return rc != RMQS_OK ? rc : unlock_rc;
}

/* On b->ix (locked, up): one batch of at most limit jobs; the bound is
 * read again when reached, but not within BOUND_EVERY_MS of the last read
 * unless now (then *indexed is 0 and nothing was done). */
static rmqs_rc ix_batch(store_backend *b, size_t limit, bool now,
                        size_t *indexed)
{
    static const char *const copy_sql =
        "WITH ins AS (INSERT INTO job_text (seq, headers, body) "
        "SELECT seq, headers::jsonb, CASE WHEN body_kind < 2 THEN "
        "encode(body, 'escape') END FROM jobs WHERE seq > $1 AND seq <= $2 "
        "ORDER BY seq LIMIT $3 RETURNING seq) "
        "UPDATE search_index SET mark = CASE WHEN (SELECT count(*) FROM ins) "
        "< $3 THEN $2 ELSE (SELECT max(seq) FROM ins) END "
        "RETURNING mark, (SELECT count(*) FROM ins)";
    pg_conn *pc = &b->ix;
    char v_mark[24], v_safe[24], v_lim[24];
    const char *vals[3];
    PGresult *res;
    int64_t mark;
    rmqs_rc rc;

    *indexed = 0;
    if (b->ix_safe < 0 || b->ix_mark >= b->ix_safe) {
        if (!now && tu_mono_ms() - b->ix_safe_at < BOUND_EVERY_MS)
            return RMQS_OK;
        rc = read_safe_bound(b);
        if (rc != RMQS_OK)
            return rc;
        b->ix_safe_at = tu_mono_ms();
    }
    rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        return rc;
    res = pg_exec(pc, "index_begin",
                  "SELECT pg_try_advisory_xact_lock(" INDEXER_LOCK "), mark "
                  "FROM search_index",
                  0, NULL, NULL, NULL, &rc);
    if (res == NULL || PQntuples(res) != 1) {
        PQclear(res);
        pg_tx_abort(pc);
        return rc != RMQS_OK ? rc : RMQS_EDB;
    }
    if (PQgetvalue(res, 0, 0)[0] == 0) { /* another instance indexes */
        PQclear(res);
        pg_tx_abort(pc);
        b->ix_mark = -1; /* it moves the mark: read it again next time */
        return RMQS_OK;
    }
    mark = pg_int(res, 0, 1);
    PQclear(res);
    b->ix_mark = mark;
    if (mark >= b->ix_safe) {
        pg_tx_abort(pc);
        return RMQS_OK;
    }
    vals[0] = pg_i64(v_mark, mark);
    vals[1] = pg_i64(v_safe, b->ix_safe);
    vals[2] = pg_i64(v_lim, (int64_t)limit);
    res = pg_exec(pc, "index_copy", copy_sql, 3, vals, NULL, NULL, &rc);
    if (res == NULL || PQntuples(res) != 1) {
        PQclear(res);
        pg_tx_abort(pc);
        return rc != RMQS_OK ? rc : RMQS_EDB;
    }
    mark = pg_int(res, 0, 0);
    *indexed = (size_t)pg_int(res, 0, 1);
    PQclear(res);
    rc = pg_tx_commit(b, pc);
    if (rc != RMQS_OK) {
        *indexed = 0;
        return rc;
    }
    b->ix_mark = mark;
    return RMQS_OK;
}

rmqs_rc pg_search_index(store_backend *b, size_t limit, size_t *indexed)
{
    size_t n = 0;
    rmqs_rc rc = pg_use(&b->ix);

    if (rc == RMQS_OK) {
        rc = ix_batch(b, limit, true, &n);
        /* the last bound reached: one more look with a fresh one, so a
         * manual caller's 0 means "nothing left" */
        if (rc == RMQS_OK && n == 0 && b->ix_mark >= 0 &&
            b->ix_mark >= b->ix_safe)
            rc = ix_batch(b, limit, true, &n);
    }
    pg_done(&b->ix);
    if (indexed != NULL)
        *indexed = n;
    return rc;
}

int64_t pg_search_index_lag(store_backend *b)
{
    PGresult *res = NULL;
    int64_t lag = -1;
    rmqs_rc rc = pg_use(&b->wr);

    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "index_lag",
                      "SELECT (SELECT coalesce(max(seq), 0) FROM jobs) - "
                      "(SELECT mark FROM search_index)",
                      0, NULL, NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1)
        lag = pg_int(res, 0, 0);
    PQclear(res);
    pg_done(&b->wr);
    return lag < 0 ? 0 : lag;
}

static rmqs_rc thread_batch(void *arg, size_t limit, size_t *n, bool *more)
{
    store_backend *b = arg;
    rmqs_rc rc = pg_use(&b->ix);

    if (rc == RMQS_OK)
        rc = ix_batch(b, limit, false, n);
    /* a full batch goes on at once; at the bound, the next poll or kick
     * reads a new one (BOUND_EVERY_MS apart) */
    *more = rc == RMQS_OK && *n == limit;
    pg_done(&b->ix);
    return rc;
}

static const store_ix_ops pg_ix_ops = {
    .name = "rmqs-pg-indexer",
    .batch = thread_batch,
    .first = BATCH_FIRST,
    .min = BATCH_MIN,
    .max = BATCH_MAX,
    .target_ms = BATCH_TARGET_MS,
    .poll_ms = IDLE_POLL_MS,
    .retry_ms = RETRY_MS,
};

rmqs_rc pg_ix_start(store_backend *b, rmqs_error *err)
{
    return store_ix_start(&b->indexer, &pg_ix_ops, b, err);
}

void pg_ix_stop(store_backend *b)
{
    store_ix_stop(&b->indexer);
}

void pg_ix_kick(store_backend *b)
{
    store_ix_kick(b->indexer);
}
