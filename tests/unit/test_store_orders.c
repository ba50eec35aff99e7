/*
 * test_store_orders.c - the orders of a page of jobs (store_order, GET
 * /jobs?order=, issue 25) on both stores (BOTH, testutil.h): each order,
 * paged to the end under each filter, yields every matching job exactly
 * once and in order, with many jobs sharing a deliver_at (ties broken by
 * insertion, in the order's direction), with pages cut by limit or by the
 * page budget; a cursor is tied to its order; a count ignores the order.
 * The plans of the orders the dashboard opens are asserted by
 * test_store_search.c (SQLite) and test_store_pg_search.c (PostgreSQL).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "testutil.h"

#define N_JOBS 600

static ut_both g_b;
static store_t *g_st;

static void setup(void)
{
    ut_both_init(&g_b, "orders");
    g_st = NULL;
}

static void teardown(void)
{
    ut_both_fini(&g_b);
    g_st = NULL;
}

TestSuite(store_orders, .init = setup, .fini = teardown, .timeout = 120);

/* Job n's deliver_at: 13 values in a scrambled order, so about 46 jobs
 * share each and the due order is not the insertion order. */
static int64_t deliver_of(int n)
{
    return 1000000 + 1000 * (int64_t)((n * 7) % 13);
}

/* Jobs 1..N_JOBS inserted in that order (so in seq order), each
 * ut_search_job's (exchange, status, header and body by rule) with
 * deliver_of(n), and every fourth a run of schedule "s1". The store's
 * page budget: max_bytes (0: the default). */
static void open_filled(bool pg, size_t max_bytes)
{
    store_options opt = {.synchronous_full = false,
                         .index_manual = true,
                         .page_max_bytes = max_bytes};

    g_st = ut_both_open(&g_b, pg, &opt);
    for (int from = 1; from <= N_JOBS; from += 150) {
        job_t jobs[150];
        store_insert_req req = {.jobs = jobs, .n = 150};
        for (int i = 0; i < 150; i++) {
            ut_search_job(&jobs[i], from + i);
            jobs[i].deliver_at = jobs[i].due_at = deliver_of(from + i);
            if ((from + i) % 4 == 0)
                jobs[i].schedule = ut_strdup("s1");
        }
        cr_assert_eq(store_insert_batch(g_st, &req, 1), RMQS_OK);
        cr_assert_eq(req.rc, RMQS_OK);
        for (int i = 0; i < 150; i++)
            job_clear(&jobs[i]);
    }
}

static void open_default(bool pg)
{
    open_filled(pg, 0);
}

static void open_small_pages(bool pg)
{
    open_filled(pg, 6000); /* about 8 jobs of 512 bytes' overhead a page */
}

static store_filter any(void)
{
    return (store_filter){.status = -1, .source = -1};
}

/* Job number of a listed job: its id is ut_job_id(n). */
static int number_of(const job_t *j)
{
    return (int)strtol(j->id + 24, NULL, 16);
}

static store_order g_order; /* of by_order */

/* Whether job a comes before job b in g_order. */
static int by_order(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    int64_t da = deliver_of(a), db = deliver_of(b);

    switch (g_order) {
    case STORE_ORDER_DUE: return da != db ? (da < db ? -1 : 1) : a - b;
    case STORE_ORDER_DUE_DESC: return da != db ? (da > db ? -1 : 1) : b - a;
    case STORE_ORDER_CREATED: return a - b;
    case STORE_ORDER_CREATED_DESC: return b - a;
    }
    return 0;
}

/* Page through f in every order (pages of limit) and check the jobs are
 * exactly those n with want(n), each once, in the order's sequence; and
 * that a count, whatever the order, counts them. */
static void expect(store_filter f, bool (*want)(int), size_t limit,
                   const char *what)
{
    static const store_order orders[] = {STORE_ORDER_DUE, STORE_ORDER_DUE_DESC,
                                         STORE_ORDER_CREATED,
                                         STORE_ORDER_CREATED_DESC};
    int expected[N_JOBS], n_expected = 0;

    for (int n = 1; n <= N_JOBS; n++)
        if (want(n))
            expected[n_expected++] = n;
    cr_assert_gt(n_expected, 0, "%s selects nothing", what);
    for (size_t o = 0; o < 4; o++) {
        int seen = 0, pages = 0;
        char *after = NULL;
        int64_t count;
        bool capped;

        g_order = orders[o];
        f.order = orders[o];
        qsort(expected, (size_t)n_expected, sizeof(int), by_order);
        do {
            job_t *jobs = NULL;
            size_t got = 0;
            char *next = NULL;
            cr_assert_eq(store_list(g_st, &f, limit, after, &jobs, &got, &next),
                         RMQS_OK, "%s, order %zu", what, o);
            cr_assert(got > 0 || next == NULL);
            for (size_t i = 0; i < got; i++, seen++) {
                cr_assert_lt(seen, n_expected, "%s, order %zu: too many", what,
                             o);
                cr_assert_eq(number_of(&jobs[i]), expected[seen],
                             "%s, order %zu: job %d at %d, %d expected", what,
                             o, number_of(&jobs[i]), seen, expected[seen]);
            }
            ut_jobs_free(jobs, got);
            free(after);
            after = next;
            pages++;
        } while (after != NULL);
        cr_expect_eq(seen, n_expected, "%s, order %zu: %d listed, %d expected",
                     what, o, seen, n_expected);
        cr_assert_eq(store_count(g_st, &f, 1000000, &count, &capped), RMQS_OK);
        cr_expect(count == n_expected && !capped, "%s, order %zu: counted %lld",
                  what, o, (long long)count);
    }
}

static bool all(int n)
{
    (void)n;
    return true;
}
static bool pending(int n)
{
    return n % 10 >= 2;
}
static bool run_of_s1(int n)
{
    return n % 4 == 0;
}
static bool pending_run_of_s1(int n)
{
    return pending(n) && run_of_s1(n);
}
static bool ex1_pending(int n)
{
    return n % 3 == 1 && pending(n);
}
static bool tenant3(int n)
{
    return n % 7 == 3;
}
static bool in_range(int n)
{
    int64_t d = deliver_of(n);
    return d >= 1003000 && d < 1009000;
}
static bool rk2_in_range(int n)
{
    return n % 5 == 2 && in_range(n);
}

static void every_filter(size_t limit)
{
    store_filter f = any();

    expect(f, all, limit, "nothing");
    f.status = JOB_PENDING;
    expect(f, pending, limit, "status");
    f = any();
    f.schedule = "s1";
    expect(f, run_of_s1, limit, "schedule");
    f.status = JOB_PENDING;
    expect(f, pending_run_of_s1, limit, "schedule + status");
    f = any();
    f.exchange = "ex1";
    f.status = JOB_PENDING;
    expect(f, ex1_pending, limit, "exchange + status");
    f = any();
    f.header_name = "tenant:t3";
    f.header_name_len = 6;
    f.header_value = "t3";
    expect(f, tenant3, limit, "header");
    f = any();
    f.has_deliver_from = f.has_deliver_to = true;
    f.deliver_from = 1003000;
    f.deliver_to = 1009000;
    expect(f, in_range, limit, "deliver range");
    f.routing_key = "rk2";
    expect(f, rk2_in_range, limit, "routing key + deliver range");
}

#define BOTH(name, open) UT_BOTH(store_orders, name, open)

BOTH(every_order_pages_every_job_once_in_order, open_default)
{
    every_filter(37);
    /* half of them indexed: the search's tail and index agree */
    cr_assert_eq(store_search_index(g_st, N_JOBS / 2, NULL), RMQS_OK);
    every_filter(50);
}

BOTH(every_order_pages_within_the_byte_budget, open_small_pages)
{
    every_filter(1000); /* the budget, not the limit, cuts the pages */
}

BOTH(a_cursor_is_tied_to_its_order, open_default)
{
    static const store_order orders[] = {STORE_ORDER_DUE, STORE_ORDER_DUE_DESC,
                                         STORE_ORDER_CREATED,
                                         STORE_ORDER_CREATED_DESC};
    char *next[4];

    for (size_t o = 0; o < 4; o++) {
        store_filter f = any();
        job_t *jobs = NULL;
        size_t n = 0;
        f.order = orders[o];
        cr_assert_eq(store_list(g_st, &f, 10, NULL, &jobs, &n, &next[o]),
                     RMQS_OK);
        cr_assert_eq(n, 10);
        cr_assert_not_null(next[o]);
        ut_jobs_free(jobs, n);
    }
    for (size_t o = 0; o < 4; o++) {
        for (size_t p = 0; p < 4; p++) {
            store_filter f = any();
            job_t *jobs = NULL;
            size_t n = 0;
            char *again = NULL;
            f.order = orders[p];
            cr_expect_eq(store_list(g_st, &f, 10, next[o], &jobs, &n, &again),
                         o == p ? RMQS_OK : RMQS_EINVAL,
                         "a cursor of order %zu with order %zu", o, p);
            cr_expect_eq(n, o == p ? 10 : 0);
            ut_jobs_free(jobs, n);
            free(again);
        }
    }
    for (size_t o = 0; o < 4; o++)
        free(next[o]);
    /* an order out of range */
    store_filter f = any();
    job_t *jobs = NULL;
    size_t n = 0;
    char *nx = NULL;
    f.order = (store_order)4;
    cr_expect_eq(store_list(g_st, &f, 10, NULL, &jobs, &n, &nx), RMQS_EINVAL);
}
