/*
 * store_sqlite_schema.c - opening a SQLite database for the store: the
 * connection's pragmas, the migrations runner, the sync policy and the
 * dispatcher's read connection (the SQLite backend; store_sqlite_core.h).
 *
 * Why a room of its own: what the file must look like before the first
 * statement is prepared (WAL, synchronous, a schema at this binary's
 * version) is a different question from what the statements do, and a
 * second backend has its own answer (migrations/postgres/ beside
 * migrations/sqlite/).
 *
 * Schema: migrations/sqlite/NNNN_name.sql, embedded at build time, applied
 * at open in ascending order, each in its own transaction together with its
 * schema_migrations row. A database newer than the binary is refused.
 *
 * Sync policy. The dispatcher's own transactions (store_settle,
 * store_record, store_recover) commit with synchronous=NORMAL even on a
 * FULL connection: the connection switches to NORMAL before their
 * BEGIN and back to FULL when they end (sq_sync_set, called by the
 * transaction helpers of store_sqlite_core.c). Why this is safe: a job's
 * insertion is always fsynced (API writes stay FULL, and a FULL transaction
 * refuses to start if FULL cannot be restored); in WAL mode a NORMAL commit
 * survives a process crash, and only an OS crash or power loss can undo
 * it, which can only put a job back where it was before the claim or
 * settle: pending, or publishing (which store_recover makes pending at
 * start-up). So it is published again - a duplicate, never a loss;
 * delivery is at-least-once anyway. The WAL is append-only, so the next
 * FULL commit (its fsync covers every earlier frame) or the janitor's
 * checkpoint (every second; it syncs the WAL before copying) makes those
 * commits durable too. The switch is a fresh sqlite3_exec each time, not a
 * kept prepared statement: SQLite applies PRAGMA synchronous when the text
 * is compiled, and a prepared copy only takes effect when it re-prepares
 * itself (its program is just OP_Expire), so the first step after open
 * would silently keep the older setting.
 */
#include "store_sqlite_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

#define MOD "store"

/* Run a one-off statement (open time only) and copy the first column of
 * its first row into buf (may be NULL). */
int sq_run_once(sqlite3 *db, const char *sql, char *buf, size_t len)
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

int64_t sq_query_int(sqlite3 *db, const char *sql, int *rc_out)
{
    char buf[32];

    *rc_out = sq_run_once(db, sql, buf, sizeof(buf));
    return strtoll(buf, NULL, 10);
}

/* One clear open-time message: the path, what failed, sqlite3_errstr and,
 * when it says more, the connection's own message. */
rmqs_rc sq_open_fail(rmqs_error *err, sqlite3 *db, const char *path,
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
rmqs_rc sq_open_configure(sqlite3 *db, const char *path, bool sync_full,
                          rmqs_error *err)
{
    char limit[64];
    char mode[16];
    int rc;

    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);

    /* The first real read: a garbage or corrupt file fails here. */
    rc = sq_run_once(db, "SELECT count(*) FROM sqlite_schema", NULL, 0);
    if (rc != SQLITE_OK)
        return sq_open_fail(err, db, path, "", rc);
    if (sqlite3_db_readonly(db, "main") == 1)
        return sq_open_fail(err, NULL, path,
                            "opened read-only: ", SQLITE_READONLY);

    rc = sq_run_once(db, "PRAGMA journal_mode = WAL", mode, sizeof(mode));
    if (rc != SQLITE_OK)
        return sq_open_fail(err, db, path, "journal_mode=WAL: ", rc);
    if (strcmp(mode, "wal") != 0)
        return rmqs_fail(err, RMQS_EDB, NULL,
                         "cannot use database %s: WAL mode refused (journal "
                         "mode stays %s)",
                         path, mode);

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
        rc = sq_run_once(db, pragmas[i], NULL, 0);
        if (rc != SQLITE_OK) {
            char what[80];
            snprintf(what, sizeof(what), "%s: ", pragmas[i]);
            return sq_open_fail(err, db, path, what, rc);
        }
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
                            "WHERE version = ?1",
                            -1, &s, NULL);
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
                            "applied_at) VALUES (?1, ?2, ?3)",
                            -1, &s, NULL);
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
    log_info(MOD, "migration applied", "version=%d name=%s", m->version,
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
              "stays at version %d (%s)",
              m->name, m->version, msg ? msg : sqlite3_errstr(rc), current,
              path);
    sqlite3_free(msg);
    return RMQS_EDB;
}

rmqs_rc sq_migrate(sqlite3 *db, const char *path, const store_migration *m,
                   size_t n, rmqs_error *err)
{
    int known = n ? m[n - 1].version : 0;
    int64_t current;
    rmqs_rc out;
    int rc;

    rc = sq_run_once(db,
                     "CREATE TABLE IF NOT EXISTS schema_migrations ("
                     "version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                     "applied_at INTEGER NOT NULL)",
                     NULL, 0);
    if (rc != SQLITE_OK)
        return sq_open_fail(err, db, path, "creating schema_migrations: ", rc);
    current = sq_query_int(db,
                           "SELECT coalesce(max(version), 0) "
                           "FROM schema_migrations",
                           &rc);
    if (rc != SQLITE_OK)
        return sq_open_fail(err, db, path, "reading schema_migrations: ", rc);
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
rmqs_rc sq_rd_open(store_backend *st, const char *path, rmqs_error *err)
{
    int rc = sqlite3_open_v2(path, &st->rd_db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                                 SQLITE_OPEN_EXRESCODE,
                             NULL);

    if (rc != SQLITE_OK)
        return sq_open_fail(err, st->rd_db, path, "read connection: ", rc);
    sqlite3_extended_result_codes(st->rd_db, 1);
    sqlite3_busy_timeout(st->rd_db, BUSY_TIMEOUT_MS);
    rc = sq_run_once(st->rd_db, "PRAGMA query_only = 1", NULL, 0);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(st->rd_db, RD_DUE_SQL, -1,
                                SQLITE_PREPARE_PERSISTENT, &st->rd_due, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(st->rd_db, RD_NEXT_SQL, -1,
                                SQLITE_PREPARE_PERSISTENT, &st->rd_next, NULL);
    if (rc != SQLITE_OK)
        return sq_open_fail(err, st->rd_db, path, "read connection: ", rc);
    return RMQS_OK;
}

/* Process-wide SQLite settings, before SQLite initialises itself. Memory
 * statistics off: nothing reads them, and keeping them takes a global
 * mutex on every SQLite malloc and free (~5% of the writer's CPU). */
void sq_global_config(void)
{
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); /* MISUSE if late */
}
