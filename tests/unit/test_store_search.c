/*
 * test_store_search.c - the search's filters of the store (issue 14): each
 * filter and combinations select exactly the jobs they name, on both
 * stores (BOTH, testutil.h); on SQLite alone, EXPLAIN QUERY PLAN of every
 * filter kind (and of status + each one) uses an index, never a bare
 * "SCAN jobs", and the side tables (job_headers, jobs_body_fts) follow
 * the purge and the rowid (PostgreSQL's plans: test_store_pg_search.c).
 * The side tables are filled off the insert path (the indexer of each
 * backend): the store is opened with index_manual, so each test says how
 * far the index is (nothing, part, all) and the results must not depend
 * on it; one test lets the indexer thread catch up by itself.
 * Jobs are ut_search_job's (testutil.h), so what each filter must select
 * is a rule on the job number.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "testutil.h"

#define N_JOBS 2000

static ut_both g_b;
static store_t *g_st;

static void fill(store_t *st, int from, int to)
{
    int n = to - from + 1;
    job_t *jobs = calloc((size_t)n, sizeof(*jobs));
    store_insert_req req = {.jobs = jobs, .n = (size_t)n};

    cr_assert_not_null(jobs);
    for (int i = 0; i < n; i++)
        ut_search_job(&jobs[i], from + i);
    cr_assert_eq(store_insert_batch(st, &req, 1), RMQS_OK);
    cr_assert_eq(req.rc, RMQS_OK);
    for (int i = 0; i < n; i++)
        job_clear(&jobs[i]);
    free(jobs);
}

static void setup(void)
{
    ut_both_init(&g_b, "search");
    g_st = NULL;
}

static void teardown(void)
{
    ut_both_fini(&g_b);
    g_st = NULL;
}

TestSuite(store_search, .init = setup, .fini = teardown, .timeout = 120);

/* The store of this case, opened with index_manual and filled with
 * N_JOBS jobs, none indexed yet. */
static void open_filled(bool pg)
{
    store_options opt = {.synchronous_full = false, .index_manual = true};

    g_st = ut_both_open(&g_b, pg, &opt);
    for (int from = 1; from <= N_JOBS; from += 500)
        fill(g_st, from, from + 499);
}

/* Each case body runs once per store (testutil.h); a Test(store_search,
 * ...) case is about SQLite's side tables or plans alone
 * (test_store_pg_search.c holds PostgreSQL's). */
#define BOTH(name) UT_BOTH(store_search, name, open_filled)

static store_filter any(void)
{
    return (store_filter){.status = -1, .source = -1};
}

/* Job number of a listed job: deliver_at is 1000000 + 1000 n. */
static int number_of(const job_t *j)
{
    return (int)((j->deliver_at - 1000000) / 1000);
}

/* Page through f (pages of 37) and check the jobs are exactly those n in
 * 1..N_JOBS with want(n), in order, and that store_count agrees. */
static void expect(const store_filter *f, bool (*want)(int), const char *what)
{
    char *after = NULL;
    int expected = 0, seen = 0, next_n = 1;
    int64_t count;
    bool capped;

    for (int n = 1; n <= N_JOBS; n++)
        expected += want(n);
    do {
        job_t *jobs = NULL;
        size_t got = 0;
        char *next = NULL;
        cr_assert_eq(store_list(g_st, f, 37, after, &jobs, &got, &next),
                     RMQS_OK, "%s", what);
        for (size_t i = 0; i < got; i++) {
            int n = number_of(&jobs[i]);
            while (next_n <= N_JOBS && !want(next_n))
                next_n++;
            cr_assert_eq(n, next_n, "%s: job %d listed, %d expected", what, n,
                         next_n);
            next_n++;
            seen++;
        }
        ut_jobs_free(jobs, got);
        free(after);
        after = next;
    } while (after != NULL);
    cr_expect_eq(seen, expected, "%s: %d listed, %d expected", what, seen,
                 expected);
    cr_assert_eq(store_count(g_st, f, 1000000, &count, &capped), RMQS_OK);
    cr_expect_eq(count, expected, "%s: counted %lld", what, (long long)count);
    cr_expect_not(capped, "%s", what);
    if (expected > 1) {
        cr_assert_eq(store_count(g_st, f, expected - 1, &count, &capped),
                     RMQS_OK);
        cr_expect(capped && count == expected - 1, "%s: cap", what);
    }
}

static bool ex1(int n)
{
    return n % 3 == 1;
}
static bool rk2(int n)
{
    return n % 5 == 2;
}
static bool ex1_rk2(int n)
{
    return ex1(n) && rk2(n);
}
static bool failed(int n)
{
    return n % 10 == 1;
}
static bool failed_ex1(int n)
{
    return failed(n) && ex1(n);
}
static bool range(int n)
{
    return n >= 100 && n < 250;
}
static bool range_ex1(int n)
{
    return range(n) && ex1(n);
}
static bool tenant3(int n)
{
    return n % 7 == 3;
}
static bool tenant3_pending(int n)
{
    return tenant3(n) && n % 10 > 1;
}
static bool script(int n)
{
    return n % 4 == 0;
}
static bool needle(int n)
{
    return n % 4 == 1;
} /* JSON; binary never */
static bool needle_rk2(int n)
{
    return needle(n) && rk2(n);
}
static bool one(int n)
{
    return n == 1233;
}
static bool none(int n)
{
    (void)n;
    return false;
}

/* Index up to limit more jobs (in batches of 300); how many were. */
static size_t index_some(size_t limit)
{
    size_t total = 0, n;

    do {
        size_t want = limit - total < 300 ? limit - total : 300;
        if (want == 0)
            break;
        cr_assert_eq(store_search_index(g_st, want, &n), RMQS_OK);
        total += n;
    } while (n > 0);
    return total;
}

static void each_filter(void);

BOTH(each_filter_selects_exactly_its_jobs)
{
    /* nothing indexed: every job is in the tail */
    cr_expect_eq(store_search_index_lag(g_st), N_JOBS);
    each_filter();
    /* part: the index and the tail */
    cr_assert_eq(index_some(777), 777);
    cr_expect_eq(store_search_index_lag(g_st), N_JOBS - 777);
    each_filter();
    /* all: the index alone */
    cr_assert_eq(index_some(SIZE_MAX), N_JOBS - 777);
    cr_expect_eq(store_search_index_lag(g_st), 0);
    cr_expect_eq(index_some(10), 0, "nothing left to index");
    /* SQLite: one string header per job (n is a number); PostgreSQL: one
     * job_text row per job */
    cr_expect_eq(ut_both_int(&g_b, g_b.pg ? "SELECT count(*) FROM job_text"
                                          : "SELECT count(*) FROM job_headers"),
                 N_JOBS, "side table rows");
    each_filter();
}

static void each_filter(void)
{
    store_filter f;

    f = any();
    f.exchange = "ex1";
    expect(&f, ex1, "exchange");
    f = any();
    f.routing_key = "rk2";
    expect(&f, rk2, "routing_key");
    f = any();
    f.exchange = "ex1";
    f.routing_key = "rk2";
    expect(&f, ex1_rk2, "exchange+routing_key");
    f = any();
    f.status = JOB_FAILED;
    f.exchange = "ex1";
    expect(&f, failed_ex1, "status+exchange");
    f = any();
    f.has_deliver_from = true;
    f.deliver_from = 1000000 + 100 * 1000;
    f.has_deliver_to = true;
    f.deliver_to = 1000000 + 250 * 1000;
    expect(&f, range, "deliver range (from inclusive, to exclusive)");
    f.exchange = "ex1";
    expect(&f, range_ex1, "deliver range+exchange");
    f = any();
    f.header_name = "tenant:t3";
    f.header_name_len = 6;
    f.header_value = "t3";
    expect(&f, tenant3, "header");
    f.status = JOB_PENDING;
    expect(&f, tenant3_pending, "header+status");
    f = any();
    f.header_name = "n:5";
    f.header_name_len = 1;
    f.header_value = "5";
    expect(&f, none, "header: a number is not a string header");
    f = any();
    f.q = "<script>";
    expect(&f, script, "q <script>");
    f = any();
    f.q = "Needle";
    expect(&f, needle, "q on JSON, not binary");
    f.routing_key = "rk2";
    expect(&f, needle_rk2, "q+routing_key");
    f = any();
    f.q = "needle";
    expect(&f, none, "q is case-sensitive; binary never");
    f = any();
    f.q = "Needle 1233\"}";
    expect(&f, one, "q with a quote");
    f = any();
    f.status = JOB_FAILED;
    expect(&f, failed, "status alone");
}

BOTH(id_prefix_is_a_range_of_ids)
{
    char id[JOB_ID_LEN + 1], hex[33];
    store_filter f = any();
    job_t *jobs = NULL;
    size_t n = 0, k = 0;
    char *next = NULL;

    ut_job_id(1234, id);
    for (const char *p = id; *p; p++)
        if (*p != '-')
            hex[k++] = *p;
    hex[k] = '\0';
    /* the whole id, then shorter prefixes: job 1234 is always among them */
    for (size_t len = 32; len >= 4; len -= 4) {
        memcpy(f.id_prefix, hex, len);
        f.id_prefix[len] = '\0';
        cr_assert_eq(store_list(g_st, &f, 5000, NULL, &jobs, &n, &next),
                     RMQS_OK);
        bool found = false;
        for (size_t i = 0; i < n; i++) {
            cr_expect_eq(strncmp(jobs[i].id, id, 8 < len ? 8 : len), 0);
            found = found || strcmp(jobs[i].id, id) == 0;
        }
        cr_expect(found, "prefix of %zu digits", len);
        if (len == 32)
            cr_expect_eq(n, 1);
        ut_jobs_free(jobs, n);
        free(next);
    }
}

/* The plan of f (list and count) names want and never scans jobs bare (a
 * count of the status alone reads job_counts: only its list). */
static void check_plan(const store_filter *f, const char *want,
                       const char *what)
{
    bool status_only = strncmp(what, "status alone", 12) == 0;

    for (int count = 0; count < (status_only ? 1 : 2); count++) {
        char *plan = NULL;
        cr_assert_eq(store_explain(g_st, f, count, &plan), RMQS_OK, "%s", what);
        bool bare_scan = false;
        for (char *line = strchr(plan, '\n'); line;
             line = strchr(line + 1, '\n'))
            bare_scan = bare_scan || strncmp(line + 1, "SCAN jobs\n", 10) == 0;
        cr_expect(strstr(plan, want) != NULL && !bare_scan,
                  "%s (%s): want \"%s\":\n%s", what, count ? "count" : "list",
                  want, plan);
        free(plan);
    }
}

static void check_all_plans(void)
{
    static const int statuses[] = {-1, JOB_PENDING, JOB_FAILED};
    char id[JOB_ID_LEN + 1];

    ut_job_id(1234, id);
    for (size_t i = 0; i < 3; i++) {
        store_filter f = any();
        f.status = statuses[i];
        check_plan(&f, "INDEX jobs_", "status alone or nothing");
        f = any();
        f.status = statuses[i];
        f.exchange = "ex1";
        check_plan(&f, "INDEX jobs_exchange (exchange=?", "exchange");
        f = any();
        f.status = statuses[i];
        f.routing_key = "rk1";
        check_plan(&f, "INDEX jobs_routing_key (routing_key=?", "routing_key");
        f = any();
        f.status = statuses[i];
        f.source = JOB_SOURCE_AMQP;
        check_plan(&f, "INDEX jobs_source (source=?", "source");
        f = any();
        f.status = statuses[i];
        f.message_id = "m";
        check_plan(&f, "INDEX jobs_message_id (message_id=?", "message_id");
        f = any();
        f.status = statuses[i];
        f.schedule = "s";
        check_plan(&f, "INDEX jobs_schedule (schedule=?", "schedule");
        f = any();
        f.status = statuses[i];
        f.has_deliver_from = true;
        f.deliver_from = 1100000;
        f.has_deliver_to = true;
        f.deliver_to = 1200000;
        check_plan(&f, "deliver_at>? AND deliver_at<?", "deliver range");
        f = any();
        f.status = statuses[i];
        snprintf(f.id_prefix, sizeof f.id_prefix, "%.8s", id);
        check_plan(&f, "INDEX jobs_", "id_prefix");
        f = any();
        f.status = statuses[i];
        f.header_name = "tenant:t3";
        f.header_name_len = 6;
        f.header_value = "t3";
        check_plan(&f, "job_headers USING PRIMARY KEY (name=? AND value=?)",
                   "header");
        f = any();
        f.status = statuses[i];
        f.q = "Needle 1233\"}";
        check_plan(&f, "VIRTUAL TABLE INDEX", "q (rare)");
        /* in a quarter of the bodies: a page walks the listing order */
        f = any();
        f.status = statuses[i];
        f.q = "<script>";
        check_plan(&f, "INDEX", "q (common)");
    }
}

Test(store_search, every_filter_kind_uses_an_index)
{
    open_filled(false);
    check_all_plans(); /* as deployed: no statistics */
    ut_sql_exec(g_b.path, "ANALYZE");
    check_all_plans();
}

/* The orders the dashboard opens (issue 25: the Jobs page -created,
 * alone or with a status; a schedule's runs -due) and their reverses walk
 * an index in the order asked (want), and never sort: no temp B-tree for
 * the ORDER BY, on every page after the first too (store_explain's plan
 * is of a page after a cursor). SQLite's plans do not depend on the
 * table's size (no statistics, or ANALYZE's). */
static void check_order_plans(void)
{
    static const struct {
        store_order order;
        int status;
        const char *schedule, *want;
    } cases[] = {
        {STORE_ORDER_CREATED_DESC, -1, NULL, "INTEGER PRIMARY KEY (rowid<?)"},
        {STORE_ORDER_CREATED, -1, NULL, "INTEGER PRIMARY KEY (rowid>?)"},
        {STORE_ORDER_CREATED_DESC, JOB_FAILED, NULL,
         "INDEX jobs_status_seq (status=? AND seq<?)"},
        {STORE_ORDER_CREATED, JOB_PENDING, NULL,
         "INDEX jobs_status_seq (status=? AND seq>?)"},
        {STORE_ORDER_CREATED_DESC, -1, "s", "INDEX jobs_schedule_seq"},
        {STORE_ORDER_DUE_DESC, -1, NULL, "INDEX jobs_deliver"},
        {STORE_ORDER_DUE_DESC, JOB_FAILED, NULL, "INDEX jobs_status_deliver"},
        {STORE_ORDER_DUE_DESC, -1, "s", "INDEX jobs_schedule (schedule=?"},
        {STORE_ORDER_DUE_DESC, JOB_PENDING, "s",
         "INDEX jobs_schedule (schedule=?"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        store_filter f = any();
        char *plan = NULL;
        f.order = cases[i].order;
        f.status = cases[i].status;
        f.schedule = cases[i].schedule;
        cr_assert_eq(store_explain(g_st, &f, false, &plan), RMQS_OK);
        cr_expect(strstr(plan, cases[i].want) != NULL &&
                      strstr(plan, "TEMP B-TREE") == NULL,
                  "case %zu: want \"%s\" and no sort:\n%s", i, cases[i].want,
                  plan);
        free(plan);
    }
}

Test(store_search, the_dashboard_orders_never_sort)
{
    open_filled(false);
    check_order_plans();
    ut_sql_exec(g_b.path, "ANALYZE");
    check_order_plans();
}

Test(store_search, side_tables_follow_the_purge)
{
    store_filter f = any();
    size_t deleted = 0;
    int64_t count;
    bool capped;

    open_filled(false);
    cr_assert_eq(index_some(1500), 1500); /* the purge meets both kinds */

    /* sent (n%10 == 0) and failed (n%10 == 1) jobs finished at 10 */
    cr_assert_eq(store_purge(g_st, 11, 100000, &deleted), RMQS_OK);
    cr_assert_eq(deleted, N_JOBS / 5);
    cr_expect_eq(ut_sql_int(g_b.path, "SELECT count(*) FROM job_headers WHERE "
                                      "job_seq NOT IN (SELECT seq FROM jobs)"),
                 0);
    f.q = "Needle 1221\"}"; /* failed: purged */
    cr_assert_eq(store_count(g_st, &f, 10, &count, &capped), RMQS_OK);
    cr_expect_eq(count, 0);
    f.q = "Needle 1233\"}";
    cr_assert_eq(store_count(g_st, &f, 10, &count, &capped), RMQS_OK);
    cr_expect_eq(count, 1);
    cr_expect_eq(ut_sql_int(g_b.path,
                            "SELECT count(*) FROM jobs_body_fts WHERE "
                            "jobs_body_fts MATCH '\"Needle 1231\"'"),
                 0);
}

/* seq is the rowid: once the purge took the highest seqs (job 2000 is
 * sent), new jobs reuse them. The mark comes down with the purge, so a
 * reused seq is in the tail, found at once and indexed later. */
Test(store_search, a_reused_seq_is_above_the_mark)
{
    store_filter f = any();
    size_t deleted = 0;
    int64_t count;
    bool capped;

    open_filled(false);
    cr_assert_eq(index_some(SIZE_MAX), N_JOBS);
    cr_assert_eq(store_purge(g_st, 11, 100000, &deleted), RMQS_OK);
    cr_assert_eq(ut_sql_int(g_b.path, "SELECT max(seq) FROM jobs"), N_JOBS - 1);
    cr_expect_eq(ut_sql_int(g_b.path, "SELECT mark FROM search_index"),
                 N_JOBS - 1);
    fill(g_st, N_JOBS + 1, N_JOBS + 1); /* seq N_JOBS again */
    cr_assert_eq(ut_sql_int(g_b.path, "SELECT max(seq) FROM jobs"), N_JOBS);
    for (int pass = 0; pass < 2; pass++) {
        f = any();
        f.q = "Needle 2001\"}";
        cr_assert_eq(store_count(g_st, &f, 10, &count, &capped), RMQS_OK);
        cr_expect_eq(count, 1, "q, pass %d", pass);
        f = any();
        f.header_name = "tenant:t6";
        f.header_name_len = 6;
        f.header_value = "t6";
        f.has_deliver_from = true;
        f.deliver_from = 1000000 + 1000 * (N_JOBS + 1);
        cr_assert_eq(store_count(g_st, &f, 10, &count, &capped), RMQS_OK);
        cr_expect_eq(count, 1, "header, pass %d", pass);
        cr_assert_eq(index_some(SIZE_MAX), pass == 0 ? 1 : 0);
    }
}

static bool caught_up(void *arg)
{
    (void)arg;
    return store_search_index_lag(g_st) == 0;
}

/* Without index_manual the store's own thread fills the side tables. */
Test(store_search, the_indexer_thread_catches_up, .timeout = 60)
{
    store_options opt = {.synchronous_full = false};
    store_filter f = any();
    int64_t count;
    bool capped;

    g_st = ut_both_open(&g_b, false, &opt);
    for (int from = 1; from <= N_JOBS; from += 500)
        fill(g_st, from, from + 499);
    cr_assert(ut_await(50000, caught_up, NULL), "the indexer caught up");
    cr_expect_eq(ut_sql_int(g_b.path, "SELECT mark FROM search_index"), N_JOBS);
    cr_expect_eq(ut_sql_int(g_b.path, "SELECT count(*) FROM job_headers"),
                 N_JOBS);
    f.q = "Needle 1233\"}";
    cr_assert_eq(store_count(g_st, &f, 10, &count, &capped), RMQS_OK);
    cr_expect_eq(count, 1);
}
