/*
 * store_sqlite_limits.c - the flow limits of the SQLite backend (store.h's
 * store_limit_* calls, store_backend.h's store_limit_ops; the table is
 * migrations/sqlite/0008_limits.sql).
 *
 * Why a room of its own: limits are a kind of row of their own, with their
 * own statements and no job in them.
 *
 * How it works: the statements are prepared once, on first use (their
 * own table below, st->lim[]), and run on the writer's connection under
 * st->mu, as every other call of this backend. Writes are durable transactions
 * (TX_DURABLE: fsynced on a FULL store), BEGIN IMMEDIATE: a put reads the
 * row, compares the spec, and on a new name counts the table against the
 * cap, all under the write lock, so no other write (of this process: the
 * only writer) comes between the count and the insert. An update is one
 * compare-and-set UPDATE on (name, generation).
 */
#include "store_sqlite_core.h"

#include <stdlib.h>
#include <string.h>

#define LIMIT_COLS "name, spec, generation, created_at, updated_at"

typedef enum lim_stmt {
    LS_GET,
    LS_COUNT,
    LS_INSERT,
    LS_REPLACE,
    LS_UPDATE,
    LS_LIST,
    LS_DELETE,
    LS_N
} lim_stmt;

_Static_assert(LS_N == SQ_LIM_NSTMT, "SQ_LIM_NSTMT is the table's size");

/* Parameters: ?1 name, ?2 spec, ?3 now (the times), ?4 the generation a
 * compare-and-set expects. */
static const stmt_def k_defs[LS_N] = {
    [LS_GET] = {"lim_get", "SELECT " LIMIT_COLS " FROM limits WHERE name = ?1"},
    [LS_COUNT] = {"lim_count", "SELECT count(*) FROM limits"},
    [LS_INSERT] = {"lim_insert", "INSERT INTO limits (" LIMIT_COLS ") VALUES "
                                 "(?1, ?2, 1, ?3, ?3) RETURNING " LIMIT_COLS},
    [LS_REPLACE] = {"lim_replace",
                    "UPDATE limits SET spec = ?2, generation = generation + 1, "
                    "updated_at = ?3 WHERE name = ?1 RETURNING " LIMIT_COLS},
    [LS_UPDATE] = {"lim_update",
                   "UPDATE limits SET spec = ?2, generation = generation + 1, "
                   "updated_at = ?3 WHERE name = ?1 AND generation = ?4 "
                   "RETURNING " LIMIT_COLS},
    [LS_LIST] = {"lim_list", "SELECT " LIMIT_COLS " FROM limits ORDER BY name"},
    [LS_DELETE] = {"lim_delete", "DELETE FROM limits WHERE name = ?1"},
};

/* Prepare the statements not yet prepared (under st->mu). On first use,
 * not at open: a store opened at a schema before 0008 (the migration tests
 * do) has no limits table, and everything else of it works. */
static rmqs_rc prepared(store_backend *st)
{
    for (int i = 0; i < LS_N; i++) {
        int rc;
        if (st->lim[i] != NULL)
            continue;
        rc = sqlite3_prepare_v3(st->db, k_defs[i].sql, -1,
                                SQLITE_PREPARE_PERSISTENT, &st->lim[i], NULL);
        if (rc != SQLITE_OK)
            return sq_fail(st, rc, k_defs[i].name);
    }
    return RMQS_OK;
}

void sq_lim_finalize(store_backend *st)
{
    for (int i = 0; i < LS_N; i++) {
        sqlite3_finalize(st->lim[i]);
        st->lim[i] = NULL;
    }
}

const char *sq_lim__sql(const char *name)
{
    for (int i = 0; i < LS_N; i++)
        if (strcmp(k_defs[i].name, name) == 0)
            return k_defs[i].sql;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Rows                                                                     */

/* The LIMIT_COLS of s's current row into *out (zeroed first). */
static rmqs_rc row_to_limit(sqlite3_stmt *s, store_limit *out)
{
    const char *name = (const char *)sqlite3_column_text(s, 0);
    const char *spec = (const char *)sqlite3_column_text(s, 1);

    memset(out, 0, sizeof(*out));
    out->name = name != NULL ? strdup(name) : NULL;
    out->spec = spec != NULL ? strdup(spec) : NULL;
    if (out->name == NULL || out->spec == NULL) {
        store_limit_clear(out);
        return RMQS_ENOMEM;
    }
    out->generation = sqlite3_column_int64(s, 2);
    out->created_at = sqlite3_column_int64(s, 3);
    out->updated_at = sqlite3_column_int64(s, 4);
    return RMQS_OK;
}

/* Step statement id (bound) for at most one row into *out (NULL: only
 * whether there is one); RMQS_ENOTFOUND if none. It is stepped to its end
 * (a RETURNING statement completes there) and reset. */
static rmqs_rc step_one(store_backend *st, lim_stmt id, store_limit *out)
{
    sqlite3_stmt *s = st->lim[id];
    store_limit row = {0};
    rmqs_rc rc = RMQS_ENOTFOUND;
    int src = sqlite3_step(s);

    if (src == SQLITE_ROW) {
        rc = out != NULL ? row_to_limit(s, &row) : RMQS_OK;
        src = sqlite3_step(s);
    }
    if (src != SQLITE_DONE) {
        store_limit_clear(&row);
        rc = sq_fail(st, src, k_defs[id].name);
    } else if (rc == RMQS_OK && out != NULL) {
        *out = row;
    }
    sq_stmt_done(s);
    return rc;
}

/* Bind ?1 name of statement id, and ?2 spec and ?3 now when spec is not
 * NULL; the statement. */
static sqlite3_stmt *bind(store_backend *st, lim_stmt id, const char *name,
                          const char *spec, int64_t now_ms)
{
    sqlite3_stmt *s = st->lim[id];

    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (spec != NULL) {
        sqlite3_bind_text(s, 2, spec, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, now_ms);
    }
    return s;
}

/* Bind as bind(), then step_one. */
static rmqs_rc bound_one(store_backend *st, lim_stmt id, const char *name,
                         const char *spec, int64_t now_ms, store_limit *out)
{
    bind(st, id, name, spec, now_ms);
    return step_one(st, id, out);
}

/* The number of limits, in the open transaction. */
static rmqs_rc count_rows(store_backend *st, int64_t *n)
{
    sqlite3_stmt *s = st->lim[LS_COUNT];
    rmqs_rc rc = RMQS_OK;
    int src = sqlite3_step(s);

    if (src == SQLITE_ROW)
        *n = sqlite3_column_int64(s, 0);
    else
        rc = sq_fail(st, src, k_defs[LS_COUNT].name);
    sq_stmt_done(s);
    return rc;
}

/* Take st->mu, prepare the statements and begin a durable transaction;
 * st->mu is held whatever the answer (the caller unlocks). */
static rmqs_rc begin(store_backend *st)
{
    rmqs_rc rc;

    sq_lock(st);
    rc = prepared(st);
    return rc == RMQS_OK ? sq_tx_begin(st, TX_DURABLE) : rc;
}

/* End the transaction of a write that came to rc: commit it if rc is
 * RMQS_OK and it wrote, else roll it back (nothing to sync). */
static rmqs_rc finish(store_backend *st, rmqs_rc rc, bool wrote)
{
    if (rc == RMQS_OK && wrote)
        return sq_tx_commit(st);
    sq_tx_abort(st);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The ops                                                                  */

/* In the open transaction: a new name, unless the cap is reached. */
static rmqs_rc insert(store_backend *st, const char *name, const char *spec,
                      int64_t now_ms, int64_t max_limits, store_limit *got)
{
    int64_t n = 0;
    rmqs_rc rc = max_limits > 0 ? count_rows(st, &n) : RMQS_OK;

    if (rc != RMQS_OK)
        return rc;
    if (max_limits > 0 && n >= max_limits)
        return RMQS_ECONFLICT;
    return bound_one(st, LS_INSERT, name, spec, now_ms, got);
}

static rmqs_rc sql_put(store_backend *st, const char *name, const char *spec,
                       int64_t now_ms, int64_t max_limits, bool *created,
                       bool *unchanged, store_limit *out)
{
    store_limit cur = {0}, got = {0};
    rmqs_rc rc;

    rc = begin(st);
    if (rc != RMQS_OK)
        goto unlock;
    rc = bound_one(st, LS_GET, name, NULL, 0, &cur);
    if (rc == RMQS_ENOTFOUND) {
        rc = insert(st, name, spec, now_ms, max_limits, &got);
        *created = rc == RMQS_OK;
    } else if (rc == RMQS_OK && strcmp(cur.spec, spec) == 0) {
        got = cur;
        memset(&cur, 0, sizeof(cur));
        *unchanged = true;
    } else if (rc == RMQS_OK) {
        rc = bound_one(st, LS_REPLACE, name, spec, now_ms, &got);
    }
    store_limit_clear(&cur);
    rc = finish(st, rc, !*unchanged);
    if (rc == RMQS_OK && out != NULL) {
        *out = got;
    } else {
        store_limit_clear(&got);
        if (rc != RMQS_OK)
            *created = *unchanged = false;
    }
unlock:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sql_update(store_backend *st, const char *name, const char *spec,
                          int64_t expect_generation, int64_t now_ms,
                          store_limit *out)
{
    store_limit got = {0};
    sqlite3_stmt *u;
    rmqs_rc rc;

    rc = begin(st);
    if (rc != RMQS_OK)
        goto unlock;
    u = bind(st, LS_UPDATE, name, spec, now_ms);
    sqlite3_bind_int64(u, 4, expect_generation);
    rc = step_one(st, LS_UPDATE, &got);
    if (rc == RMQS_ENOTFOUND) {
        /* another generation, or no such limit? */
        rc = bound_one(st, LS_GET, name, NULL, 0, NULL);
        rc = rc == RMQS_OK ? RMQS_ECONFLICT : rc;
    }
    rc = finish(st, rc, true);
    if (rc == RMQS_OK && out != NULL)
        *out = got;
    else
        store_limit_clear(&got);
unlock:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sql_get(store_backend *st, const char *name, store_limit *out)
{
    rmqs_rc rc;

    sq_lock(st);
    rc = prepared(st);
    if (rc == RMQS_OK)
        rc = bound_one(st, LS_GET, name, NULL, 0, out);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sql_list(store_backend *st, store_limit **rows, size_t *n_out)
{
    sqlite3_stmt *s;
    store_limit *arr = NULL;
    size_t n = 0, cap = 0;
    rmqs_rc rc;
    int src = SQLITE_DONE;

    sq_lock(st);
    rc = prepared(st);
    if (rc != RMQS_OK) {
        pthread_mutex_unlock(&st->mu);
        return rc;
    }
    s = st->lim[LS_LIST];
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            store_limit *na = store_grow(arr, &cap, sizeof(*arr));
            if (na == NULL) {
                rc = RMQS_ENOMEM;
                break;
            }
            arr = na;
        }
        rc = row_to_limit(s, &arr[n]);
        if (rc != RMQS_OK)
            break;
        n++;
    }
    if (rc == RMQS_OK && src != SQLITE_DONE)
        rc = sq_fail(st, src, k_defs[LS_LIST].name);
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    if (rc != RMQS_OK) {
        store_limits_free(arr, n);
        return rc;
    }
    *rows = arr;
    *n_out = n;
    return RMQS_OK;
}

static rmqs_rc sql_delete(store_backend *st, const char *name)
{
    sqlite3_stmt *s;
    rmqs_rc rc;
    int src;

    rc = begin(st);
    if (rc != RMQS_OK)
        goto unlock;
    s = bind(st, LS_DELETE, name, NULL, 0);
    src = sq_stmt_exec(s);
    if (src != SQLITE_OK) {
        rc = sq_fail(st, src, k_defs[LS_DELETE].name);
        sq_stmt_done(s);
    } else if (sqlite3_changes(st->db) == 0) {
        rc = RMQS_ENOTFOUND;
    }
    rc = finish(st, rc, true);
unlock:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

const store_limit_ops sq_limit_ops = {
    .put = sql_put,
    .update = sql_update,
    .get = sql_get,
    .list = sql_list,
    .del = sql_delete,
};
