/*
 * test_store_pg_search.c - the search's filters on the PostgreSQL store
 * (issue 14): on a table of 200,000 jobs with statistics (ANALYZE), the
 * plan of every filter kind, alone and with a status, list and count, is
 * an index or bitmap scan (EXPLAIN (FORMAT JSON) through store_explain),
 * never a sequential scan of jobs; and the search-only filters count
 * exactly. Needs the test server of tests/run.sh (RMQS_TEST_PG_*).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "testutil.h"

#define N_ROWS 200000

static char g_db[64], g_url[UT_URL_MAX];
static store_t *g_st;

static void setup(void)
{
    char sql[2048];

    ut_pg_create(g_db, g_url);
    g_st = ut_store_open(g_url, &(store_options){.synchronous_full = true,
                                                 .index_manual = true});
    /* the rules of ut_search_job, with more exchanges, routing keys and
     * tenants, so that one value is a small part of the table */
    snprintf(
        sql, sizeof sql,
        "INSERT INTO jobs (id, status, exchange, routing_key, deliver_at, "
        "due_at, delay_ms, created_at, updated_at, attempts, max_attempts, "
        "headers, body_kind, body, source, message_id, schedule) "
        "SELECT decode(lpad(to_hex(i), 32, '0'), 'hex'), "
        "CASE WHEN i %% 10 = 0 THEN 2 WHEN i %% 10 = 1 THEN 3 ELSE 0 END, "
        "'ex' || (i %% 50), 'rk' || (i %% 200), 1000000 + i * 1000::bigint, "
        "1000000 + i * 1000::bigint, 0, 10, 10, 0, 3, "
        "'{\"tenant\":\"t' || (i %% 1000) || '\",\"n\":' || i || '}', "
        "CASE i %% 4 WHEN 2 THEN 2 WHEN 1 THEN 1 ELSE 0 END, "
        "convert_to(CASE i %% 4 WHEN 0 THEN 'hello <script>' || i || "
        "'</script>' "
        "WHEN 1 THEN '{\"k\":\"Needle ' || i || '\"}' WHEN 2 THEN "
        "'needle-bytes' "
        "ELSE 'plain text' END, 'UTF8'), CASE WHEN i %% 50 = 0 THEN 1 ELSE 0 "
        "END, "
        "CASE WHEN i %% 100 = 0 THEN 'm' || i END, "
        "CASE WHEN i %% 100 = 1 THEN 's' || (i %% 1000) END "
        "FROM generate_series(1, %d) AS i; ANALYZE jobs;",
        N_ROWS);
    ut_pg_exec(g_url, sql);
    /* the search's side table, as the indexer thread fills it */
    for (size_t n = 1; n > 0;)
        cr_assert_eq(store_search_index(g_st, 50000, &n), RMQS_OK);
    cr_assert_eq(store_search_index_lag(g_st), 0);
    ut_pg_exec(g_url, "ANALYZE job_text");
}

static void teardown(void)
{
    store_close(g_st);
    ut_pg_drop(g_db);
}

TestSuite(store_pg_search, .init = setup, .fini = teardown, .timeout = 300);

static store_filter any(void)
{
    return (store_filter){.status = -1, .source = -1};
}

/* Whether a node of the plan (EXPLAIN (FORMAT JSON)) is a sequential
 * scan of a table other than search_index (one row: the indexer's mark). */
static bool seq_scan_in(json_t *node)
{
    json_t *plans;
    size_t i;
    json_t *sub;

    if (json_is_array(node)) {
        json_array_foreach(node, i, sub)
            if (seq_scan_in(sub))
                return true;
        return false;
    }
    if (!json_is_object(node))
        return false;
    if (json_object_get(node, "Plan") != NULL)
        return seq_scan_in(json_object_get(node, "Plan"));
    if (strcmp(json_string_value(json_object_get(node, "Node Type")) ?: "",
               "Seq Scan") == 0 &&
        strcmp(json_string_value(json_object_get(node, "Relation Name")) ?: "",
               "search_index") != 0)
        return true;
    plans = json_object_get(node, "Plans");
    return plans != NULL && seq_scan_in(plans);
}

/* The plans of f (list and count) scan an index (want, if not NULL, by
 * name) and never jobs itself (nor job_text). A count of the status alone (or of all)
 * reads job_counts, not jobs (store_count): only its list is checked. */
static void check_plan(const store_filter *f, const char *want,
                       const char *what)
{
    bool status_only = strncmp(what, "status alone", 12) == 0;

    for (int count = 0; count < (status_only ? 1 : 2); count++) {
        char *plan = NULL;
        cr_assert_eq(store_explain(g_st, f, count, &plan), RMQS_OK, "%s", what);
        json_t *tree = json_loads(strchr(plan, '['), 0, NULL);
        bool ok = tree != NULL && !seq_scan_in(tree) &&
                  strstr(plan, "Index") != NULL &&
                  (want == NULL || strstr(plan, want) != NULL);
        cr_expect(ok, "%s (%s): want an index scan%s%s:\n%s", what,
                  count ? "count" : "list", want ? " of " : "",
                  want ? want : "", plan);
        json_decref(tree);
        free(plan);
    }
}

Test(store_pg_search, every_filter_kind_uses_an_index)
{
    static const int statuses[] = {-1, JOB_PENDING, JOB_FAILED};

    for (size_t i = 0; i < 3; i++) {
        int s = statuses[i];
        store_filter f = any();
        f.status = s;
        check_plan(&f, NULL, "status alone or nothing");
        f = any();
        f.status = s;
        f.exchange = "ex7";
        check_plan(&f, NULL, "exchange");
        f = any();
        f.status = s;
        f.routing_key = "rk7";
        check_plan(&f, NULL, "routing_key");
        f = any();
        f.status = s;
        f.source = JOB_SOURCE_AMQP;
        check_plan(&f, NULL, "source");
        f = any();
        f.status = s;
        f.message_id = "m500";
        check_plan(&f, "jobs_message_id", "message_id");
        f = any();
        f.status = s;
        f.schedule = "s1";
        check_plan(&f, NULL, "schedule");
        f = any();
        f.status = s;
        f.has_deliver_from = true;
        f.deliver_from = 1000000 + 5000 * 1000;
        f.has_deliver_to = true;
        f.deliver_to = 1000000 + 6000 * 1000;
        check_plan(&f, NULL, "deliver range");
        f = any();
        f.status = s;
        snprintf(f.id_prefix, sizeof f.id_prefix, "%s",
                 "000000000000000000000000000123");
        check_plan(&f, "jobs_id_key", "id_prefix");
        f = any();
        f.status = s;
        f.header_name = "tenant:t7";
        f.header_name_len = 6;
        f.header_value = "t7";
        /* the list may walk jobs_deliver and check the header, which the
         * planner (a fixed estimate for @>) finds cheaper for a page */
        check_plan(&f, NULL, "header");
        f = any();
        f.status = s;
        f.q = "Needle 12345\"";
        check_plan(&f, "job_text_body", "q");
    }
}

static int64_t count(const store_filter *f)
{
    int64_t n = -1;
    bool capped = true;

    cr_assert_eq(store_count(g_st, f, 1000000, &n, &capped), RMQS_OK);
    cr_assert_not(capped);
    return n;
}

/* Whether a node of the plan sorts (a Sort or Incremental Sort node). */
static bool sort_in(json_t *node)
{
    json_t *sub;
    size_t i;

    if (json_is_array(node)) {
        json_array_foreach(node, i, sub)
            if (sort_in(sub))
                return true;
        return false;
    }
    if (!json_is_object(node))
        return false;
    if (json_object_get(node, "Plan") != NULL)
        return sort_in(json_object_get(node, "Plan"));
    if (strstr(json_string_value(json_object_get(node, "Node Type")) ?: "",
               "Sort") != NULL)
        return true;
    sub = json_object_get(node, "Plans");
    return sub != NULL && sort_in(sub);
}

/* The orders the dashboard opens (issue 25: the Jobs page -created, alone
 * or with a status; a schedule's runs -due) and their reverses, on 200,000
 * jobs with statistics: the page (after a cursor) walks the index named
 * (want) in the order asked, with no Sort node and no sequential scan. */
Test(store_pg_search, the_dashboard_orders_never_sort)
{
    static const struct {
        store_order order;
        int status;
        const char *schedule, *want;
    } cases[] = {
        {STORE_ORDER_CREATED_DESC, -1, NULL, "jobs_pkey"},
        {STORE_ORDER_CREATED, -1, NULL, "jobs_pkey"},
        /* a tenth of the jobs failed, spread evenly, so the primary key
         * backwards with the status checked (about 510 rows for a page)
         * costs the planner as little as jobs_status_seq: either walks
         * in order; neither sorts */
        {STORE_ORDER_CREATED_DESC, JOB_FAILED, NULL, "Index"},
        {STORE_ORDER_CREATED_DESC, JOB_PENDING, NULL, "Index"},
        /* a rare status (none here is cancelled): its own index */
        {STORE_ORDER_CREATED_DESC, JOB_CANCELLED, NULL, "jobs_status_seq"},
        {STORE_ORDER_CREATED_DESC, -1, "s1", "jobs_schedule_seq"},
        {STORE_ORDER_DUE_DESC, -1, NULL, "jobs_deliver"},
        {STORE_ORDER_DUE_DESC, JOB_FAILED, NULL, "jobs_status_deliver"},
        {STORE_ORDER_DUE_DESC, -1, "s1", "jobs_schedule"},
        {STORE_ORDER_DUE_DESC, JOB_PENDING, "s1", "jobs_schedule"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        store_filter f = any();
        char *plan = NULL;
        f.order = cases[i].order;
        f.status = cases[i].status;
        f.schedule = cases[i].schedule;
        cr_assert_eq(store_explain(g_st, &f, false, &plan), RMQS_OK);
        json_t *tree = json_loads(strchr(plan, '['), 0, NULL);
        cr_expect(tree != NULL && !sort_in(tree) && !seq_scan_in(tree) &&
                      strstr(plan, cases[i].want) != NULL,
                  "case %zu: want an index scan of %s, no sort:\n%s", i,
                  cases[i].want, plan);
        json_decref(tree);
        free(plan);
    }
}

Test(store_pg_search, search_filters_count_exactly)
{
    store_filter f = any();

    f.header_name = "tenant:t7";
    f.header_name_len = 6;
    f.header_value = "t7";
    cr_expect_eq(count(&f), N_ROWS / 1000);
    f.status = JOB_FAILED; /* i % 1000 == 7: never i % 10 == 1 */
    cr_expect_eq(count(&f), 0);
    f = any();
    f.header_name = "n:5";
    f.header_name_len = 1;
    f.header_value = "5";
    cr_expect_eq(count(&f), 0, "a number is not a string header");
    f = any();
    f.q = "Needle 12345\"";
    cr_expect_eq(count(&f), 1);
    f = any();
    f.q = "needle";
    cr_expect_eq(count(&f), 0, "case-sensitive; binary bodies never match");
    f = any();
    f.q = "<script>1999<";
    cr_expect_eq(count(&f), 0, "1999 %% 4 != 0");
    f.q = "<script>1996<";
    cr_expect_eq(count(&f), 1);
    f = any();
    f.q = "t>19960<"; /* 19960 % 4 == 0: "...19960</script>" */
    cr_expect_eq(count(&f), 1);
    f = any();
    snprintf(f.id_prefix, sizeof f.id_prefix, "%s",
             "0000000000000000000000000001");
    cr_expect_eq(count(&f), 0x10000, "ids of 0x10000..0x1ffff");
    f = any();
    f.exchange = "ex7";
    f.routing_key = "rk7";
    cr_expect_eq(count(&f), N_ROWS / 200, "i %% 200 == 7 implies i %% 50 == 7");
}

/* A job stored through the store is found at once (above the mark: the
 * tail) and after store_search_index copied it into job_text; a purged one
 * leaves job_text (the foreign key's cascade). */
Test(store_pg_search, the_tail_and_the_index_agree)
{
    store_filter f = any();
    job_t job;
    store_insert_req req = {.jobs = &job, .n = 1};
    size_t n = 0;

    ut_search_job(&job, 300001); /* JSON "Needle 300001", tenant t2 */
    cr_assert_eq(store_insert_batch(g_st, &req, 1), RMQS_OK);
    cr_assert_eq(req.rc, RMQS_OK);
    job_clear(&job);
    cr_expect_eq(store_search_index_lag(g_st), 1);
    for (int pass = 0; pass < 2; pass++) {
        f = any();
        f.q = "Needle 300001\"";
        cr_expect_eq(count(&f), 1, "q, pass %d", pass);
        f = any();
        f.header_name = "tenant:t2";
        f.header_name_len = 6;
        f.header_value = "t2";
        f.has_deliver_from = true;
        f.deliver_from = 1000000 + 1000 * (int64_t)300001;
        cr_expect_eq(count(&f), 1, "header, pass %d", pass);
        cr_assert_eq(store_search_index(g_st, 100, &n), RMQS_OK);
        cr_expect_eq(n, pass == 0 ? 1 : 0);
    }
    cr_expect_eq(store_search_index_lag(g_st), 0);
    cr_expect_eq(ut_pg_int(g_url, "SELECT count(*) FROM job_text"), N_ROWS + 1);
    ut_pg_exec(g_url, "DELETE FROM jobs WHERE seq <= 10");
    cr_expect_eq(ut_pg_int(g_url, "SELECT count(*) FROM job_text"), N_ROWS - 9);
}
