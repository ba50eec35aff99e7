/*
 * store_sqlite.c - the SQLite backend of the store (store_backend.h), its
 * top: open and close, the small calls (schema version, counts, purge,
 * sizes, ping), the ops table and the test hooks (store_sqlite.h). The
 * files below it are listed in store_sqlite_core.h: the statements, the
 * transaction discipline and rows <-> jobs are in store_sqlite_core.c,
 * clients' calls in store_sqlite_jobs.c, the dispatcher's in
 * store_sqlite_dispatch.c, the search's indexer in store_sqlite_indexer.c,
 * pragmas, migrations and the sync policy in store_sqlite_schema.c. What
 * follows is about the backend as a whole.
 *
 * Why: jobs must survive restarts and crashes, and a job the API accepted
 * must never be lost or published twice by our own doing. SQLite in WAL mode
 * with synchronous=FULL makes every committed write durable on return.
 *
 * How it works:
 *   - One connection per store, opened with SQLITE_OPEN_NOMUTEX and guarded
 *     by our own mutex (st->mu): every call holds it from first to last
 *     statement, so HTTP workers and the dispatcher are serialised and
 *     sqlite3_errmsg() still describes our own failure when we read it.
 *   - Every statement is prepared once at open (the sq_stmt_defs table
 *     below) and kept in st->stmt[]; calls bind, step, reset and clear
 *     bindings. All the SQL of the service is in the store_sqlite files.
 *   - Writes run in BEGIN IMMEDIATE ... COMMIT (the write lock is taken up
 *     front, so a read->write upgrade can never fail with SQLITE_BUSY).
 *     After any failure, if SQLite left the transaction open
 *     (sqlite3_get_autocommit() == 0) we ROLLBACK, so the store stays usable:
 *     once disk space returns, later writes succeed without reopening.
 *   - SQLITE_FULL (and an I/O error caused by ENOSPC/EDQUOT) map to
 *     RMQS_EFULL, out-of-memory to RMQS_ENOMEM, the rest to RMQS_EDB; each
 *     failure is logged once here with the operation and SQLite's message.
 *
 * Row <-> job_t: id is a 16-byte BLOB (job_id_parse/format), headers and
 * properties are compact JSON text or NULL (store_common.h), sent_at is
 * NULL while the job is unsent (-1 in job_t), body is a BLOB (never NULL in
 * the table; empty bodies are a zero-length blob).
 *
 * Settling: SENT keeps last_error as it was (the last failure before the
 * successful attempt stays visible); RETRY stores the new error; store_recover
 * leaves updated_at alone (it has no clock; it only undoes a claim).
 *
 * Job counts (GET /metrics) live in table job_counts, one row per status,
 * kept exact by the rules of store_common.h (store_delta) rather than by
 * triggers (migration 0005 dropped them: a trigger per row, which also
 * makes every INSERT keep a statement journal inside the request's
 * savepoint, halved the rate of group commits of 1000-job requests; with
 * one-job requests the cost was 5-10% of CPU per row, as the request's
 * savepoint journals the same pages anyway). Here: claim per RETURNING row;
 * settle per sqlite3_changes() or, for RETRY (pending or failed), per
 * RETURNING status; purge per deleted row's RETURNING status. sq_tx_commit
 * applies the nonzero sums with one UPDATE per status just before COMMIT;
 * when SQLite rolled the whole transaction back by itself (SQLITE_FULL
 * etc.: sqlite3_get_autocommit() == 1) the sums are dropped, never applied
 * outside a transaction. All of it runs under st->mu, so store_counts()
 * never sees a transaction half-way. Anything writing jobs behind the
 * store's back must update job_counts itself.
 */
#include "store_sqlite_core.h"
#include "store_sqlite.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "log.h"

#define MOD "store"

/* ------------------------------------------------------------------------ */
/* Open, close, the small calls                                             */

static void sq_free(store_backend *st)
{
    sq_ix_stop(st); /* its batches use the connection */
    for (int i = 0; i < SQ_IX_NSTMT; i++)
        sqlite3_finalize(st->ix_stmt[i]);
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    sqlite3_finalize(st->purge);
    sq_sched_finalize(st);
    sq_lim_finalize(st);
    sqlite3_finalize(st->rd_due);
    sqlite3_finalize(st->rd_next);
    sqlite3_close(st->rd_db);
    for (int i = 0; i < SQ_SEARCHERS; i++) {
        sqlite3_close(st->sr_db[i]);
        pthread_mutex_destroy(&st->sr_mu[i]);
    }
    sqlite3_close(st->db);
    sqlite3_close(st->ckpt_db);
    free(st->path);
    free(st->dir);
    pthread_mutex_destroy(&st->ckpt_mu);
    pthread_mutex_destroy(&st->rd_mu);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* Open (creating if needed) the database file at path, configure it,
 * bring its schema up to date, prepare every statement and open the read
 * connection. */
static rmqs_rc sq_open(const char *path, const store_options *opt,
                       const store_migration *migrations, size_t n,
                       store_backend **out, rmqs_error *err)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    bool sync_full = opt ? opt->synchronous_full : true;
    store_backend *st;
    rmqs_rc rc;
    int src;

    pthread_once(&once, sq_global_config);
    *out = NULL;
    rc = store_migrations_check(migrations, n, err);
    if (rc != RMQS_OK)
        return rc;

    st = calloc(1, sizeof(*st));
    if (!st)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    if (pthread_mutex_init(&st->mu, NULL) != 0 ||
        pthread_mutex_init(&st->ckpt_mu, NULL) != 0 ||
        pthread_mutex_init(&st->rd_mu, NULL) != 0 ||
        pthread_mutex_init(&st->sr_mu[0], NULL) != 0 ||
        pthread_mutex_init(&st->sr_mu[1], NULL) != 0 ||
        pthread_mutex_init(&st->sr_mu[2], NULL) != 0) {
        _Static_assert(SQ_SEARCHERS == 3, "one sr_mu init per searcher");
        free(st);
        return rmqs_fail(err, RMQS_ESYS, NULL, "pthread_mutex_init failed");
    }
    st->sync_full = sync_full;
    st->search_budget_ms = opt ? opt->search_budget_ms : 0;
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
        rc =
            rmqs_fail(err, src == SQLITE_NOMEM ? RMQS_ENOMEM : RMQS_EDB, NULL,
                      "cannot open database %s: %s", path, sqlite3_errstr(src));
        goto fail;
    }
    rc = sq_open_configure(st->db, path, sync_full, err);
    if (rc != RMQS_OK)
        goto fail;
    if (opt != NULL && opt->manual_checkpoint) {
        /* store_checkpoint() from a background thread does it instead of
         * the commit that crosses 1000 pages. */
        src = sqlite3_wal_autocheckpoint(st->db, 0);
        if (src != SQLITE_OK) {
            rc = sq_open_fail(err, st->db, path, "wal_autocheckpoint: ", src);
            goto fail;
        }
    }
    rc = sq_migrate(st->db, path, migrations, n, err);
    if (rc != RMQS_OK)
        goto fail;

    for (int i = 0; i < S_COUNT; i++) {
        src = sqlite3_prepare_v3(st->db, sq_stmt_defs[i].sql, -1,
                                 SQLITE_PREPARE_PERSISTENT, &st->stmt[i], NULL);
        if (src != SQLITE_OK) {
            rc = rmqs_fail(err, RMQS_EDB, NULL,
                           "database %s: cannot prepare statement %s: %s "
                           "(schema incomplete?)",
                           path, sq_stmt_defs[i].name, sqlite3_errmsg(st->db));
            goto fail;
        }
    }
    rc = sq_sched_prepare(st, path, err);
    if (rc != RMQS_OK)
        goto fail;
    rc = sq_rd_open(st, path, err);
    if (rc != RMQS_OK)
        goto fail;
    if (opt == NULL || !opt->index_manual) {
        rc = sq_ix_start(st, err);
        if (rc != RMQS_OK)
            goto fail;
    }
    log_info(MOD, "database open", "path=%s synchronous=%s", path,
             sync_full ? "full" : "normal");
    *out = st;
    return RMQS_OK;

fail:
    sq_free(st);
    return rc;
}

static int sq_schema_version(store_backend *st)
{
    sqlite3_stmt *s;
    int v = -1;
    int rc;

    sq_lock(st);
    s = sq_stmt(st, S_VERSION);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        v = sqlite3_column_int(s, 0);
    else
        (void)sq_fail(st, rc, sq_stmt_defs[S_VERSION].name);
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return v;
}

static rmqs_rc sq_purge(store_backend *st, int64_t before_ms, size_t limit,
                        size_t *deleted)
{
    rmqs_rc out = RMQS_OK;
    int rc;

    *deleted = 0;
    sq_lock(st);
    if (st->purge == NULL) {
        rc = sqlite3_prepare_v3(
            st->db,
            "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs "
            "INDEXED BY jobs_finished WHERE status >= 2 AND updated_at < ?1 "
            "ORDER BY updated_at LIMIT ?2) RETURNING status",
            -1, SQLITE_PREPARE_PERSISTENT, &st->purge, NULL);
        if (rc != SQLITE_OK) {
            out = sq_fail(st, rc, "purge_prepare");
            goto done;
        }
    }
    out = sq_tx_begin(st, TX_DURABLE);
    if (out != RMQS_OK)
        goto done;
    sqlite3_bind_int64(st->purge, 1, before_ms);
    sqlite3_bind_int64(st->purge, 2, (sqlite3_int64)limit);
    /* one row per deleted job: its status leaves job_counts */
    while ((rc = sqlite3_step(st->purge)) == SQLITE_ROW) {
        int status = sqlite3_column_int(st->purge, 0);
        store_delta_add(&st->delta, status, -1);
        (*deleted)++;
    }
    if (rc != SQLITE_DONE) {
        out = sq_fail(st, rc, "purge");
        sq_stmt_done(st->purge);
        sq_tx_abort(st);
        *deleted = 0;
        goto done;
    }
    sq_stmt_done(st->purge);
    out = sq_tx_commit(st);
    if (out != RMQS_OK)
        *deleted = 0;
done:
    pthread_mutex_unlock(&st->mu);
    return out;
}

static rmqs_rc sq_counts(store_backend *st, int64_t counts[STORE_N_STATUS])
{
    sqlite3_stmt *s;
    rmqs_rc out = RMQS_OK;
    int rc;

    for (int i = 0; i < STORE_N_STATUS; i++)
        counts[i] = 0;
    /* Under mu no transaction is half-way: job_counts matches jobs. */
    sq_lock(st);
    s = sq_stmt(st, S_COUNTS);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int status = sqlite3_column_int(s, 0);
        if (status >= 0 && status < STORE_N_STATUS)
            counts[status] = sqlite3_column_int64(s, 1);
    }
    if (rc != SQLITE_DONE)
        out = sq_fail(st, rc, sq_stmt_defs[S_COUNTS].name);
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return out;
}

static int64_t sq_free_bytes(store_backend *st)
{
    struct statvfs sv;

    /* No lock: the writer asks before every batch, and st->dir never
     * changes after open. */
    if (statvfs(st->dir, &sv) != 0)
        return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

static int64_t sq_size_bytes(store_backend *st)
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

static rmqs_rc sq_ping(store_backend *st)
{
    sqlite3_stmt *s;
    rmqs_rc out = RMQS_OK;
    int rc;

    sq_lock(st);
    s = sq_stmt(st, S_PING);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW)
        out = sq_fail(st, rc, sq_stmt_defs[S_PING].name);
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return out;
}

static rmqs_rc sq_identity(store_backend *st, char out[STORE_IDENTITY_MAX])
{
    struct stat sb;

    /* No lock: st->path never changes after open. */
    if (stat(st->path, &sb) != 0)
        return RMQS_EDB;
    snprintf(out, STORE_IDENTITY_MAX, "sqlite-%llx-%llx",
             (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino);
    return RMQS_OK;
}

const store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_free,
    .schema_version = sq_schema_version,
    .purge = sq_purge,
    .checkpoint = sq_checkpoint,
    .counts = sq_counts,
    .free_bytes = sq_free_bytes,
    .size_bytes = sq_size_bytes,
    .ping = sq_ping,
    .identity = sq_identity,
    .insert_batch = sq_insert_batch,
    .get = sq_get,
    .list = sq_list,
    .update = sq_update,
    .count = sq_count,
    .explain = sq_explain,
    .failures = sq_failures,
    .update_batch = sq_update_batch,
    .search_index = sq_search_index,
    .search_index_lag = sq_search_index_lag,
    .next_due = sq_next_due,
    .read_due = sq_read_due,
    .record = sq_record,
    .recover = sq_recover,
    .sched = &sq_schedule_ops,
    .lim = &sq_limit_ops,
};

/* ------------------------------------------------------------------------ */
/* Test hooks behind store.c's store__sql, store__synchronous and       */
/* store__set_max_pages                                                     */

const char *store_sqlite__sql(const char *name)
{
    /* the dispatcher's reads, on the read connection */
    if (strcmp(name, "read_due") == 0)
        return RD_DUE_SQL;
    if (strcmp(name, "read_next") == 0)
        return RD_NEXT_SQL;
    for (int i = 0; i < S_COUNT; i++)
        if (strcmp(sq_stmt_defs[i].name, name) == 0)
            return sq_stmt_defs[i].sql;
    return sq_sched__sql(name) != NULL ? sq_sched__sql(name)
                                       : sq_lim__sql(name);
}

int store_sqlite__synchronous(store_backend *st)
{
    int rc;
    int64_t v;

    sq_lock(st);
    v = sq_query_int(st->db, "PRAGMA synchronous", &rc);
    pthread_mutex_unlock(&st->mu);
    return rc == SQLITE_OK ? (int)v : -1;
}

rmqs_rc store_sqlite__set_max_pages(store_backend *st, int64_t pages,
                                    int64_t *applied)
{
    char sql[64];
    int rc;

    snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %" PRId64, pages);
    sq_lock(st);
    *applied = sq_query_int(st->db, sql, &rc);
    pthread_mutex_unlock(&st->mu);
    return rc == SQLITE_OK ? RMQS_OK : RMQS_EDB;
}
