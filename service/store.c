/*
 * store.c - durable job storage in one SQLite file (the contract is store.h).
 *
 * Why: jobs must survive restarts and crashes, and a job the API accepted
 * must never be lost or published twice by our own doing. SQLite in WAL mode
 * with synchronous=FULL makes every committed write durable on return.
 *
 * How it works:
 *   - One connection per store_t, opened with SQLITE_OPEN_NOMUTEX and guarded
 *     by our own mutex (st->mu): every public call holds it from first to
 *     last statement, so HTTP workers and the dispatcher are serialised and
 *     sqlite3_errmsg() still describes our own failure when we read it.
 *   - Every statement is prepared once at open (the stmt_defs table below)
 *     and kept in st->stmt[]; calls bind, step, reset and clear bindings.
 *     All the SQL of the service is in this file.
 *   - Writes run in BEGIN IMMEDIATE ... COMMIT (the write lock is taken up
 *     front, so a read->write upgrade can never fail with SQLITE_BUSY).
 *     After any failure, if SQLite left the transaction open
 *     (sqlite3_get_autocommit() == 0) we ROLLBACK, so the store stays usable:
 *     once disk space returns, later writes succeed without reopening.
 *   - SQLITE_FULL (and an I/O error caused by ENOSPC/EDQUOT) map to
 *     RMQS_EFULL, out-of-memory to RMQS_ENOMEM, the rest to RMQS_EDB; each
 *     failure is logged once here with the operation and SQLite's message.
 *   - Schema: migrations/NNNN_name.sql, embedded at build time, applied at
 *     open in ascending order, each in its own transaction together with its
 *     schema_migrations row. A database newer than the binary is refused.
 *
 * Row <-> job_t: id is a 16-byte BLOB (job_id_parse/format), headers and
 * properties are compact JSON text or NULL, sent_at is NULL while the job
 * is unsent (-1 in job_t), body is a BLOB (never NULL in the table; empty
 * bodies are a zero-length blob).
 *
 * Settling: SENT keeps last_error as it was (the last failure before the
 * successful attempt stays visible); RETRY stores the new error; store_recover
 * leaves updated_at alone (it has no clock; it only undoes a claim).
 *
 * Job counts (GET /metrics) live in table job_counts, one row per status,
 * kept exact by this file rather than by triggers (migration 0005 dropped
 * them: a trigger per row, which also makes every INSERT keep a statement
 * journal inside the request's savepoint, halved the rate of group commits
 * of 1000-job requests; with one-job requests the cost was 5-10% of CPU per
 * row, as the request's savepoint journals the same pages anyway). Every
 * statement that inserts, deletes or changes the status of jobs adds what
 * it did to st->delta[status]: insert +1 for the new row's status; claim
 * pending -> publishing per RETURNING row; settle per sqlite3_changes() or,
 * for RETRY (pending or failed), per RETURNING status; release, cancel,
 * recover likewise; purge -1 per deleted row's RETURNING status. tx_commit
 * applies the nonzero sums with one UPDATE per status just before COMMIT,
 * in the same transaction, so the counts commit or vanish with the rows.
 * Every way a transaction ends (tx_commit, tx_abort) zeroes the sums; a
 * request undone by ROLLBACK TO counts into its own scratch, added only on
 * RELEASE; and when SQLite rolled the whole transaction back by itself
 * (SQLITE_FULL etc.: sqlite3_get_autocommit() == 1) the sums are dropped,
 * never applied outside a transaction. All of it runs under st->mu, so
 * store_counts() never sees a transaction half-way. Anything writing jobs
 * behind the store's back must update job_counts itself.
 *
 * Claiming ahead without the write lock (store_claim_ahead, store_record):
 * the writer holds mu through its commit and fsync (and any checkpoint in
 * it), and a neighbour on the same disk can stall an fsync for a second; a
 * claim behind it would land late however early it was planned. So the
 * dispatcher reads due jobs on a connection of its own (st->rd_db, WAL: a
 * reader never waits for the writer) and holds them in memory (st->held,
 * claimset.h) before the claim is written; store_record writes the claims
 * later, with the outcomes, under mu, and may wait as long as the disk
 * likes. Until then the database says pending, so: cancel and reschedule
 * refuse a held job (409, as for publishing), store_get/store_list show it
 * as publishing, reads skip it, and claimset's generation rules drop a job
 * whose cancel, reschedule or settle overlapped the snapshot that read it.
 * A crash before the claim is written leaves the job pending: published
 * again at the next start (a lost claim is redone, at least once).
 * store_counts counts such a job as pending until then. store_claim_due
 * (the claim in one locked transaction) must not run beside
 * store_claim_ahead: it does not hold what it claims.
 *
 * The dispatcher's own transactions (store_claim_due, store_settle,
 * store_recover) commit with synchronous=NORMAL even on a FULL connection:
 * the connection switches to NORMAL before their BEGIN and back to FULL
 * when they end. Why this is safe: a job's insertion is always fsynced (API
 * writes stay FULL, and a FULL transaction refuses to start if FULL cannot
 * be restored); in WAL mode a NORMAL commit survives a process crash, and
 * only an OS crash or power loss can undo it, which can only put a job back
 * where it was before the claim or settle: pending, or publishing (which
 * store_recover makes pending at start-up). So it is published again - a
 * duplicate, never a loss; delivery is at-least-once anyway. The WAL is
 * append-only, so the next FULL commit (its fsync covers every earlier
 * frame) or the janitor's checkpoint (every second; it syncs the WAL before
 * copying) makes those commits durable too. The switch is a fresh
 * sqlite3_exec each time, not a kept prepared statement: SQLite applies
 * PRAGMA synchronous when the text is compiled, and a prepared copy only
 * takes effect when it re-prepares itself (its program is just OP_Expire),
 * so the first step after open would silently keep the older setting.
 */
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "claimset.h"
#include "log.h"
#include "timeutil.h"

#define MODULE "store"

#define BUSY_TIMEOUT_MS 5000
#define JOURNAL_SIZE_LIMIT (64 * 1024 * 1024) /* bytes the WAL is cut back to */
#define CURSOR_MAX 48                          /* "<int64>.<int64>" + NUL */

/* The columns every job-returning statement yields, in row_to_job order. */
#define JOB_COLS                                                              \
    "seq, id, status, exchange, routing_key, deliver_at, due_at, delay_ms, "  \
    "created_at, updated_at, sent_at, attempts, max_attempts, last_error, "   \
    "headers, properties, body_kind, body, source"

enum {
    COL_SEQ, COL_ID, COL_STATUS, COL_EXCHANGE, COL_ROUTING_KEY, COL_DELIVER_AT,
    COL_DUE_AT, COL_DELAY_MS, COL_CREATED_AT, COL_UPDATED_AT, COL_SENT_AT,
    COL_ATTEMPTS, COL_MAX_ATTEMPTS, COL_LAST_ERROR, COL_HEADERS,
    COL_PROPERTIES, COL_BODY_KIND, COL_BODY, COL_SOURCE, COL_COUNT
};

/* Every statement of the store, prepared once at open. */
typedef enum stmt_id {
    S_BEGIN, S_COMMIT, S_ROLLBACK, S_SAVEPOINT, S_RELEASE_SP, S_ROLLBACK_SP,
    S_PING, S_VERSION,
    S_INSERT, S_IDEM_LOOKUP, S_IDEM_INSERT, S_GET,
    S_LIST_ALL, S_LIST_ALL_AFTER, S_LIST_STATUS, S_LIST_STATUS_AFTER,
    S_LIST_FILTERED, S_LIST_MESSAGE_ID,
    S_RESCHEDULE, S_CANCEL, S_NEXT_DUE, S_CLAIM_DUE,
    S_SETTLE_SENT, S_SETTLE_RETRY, S_SETTLE_RELEASE, S_RECOVER, S_CLAIM_HELD,
    S_COUNTS, S_COUNTS_ADD,
    S_COUNT
} stmt_id;

typedef struct stmt_def {
    const char *name; /* for logs and the test hook store__sql() */
    const char *sql;
} stmt_def;

/*
 * The dispatcher's two queries say INDEXED BY jobs_due: without table
 * statistics SQLite 3.40 prefers jobs_status_deliver (status=?) and then
 * sorts every pending job in a temp B-tree (checked with EXPLAIN QUERY PLAN).
 * INDEXED BY also makes prepare fail loudly if the index ever disappears.
 */
static const stmt_def stmt_defs[S_COUNT] = {
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
                  "properties, body_kind, body, source, message_id) VALUES "
                  "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                  "?14, ?15, ?16, ?17, ?18, ?19)"},
    [S_IDEM_LOOKUP] = {"idem_lookup",
                       "SELECT " JOB_COLS ", request FROM idempotency "
                       "JOIN jobs ON jobs.seq = idempotency.job_seq "
                       "WHERE key = ?1"},
    [S_IDEM_INSERT] = {"idem_insert",
                       "INSERT INTO idempotency (key, job_seq, request) "
                       "VALUES (?1, ?2, ?3)"},
    [S_GET] = {"get", "SELECT " JOB_COLS " FROM jobs WHERE id = ?1"},
    [S_LIST_ALL] = {"list_all", "SELECT " JOB_COLS " FROM jobs "
                                "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_LIST_ALL_AFTER] = {"list_all_after",
                          "SELECT " JOB_COLS " FROM jobs "
                          "WHERE (deliver_at, seq) > (?2, ?3) "
                          "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_LIST_STATUS] = {"list_status", "SELECT " JOB_COLS " FROM jobs "
                                      "WHERE status = ?4 "
                                      "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_LIST_STATUS_AFTER] = {"list_status_after",
                             "SELECT " JOB_COLS " FROM jobs "
                             "WHERE status = ?4 AND (deliver_at, seq) > (?2, ?3) "
                             "ORDER BY deliver_at, seq LIMIT ?1"},
    /* Source and message_id filters (?5, ?6; NULL = any) are rarer: the
     * first walks deliver_at order and filters, the second starts from the
     * message_id index and sorts the few rows it finds. */
    [S_LIST_FILTERED] = {"list_filtered",
                         "SELECT " JOB_COLS " FROM jobs INDEXED BY jobs_deliver "
                         "WHERE (deliver_at, seq) > (?2, ?3) "
                         "AND (?4 IS NULL OR status = ?4) "
                         "AND (?5 IS NULL OR source = ?5) "
                         "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_LIST_MESSAGE_ID] = {"list_message_id",
                           "SELECT " JOB_COLS " FROM jobs "
                           "INDEXED BY jobs_message_id "
                           "WHERE message_id = ?6 AND (deliver_at, seq) > (?2, ?3) "
                           "AND (?4 IS NULL OR status = ?4) "
                           "AND (?5 IS NULL OR source = ?5) "
                           "ORDER BY deliver_at, seq LIMIT ?1"},
    [S_RESCHEDULE] = {"reschedule",
                      "UPDATE jobs SET deliver_at = ?1, due_at = max(?1, ?3), "
                      "delay_ms = ?2, updated_at = ?3 "
                      "WHERE id = ?4 AND status = 0 RETURNING " JOB_COLS},
    [S_CANCEL] = {"cancel", "UPDATE jobs SET status = 4, updated_at = ?1 "
                            "WHERE id = ?2 AND status = 0 RETURNING " JOB_COLS},
    [S_NEXT_DUE] = {"next_due", "SELECT min(due_at) FROM jobs "
                                "INDEXED BY jobs_due WHERE status = 0"},
    [S_CLAIM_DUE] = {"claim_due",
                     "UPDATE jobs SET status = 1, attempts = attempts + 1, "
                     "updated_at = ?1 WHERE seq IN (SELECT seq FROM jobs "
                     "INDEXED BY jobs_due WHERE status = 0 AND due_at <= ?2 "
                     "ORDER BY due_at, seq LIMIT ?3) RETURNING " JOB_COLS},
    [S_SETTLE_SENT] = {"settle_sent",
                       "UPDATE jobs SET status = 2, sent_at = ?1, "
                       "updated_at = ?1 WHERE id = ?2 AND status = 1"},
    [S_SETTLE_RETRY] = {"settle_retry",
                        "UPDATE jobs SET last_error = ?3, updated_at = ?1, "
                        "status = CASE WHEN attempts >= max_attempts "
                        "THEN 3 ELSE 0 END, "
                        "due_at = CASE WHEN attempts >= max_attempts "
                        "THEN due_at ELSE ?4 END "
                        "WHERE id = ?2 AND status = 1 RETURNING status"},
    [S_SETTLE_RELEASE] = {"settle_release",
                          "UPDATE jobs SET status = 0, "
                          "attempts = max(attempts - 1, 0), updated_at = ?1 "
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
};

#define N_STATUS 5 /* job_status values 0..4, the rows of job_counts */

/* The dispatcher's reads on the read connection (claiming ahead): pending
 * jobs in due order; the caller stops stepping when it has enough. */
#define RD_DUE_SQL                                                            \
    "SELECT " JOB_COLS " FROM jobs INDEXED BY jobs_due "                      \
    "WHERE status = 0 AND due_at <= ?1 ORDER BY due_at, seq"
#define RD_NEXT_SQL                                                           \
    "SELECT id, due_at FROM jobs INDEXED BY jobs_due WHERE status = 0 "       \
    "ORDER BY due_at, seq"
#define CLAIM_READS 3 /* snapshots one store_claim_ahead call may read */

struct store {
    pthread_mutex_t mu; /* held by every public call */
    sqlite3 *db;
    sqlite3_stmt *stmt[S_COUNT];
    sqlite3_stmt *purge;  /* prepared on first use (needs migration 0003) */
    /* A second connection for WAL checkpoints, so they run beside the
     * writers instead of inside their commits. Opened on first use. */
    pthread_mutex_t ckpt_mu;
    sqlite3 *ckpt_db;
    char *path;     /* the database file, set at open; read without mu */
    char *dir;      /* its folder, for statvfs */
    /* The open transaction's change to job_counts, by status: what its
     * statements did to jobs so far (see the file comment). Zero outside a
     * transaction. */
    int64_t delta[N_STATUS];
    bool sync_full;    /* opened with synchronous=FULL */
    bool sync_relaxed; /* the connection is at NORMAL just now (dispatcher) */
    /* Claiming ahead (file comment): a read-only connection of the
     * dispatcher's, never behind mu, and the jobs it holds. */
    pthread_mutex_t rd_mu; /* the read connection (one feeder uses it) */
    sqlite3 *rd_db;
    sqlite3_stmt *rd_due, *rd_next;
    claimset_t *held;
};

/* How a transaction's COMMIT must reach the disk. */
typedef enum tx_sync {
    TX_DURABLE, /* fsynced when the store was opened FULL: API writes */
    TX_RELAXED  /* NORMAL: the dispatcher's status changes (file comment) */
} tx_sync;

/* ------------------------------------------------------------------------ */
/* Errors and statement helpers                                             */

/* Map a SQLite result code of connection db to the service's codes and log
 * the failure. */
static rmqs_rc db_fail_on(sqlite3 *db, int rc, const char *op)
{
    int sys = sqlite3_system_errno(db);
    rmqs_rc out;

    switch (rc & 0xff) {
    case SQLITE_FULL:
        out = RMQS_EFULL;
        break;
    case SQLITE_IOERR:
        out = (sys == ENOSPC || sys == EDQUOT) ? RMQS_EFULL : RMQS_EDB;
        break;
    case SQLITE_NOMEM:
        out = RMQS_ENOMEM;
        break;
    default:
        out = RMQS_EDB;
        break;
    }
    log_error(MODULE, "database call failed",
              "op=%s code=%d reason=\"%s\" detail=\"%s\" errno=%d", op, rc,
              sqlite3_errstr(rc), sqlite3_errmsg(db), sys);
    return out;
}

static rmqs_rc db_fail(store_t *st, int rc, const char *op)
{
    return db_fail_on(st->db, rc, op);
}

static sqlite3_stmt *stmt_get(store_t *st, stmt_id id)
{
    return st->stmt[id];
}

static void stmt_done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

/* Step a statement that yields no row, then reset it. */
static int stmt_exec(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);

    if (rc == SQLITE_ROW) /* e.g. a PRAGMA answering; not an error */
        rc = SQLITE_DONE;
    if (rc != SQLITE_DONE) {
        /* keep the error in errmsg for db_fail: reset would replace it */
        return rc;
    }
    stmt_done(s);
    return SQLITE_OK;
}

/* Fail a statement: map the error (before reset replaces it), reset. */
static rmqs_rc stmt_fail(store_t *st, sqlite3_stmt *s, int rc, stmt_id id)
{
    rmqs_rc out = db_fail(st, rc, stmt_defs[id].name);

    stmt_done(s);
    return out;
}

/* Put the connection at synchronous NORMAL (relaxed) or back at FULL; a
 * no-op for a store opened NORMAL. Outside a transaction only: SQLite
 * refuses the change inside one. A fresh exec each time, because a kept
 * prepared PRAGMA synchronous does not reliably apply (file comment). */
static rmqs_rc sync_set(store_t *st, bool relaxed)
{
    int rc;

    if (!st->sync_full || st->sync_relaxed == relaxed)
        return RMQS_OK;
    rc = sqlite3_exec(st->db,
                      relaxed ? "PRAGMA synchronous = NORMAL"
                              : "PRAGMA synchronous = FULL",
                      NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return db_fail(st, rc, relaxed ? "synchronous_normal"
                                       : "synchronous_full");
    st->sync_relaxed = relaxed;
    return RMQS_OK;
}

/* Every transaction ends here, committed or not: its count deltas are
 * spent or void, and a relaxed connection goes back to FULL. If that fails
 * the flag stays set and the next durable tx_begin tries again, refusing
 * to start rather than commit an API write without fsync. */
static void tx_end(store_t *st)
{
    memset(st->delta, 0, sizeof(st->delta));
    (void)sync_set(st, false);
}

static rmqs_rc tx_begin(store_t *st, tx_sync how)
{
    sqlite3_stmt *s = stmt_get(st, S_BEGIN);
    rmqs_rc out;
    int rc;

    /* a durable transaction never starts at NORMAL; a relaxed one that
     * cannot switch (logged) simply commits at FULL */
    out = sync_set(st, how == TX_RELAXED);
    if (out != RMQS_OK && how == TX_DURABLE)
        return out;
    memset(st->delta, 0, sizeof(st->delta));
    rc = stmt_exec(s);
    if (rc != SQLITE_OK) {
        out = db_fail(st, rc, "begin");
        stmt_done(s);
        tx_end(st);
        return out;
    }
    return RMQS_OK;
}

/* Roll back if SQLite left a transaction open (it may already have rolled
 * back by itself, e.g. after SQLITE_FULL). */
static void tx_abort(store_t *st)
{
    sqlite3_stmt *s;
    int rc;

    if (!sqlite3_get_autocommit(st->db)) {
        s = stmt_get(st, S_ROLLBACK);
        rc = stmt_exec(s);
        if (rc != SQLITE_OK) {
            (void)db_fail(st, rc, "rollback");
            stmt_done(s);
        }
    }
    tx_end(st);
}

/* Inside the transaction, just before COMMIT: add the nonzero deltas to
 * job_counts. */
static rmqs_rc counts_flush(store_t *st)
{
    sqlite3_stmt *s = stmt_get(st, S_COUNTS_ADD);

    for (int i = 0; i < N_STATUS; i++) {
        int rc;

        if (st->delta[i] == 0)
            continue;
        sqlite3_bind_int(s, 1, i);
        sqlite3_bind_int64(s, 2, st->delta[i]);
        rc = stmt_exec(s);
        if (rc != SQLITE_OK)
            return stmt_fail(st, s, rc, S_COUNTS_ADD);
    }
    return RMQS_OK;
}

static rmqs_rc tx_commit(store_t *st)
{
    sqlite3_stmt *s = stmt_get(st, S_COMMIT);
    rmqs_rc out = RMQS_OK;
    int rc;

    /* If SQLite already rolled the whole transaction back by itself, the
     * deltas describe rows that no longer exist and an UPDATE now would
     * run (and commit) on its own: skip it; COMMIT then fails with "no
     * transaction is active" and tx_abort drops the deltas. */
    if (!sqlite3_get_autocommit(st->db))
        out = counts_flush(st);
    if (out != RMQS_OK) {
        tx_abort(st);
        return out;
    }
    rc = stmt_exec(s);
    if (rc != SQLITE_OK) {
        out = db_fail(st, rc, "commit");
        stmt_done(s);
        tx_abort(st);
        return out;
    }
    tx_end(st);
    return RMQS_OK;
}

static int bind_text_or_null(sqlite3_stmt *s, int i, const char *v)
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
static rmqs_rc row_to_job(sqlite3_stmt *s, job_t *out, int64_t *seq_out)
{
    const void *id = sqlite3_column_blob(s, COL_ID);
    const void *body;
    json_error_t jerr;
    int n;

    memset(out, 0, sizeof(*out));
    if (!id || sqlite3_column_bytes(s, COL_ID) != JOB_ID_BYTES) {
        log_error(MODULE, "corrupt row", "seq=%lld column=id",
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

    out->exchange = col_strdup(s, COL_EXCHANGE);
    out->routing_key = col_strdup(s, COL_ROUTING_KEY);
    if (!out->exchange || !out->routing_key)
        goto nomem;
    if (sqlite3_column_type(s, COL_LAST_ERROR) != SQLITE_NULL) {
        out->last_error = col_strdup(s, COL_LAST_ERROR);
        if (!out->last_error)
            goto nomem;
    }
    if (sqlite3_column_type(s, COL_HEADERS) != SQLITE_NULL) {
        const char *t = (const char *)sqlite3_column_text(s, COL_HEADERS);
        n = sqlite3_column_bytes(s, COL_HEADERS);
        out->headers = json_loadb(t, (size_t)n, JSON_ALLOW_NUL, &jerr);
        if (!out->headers)
            goto badjson;
    }
    if (sqlite3_column_type(s, COL_PROPERTIES) != SQLITE_NULL) {
        const char *t = (const char *)sqlite3_column_text(s, COL_PROPERTIES);
        n = sqlite3_column_bytes(s, COL_PROPERTIES);
        out->properties = json_loadb(t, (size_t)n, JSON_ALLOW_NUL, &jerr);
        if (!out->properties)
            goto badjson;
    }
    body = sqlite3_column_blob(s, COL_BODY);
    n = sqlite3_column_bytes(s, COL_BODY);
    /* never NULL, even for an empty body: callers may memcpy from it */
    out->body = malloc(n > 0 ? (size_t)n : 1);
    if (!out->body)
        goto nomem;
    if (n > 0)
        memcpy(out->body, body, (size_t)n);
    out->body_len = (size_t)n;
    return RMQS_OK;

badjson:
    log_error(MODULE, "corrupt row", "id=%s reason=\"%s\"", out->id,
              jerr.text);
    job_clear(out);
    return RMQS_EDB;
nomem:
    job_clear(out);
    return RMQS_ENOMEM;
}

/* Step s once and load the row into *out; RMQS_ENOTFOUND if none. s is left
 * for the caller to reset (stmt_done). */
static rmqs_rc step_one_job(store_t *st, sqlite3_stmt *s, stmt_id sid,
                            job_t *out)
{
    int rc = sqlite3_step(s);

    if (rc == SQLITE_DONE)
        return RMQS_ENOTFOUND;
    if (rc != SQLITE_ROW)
        return db_fail(st, rc, stmt_defs[sid].name);
    return row_to_job(s, out, NULL);
}

/* Load a job by binary id (within the caller's transaction or not). */
static rmqs_rc get_by_id(store_t *st, const unsigned char id[JOB_ID_BYTES],
                         job_t *out)
{
    sqlite3_stmt *s = stmt_get(st, S_GET);
    rmqs_rc rc;

    sqlite3_bind_blob(s, 1, id, JOB_ID_BYTES, SQLITE_STATIC);
    rc = step_one_job(st, s, S_GET, out);
    stmt_done(s);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Open, migrate, close                                                     */

/* Run a one-off statement (open time only) and copy the first column of
 * its first row into buf (may be NULL). */
static int run_once(sqlite3 *db, const char *sql, char *buf, size_t len)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

    if (rc != SQLITE_OK)
        return rc;
    if (buf && len)
        buf[0] = '\0';
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        if (buf && len && t && !buf[0])
            snprintf(buf, len, "%s", (const char *)t);
    }
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    else
        rc = sqlite3_extended_errcode(db);
    sqlite3_finalize(s);
    return rc;
}

static int64_t query_int(sqlite3 *db, const char *sql, int *rc_out)
{
    char buf[32];

    *rc_out = run_once(db, sql, buf, sizeof(buf));
    return strtoll(buf, NULL, 10);
}

/* One clear open-time message: the path, what failed, sqlite3_errstr and,
 * when it says more, the connection's own message. */
static rmqs_rc open_fail(rmqs_error *err, sqlite3 *db, const char *path,
                         const char *what, int rc)
{
    const char *es = sqlite3_errstr(rc);
    const char *em = db ? sqlite3_errmsg(db) : es;

    if (strcmp(es, em) == 0)
        return rmqs_fail(err, RMQS_EDB, NULL, "cannot use database %s: %s%s",
                         path, what, es);
    return rmqs_fail(err, RMQS_EDB, NULL, "cannot use database %s: %s%s (%s)",
                     path, what, es, em);
}

/* Configure the connection and prove the file is a readable database. */
static rmqs_rc open_configure(sqlite3 *db, const char *path, bool sync_full,
                              rmqs_error *err)
{
    char limit[64];
    char mode[16];
    int rc;

    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);

    /* The first real read: a garbage or corrupt file fails here. */
    rc = run_once(db, "SELECT count(*) FROM sqlite_schema", NULL, 0);
    if (rc != SQLITE_OK)
        return open_fail(err, db, path, "", rc);
    if (sqlite3_db_readonly(db, "main") == 1)
        return open_fail(err, NULL, path, "opened read-only: ",
                         SQLITE_READONLY);

    rc = run_once(db, "PRAGMA journal_mode = WAL", mode, sizeof(mode));
    if (rc != SQLITE_OK)
        return open_fail(err, db, path, "journal_mode=WAL: ", rc);
    if (strcmp(mode, "wal") != 0)
        return rmqs_fail(err, RMQS_EDB, NULL,
                         "cannot use database %s: WAL mode refused (journal "
                         "mode stays %s)", path, mode);

    snprintf(limit, sizeof(limit), "PRAGMA journal_size_limit = %d",
             JOURNAL_SIZE_LIMIT);
    const char *pragmas[] = {
        sync_full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
        "PRAGMA foreign_keys = ON",
        "PRAGMA secure_delete = OFF",
        /* Statement journals (a statement inside a transaction that may
         * need undoing half-way, e.g. a multi-row UPDATE) stay in memory
         * instead of a temp file written page by page: they are never
         * needed after a crash. */
        "PRAGMA temp_store = MEMORY",
        limit,
    };
    for (size_t i = 0; i < sizeof(pragmas) / sizeof(pragmas[0]); i++) {
        rc = run_once(db, pragmas[i], NULL, 0);
        if (rc != SQLITE_OK) {
            char what[80];
            snprintf(what, sizeof(what), "%s: ", pragmas[i]);
            return open_fail(err, db, path, what, rc);
        }
    }
    return RMQS_OK;
}

static rmqs_rc check_migration_list(const store_migration *m, size_t n,
                                    rmqs_error *err)
{
    if (n && !m)
        return rmqs_fail(err, RMQS_EINVAL, NULL, "migration list is NULL");
    for (size_t i = 0; i < n; i++) {
        if (m[i].version < 1 || !m[i].name || !m[i].sql)
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "migration #%zu (%s) is malformed: needs version "
                             ">= 1, a name and SQL", i,
                             m[i].name ? m[i].name : "?");
        if (i > 0 && m[i].version <= m[i - 1].version)
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "migration list is not strictly ascending: %s "
                             "(version %d) follows %s (version %d)",
                             m[i].name, m[i].version, m[i - 1].name,
                             m[i - 1].version);
    }
    return RMQS_OK;
}

/* Apply one migration in its own transaction with its schema_migrations
 * row. Skips it if another process applied it meanwhile. */
static rmqs_rc apply_migration(sqlite3 *db, const char *path,
                               const store_migration *m, int current,
                               rmqs_error *err)
{
    char *msg = NULL;
    sqlite3_stmt *s = NULL;
    int rc;
    int found;

    rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        goto fail;

    rc = sqlite3_prepare_v2(db,
                            "SELECT count(*) FROM schema_migrations "
                            "WHERE version = ?1", -1, &s, NULL);
    if (rc != SQLITE_OK)
        goto fail_db;
    sqlite3_bind_int(s, 1, m->version);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW)
        goto fail_db;
    found = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (found) {
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return RMQS_OK;
    }

    rc = sqlite3_exec(db, m->sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        goto fail;

    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO schema_migrations (version, name, "
                            "applied_at) VALUES (?1, ?2, ?3)", -1, &s, NULL);
    if (rc != SQLITE_OK)
        goto fail_db;
    sqlite3_bind_int(s, 1, m->version);
    sqlite3_bind_text(s, 2, m->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, tu_now_ms());
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE)
        goto fail_db;
    sqlite3_finalize(s);
    s = NULL;

    rc = sqlite3_exec(db, "COMMIT", NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        goto fail;
    log_info(MODULE, "migration applied", "version=%d name=%s", m->version,
             m->name);
    return RMQS_OK;

fail_db:
    rc = sqlite3_extended_errcode(db);
    msg = sqlite3_mprintf("%s", sqlite3_errmsg(db));
fail:
    sqlite3_finalize(s);
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    rmqs_fail(err, RMQS_EDB, NULL,
              "migration %s (version %d) failed: %s; rolled back, schema "
              "stays at version %d (%s)", m->name, m->version,
              msg ? msg : sqlite3_errstr(rc), current, path);
    sqlite3_free(msg);
    return RMQS_EDB;
}

static rmqs_rc migrate(sqlite3 *db, const char *path,
                       const store_migration *m, size_t n, rmqs_error *err)
{
    int known = n ? m[n - 1].version : 0;
    int64_t current;
    rmqs_rc out;
    int rc;

    rc = run_once(db,
                  "CREATE TABLE IF NOT EXISTS schema_migrations ("
                  "version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                  "applied_at INTEGER NOT NULL)", NULL, 0);
    if (rc != SQLITE_OK)
        return open_fail(err, db, path, "creating schema_migrations: ", rc);
    current = query_int(db, "SELECT coalesce(max(version), 0) "
                            "FROM schema_migrations", &rc);
    if (rc != SQLITE_OK)
        return open_fail(err, db, path, "reading schema_migrations: ", rc);
    if (current > known)
        return rmqs_fail(err, RMQS_EDB, NULL,
                         "database schema version %lld is newer than this "
                         "binary (knows up to %d); refusing to start (%s)",
                         (long long)current, known, path);
    for (size_t i = 0; i < n; i++) {
        if (m[i].version <= current)
            continue;
        out = apply_migration(db, path, &m[i], (int)current, err);
        if (out != RMQS_OK)
            return out;
        current = m[i].version;
    }
    return RMQS_OK;
}

/* The dispatcher's read connection, once the schema is there: WAL readers
 * never wait for the writer, so neither does claiming ahead. query_only
 * makes a write through it fail loudly. */
static rmqs_rc rd_open(store_t *st, const char *path, rmqs_error *err)
{
    int rc = sqlite3_open_v2(path, &st->rd_db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                                 SQLITE_OPEN_EXRESCODE, NULL);

    if (rc != SQLITE_OK)
        return open_fail(err, st->rd_db, path, "read connection: ", rc);
    sqlite3_extended_result_codes(st->rd_db, 1);
    sqlite3_busy_timeout(st->rd_db, BUSY_TIMEOUT_MS);
    rc = run_once(st->rd_db, "PRAGMA query_only = 1", NULL, 0);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(st->rd_db, RD_DUE_SQL, -1,
                                SQLITE_PREPARE_PERSISTENT, &st->rd_due, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(st->rd_db, RD_NEXT_SQL, -1,
                                SQLITE_PREPARE_PERSISTENT, &st->rd_next, NULL);
    if (rc != SQLITE_OK)
        return open_fail(err, st->rd_db, path, "read connection: ", rc);
    return RMQS_OK;
}

static void store_free(store_t *st)
{
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    sqlite3_finalize(st->purge);
    sqlite3_finalize(st->rd_due);
    sqlite3_finalize(st->rd_next);
    sqlite3_close(st->rd_db);
    claimset_free(st->held);
    sqlite3_close(st->db);
    sqlite3_close(st->ckpt_db);
    free(st->path);
    free(st->dir);
    pthread_mutex_destroy(&st->ckpt_mu);
    pthread_mutex_destroy(&st->rd_mu);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* Process-wide SQLite settings, before SQLite initialises itself. Memory
 * statistics off: nothing reads them, and keeping them takes a global
 * mutex on every SQLite malloc and free (~5% of the writer's CPU). */
static void sqlite_global_config(void)
{
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); /* MISUSE if late */
}

rmqs_rc store_open_with(const char *path, const store_options *opt,
                        const store_migration *migrations, size_t n,
                        store_t **out, rmqs_error *err)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    bool sync_full = opt ? opt->synchronous_full : true;
    store_t *st;
    rmqs_rc rc;
    int src;

    pthread_once(&once, sqlite_global_config);
    if (!out)
        return rmqs_fail(err, RMQS_EINVAL, NULL, "store_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return rmqs_fail(err, RMQS_EINVAL, NULL, "database path is empty");
    rc = check_migration_list(migrations, n, err);
    if (rc != RMQS_OK)
        return rc;

    st = calloc(1, sizeof(*st));
    if (!st)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    if (pthread_mutex_init(&st->mu, NULL) != 0 ||
        pthread_mutex_init(&st->ckpt_mu, NULL) != 0 ||
        pthread_mutex_init(&st->rd_mu, NULL) != 0) {
        free(st);
        return rmqs_fail(err, RMQS_ESYS, NULL, "pthread_mutex_init failed");
    }
    st->held = claimset_new();
    if (!st->held) {
        rc = rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        goto fail;
    }

    st->sync_full = sync_full;
    st->path = strdup(path);
    st->dir = strdup(path);
    if (!st->path || !st->dir) {
        rc = rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    {
        char *slash = strrchr(st->dir, '/');
        if (slash == NULL)
            strcpy(st->dir, ".");
        else
            slash[slash == st->dir ? 1 : 0] = '\0';
    }
    src = sqlite3_open_v2(path, &st->db,
                          SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                              SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
                          NULL);
    if (src != SQLITE_OK) {
        rc = rmqs_fail(err, src == SQLITE_NOMEM ? RMQS_ENOMEM : RMQS_EDB,
                       NULL, "cannot open database %s: %s", path,
                       sqlite3_errstr(src));
        goto fail;
    }
    rc = open_configure(st->db, path, sync_full, err);
    if (rc != RMQS_OK)
        goto fail;
    if (opt != NULL && opt->manual_checkpoint) {
        /* store_checkpoint() from a background thread does it instead of
         * the commit that crosses 1000 pages. */
        src = sqlite3_wal_autocheckpoint(st->db, 0);
        if (src != SQLITE_OK) {
            rc = open_fail(err, st->db, path, "wal_autocheckpoint: ", src);
            goto fail;
        }
    }
    rc = migrate(st->db, path, migrations, n, err);
    if (rc != RMQS_OK)
        goto fail;

    for (int i = 0; i < S_COUNT; i++) {
        src = sqlite3_prepare_v3(st->db, stmt_defs[i].sql, -1,
                                 SQLITE_PREPARE_PERSISTENT, &st->stmt[i],
                                 NULL);
        if (src != SQLITE_OK) {
            rc = rmqs_fail(err, RMQS_EDB, NULL,
                           "database %s: cannot prepare statement %s: %s "
                           "(schema incomplete?)", path, stmt_defs[i].name,
                           sqlite3_errmsg(st->db));
            goto fail;
        }
    }
    rc = rd_open(st, path, err);
    if (rc != RMQS_OK)
        goto fail;
    log_info(MODULE, "database open", "path=%s synchronous=%s", path,
             sync_full ? "full" : "normal");
    *out = st;
    return RMQS_OK;

fail:
    store_free(st);
    return rc;
}

rmqs_rc store_open(const char *path, const store_options *opt, store_t **out,
                   rmqs_error *err)
{
    return store_open_with(path, opt, store_builtin_migrations,
                           store_builtin_migrations_count, out, err);
}

void store_close(store_t *st)
{
    if (st)
        store_free(st);
}

int store_schema_version(store_t *st)
{
    sqlite3_stmt *s;
    int v = -1;
    int rc;

    pthread_mutex_lock(&st->mu);
    s = stmt_get(st, S_VERSION);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        v = sqlite3_column_int(s, 0);
    else
        (void)db_fail(st, rc, stmt_defs[S_VERSION].name);
    stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return v;
}

rmqs_rc store_purge(store_t *st, int64_t before_ms, size_t limit,
                    size_t *deleted)
{
    rmqs_rc out = RMQS_OK;
    int rc;

    *deleted = 0;
    pthread_mutex_lock(&st->mu);
    if (st->purge == NULL) {
        rc = sqlite3_prepare_v3(
            st->db,
            "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs "
            "INDEXED BY jobs_finished WHERE status >= 2 AND updated_at < ?1 "
            "ORDER BY updated_at LIMIT ?2) RETURNING status",
            -1, SQLITE_PREPARE_PERSISTENT, &st->purge, NULL);
        if (rc != SQLITE_OK) {
            out = db_fail(st, rc, "purge_prepare");
            goto done;
        }
    }
    out = tx_begin(st, TX_DURABLE);
    if (out != RMQS_OK)
        goto done;
    sqlite3_bind_int64(st->purge, 1, before_ms);
    sqlite3_bind_int64(st->purge, 2, (sqlite3_int64)limit);
    /* one row per deleted job: its status leaves job_counts */
    while ((rc = sqlite3_step(st->purge)) == SQLITE_ROW) {
        int status = sqlite3_column_int(st->purge, 0);
        if (status >= 0 && status < N_STATUS)
            st->delta[status]--;
        (*deleted)++;
    }
    if (rc != SQLITE_DONE) {
        out = db_fail(st, rc, "purge");
        stmt_done(st->purge);
        tx_abort(st);
        *deleted = 0;
        goto done;
    }
    stmt_done(st->purge);
    out = tx_commit(st);
    if (out != RMQS_OK)
        *deleted = 0;
done:
    pthread_mutex_unlock(&st->mu);
    return out;
}

rmqs_rc store_checkpoint(store_t *st, int64_t *wal_frames, int64_t *copied)
{
    const char *path;
    rmqs_rc out = RMQS_OK;
    int rc, log = 0, ckpt = 0;

    pthread_mutex_lock(&st->ckpt_mu);
    if (st->ckpt_db == NULL) {
        pthread_mutex_lock(&st->mu);
        path = sqlite3_db_filename(st->db, "main");
        rc = sqlite3_open_v2(path, &st->ckpt_db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
        pthread_mutex_unlock(&st->mu);
        if (rc != SQLITE_OK) {
            log_error(MODULE, "cannot open the checkpoint connection",
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
        log_warn(MODULE, "checkpoint failed", "reason=\"%s\"",
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

rmqs_rc store_counts(store_t *st, int64_t counts[5])
{
    sqlite3_stmt *s;
    rmqs_rc out = RMQS_OK;
    int rc;

    for (int i = 0; i < N_STATUS; i++)
        counts[i] = 0;
    /* Under mu no transaction is half-way: job_counts matches jobs. */
    pthread_mutex_lock(&st->mu);
    s = stmt_get(st, S_COUNTS);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int status = sqlite3_column_int(s, 0);
        if (status >= 0 && status < N_STATUS)
            counts[status] = sqlite3_column_int64(s, 1);
    }
    if (rc != SQLITE_DONE)
        out = db_fail(st, rc, stmt_defs[S_COUNTS].name);
    stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return out;
}

int64_t store_free_bytes(store_t *st)
{
    struct statvfs sv;

    /* No lock: the writer asks before every batch, and st->dir never
     * changes after open. */
    if (statvfs(st->dir, &sv) != 0)
        return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

int64_t store_size_bytes(store_t *st)
{
    char wal[4096];
    struct stat sb;
    int64_t total;

    if (stat(st->path, &sb) != 0)
        return -1;
    total = (int64_t)sb.st_size;
    if ((size_t)snprintf(wal, sizeof(wal), "%s-wal", st->path) < sizeof(wal) &&
        stat(wal, &sb) == 0)
        total += (int64_t)sb.st_size;
    return total;
}

rmqs_rc store_ping(store_t *st)
{
    sqlite3_stmt *s;
    rmqs_rc out = RMQS_OK;
    int rc;

    pthread_mutex_lock(&st->mu);
    s = stmt_get(st, S_PING);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW)
        out = db_fail(st, rc, stmt_defs[S_PING].name);
    stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Insert and read                                                          */

static rmqs_rc dump_json(const json_t *v, char **out)
{
    *out = NULL;
    if (!v)
        return RMQS_OK;
    *out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    return *out ? RMQS_OK : RMQS_ENOMEM;
}

/* Inside the caller's transaction: insert the job, return its seq. */
static rmqs_rc insert_job(store_t *st, const job_t *job,
                          const unsigned char id[JOB_ID_BYTES],
                          int64_t *seq_out)
{
    sqlite3_stmt *s = stmt_get(st, S_INSERT);
    char *headers = NULL;
    char *props = NULL;
    rmqs_rc out;
    int rc;

    out = dump_json(job->headers, &headers);
    if (out == RMQS_OK)
        out = dump_json(job->properties, &props);
    if (out != RMQS_OK)
        goto done;

    sqlite3_bind_blob(s, 1, id, JOB_ID_BYTES, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, (int)job->status);
    sqlite3_bind_text(s, 3, job->exchange ? job->exchange : "", -1,
                      SQLITE_STATIC);
    sqlite3_bind_text(s, 4, job->routing_key ? job->routing_key : "", -1,
                      SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, job->deliver_at);
    sqlite3_bind_int64(s, 6, job->due_at);
    sqlite3_bind_int64(s, 7, job->delay_ms);
    sqlite3_bind_int64(s, 8, job->created_at);
    sqlite3_bind_int64(s, 9, job->updated_at);
    if (job->sent_at >= 0)
        sqlite3_bind_int64(s, 10, job->sent_at);
    else
        sqlite3_bind_null(s, 10);
    sqlite3_bind_int(s, 11, job->attempts);
    sqlite3_bind_int(s, 12, job->max_attempts);
    bind_text_or_null(s, 13, job->last_error);
    bind_text_or_null(s, 14, headers);
    bind_text_or_null(s, 15, props);
    sqlite3_bind_int(s, 16, (int)job->body_kind);
    if (job->body_len > 0)
        rc = sqlite3_bind_blob64(s, 17, job->body, job->body_len,
                                 SQLITE_STATIC);
    else
        rc = sqlite3_bind_zeroblob(s, 17, 0);
    if (rc != SQLITE_OK) {
        out = rc == SQLITE_TOOBIG ? RMQS_EINVAL : db_fail(st, rc, "bind_body");
        stmt_done(s);
        goto done;
    }
    sqlite3_bind_int(s, 18, (int)job->source);
    {
        json_t *mid = job->properties
                          ? json_object_get(job->properties, "message_id")
                          : NULL;
        if (json_is_string(mid))
            sqlite3_bind_text(s, 19, json_string_value(mid), -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(s, 19);
    }

    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        /* a duplicate job id is the caller's conflict, not a broken db */
        if (rc == SQLITE_CONSTRAINT_UNIQUE ||
            rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
            log_warn(MODULE, "duplicate job id", "id=%s", job->id);
            out = RMQS_ECONFLICT;
            stmt_done(s);
        } else if (rc == SQLITE_CONSTRAINT_CHECK ||
                   rc == SQLITE_CONSTRAINT_NOTNULL) {
            /* status, body_kind or max_attempts out of range */
            log_warn(MODULE, "job rejected by the schema", "id=%s detail=\"%s\"",
                     job->id, sqlite3_errmsg(st->db));
            out = RMQS_EINVAL;
            stmt_done(s);
        } else {
            out = stmt_fail(st, s, rc, S_INSERT);
        }
        goto done;
    }
    *seq_out = sqlite3_last_insert_rowid(st->db);
    stmt_done(s);
done:
    free(headers);
    free(props);
    return out;
}

/* Inside the caller's transaction: look the key up. RMQS_ENOTFOUND if the
 * key is new; RMQS_OK with *existed (and *existing loaded) if it holds the
 * same request; RMQS_ECONFLICT if it holds another one. */
static rmqs_rc idem_lookup(store_t *st, const char *key, const char *request,
                           bool *existed, job_t *existing)
{
    sqlite3_stmt *s = stmt_get(st, S_IDEM_LOOKUP);
    rmqs_rc out = RMQS_OK;
    const char *stored;
    int rc;

    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        stmt_done(s);
        return RMQS_ENOTFOUND;
    }
    if (rc != SQLITE_ROW)
        return stmt_fail(st, s, rc, S_IDEM_LOOKUP);
    stored = (const char *)sqlite3_column_text(s, COL_COUNT);
    if (!stored || strcmp(stored, request) != 0) {
        out = RMQS_ECONFLICT;
    } else {
        if (existing)
            out = row_to_job(s, existing, NULL);
        if (out == RMQS_OK && existed)
            *existed = true;
    }
    stmt_done(s);
    return out;
}

/* Run one of the savepoint statements; RMQS_OK or the mapped failure. */
static rmqs_rc sp_exec(store_t *st, stmt_id id)
{
    sqlite3_stmt *s = stmt_get(st, id);
    int rc = stmt_exec(s);

    return rc == SQLITE_OK ? RMQS_OK : stmt_fail(st, s, rc, id);
}

/* Inside the caller's transaction: one all-or-nothing request. */
static rmqs_rc insert_req(store_t *st, store_insert_req *r)
{
    unsigned char id[JOB_ID_BYTES];
    /* this request's rows by status: joins st->delta only on RELEASE, so a
     * request undone by ROLLBACK TO leaves the counts alone */
    int64_t added[N_STATUS] = {0};
    int64_t seq = 0;
    sqlite3_stmt *s;
    rmqs_rc out;
    int rc;

    /* One job without a key is one INSERT, which SQLite already undoes by
     * itself when it fails: no savepoint (two statements fewer per POST). */
    bool sp = r->n > 1 || r->idem_key != NULL;

    if (r->n == 0 || (r->idem_key && (!r->idem_request || r->n != 1)))
        return RMQS_EINVAL;
    if (r->idem_key) {
        out = idem_lookup(st, r->idem_key, r->idem_request, &r->existed,
                          &r->existing);
        if (out != RMQS_ENOTFOUND)
            return out; /* the same job again, a conflict, or a failure */
    }
    if (sp && (out = sp_exec(st, S_SAVEPOINT)) != RMQS_OK)
        return out;
    for (size_t i = 0; i < r->n; i++) {
        out = job_id_parse(r->jobs[i].id, id) == RMQS_OK
                  ? insert_job(st, &r->jobs[i], id, &seq)
                  : RMQS_EINVAL;
        if (out != RMQS_OK) {
            r->failed_index = i;
            goto undo;
        }
        {
            int status = (int)r->jobs[i].status; /* 0..4: the CHECK held */
            if (status >= 0 && status < N_STATUS)
                added[status]++;
        }
    }
    if (r->idem_key) {
        s = stmt_get(st, S_IDEM_INSERT);
        sqlite3_bind_text(s, 1, r->idem_key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, seq);
        sqlite3_bind_text(s, 3, r->idem_request, -1, SQLITE_STATIC);
        rc = stmt_exec(s);
        if (rc != SQLITE_OK) {
            out = stmt_fail(st, s, rc, S_IDEM_INSERT);
            goto undo;
        }
    }
    out = sp ? sp_exec(st, S_RELEASE_SP) : RMQS_OK;
    if (out == RMQS_OK)
        for (int i = 0; i < N_STATUS; i++)
            st->delta[i] += added[i];
    return out;
undo:
    /* After FULL/IOERR SQLite may have rolled the whole transaction back;
     * then there is no savepoint left to return to. */
    if (sp && !sqlite3_get_autocommit(st->db)) {
        sp_exec(st, S_ROLLBACK_SP);
        sp_exec(st, S_RELEASE_SP);
    }
    return out;
}

/* A failure that is about the request itself, not the database: the other
 * requests of the transaction go on. */
static bool req_local_failure(rmqs_rc rc)
{
    return rc == RMQS_EINVAL || rc == RMQS_ECONFLICT;
}

rmqs_rc store_insert_batch(store_t *st, store_insert_req *reqs, size_t n)
{
    rmqs_rc out;

    for (size_t i = 0; i < n; i++) {
        reqs[i].rc = RMQS_OK;
        reqs[i].existed = false;
        reqs[i].failed_index = 0;
        memset(&reqs[i].existing, 0, sizeof(reqs[i].existing));
    }
    if (n == 0)
        return RMQS_OK;

    pthread_mutex_lock(&st->mu);
    out = tx_begin(st, TX_DURABLE);
    if (out != RMQS_OK)
        goto fail_all;
    for (size_t i = 0; i < n; i++) {
        reqs[i].rc = insert_req(st, &reqs[i]);
        if (reqs[i].rc != RMQS_OK && !req_local_failure(reqs[i].rc)) {
            out = reqs[i].rc; /* the database failed: nothing is kept */
            tx_abort(st);
            goto fail_all;
        }
    }
    out = tx_commit(st);
    if (out != RMQS_OK)
        goto fail_all;
    pthread_mutex_unlock(&st->mu);
    return RMQS_OK;

fail_all:
    for (size_t i = 0; i < n; i++) {
        job_clear(&reqs[i].existing);
        reqs[i].existed = false;
        reqs[i].rc = out;
    }
    pthread_mutex_unlock(&st->mu);
    return out;
}

rmqs_rc store_insert(store_t *st, const job_t *job, const char *idem_key,
                     const char *idem_request, bool *existed, job_t *existing)
{
    store_insert_req r = {.jobs = job, .n = 1, .idem_key = idem_key,
                          .idem_request = idem_request};
    rmqs_rc out;

    if (existed)
        *existed = false;
    if (existing)
        memset(existing, 0, sizeof(*existing));
    if (!job)
        return RMQS_EINVAL;
    out = store_insert_batch(st, &r, 1);
    if (out == RMQS_OK)
        out = r.rc;
    if (out == RMQS_OK && r.existed) {
        if (existed)
            *existed = true;
        if (existing)
            *existing = r.existing;
        else
            job_clear(&r.existing);
    } else {
        job_clear(&r.existing);
    }
    return out;
}

/* A job claimed ahead whose claim is not committed yet reads as pending in
 * the database: show it as the claim will make it (publishing, attempt
 * counted), as cancel and reschedule treat it. */
static void held_overlay(store_t *st, job_t *job)
{
    unsigned char id[JOB_ID_BYTES];

    if (job->status == JOB_PENDING && job_id_parse(job->id, id) == RMQS_OK &&
        claimset_held(st->held, id)) {
        job->status = JOB_PUBLISHING;
        job->attempts++;
    }
}

rmqs_rc store_get(store_t *st, const char *id_text, job_t *out)
{
    unsigned char id[JOB_ID_BYTES];
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (!id_text || job_id_parse(id_text, id) != RMQS_OK)
        return RMQS_ENOTFOUND;
    pthread_mutex_lock(&st->mu);
    rc = get_by_id(st, id, out);
    pthread_mutex_unlock(&st->mu);
    if (rc == RMQS_OK)
        held_overlay(st, out);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                  */

/* "<deliver_at>.<seq>" in base 10: URL-safe, opaque to clients. */
static bool parse_i64(const char *s, size_t len, int64_t *out)
{
    bool neg = false;
    uint64_t v = 0;
    size_t i = 0;

    if (len > 0 && s[0] == '-') {
        neg = true;
        i = 1;
    }
    if (i == len || len - i > 19)
        return false;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool cursor_parse(const char *c, int64_t *deliver_at, int64_t *seq)
{
    const char *dot = strchr(c, '.');

    if (!dot || strlen(c) >= CURSOR_MAX)
        return false;
    return parse_i64(c, (size_t)(dot - c), deliver_at) &&
           parse_i64(dot + 1, strlen(dot + 1), seq) && *seq >= 0;
}

static void jobs_free(job_t *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        job_clear(&jobs[i]);
    free(jobs);
}

rmqs_rc store_list(store_t *st, const store_filter *f, size_t limit,
                   const char *after, job_t **jobs_out, size_t *n_out,
                   char **next_out)
{
    int status_filter = f ? f->status : -1;
    int source_filter = f ? f->source : -1;
    const char *message_id = f ? f->message_id : NULL;
    int64_t cur_deliver = 0, cur_seq = 0, last_seq = 0;
    job_t *jobs = NULL;
    size_t n = 0, cap = 0;
    sqlite3_stmt *s;
    stmt_id sid;
    bool more = false;
    rmqs_rc out = RMQS_OK;
    int rc;

    *jobs_out = NULL;
    *n_out = 0;
    *next_out = NULL;
    if (limit == 0 || status_filter > JOB_CANCELLED ||
        source_filter > JOB_SOURCE_AMQP)
        return RMQS_EINVAL;
    if (after && !cursor_parse(after, &cur_deliver, &cur_seq))
        return RMQS_EINVAL;
    if (limit > (size_t)INT64_MAX - 1)
        limit = (size_t)INT64_MAX - 1;

    if (message_id != NULL)
        sid = S_LIST_MESSAGE_ID;
    else if (source_filter >= 0)
        sid = S_LIST_FILTERED;
    else if (status_filter < 0)
        sid = after ? S_LIST_ALL_AFTER : S_LIST_ALL;
    else
        sid = after ? S_LIST_STATUS_AFTER : S_LIST_STATUS;
    if (!after && (sid == S_LIST_MESSAGE_ID || sid == S_LIST_FILTERED)) {
        cur_deliver = INT64_MIN; /* before everything */
        cur_seq = INT64_MIN;
    }

    pthread_mutex_lock(&st->mu);
    s = stmt_get(st, sid);
    sqlite3_bind_int64(s, 1, (int64_t)limit + 1); /* one more: is there a next page? */
    if (after || sid == S_LIST_MESSAGE_ID || sid == S_LIST_FILTERED) {
        sqlite3_bind_int64(s, 2, cur_deliver);
        sqlite3_bind_int64(s, 3, cur_seq);
    }
    if (status_filter >= 0)
        sqlite3_bind_int(s, 4, status_filter);
    if (sid == S_LIST_MESSAGE_ID || sid == S_LIST_FILTERED) {
        if (source_filter >= 0)
            sqlite3_bind_int(s, 5, source_filter);
        if (message_id != NULL)
            sqlite3_bind_text(s, 6, message_id, -1, SQLITE_STATIC);
    }

    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == limit) {
            more = true;
            break;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            job_t *nj = realloc(jobs, ncap * sizeof(*jobs));
            if (!nj) {
                out = RMQS_ENOMEM;
                break;
            }
            jobs = nj;
            cap = ncap;
        }
        out = row_to_job(s, &jobs[n], &last_seq);
        if (out != RMQS_OK)
            break;
        n++;
    }
    if (out == RMQS_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        out = db_fail(st, rc, stmt_defs[sid].name);
    stmt_done(s);
    pthread_mutex_unlock(&st->mu);

    if (out == RMQS_OK && more) {
        *next_out = malloc(CURSOR_MAX);
        if (!*next_out)
            out = RMQS_ENOMEM;
        else
            snprintf(*next_out, CURSOR_MAX, "%" PRId64 ".%" PRId64,
                     jobs[n - 1].deliver_at, last_seq);
    }
    if (out != RMQS_OK) {
        jobs_free(jobs, n);
        return out;
    }
    for (size_t i = 0; i < n; i++)
        held_overlay(st, &jobs[i]);
    *jobs_out = jobs;
    *n_out = n;
    return RMQS_OK;
}

/* ------------------------------------------------------------------------ */
/* Client changes: reschedule, cancel                                       */

/* Run an "UPDATE ... WHERE id = ? AND status = 0 RETURNING" already bound
 * (inside a transaction). RMQS_OK with *out if it changed the job;
 * otherwise *out holds the job as it is (RMQS_ECONFLICT) or RMQS_ENOTFOUND. */
static rmqs_rc update_pending(store_t *st, stmt_id sid,
                              const unsigned char id[JOB_ID_BYTES], job_t *out)
{
    sqlite3_stmt *s = stmt_get(st, sid);
    rmqs_rc rc = step_one_job(st, s, sid, out);

    if (rc == RMQS_OK) {
        /* RETURNING: step to SQLITE_DONE before the change is complete */
        int src = sqlite3_step(s);
        if (src != SQLITE_DONE) {
            job_clear(out);
            return stmt_fail(st, s, src, sid);
        }
    }
    stmt_done(s);
    if (rc != RMQS_ENOTFOUND)
        return rc;
    rc = get_by_id(st, id, out);
    return rc == RMQS_OK ? RMQS_ECONFLICT : rc;
}

rmqs_rc store_reschedule(store_t *st, const char *id_text, int64_t deliver_at,
                         int64_t delay_ms, int64_t now_ms, job_t *out)
{
    unsigned char id[JOB_ID_BYTES];
    sqlite3_stmt *s;
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (!id_text || job_id_parse(id_text, id) != RMQS_OK)
        return RMQS_ENOTFOUND;

    /* held by the dispatcher (claimed ahead): as good as publishing */
    rc = claimset_change_begin(st->held, id);
    if (rc != RMQS_OK)
        return rc;
    pthread_mutex_lock(&st->mu);
    rc = tx_begin(st, TX_DURABLE);
    if (rc != RMQS_OK)
        goto unlock;
    s = stmt_get(st, S_RESCHEDULE);
    sqlite3_bind_int64(s, 1, deliver_at);
    sqlite3_bind_int64(s, 2, delay_ms);
    sqlite3_bind_int64(s, 3, now_ms);
    sqlite3_bind_blob(s, 4, id, JOB_ID_BYTES, SQLITE_STATIC);
    rc = update_pending(st, S_RESCHEDULE, id, out);
    if (rc == RMQS_OK)
        rc = tx_commit(st);
    else
        tx_abort(st);
    if (rc != RMQS_OK)
        job_clear(out);
unlock:
    pthread_mutex_unlock(&st->mu);
    claimset_change_end(st->held, id); /* after the commit, whatever it did */
    return rc;
}

rmqs_rc store_cancel(store_t *st, const char *id_text, int64_t now_ms,
                     job_t *out)
{
    unsigned char id[JOB_ID_BYTES];
    sqlite3_stmt *s;
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (!id_text || job_id_parse(id_text, id) != RMQS_OK)
        return RMQS_ENOTFOUND;

    /* held by the dispatcher (claimed ahead): as good as publishing */
    rc = claimset_change_begin(st->held, id);
    if (rc != RMQS_OK)
        return rc;
    pthread_mutex_lock(&st->mu);
    rc = tx_begin(st, TX_DURABLE);
    if (rc != RMQS_OK)
        goto unlock;
    s = stmt_get(st, S_CANCEL);
    sqlite3_bind_int64(s, 1, now_ms);
    sqlite3_bind_blob(s, 2, id, JOB_ID_BYTES, SQLITE_STATIC);
    rc = update_pending(st, S_CANCEL, id, out);
    if (rc == RMQS_OK) {
        st->delta[JOB_PENDING]--;
        st->delta[JOB_CANCELLED]++;
    }
    if (rc == RMQS_ECONFLICT && out->status == JOB_CANCELLED)
        rc = RMQS_OK; /* cancelling a cancelled job changes nothing */
    if (rc == RMQS_OK)
        rc = tx_commit(st);
    else
        tx_abort(st);
    if (rc != RMQS_OK)
        job_clear(out);
unlock:
    pthread_mutex_unlock(&st->mu);
    claimset_change_end(st->held, id); /* after the commit, whatever it did */
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Dispatcher: next due, claim, settle, recover                             */

rmqs_rc store_next_due(store_t *st, bool *any, int64_t *due_at_out)
{
    sqlite3_stmt *s;
    rmqs_rc out = RMQS_OK;
    int rc;

    *any = false;
    /* On the read connection: never behind the writer. Held jobs still
     * look pending there; they are skipped (a few thousand at most). */
    pthread_mutex_lock(&st->rd_mu);
    s = st->rd_next;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const void *id = sqlite3_column_blob(s, 0);
        if (id && sqlite3_column_bytes(s, 0) == JOB_ID_BYTES &&
            claimset_held(st->held, id))
            continue;
        *any = true;
        *due_at_out = sqlite3_column_int64(s, 1);
        break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        out = db_fail_on(st->rd_db, rc, "next_due");
    stmt_done(s);
    pthread_mutex_unlock(&st->rd_mu);
    return out;
}

typedef struct claimed {
    int64_t seq;
    job_t job;
} claimed;

static int claimed_cmp(const void *a, const void *b)
{
    const claimed *x = a, *y = b;

    if (x->job.due_at != y->job.due_at)
        return x->job.due_at < y->job.due_at ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

rmqs_rc store_claim_due(store_t *st, int64_t due_by_ms, int64_t now_ms,
                        size_t limit,
                        job_t **jobs_out, size_t *n_out)
{
    claimed *c = NULL;
    job_t *jobs = NULL;
    size_t n = 0, cap = 0;
    sqlite3_stmt *s;
    rmqs_rc out;
    int rc;

    *jobs_out = NULL;
    *n_out = 0;
    if (limit == 0)
        return RMQS_OK;
    if (limit > (size_t)INT64_MAX)
        limit = (size_t)INT64_MAX;

    pthread_mutex_lock(&st->mu);
    out = tx_begin(st, TX_RELAXED);
    if (out != RMQS_OK)
        goto unlock;
    s = stmt_get(st, S_CLAIM_DUE);
    sqlite3_bind_int64(s, 1, now_ms);
    sqlite3_bind_int64(s, 2, due_by_ms);
    sqlite3_bind_int64(s, 3, (int64_t)limit);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            claimed *nc = realloc(c, ncap * sizeof(*c));
            if (!nc) {
                out = RMQS_ENOMEM;
                break;
            }
            c = nc;
            cap = ncap;
        }
        out = row_to_job(s, &c[n].job, &c[n].seq);
        if (out != RMQS_OK)
            break;
        n++;
    }
    if (out == RMQS_OK && rc != SQLITE_DONE)
        out = db_fail(st, rc, stmt_defs[S_CLAIM_DUE].name);
    stmt_done(s);
    /* one RETURNING row per job claimed: pending -> publishing */
    st->delta[JOB_PENDING] -= (int64_t)n;
    st->delta[JOB_PUBLISHING] += (int64_t)n;
    if (out == RMQS_OK && n > 0) {
        jobs = malloc(n * sizeof(*jobs));
        if (!jobs)
            out = RMQS_ENOMEM;
    }
    if (out == RMQS_OK)
        out = tx_commit(st);
    else
        tx_abort(st);
unlock:
    pthread_mutex_unlock(&st->mu);

    if (out != RMQS_OK) {
        for (size_t i = 0; i < n; i++)
            job_clear(&c[i].job);
        free(c);
        free(jobs);
        return out;
    }
    /* RETURNING order is unspecified: due order is (due_at, seq) */
    if (n > 1)
        qsort(c, n, sizeof(*c), claimed_cmp);
    for (size_t i = 0; i < n; i++)
        jobs[i] = c[i].job;
    free(c);
    *jobs_out = jobs;
    *n_out = n;
    return RMQS_OK;
}

/* Read up to limit candidates (pending, due by due_by_ms, not held) from
 * one snapshot of the read connection into c[] (grown as needed). */
static rmqs_rc read_due(store_t *st, int64_t due_by_ms, size_t limit,
                        claimed **c, size_t *cap, size_t *n_out)
{
    sqlite3_stmt *s = st->rd_due;
    rmqs_rc out = RMQS_OK;
    size_t n = 0;
    int rc;

    sqlite3_bind_int64(s, 1, due_by_ms);
    while (n < limit && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const void *id = sqlite3_column_blob(s, COL_ID);
        if (id && sqlite3_column_bytes(s, COL_ID) == JOB_ID_BYTES &&
            claimset_held(st->held, id))
            continue; /* ours already; the claim is not committed yet */
        if (n == *cap) {
            size_t ncap = *cap ? *cap * 2 : 16;
            claimed *nc = realloc(*c, ncap * sizeof(**c));
            if (!nc) {
                out = RMQS_ENOMEM;
                break;
            }
            *c = nc;
            *cap = ncap;
        }
        out = row_to_job(s, &(*c)[n].job, &(*c)[n].seq);
        if (out != RMQS_OK)
            break;
        n++;
    }
    if (out == RMQS_OK && n < limit && rc != SQLITE_DONE)
        out = db_fail_on(st->rd_db, rc, "claim_ahead");
    stmt_done(s); /* ends the read transaction: the snapshot goes */
    if (out != RMQS_OK) {
        for (size_t i = 0; i < n; i++)
            job_clear(&(*c)[i].job);
        n = 0;
    }
    *n_out = n;
    return out;
}

rmqs_rc store_claim_ahead(store_t *st, int64_t due_by_ms, int64_t now_ms,
                          size_t limit, job_t **jobs_out, size_t *n_out)
{
    unsigned char(*ids)[JOB_ID_BYTES] = NULL;
    claimed *c = NULL;
    bool *keep = NULL;
    job_t *jobs = NULL;
    size_t n = 0, cap = 0, got = 0, idcap = 0, read;
    rmqs_rc out = RMQS_OK;

    *jobs_out = NULL;
    *n_out = 0;
    if (limit == 0)
        return RMQS_OK;
    pthread_mutex_lock(&st->rd_mu);
    /* A read overlapped by a cancel, reschedule or settle drops those jobs
     * (claimset.h); read again for them, a few times at most: the next
     * claim finds whatever is still due. */
    for (int round = 0; round < CLAIM_READS && got < limit; round++) {
        uint64_t gen = claimset_begin(st->held); /* before the snapshot */
        long kept;

        out = read_due(st, due_by_ms, limit - got, &c, &cap, &n);
        if (out != RMQS_OK || n == 0)
            break;
        if (n > idcap) {
            void *ni = realloc(ids, n * sizeof(*ids));
            void *nk = ni ? realloc(keep, n * sizeof(*keep)) : NULL;
            if (ni)
                ids = ni;
            if (!nk) {
                out = RMQS_ENOMEM;
                goto drop;
            }
            keep = nk;
            idcap = n;
        }
        for (size_t i = 0; i < n; i++)
            (void)job_id_parse(c[i].job.id, ids[i]);
        kept = claimset_take(st->held, gen, (const unsigned char(*)[JOB_ID_BYTES])ids,
                             n, keep);
        if (kept < 0) {
            out = RMQS_ENOMEM;
            goto drop;
        }
        if (kept > 0) {
            job_t *nj = realloc(jobs, (got + (size_t)kept) * sizeof(*jobs));
            if (!nj) {
                for (size_t i = 0; i < n; i++)
                    if (keep[i])
                        claimset_release(st->held, ids[i]);
                out = RMQS_ENOMEM;
                goto drop;
            }
            jobs = nj;
        }
        for (size_t i = 0; i < n; i++) {
            if (!keep[i]) {
                job_clear(&c[i].job);
                continue;
            }
            /* as the claim will write it (store_record) */
            c[i].job.status = JOB_PUBLISHING;
            c[i].job.attempts++;
            c[i].job.updated_at = now_ms;
            jobs[got++] = c[i].job;
        }
        read = n;
        n = 0;
        if ((size_t)kept == read)
            break; /* none dropped: this read found all there was */
    }
    goto done;
drop:
    for (size_t i = 0; i < n; i++)
        job_clear(&c[i].job);
done:
    pthread_mutex_unlock(&st->rd_mu);
    free(c);
    free(ids);
    free(keep);
    if (out != RMQS_OK && got == 0) {
        free(jobs);
        return out;
    }
    /* the read is in (due_at, seq) order per round; a later round may hold
     * earlier jobs */
    if (got > 1) {
        for (size_t i = 1; i < got; i++) {
            job_t t = jobs[i];
            size_t k = i;
            while (k > 0 && jobs[k - 1].due_at > t.due_at) {
                jobs[k] = jobs[k - 1];
                k--;
            }
            jobs[k] = t;
        }
    }
    *jobs_out = jobs;
    *n_out = got;
    return RMQS_OK;
}

/* Step one bound settle statement and count what it did: SENT and
 * RELEASE by sqlite3_changes() (0 or 1), RETRY by its RETURNING status
 * (pending again, or failed at max_attempts; no row if not publishing).
 * SQLITE_OK with s reset, or the failing code with s left for stmt_fail. */
static int settle_one(store_t *st, sqlite3_stmt *s, stmt_id sid)
{
    int rc;

    if (sid != S_SETTLE_RETRY) {
        rc = stmt_exec(s);
        if (rc == SQLITE_OK && sqlite3_changes(st->db) > 0) {
            st->delta[JOB_PUBLISHING]--;
            st->delta[sid == S_SETTLE_SENT ? JOB_SENT : JOB_PENDING]++;
        }
        return rc;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        int status = sqlite3_column_int(s, 0);
        /* RETURNING: the change is complete only at SQLITE_DONE */
        rc = sqlite3_step(s);
        if (rc != SQLITE_DONE)
            return rc;
        if (status >= 0 && status < N_STATUS) {
            st->delta[JOB_PUBLISHING]--;
            st->delta[status]++;
        }
    }
    if (rc != SQLITE_DONE)
        return rc;
    stmt_done(s);
    return SQLITE_OK;
}

rmqs_rc store_record(store_t *st, const char *const *claims, size_t n_claims,
                     const store_outcome *o, size_t n, int64_t now_ms)
{
    unsigned char(*ids)[JOB_ID_BYTES];
    size_t total = n_claims + n;
    rmqs_rc out;

    if (total == 0)
        return RMQS_OK;
    if ((n && !o) || (n_claims && !claims))
        return RMQS_EINVAL;
    ids = malloc(total * sizeof(*ids));
    if (!ids)
        return RMQS_ENOMEM;
    /* validate everything before touching anything: claims first, then
     * outcomes, in ids[] */
    for (size_t i = 0; i < n_claims; i++) {
        if (!claims[i] || job_id_parse(claims[i], ids[i]) != RMQS_OK) {
            free(ids);
            return RMQS_EINVAL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!o[i].id || job_id_parse(o[i].id, ids[n_claims + i]) != RMQS_OK ||
            o[i].kind < STORE_OUT_SENT || o[i].kind > STORE_OUT_RELEASE) {
            free(ids);
            return RMQS_EINVAL;
        }
    }

    pthread_mutex_lock(&st->mu);
    out = tx_begin(st, TX_RELAXED);
    if (out != RMQS_OK)
        goto unlock;
    for (size_t i = 0; i < n_claims; i++) {
        sqlite3_stmt *s = stmt_get(st, S_CLAIM_HELD);
        int rc;

        sqlite3_bind_int64(s, 1, now_ms);
        sqlite3_bind_blob(s, 2, ids[i], JOB_ID_BYTES, SQLITE_STATIC);
        rc = stmt_exec(s);
        if (rc != SQLITE_OK) {
            out = stmt_fail(st, s, rc, S_CLAIM_HELD);
            tx_abort(st);
            goto unlock;
        }
        if (sqlite3_changes(st->db) > 0) {
            st->delta[JOB_PENDING]--;
            st->delta[JOB_PUBLISHING]++;
        } else {
            /* only a write behind the store's back can do this: cancel
             * and reschedule refuse a held job */
            log_warn(MODULE, "a job claimed ahead was no longer pending",
                     "id=%s", claims[i]);
        }
    }
    for (size_t i = 0; i < n; i++) {
        stmt_id sid = o[i].kind == STORE_OUT_SENT    ? S_SETTLE_SENT
                      : o[i].kind == STORE_OUT_RETRY ? S_SETTLE_RETRY
                                                     : S_SETTLE_RELEASE;
        sqlite3_stmt *s = stmt_get(st, sid);
        int rc;

        sqlite3_bind_int64(s, 1, now_ms);
        sqlite3_bind_blob(s, 2, ids[n_claims + i], JOB_ID_BYTES, SQLITE_STATIC);
        if (sid == S_SETTLE_RETRY) {
            bind_text_or_null(s, 3, o[i].error);
            sqlite3_bind_int64(s, 4, o[i].retry_at);
        }
        /* a job no longer publishing (e.g. recovered meanwhile) is left
         * alone: the UPDATE simply matches no row, and counts nothing */
        rc = settle_one(st, s, sid);
        if (rc != SQLITE_OK) {
            out = stmt_fail(st, s, rc, sid);
            tx_abort(st);
            goto unlock;
        }
    }
    out = tx_commit(st);
    /* Settled and committed: the dispatcher no longer holds them. (A read
     * snapshot older than this commit may still show them pending: the
     * release is what tells store_claim_ahead to drop them.) */
    if (out == RMQS_OK)
        for (size_t i = 0; i < n; i++)
            claimset_release(st->held, ids[n_claims + i]);
unlock:
    pthread_mutex_unlock(&st->mu);
    free(ids);
    return out;
}

rmqs_rc store_settle(store_t *st, const store_outcome *o, size_t n,
                     int64_t now_ms)
{
    return store_record(st, NULL, 0, o, n, now_ms);
}

rmqs_rc store_recover(store_t *st, size_t *n_out)
{
    sqlite3_stmt *s;
    rmqs_rc out;
    int rc;

    *n_out = 0;
    pthread_mutex_lock(&st->mu);
    out = tx_begin(st, TX_RELAXED);
    if (out != RMQS_OK)
        goto unlock;
    s = stmt_get(st, S_RECOVER);
    rc = stmt_exec(s);
    if (rc != SQLITE_OK) {
        out = stmt_fail(st, s, rc, S_RECOVER);
        tx_abort(st);
        goto unlock;
    }
    *n_out = (size_t)sqlite3_changes64(st->db);
    st->delta[JOB_PUBLISHING] -= (int64_t)*n_out;
    st->delta[JOB_PENDING] += (int64_t)*n_out;
    out = tx_commit(st);
    if (out != RMQS_OK)
        *n_out = 0;
unlock:
    pthread_mutex_unlock(&st->mu);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Test hooks: deliberately not in store.h (like curl's UNITTEST). Declared
 * here for -Wmissing-prototypes; tests/unit/test_store.c declares them too. */

/* The SQL text of the statement called name ("claim_due", "next_due",
 * "list_all", ...), or NULL: lets the test EXPLAIN QUERY PLAN the exact
 * text the store runs. */
const char *store__sql(const char *name);
const char *store__sql(const char *name)
{
    for (int i = 0; i < S_COUNT; i++)
        if (strcmp(stmt_defs[i].name, name) == 0)
            return stmt_defs[i].sql;
    return NULL;
}

/* PRAGMA synchronous of this store's connection just now (0 OFF,
 * 1 NORMAL, 2 FULL), or -1: proves the dispatcher's calls put FULL back. */
int store__synchronous(store_t *st);
int store__synchronous(store_t *st)
{
    int rc;
    int64_t v;

    pthread_mutex_lock(&st->mu);
    v = query_int(st->db, "PRAGMA synchronous", &rc);
    pthread_mutex_unlock(&st->mu);
    return rc == SQLITE_OK ? (int)v : -1;
}

/* PRAGMA max_page_count on this store's connection (the limit is per
 * connection): simulates a full disk. SQLite never sets it below the
 * current size; *applied gets the value in force. */
rmqs_rc store__set_max_pages(store_t *st, int64_t pages, int64_t *applied);
rmqs_rc store__set_max_pages(store_t *st, int64_t pages, int64_t *applied)
{
    char sql[64];
    int rc;

    snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %" PRId64, pages);
    pthread_mutex_lock(&st->mu);
    *applied = query_int(st->db, sql, &rc);
    pthread_mutex_unlock(&st->mu);
    return rc == SQLITE_OK ? RMQS_OK : RMQS_EDB;
}
