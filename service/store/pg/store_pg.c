/*
 * store_pg.c - the PostgreSQL backend of the store (store_backend.h), its
 * top: the migrations runner, open and close, the small calls (schema
 * version, purge, counts, ping, sizes) and the ops table (store_pg.h). The
 * files below it are listed in store_pg_core.h: connections, error
 * mapping, transactions with their count deltas and notifications and
 * rows <-> jobs are in store_pg_core.c (URLs and SQLSTATEs in
 * store_pg_url.c), clients' calls in store_pg_jobs.c, the dispatcher's in
 * store_pg_dispatch.c. What follows is about the backend as a whole.
 *
 * Why: one SQLite file is one machine's disk. Several instances sharing a
 * PostgreSQL database (replicated, failed over by Patroni or a managed
 * service) keep every acknowledged job when a host goes away (issue 12).
 * The behaviour above store.h is the same as SQLite's; what differs is
 * here: every instance claims with FOR NO KEY UPDATE SKIP LOCKED under a
 * lease, and counts live in per-slot rows instead of one hot row.
 *
 * How it works:
 *   - statements are sent with bound parameters and read in binary; ids
 *     and bodies go as binary bytea, numbers as text; the hot ones are
 *     prepared once per connection, and what a call sends goes in as few
 *     round trips as it can (pipelines; the BEGIN with the first
 *     statements; store_pg_conn.c): a group commit takes two, a claim
 *     two, a settle one;
 *   - a write is BEGIN ... COMMIT on its role's connection; with the
 *     COMMIT, in the same transaction, the nonzero count deltas are added
 *     to this connection's job_counts slot (one INSERT ... ON CONFLICT DO
 *     UPDATE; the dispatcher's statements count their own moves), and, if
 *     the transaction stored or rescheduled pending jobs, pg_notify('rmqs_due',
 *     <earliest due_at>) wakes the other instances right after it (never
 *     after a ROLLBACK);
 *   - errors: SQLSTATE -> rmqs_rc (store_pg_map_sqlstate): disk full is
 *     RMQS_EFULL (507/503 as SQLite's), a lost connection, a read-only
 *     server (25006, a standby or a demoted primary) or a shutdown is
 *     RMQS_EDB: the call fails, nothing is acknowledged, and the connection
 *     is closed so the next call connects again (following a multi-host
 *     URL to the new primary);
 *   - the URL may carry a password: it is kept for libpq and never logged
 *     (store_pg_safe_url is what logs and errors show);
 *   - migrations run at open under pg_advisory_lock, so N instances
 *     starting at once migrate once; a schema newer than the binary is
 *     refused with SQLite's message.
 */
#include "store_pg_core.h"
#include "store_pg.h"

#include <ctype.h>
#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

#define MOD "store"

/* ------------------------------------------------------------------------ */
/* Migrations                                                               */

/* The advisory lock of the migrations runner: one key for every instance
 * of every version. */
#define MIGRATE_LOCK "hashtext('rmq-scheduler schema migrations')"

static rmqs_rc migrate_fail(rmqs_error *err, pg_conn *pc, const char *what,
                            const char *url)
{
    char msg[256];

    pg_first_line(pc->c ? PQerrorMessage(pc->c) : "connection lost", msg,
                  sizeof(msg));
    return rmqs_fail(err, RMQS_EDB, NULL, "cannot use database %s: %s: %s", url,
                     what, msg);
}

/* One query answering one integer in text (open time only); -1 on error. */
static int64_t query_int(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    int64_t v = -1;

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
        !PQgetisnull(res, 0, 0))
        v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

static rmqs_rc apply_migration(store_backend *b, const store_migration *m,
                               int current, rmqs_error *err)
{
    pg_conn *pc = &b->wr;
    char ver[24], now[24];
    const char *vals[3];
    PGresult *res;
    rmqs_rc rc;

    if (pg_exec_simple(pc, "migrate_begin", "BEGIN") != RMQS_OK)
        return migrate_fail(err, pc, "BEGIN", b->db.safe_url);
    res = PQexec(pc->c, m->sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK &&
        PQresultStatus(res) != PGRES_TUPLES_OK) {
        char msg[256];
        pg_first_line(PQresultErrorMessage(res), msg, sizeof(msg));
        PQclear(res);
        pg_tx_abort(pc);
        return rmqs_fail(err, RMQS_EDB, NULL,
                         "migration %s (version %d) failed: %s; rolled back, "
                         "schema stays at version %d (%s)",
                         m->name, m->version, msg, current, b->db.safe_url);
    }
    PQclear(res);
    vals[0] = pg_i64(ver, m->version);
    vals[1] = m->name;
    vals[2] = pg_i64(now, tu_now_ms());
    res = pg_exec(pc, "migrate_record",
                  "INSERT INTO schema_migrations (version, name, applied_at) "
                  "VALUES ($1, $2, $3)",
                  3, vals, NULL, NULL, &rc);
    PQclear(res);
    if (rc == RMQS_OK)
        rc = pg_exec_simple(pc, "migrate_commit", "COMMIT");
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        return migrate_fail(err, pc, "recording the migration", b->db.safe_url);
    }
    log_info(MOD, "migration applied", "version=%d name=%s", m->version,
             m->name);
    return RMQS_OK;
}

/* Under the advisory lock: bring the schema to this binary's version. */
static rmqs_rc migrate(store_backend *b, const store_migration *m, size_t n,
                       rmqs_error *err)
{
    pg_conn *pc = &b->wr;
    int known = n ? m[n - 1].version : 0;
    int64_t current;
    rmqs_rc rc = RMQS_OK;

    if (pg_exec_simple(pc, "migrate_lock",
                       "SELECT pg_advisory_lock(" MIGRATE_LOCK ")") != RMQS_OK)
        return migrate_fail(err, pc, "taking the migrations lock",
                            b->db.safe_url);
    if (pg_exec_simple(pc, "migrate_table",
                       "CREATE TABLE IF NOT EXISTS schema_migrations ("
                       "version integer PRIMARY KEY, name text NOT NULL, "
                       "applied_at bigint NOT NULL)") != RMQS_OK) {
        rc =
            migrate_fail(err, pc, "creating schema_migrations", b->db.safe_url);
        goto unlock;
    }
    current = query_int(pc->c, "SELECT coalesce(max(version), 0) "
                               "FROM schema_migrations");
    if (current < 0) {
        rc = migrate_fail(err, pc, "reading schema_migrations", b->db.safe_url);
        goto unlock;
    }
    if (current > known) {
        rc = rmqs_fail(err, RMQS_EDB, NULL,
                       "database schema version %lld is newer than this "
                       "binary (knows up to %d); refusing to start (%s)",
                       (long long)current, known, b->db.safe_url);
        goto unlock;
    }
    for (size_t i = 0; i < n; i++) {
        if (m[i].version <= current)
            continue;
        rc = apply_migration(b, &m[i], (int)current, err);
        if (rc != RMQS_OK)
            goto unlock;
        current = m[i].version;
    }
unlock:
    if (pc->c != NULL)
        (void)pg_exec_simple(pc, "migrate_unlock",
                             "SELECT pg_advisory_unlock(" MIGRATE_LOCK ")");
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Open, close, the small calls                                             */

static void conn_init(const pg_target *db, pg_conn *pc, const char *role,
                      bool relaxed, int slot, int64_t timeout_ms)
{
    pthread_mutex_init(&pc->mu, NULL);
    pc->db = db;
    pc->role = role;
    pc->relaxed = relaxed;
    pc->slot = slot;
    pc->notify_due = INT64_MAX;
    pc->timeout_ms = timeout_ms;
}

static void conn_free(pg_conn *pc)
{
    pg_close(pc);
    pthread_mutex_destroy(&pc->mu);
}

static void pg_free(store_backend *b)
{
    if (b == NULL)
        return;
    pg_threads_stop(b);
    pg_ix_stop(b);
    conn_free(&b->lsn);
    conn_free(&b->ix);
    conn_free(&b->wr);
    conn_free(&b->feed);
    conn_free(&b->disp);
    conn_free(&b->sched);
    for (int i = 0; i < PG_SEARCHERS; i++)
        conn_free(&b->search[i]);
    pthread_mutex_destroy(&b->wake_mu);
    pthread_mutex_destroy(&b->id_mu);
    pthread_mutex_destroy(&b->stop_mu);
    pthread_cond_destroy(&b->stop_cv);
    if (b->stop_pipe[0] >= 0)
        close(b->stop_pipe[0]);
    if (b->stop_pipe[1] >= 0)
        close(b->stop_pipe[1]);
    free(b->db.url);
    free(b->db.safe_url);
    free(b);
}

/* The first instance id, and the job_counts slot base it hashes to. */
static rmqs_rc new_instance(store_backend *b, unsigned *hash)
{
    unsigned h = 2166136261u; /* FNV-1a */

    if (pg_new_id(b->ids[0]) != RMQS_OK)
        return RMQS_ESYS;
    for (const char *p = b->ids[0]; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    *hash = h;
    return RMQS_OK;
}

/* Whether the schema has the search's mark (0003). */
static bool has_mark(store_backend *b)
{
    PGresult *res = PQexec(b->wr.c, "SELECT to_regclass('search_index') IS "
                                    "NOT NULL");
    bool yes = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
               PQgetvalue(res, 0, 0)[0] == 't';

    PQclear(res);
    return yes;
}

static rmqs_rc pg_open(const char *target, const store_options *opt,
                       const store_migration *migrations, size_t n,
                       store_backend **out, rmqs_error *err)
{
    store_backend *b;
    unsigned hash = 0;
    char msg[256];
    rmqs_rc rc;

    *out = NULL;
    rc = store_migrations_check(migrations, n, err);
    if (rc != RMQS_OK)
        return rc;
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    b->stop_pipe[0] = b->stop_pipe[1] = -1;
    pthread_mutex_init(&b->wake_mu, NULL);
    pthread_mutex_init(&b->id_mu, NULL);
    pthread_mutex_init(&b->stop_mu, NULL);
    atomic_store(&b->present_since, INT64_MAX);
    atomic_store(&b->shares, (int64_t)1 << 32); /* all of it, until known */
    {
        pthread_condattr_t ca; /* the keeper waits on CLOCK_MONOTONIC */
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&b->stop_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    b->lease_ms =
        opt && opt->lease_ms > 0 ? opt->lease_ms : PG_DEFAULT_LEASE_MS;
    if (b->lease_ms < PG_MIN_LEASE_MS)
        b->lease_ms = PG_MIN_LEASE_MS;
    b->db.timeout_ms = opt && opt->db_timeout_ms > 0 ? opt->db_timeout_ms
                                                     : PG_DEFAULT_DB_TIMEOUT_MS;
    b->wake_horizon_ms = opt ? opt->wake_horizon_ms : 0;
    b->db.url = strdup(target);
    b->db.safe_url = malloc(2 * strlen(target) + 64); /* "=***" may be longer */
    if (b->db.url == NULL || b->db.safe_url == NULL) {
        rc = rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    /* libpq knows the scheme in lower case only */
    for (char *p = b->db.url; *p && *p != ':'; p++)
        *p = (char)tolower((unsigned char)*p);
    store_pg_safe_url(target, b->db.safe_url, 2 * strlen(target) + 64);
    if (store_pg_url_problem(target) != NULL) {
        rc = rmqs_fail(err, RMQS_EINVAL, "db", "%s: %s", b->db.safe_url,
                       store_pg_url_problem(target));
        goto fail;
    }
    if (new_instance(b, &hash) != RMQS_OK) {
        rc = rmqs_fail(err, RMQS_ESYS, NULL,
                       "no randomness for the "
                       "instance id");
        goto fail;
    }
    /* one slot per connection that writes counts, so two connections of
     * this instance never wait for each other's row lock */
    {
        int64_t t = b->db.timeout_ms;
        conn_init(&b->db, &b->wr, "writer", opt && !opt->synchronous_full,
                  (int)(hash % PG_SLOTS), t);
        conn_init(&b->db, &b->feed, "feeder", true,
                  (int)((hash + 1) % PG_SLOTS), t);
        conn_init(&b->db, &b->disp, "dispatch", true,
                  (int)((hash + 2) % PG_SLOTS), t);
        conn_init(&b->db, &b->sched, "scheduler", b->wr.relaxed,
                  (int)((hash + 3) % PG_SLOTS), t);
        /* rebuildable from the mark: no need to wait for the flush */
        conn_init(&b->db, &b->ix, "indexer", true, (int)((hash + 4) % PG_SLOTS),
                  t);
        conn_init(&b->db, &b->lsn, "listener", true, 0, t);
    }
    b->ix_safe = b->ix_mark = -1;

    for (int i = 0; i < PG_SEARCHERS; i++) {
        conn_init(&b->db, &b->search[i], "search", true,
                  (int)((hash + 5) % PG_SLOTS),
                  opt && opt->search_budget_ms > 0 ? opt->search_budget_ms
                                                   : b->db.timeout_ms);
        b->search[i].budget = opt && opt->search_budget_ms > 0;
    }
    /* the migrations may take long (an index on a big table): no bound
     * until they are done */
    b->wr.timeout_ms = 0;
    b->wr.c = pg_connect(&b->db, "writer", b->wr.relaxed, 0, msg, sizeof(msg));
    if (b->wr.c == NULL) {
        rc = rmqs_fail(err, RMQS_EDB, NULL,
                       "cannot connect to database %s: "
                       "%s",
                       b->db.safe_url, msg);
        goto fail;
    }
    rc = migrate(b, migrations, n, err);
    if (rc != RMQS_OK)
        goto fail;
    b->wr.timeout_ms = b->db.timeout_ms;
    {
        char set[160];
        snprintf(set, sizeof(set),
                 "SET statement_timeout = %lld; "
                 "SET idle_in_transaction_session_timeout = %lld",
                 (long long)b->db.timeout_ms,
                 (long long)(b->db.timeout_ms + PG_ANSWER_MARGIN_MS));
        if (pg_exec_simple(&b->wr, "set_timeout", set) != RMQS_OK) {
            rc = rmqs_fail(err, RMQS_EDB, NULL,
                           "cannot set the statement timeout on %s",
                           b->db.safe_url);
            goto fail;
        }
    }
    b->feed.c = pg_connect(&b->db, "feeder", true, b->feed.timeout_ms, msg,
                           sizeof(msg));
    b->disp.c = b->feed.c ? pg_connect(&b->db, "dispatch", true,
                                       b->disp.timeout_ms, msg, sizeof(msg))
                          : NULL;
    if (b->feed.c == NULL || b->disp.c == NULL) {
        rc = rmqs_fail(err, RMQS_EDB, NULL,
                       "cannot connect to database %s: "
                       "%s",
                       b->db.safe_url, msg);
        goto fail;
    }
    rc = pg_measure_clock(b, &b->disp);
    if (rc != RMQS_OK) {
        rc = rmqs_fail(err, rc, NULL, "cannot read the clock of database %s",
                       b->db.safe_url);
        goto fail;
    }
    /* no claim is older than this: its lease ends after open + lease */
    atomic_store(&b->renew_chain,
                 tu_now_ms() + atomic_load(&b->clock_offset) + b->lease_ms);
    rc = pg_threads_start(b, err);
    if (rc == RMQS_OK && (opt == NULL || !opt->index_manual) && has_mark(b))
        rc = pg_ix_start(b, err);
    if (rc != RMQS_OK)
        goto fail;
    log_info(MOD, "database open",
             "backend=postgres url=%s instance=%s lease_ms=%" PRId64
             " db_timeout_ms=%" PRId64 " clock_offset_ms=%" PRId64
             " synchronous_commit=%s",
             b->db.safe_url, b->ids[0], b->lease_ms, b->db.timeout_ms,
             atomic_load(&b->clock_offset), b->wr.relaxed ? "off" : "on");
    *out = b;
    return RMQS_OK;
fail:
    pg_free(b);
    return rc;
}

static int pg_schema_version(store_backend *b)
{
    PGresult *res;
    rmqs_rc rc;
    int v = -1;

    if (pg_use(&b->wr) == RMQS_OK) {
        res = pg_exec(&b->wr, "schema_version",
                      "SELECT coalesce(max(version), 0)::integer "
                      "FROM schema_migrations",
                      0, NULL, NULL, NULL, &rc);
        if (res != NULL && PQntuples(res) == 1)
            v = (int)pg_int(res, 0, 0);
        PQclear(res);
    }
    pg_done(&b->wr);
    return v;
}

static rmqs_rc pg_purge(store_backend *b, int64_t before_ms, size_t limit,
                        size_t *deleted)
{
    pg_conn *pc = &b->wr;
    char before[24], lim[24];
    const char *vals[2] = {pg_i64(before, before_ms),
                           pg_i64(lim, (int64_t)limit)};
    PGresult *res = NULL;
    rmqs_rc rc;

    *deleted = 0;
    rc = pg_use(pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto done;
    res = pg_exec(pc, "purge",
                  "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs "
                  "WHERE status >= 2 AND updated_at < $1 "
                  "ORDER BY updated_at LIMIT $2) RETURNING status",
                  2, vals, NULL, NULL, &rc);
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        goto done;
    }
    for (int i = 0; i < PQntuples(res); i++)
        store_delta_add(&pc->delta, (int)pg_int(res, i, 0), -1);
    rc = pg_tx_commit(b, pc);
    if (rc == RMQS_OK)
        *deleted = (size_t)PQntuples(res);
done:
    PQclear(res);
    pg_done(pc);
    return rc;
}

static rmqs_rc pg_checkpoint(store_backend *b, int64_t *wal_frames,
                             int64_t *copied)
{
    /* the server checkpoints by itself */
    (void)b;
    if (wal_frames)
        *wal_frames = 0;
    if (copied)
        *copied = 0;
    return RMQS_OK;
}

static rmqs_rc pg_counts(store_backend *b, int64_t counts[STORE_N_STATUS])
{
    PGresult *res = NULL;
    rmqs_rc rc;

    for (int i = 0; i < STORE_N_STATUS; i++)
        counts[i] = 0;
    rc = pg_use(&b->wr);
    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "counts",
                      "SELECT status, sum(n)::bigint FROM job_counts "
                      "GROUP BY status",
                      0, NULL, NULL, NULL, &rc);
    for (int i = 0; res != NULL && i < PQntuples(res); i++) {
        int64_t s = pg_int(res, i, 0);
        if (s >= 0 && s < STORE_N_STATUS)
            counts[s] = pg_int(res, i, 1);
    }
    PQclear(res);
    pg_done(&b->wr);
    return rc;
}

static int64_t pg_free_bytes(store_backend *b)
{
    (void)b;
    return -1; /* the server's disk is not ours to see */
}

static int64_t pg_size_bytes(store_backend *b)
{
    PGresult *res = NULL;
    int64_t v = -1;
    rmqs_rc rc;

    if (pg_use(&b->wr) == RMQS_OK)
        res = pg_exec(&b->wr, "size_bytes",
                      "SELECT pg_database_size(current_database())", 0, NULL,
                      NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1)
        v = pg_int(res, 0, 0);
    PQclear(res);
    pg_done(&b->wr);
    return v;
}

static rmqs_rc pg_ping(store_backend *b)
{
    rmqs_rc rc = pg_use(&b->wr);

    /* a server that answers but takes no writes (a standby, a demoted
     * primary) is not ready either */
    if (rc == RMQS_OK) {
        PGresult *res = pg_exec(&b->wr, "ping",
                                "SELECT pg_is_in_recovery() OR "
                                "current_setting('transaction_read_only')"
                                "::boolean",
                                0, NULL, NULL, NULL, &rc);
        if (res != NULL && PQntuples(res) == 1 &&
            PQgetvalue(res, 0, 0)[0] != 0) {
            log_warn(MOD,
                     "the database takes no writes (a standby, or read-only)",
                     "url=%s", b->db.safe_url);
            pg_close(&b->wr); /* the next call looks for the primary */
            rc = RMQS_EDB;
        }
        PQclear(res);
    }
    pg_done(&b->wr);
    return rc;
}

static rmqs_rc pg_identity(store_backend *b, char out[STORE_IDENTITY_MAX])
{
    PGresult *res = NULL;
    rmqs_rc rc = pg_use(&b->wr);

    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "identity", "SELECT id FROM store_identity", 0,
                      NULL, NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1)
        snprintf(out, STORE_IDENTITY_MAX, "pg-%.32s", PQgetvalue(res, 0, 0));
    else if (rc == RMQS_OK)
        rc = RMQS_EDB;
    PQclear(res);
    pg_done(&b->wr);
    return rc;
}

int64_t store_pg__claimers(store_backend *b, int64_t *rank)
{
    int64_t shares = atomic_load(&b->shares);

    *rank = shares & 0xffffffff;
    return shares >> 32;
}

const store_ops store_pg_ops = {
    .name = "postgres",
    .claims_in_read = true,
    .open = pg_open,
    .close = pg_free,
    .schema_version = pg_schema_version,
    .purge = pg_purge,
    .checkpoint = pg_checkpoint,
    .counts = pg_counts,
    .free_bytes = pg_free_bytes,
    .size_bytes = pg_size_bytes,
    .ping = pg_ping,
    .identity = pg_identity,
    .insert_batch = pg_insert_batch,
    .get = pg_get,
    .list = pg_list,
    .update = pg_update,
    .count = pg_count,
    .explain = pg_explain,
    .failures = pg_failures,
    .update_batch = pg_update_batch,
    .search_index = pg_search_index,
    .search_index_lag = pg_search_index_lag,
    .next_due = pg_next_due,
    .read_due = pg_read_due,
    .record = pg_record,
    .recover = pg_recover,
    .set_wake = pg_set_wake,
    .clock_offset_ms = pg_clock_offset_ms,
    .lease_renewed_until = pg_lease_renewed_until,
    .claims_valid_since = pg_claims_valid_since,
    .buckets_update = pg_buckets_update,
    .sched = &pg_schedule_ops,
    .lim = &pg_limit_ops,
};
