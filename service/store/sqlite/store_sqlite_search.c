/*
 * store_sqlite_search.c - GET /jobs and GET /jobs/count with the search's
 * filters (issue 14) on SQLite: the query is built for the filter that
 * arrives, so it names the one index that answers it, and store_explain
 * shows its plan (tests/unit/test_store_search.c).
 *
 * Why a room of its own: the filters combine (exchange AND a due range AND
 * a status...), so one prepared statement per combination would be
 * hundreds; a statement with "(? IS NULL OR x = ?)" for each lets the
 * planner pick no index at all. Instead each call writes the WHERE clause
 * of the filters set and picks the driving index by a fixed order, most
 * selective first (migrations/sqlite/0007_search.sql has the indexes):
 *
 *   header      job_headers' primary key (name, value, job) -> the jobs
 *               by rowid, sorted (NOT INDEXED keeps the rowid lookups and
 *               nothing else)
 *   q           jobs_body_fts (trigram) -> the jobs by rowid, sorted, and
 *               checked bytewise with instr() (exact; text bodies only);
 *               a page or count of a common term (Q_DENSE_MIN of the newest
 *               Q_SAMPLE jobs match) instead walks the next driver below
 *               in order and checks instr() on each job
 *
 *               Both side tables hold the jobs up to search_index.mark
 *               (store_sqlite_indexer.c fills them off the insert path):
 *               the jobs above it, a rowid range as long as the indexer's
 *               lag, are added to the candidates and checked directly
 *               (json_each of the headers; instr() of the body).
 *   message_id  jobs_message_id, sorted
 *   schedule    jobs_schedule (schedule, deliver_at, seq): in order
 *   held_by     jobs_held_by (held_by, deliver_at, seq): in order
 *   exchange    jobs_exchange (exchange, deliver_at, seq): in order
 *   routing_key jobs_routing_key (routing_key, deliver_at, seq): in order
 *   id_prefix   jobs_id (a range of ids), sorted, when the range holds at
 *               most ID_DRIVE_MAX ids (UUIDv7 ids start with their
 *               creation time, so a short prefix can hold every job: then
 *               the next driver walks in order and checks the id range)
 *   source      jobs_source (source, deliver_at, seq): in order
 *   status      jobs_status_deliver (status, deliver_at, seq): in order
 *   (none)      jobs_deliver (deliver_at, seq): in order
 *
 * Orders (store_order, GET /jobs?order=): -due walks the same indexes
 * backwards; created and -created walk the rowid (no filter),
 * jobs_status_seq or jobs_schedule_seq forwards or backwards, and sort the
 * rows of any other driver (driver_of).
 *
 * Every other filter set is checked on the rows the driver yields; the
 * deliver range and the cursor are ranges of the driver's index whenever
 * it is in listing order. A count is "SELECT count(*) FROM (... LIMIT
 * cap + 1)" over the same driver, so it stops after cap + 1 rows.
 *
 * Statements are prepared per call (tens of microseconds against the
 * milliseconds of a search) on a search connection of their own (sr_db:
 * WAL readers, opened on first use), never under st->mu: a broad search
 * over a million jobs must not hold every write behind it. A progress
 * handler ends it at the search budget (SQLITE_INTERRUPT, RMQS_ETIMEDOUT);
 * a count counts the rows it walks, so one that runs out answers what it
 * counted so far, capped.
 */
#include "store_sqlite_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"

/* jobs_id drives an id_prefix search up to this many ids in the range. */
#define ID_DRIVE_MAX 10000

/* A list or count under q samples the newest Q_SAMPLE jobs: when at least
 * Q_DENSE_MIN of them match, walking the listing order and checking each
 * job finds a page in about limit * Q_SAMPLE / matches rows (a count: its
 * cap's worth), far fewer than the trigram index would yield (a common
 * term's postings are most of the table, all sorted before the first
 * page, each looked up in jobs). */
#define Q_SAMPLE 1000
#define Q_DENSE_MIN 100

/* Parameter numbers, fixed so binding does not depend on the clause. */
enum {
    P_LIMIT = 1,
    P_CUR_AT,
    P_CUR_SEQ,
    P_STATUS,
    P_SOURCE,
    P_MESSAGE_ID,
    P_SCHEDULE,
    P_EXCHANGE,
    P_ROUTING_KEY,
    P_FROM,
    P_TO,
    P_ID_LO,
    P_ID_HI,
    P_HNAME,
    P_HVALUE,
    P_FTS,
    P_Q,
    P_HELD_BY
};

typedef struct search_sql {
    char sql[2048];
    size_t at;
    bool overflow;
    /* what to bind */
    unsigned char lo[JOB_ID_BYTES], hi[JOB_ID_BYTES];
    bool has_id, has_hi;
    char *fts; /* malloc'd MATCH phrase, or NULL */
} search_sql;

static void add(search_sql *q, const char *text)
{
    size_t n = strlen(text);

    if (q->at + n + 1 > sizeof(q->sql)) {
        q->overflow = true;
        return;
    }
    memcpy(q->sql + q->at, text, n + 1);
    q->at += n;
}

/* q as an FTS5 phrase: in double quotes, each '"' doubled (malloc'd). */
static char *fts_phrase(const char *text)
{
    size_t n = strlen(text), j = 0;
    char *out = malloc(2 * n + 3);

    if (out == NULL)
        return NULL;
    out[j++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '"')
            out[j++] = '"';
        out[j++] = text[i];
    }
    out[j++] = '"';
    out[j] = '\0';
    return out;
}

/* How many of the newest Q_SAMPLE jobs have q in their text body; -1 on
 * failure. */
static int64_t q_sample(sqlite3 *db, const char *text)
{
    sqlite3_stmt *s = NULL;
    int64_t n = -1;
    int rc = sqlite3_prepare_v2(
        db,
        "SELECT count(*) FROM (SELECT body_kind, body FROM jobs ORDER BY seq "
        "DESC LIMIT ?2) WHERE body_kind < 2 AND instr(body, ?1) > 0",
        -1, &s, NULL);

    if (rc != SQLITE_OK) {
        (void)sq_fail_on(db, rc, "search_q_sample");
        return -1;
    }
    sqlite3_bind_blob(s, 1, text, (int)strlen(text), SQLITE_STATIC);
    sqlite3_bind_int(s, 2, Q_SAMPLE);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        n = sqlite3_column_int64(s, 0);
    else
        (void)sq_fail_on(db, rc, "search_q_sample");
    sqlite3_finalize(s);
    return n;
}

/* How many ids (up to ID_DRIVE_MAX + 1) are in [lo, hi): a range count
 * of jobs_id. -1 on failure. */
static int64_t id_range_count(sqlite3 *db, const search_sql *q)
{
    sqlite3_stmt *s = NULL;
    int64_t n = -1;
    int rc = sqlite3_prepare_v2(
        db,
        q->has_hi ? "SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY "
                    "jobs_id WHERE id >= ?1 AND id < ?2 LIMIT ?3)"
                  : "SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY "
                    "jobs_id WHERE id >= ?1 LIMIT ?3)",
        -1, &s, NULL);

    if (rc != SQLITE_OK) {
        (void)sq_fail_on(db, rc, "search_id_range");
        return -1;
    }
    sqlite3_bind_blob(s, 1, q->lo, JOB_ID_BYTES, SQLITE_STATIC);
    if (q->has_hi)
        sqlite3_bind_blob(s, 2, q->hi, JOB_ID_BYTES, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, ID_DRIVE_MAX + 1);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        n = sqlite3_column_int64(s, 0);
    else
        (void)sq_fail_on(db, rc, "search_id_range");
    sqlite3_finalize(s);
    return n;
}

typedef enum driver {
    D_HEADER,
    D_Q,
    D_MESSAGE_ID,
    D_SCHEDULE,
    D_HELD_BY,
    D_EXCHANGE,
    D_ROUTING_KEY,
    D_ID,
    D_SOURCE,
    D_STATUS,
    D_ALL
} driver;

static const char *const driver_from[] = {
    [D_HEADER] = "jobs NOT INDEXED",
    [D_Q] = "jobs NOT INDEXED",
    [D_MESSAGE_ID] = "jobs INDEXED BY jobs_message_id",
    [D_SCHEDULE] = "jobs INDEXED BY jobs_schedule",
    [D_HELD_BY] = "jobs INDEXED BY jobs_held_by",
    [D_EXCHANGE] = "jobs INDEXED BY jobs_exchange",
    [D_ROUTING_KEY] = "jobs INDEXED BY jobs_routing_key",
    [D_ID] = "jobs INDEXED BY jobs_id",
    [D_SOURCE] = "jobs INDEXED BY jobs_source",
    [D_STATUS] = "jobs INDEXED BY jobs_status_deliver",
    [D_ALL] = "jobs INDEXED BY jobs_deliver",
};

/* A page's ORDER BY and its cursor's range, by store_order: every index
 * that drives a page ends in (deliver_at, seq) or (seq), walked forwards
 * or backwards. */
static const char *const order_by[] = {
    [STORE_ORDER_DUE] = " ORDER BY deliver_at, seq",
    [STORE_ORDER_DUE_DESC] = " ORDER BY deliver_at DESC, seq DESC",
    [STORE_ORDER_CREATED] = " ORDER BY seq",
    [STORE_ORDER_CREATED_DESC] = " ORDER BY seq DESC",
};
static const char *const order_after[] = {
    [STORE_ORDER_DUE] = " AND (deliver_at, seq) > (?2, ?3)",
    [STORE_ORDER_DUE_DESC] = " AND (deliver_at, seq) < (?2, ?3)",
    [STORE_ORDER_CREATED] = " AND seq > ?3",
    [STORE_ORDER_CREATED_DESC] = " AND seq < ?3",
};

/* The FROM of driver d for f's order: a page in insertion order walks
 * the rowid (no filter; NOT INDEXED), jobs_status_seq (status) or
 * jobs_schedule_seq (schedule) (migrations/sqlite/0010); with a due range
 * and nothing else, jobs_deliver's range, sorted; every other driver
 * yields its rows in due order, sorted by seq (the temp B-tree of a
 * filter the dashboard does not open in that order). A count is in no
 * order. */
static const char *driver_of(const store_filter *f, driver d, bool count)
{
    bool created =
        f->order == STORE_ORDER_CREATED || f->order == STORE_ORDER_CREATED_DESC;

    if (count || !created)
        return driver_from[d];
    if (d == D_ALL)
        return f->has_deliver_from || f->has_deliver_to ? driver_from[D_ALL]
                                                        : "jobs NOT INDEXED";
    if (d == D_STATUS)
        return "jobs INDEXED BY jobs_status_seq";
    if (d == D_SCHEDULE)
        return "jobs INDEXED BY jobs_schedule_seq";
    return driver_from[d];
}

/*
 * Build the statement for f into *q: a page (count false: JOB_COLS in
 * listing order after the cursor when after is set, LIMIT ?1) or a count
 * (count(*) of at most ?1 rows). RMQS_OK, or a failure of the id probe.
 */
static rmqs_rc build(sqlite3 *db, const store_filter *f, bool count, bool after,
                     search_sql *q)
{
    driver d;
    bool q_index = f->q != NULL; /* q's candidates from jobs_body_fts */

    memset(q, 0, sizeof(*q));
    if (f->id_prefix[0] != '\0') {
        q->has_id = true;
        q->has_hi = store_id_prefix_range(f->id_prefix, q->lo, q->hi);
    }
    if (f->q != NULL && (q->fts = fts_phrase(f->q)) == NULL)
        return RMQS_ENOMEM;

    if (f->q != NULL && f->header_name == NULL) {
        int64_t m = q_sample(db, f->q);
        if (m < 0)
            return sqlite3_errcode(db) == SQLITE_INTERRUPT ? RMQS_ETIMEDOUT
                                                           : RMQS_EDB;
        q_index = m < Q_DENSE_MIN;
    }
    if (f->header_name != NULL)
        d = D_HEADER;
    else if (q_index)
        d = D_Q;
    else if (f->message_id != NULL)
        d = D_MESSAGE_ID;
    else if (f->schedule != NULL)
        d = D_SCHEDULE;
    else if (f->held_by != NULL)
        d = D_HELD_BY;
    else if (f->exchange != NULL)
        d = D_EXCHANGE;
    else if (f->routing_key != NULL)
        d = D_ROUTING_KEY;
    else
        d = D_SOURCE; /* for now: id, source, status or all below */
    if (d == D_SOURCE && q->has_id) {
        int64_t in_range = count ? 0 : id_range_count(db, q);
        if (in_range < 0)
            return sqlite3_errcode(db) == SQLITE_INTERRUPT ? RMQS_ETIMEDOUT
                                                           : RMQS_EDB;
        if (in_range <= ID_DRIVE_MAX)
            d = D_ID; /* a count never sorts: always the id range */
    }
    if (d == D_SOURCE && f->source < 0)
        d = f->status >= 0 ? D_STATUS : D_ALL;

    add(q, count ? "SELECT 1 FROM " : "SELECT " JOB_COLS " FROM ");
    add(q, driver_of(f, d, count));
    add(q, " WHERE true");
    /* the side tables up to the mark, the tail above it checked here */
    if (f->header_name != NULL)
        add(q, " AND seq IN (SELECT job_seq FROM job_headers WHERE "
               "name = ?14 AND value = ?15 UNION ALL SELECT t.seq FROM jobs "
               "AS t WHERE t.seq > (SELECT mark FROM search_index) AND "
               "t.headers IS NOT NULL AND EXISTS (SELECT 1 FROM "
               "json_each(t.headers) AS h WHERE h.key = ?14 AND "
               "h.type = 'text' AND h.value = ?15))");
    if (q_index)
        add(q, " AND seq IN (SELECT rowid FROM jobs_body_fts WHERE "
               "jobs_body_fts MATCH ?16 UNION ALL SELECT t.seq FROM jobs AS t "
               "WHERE t.seq > (SELECT mark FROM search_index))");
    if (f->q != NULL)
        add(q, " AND body_kind < 2 AND instr(body, ?17) > 0");
    if (f->message_id != NULL)
        add(q, " AND message_id = ?6");
    if (f->schedule != NULL)
        add(q, " AND schedule = ?7");
    if (f->held_by != NULL)
        add(q, " AND held_by = ?18");
    if (f->exchange != NULL)
        add(q, " AND exchange = ?8");
    if (f->routing_key != NULL)
        add(q, " AND routing_key = ?9");
    if (q->has_id)
        add(q, q->has_hi ? " AND id >= ?12 AND id < ?13" : " AND id >= ?12");
    if (f->source >= 0)
        add(q, " AND source = ?5");
    if (f->status >= 0)
        add(q, " AND status = ?4");
    if (f->has_deliver_from)
        add(q, " AND deliver_at >= ?10");
    if (f->has_deliver_to)
        add(q, " AND deliver_at < ?11");
    if (!count && after)
        add(q, order_after[f->order]);
    /* ?1: P_LIMIT */
    if (!count)
        add(q, order_by[f->order]);
    add(q, " LIMIT ?1");
    return q->overflow ? RMQS_ENOMEM : RMQS_OK;
}

static void bind(sqlite3_stmt *s, const store_filter *f, const search_sql *q,
                 int64_t limit, const store_cursor *after)
{
    sqlite3_bind_int64(s, P_LIMIT, limit);
    if (after) {
        sqlite3_bind_int64(s, P_CUR_AT, after->deliver_at);
        sqlite3_bind_int64(s, P_CUR_SEQ, after->seq);
    }
    if (f->status >= 0)
        sqlite3_bind_int(s, P_STATUS, f->status);
    if (f->source >= 0)
        sqlite3_bind_int(s, P_SOURCE, f->source);
    if (f->message_id)
        sqlite3_bind_text(s, P_MESSAGE_ID, f->message_id, -1, SQLITE_STATIC);
    if (f->schedule)
        sqlite3_bind_text(s, P_SCHEDULE, f->schedule, -1, SQLITE_STATIC);
    if (f->held_by)
        sqlite3_bind_text(s, P_HELD_BY, f->held_by, -1, SQLITE_STATIC);
    if (f->exchange)
        sqlite3_bind_text(s, P_EXCHANGE, f->exchange, -1, SQLITE_STATIC);
    if (f->routing_key)
        sqlite3_bind_text(s, P_ROUTING_KEY, f->routing_key, -1, SQLITE_STATIC);
    if (f->has_deliver_from)
        sqlite3_bind_int64(s, P_FROM, f->deliver_from);
    if (f->has_deliver_to)
        sqlite3_bind_int64(s, P_TO, f->deliver_to);
    if (q->has_id) {
        sqlite3_bind_blob(s, P_ID_LO, q->lo, JOB_ID_BYTES, SQLITE_STATIC);
        if (q->has_hi)
            sqlite3_bind_blob(s, P_ID_HI, q->hi, JOB_ID_BYTES, SQLITE_STATIC);
    }
    if (f->header_name) {
        sqlite3_bind_text(s, P_HNAME, f->header_name, (int)f->header_name_len,
                          SQLITE_STATIC);
        sqlite3_bind_text(s, P_HVALUE, f->header_value, -1, SQLITE_STATIC);
    }
    if (f->q) {
        sqlite3_bind_text(s, P_FTS, q->fts, -1, SQLITE_STATIC);
        /* a blob: instr() compares the body's bytes with these */
        sqlite3_bind_blob(s, P_Q, f->q, (int)strlen(f->q), SQLITE_STATIC);
    }
}

/* Prepare q's statement (prefix: "" or "EXPLAIN QUERY PLAN "). */
static rmqs_rc prepare(sqlite3 *db, const search_sql *q, const char *prefix,
                       sqlite3_stmt **out)
{
    char sql[sizeof(q->sql) + 32];
    int rc;

    snprintf(sql, sizeof sql, "%s%s", prefix, q->sql);
    rc = sqlite3_prepare_v2(db, sql, -1, out, NULL);
    return rc == SQLITE_OK ? RMQS_OK : sq_fail_on(db, rc, "search_prepare");
}

/* ---- the search connections ---- */

typedef struct searcher {
    int64_t deadline_ms; /* tu_mono_ms(), or 0: none */
    int i;               /* which of st->sr_db */
} searcher;

static int past_budget(void *cls)
{
    const searcher *s = cls;

    return s->deadline_ms > 0 && tu_mono_ms() > s->deadline_ms;
}

/* Take a search connection (a free one, else wait for the next in turn),
 * opening it on first use, with the budget's progress handler set. Returns
 * its handle, or NULL (RMQS_EDB logged in *rc) with none held. */
static sqlite3 *search_begin(store_backend *st, searcher *sr, rmqs_rc *rc)
{
    int i;

    for (i = 0; i < SQ_SEARCHERS; i++)
        if (pthread_mutex_trylock(&st->sr_mu[i]) == 0)
            break;
    if (i == SQ_SEARCHERS) {
        i = (int)(atomic_fetch_add(&st->sr_next, 1) % SQ_SEARCHERS);
        pthread_mutex_lock(&st->sr_mu[i]);
    }
    sr->i = i;
    if (st->sr_db[i] == NULL) {
        int r = sqlite3_open_v2(st->path, &st->sr_db[i],
                                SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                                    SQLITE_OPEN_EXRESCODE,
                                NULL);
        if (r == SQLITE_OK) {
            sqlite3_busy_timeout(st->sr_db[i], BUSY_TIMEOUT_MS);
            r = sq_run_once(st->sr_db[i], "PRAGMA query_only = 1", NULL, 0);
        }
        if (r != SQLITE_OK) {
            *rc = sq_fail_on(st->sr_db[i], r, "search_open");
            sqlite3_close(st->sr_db[i]);
            st->sr_db[i] = NULL;
            pthread_mutex_unlock(&st->sr_mu[i]);
            return NULL;
        }
    }
    sr->deadline_ms =
        st->search_budget_ms > 0 ? tu_mono_ms() + st->search_budget_ms : 0;
    /* every 1000 virtual machine steps: tens of microseconds apart */
    sqlite3_progress_handler(st->sr_db[i], 1000, past_budget, sr);
    *rc = RMQS_OK;
    return st->sr_db[i];
}

static void search_end(store_backend *st, searcher *sr)
{
    sqlite3_progress_handler(st->sr_db[sr->i], 0, NULL, NULL);
    pthread_mutex_unlock(&st->sr_mu[sr->i]);
}

rmqs_rc sq_search_list(store_backend *st, const store_filter *f, size_t limit,
                       size_t max_bytes, const store_cursor *after,
                       job_t **jobs_out, size_t *n_out, bool *more,
                       store_cursor *last)
{
    search_sql q = {0};
    sqlite3_stmt *s = NULL;
    searcher sr;
    sqlite3 *db;
    rmqs_rc out;

    *jobs_out = NULL;
    *n_out = 0;
    *more = false;
    if (limit > (size_t)INT64_MAX - 1)
        limit = (size_t)INT64_MAX - 1;
    db = search_begin(st, &sr, &out);
    if (db == NULL)
        return out;
    out = build(db, f, false, after != NULL, &q);
    if (out == RMQS_OK)
        out = prepare(db, &q, "", &s);
    if (out == RMQS_OK) {
        bind(s, f, &q, (int64_t)limit + 1, after); /* one more: a next page? */
        out = sq_collect_page(st, s, "search_list", limit, max_bytes, jobs_out,
                              n_out, more, last);
    }
    sqlite3_finalize(s);
    search_end(st, &sr);
    free(q.fts);
    return out;
}

rmqs_rc sq_count(store_backend *st, const store_filter *f, int64_t cap,
                 int64_t *count, bool *capped)
{
    search_sql q = {0};
    sqlite3_stmt *s = NULL;
    searcher sr;
    sqlite3 *db;
    rmqs_rc out;
    int64_t n = 0;
    int rc;

    db = search_begin(st, &sr, &out);
    if (db == NULL)
        return out;
    out = build(db, f, true, false, &q);
    if (out == RMQS_OK)
        out = prepare(db, &q, "", &s);
    if (out == RMQS_OK) {
        bind(s, f, &q, cap < INT64_MAX ? cap + 1 : cap, NULL);
        while ((rc = sqlite3_step(s)) == SQLITE_ROW)
            n++;
        if (rc == SQLITE_DONE) {
            *capped = n > cap;
            *count = *capped ? cap : n;
        } else if ((rc & 0xff) == SQLITE_INTERRUPT) {
            *capped = true; /* at least the n counted within the budget */
            *count = n < cap ? n : cap;
        } else {
            out = sq_fail_on(db, rc, "search_count");
        }
    }
    if (out == RMQS_ETIMEDOUT) { /* the plan's probe ran out: nothing counted */
        *capped = true;
        *count = 0;
        out = RMQS_OK;
    }
    sqlite3_finalize(s);
    search_end(st, &sr);
    free(q.fts);
    return out;
}

rmqs_rc sq_explain(store_backend *st, const store_filter *f, bool count,
                   char **plan_out)
{
    static const store_filter all = {.status = -1, .source = -1};
    search_sql q = {0};
    sqlite3_stmt *s = NULL;
    searcher sr;
    sqlite3 *db;
    store_text t = {0};
    /* a page after a cursor: 0 ascending, the end descending */
    bool desc = f != NULL && (f->order == STORE_ORDER_DUE_DESC ||
                              f->order == STORE_ORDER_CREATED_DESC);
    store_cursor cur = {desc ? INT64_MAX : 0, desc ? INT64_MAX : 0,
                        STORE_ORDER_DUE};
    rmqs_rc out;
    int rc;

    if (f == NULL)
        f = &all;
    db = search_begin(st, &sr, &out);
    if (db == NULL)
        return out;
    /* a page after a cursor: the plan of every page but the first */
    out = build(db, f, count, !count, &q);
    if (out == RMQS_OK)
        out = prepare(db, &q, "EXPLAIN QUERY PLAN ", &s);
    if (out == RMQS_OK) {
        bind(s, f, &q, count ? STORE_COUNT_CAP_DEFAULT + 1 : 51,
             count ? NULL : &cur);
        store_text_add(&t, "%s\n", q.sql);
        while ((rc = sqlite3_step(s)) == SQLITE_ROW)
            store_text_add(&t, "%s\n", (const char *)sqlite3_column_text(s, 3));
        if (rc != SQLITE_DONE)
            out = sq_fail_on(db, rc, "search_explain");
        else if (t.failed)
            out = RMQS_ENOMEM;
    }
    sqlite3_finalize(s);
    search_end(st, &sr);
    free(q.fts);
    if (out != RMQS_OK) {
        free(t.text);
        return out;
    }
    *plan_out = t.text;
    return RMQS_OK;
}

/* The newest failed jobs by jobs_failed_at (partial: "status = 3" written
 * as a literal so the planner may use it), on a search connection. */
rmqs_rc sq_failures(store_backend *st, size_t limit, store_failure **rows,
                    size_t *n)
{
    sqlite3_stmt *s = NULL;
    store_failure *out = NULL;
    size_t cap = 0, k = 0;
    searcher sr;
    sqlite3 *db;
    rmqs_rc rc;
    int src;

    *rows = NULL;
    *n = 0;
    db = search_begin(st, &sr, &rc);
    if (db == NULL)
        return rc;
    src = sqlite3_prepare_v2(
        db,
        "SELECT id, exchange, substr(last_error, 1, 512), failed_at FROM "
        "jobs INDEXED BY jobs_failed_at WHERE status = 3 AND failed_at IS "
        "NOT NULL ORDER BY failed_at DESC LIMIT ?1",
        -1, &s, NULL);
    if (src != SQLITE_OK) {
        rc = sq_fail_on(db, src, "failures");
        goto out;
    }
    sqlite3_bind_int64(s, 1, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        const void *id = sqlite3_column_blob(s, 0);
        const char *ex = (const char *)sqlite3_column_text(s, 1);
        const char *err = (const char *)sqlite3_column_text(s, 2);
        store_failure *f;

        if (k == cap) {
            store_failure *g = store_grow(out, &cap, sizeof(*out));
            if (g == NULL) {
                rc = RMQS_ENOMEM;
                goto out;
            }
            out = g;
        }
        f = &out[k];
        memset(f, 0, sizeof(*f));
        if (id != NULL && sqlite3_column_bytes(s, 0) == JOB_ID_BYTES)
            job_id_format(id, f->id);
        f->exchange = strdup(ex != NULL ? ex : "");
        f->error = err != NULL ? strdup(err) : NULL;
        f->failed_at = sqlite3_column_int64(s, 3);
        k++;
        if (f->exchange == NULL || (err != NULL && f->error == NULL)) {
            rc = RMQS_ENOMEM;
            goto out;
        }
    }
    if (src != SQLITE_DONE)
        rc = sq_fail_on(db, src, "failures"); /* RMQS_ETIMEDOUT: the budget */
out:
    sqlite3_finalize(s);
    search_end(st, &sr);
    if (rc != RMQS_OK) {
        store_failures_free(out, k);
        return rc;
    }
    *rows = out;
    *n = k;
    return RMQS_OK;
}
