/*
 * store_sqlite_schedules.c - the recurring schedules of the SQLite backend
 * (store.h's store_schedule_* calls, store_backend.h's store_schedule_ops;
 * the table is migrations/sqlite/0006_schedules.sql).
 *
 * Why a room of its own: the schedules are a second kind of row with their
 * own statements; only store_schedule_advance touches jobs (it inserts the
 * runs), through the jobs' own insert (sq_insert_job) and the same count
 * bookkeeping, so a run is a job like any other from then on.
 *
 * How it works: the statements are prepared at open (their own table
 * below, st->sched[]) and run on the writer's connection under st->mu, as
 * every other call of this backend. Writes are durable transactions
 * (TX_DURABLE: fsynced on a FULL store): a schedule change answered 200
 * and a run the scheduler created survive a power loss. The advance is one
 * transaction over a batch: each schedule moves on by compare-and-set on
 * (name, generation, next_fire_at), and its run is inserted "if absent"
 * (INSERT ... ON CONFLICT (id) DO NOTHING; run ids are derived from the
 * fire time), so a retried or concurrent advance never makes a run twice.
 * SQLite has one writer, this process: nothing here wakes the dispatcher
 * (store.h: the caller calls disp_notify).
 *
 * Row <-> store_schedule: next_fire_at and last_fire_at NULL are -1,
 * last_job_id is a 16-byte BLOB (NULL: ""), paused 0/1.
 */
#include "store_sqlite_core.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define SCHED_COLS                                                           \
    "name, spec, generation, created_at, updated_at, paused, next_fire_at, " \
    "last_fire_at, last_job_id"

enum {
    SC_NAME,
    SC_SPEC,
    SC_GENERATION,
    SC_CREATED_AT,
    SC_UPDATED_AT,
    SC_PAUSED,
    SC_NEXT,
    SC_LAST,
    SC_LAST_JOB,
    SC_COUNT /* store_schedule_due: status */
};

typedef enum sched_stmt {
    SS_GET,
    SS_INSERT,
    SS_REPLACE,
    SS_UPDATE,
    SS_LIST,
    SS_DELETE,
    SS_DUE,
    SS_NEXT,
    SS_ADVANCE,
    SS_COUNTS,
    SS_RECENT,
    SS_N
} sched_stmt;

_Static_assert(SS_N == SQ_SCHED_NSTMT, "SQ_SCHED_NSTMT is the table's size");

/* Parameters of the writing statements: ?1 name, ?2 spec, ?3 generation,
 * ?4 created_at, ?5 updated_at, ?6 paused, ?7 next_fire_at, ?8
 * last_fire_at, ?9 last_job_id (bind_row). The scheduler's two statements
 * say INDEXED BY schedules_due with the index's literal WHERE, as the
 * dispatcher's jobs_due queries do. */
static const stmt_def k_defs[SS_N] = {
    [SS_GET] = {"sched_get",
                "SELECT " SCHED_COLS " FROM schedules WHERE name = ?1"},
    [SS_INSERT] = {"sched_insert",
                   "INSERT INTO schedules (" SCHED_COLS ") VALUES "
                   "(?1, ?2, 1, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING " SCHED_COLS},
    [SS_REPLACE] = {"sched_replace",
                    "UPDATE schedules SET spec = ?2, "
                    "generation = generation + 1, updated_at = ?5, "
                    "paused = ?6, next_fire_at = ?7, last_fire_at = ?8, "
                    "last_job_id = ?9 WHERE name = ?1 RETURNING " SCHED_COLS},
    [SS_UPDATE] = {"sched_update",
                   "UPDATE schedules SET spec = ?2, "
                   "generation = generation + 1, updated_at = ?5, "
                   "paused = ?6, next_fire_at = ?7 "
                   "WHERE name = ?1 AND generation = ?3 RETURNING " SCHED_COLS},
    [SS_LIST] = {"sched_list",
                 "SELECT " SCHED_COLS " FROM schedules WHERE name > ?1 "
                 "ORDER BY name LIMIT ?2"},
    [SS_DELETE] = {"sched_delete", "DELETE FROM schedules WHERE name = ?1"},
    [SS_DUE] = {"sched_due",
                "SELECT s.name, s.spec, s.generation, s.created_at, "
                "s.updated_at, s.paused, s.next_fire_at, s.last_fire_at, "
                "s.last_job_id, j.status "
                "FROM schedules AS s INDEXED BY schedules_due "
                "LEFT JOIN jobs AS j ON j.id = s.last_job_id "
                "WHERE s.paused = 0 AND s.next_fire_at IS NOT NULL "
                "AND s.next_fire_at <= ?1 "
                "ORDER BY s.next_fire_at, s.name LIMIT ?2"},
    [SS_NEXT] = {"sched_next", "SELECT min(next_fire_at) FROM schedules "
                               "INDEXED BY schedules_due "
                               "WHERE paused = 0 AND next_fire_at IS NOT NULL"},
    /* ?3 old next (IS: NULL matches an ended row), ?4 new next (NULL:
     * ended), ?5/?6 the run's fire time and id (NULL: no run, kept) */
    [SS_ADVANCE] = {"sched_advance",
                    "UPDATE schedules SET next_fire_at = ?4, "
                    "last_fire_at = coalesce(?5, last_fire_at), "
                    "last_job_id = coalesce(?6, last_job_id) "
                    "WHERE name = ?1 AND generation = ?2 "
                    "AND next_fire_at IS ?3"},
    [SS_COUNTS] = {"sched_counts",
                   "SELECT CASE WHEN paused THEN 1 "
                   "WHEN next_fire_at IS NULL THEN 2 ELSE 0 END AS state, "
                   "count(*) FROM schedules GROUP BY state"},
    /* store_schedule_recent: ?1 name, ?2 now, ?3 STORE_STREAK_CAP + 1.
     * Kind 0: the last run due (jobs_schedule, read backwards from now:
     * one entry); kind 1: the latest finished runs (jobs_schedule_done,
     * which holds only those, with their status: ?3 entries at most, no
     * row read), sorted by the caller (store_streak_of). The literal
     * "status IN (2, 3)" is the partial index's own. */
    [SS_RECENT] = {"sched_recent",
                   "SELECT 0 AS k, id, fire_at, status, last_error, "
                   "deliver_at, seq FROM (SELECT id, fire_at, status, "
                   "last_error, deliver_at, seq "
                   "FROM jobs INDEXED BY jobs_schedule "
                   "WHERE schedule = ?1 AND deliver_at <= ?2 "
                   "ORDER BY deliver_at DESC, seq DESC LIMIT 1) "
                   "UNION ALL "
                   "SELECT 1, NULL, NULL, status, NULL, deliver_at, seq "
                   "FROM (SELECT status, deliver_at, seq "
                   "FROM jobs INDEXED BY jobs_schedule_done "
                   "WHERE schedule = ?1 AND status IN (2, 3) "
                   "ORDER BY deliver_at DESC, seq DESC LIMIT ?3)"},
};

rmqs_rc sq_sched_prepare(store_backend *st, const char *path, rmqs_error *err)
{
    for (int i = 0; i < SS_N; i++) {
        int rc =
            sqlite3_prepare_v3(st->db, k_defs[i].sql, -1,
                               SQLITE_PREPARE_PERSISTENT, &st->sched[i], NULL);
        if (rc != SQLITE_OK)
            return rmqs_fail(err, RMQS_EDB, NULL,
                             "database %s: cannot prepare statement %s: %s "
                             "(schema incomplete?)",
                             path, k_defs[i].name, sqlite3_errmsg(st->db));
    }
    return RMQS_OK;
}

void sq_sched_finalize(store_backend *st)
{
    for (int i = 0; i < SS_N; i++) {
        sqlite3_finalize(st->sched[i]);
        st->sched[i] = NULL;
    }
}

const char *sq_sched__sql(const char *name)
{
    for (int i = 0; i < SS_N; i++)
        if (strcmp(k_defs[i].name, name) == 0)
            return k_defs[i].sql;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Rows                                                                     */

static void bind_i64_or_null(sqlite3_stmt *s, int i, int64_t v)
{
    if (v >= 0)
        sqlite3_bind_int64(s, i, v);
    else
        sqlite3_bind_null(s, i);
}

/* Bind the parameters ?1..?9 of s (those the statement uses) from sc;
 * id: the parsed last_job_id (NULL: none). */
static void bind_row(sqlite3_stmt *s, const store_schedule *sc,
                     const unsigned char *id)
{
    sqlite3_bind_text(s, 1, sc->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, sc->spec, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, sc->generation);
    sqlite3_bind_int64(s, 4, sc->created_at);
    sqlite3_bind_int64(s, 5, sc->updated_at);
    sqlite3_bind_int(s, 6, sc->paused ? 1 : 0);
    bind_i64_or_null(s, 7, sc->next_fire_at);
    bind_i64_or_null(s, 8, sc->last_fire_at);
    if (id != NULL)
        sqlite3_bind_blob(s, 9, id, JOB_ID_BYTES, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, 9);
}

static char *col_dup(sqlite3_stmt *s, int c)
{
    const unsigned char *t = sqlite3_column_text(s, c);
    int n = sqlite3_column_bytes(s, c);
    char *out;

    if (t == NULL)
        return NULL;
    out = malloc((size_t)n + 1);
    if (out == NULL)
        return NULL;
    memcpy(out, t, (size_t)n);
    out[n] = '\0';
    return out;
}

/* The SCHED_COLS of the current row into *out (zeroed first); with_status:
 * column SC_COUNT is the last job's status (NULL: -1). */
static rmqs_rc row_to_sched(sqlite3_stmt *s, store_schedule *out,
                            bool with_status)
{
    const void *id;

    memset(out, 0, sizeof(*out));
    out->name = col_dup(s, SC_NAME);
    out->spec = col_dup(s, SC_SPEC);
    if (out->name == NULL || out->spec == NULL) {
        store_schedule_clear(out);
        return RMQS_ENOMEM;
    }
    out->generation = sqlite3_column_int64(s, SC_GENERATION);
    out->created_at = sqlite3_column_int64(s, SC_CREATED_AT);
    out->updated_at = sqlite3_column_int64(s, SC_UPDATED_AT);
    out->paused = sqlite3_column_int(s, SC_PAUSED) != 0;
    out->next_fire_at = sqlite3_column_type(s, SC_NEXT) == SQLITE_NULL
                            ? -1
                            : sqlite3_column_int64(s, SC_NEXT);
    out->last_fire_at = sqlite3_column_type(s, SC_LAST) == SQLITE_NULL
                            ? -1
                            : sqlite3_column_int64(s, SC_LAST);
    id = sqlite3_column_blob(s, SC_LAST_JOB);
    if (id != NULL && sqlite3_column_bytes(s, SC_LAST_JOB) == JOB_ID_BYTES)
        job_id_format(id, out->last_job_id);
    out->last_job_status = -1;
    if (with_status && sqlite3_column_type(s, SC_COUNT) != SQLITE_NULL)
        out->last_job_status = sqlite3_column_int(s, SC_COUNT);
    return RMQS_OK;
}

/* Step s (bound) for at most one row into *out (may be NULL: only
 * whether there is one); RMQS_ENOTFOUND if none. s is stepped to its end
 * (RETURNING completes there) and reset. */
static rmqs_rc step_one(store_backend *st, sched_stmt id, store_schedule *out)
{
    sqlite3_stmt *s = st->sched[id];
    store_schedule row;
    rmqs_rc rc = RMQS_ENOTFOUND;
    int src = sqlite3_step(s);

    if (src == SQLITE_ROW) {
        rc = out != NULL ? row_to_sched(s, &row, false) : RMQS_OK;
        src = sqlite3_step(s);
        if (rc == RMQS_OK && out != NULL)
            *out = row;
    }
    if (src != SQLITE_DONE) {
        if (rc == RMQS_OK && out != NULL)
            store_schedule_clear(out);
        rc = sq_fail(st, src, k_defs[id].name);
    }
    sq_stmt_done(s);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Clients: put, update, get, list, delete                                  */

/* End the transaction of a write that came to rc: commit it if rc is
 * RMQS_OK and it wrote, else roll it back; hand the row got to out (may be
 * NULL) if all went well, else clear it. */
static rmqs_rc tx_finish(store_backend *st, rmqs_rc rc, bool wrote,
                         store_schedule *got, store_schedule *out)
{
    if (rc == RMQS_OK && wrote)
        rc = sq_tx_commit(st);
    else
        sq_tx_abort(st); /* nothing written: nothing to sync */
    if (rc == RMQS_OK && out != NULL)
        *out = *got;
    else
        store_schedule_clear(got);
    return rc;
}

static rmqs_rc parse_last_job(const store_schedule *s,
                              unsigned char id[JOB_ID_BYTES], bool *has)
{
    *has = s->last_job_id[0] != '\0';
    if (*has && job_id_parse(s->last_job_id, id) != RMQS_OK)
        return RMQS_EINVAL;
    return RMQS_OK;
}

static rmqs_rc sqs_put(store_backend *st, const store_schedule *s,
                       bool *created, bool *unchanged, store_schedule *out)
{
    unsigned char id[JOB_ID_BYTES];
    store_schedule cur, got = {0};
    bool has_id;
    rmqs_rc rc;

    if (parse_last_job(s, id, &has_id) != RMQS_OK)
        return RMQS_EINVAL;
    sq_lock(st);
    rc = sq_tx_begin(st, TX_DURABLE);
    if (rc != RMQS_OK)
        goto unlock;
    sqlite3_bind_text(st->sched[SS_GET], 1, s->name, -1, SQLITE_STATIC);
    rc = step_one(st, SS_GET, &cur);
    if (rc == RMQS_ENOTFOUND) {
        bind_row(st->sched[SS_INSERT], s, has_id ? id : NULL);
        rc = step_one(st, SS_INSERT, &got);
        if (rc == RMQS_OK)
            *created = true;
    } else if (rc == RMQS_OK && strcmp(cur.spec, s->spec) == 0) {
        got = cur;
        memset(&cur, 0, sizeof(cur));
        *unchanged = true;
    } else if (rc == RMQS_OK) {
        store_schedule_clear(&cur);
        bind_row(st->sched[SS_REPLACE], s, has_id ? id : NULL);
        rc = step_one(st, SS_REPLACE, &got);
    }
    rc = tx_finish(st, rc, !*unchanged, &got, out);
    if (rc != RMQS_OK)
        *created = *unchanged = false;
unlock:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sqs_update(store_backend *st, const store_schedule *s,
                          int64_t expect_generation, store_schedule *out)
{
    store_schedule row = *s, got = {0};
    sqlite3_stmt *u = st->sched[SS_UPDATE];
    rmqs_rc rc;

    row.generation = expect_generation;
    sq_lock(st);
    rc = sq_tx_begin(st, TX_DURABLE);
    if (rc != RMQS_OK)
        goto unlock;
    bind_row(u, &row, NULL); /* ?4, ?8, ?9: not in this statement */
    rc = step_one(st, SS_UPDATE, &got);
    if (rc == RMQS_ENOTFOUND) {
        /* another generation, or no such schedule? */
        sqlite3_bind_text(st->sched[SS_GET], 1, s->name, -1, SQLITE_STATIC);
        rc = step_one(st, SS_GET, NULL);
        rc = rc == RMQS_OK ? RMQS_ECONFLICT : rc;
        sq_tx_abort(st);
        goto unlock;
    }
    rc = tx_finish(st, rc, true, &got, out);
unlock:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sqs_get(store_backend *st, const char *name, store_schedule *out)
{
    rmqs_rc rc;

    sq_lock(st);
    sqlite3_bind_text(st->sched[SS_GET], 1, name, -1, SQLITE_STATIC);
    rc = step_one(st, SS_GET, out);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* Step a bound listing statement into a malloc'd array: at most limit
 * rows within max_bytes (store_page_take: a row's name and spec, measured
 * before they are copied), *more whether another followed. */
static rmqs_rc collect(store_backend *st, sched_stmt id, size_t limit,
                       size_t max_bytes, bool with_status,
                       store_schedule **rows, size_t *n_out, bool *more)
{
    sqlite3_stmt *s = st->sched[id];
    store_schedule *arr = NULL;
    size_t n = 0, cap = 0;
    store_page page;
    rmqs_rc rc = RMQS_OK;
    int src;

    *more = false;
    store_page_init(&page, limit, max_bytes);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        size_t texts = (size_t)sqlite3_column_bytes(s, SC_NAME) +
                       (size_t)sqlite3_column_bytes(s, SC_SPEC);
        if (!store_page_take(&page,
                             store_item_bytes(JOB_BODY_TEXT, 0, texts))) {
            *more = true;
            break;
        }
        if (n == cap) {
            store_schedule *na = store_grow(arr, &cap, sizeof(*arr));
            if (na == NULL) {
                rc = RMQS_ENOMEM;
                break;
            }
            arr = na;
        }
        rc = row_to_sched(s, &arr[n], with_status);
        if (rc != RMQS_OK)
            break;
        n++;
    }
    if (rc == RMQS_OK && src != SQLITE_ROW && src != SQLITE_DONE)
        rc = sq_fail(st, src, k_defs[id].name);
    sq_stmt_done(s);
    if (rc != RMQS_OK) {
        store_schedules_free(arr, n);
        return rc;
    }
    *rows = arr;
    *n_out = n;
    return RMQS_OK;
}

static int64_t limit_param(size_t limit)
{
    return limit >= (size_t)INT64_MAX ? INT64_MAX : (int64_t)limit + 1;
}

static rmqs_rc sqs_list(store_backend *st, size_t limit, size_t max_bytes,
                        const char *after, store_schedule **rows, size_t *n,
                        bool *more)
{
    sqlite3_stmt *s = st->sched[SS_LIST];
    rmqs_rc rc;

    sq_lock(st);
    /* every name has at least one byte: "" is before all of them */
    sqlite3_bind_text(s, 1, after ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, limit_param(limit)); /* one more: a next page? */
    rc = collect(st, SS_LIST, limit, max_bytes, false, rows, n, more);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sqs_delete(store_backend *st, const char *name)
{
    sqlite3_stmt *s = st->sched[SS_DELETE];
    rmqs_rc rc;
    int src;

    sq_lock(st);
    rc = sq_tx_begin(st, TX_DURABLE);
    if (rc != RMQS_OK)
        goto unlock;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    src = sq_stmt_exec(s);
    if (src != SQLITE_OK) {
        rc = sq_fail(st, src, k_defs[SS_DELETE].name);
        sq_stmt_done(s);
        sq_tx_abort(st);
        goto unlock;
    }
    if (sqlite3_changes(st->db) == 0) {
        sq_tx_abort(st);
        rc = RMQS_ENOTFOUND;
        goto unlock;
    }
    rc = sq_tx_commit(st);
unlock:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The scheduler: due, next, advance, counts                                */

static rmqs_rc sqs_due(store_backend *st, int64_t by_ms, size_t limit,
                       store_schedule **rows, size_t *n)
{
    sqlite3_stmt *s = st->sched[SS_DUE];
    bool more;
    rmqs_rc rc;

    sq_lock(st);
    sqlite3_bind_int64(s, 1, by_ms);
    sqlite3_bind_int64(s, 2, limit_param(limit) - 1);
    /* the scheduler's batch: bounded by limit alone (it needs every row) */
    rc = collect(st, SS_DUE, limit, SIZE_MAX, true, rows, n, &more);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sqs_next_at(store_backend *st, bool *any, int64_t *at)
{
    sqlite3_stmt *s = st->sched[SS_NEXT];
    rmqs_rc rc = RMQS_OK;
    int src;

    sq_lock(st);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
        *any = true;
        *at = sqlite3_column_int64(s, 0);
    } else if (src != SQLITE_ROW) {
        rc = sq_fail(st, src, k_defs[SS_NEXT].name);
    }
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* Inside the transaction: advance a (and insert its run). */
static rmqs_rc advance_one(store_backend *st, store_advance *a)
{
    sqlite3_stmt *s = st->sched[SS_ADVANCE];
    unsigned char id[JOB_ID_BYTES];
    int64_t seq;
    bool inserted = false;
    rmqs_rc rc;
    int src;

    if (a->job != NULL && job_id_parse(a->job->id, id) != RMQS_OK)
        return RMQS_EINVAL;
    sqlite3_bind_text(s, 1, a->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, a->generation);
    bind_i64_or_null(s, 3, a->old_next);
    bind_i64_or_null(s, 4, a->new_next);
    if (a->job != NULL) {
        sqlite3_bind_int64(s, 5, a->job->fire_at);
        sqlite3_bind_blob(s, 6, id, JOB_ID_BYTES, SQLITE_STATIC);
    }
    src = sq_stmt_exec(s);
    if (src != SQLITE_OK) {
        rc = sq_fail(st, src, k_defs[SS_ADVANCE].name);
        sq_stmt_done(s);
        return rc;
    }
    if (sqlite3_changes(st->db) == 0)
        return RMQS_OK; /* moved on by somebody else, or changed: not ours */
    a->applied = true;
    if (a->job == NULL)
        return RMQS_OK;
    rc = sq_insert_job(st, S_INSERT_RUN, a->job, id, &seq, &inserted);
    if (rc != RMQS_OK)
        return rc;
    if (inserted)
        store_delta_add(&st->delta, (int)a->job->status, 1);
    a->job_existed = !inserted;
    return RMQS_OK;
}

static void advance_reset(store_advance *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i].applied = a[i].job_existed = false;
}

static rmqs_rc sqs_advance(store_backend *st, store_advance *a, size_t n,
                           int64_t now_ms)
{
    rmqs_rc rc;

    (void)now_ms;
    advance_reset(a, n);
    if (n == 0)
        return RMQS_OK;
    sq_lock(st);
    rc = sq_tx_begin(st, TX_DURABLE);
    for (size_t i = 0; rc == RMQS_OK && i < n; i++)
        rc = advance_one(st, &a[i]);
    if (rc == RMQS_OK) {
        rc = sq_tx_commit(st);
    } else {
        sq_tx_abort(st);
    }
    if (rc != RMQS_OK)
        advance_reset(a, n); /* nothing of it was kept */
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static rmqs_rc sqs_counts(store_backend *st, int64_t counts[3])
{
    sqlite3_stmt *s = st->sched[SS_COUNTS];
    rmqs_rc rc = RMQS_OK;
    int src;

    counts[0] = counts[1] = counts[2] = 0;
    sq_lock(st);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        int state = sqlite3_column_int(s, 0);
        if (state >= 0 && state < 3)
            counts[state] = sqlite3_column_int64(s, 1);
    }
    if (src != SQLITE_DONE)
        rc = sq_fail(st, src, k_defs[SS_COUNTS].name);
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* The rows of SS_RECENT into *out (zeroed by the front). */
static rmqs_rc recent_rows(store_backend *st, sqlite3_stmt *s,
                           store_run_outcome *out)
{
    store_finished_run runs[STORE_STREAK_CAP + 1];
    size_t n = 0;
    int src;

    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        int status = sqlite3_column_int(s, 3);
        if (sqlite3_column_int(s, 0) != 0) {
            if (n < sizeof runs / sizeof runs[0])
                runs[n++] =
                    (store_finished_run){sqlite3_column_int64(s, 5),
                                         sqlite3_column_int64(s, 6), status};
            continue;
        }
        if (sqlite3_column_type(s, 1) != SQLITE_BLOB ||
            sqlite3_column_bytes(s, 1) != JOB_ID_BYTES)
            continue; /* not a job id: the schema forbids it */
        out->has_last = true;
        job_id_format(sqlite3_column_blob(s, 1), out->last_id);
        out->last_fire_at = sqlite3_column_type(s, 2) == SQLITE_NULL
                                ? -1
                                : sqlite3_column_int64(s, 2);
        out->last_status = status;
        if (sqlite3_column_type(s, 4) != SQLITE_NULL) {
            out->last_error = col_dup(s, 4);
            if (out->last_error == NULL)
                return RMQS_ENOMEM;
        }
    }
    if (src != SQLITE_DONE)
        return sq_fail(st, src, k_defs[SS_RECENT].name);
    store_streak_of(runs, n, out);
    return RMQS_OK;
}

static rmqs_rc sqs_recent(store_backend *st, const char *const *names, size_t n,
                          int64_t now_ms, store_run_outcome *out)
{
    sqlite3_stmt *s = st->sched[SS_RECENT];
    rmqs_rc rc = RMQS_OK;

    sq_lock(st);
    for (size_t i = 0; rc == RMQS_OK && i < n; i++) {
        sqlite3_bind_text(s, 1, names[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, now_ms);
        sqlite3_bind_int(s, 3, STORE_STREAK_CAP + 1);
        rc = recent_rows(st, s, &out[i]);
        sq_stmt_done(s);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

const store_schedule_ops sq_schedule_ops = {
    .put = sqs_put,
    .update = sqs_update,
    .get = sqs_get,
    .list = sqs_list,
    .del = sqs_delete,
    .due = sqs_due,
    .next_at = sqs_next_at,
    .advance = sqs_advance,
    .counts = sqs_counts,
    .recent = sqs_recent,
};
