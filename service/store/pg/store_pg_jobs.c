/*
 * store_pg_jobs.c - the clients' calls of the PostgreSQL backend: insert
 * (one group commit of requests, each all-or-nothing, with its idempotency
 * key), get, and the one update path of a reschedule or a cancel
 * (store_pg_core.h; the contract is store.h and store_backend.h).
 *
 * Why a room of its own: these are the calls an HTTP request or the ingest
 * makes, on the writer's connection, answered to a client.
 *
 * Group commit: a writer batch is one transaction. Requests without a key
 * (almost all of them) go in one binary COPY (store_pg_copy.c) under one
 * savepoint (a multi-row INSERT of 1000 jobs spent most of its time in the
 * server's parser: 15k jobs/s in 1000-job POSTs, 46k with COPY, same
 * machine), in
 * the message that also carries the BEGIN, the counts and the COMMIT: two
 * round trips in all (libpq sends a COPY's data only once the server has
 * taken the COPY; a group commit made eight before). If the schema refuses a row (a
 * job id taken, a value out of range), that savepoint is rolled back and
 * those requests are inserted again one by one (INSERT), each under its own
 * savepoint, so only the bad one fails. A request with idempotency keys
 * (POST /schedule's header: one; a POST /schedule/batch: up to every job)
 * costs the same few statements however many keys it carries
 * (insert_keyed_req): all its keys inserted in one statement over unnest()
 * with ON CONFLICT DO NOTHING, the taken ones looked up in the next
 * (key = u.k over unnest), both in one pipeline with the savepoint, then
 * the new jobs in one COPY with the RELEASE. The key's primary key makes a
 * second instance inserting the same key at the same moment wait for the
 * first one's COMMIT, then find the key taken and answer from the stored
 * job (the same request: existed; another one: RMQS_ECONFLICT). A job is
 * checked against its key at COMMIT (a deferred reference). What that
 * path cannot name a job for (a row the schema refuses) goes job by job
 * again (insert_one_req), as before: 1000 keyed jobs took two round trips
 * each that way (see the commit that made insert_keyed_req for figures).
 */
#include "store_pg_core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexdigit.h"
#include "log.h"

#define MOD "store"

#define INSERT_NCOLS PG_JOB_NCOLS

#define INSERT_HEAD                                                     \
    "INSERT INTO jobs (id, status, exchange, routing_key, deliver_at, " \
    "due_at, delay_ms, created_at, updated_at, sent_at, attempts, "     \
    "max_attempts, last_error, headers, properties, body_kind, body, "  \
    "source, message_id, schedule, fire_at, expires_at, priority, "     \
    "claim_rank) VALUES "

/* A new job's due_at on the database's clock: the HTTP layer made it the
 * later of deliver_at and its own clock; where that clock won (due_at >
 * deliver_at), the database's clock decides instead, so an instance whose
 * clock is ahead does not make a job due late. */
#define DUE_AT_SQL                                 \
    ",CASE WHEN $%zu::bigint > $%zu::bigint THEN " \
    "greatest($%zu::bigint, " PG_NOW_MS ") ELSE $%zu::bigint END"

#define ROW_NUMS 14 /* numbers a row binds as text */

/* The parameters of one multi-row INSERT. */
typedef struct rows {
    size_t n;          /* rows */
    const char **vals; /* INSERT_NCOLS per row */
    int *lens, *fmts;
    char (*num)[24]; /* ROW_NUMS numbers per row */
    char **owned;    /* 2 JSON texts per row (freed) */
    unsigned char (*ids)[JOB_ID_BYTES];
} rows;

static void rows_free(rows *r)
{
    for (size_t i = 0; r->owned && i < 2 * r->n; i++)
        free(r->owned[i]);
    free(r->vals);
    free(r->lens);
    free(r->fmts);
    free(r->num);
    free(r->owned);
    free(r->ids);
    memset(r, 0, sizeof(*r));
}

/* Bind jobs[0..n) (parsed ids) into r: RMQS_EINVAL with *bad the index of
 * a job whose id does not parse, RMQS_ENOMEM. */
static rmqs_rc rows_bind(rows *r, const job_t *const *jobs, size_t n,
                         size_t *bad)
{
    memset(r, 0, sizeof(*r));
    r->vals = calloc(n * INSERT_NCOLS, sizeof(*r->vals));
    r->lens = calloc(n * INSERT_NCOLS, sizeof(*r->lens));
    r->fmts = calloc(n * INSERT_NCOLS, sizeof(*r->fmts));
    r->num = calloc(n * ROW_NUMS, sizeof(*r->num));
    r->owned = calloc(n * 2, sizeof(*r->owned));
    r->ids = calloc(n, sizeof(*r->ids));
    if (!r->vals || !r->lens || !r->fmts || !r->num || !r->owned || !r->ids) {
        rows_free(r);
        return RMQS_ENOMEM;
    }
    r->n = n;
    for (size_t i = 0; i < n; i++) {
        const job_t *j = jobs[i];
        const char **v = r->vals + i * INSERT_NCOLS;
        int *len = r->lens + i * INSERT_NCOLS;
        int *fmt = r->fmts + i * INSERT_NCOLS;
        char(*num)[24] = r->num + i * ROW_NUMS;

        if (job_id_parse(j->id, r->ids[i]) != RMQS_OK) {
            *bad = i;
            rows_free(r);
            return RMQS_EINVAL;
        }
        if (store_json_text(j->headers, &r->owned[2 * i]) != RMQS_OK ||
            store_json_text(j->properties, &r->owned[2 * i + 1]) != RMQS_OK) {
            rows_free(r);
            return RMQS_ENOMEM;
        }
        v[0] = (const char *)r->ids[i];
        len[0] = JOB_ID_BYTES;
        fmt[0] = 1;
        v[1] = pg_i64(num[0], (int)j->status);
        v[2] = j->exchange ? j->exchange : "";
        v[3] = j->routing_key ? j->routing_key : "";
        v[4] = pg_i64(num[1], j->deliver_at);
        v[5] = pg_i64(num[2], j->due_at);
        v[6] = pg_i64(num[3], j->delay_ms);
        v[7] = pg_i64(num[4], j->created_at);
        v[8] = pg_i64(num[5], j->updated_at);
        v[9] = j->sent_at >= 0 ? pg_i64(num[6], j->sent_at) : NULL;
        v[10] = pg_i64(num[7], j->attempts);
        v[11] = pg_i64(num[8], j->max_attempts);
        v[12] = j->last_error;
        v[13] = r->owned[2 * i];
        v[14] = r->owned[2 * i + 1];
        v[15] = pg_i64(num[9], (int)j->body_kind);
        v[16] = j->body_len > 0 ? (const char *)j->body : "";
        if (j->body_len > INT32_MAX) {
            *bad = i;
            rows_free(r);
            return RMQS_EINVAL;
        }
        len[16] = (int)j->body_len;
        fmt[16] = 1;
        v[17] = j->source == JOB_SOURCE_SCHEDULE ? "2"
                : j->source == JOB_SOURCE_AMQP   ? "1"
                                                 : "0";
        v[18] = store_job_message_id(j);
        /* a schedule's run: its name and fire time; NULL for other jobs
         * (whatever fire_at a zeroed job carries) */
        v[19] = j->schedule;
        v[20] = j->schedule != NULL ? pg_i64(num[10], j->fire_at) : NULL;
        v[21] = j->expires_at > 0 ? pg_i64(num[11], j->expires_at) : NULL;
        v[22] = pg_i64(num[12], j->priority);
        v[23] = pg_i64(num[13], j->claim_rank);
    }
    return RMQS_OK;
}

/* After jobs[0..n) were written (rc): note the earliest due of the
 * pending ones for the NOTIFY (deliver_at at the earliest: the database's
 * clock may make them due before this host's due_at), or log the refusal. */
static void rows_done(pg_conn *pc, const job_t *const *jobs, size_t n,
                      rmqs_rc rc)
{
    if (rc == RMQS_OK) {
        for (size_t i = 0; i < n; i++)
            if (jobs[i]->status == JOB_PENDING)
                pg_note_due(pc, jobs[i]->deliver_at < jobs[i]->due_at
                                    ? jobs[i]->deliver_at
                                    : jobs[i]->due_at);
    } else if (rc == RMQS_ECONFLICT || rc == RMQS_EINVAL) {
        log_warn(MOD, "job rejected by the schema", "first_id=%s rows=%zu",
                 jobs[0]->id, n);
    }
}

/* One multi-row INSERT of jobs[0..n) (a few: COPY takes the bulk) in pc's open
 * transaction. */
static rmqs_rc insert_rows(pg_conn *pc, const job_t *const *jobs, size_t n,
                           size_t *bad)
{
    size_t cap =
        sizeof(INSERT_HEAD) + n * (INSERT_NCOLS * 8 + sizeof(DUE_AT_SQL) + 40);
    char *sql = malloc(cap);
    size_t at;
    PGresult *res;
    rows r;
    rmqs_rc rc;

    *bad = 0;
    if (sql == NULL)
        return RMQS_ENOMEM;
    rc = rows_bind(&r, jobs, n, bad);
    if (rc != RMQS_OK) {
        free(sql);
        return rc;
    }
    at = (size_t)snprintf(sql, cap, "%s", INSERT_HEAD);
    for (size_t i = 0; i < n; i++) {
        size_t p0 = i * INSERT_NCOLS; /* $p0+1 is the row's first column */

        at += (size_t)snprintf(sql + at, cap - at, "%s(", i ? "," : "");
        for (int c = 0; c < INSERT_NCOLS; c++) {
            if (c == 5) /* due_at: see DUE_AT_SQL */
                at += (size_t)snprintf(sql + at, cap - at, DUE_AT_SQL, p0 + 6,
                                       p0 + 5, p0 + 5, p0 + 6);
            else
                at += (size_t)snprintf(sql + at, cap - at, "%s$%zu",
                                       c ? "," : "", p0 + (size_t)c + 1);
        }
        at += (size_t)snprintf(sql + at, cap - at, ")");
    }
    res = pg_exec(pc, "insert", sql, (int)(n * INSERT_NCOLS), r.vals, r.lens,
                  r.fmts, &rc);
    rows_done(pc, jobs, n, rc);
    PQclear(res);
    rows_free(&r);
    free(sql);
    return rc;
}

static rmqs_rc sp(pg_conn *pc, const char *sql)
{
    return pg_exec_simple(pc, "savepoint", sql);
}

/* A failure that is about the request itself, not the database: the other
 * requests of the transaction go on. */
static bool local_failure(rmqs_rc rc)
{
    return rc == RMQS_EINVAL || rc == RMQS_ECONFLICT;
}

/* Record key for job i of r (inside its savepoint): RMQS_ENOTFOUND if the
 * key was new (recorded: the job is to be inserted), RMQS_OK if it was
 * known with this request (r->existing[i] loaded), RMQS_ECONFLICT if with
 * another one, or the database's failure. */
static rmqs_rc idem_claim(pg_conn *pc, store_insert_req *r, size_t i)
{
    char id[JOB_ID_BYTES];
    const char *vals[3] = {r->idem_keys[i], id, r->idem_requests[i]};
    int lens[3] = {0, JOB_ID_BYTES, 0}, fmts[3] = {0, 1, 0};
    PGresult *res;
    rmqs_rc rc;

    if (job_id_parse(r->jobs[i].id, (unsigned char *)id) != RMQS_OK)
        return RMQS_EINVAL;
    res = pg_exec(pc, "idem_insert",
                  "INSERT INTO idempotency (key, job_id, request) "
                  "VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING "
                  "RETURNING 1",
                  3, vals, lens, fmts, &rc);
    if (rc != RMQS_OK || PQntuples(res) == 1) {
        PQclear(res);
        return rc == RMQS_OK ? RMQS_ENOTFOUND : rc;
    }
    /* taken, maybe a moment ago by another instance: answer from what it
     * stored */
    PQclear(res);
    res = pg_exec(pc, "idem_lookup",
                  "SELECT " PG_JOB_COLS ", request FROM idempotency "
                  "JOIN jobs ON jobs.id = idempotency.job_id "
                  "WHERE key = $1",
                  1, vals, NULL, NULL, &rc);
    if (rc == RMQS_OK && PQntuples(res) == 1 &&
        strcmp(PQgetvalue(res, 0, PC_COUNT), r->idem_requests[i]) == 0) {
        rc = pg_row_to_job(res, 0, &r->existing[i], NULL);
        r->existed[i] = rc == RMQS_OK;
    } else if (rc == RMQS_OK) {
        rc = RMQS_ECONFLICT;
    }
    PQclear(res);
    return rc;
}

/* One request, all-or-nothing under its own savepoint: its jobs one by one
 * (so failed_index names the bad one; the fallback of the bulk COPY and of
 * insert_keyed_req), each keyed one after its key
 * (store_types.h: a key known with the same request is answered from the
 * earlier job, not inserted again). */
static rmqs_rc insert_one_req(pg_conn *pc, store_insert_req *r)
{
    store_delta added = {{0}};
    int64_t due = INT64_MAX;
    rmqs_rc rc;

    if ((rc = sp(pc, "SAVEPOINT req")) != RMQS_OK)
        return rc;
    for (size_t i = 0; i < r->n; i++) {
        const job_t *j = &r->jobs[i];
        size_t bad;

        r->failed_index = i;
        if (r->idem_keys != NULL && r->idem_keys[i] != NULL) {
            rc = idem_claim(pc, r, i);
            if (rc == RMQS_OK) { /* the same job again */
                r->nexisted++;
                continue;
            }
            if (rc != RMQS_ENOTFOUND)
                goto undo;
        }
        rc = insert_rows(pc, &j, 1, &bad);
        if (rc != RMQS_OK)
            goto undo;
        store_delta_add(&added, (int)j->status, 1);
        if (j->status == JOB_PENDING && j->due_at < due)
            due = j->due_at;
    }
    r->failed_index = 0;
    rc = sp(pc, "RELEASE req");
    if (rc == RMQS_OK) {
        store_delta_merge(&pc->delta, &added);
        if (due != INT64_MAX)
            pg_note_due(pc, due);
    }
    return rc;
undo:
    store_insert_req_undo(r);
    if (local_failure(rc)) {
        rmqs_rc u = sp(pc, "ROLLBACK TO req");
        if (u == RMQS_OK)
            u = sp(pc, "RELEASE req");
        if (u != RMQS_OK)
            return u;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Keyed requests: a whole request's keys in one round trip                 */

/* SAVEPOINT req, the claim of every key and the lookup of every key, in
 * one pipeline. The claim inserts the keys in the order sent (strcmp order
 * of the keys), so two instances claiming overlapping keys wait for each
 * other in the same order instead of deadlocking. The lookup is a
 * statement of its own (READ COMMITTED: a new snapshot): it sees a key the
 * claim found taken by a transaction that committed while the claim waited
 * for it. Its rows are the taken keys with their jobs (a key claimed just
 * now has no job yet, so it joins none); u.i is the key's place in $1. */
static const pg_stmt req_sp_stmt = {"savepoint_req", "SAVEPOINT req", true};
static const pg_stmt idem_claim_stmt = {
    "idem_claim_keys",
    "INSERT INTO idempotency (key, job_id, request) "
    "SELECT u.k, decode(u.j, 'hex'), u.r "
    "FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k, j, r) "
    "ON CONFLICT (key) DO NOTHING RETURNING key",
    false};
static const pg_stmt idem_lookup_stmt = {
    "idem_lookup_keys",
    "SELECT " PG_JOB_COLS ", idempotency.request, u.i "
    "FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i) "
    "JOIN idempotency ON idempotency.key = u.k "
    "JOIN jobs ON jobs.id = idempotency.job_id",
    false};

/* A keyed job of a request: its key and its index in the request. */
typedef struct kslot {
    const char *key;
    size_t i;
} kslot;

static int kslot_cmp(const void *a, const void *b)
{
    return strcmp(((const kslot *)a)->key, ((const kslot *)b)->key);
}

/* The state of one keyed request on its fast path (insert_keyed_req). */
typedef struct keyed {
    size_t nk;                         /* keyed jobs */
    kslot *slots;                      /* nk, by key */
    char (*hex)[2 * JOB_ID_BYTES + 1]; /* n: each keyed job's id */
    const char **vals[3];              /* nk each: keys, hex ids, requests */
    char *arr[3];                      /* the three as array literals */
    bool *claimed;       /* n: the key was new, recorded by the claim */
    int *row;            /* n: its lookup row + 1, or 0 */
    const job_t **fresh; /* the jobs to insert */
} keyed;

static void keyed_free(keyed *k)
{
    free(k->slots);
    free(k->hex);
    for (int c = 0; c < 3; c++) {
        free(k->vals[c]);
        free(k->arr[c]);
    }
    free(k->claimed);
    free(k->row);
    free(k->fresh);
}

/* Fill k for r: RMQS_OK, with *by_job set if the request needs the
 * job-by-job path (an id that does not parse, a body too long for COPY, a
 * key twice: that path finds and names the bad job); RMQS_ENOMEM. */
static rmqs_rc keyed_prepare(keyed *k, const store_insert_req *r, bool *by_job)
{
    size_t n = r->n;

    memset(k, 0, sizeof(*k));
    k->slots = calloc(n, sizeof(*k->slots));
    k->hex = calloc(n, sizeof(*k->hex));
    k->claimed = calloc(n, sizeof(*k->claimed));
    k->row = calloc(n, sizeof(*k->row));
    k->fresh = calloc(n, sizeof(*k->fresh));
    for (int c = 0; c < 3; c++)
        k->vals[c] = calloc(n, sizeof(*k->vals[c]));
    if (!k->slots || !k->hex || !k->claimed || !k->row || !k->fresh ||
        !k->vals[0] || !k->vals[1] || !k->vals[2])
        return RMQS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        unsigned char id[JOB_ID_BYTES];

        if (job_id_parse(r->jobs[i].id, id) != RMQS_OK ||
            r->jobs[i].body_len > INT32_MAX) {
            *by_job = true;
            return RMQS_OK;
        }
        if (r->idem_keys[i] == NULL)
            continue;
        for (size_t b = 0; b < JOB_ID_BYTES; b++)
            snprintf(k->hex[i] + 2 * b, 3, "%02x", id[b]);
        k->slots[k->nk++] = (kslot){r->idem_keys[i], i};
    }
    qsort(k->slots, k->nk, sizeof(*k->slots), kslot_cmp);
    for (size_t s = 0; s < k->nk; s++) {
        if (s > 0 && strcmp(k->slots[s - 1].key, k->slots[s].key) == 0) {
            *by_job = true;
            return RMQS_OK;
        }
        k->vals[0][s] = k->slots[s].key;
        k->vals[1][s] = k->hex[k->slots[s].i];
        k->vals[2][s] = r->idem_requests[k->slots[s].i];
    }
    for (int c = 0; c < 3; c++)
        if ((k->arr[c] = pg_text_array(k->vals[c], k->nk)) == NULL)
            return RMQS_ENOMEM;
    return RMQS_OK;
}

/* The keyed job whose key is key, by the claim's answer; NULL if none. */
static const kslot *keyed_find(const keyed *k, const char *key)
{
    kslot want = {key, 0};

    return bsearch(&want, k->slots, k->nk, sizeof(*k->slots), kslot_cmp);
}

/* Roll the request's savepoint back and release it. */
static rmqs_rc req_undo_sp(pg_conn *pc)
{
    return sp(pc, "ROLLBACK TO req; RELEASE req");
}

/* One request with keys, all-or-nothing under its own savepoint, in a
 * number of statements that does not grow with its jobs: the savepoint,
 * the claim and the lookup of every key in one pipeline, then the new jobs
 * in one binary COPY with the RELEASE (three round trips in all, two when
 * nothing is new). The answer is the job-by-job path's (insert_one_req):
 * jobs walked in order, the first key known with another request fails
 * the request with its index (the new jobs before it are copied all the
 * same, so a row the schema refuses ahead of it is named instead, as that
 * path would). Whatever that path would name a job for (an id that does
 * not parse, a row the schema refuses, a key twice) is left to it: the
 * savepoint is rolled back and the request goes job by job. */
static rmqs_rc insert_keyed_req(store_backend *b, pg_conn *pc,
                                store_insert_req *r)
{
    const char *const *pv;
    pg_call calls[3] = {{&req_sp_stmt, 0, NULL, NULL, NULL, NULL, NULL},
                        {&idem_claim_stmt, 3, NULL, NULL, NULL, NULL, NULL},
                        {&idem_lookup_stmt, 1, NULL, NULL, NULL, NULL, NULL}};
    const char *stmts[2] = {PG_COPY_SQL, "RELEASE req"};
    store_delta added = {{0}};
    size_t m = 0, c = r->n, bad;
    pg_copy_buf data = {0};
    int failed_at = -1;
    bool by_job = false;
    keyed k;
    rmqs_rc rc = keyed_prepare(&k, r, &by_job);

    if (rc != RMQS_OK)
        goto out;
    if (by_job)
        goto job_by_job;
    pv = (const char *const *)k.arr;
    calls[1].vals = pv;
    calls[2].vals = pv;
    rc = pg_pipeline(pc, calls, 3);
    if (rc != RMQS_OK)
        goto redo;
    for (int row = 0; row < PQntuples(calls[1].res); row++) {
        const kslot *s = keyed_find(&k, PQgetvalue(calls[1].res, row, 0));
        if (s != NULL)
            k.claimed[s->i] = true;
    }
    for (int row = 0; row < PQntuples(calls[2].res); row++) {
        int64_t at = pg_int(calls[2].res, row, PC_COUNT + 1) - 1;
        if (at >= 0 && (size_t)at < k.nk)
            k.row[k.slots[at].i] = row + 1;
    }
    /* in order, as job by job: known keys answered, new jobs gathered, up
     * to the first key known with another request */
    for (size_t i = 0; i < r->n && c == r->n; i++) {
        const char *key = r->idem_keys[i];
        int row = k.row[i] - 1;

        if (key == NULL || k.claimed[i]) {
            k.fresh[m++] = &r->jobs[i];
            continue;
        }
        if (row < 0 || strcmp(PQgetvalue(calls[2].res, row, PC_COUNT),
                              r->idem_requests[i]) != 0) {
            c = i; /* taken with another request (or its job is gone) */
            break;
        }
        rc = pg_row_to_job(calls[2].res, row, &r->existing[i], NULL);
        if (rc != RMQS_OK) {
            r->failed_index = i;
            goto fail;
        }
        r->existed[i] = true;
        r->nexisted++;
    }
    if (m > 0) {
        rc = pg_copy_jobs(k.fresh, m, pg_clock_offset_ms(b), &data, &bad);
        if (rc == RMQS_OK)
            rc = pg_exec_text(pc, "insert_keyed", stmts, c == r->n ? 2 : 1,
                              data.p, data.n, &failed_at, NULL);
        free(data.p);
        if (rc != RMQS_OK) {
            if (local_failure(rc) && failed_at == 0) {
                rows_done(pc, k.fresh, m, rc);
                goto redo;
            }
            goto fail;
        }
    } else if (c == r->n) {
        rc = sp(pc, "RELEASE req");
        if (rc != RMQS_OK)
            goto fail;
    }
    if (c < r->n) { /* the new jobs before it were fine: the key is it */
        r->failed_index = c;
        rc = RMQS_ECONFLICT;
        goto fail;
    }
    rows_done(pc, k.fresh, m, RMQS_OK);
    for (size_t j = 0; j < m; j++)
        store_delta_add(&added, (int)k.fresh[j]->status, 1);
    store_delta_merge(&pc->delta, &added);
    r->failed_index = 0;
    goto out;
fail:
    store_insert_req_undo(r);
    if (local_failure(rc)) {
        rmqs_rc u = req_undo_sp(pc);
        if (u != RMQS_OK)
            rc = u;
    }
    goto out;
redo: /* something for the job-by-job path to name */
    store_insert_req_undo(r);
    if (!local_failure(rc))
        goto out; /* the database failed: the caller aborts */
    if ((rc = req_undo_sp(pc)) != RMQS_OK)
        goto out;
job_by_job:
    rc = insert_one_req(pc, r);
out:
    for (int i = 0; i < 3; i++)
        PQclear(calls[i].res);
    keyed_free(&k);
    return rc;
}

/* The requests without a key (idx[0..m)), in one binary COPY under one
 * savepoint, sent with the commit of pc's transaction (pg_tx_commit_with):
 * two round trips for the whole group commit when no request has a key.
 * If the schema refuses a row, the savepoint is rolled back and those
 * requests are inserted one by one, each under its own savepoint, before
 * the commit. Returns the commit's outcome (the transaction is over either
 * way); request failures are in each reqs[].rc. */
static rmqs_rc insert_bulk_commit(store_backend *b, pg_conn *pc,
                                  store_insert_req *reqs, const size_t *idx,
                                  size_t m)
{
    static const char *const stmts[2] = {"SAVEPOINT bulk", PG_COPY_SQL};
    store_delta before = pc->delta;
    int64_t notify = pc->notify_due;
    const job_t **jobs;
    size_t total = 0, at = 0, bad;
    pg_copy_buf data = {0};
    int failed_at = -1;
    bool sent = false;
    rmqs_rc rc;

    for (size_t k = 0; k < m; k++)
        total += reqs[idx[k]].n;
    if (total == 0)
        return pg_tx_commit(b, pc);
    jobs = malloc(total * sizeof(*jobs));
    if (jobs == NULL) {
        pg_tx_abort(pc);
        return RMQS_ENOMEM;
    }
    for (size_t k = 0; k < m; k++)
        for (size_t i = 0; i < reqs[idx[k]].n; i++)
            jobs[at++] = &reqs[idx[k]].jobs[i];
    rc = pg_copy_jobs(jobs, total, pg_clock_offset_ms(b), &data, &bad);
    if (rc == RMQS_OK) {
        /* counted and announced as if stored: the commit goes with it */
        for (size_t i = 0; i < total; i++)
            store_delta_add(&pc->delta, (int)jobs[i]->status, 1);
        rows_done(pc, jobs, total, RMQS_OK);
        rc = pg_tx_commit_with(b, pc, "insert", stmts, 2, data.p, data.n,
                               &failed_at);
        sent = true;
        free(data.p);
        if (rc != RMQS_OK && failed_at >= 0) { /* not stored after all */
            pc->delta = before;
            pc->notify_due = notify;
            rows_done(pc, jobs, total, rc);
        }
    }
    free(jobs);
    if (sent && (rc == RMQS_OK || failed_at < 0))
        return rc; /* committed, or rolled back */
    if (!local_failure(rc) || failed_at == 0) {
        pg_tx_abort(pc);
        return rc;
    }
    /* one of them is bad: find which, one request at a time (a COPY that
     * failed: from the savepoint; a job refused before: nothing sent) */
    rc = sent ? sp(pc, "ROLLBACK TO bulk; RELEASE bulk") : RMQS_OK;
    for (size_t k = 0; rc == RMQS_OK && k < m; k++) {
        store_insert_req *r = &reqs[idx[k]];
        r->rc = insert_one_req(pc, r);
        if (!local_failure(r->rc) && r->rc != RMQS_OK)
            rc = r->rc;
    }
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        return rc;
    }
    return pg_tx_commit(b, pc);
}

rmqs_rc pg_insert_batch(store_backend *b, store_insert_req *reqs, size_t n)
{
    pg_conn *pc = &b->wr;
    size_t *bulk = NULL, m = 0;
    rmqs_rc out;

    store_insert_reqs_reset(reqs, n);
    if (n == 0)
        return RMQS_OK;
    bulk = malloc(n * sizeof(*bulk));
    if (bulk == NULL)
        return RMQS_ENOMEM;
    out = pg_use(pc);
    if (out == RMQS_OK)
        out = pg_tx_begin_insert(b, pc);
    if (out != RMQS_OK)
        goto fail_all;
    for (size_t i = 0; i < n; i++) {
        store_insert_req *r = &reqs[i];

        if (!store_insert_req_valid(r)) {
            r->rc = RMQS_EINVAL;
            continue;
        }
        if (r->idem_keys == NULL) {
            bulk[m++] = i;
            continue;
        }
        r->rc = insert_keyed_req(b, pc, r);
        if (!local_failure(r->rc) && r->rc != RMQS_OK) {
            out = r->rc; /* the database failed: nothing is kept */
            pg_tx_abort(pc);
            goto fail_all;
        }
    }
    out = insert_bulk_commit(b, pc, reqs, bulk, m);
    if (out != RMQS_OK)
        goto fail_all;
    pg_done(pc);
    free(bulk);
    pg_ix_kick(b); /* the new jobs' headers and bodies */
    return RMQS_OK;
fail_all:
    store_insert_reqs_fail(reqs, n, out);
    pg_done(pc);
    free(bulk);
    return out;
}

/* A schedule's runs go through a temporary table of this session (made
 * once per connection, emptied at every commit): one binary COPY of the
 * batch into it, then one INSERT ... SELECT that skips a run created
 * already (its id is derived from the fire time) and returns the ids it
 * inserted. Measured on the test VM, 1000 runs: 78 ms as a multi-row
 * INSERT (22 parameters a row: mostly the server's parser), 28 ms so. */
#define RUNS_IN_SQL                                                         \
    "DO $$BEGIN IF to_regclass('pg_temp.runs_in') IS NULL THEN "            \
    "CREATE TEMP TABLE runs_in (id bytea, status smallint, exchange text, " \
    "routing_key text, deliver_at bigint, due_at bigint, delay_ms bigint, " \
    "created_at bigint, updated_at bigint, sent_at bigint, attempts "       \
    "integer, max_attempts integer, last_error text, headers text, "        \
    "properties text, body_kind smallint, body bytea, source smallint, "    \
    "message_id text, schedule text, fire_at bigint, expires_at bigint, "   \
    "priority smallint, claim_rank bigint) "                                \
    "ON COMMIT DELETE ROWS; END IF; END$$"
#define RUNS_COPY_SQL "COPY runs_in " PG_COPY_COLS " FROM STDIN (FORMAT binary)"
#define RUNS_INSERT_SQL                                           \
    "INSERT INTO jobs " PG_COPY_COLS " SELECT " PG_COPY_COLS_LIST \
    " FROM runs_in ON CONFLICT (id) DO NOTHING RETURNING encode(id, 'hex')"

/* The position among ids[0..n) not taken yet of the id whose hex digits
 * (a text result: encode(id, 'hex')) are hex[0..len), or n. */
static size_t find_id(const unsigned char (*ids)[JOB_ID_BYTES],
                      const bool *taken, size_t n, const char *hex, size_t len)
{
    unsigned char id[JOB_ID_BYTES];

    if (len != 2 * JOB_ID_BYTES)
        return n;
    for (size_t k = 0; k < JOB_ID_BYTES; k++) {
        int hi = hex_digit(hex[2 * k]), lo = hex_digit(hex[2 * k + 1]);
        if (hi < 0 || lo < 0)
            return n;
        id[k] = (unsigned char)(hi << 4 | lo);
    }
    for (size_t i = 0; i < n; i++)
        if (!taken[i] && memcmp(ids[i], id, JOB_ID_BYTES) == 0)
            return i;
    return n;
}

rmqs_rc pg_insert_runs(store_backend *b, pg_conn *pc, const job_t *const *jobs,
                       size_t n, bool *inserted)
{
    static const char *const stmts[3] = {RUNS_IN_SQL, RUNS_COPY_SQL,
                                         RUNS_INSERT_SQL};
    unsigned char(*ids)[JOB_ID_BYTES] = malloc(n * sizeof(*ids));
    PGresult *res = NULL;
    pg_copy_buf data = {0};
    size_t bad;
    rmqs_rc rc = ids != NULL ? RMQS_OK : RMQS_ENOMEM;

    for (size_t i = 0; rc == RMQS_OK && i < n; i++) {
        inserted[i] = false;
        if (job_id_parse(jobs[i]->id, ids[i]) != RMQS_OK)
            rc = RMQS_EINVAL;
    }
    if (rc == RMQS_OK)
        rc = pg_copy_jobs(jobs, n, pg_clock_offset_ms(b), &data, &bad);
    if (rc == RMQS_OK) {
        /* one message: the table, the COPY into it, the INSERT from it */
        rc = pg_exec_text(pc, "insert_runs", stmts, 3, data.p, data.n, NULL,
                          &res);
        free(data.p);
        rows_done(pc, jobs, n, rc);
    }
    /* RETURNING order is unspecified: match the ids */
    for (int r = 0; rc == RMQS_OK && r < PQntuples(res); r++) {
        size_t i =
            find_id((const unsigned char(*)[JOB_ID_BYTES])ids, inserted, n,
                    PQgetvalue(res, r, 0), (size_t)PQgetlength(res, r, 0));
        if (i == n)
            continue;
        inserted[i] = true;
        store_delta_add(&pc->delta, (int)jobs[i]->status, 1);
    }
    PQclear(res);
    free(ids);
    return rc;
}

static const pg_stmt get_stmt = {
    "get",
    "SELECT " PG_JOB_COLS ", attempt_errors::text FROM jobs WHERE id = $1",
    false};

/* Load a job by id on pc (locked, up). */
static rmqs_rc get_on(pg_conn *pc, const unsigned char id[JOB_ID_BYTES],
                      job_t *out)
{
    const char *vals[1] = {(const char *)id};
    int lens[1] = {JOB_ID_BYTES}, fmts[1] = {1};
    PGresult *res;
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    res = pg_run(pc, &get_stmt, 1, vals, lens, fmts, &rc);
    if (rc == RMQS_OK)
        rc = PQntuples(res) == 1 ? pg_row_to_job(res, 0, out, NULL)
                                 : RMQS_ENOTFOUND;
    /* after PG_JOB_COLS: attempt_errors, as text */
    if (rc == RMQS_OK && !PQgetisnull(res, 0, PC_COUNT)) {
        rc = store_json_load(PQgetvalue(res, 0, PC_COUNT),
                             (size_t)PQgetlength(res, 0, PC_COUNT), out->id,
                             &out->attempt_errors);
        if (rc != RMQS_OK)
            job_clear(out);
    }
    PQclear(res);
    return rc;
}

rmqs_rc pg_get(store_backend *b, const unsigned char id[JOB_ID_BYTES],
               job_t *out)
{
    rmqs_rc rc = pg_use(&b->wr);

    memset(out, 0, sizeof(*out));
    if (rc == RMQS_OK)
        rc = get_on(&b->wr, id, out);
    pg_done(&b->wr);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Client changes: reschedule (and run), cancel, retry                      */

/* A failed job back to pending, its attempts from 0, last_error kept; $1
 * NULL keeps deliver_at (a bulk retry); then RETURNING what the caller
 * reads. */
#define RETRY_SQL                                                          \
    "UPDATE jobs SET status = 0, attempts = 0, "                           \
    "deliver_at = coalesce($1::bigint, deliver_at), "                      \
    "due_at = greatest(coalesce($1::bigint, deliver_at), " PG_NOW_MS "), " \
    "delay_ms = $2, updated_at = $3, held_by = NULL, failed_at = NULL "    \
    "WHERE id = $4 AND status = 3 RETURNING "

/* The statements of the changes: one job (cancel, retry, reschedule:
 * RETURNING the job) or one of a batch (RETURNING its due_at). */
static const pg_stmt cancel_stmt = {
    "cancel",
    "UPDATE jobs SET status = 4, updated_at = $1 "
    "WHERE id = $2 AND status = 0 RETURNING " PG_JOB_COLS,
    false};
static const pg_stmt retry_stmt = {"retry", RETRY_SQL PG_JOB_COLS, false};
static const pg_stmt reschedule_stmt = {
    "reschedule",
    "UPDATE jobs SET deliver_at = $1, "
    "due_at = greatest($1::bigint, " PG_NOW_MS "), "
    "delay_ms = $2, updated_at = $3, held_by = NULL "
    "WHERE id = $4 AND status = 0 RETURNING " PG_JOB_COLS,
    false};
static const pg_stmt cancel_batch_stmt = {
    "cancel_batch",
    "UPDATE jobs SET status = 4, updated_at = $1 "
    "WHERE id = $2 AND status = 0 RETURNING due_at",
    false};
static const pg_stmt retry_batch_stmt = {"retry_batch", RETRY_SQL "due_at",
                                         false};

/* Every change of the batch in one pipeline (one round trip), then the
 * commit. */
rmqs_rc pg_update_batch(store_backend *b,
                        const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                        const store_change *ch, int64_t now_ms, bool *changed)
{
    bool cancel = ch->kind == STORE_CHANGE_CANCEL;
    char num[3][24];
    const char *(*vals)[4] = calloc(n ? n : 1, sizeof(*vals));
    pg_call *calls = calloc(n ? n : 1, sizeof(*calls));
    int lens[4] = {0}, fmts[4] = {0};
    int id_at = cancel ? 1 : 3;
    pg_conn *pc = &b->wr;
    int64_t moved = 0;
    rmqs_rc rc;

    for (size_t i = 0; i < n; i++)
        changed[i] = false;
    if (vals == NULL || calls == NULL) {
        free(vals);
        free(calls);
        return RMQS_ENOMEM;
    }
    lens[id_at] = JOB_ID_BYTES;
    fmts[id_at] = 1;
    for (size_t i = 0; i < n; i++) {
        if (cancel) {
            vals[i][0] = pg_i64(num[0], now_ms);
        } else {
            vals[i][0] =
                ch->keep_deliver_at ? NULL : pg_i64(num[0], ch->deliver_at);
            vals[i][1] = pg_i64(num[1], ch->delay_ms);
            vals[i][2] = pg_i64(num[2], now_ms);
        }
        vals[i][id_at] = (const char *)ids[i];
        calls[i] = (pg_call){cancel ? &cancel_batch_stmt : &retry_batch_stmt,
                             cancel ? 2 : 4,
                             vals[i],
                             lens,
                             fmts,
                             NULL,
                             NULL};
    }
    rc = pg_use(pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc == RMQS_OK)
        rc = pg_pipeline(pc, calls, n);
    for (size_t i = 0; i < n; i++) {
        changed[i] = rc == RMQS_OK && PQntuples(calls[i].res) == 1;
        if (changed[i]) {
            moved++;
            if (!cancel)
                pg_note_due(pc, pg_int(calls[i].res, 0, 0));
        }
        PQclear(calls[i].res);
    }
    if (rc == RMQS_OK && moved > 0)
        store_delta_move(&pc->delta, cancel ? JOB_PENDING : JOB_FAILED,
                         cancel ? JOB_CANCELLED : JOB_PENDING, moved);
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc);
    else
        pg_tx_abort(pc);
    if (rc != RMQS_OK)
        for (size_t i = 0; i < n; i++)
            changed[i] = false;
    pg_done(pc);
    free(vals);
    free(calls);
    return rc;
}

rmqs_rc pg_update(store_backend *b, const unsigned char id[JOB_ID_BYTES],
                  const store_change *ch, int64_t now_ms, job_t *out)
{
    bool cancel = ch->kind == STORE_CHANGE_CANCEL;
    bool retry = ch->kind == STORE_CHANGE_RETRY;
    char num[3][24];
    const char *vals[4];
    int lens[4] = {0}, fmts[4] = {0};
    pg_conn *pc = &b->wr;
    PGresult *res;
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (cancel) {
        vals[0] = pg_i64(num[0], now_ms);
    } else {
        vals[0] = retry && ch->keep_deliver_at ? NULL
                                               : pg_i64(num[0], ch->deliver_at);
        vals[1] = pg_i64(num[1], ch->delay_ms);
        vals[2] = pg_i64(num[2], now_ms);
    }
    vals[cancel ? 1 : 3] = (const char *)id;
    lens[cancel ? 1 : 3] = JOB_ID_BYTES;
    fmts[cancel ? 1 : 3] = 1;

    rc = pg_use(pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto unlock;
    /* due_at: the later of deliver_at and the database's clock (not
     * now_ms, this host's), as at insert. A claim by any instance holds
     * the row (FOR UPDATE) until it commits;
     * this UPDATE waits for it and then finds the job publishing */
    res = pg_run(pc,
                 cancel  ? &cancel_stmt
                 : retry ? &retry_stmt
                         : &reschedule_stmt,
                 cancel ? 2 : 4, vals, lens, fmts, &rc);
    if (rc == RMQS_OK && PQntuples(res) == 1) {
        rc = pg_row_to_job(res, 0, out, NULL);
        if (rc == RMQS_OK && cancel)
            store_delta_move(&pc->delta, JOB_PENDING, JOB_CANCELLED, 1);
        if (rc == RMQS_OK && retry)
            store_delta_move(&pc->delta, JOB_FAILED, JOB_PENDING, 1);
        if (rc == RMQS_OK && !cancel)
            pg_note_due(pc, out->due_at);
    } else if (rc == RMQS_OK) {
        rc = get_on(pc, id, out);
        if (rc == RMQS_OK)
            rc = cancel && out->status == JOB_CANCELLED
                     ? RMQS_OK /* cancelling a cancelled job changes nothing */
                     : RMQS_ECONFLICT;
    }
    PQclear(res);
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc);
    else
        pg_tx_abort(pc);
    /* on a conflict *out is the job as it is (store_update) */
    if (rc != RMQS_OK && rc != RMQS_ECONFLICT)
        job_clear(out);
unlock:
    pg_done(pc);
    return rc;
}
