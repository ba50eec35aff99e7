/*
 * store_pg_limits.c - the flow limits of the PostgreSQL backend (store.h's
 * store_limit_* calls, store_backend.h's store_limit_ops; the table is
 * migrations/postgres/0004_limits.sql), shared by every instance on the
 * database.
 *
 * Why a room of its own: limits are a kind of row of their own, with their
 * own statements and no job in them.
 *
 * How it works: every call runs on the writer's connection (b->wr), as the
 * schedules' clients' calls do.
 *   - put: one transaction that locks the row (SELECT ... FOR UPDATE) and
 *     compares the spec, then replaces it or leaves it. A new name first
 *     takes a transaction-scoped advisory lock (LIMITS_CREATE_LOCK) that
 *     every creation by any instance takes, then counts the table in a
 *     statement of its own (READ COMMITTED: its snapshot is taken after
 *     the lock is held, so it sees every creation committed before), so
 *     two creations racing at the cap cannot both pass it. The insert is
 *     ON CONFLICT DO NOTHING: a name another instance created a moment ago
 *     is then locked and compared as an existing one.
 *   - update: one compare-and-set UPDATE on (name, generation).
 * Results come back binary (pg_exec); the times and generation are int8.
 */
#include "store_pg_core.h"

#include <stdlib.h>
#include <string.h>

#define LIMIT_COLS "name, spec, generation, created_at, updated_at"
#define LIMITS_CREATE_LOCK "hashtext('rmqs-limits-create')"

/* Row r of res (LIMIT_COLS) into *out (zeroed first). */
static rmqs_rc row_to_limit(const PGresult *res, int r, store_limit *out)
{
    memset(out, 0, sizeof(*out));
    if (!PQgetisnull(res, r, 0))
        out->name = strdup(PQgetvalue(res, r, 0));
    if (!PQgetisnull(res, r, 1))
        out->spec = strdup(PQgetvalue(res, r, 1));
    if (out->name == NULL || out->spec == NULL) {
        store_limit_clear(out);
        return RMQS_ENOMEM;
    }
    out->generation = pg_int(res, r, 2);
    out->created_at = pg_int(res, r, 3);
    out->updated_at = pg_int(res, r, 4);
    return RMQS_OK;
}

/* Run sql (n text parameters vals) on pc for at most one row into *out
 * (NULL: only whether there is one); RMQS_ENOTFOUND if none. */
static rmqs_rc one_row(pg_conn *pc, const char *op, const char *sql, int n,
                       const char *const *vals, store_limit *out)
{
    rmqs_rc rc;
    PGresult *res = pg_exec(pc, op, sql, n, vals, NULL, NULL, &rc);

    if (rc == RMQS_OK && PQntuples(res) != 1)
        rc = RMQS_ENOTFOUND;
    else if (rc == RMQS_OK && out != NULL)
        rc = row_to_limit(res, 0, out);
    PQclear(res);
    return rc;
}

/* In pc's transaction: a new limit (vals: $1 name, $2 spec, $3 now),
 * unless the cap is reached (RMQS_ECONFLICT); RMQS_ENOTFOUND if another
 * instance took the name meanwhile. */
static rmqs_rc insert(pg_conn *pc, const char *const *vals, int64_t max_limits,
                      store_limit *got)
{
    PGresult *res;
    rmqs_rc rc;

    if (max_limits > 0) {
        res = pg_exec(pc, "lim_create_lock",
                      "SELECT pg_advisory_xact_lock(" LIMITS_CREATE_LOCK ")", 0,
                      NULL, NULL, NULL, &rc);
        PQclear(res);
        if (rc != RMQS_OK)
            return rc;
        res = pg_exec(pc, "lim_count", "SELECT count(*) FROM limits", 0, NULL,
                      NULL, NULL, &rc);
        if (rc == RMQS_OK && PQntuples(res) == 1 &&
            pg_int(res, 0, 0) >= max_limits)
            rc = RMQS_ECONFLICT;
        PQclear(res);
        if (rc != RMQS_OK)
            return rc;
    }
    return one_row(pc, "lim_insert",
                   "INSERT INTO limits (" LIMIT_COLS ") VALUES ($1, $2, 1, "
                   "$3::bigint, $3::bigint) ON CONFLICT (name) DO NOTHING "
                   "RETURNING " LIMIT_COLS,
                   3, vals, got);
}

static rmqs_rc pgl_put(store_backend *b, const char *name, const char *spec,
                       int64_t now_ms, int64_t max_limits, bool *created,
                       bool *unchanged, store_limit *out)
{
    pg_conn *pc = &b->wr;
    char now[24];
    const char *vals[3] = {name, spec, pg_i64(now, now_ms)};
    store_limit cur = {0}, got = {0};
    rmqs_rc rc;

    rc = pg_use(pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto unlock;
    /* twice at most: a name created by another instance meanwhile is
     * locked and compared the second time */
    for (int round = 0; round < 2; round++) {
        rc = one_row(pc, "lim_lock",
                     "SELECT " LIMIT_COLS " FROM limits WHERE name = $1 "
                     "FOR UPDATE",
                     1, vals, &cur);
        if (rc == RMQS_ENOTFOUND) {
            rc = insert(pc, vals, max_limits, &got);
            *created = rc == RMQS_OK;
            if (rc != RMQS_ENOTFOUND)
                break;
            continue;
        }
        if (rc == RMQS_OK && strcmp(cur.spec, spec) == 0) {
            got = cur;
            memset(&cur, 0, sizeof(cur));
            *unchanged = true;
        } else if (rc == RMQS_OK) {
            rc = one_row(pc, "lim_replace",
                         "UPDATE limits SET spec = $2, generation = "
                         "generation + 1, updated_at = $3::bigint "
                         "WHERE name = $1 RETURNING " LIMIT_COLS,
                         3, vals, &got);
        }
        break;
    }
    store_limit_clear(&cur);
    if (rc == RMQS_ENOTFOUND)
        rc = RMQS_EDB; /* created and deleted under us twice: give up */
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc);
    else
        pg_tx_abort(pc);
    if (rc == RMQS_OK && out != NULL) {
        *out = got;
    } else {
        store_limit_clear(&got);
        if (rc != RMQS_OK)
            *created = *unchanged = false;
    }
unlock:
    pg_done(pc);
    return rc;
}

static rmqs_rc pgl_update(store_backend *b, const char *name, const char *spec,
                          int64_t expect_generation, int64_t now_ms,
                          store_limit *out)
{
    pg_conn *pc = &b->wr;
    char now[24], gen[24];
    const char *vals[4] = {name, spec, pg_i64(now, now_ms),
                           pg_i64(gen, expect_generation)};
    store_limit got = {0};
    rmqs_rc rc = pg_use(pc);

    if (rc == RMQS_OK)
        rc = one_row(pc, "lim_update",
                     "UPDATE limits SET spec = $2, generation = generation + "
                     "1, updated_at = $3::bigint WHERE name = $1 AND "
                     "generation = $4::bigint RETURNING " LIMIT_COLS,
                     4, vals, &got);
    if (rc == RMQS_ENOTFOUND) {
        /* another generation, or no such limit? */
        rc = one_row(pc, "lim_get",
                     "SELECT " LIMIT_COLS " FROM limits WHERE name = $1", 1,
                     vals, NULL);
        rc = rc == RMQS_OK ? RMQS_ECONFLICT : rc;
    }
    pg_done(pc);
    if (rc == RMQS_OK && out != NULL)
        *out = got;
    else
        store_limit_clear(&got);
    return rc;
}

static rmqs_rc pgl_get(store_backend *b, const char *name, store_limit *out)
{
    const char *vals[1] = {name};
    rmqs_rc rc = pg_use(&b->wr);

    if (rc == RMQS_OK)
        rc = one_row(&b->wr, "lim_get",
                     "SELECT " LIMIT_COLS " FROM limits WHERE name = $1", 1,
                     vals, out);
    pg_done(&b->wr);
    return rc;
}

static rmqs_rc pgl_list(store_backend *b, store_limit **rows, size_t *n_out)
{
    PGresult *res = NULL;
    store_limit *arr = NULL;
    size_t n = 0;
    rmqs_rc rc = pg_use(&b->wr);

    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "lim_list",
                      "SELECT " LIMIT_COLS " FROM limits ORDER BY name", 0,
                      NULL, NULL, NULL, &rc);
    pg_done(&b->wr);
    if (rc == RMQS_OK && PQntuples(res) > 0) {
        arr = calloc((size_t)PQntuples(res), sizeof(*arr));
        if (arr == NULL)
            rc = RMQS_ENOMEM;
    }
    for (; rc == RMQS_OK && n < (size_t)PQntuples(res); n++)
        rc = row_to_limit(res, (int)n, &arr[n]);
    PQclear(res);
    if (rc != RMQS_OK) {
        store_limits_free(arr, n);
        return rc;
    }
    *rows = arr;
    *n_out = n;
    return RMQS_OK;
}

static rmqs_rc pgl_delete(store_backend *b, const char *name)
{
    const char *vals[1] = {name};
    PGresult *res = NULL;
    rmqs_rc rc = pg_use(&b->wr);

    if (rc == RMQS_OK)
        res =
            pg_exec(&b->wr, "lim_delete", "DELETE FROM limits WHERE name = $1",
                    1, vals, NULL, NULL, &rc);
    pg_done(&b->wr);
    if (rc == RMQS_OK && strcmp(PQcmdTuples(res), "0") == 0)
        rc = RMQS_ENOTFOUND;
    PQclear(res);
    return rc;
}

const store_limit_ops pg_limit_ops = {
    .put = pgl_put,
    .update = pgl_update,
    .get = pgl_get,
    .list = pgl_list,
    .del = pgl_delete,
};
