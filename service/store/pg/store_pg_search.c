/*
 * store_pg_search.c - GET /jobs and GET /jobs/count under a filter on
 * PostgreSQL (issue 14): the query is written for the filters that are set
 * (each a bound parameter), the planner picks among the indexes of
 * migrations/postgres/0003_search.sql with the table's statistics, and
 * store_explain shows its plan (tests/unit/test_store_pg_search.c).
 *
 * Why a room of its own: as store_sqlite_search.c, the filters combine
 * freely, so the statement is built per call; the two backends share the
 * rules (store_common.h: which filters are the search's, the id range of
 * an id prefix) and differ in SQL only. How each filter is matched:
 *   - header: job_text.headers @> {"name": "value"} (GIN jsonb_path_ops);
 *   - q: job_text.body LIKE '%<q escaped alike>%' (GIN pg_trgm:
 *     candidates) AND position(q in body) > 0 (the bytes: exact), text
 *     and JSON bodies only;
 *     job_text holds the jobs up to search_index.mark
 *     (store_pg_indexer.c fills it off the insert path): the jobs above
 *     it are added to the candidates and checked directly (headers::jsonb
 *     @>; position()); a page of a common term walks the listing order
 *     and checks position() alone (q_by_index);
 *   - id_prefix: id >= lo AND id < hi (the unique index on id);
 *   - the rest: equality and ranges on btrees in listing order.
 * The order (GET /jobs?order=, store_order) is the ORDER BY and the
 * cursor's range; the planner picks the btree that yields it (order_by).
 * A count walks at most cap + 1 rows of the same query, counting them as
 * they come (single-row mode), so one that runs out of its budget answers
 * what it counted, capped.
 *
 * Every call runs on a search connection of its own (b->search: never the
 * writer's, so a broad search holds no write), whose statement_timeout is
 * the search budget: past it the server cancels (57014) and the call ends
 * with RMQS_ETIMEDOUT.
 */
#include "store_pg_core.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS 16

typedef struct pg_query {
    char sql[2048];
    size_t at;
    bool overflow;
    int n;
    const char *vals[MAX_PARAMS];
    int lens[MAX_PARAMS], fmts[MAX_PARAMS];
    char num[8][24];
    int nnum;
    unsigned char lo[JOB_ID_BYTES], hi[JOB_ID_BYTES];
    char *header_json; /* malloc'd */
    char *like;        /* malloc'd */
} pg_query;

static void add(pg_query *q, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add(pg_query *q, const char *fmt, ...)
{
    va_list ap;
    int w;

    va_start(ap, fmt);
    w = vsnprintf(q->sql + q->at, sizeof(q->sql) - q->at, fmt, ap);
    va_end(ap);

    if (w < 0 || (size_t)w >= sizeof(q->sql) - q->at)
        q->overflow = true;
    else
        q->at += (size_t)w;
}

/* A parameter: text (len -1) or binary bytes; its number. */
static int param(pg_query *q, const char *v, int len)
{
    q->vals[q->n] = v;
    q->lens[q->n] = len < 0 ? 0 : len;
    q->fmts[q->n] = len < 0 ? 0 : 1;
    return ++q->n;
}

static int param_i64(pg_query *q, int64_t v)
{
    return param(q, pg_i64(q->num[q->nnum++], v), -1);
}

/* '%' + q as encode(q, 'escape') gives it, escaped for LIKE + '%'. */
static char *like_pattern(const char *text)
{
    size_t n = strlen(text), j = 0;
    char *out = malloc(6 * n + 3);

    if (out == NULL)
        return NULL;
    out[j++] = '%';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\\') { /* escape: "\\"; each backslash again for LIKE */
            memcpy(out + j, "\\\\\\\\", 4);
            j += 4;
        } else if (c >= 0x80) { /* escape: "\ooo" */
            j += (size_t)sprintf(out + j, "\\\\%03o", c);
        } else {
            if (c == '%' || c == '_')
                out[j++] = '\\';
            out[j++] = (char)c;
        }
    }
    out[j++] = '%';
    out[j] = '\0';
    return out;
}

static void query_free(pg_query *q)
{
    free(q->header_json);
    free(q->like);
}

/*
 * The candidates of a header filter (hdr) and of q through the trigram
 * index (txt), each a MATERIALIZED CTE that the query's IN reads: computed
 * once. Written inline (seq IN (SELECT ... UNION ALL ...)), the planner
 * made it the inner side of a nested loop whenever it expected one row
 * from the other filters, as it does for any two equalities on a table
 * autovacuum has not analysed yet (0.5 % each): with 1,000 rows outside,
 * the GIN scans ran 1,000 times, 3.3 s where this takes 70 ms (100,000
 * jobs, exchange + routing key + header, browser.search.postgres).
 */
static rmqs_rc candidates(const store_filter *f, bool q_index, pg_query *q)
{
    const char *with = "WITH";

    if (f->header_name) {
        json_t *o = json_object();
        if (o == NULL ||
            json_object_setn_new(o, f->header_name, f->header_name_len,
                                 json_string(f->header_value)) != 0) {
            json_decref(o);
            return RMQS_ENOMEM;
        }
        q->header_json = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (q->header_json == NULL)
            return RMQS_ENOMEM;
        int h = param(q, q->header_json, -1);
        add(q,
            "WITH hdr AS MATERIALIZED (SELECT seq FROM job_text WHERE "
            "headers IS NOT NULL AND headers @> $%d::jsonb UNION ALL SELECT "
            "t.seq FROM jobs AS t WHERE t.seq > (SELECT mark FROM "
            "search_index) AND t.headers IS NOT NULL AND t.headers::jsonb @> "
            "$%d::jsonb) ",
            h, h);
        with = ",";
    }
    if (f->q && q_index) {
        if ((q->like = like_pattern(f->q)) == NULL)
            return RMQS_ENOMEM;
        add(q,
            "%s txt AS MATERIALIZED (SELECT seq FROM job_text WHERE body IS "
            "NOT NULL AND body LIKE $%d UNION ALL SELECT t.seq FROM jobs AS t "
            "WHERE t.seq > (SELECT mark FROM search_index)) ",
            with, param(q, q->like, -1));
    }
    return RMQS_OK;
}

/* A page's ORDER BY by store_order: (deliver_at, seq) walks jobs_deliver,
 * jobs_status_deliver, jobs_schedule... forwards or backwards; seq the
 * primary key, jobs_status_seq, jobs_schedule_seq (migrations/postgres/
 * 0008). */
static const char *const order_by[] = {
    [STORE_ORDER_DUE] = " ORDER BY deliver_at, seq",
    [STORE_ORDER_DUE_DESC] = " ORDER BY deliver_at DESC, seq DESC",
    [STORE_ORDER_CREATED] = " ORDER BY seq",
    [STORE_ORDER_CREATED_DESC] = " ORDER BY seq DESC",
};

/* What a query yields: a page's rows, their sizes (the page budget's
 * first statement, pg_page_measure), or a count. */
typedef enum q_shape { Q_ROWS, Q_SIZES, Q_COUNT } q_shape;

/* Build the query of that shape for f into *q (see the file comment);
 * limit is the LIMIT's value. */
static rmqs_rc build(const store_filter *f, q_shape shape,
                     const store_cursor *after, int64_t limit, bool q_index,
                     pg_query *q)
{
    static const store_filter all = {.status = -1, .source = -1};
    bool count = shape == Q_COUNT;

    memset(q, 0, sizeof(*q));
    if (f == NULL)
        f = &all;
    rmqs_rc rc = candidates(f, q_index, q);
    if (rc != RMQS_OK)
        return rc;
    add(q, count              ? "SELECT 1 FROM jobs WHERE true"
           : shape == Q_SIZES ? "SELECT " PG_JOB_SIZE_COLS
                                " FROM jobs WHERE true"
                              : "SELECT " PG_JOB_COLS " FROM jobs WHERE true");
    if (!count && after) {
        if (f->order == STORE_ORDER_CREATED ||
            f->order == STORE_ORDER_CREATED_DESC) {
            add(q,
                f->order == STORE_ORDER_CREATED ? " AND seq > $%d"
                                                : " AND seq < $%d",
                param_i64(q, after->seq));
        } else {
            int a = param_i64(q, after->deliver_at);
            int s = param_i64(q, after->seq);
            add(q, " AND (deliver_at, seq) %s ($%d, $%d)",
                f->order == STORE_ORDER_DUE_DESC ? "<" : ">", a, s);
        }
    }
    if (f->status >= 0)
        add(q, " AND status = $%d", param_i64(q, f->status));
    if (f->source >= 0)
        add(q, " AND source = $%d", param_i64(q, f->source));
    if (f->message_id)
        add(q, " AND message_id = $%d", param(q, f->message_id, -1));
    if (f->schedule) /* the partial index jobs_schedule */
        add(q, " AND schedule = $%d", param(q, f->schedule, -1));
    if (f->held_by) /* the partial index jobs_held_by */
        add(q, " AND held_by = $%d", param(q, f->held_by, -1));
    if (f->exchange)
        add(q, " AND exchange = $%d", param(q, f->exchange, -1));
    if (f->routing_key)
        add(q, " AND routing_key = $%d", param(q, f->routing_key, -1));
    if (f->has_deliver_from)
        add(q, " AND deliver_at >= $%d", param_i64(q, f->deliver_from));
    if (f->has_deliver_to)
        add(q, " AND deliver_at < $%d", param_i64(q, f->deliver_to));
    if (f->id_prefix[0] != '\0') {
        bool hi = store_id_prefix_range(f->id_prefix, q->lo, q->hi);
        add(q, " AND id >= $%d", param(q, (const char *)q->lo, JOB_ID_BYTES));
        if (hi)
            add(q, " AND id < $%d",
                param(q, (const char *)q->hi, JOB_ID_BYTES));
    }
    if (f->header_name)
        add(q, " AND seq IN (SELECT seq FROM hdr)");
    if (f->q) {
        if (q_index)
            add(q, " AND seq IN (SELECT seq FROM txt)");
        add(q, " AND body_kind < 2");
        add(q, " AND position($%d::bytea in body) > 0",
            param(q, f->q, (int)strlen(f->q)));
    }
    if (!count)
        add(q, "%s", order_by[f->order]);
    add(q, " LIMIT $%d", param_i64(q, limit));
    return q->overflow ? RMQS_ENOMEM : RMQS_OK;
}

/*
 * Whether a page or count under f's q should take its candidates from job_text's
 * trigram index: not when Q_DENSE_MIN or more of the newest Q_SAMPLE jobs
 * match (a common term: walking the listing order and checking each body
 * finds a page in about limit * Q_SAMPLE / matches rows, where the index
 * would yield most of the table, all sorted before the first page), as
 * store_sqlite_search.c does. A header filter drives anyway.
 */
#define Q_SAMPLE "1000"
#define Q_DENSE_MIN 100

/* A search connection, locked and up (pg_use): a free one, else the next
 * in turn. The caller pg_done()s it either way. */
static pg_conn *searcher(store_backend *b, rmqs_rc *rc)
{
    pg_conn *pc = NULL;

    for (int i = 0; i < PG_SEARCHERS && pc == NULL; i++) {
        if (pthread_mutex_trylock(&b->search[i].mu) == 0) {
            pthread_mutex_unlock(&b->search[i].mu);
            pc = &b->search[i];
        }
    }
    if (pc == NULL)
        pc = &b->search[atomic_fetch_add(&b->search_next, 1) % PG_SEARCHERS];
    *rc = pg_use(pc);
    return pc;
}

static bool q_by_index(store_backend *b, const store_filter *f)
{
    const char *vals[1];
    int lens[1], fmts[1] = {1};
    PGresult *res = NULL;
    rmqs_rc rc;
    bool index = true;

    if (f == NULL || f->q == NULL || f->header_name != NULL)
        return true;
    vals[0] = f->q;
    lens[0] = (int)strlen(f->q);
    pg_conn *pc = searcher(b, &rc);
    if (rc == RMQS_OK)
        res = pg_exec(pc, "search_q_sample",
                      "SELECT count(*) FROM (SELECT body_kind, body FROM jobs "
                      "ORDER BY seq DESC LIMIT " Q_SAMPLE ") AS s WHERE "
                      "body_kind < 2 AND position($1::bytea in body) > 0",
                      1, vals, lens, fmts, &rc);
    if (res != NULL && PQntuples(res) == 1)
        index = pg_int(res, 0, 0) < Q_DENSE_MIN;
    PQclear(res);
    pg_done(pc);
    return index; /* a failed sample: the index, which is always right */
}

/* Run q on a search connection: the result (caller PQclear) or NULL. */
static PGresult *run(store_backend *b, const char *op, const char *prefix,
                     pg_query *q, rmqs_rc *rc)
{
    char sql[sizeof(q->sql) + 32];
    PGresult *res = NULL;
    pg_conn *pc;

    snprintf(sql, sizeof sql, "%s%s", prefix, q->sql);
    pc = searcher(b, rc);
    if (*rc == RMQS_OK)
        res = pg_exec(pc, op, sql, q->n, q->vals, q->lens, q->fmts, rc);
    pg_done(pc);
    return res;
}

/* Count the rows of q as they come (single-row mode): *n of them, and
 * RMQS_ETIMEDOUT when the budget ended the statement first. */
static rmqs_rc count_rows(store_backend *b, pg_query *q, int64_t *n)
{
    pg_stmt st = {"count", q->sql, true};
    pg_call call = {&st, q->n, q->vals, q->lens, q->fmts, NULL, n};
    rmqs_rc rc;
    pg_conn *pc = searcher(b, &rc);

    *n = 0;
    if (rc == RMQS_OK)
        rc = pg_pipeline(pc, &call, 1);
    PQclear(call.res);
    pg_done(pc);
    return rc;
}

/* The page's sizes first, then as many rows as fit (pg_page_measure),
 * in one snapshot: the result that holds the page stays within the
 * budget, whatever limit asks. */
rmqs_rc pg_list(store_backend *b, const store_filter *f, size_t limit,
                size_t max_bytes, const store_cursor *after, job_t **jobs_out,
                size_t *n_out, bool *more, store_cursor *last)
{
    bool q_index = q_by_index(b, f);
    pg_query sizes, rows = {0};
    store_page page;
    PGresult *res = NULL;
    job_t *jobs = NULL;
    int64_t last_seq = 0;
    size_t n = 0;
    rmqs_rc rc;

    *jobs_out = NULL;
    *n_out = 0;
    *more = false;
    if (limit > (size_t)INT64_MAX - 1)
        limit = (size_t)INT64_MAX - 1;
    store_page_init(&page, limit, max_bytes);
    /* one more: is there a next page? */
    rc = build(f, Q_SIZES, after, (int64_t)limit + 1, q_index, &sizes);
    if (rc == RMQS_OK) {
        pg_conn *pc = searcher(b, &rc);
        if (rc == RMQS_OK)
            rc = pg_page_measure(pc, "list_sizes", sizes.sql, sizes.n,
                                 sizes.vals, sizes.lens, sizes.fmts, &page);
        if (rc == RMQS_OK && page.n > 0) {
            rc = build(f, Q_ROWS, after, (int64_t)page.n, q_index, &rows);
            if (rc == RMQS_OK)
                res = pg_exec(pc, "list", rows.sql, rows.n, rows.vals,
                              rows.lens, rows.fmts, &rc);
        }
        pg_page_end(pc);
        pg_done(pc);
    }
    query_free(&sizes);
    query_free(&rows);
    if (rc != RMQS_OK)
        return rc;
    n = res != NULL ? (size_t)PQntuples(res) : 0;
    if (n > 0) {
        jobs = calloc(n, sizeof(*jobs));
        if (jobs == NULL) {
            PQclear(res);
            return RMQS_ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++) {
        rc = pg_row_to_job(res, (int)i, &jobs[i], &last_seq);
        if (rc != RMQS_OK) {
            PQclear(res);
            store_jobs_free(jobs, i);
            return rc;
        }
    }
    PQclear(res);
    if (n > 0) {
        last->deliver_at = jobs[n - 1].deliver_at;
        last->seq = last_seq;
    }
    *more = page.more;
    *jobs_out = jobs;
    *n_out = n;
    return RMQS_OK;
}

rmqs_rc pg_count(store_backend *b, const store_filter *f, int64_t cap,
                 int64_t *count, bool *capped)
{
    pg_query q;
    int64_t n = 0;
    rmqs_rc rc = build(f, Q_COUNT, NULL, cap < INT64_MAX ? cap + 1 : cap,
                       q_by_index(b, f), &q);

    if (rc == RMQS_OK)
        rc = count_rows(b, &q, &n);
    query_free(&q);
    if (rc == RMQS_ETIMEDOUT) { /* at least the n counted within the budget */
        *capped = true;
        *count = n < cap ? n : cap;
        return RMQS_OK;
    }
    if (rc != RMQS_OK)
        return rc;
    *capped = n > cap;
    *count = *capped ? cap : n;
    return RMQS_OK;
}

rmqs_rc pg_explain(store_backend *b, const store_filter *f, bool count,
                   char **plan_out)
{
    /* a page after a cursor: 0 ascending, the end descending */
    bool desc = f != NULL && (f->order == STORE_ORDER_DUE_DESC ||
                              f->order == STORE_ORDER_CREATED_DESC);
    store_cursor cur = {desc ? INT64_MAX : 0, desc ? INT64_MAX : 0,
                        STORE_ORDER_DUE};
    store_text t = {0};
    pg_query q;
    PGresult *res = NULL;
    /* a page after a cursor: the plan of every page but the first */
    rmqs_rc rc =
        build(f, count ? Q_COUNT : Q_ROWS, count ? NULL : &cur,
              count ? STORE_COUNT_CAP_DEFAULT + 1 : 51, q_by_index(b, f), &q);

    if (rc == RMQS_OK)
        res = run(b, "explain", "EXPLAIN (FORMAT JSON) ", &q, &rc);
    if (rc == RMQS_OK) {
        if (PQntuples(res) >= 1)
            store_text_add(&t, "%s\n%.*s\n", q.sql, PQgetlength(res, 0, 0),
                           PQgetvalue(res, 0, 0));
        rc = t.failed || t.text == NULL ? RMQS_ENOMEM : RMQS_OK;
    }
    PQclear(res);
    query_free(&q);
    if (rc != RMQS_OK) {
        free(t.text);
        return rc;
    }
    *plan_out = t.text;
    return RMQS_OK;
}

rmqs_rc pg_failures(store_backend *b, size_t limit, store_failure **rows,
                    size_t *n)
{
    char num[24];
    const char *vals[1] = {pg_i64(num, (int64_t)limit)};
    int lens[1] = {0}, fmts[1] = {0};
    store_failure *out = NULL;
    PGresult *res = NULL;
    size_t k = 0, m;
    rmqs_rc rc;
    pg_conn *pc = searcher(b, &rc);

    *rows = NULL;
    *n = 0;
    if (rc == RMQS_OK)
        res = pg_exec(pc, "failures",
                      "SELECT id, exchange, substr(last_error, 1, 512), "
                      "failed_at FROM jobs WHERE status = 3 AND failed_at IS "
                      "NOT NULL ORDER BY failed_at DESC LIMIT $1::bigint",
                      1, vals, lens, fmts, &rc);
    pg_done(pc);
    if (rc != RMQS_OK) {
        PQclear(res);
        return rc;
    }
    m = (size_t)PQntuples(res);
    if (m > 0 && (out = calloc(m, sizeof(*out))) == NULL)
        rc = RMQS_ENOMEM;
    for (; rc == RMQS_OK && k < m; k++) {
        store_failure *f = &out[k];
        if (PQgetlength(res, (int)k, 0) == JOB_ID_BYTES)
            job_id_format((const unsigned char *)PQgetvalue(res, (int)k, 0),
                          f->id);
        f->exchange = strdup(PQgetvalue(res, (int)k, 1));
        if (!PQgetisnull(res, (int)k, 2))
            f->error = strdup(PQgetvalue(res, (int)k, 2));
        f->failed_at = pg_int(res, (int)k, 3);
        if (f->exchange == NULL ||
            (!PQgetisnull(res, (int)k, 2) && f->error == NULL))
            rc = RMQS_ENOMEM;
    }
    PQclear(res);
    if (rc != RMQS_OK) {
        store_failures_free(out, m);
        return rc;
    }
    *rows = out;
    *n = m;
    return RMQS_OK;
}
