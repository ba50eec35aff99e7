/*
 * store_pg_schedules.c - the recurring schedules of the PostgreSQL backend
 * (store.h's store_schedule_* calls, store_backend.h's store_schedule_ops;
 * the table is migrations/postgres/0002_schedules.sql), shared by every
 * instance on the database.
 *
 * Why a room of its own: the schedules are a second kind of row; only the
 * advance touches jobs (it inserts the runs), through the jobs' own insert
 * (pg_insert_runs) with the same counts and NOTIFY, so a run is a job like
 * any other from then on.
 *
 * How it works:
 *   - Clients' calls (put, update, get, list, delete, counts) run on the
 *     writer's connection, as the jobs' HTTP calls do; the scheduler's
 *     (due, next_at, advance) on a connection of their own (b->sched), so
 *     creating runs never queues behind HTTP writes.
 *   - put: one transaction that locks the row (SELECT ... FOR UPDATE; a
 *     new name is INSERT ... ON CONFLICT DO NOTHING, and a racing
 *     instance's insert makes it look again), compares the spec and
 *     replaces or leaves it.
 *   - update: one compare-and-set UPDATE on (name, generation).
 *   - advance: one transaction for the batch. A single UPDATE takes the
 *     batch as a JSON array (jsonb_to_recordset), locks the rows whose
 *     (name, generation, next_fire_at) still match with FOR UPDATE SKIP
 *     LOCKED (a row another instance is advancing right now is skipped:
 *     instances never wait for each other; its compare-and-set will have
 *     failed anyway once that commits) and moves them on, returning which;
 *     then the runs of those are inserted "if absent" (binary COPY into a
 *     session's temporary table, INSERT ... SELECT ... ON CONFLICT (id) DO
 *     NOTHING RETURNING id: run ids are derived from the fire time). The
 *     commit flushes the job counts and sends the usual NOTIFY, so every
 *     instance's dispatcher wakes for the new runs.
 *
 * Row <-> store_schedule: next_fire_at and last_fire_at NULL are -1,
 * last_job_id is bytea (NULL: ""). Results come back binary (pg_exec).
 */
#include "store_pg_core.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
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

/* The advance: $1 the batch as a JSON array of {i, name, gen, old_next,
 * new_next, fire, id} (old_next, new_next, fire, id: null for -1 / no
 * run; id hex); returns the i of each schedule moved on. */
static const char advance_sql[] =
    "WITH a AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS a(i int, "
    "name text, gen bigint, old_next bigint, new_next bigint, fire bigint, "
    "id text)), "
    "l AS (SELECT s.name, a.i FROM schedules s JOIN a "
    "ON s.name = a.name COLLATE \"C\" AND s.generation = a.gen "
    "AND s.next_fire_at IS NOT DISTINCT FROM a.old_next "
    "FOR UPDATE OF s SKIP LOCKED) "
    "UPDATE schedules s SET next_fire_at = a.new_next, "
    "last_fire_at = coalesce(a.fire, s.last_fire_at), "
    "last_job_id = coalesce(decode(a.id, 'hex'), s.last_job_id) "
    "FROM l JOIN a ON a.i = l.i WHERE s.name = l.name RETURNING l.i";

/* ------------------------------------------------------------------------ */
/* Rows                                                                     */

static char *col_dup(const PGresult *res, int r, int c)
{
    int len = PQgetlength(res, r, c);
    char *out;

    if (PQgetisnull(res, r, c))
        return NULL;
    out = malloc((size_t)len + 1);
    if (out == NULL)
        return NULL;
    memcpy(out, PQgetvalue(res, r, c), (size_t)len);
    out[len] = '\0';
    return out;
}

static int64_t col_i64_or(const PGresult *res, int r, int c, int64_t null_v)
{
    return PQgetisnull(res, r, c) ? null_v : pg_int(res, r, c);
}

/* Row r (SCHED_COLS, then the last job's status when with_status) into
 * *out (zeroed first). */
static rmqs_rc row_to_sched(const PGresult *res, int r, store_schedule *out,
                            bool with_status)
{
    memset(out, 0, sizeof(*out));
    out->name = col_dup(res, r, SC_NAME);
    out->spec = col_dup(res, r, SC_SPEC);
    if (out->name == NULL || out->spec == NULL) {
        store_schedule_clear(out);
        return RMQS_ENOMEM;
    }
    out->generation = pg_int(res, r, SC_GENERATION);
    out->created_at = pg_int(res, r, SC_CREATED_AT);
    out->updated_at = pg_int(res, r, SC_UPDATED_AT);
    out->paused = !PQgetisnull(res, r, SC_PAUSED) &&
                  PQgetlength(res, r, SC_PAUSED) == 1 &&
                  PQgetvalue(res, r, SC_PAUSED)[0] != 0;
    out->next_fire_at = col_i64_or(res, r, SC_NEXT, -1);
    out->last_fire_at = col_i64_or(res, r, SC_LAST, -1);
    if (!PQgetisnull(res, r, SC_LAST_JOB) &&
        PQgetlength(res, r, SC_LAST_JOB) == JOB_ID_BYTES)
        job_id_format((const unsigned char *)PQgetvalue(res, r, SC_LAST_JOB),
                      out->last_job_id);
    out->last_job_status =
        with_status ? (int)col_i64_or(res, r, SC_COUNT, -1) : -1;
    return RMQS_OK;
}

/* The one row of res into *out (may be NULL), or RMQS_ENOTFOUND. */
static rmqs_rc one_row(const PGresult *res, store_schedule *out)
{
    if (PQntuples(res) != 1)
        return RMQS_ENOTFOUND;
    return out != NULL ? row_to_sched(res, 0, out, false) : RMQS_OK;
}

/* Every row of res into a malloc'd array of at most limit; *more whether
 * there was another. */
static rmqs_rc all_rows(const PGresult *res, size_t limit, bool with_status,
                        store_schedule **rows, size_t *n_out, bool *more)
{
    size_t n = (size_t)PQntuples(res);
    store_schedule *arr = NULL;

    *more = n > limit;
    if (n > limit)
        n = limit;
    if (n > 0) {
        arr = calloc(n, sizeof(*arr));
        if (arr == NULL)
            return RMQS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        rmqs_rc rc = row_to_sched(res, (int)i, &arr[i], with_status);
        if (rc != RMQS_OK) {
            store_schedules_free(arr, i);
            return rc;
        }
    }
    *rows = arr;
    *n_out = n;
    return RMQS_OK;
}

/* Text parameters of a row: $1 name, $2 spec, $3 updated_at, $4 paused,
 * $5 next_fire_at, then (put) $6 created_at, $7 last_fire_at, $8
 * last_job_id (binary), or (update) $6 the expected generation. */
typedef struct params {
    const char *vals[8];
    int lens[8], fmts[8];
    char num[5][24];
    unsigned char id[JOB_ID_BYTES];
} params;

static rmqs_rc params_row(params *p, const store_schedule *s)
{
    memset(p, 0, sizeof(*p));
    p->vals[0] = s->name;
    p->vals[1] = s->spec;
    p->vals[2] = pg_i64(p->num[0], s->updated_at);
    p->vals[3] = s->paused ? "true" : "false";
    p->vals[4] =
        s->next_fire_at >= 0 ? pg_i64(p->num[1], s->next_fire_at) : NULL;
    p->vals[5] = pg_i64(p->num[2], s->created_at);
    p->vals[6] =
        s->last_fire_at >= 0 ? pg_i64(p->num[3], s->last_fire_at) : NULL;
    if (s->last_job_id[0] != '\0') {
        if (job_id_parse(s->last_job_id, p->id) != RMQS_OK)
            return RMQS_EINVAL;
        p->vals[7] = (const char *)p->id;
        p->lens[7] = JOB_ID_BYTES;
        p->fmts[7] = 1;
    }
    return RMQS_OK;
}

/* ------------------------------------------------------------------------ */
/* Clients: put, update, get, list, delete, counts                          */

/* In pc's transaction: the row named s->name, locked, into *cur. */
static rmqs_rc lock_row(pg_conn *pc, const char *name, store_schedule *cur)
{
    const char *vals[1] = {name};
    rmqs_rc rc;
    PGresult *res = pg_exec(pc, "sched_lock",
                            "SELECT " SCHED_COLS " FROM schedules "
                            "WHERE name = $1 FOR UPDATE",
                            1, vals, NULL, NULL, &rc);

    if (rc == RMQS_OK)
        rc = one_row(res, cur);
    PQclear(res);
    return rc;
}

/* In pc's transaction: write p as a replace (generation + 1) or, insert,
 * a new row (ON CONFLICT DO NOTHING: RMQS_ENOTFOUND if the name was taken
 * meanwhile). *got the row as stored. */
static rmqs_rc write_row(pg_conn *pc, params *p, bool insert,
                         store_schedule *got)
{
    PGresult *res;
    rmqs_rc rc;

    if (insert) {
        res = pg_exec(pc, "sched_insert",
                      "INSERT INTO schedules (" SCHED_COLS ") VALUES ($1, "
                      "$2, 1, $6::bigint, $3::bigint, $4::boolean, "
                      "$5::bigint, $7::bigint, $8::bytea) "
                      "ON CONFLICT (name) DO NOTHING RETURNING " SCHED_COLS,
                      8, p->vals, p->lens, p->fmts, &rc);
    } else {
        /* the same parameters but created_at ($6 above), renumbered */
        const char *v[7] = {p->vals[0], p->vals[1], p->vals[2], p->vals[3],
                            p->vals[4], p->vals[6], p->vals[7]};
        int lens[7] = {0, 0, 0, 0, 0, 0, p->lens[7]};
        int fmts[7] = {0, 0, 0, 0, 0, 0, p->fmts[7]};
        res = pg_exec(pc, "sched_replace",
                      "UPDATE schedules SET spec = $2, "
                      "generation = generation + 1, updated_at = $3, "
                      "paused = $4, next_fire_at = $5, last_fire_at = $6, "
                      "last_job_id = $7 WHERE name = $1 RETURNING " SCHED_COLS,
                      7, v, lens, fmts, &rc);
    }
    if (rc == RMQS_OK)
        rc = one_row(res, got);
    PQclear(res);
    return rc;
}

static rmqs_rc pgs_put(store_backend *b, const store_schedule *s, bool *created,
                       bool *unchanged, store_schedule *out)
{
    pg_conn *pc = &b->wr;
    store_schedule cur, got = {0};
    params p;
    rmqs_rc rc;

    if (params_row(&p, s) != RMQS_OK)
        return RMQS_EINVAL;
    rc = pg_use(pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto unlock;
    /* twice at most: a new name another instance inserted a moment ago is
     * then locked and compared as an existing one */
    for (int round = 0; round < 2; round++) {
        rc = lock_row(pc, s->name, &cur);
        if (rc == RMQS_ENOTFOUND) {
            rc = write_row(pc, &p, true, &got);
            if (rc == RMQS_OK)
                *created = true;
            if (rc != RMQS_ENOTFOUND)
                break;
            continue;
        }
        if (rc == RMQS_OK && strcmp(cur.spec, s->spec) == 0) {
            got = cur;
            *unchanged = true;
        } else if (rc == RMQS_OK) {
            store_schedule_clear(&cur);
            rc = write_row(pc, &p, false, &got);
        }
        break;
    }
    if (rc == RMQS_ENOTFOUND)
        rc = RMQS_EDB; /* inserted and deleted under us twice: give up */
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc);
    else
        pg_tx_abort(pc);
    if (rc == RMQS_OK && out != NULL)
        *out = got;
    else
        store_schedule_clear(&got);
    if (rc != RMQS_OK)
        *created = *unchanged = false;
unlock:
    pg_done(pc);
    return rc;
}

static rmqs_rc pgs_update(store_backend *b, const store_schedule *s,
                          int64_t expect_generation, store_schedule *out)
{
    pg_conn *pc = &b->wr;
    store_schedule got = {0};
    PGresult *res = NULL;
    params p;
    rmqs_rc rc;

    (void)params_row(&p, s); /* last_job_id: not used here */
    p.vals[5] = pg_i64(p.num[4], expect_generation);
    rc = pg_use(pc);
    if (rc == RMQS_OK)
        res =
            pg_exec(pc, "sched_update",
                    "UPDATE schedules SET spec = $2, "
                    "generation = generation + 1, updated_at = $3, "
                    "paused = $4, next_fire_at = $5 "
                    "WHERE name = $1 AND generation = $6 RETURNING " SCHED_COLS,
                    6, p.vals, NULL, NULL, &rc);
    if (rc == RMQS_OK)
        rc = one_row(res, &got);
    PQclear(res);
    if (rc == RMQS_ENOTFOUND) {
        /* another generation, or no such schedule? */
        res = pg_exec(pc, "sched_get",
                      "SELECT " SCHED_COLS " FROM schedules WHERE name = $1", 1,
                      p.vals, NULL, NULL, &rc);
        if (rc == RMQS_OK)
            rc = PQntuples(res) == 1 ? RMQS_ECONFLICT : RMQS_ENOTFOUND;
        PQclear(res);
    }
    pg_done(pc);
    if (rc == RMQS_OK && out != NULL)
        *out = got;
    else
        store_schedule_clear(&got);
    return rc;
}

static rmqs_rc pgs_get(store_backend *b, const char *name, store_schedule *out)
{
    const char *vals[1] = {name};
    PGresult *res = NULL;
    rmqs_rc rc = pg_use(&b->wr);

    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "sched_get",
                      "SELECT " SCHED_COLS " FROM schedules WHERE name = $1", 1,
                      vals, NULL, NULL, &rc);
    pg_done(&b->wr);
    if (rc == RMQS_OK)
        rc = one_row(res, out);
    PQclear(res);
    return rc;
}

/* The sizes, then as many rows as fit the budget, in one snapshot
 * (pg_page_measure): a schedule's name and spec are its texts. */
static rmqs_rc pgs_list(store_backend *b, size_t limit, size_t max_bytes,
                        const char *after, store_schedule **rows, size_t *n,
                        bool *more)
{
    char lim[24];
    const char *vals[2];
    store_page page;
    PGresult *res = NULL;
    bool unused;
    rmqs_rc rc;

    if (limit > (size_t)INT64_MAX - 1)
        limit = (size_t)INT64_MAX - 1;
    store_page_init(&page, limit, max_bytes);
    /* every name has at least one byte: "" is before all of them */
    vals[0] = after ? after : "";
    vals[1] = pg_i64(lim, (int64_t)limit + 1); /* one more: a next page? */
    rc = pg_use(&b->wr);
    if (rc == RMQS_OK)
        rc = pg_page_measure(&b->wr, "sched_list_sizes",
                             "SELECT 0, 0, octet_length(name) + "
                             "octet_length(spec) FROM schedules WHERE "
                             "name > $1 ORDER BY name LIMIT $2",
                             2, vals, NULL, NULL, &page);
    if (rc == RMQS_OK && page.n > 0) {
        vals[1] = pg_i64(lim, (int64_t)page.n);
        res = pg_exec(&b->wr, "sched_list",
                      "SELECT " SCHED_COLS " FROM schedules WHERE name > $1 "
                      "ORDER BY name LIMIT $2",
                      2, vals, NULL, NULL, &rc);
    }
    pg_page_end(&b->wr);
    pg_done(&b->wr);
    if (rc == RMQS_OK && res != NULL)
        rc = all_rows(res, page.n, false, rows, n, &unused);
    PQclear(res);
    *more = rc == RMQS_OK && page.more;
    return rc;
}

static rmqs_rc pgs_delete(store_backend *b, const char *name)
{
    const char *vals[1] = {name};
    PGresult *res = NULL;
    rmqs_rc rc = pg_use(&b->wr);

    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "sched_delete",
                      "DELETE FROM schedules WHERE name = $1", 1, vals, NULL,
                      NULL, &rc);
    pg_done(&b->wr);
    if (rc == RMQS_OK && strcmp(PQcmdTuples(res), "0") == 0)
        rc = RMQS_ENOTFOUND;
    PQclear(res);
    return rc;
}

static rmqs_rc pgs_counts(store_backend *b, int64_t counts[3])
{
    PGresult *res = NULL;
    rmqs_rc rc;

    counts[0] = counts[1] = counts[2] = 0;
    rc = pg_use(&b->wr);
    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "sched_counts",
                      "SELECT CASE WHEN paused THEN 1 "
                      "WHEN next_fire_at IS NULL THEN 2 ELSE 0 END, count(*) "
                      "FROM schedules GROUP BY 1",
                      0, NULL, NULL, NULL, &rc);
    pg_done(&b->wr);
    for (int r = 0; rc == RMQS_OK && r < PQntuples(res); r++) {
        int64_t state = pg_int(res, r, 0);
        if (state >= 0 && state < 3)
            counts[state] = pg_int(res, r, 1);
    }
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The scheduler: due, next, advance                                        */

static rmqs_rc pgs_due(store_backend *b, int64_t by_ms, size_t limit,
                       store_schedule **rows, size_t *n)
{
    char by[24], lim[24];
    const char *vals[2];
    PGresult *res = NULL;
    bool more;
    rmqs_rc rc;

    if (limit > (size_t)INT64_MAX)
        limit = (size_t)INT64_MAX;
    vals[0] = pg_i64(by, by_ms);
    vals[1] = pg_i64(lim, (int64_t)limit);
    rc = pg_use(&b->sched);
    if (rc == RMQS_OK)
        res = pg_exec(&b->sched, "sched_due",
                      "SELECT s.name, s.spec, s.generation, s.created_at, "
                      "s.updated_at, s.paused, s.next_fire_at, "
                      "s.last_fire_at, s.last_job_id, j.status "
                      "FROM schedules s LEFT JOIN jobs j "
                      "ON j.id = s.last_job_id "
                      "WHERE NOT s.paused AND s.next_fire_at IS NOT NULL "
                      "AND s.next_fire_at <= $1 "
                      "ORDER BY s.next_fire_at, s.name LIMIT $2",
                      2, vals, NULL, NULL, &rc);
    pg_done(&b->sched);
    if (rc == RMQS_OK)
        rc = all_rows(res, limit, true, rows, n, &more);
    PQclear(res);
    return rc;
}

static rmqs_rc pgs_next_at(store_backend *b, bool *any, int64_t *at)
{
    PGresult *res = NULL;
    rmqs_rc rc = pg_use(&b->sched);

    if (rc == RMQS_OK)
        res = pg_exec(&b->sched, "sched_next",
                      "SELECT min(next_fire_at) FROM schedules "
                      "WHERE NOT paused AND next_fire_at IS NOT NULL",
                      0, NULL, NULL, NULL, &rc);
    pg_done(&b->sched);
    if (rc == RMQS_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        *any = true;
        *at = pg_int(res, 0, 0);
    }
    PQclear(res);
    return rc;
}

/* A JSON integer, or null for a negative value (-1: none). */
static json_t *int_or_null(int64_t v)
{
    return v >= 0 ? json_integer(v) : json_null();
}

/* The batch as advance_sql's $1 (malloc'd), or NULL: out of memory, or
 * RMQS_EINVAL in *rc for a run id that does not parse. */
static char *batch_json(const store_advance *a, size_t n, rmqs_rc *rc)
{
    json_t *arr = json_array();
    char *text = NULL;

    *rc = RMQS_ENOMEM;
    if (arr == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char id[JOB_ID_BYTES];
        char hex[2 * JOB_ID_BYTES + 1];
        json_t *o;

        if (a[i].job != NULL) {
            if (job_id_parse(a[i].job->id, id) != RMQS_OK) {
                *rc = RMQS_EINVAL;
                goto out;
            }
            for (int k = 0; k < JOB_ID_BYTES; k++)
                snprintf(hex + 2 * k, 3, "%02x", id[k]);
        }
        o = json_pack("{s:I, s:s, s:I, s:o, s:o, s:o, s:o}", "i", (json_int_t)i,
                      "name", a[i].name, "gen", (json_int_t)a[i].generation,
                      "old_next", int_or_null(a[i].old_next), "new_next",
                      int_or_null(a[i].new_next), "fire",
                      a[i].job ? int_or_null(a[i].job->fire_at) : json_null(),
                      "id", a[i].job ? json_string(hex) : json_null());
        if (o == NULL || json_array_append_new(arr, o) != 0)
            goto out;
    }
    text = json_dumps(arr, JSON_COMPACT);
    if (text != NULL)
        *rc = RMQS_OK;
out:
    json_decref(arr);
    return text;
}

static rmqs_rc pgs_advance(store_backend *b, store_advance *a, size_t n,
                           int64_t now_ms)
{
    pg_conn *pc = &b->sched;
    const job_t **jobs = NULL;
    size_t *of = NULL, m = 0;
    bool *inserted = NULL;
    PGresult *res = NULL;
    char *batch;
    rmqs_rc rc;

    (void)now_ms;
    if (n == 0)
        return RMQS_OK;
    batch = batch_json(a, n, &rc);
    if (batch == NULL)
        return rc;
    jobs = malloc(n * sizeof(*jobs));
    of = malloc(n * sizeof(*of));
    inserted = malloc(n * sizeof(*inserted));
    if (jobs == NULL || of == NULL || inserted == NULL) {
        rc = RMQS_ENOMEM;
        goto out;
    }
    rc = pg_use(pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin_insert(b, pc);
    if (rc != RMQS_OK)
        goto unlock;
    {
        const char *vals[1] = {batch};
        res =
            pg_exec(pc, "sched_advance", advance_sql, 1, vals, NULL, NULL, &rc);
    }
    for (int r = 0; rc == RMQS_OK && r < PQntuples(res); r++) {
        int64_t i = pg_int(res, r, 0);
        if (i < 0 || (size_t)i >= n || a[i].applied)
            continue;
        a[i].applied = true;
        if (a[i].job != NULL) {
            jobs[m] = a[i].job;
            of[m++] = (size_t)i;
        }
    }
    PQclear(res);
    if (rc == RMQS_OK && m > 0)
        rc = pg_insert_runs(b, pc, jobs, m, inserted);
    for (size_t k = 0; rc == RMQS_OK && k < m; k++)
        a[of[k]].job_existed = !inserted[k];
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc); /* counts, NOTIFY, COMMIT */
    else
        pg_tx_abort(pc);
unlock:
    pg_done(pc);
out:
    if (rc != RMQS_OK)
        for (size_t i = 0; i < n; i++)
            a[i].applied = a[i].job_existed = false;
    free(batch);
    free(jobs);
    free(of);
    free(inserted);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* What an operator reads: the last run and the failure streak              */

/* $1 the names as a text[], $2 now, $3 STORE_STREAK_CAP + 1; one row per
 * name, i its 1-based place in $1: the last run due (jobs_schedule,
 * backwards from now: one entry; NULLs if none) and how many of the latest
 * finished runs failed before the newest sent one (jobs_schedule_done,
 * 0010: only those, their status included; $3 entries at most), all of
 * them if none was sent. A nested loop over the names: one round trip for
 * a page of schedules. */
static const char recent_sql[] =
    "SELECT n.i, l.id, l.fire_at, l.status, l.last_error, f.failed "
    "FROM unnest($1::text[]) WITH ORDINALITY AS n(name, i) "
    "LEFT JOIN LATERAL (SELECT id, fire_at, status, last_error FROM jobs "
    "WHERE schedule = n.name AND deliver_at <= $2::bigint "
    "ORDER BY deliver_at DESC, seq DESC LIMIT 1) l ON true "
    "CROSS JOIN LATERAL (SELECT coalesce(min(rn) FILTER (WHERE status = 2) "
    "- 1, count(*)) AS failed FROM (SELECT status, row_number() OVER "
    "(ORDER BY deliver_at DESC, seq DESC) AS rn FROM (SELECT status, "
    "deliver_at, seq FROM jobs WHERE schedule = n.name AND status IN (2, 3) "
    "ORDER BY deliver_at DESC, seq DESC LIMIT $3::bigint) t) u) f";

/* names as a PostgreSQL array literal: {"a","b"} (malloc'd; NULL: out of
 * memory). A name's " and \ are escaped (schedule names have neither). */
static char *names_array(const char *const *names, size_t n)
{
    size_t cap = 3;
    char *out, *p;

    for (size_t i = 0; i < n; i++)
        cap += 2 * strlen(names[i]) + 3;
    out = malloc(cap);
    if (out == NULL)
        return NULL;
    p = out;
    *p++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        *p++ = '"';
        for (const char *c = names[i]; *c != '\0'; c++) {
            if (*c == '"' || *c == '\\')
                *p++ = '\\';
            *p++ = *c;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = '\0';
    return out;
}

static rmqs_rc pgs_recent(store_backend *b, const char *const *names, size_t n,
                          int64_t now_ms, store_run_outcome *out)
{
    char now[24], cap[24];
    char *arr = names_array(names, n);
    const char *vals[3] = {arr, pg_i64(now, now_ms),
                           pg_i64(cap, STORE_STREAK_CAP + 1)};
    PGresult *res = NULL;
    rmqs_rc rc = arr != NULL ? pg_use(&b->wr) : RMQS_ENOMEM;

    if (arr == NULL)
        return rc;
    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "sched_recent", recent_sql, 3, vals, NULL, NULL,
                      &rc);
    pg_done(&b->wr);
    free(arr);
    for (int r = 0; rc == RMQS_OK && r < PQntuples(res); r++) {
        int64_t i = pg_int(res, r, 0) - 1, failed = pg_int(res, r, 5);
        store_run_outcome *o;
        if (i < 0 || (size_t)i >= n)
            continue;
        o = &out[i];
        o->streak_capped = failed > STORE_STREAK_CAP;
        o->failure_streak =
            (int)(failed > STORE_STREAK_CAP ? STORE_STREAK_CAP : failed);
        if (PQgetisnull(res, r, 1) || PQgetlength(res, r, 1) != JOB_ID_BYTES)
            continue; /* no run due yet */
        o->has_last = true;
        job_id_format((const unsigned char *)PQgetvalue(res, r, 1), o->last_id);
        o->last_fire_at = col_i64_or(res, r, 2, -1);
        o->last_status = (int)pg_int(res, r, 3);
        if (!PQgetisnull(res, r, 4)) {
            o->last_error = col_dup(res, r, 4);
            if (o->last_error == NULL)
                rc = RMQS_ENOMEM;
        }
    }
    PQclear(res);
    return rc;
}

const store_schedule_ops pg_schedule_ops = {
    .put = pgs_put,
    .update = pgs_update,
    .get = pgs_get,
    .list = pgs_list,
    .del = pgs_delete,
    .due = pgs_due,
    .next_at = pgs_next_at,
    .advance = pgs_advance,
    .counts = pgs_counts,
    .recent = pgs_recent,
};
