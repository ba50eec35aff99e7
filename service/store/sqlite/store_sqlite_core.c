/*
 * store_sqlite_core.c - the bottom of the SQLite backend, what every other
 * file of store/sqlite/ builds on (store_sqlite_core.h): the statements
 * (prepared once at open), errors and statement helpers, the transaction
 * discipline with its count deltas, rows -> jobs, a page of rows, and the
 * passive checkpoint. It calls nothing of the files above it.
 */
#include "store_sqlite_core.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "log.h"

#define MOD "store"

/*
 * The dispatcher's two queries say INDEXED BY jobs_due: without table
 * statistics SQLite 3.40 prefers jobs_status_deliver (status=?) and then
 * sorts every pending job in a temp B-tree (checked with EXPLAIN QUERY PLAN).
 * INDEXED BY also makes prepare fail loudly if the index ever disappears.
 */
/* attempt_errors with this attempt's error appended (?1 now, ?3 the
 * error, cut to JOB_ATTEMPT_ERROR_CHARS characters: substr counts
 * characters of a TEXT), the oldest dropped beyond JOB_ATTEMPT_ERRORS_MAX
 * (one is added at a time, so one drop keeps the bound). */
#define ATTEMPT_ERROR_NEW                                  \
    "json_object('attempt', attempts, 'at', ?1, 'error', " \
    "coalesce(substr(?3, 1, 512), ''))"
#define ATTEMPT_ERRORS_ADD                                               \
    "CASE WHEN json_array_length(coalesce(attempt_errors, '[]')) >= 10 " \
    "THEN json_insert(json_remove(attempt_errors, '$[0]'), "             \
    "'$[#]', " ATTEMPT_ERROR_NEW                                         \
    ") ELSE json_insert(coalesce(attempt_errors, '[]'), "                \
    "'$[#]', " ATTEMPT_ERROR_NEW ") END"
_Static_assert(JOB_ATTEMPT_ERRORS_MAX == 10 && JOB_ATTEMPT_ERROR_CHARS == 512,
               "ATTEMPT_ERRORS_ADD writes the bounds as literals");

const stmt_def sq_stmt_defs[S_COUNT] = {
    [S_BEGIN] = {"begin", "BEGIN IMMEDIATE"},
    [S_COMMIT] = {"commit", "COMMIT"},
    [S_ROLLBACK] = {"rollback", "ROLLBACK"},
    [S_SAVEPOINT] = {"savepoint", "SAVEPOINT req"},
    [S_RELEASE_SP] = {"release_savepoint", "RELEASE req"},
    [S_ROLLBACK_SP] = {"rollback_savepoint", "ROLLBACK TO req"},
    [S_PING] = {"ping", "SELECT 1"},
    [S_VERSION] = {"schema_version",
                   "SELECT coalesce(max(version), 0) FROM schema_migrations"},
    [S_INSERT] = {"insert",
                  "INSERT INTO jobs (id, status, exchange, routing_key, "
                  "deliver_at, due_at, delay_ms, created_at, updated_at, "
                  "sent_at, attempts, max_attempts, last_error, headers, "
                  "properties, body_kind, body, source, message_id, "
                  "schedule, fire_at, expires_at, priority, claim_rank) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                  "?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, "
                  "?24)"},
    /* a schedule's run (store_schedule_advance): its id is derived from
     * the fire time, so a run created already is simply not inserted */
    [S_INSERT_RUN] = {"insert_run",
                      "INSERT INTO jobs (id, status, exchange, routing_key, "
                      "deliver_at, due_at, delay_ms, created_at, updated_at, "
                      "sent_at, attempts, max_attempts, last_error, headers, "
                      "properties, body_kind, body, source, message_id, "
                      "schedule, fire_at, expires_at, priority, claim_rank) "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                      "?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, "
                      "?23, ?24) ON CONFLICT (id) DO NOTHING"},
    [S_IDEM_LOOKUP] = {"idem_lookup",
                       "SELECT " JOB_COLS ", request FROM idempotency "
                       "JOIN jobs ON jobs.seq = idempotency.job_seq "
                       "WHERE key = ?1"},
    [S_IDEM_INSERT] = {"idem_insert",
                       "INSERT INTO idempotency (key, job_seq, request) "
                       "VALUES (?1, ?2, ?3)"},
    [S_GET] = {"get", "SELECT " JOB_COLS ", attempt_errors FROM jobs "
                      "WHERE id = ?1"},
    [S_LIST_ALL] = {"list_all", "SELECT " JOB_COLS " FROM jobs "
                                "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_LIST_ALL_AFTER] = {"list_all_after",
                          "SELECT " JOB_COLS " FROM jobs "
                          "WHERE (deliver_at, seq) > (?2, ?3) "
                          "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_LIST_STATUS] = {"list_status", "SELECT " JOB_COLS " FROM jobs "
                                      "WHERE status = ?4 "
                                      "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_LIST_STATUS_AFTER] =
        {"list_status_after",
         "SELECT " JOB_COLS " FROM jobs "
         "WHERE status = ?4 AND (deliver_at, seq) > (?2, ?3) "
         "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_RESCHEDULE] = {"reschedule",
                      "UPDATE jobs SET deliver_at = ?1, due_at = max(?1, ?3), "
                      "delay_ms = ?2, updated_at = ?3, held_by = NULL "
                      "WHERE id = ?4 AND status = 0 RETURNING " JOB_COLS},
    [S_CANCEL] = {"cancel", "UPDATE jobs SET status = 4, updated_at = ?1 "
                            "WHERE id = ?2 AND status = 0 RETURNING " JOB_COLS},
    [S_SETTLE_SENT] = {"settle_sent",
                       "UPDATE jobs SET status = 2, sent_at = ?1, "
                       "updated_at = ?1, held_by = coalesce(?3, held_by), "
                       "held_ms = CASE WHEN ?3 IS NULL THEN held_ms "
                       "ELSE ?4 END WHERE id = ?2 AND status = 1"},
    [S_SETTLE_RETRY] = {"settle_retry",
                        "UPDATE jobs SET last_error = ?3, updated_at = ?1, "
                        "attempt_errors = " ATTEMPT_ERRORS_ADD ", "
                        "failed_at = CASE WHEN attempts >= max_attempts "
                        "THEN ?1 END, "
                        "status = CASE WHEN attempts >= max_attempts "
                        "THEN 3 ELSE 0 END, "
                        "due_at = CASE WHEN attempts >= max_attempts "
                        "THEN due_at ELSE ?4 END "
                        "WHERE id = ?2 AND status = 1 RETURNING status"},
    [S_SETTLE_RELEASE] = {"settle_release",
                          "UPDATE jobs SET status = 0, "
                          "attempts = max(attempts - 1, 0), updated_at = ?1 "
                          "WHERE id = ?2 AND status = 1"},
    [S_SETTLE_EXPIRE] = {"settle_expire",
                         "UPDATE jobs SET status = 4, last_error = ?3, "
                         "updated_at = ?1 WHERE id = ?2 AND status = 1"},
    [S_SETTLE_FAIL] = {"settle_fail",
                       "UPDATE jobs SET status = 3, last_error = ?3, "
                       "attempt_errors = " ATTEMPT_ERRORS_ADD ", "
                       "failed_at = ?1, updated_at = ?1 "
                       "WHERE id = ?2 AND status = 1"},
    /* held back by a limit: pending again at ?4, the attempt not counted */
    [S_SETTLE_HOLD] = {"settle_hold",
                       "UPDATE jobs SET status = 0, "
                       "attempts = max(attempts - 1, 0), updated_at = ?1, "
                       "held_by = ?3, due_at = ?4, held_ms = ?5 "
                       "WHERE id = ?2 AND status = 1"},
    [S_RECOVER] = {"recover", "UPDATE jobs SET status = 0, "
                              "attempts = max(attempts - 1, 0) "
                              "WHERE status = 1"},
    [S_CLAIM_HELD] = {"claim_held",
                      "UPDATE jobs SET status = 1, attempts = attempts + 1, "
                      "updated_at = ?1 WHERE id = ?2 AND status = 0"},
    [S_COUNTS] = {"counts", "SELECT status, n FROM job_counts"},
    [S_COUNTS_ADD] = {"counts_add",
                      "UPDATE job_counts SET n = n + ?2 WHERE status = ?1"},
    /* a failed job back to pending, its attempts from 0; last_error kept;
     * ?1 NULL keeps deliver_at (a bulk retry) */
    [S_RETRY] = {"retry",
                 "UPDATE jobs SET status = 0, attempts = 0, "
                 "deliver_at = coalesce(?1, deliver_at), "
                 "due_at = max(coalesce(?1, deliver_at), ?3), delay_ms = ?2, "
                 "updated_at = ?3, held_by = NULL, failed_at = NULL "
                 "WHERE id = ?4 AND status = 3 RETURNING " JOB_COLS},
};

#define STORE_N_STATUS 5 /* job_status values 0..4, the rows of job_counts */

/* ------------------------------------------------------------------------ */
/* Errors and statement helpers                                             */

/* Map a SQLite result code of connection db to the service's codes and log
 * the failure. */
rmqs_rc sq_fail_on(sqlite3 *db, int rc, const char *op)
{
    int sys = sqlite3_system_errno(db);
    rmqs_rc out;

    if ((rc & 0xff) == SQLITE_INTERRUPT)
        return RMQS_ETIMEDOUT; /* a search's budget ran out: not a failure */
    switch (rc & 0xff) {
    case SQLITE_FULL: out = RMQS_EFULL; break;
    case SQLITE_IOERR:
        out = (sys == ENOSPC || sys == EDQUOT) ? RMQS_EFULL : RMQS_EDB;
        break;
    case SQLITE_NOMEM: out = RMQS_ENOMEM; break;
    default: out = RMQS_EDB; break;
    }
    log_error(MOD, "database call failed",
              "op=%s code=%d reason=\"%s\" detail=\"%s\" errno=%d", op, rc,
              sqlite3_errstr(rc), sqlite3_errmsg(db), sys);
    return out;
}

rmqs_rc sq_fail(store_backend *st, int rc, const char *op)
{
    return sq_fail_on(st->db, rc, op);
}

sqlite3_stmt *sq_stmt(store_backend *st, stmt_id id)
{
    return st->stmt[id];
}

void sq_stmt_done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

/* Step a statement that yields no row, then reset it. */
int sq_stmt_exec(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);

    if (rc == SQLITE_ROW) /* e.g. a PRAGMA answering; not an error */
        rc = SQLITE_DONE;
    if (rc != SQLITE_DONE) {
        /* keep the error in errmsg for sq_fail: reset would replace it */
        return rc;
    }
    sq_stmt_done(s);
    return SQLITE_OK;
}

/* Fail a statement: map the error (before reset replaces it), reset. */
rmqs_rc sq_stmt_fail(store_backend *st, sqlite3_stmt *s, int rc, stmt_id id)
{
    rmqs_rc out = sq_fail(st, rc, sq_stmt_defs[id].name);

    sq_stmt_done(s);
    return out;
}

/* Put the connection at synchronous NORMAL (relaxed) or back at FULL; a
 * no-op for a store opened NORMAL. Outside a transaction only: SQLite
 * refuses the change inside one. A fresh exec each time, because a kept
 * prepared PRAGMA synchronous does not reliably apply
 * (store_sqlite_schema.c's file comment: the sync policy). */
rmqs_rc sq_sync_set(store_backend *st, bool relaxed)
{
    int rc;

    if (!st->sync_full || st->sync_relaxed == relaxed)
        return RMQS_OK;
    rc = sqlite3_exec(st->db,
                      relaxed ? "PRAGMA synchronous = NORMAL"
                              : "PRAGMA synchronous = FULL",
                      NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return sq_fail(st, rc,
                       relaxed ? "synchronous_normal" : "synchronous_full");
    st->sync_relaxed = relaxed;
    return RMQS_OK;
}

/* Every transaction ends here, committed or not: its count deltas are
 * spent or void, and a relaxed connection goes back to FULL. If that fails
 * the flag stays set and the next durable sq_tx_begin tries again, refusing
 * to start rather than commit an API write without fsync. */
static void tx_end(store_backend *st)
{
    store_delta_clear(&st->delta);
    (void)sq_sync_set(st, false);
}

rmqs_rc sq_tx_begin(store_backend *st, tx_sync how)
{
    sqlite3_stmt *s = sq_stmt(st, S_BEGIN);
    rmqs_rc out;
    int rc;

    /* a durable transaction never starts at NORMAL; a relaxed one that
     * cannot switch (logged) simply commits at FULL */
    out = sq_sync_set(st, how == TX_RELAXED);
    if (out != RMQS_OK && how == TX_DURABLE)
        return out;
    store_delta_clear(&st->delta);
    rc = sq_stmt_exec(s);
    if (rc != SQLITE_OK) {
        out = sq_fail(st, rc, "begin");
        sq_stmt_done(s);
        tx_end(st);
        return out;
    }
    return RMQS_OK;
}

/* Roll back if SQLite left a transaction open (it may already have rolled
 * back by itself, e.g. after SQLITE_FULL). */
void sq_tx_abort(store_backend *st)
{
    sqlite3_stmt *s;
    int rc;

    if (!sqlite3_get_autocommit(st->db)) {
        s = sq_stmt(st, S_ROLLBACK);
        rc = sq_stmt_exec(s);
        if (rc != SQLITE_OK) {
            (void)sq_fail(st, rc, "rollback");
            sq_stmt_done(s);
        }
    }
    tx_end(st);
}

/* Inside the transaction, just before COMMIT: add the nonzero deltas to
 * job_counts. */
static rmqs_rc counts_flush(store_backend *st)
{
    sqlite3_stmt *s = sq_stmt(st, S_COUNTS_ADD);

    for (int i = 0; i < STORE_N_STATUS; i++) {
        int rc;

        if (st->delta.n[i] == 0)
            continue;
        sqlite3_bind_int(s, 1, i);
        sqlite3_bind_int64(s, 2, st->delta.n[i]);
        rc = sq_stmt_exec(s);
        if (rc != SQLITE_OK)
            return sq_stmt_fail(st, s, rc, S_COUNTS_ADD);
    }
    return RMQS_OK;
}

rmqs_rc sq_tx_commit(store_backend *st)
{
    sqlite3_stmt *s = sq_stmt(st, S_COMMIT);
    rmqs_rc out = RMQS_OK;
    int rc;

    /* If SQLite already rolled the whole transaction back by itself, the
     * deltas describe rows that no longer exist and an UPDATE now would
     * run (and commit) on its own: skip it; COMMIT then fails with "no
     * transaction is active" and sq_tx_abort drops the deltas. */
    if (!sqlite3_get_autocommit(st->db))
        out = counts_flush(st);
    if (out != RMQS_OK) {
        sq_tx_abort(st);
        return out;
    }
    rc = sq_stmt_exec(s);
    if (rc != SQLITE_OK) {
        out = sq_fail(st, rc, "commit");
        sq_stmt_done(s);
        sq_tx_abort(st);
        return out;
    }
    tx_end(st);
    return RMQS_OK;
}

int sq_bind_text_or_null(sqlite3_stmt *s, int i, const char *v)
{
    return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC)
             : sqlite3_bind_null(s, i);
}

/* ------------------------------------------------------------------------ */
/* Rows <-> jobs                                                            */

static char *col_strdup(sqlite3_stmt *s, int c)
{
    const unsigned char *t = sqlite3_column_text(s, c);
    int n = sqlite3_column_bytes(s, c);
    char *out;

    if (!t)
        return NULL;
    out = malloc((size_t)n + 1);
    if (!out)
        return NULL;
    memcpy(out, t, (size_t)n);
    out[n] = '\0';
    return out;
}

/* Read the JOB_COLS of the current row into *out (zeroed first). */
size_t sq_row_bytes(sqlite3_stmt *s)
{
    static const int texts[] = {COL_EXCHANGE, COL_ROUTING_KEY,
                                COL_SCHEDULE, COL_LAST_ERROR,
                                COL_HEADERS,  COL_PROPERTIES};
    size_t len = 0;

    /* sqlite3_column_bytes of a TEXT or BLOB value converts nothing; NULL
     * is 0 */
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        len += (size_t)sqlite3_column_bytes(s, texts[i]);
    return store_item_bytes(sqlite3_column_int(s, COL_BODY_KIND),
                            (size_t)sqlite3_column_bytes(s, COL_BODY), len);
}

/* A TEXT column in place, or NULL when the column is NULL. */
static const char *col_or_null(sqlite3_stmt *s, int c)
{
    return sqlite3_column_type(s, c) == SQLITE_NULL
               ? NULL
               : (const char *)sqlite3_column_text(s, c);
}

rmqs_rc sq_row_to_job(sqlite3_stmt *s, job_t *out, int64_t *seq_out)
{
    const void *id = sqlite3_column_blob(s, COL_ID);
    const char *headers, *properties;
    const void *body;
    size_t headers_len, properties_len, body_len;
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (!id || sqlite3_column_bytes(s, COL_ID) != JOB_ID_BYTES) {
        log_error(MOD, "corrupt row", "seq=%lld column=id",
                  (long long)sqlite3_column_int64(s, COL_SEQ));
        return RMQS_EDB;
    }
    if (seq_out)
        *seq_out = sqlite3_column_int64(s, COL_SEQ);
    job_id_format(id, out->id);
    out->status = (job_status)sqlite3_column_int(s, COL_STATUS);
    out->source = (job_source)sqlite3_column_int(s, COL_SOURCE);
    out->deliver_at = sqlite3_column_int64(s, COL_DELIVER_AT);
    out->due_at = sqlite3_column_int64(s, COL_DUE_AT);
    out->delay_ms = sqlite3_column_int64(s, COL_DELAY_MS);
    out->created_at = sqlite3_column_int64(s, COL_CREATED_AT);
    out->updated_at = sqlite3_column_int64(s, COL_UPDATED_AT);
    out->sent_at = sqlite3_column_type(s, COL_SENT_AT) == SQLITE_NULL
                       ? -1
                       : sqlite3_column_int64(s, COL_SENT_AT);
    out->attempts = sqlite3_column_int(s, COL_ATTEMPTS);
    out->max_attempts = sqlite3_column_int(s, COL_MAX_ATTEMPTS);
    out->body_kind = (job_body_kind)sqlite3_column_int(s, COL_BODY_KIND);
    out->fire_at = sqlite3_column_type(s, COL_FIRE_AT) == SQLITE_NULL
                       ? -1
                       : sqlite3_column_int64(s, COL_FIRE_AT);
    out->expires_at = sqlite3_column_int64(s, COL_EXPIRES_AT); /* NULL: 0 */
    out->priority = sqlite3_column_int(s, COL_PRIORITY);
    out->claim_rank = sqlite3_column_int64(s, COL_CLAIM_RANK);
    out->held_ms = sqlite3_column_int64(s, COL_HELD_MS);
    out->failed_at = sqlite3_column_int64(s, COL_FAILED_AT); /* NULL: 0 */
    if (sqlite3_column_type(s, COL_HELD_BY) != SQLITE_NULL) {
        out->held_by = col_strdup(s, COL_HELD_BY);
        if (out->held_by == NULL)
            goto nomem;
    }

    out->exchange = col_strdup(s, COL_EXCHANGE);
    out->routing_key = col_strdup(s, COL_ROUTING_KEY);
    if (!out->exchange || !out->routing_key)
        goto nomem;
    if (sqlite3_column_type(s, COL_LAST_ERROR) != SQLITE_NULL) {
        out->last_error = col_strdup(s, COL_LAST_ERROR);
        if (!out->last_error)
            goto nomem;
    }
    if (sqlite3_column_type(s, COL_SCHEDULE) != SQLITE_NULL) {
        out->schedule = col_strdup(s, COL_SCHEDULE);
        if (!out->schedule)
            goto nomem;
    }
    /* each value first, then its length (the order SQLite asks for) */
    headers = col_or_null(s, COL_HEADERS);
    headers_len = (size_t)sqlite3_column_bytes(s, COL_HEADERS);
    properties = col_or_null(s, COL_PROPERTIES);
    properties_len = (size_t)sqlite3_column_bytes(s, COL_PROPERTIES);
    body = sqlite3_column_blob(s, COL_BODY);
    body_len = (size_t)sqlite3_column_bytes(s, COL_BODY);
    rc = store_job_row_tail(out, headers, headers_len, properties,
                            properties_len, body, body_len);
    if (rc != RMQS_OK)
        job_clear(out);
    return rc;

nomem:
    job_clear(out);
    return RMQS_ENOMEM;
}

/* Step s once and load the row into *out; RMQS_ENOTFOUND if none. s is left
 * for the caller to reset (sq_stmt_done). */
rmqs_rc sq_step_one_job(store_backend *st, sqlite3_stmt *s, stmt_id sid,
                        job_t *out)
{
    int rc = sqlite3_step(s);

    if (rc == SQLITE_DONE)
        return RMQS_ENOTFOUND;
    if (rc != SQLITE_ROW)
        return sq_fail(st, rc, sq_stmt_defs[sid].name);
    return sq_row_to_job(s, out, NULL);
}

/* Load a job by binary id (within the caller's transaction or not). */
rmqs_rc sq_get_by_id(store_backend *st, const unsigned char id[JOB_ID_BYTES],
                     job_t *out)
{
    sqlite3_stmt *s = sq_stmt(st, S_GET);
    rmqs_rc rc;

    sqlite3_bind_blob(s, 1, id, JOB_ID_BYTES, SQLITE_STATIC);
    rc = sq_step_one_job(st, s, S_GET, out);
    if (rc == RMQS_OK &&
        sqlite3_column_type(s, COL_ATTEMPT_ERRORS) != SQLITE_NULL) {
        rc = store_json_load(
            (const char *)sqlite3_column_text(s, COL_ATTEMPT_ERRORS),
            (size_t)sqlite3_column_bytes(s, COL_ATTEMPT_ERRORS), out->id,
            &out->attempt_errors);
        if (rc != RMQS_OK)
            job_clear(out);
    }
    sq_stmt_done(s);
    return rc;
}

rmqs_rc sq_collect_page(store_backend *st, sqlite3_stmt *s, const char *op,
                        size_t limit, size_t max_bytes, job_t **jobs_out,
                        size_t *n_out, bool *more, store_cursor *last)
{
    int64_t last_seq = 0;
    job_t *jobs = NULL;
    size_t n = 0, cap = 0;
    store_page page;
    rmqs_rc out = RMQS_OK;
    int rc;

    store_page_init(&page, limit, max_bytes);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (!store_page_take(&page, sq_row_bytes(s))) {
            *more = true;
            break;
        }
        if (n == cap) {
            job_t *nj = store_grow(jobs, &cap, sizeof(*jobs));
            if (!nj) {
                out = RMQS_ENOMEM;
                break;
            }
            jobs = nj;
        }
        out = sq_row_to_job(s, &jobs[n], &last_seq);
        if (out != RMQS_OK)
            break;
        n++;
    }
    if (out == RMQS_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        out = sq_fail(st, rc, op);
    if (out != RMQS_OK) {
        store_jobs_free(jobs, n);
        *more = false;
        return out;
    }
    if (n > 0) {
        last->deliver_at = jobs[n - 1].deliver_at;
        last->seq = last_seq;
    }
    *jobs_out = jobs;
    *n_out = n;
    return RMQS_OK;
}

rmqs_rc sq_checkpoint(store_backend *st, int64_t *wal_frames, int64_t *copied)
{
    const char *path;
    rmqs_rc out = RMQS_OK;
    int rc, log = 0, ckpt = 0;

    pthread_mutex_lock(&st->ckpt_mu);
    if (st->ckpt_db == NULL) {
        sq_lock(st);
        path = sqlite3_db_filename(st->db, "main");
        rc = sqlite3_open_v2(path, &st->ckpt_db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
        pthread_mutex_unlock(&st->mu);
        if (rc != SQLITE_OK) {
            log_error(MOD, "cannot open the checkpoint connection",
                      "reason=\"%s\"", sqlite3_errstr(rc));
            sqlite3_close(st->ckpt_db);
            st->ckpt_db = NULL;
            out = RMQS_EDB;
            goto done;
        }
        sqlite3_busy_timeout(st->ckpt_db, 100);
        /* Read once so the connection attaches to the WAL; a checkpoint
         * from a connection that never read reports an empty log. */
        sqlite3_exec(st->ckpt_db, "SELECT count(*) FROM sqlite_schema", NULL,
                     NULL, NULL);
    }
    /* PASSIVE: copies what it can without waiting for readers or writers. */
    rc = sqlite3_wal_checkpoint_v2(st->ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE,
                                   &log, &ckpt);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
        log_warn(MOD, "checkpoint failed", "reason=\"%s\"",
                 sqlite3_errmsg(st->ckpt_db));
        out = RMQS_EDB;
    }
done:
    if (wal_frames)
        *wal_frames = log;
    if (copied)
        *copied = ckpt;
    pthread_mutex_unlock(&st->ckpt_mu);
    return out;
}
