/*
 * test_store_pages.c - the page budget of the store's lists (issue 21:
 * "every answer is bounded"; store_common.h "Page budgets", store.h
 * store_list and store_schedule_list): the pure rule (store_page_take,
 * store_item_bytes) and what each backend makes of it, store_list and
 * store_schedule_list with large items against a real SQLite file and a
 * real PostgreSQL database: every store case runs on both (NAME_sqlite,
 * NAME_postgres), the PostgreSQL half on the server tests/run.sh starts
 * (RMQS_TEST_PG_*; a database per test, dropped in .fini), skipped when
 * none is named.
 *
 * A page is checked for three things: within the budget (or one item
 * alone), as full as the budget allows (the next page's first item would
 * not have fitted: a page never stops early), and the walk of every page
 * gives every item exactly once, in order.
 *
 * Suite "store_pages" (CTest: unit.store_pages).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "store.h"
#include "store_common.h"
#include "testutil.h"

static ut_both g_b;
static store_t *g_st;

#define BUDGET ((size_t)64 * 1024)

static const store_options k_opts = {.synchronous_full = true,
                                     .page_max_bytes = BUDGET};

static void setup(void)
{
    ut_both_init(&g_b, "pages");
    g_st = NULL;
}

static void teardown(void)
{
    ut_both_fini(&g_b);
}

TestSuite(store_pages, .init = setup, .fini = teardown, .timeout = 120);

static void open_store(bool pg)
{
    g_st = ut_both_open(&g_b, pg, &k_opts);
}

/* Each case body runs once per store (testutil.h). */
#define BOTH(name) UT_BOTH(store_pages, name, open_store)

/* ------------------------------------------------------------------------ */
/* The rule alone                                                           */

Test(store_pages, rule_takes_what_fits_and_one_item_alone)
{
    store_page p;

    store_page_init(&p, 10, 1000);
    cr_assert(store_page_take(&p, 400));
    cr_assert(store_page_take(&p, 600)); /* exactly the budget: in */
    cr_assert_not(store_page_take(&p, 1), "over the budget");
    cr_assert(p.more);
    cr_assert_eq(p.n, 2);
    cr_assert_eq(p.bytes, 1000);

    /* a first item larger than the budget comes out, alone */
    store_page_init(&p, 10, 1000);
    cr_assert(store_page_take(&p, 5000));
    cr_assert_not(store_page_take(&p, 1));
    cr_assert(p.more);
    cr_assert_eq(p.n, 1);

    /* an oversize item after a small one waits for its own page */
    store_page_init(&p, 10, 1000);
    cr_assert(store_page_take(&p, 10));
    cr_assert_not(store_page_take(&p, SIZE_MAX));
    cr_assert_eq(p.n, 1);

    /* the limit as before: more, whatever the bytes */
    store_page_init(&p, 2, 1000);
    cr_assert(store_page_take(&p, 1));
    cr_assert(store_page_take(&p, 1));
    cr_assert_not(store_page_take(&p, 1));
    cr_assert(p.more);

    /* 0: the default budget */
    store_page_init(&p, 1, 0);
    cr_assert_eq(p.max_bytes, STORE_PAGE_MAX_BYTES_DEFAULT);
}

Test(store_pages, item_bytes_count_a_binary_body_as_base64)
{
    cr_assert_eq(store_item_bytes(JOB_BODY_TEXT, 1000, 10),
                 STORE_ITEM_OVERHEAD + 1010);
    cr_assert_eq(store_item_bytes(JOB_BODY_JSON, 1000, 0),
                 STORE_ITEM_OVERHEAD + 1000);
    cr_assert_eq(store_item_bytes(JOB_BODY_BINARY, 999, 0),
                 STORE_ITEM_OVERHEAD + 1332);
    cr_assert_eq(store_item_bytes(JOB_BODY_BINARY, 1000, 0),
                 STORE_ITEM_OVERHEAD + 1336);
    cr_assert_eq(store_item_bytes(JOB_BODY_BINARY, 0, 0), STORE_ITEM_OVERHEAD);
    cr_assert_eq(store_item_bytes(JOB_BODY_TEXT, SIZE_MAX, 1), SIZE_MAX);
}

/* ------------------------------------------------------------------------ */
/* store_list                                                               */

/* Job n with a body of len bytes of kind (text 'x's or binary bytes). */
static void insert_sized(int n, size_t len, job_body_kind kind)
{
    job_t j;

    ut_job_make(&j, n, 1000 + n);
    free(j.body);
    j.body = malloc(len ? len : 1);
    cr_assert_not_null(j.body);
    for (size_t i = 0; i < len; i++)
        j.body[i] = kind == JOB_BODY_BINARY ? (unsigned char)(i * 7 + n)
                                            : (unsigned char)('a' + i % 26);
    j.body_len = len;
    j.body_kind = kind;
    j.headers = json_pack("{ss}", "tenant", "acme");
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
    job_clear(&j);
}

/* What the store counts for a job it returned, computed here from the
 * job as the API shows it. */
static size_t job_bytes(const job_t *j)
{
    size_t texts = strlen(j->exchange) + strlen(j->routing_key) +
                   (j->schedule ? strlen(j->schedule) : 0) +
                   (j->last_error ? strlen(j->last_error) : 0);
    char *h = j->headers ? json_dumps(j->headers, JSON_COMPACT) : NULL;
    char *p = j->properties ? json_dumps(j->properties, JSON_COMPACT) : NULL;

    texts += (h ? strlen(h) : 0) + (p ? strlen(p) : 0);
    free(h);
    free(p);
    return store_item_bytes(j->body_kind, j->body_len, texts);
}

/* Walk every page with limit; check each page (within the budget or one
 * job alone; full: the next page's first job would not have fitted) and
 * that every job of 1..total comes once, in order. Returns the pages. */
static size_t walk_jobs(size_t limit, int total)
{
    char *after = NULL, id[JOB_ID_LEN + 1];
    size_t pages = 0, prev_bytes = 0, prev_n = 0;
    int seen = 0;

    for (;;) {
        job_t *jobs = NULL;
        size_t n = 0, bytes = 0;
        char *next = NULL;

        cr_assert_lt(pages, (size_t)total + 2, "pagination does not end");
        cr_assert_eq(store_list(g_st, NULL, limit, after, &jobs, &n, &next),
                     RMQS_OK);
        pages++;
        cr_assert_leq(n, limit);
        for (size_t i = 0; i < n; i++) {
            ut_job_id(++seen, id);
            cr_assert_str_eq(jobs[i].id, id, "page %zu item %zu", pages, i);
            bytes += job_bytes(&jobs[i]);
        }
        cr_assert(n == 1 || bytes <= BUDGET,
                  "page %zu: %zu jobs, %zu bytes, over %zu", pages, n, bytes,
                  BUDGET);
        /* the previous page stopped only because this first job did not
         * fit (or at limit) */
        if (prev_n > 0 && n > 0 && prev_n < limit)
            cr_assert_gt(prev_bytes + job_bytes(&jobs[0]), BUDGET,
                         "page %zu stopped early at %zu bytes", pages - 1,
                         prev_bytes);
        prev_bytes = bytes;
        prev_n = n;
        ut_jobs_free(jobs, n);
        free(after);
        after = next;
        if (next == NULL) {
            cr_assert_eq(seen, total, "the last page came early");
            break;
        }
        cr_assert_gt(n, 0, "a page with a next holds a job");
    }
    return pages;
}

BOTH(a_job_page_stops_at_the_byte_budget)
{
    /* 20 KB each: three to a 64 KiB page; the binary ones count as
     * base64 (15,000 bytes: 20,000); job 7 is larger than the budget */
    for (int n = 1; n <= 12; n++)
        insert_sized(n,
                     n == 7  ? 3 * BUDGET
                     : n % 2 ? 20000
                             : 15000,
                     n % 2 ? JOB_BODY_TEXT : JOB_BODY_BINARY);
    /* 1-3, 4-6, 7 alone, 8-10, 11-12 */
    cr_assert_eq(walk_jobs(1000, 12), 5);
    /* a shorter limit still wins where it is smaller */
    cr_assert_eq(walk_jobs(2, 12), 7);
}

BOTH(small_jobs_fill_a_page_to_limit)
{
    for (int n = 1; n <= 30; n++)
        insert_sized(n, 100, JOB_BODY_TEXT);
    cr_assert_eq(walk_jobs(10, 30), 3);
    cr_assert_eq(walk_jobs(1000, 30), 1);
}

BOTH(a_filtered_page_stops_at_the_byte_budget_too)
{
    store_filter f = {.status = -1, .source = -1, .routing_key = "rk"};
    job_t *jobs = NULL;
    char *next = NULL;
    size_t n = 0;

    for (int n_ = 1; n_ <= 6; n_++)
        insert_sized(n_, 30000, JOB_BODY_TEXT);
    /* the search path (a filter other than status) follows the same rule */
    cr_assert_eq(store_list(g_st, &f, 1000, NULL, &jobs, &n, &next), RMQS_OK);
    cr_assert_eq(n, 2);
    cr_assert_not_null(next);
    ut_jobs_free(jobs, n);
    free(next);
}

/* ------------------------------------------------------------------------ */
/* store_schedule_list                                                      */

BOTH(a_schedule_page_stops_at_the_byte_budget)
{
    size_t len = 20000, pages = 0, seen = 0;
    char *spec = malloc(len + 32), *after = NULL;

    cr_assert_not_null(spec);
    for (int i = 0; i < 8; i++) {
        char name[16];
        store_schedule s = {.name = name,
                            .spec = spec,
                            .next_fire_at = 1000,
                            .last_fire_at = -1,
                            .created_at = 1,
                            .updated_at = 1};

        /* schedule 3 holds a body larger than the budget */
        size_t body = i == 3 ? 2 * BUDGET : len;
        char *big = realloc(spec, body + 32);
        cr_assert_not_null(big);
        spec = s.spec = big;
        snprintf(name, sizeof name, "s%02d", i);
        snprintf(spec, body + 32, "{\"body\":\"%0*d\"}", (int)body, 0);
        cr_assert_eq(store_schedule_put(g_st, &s, NULL, NULL, NULL), RMQS_OK);
    }
    free(spec);
    for (;;) {
        store_schedule *rows = NULL;
        size_t n = 0, bytes = 0;
        char *next = NULL, want[16];

        cr_assert_lt(pages, 10, "pagination does not end");
        cr_assert_eq(store_schedule_list(g_st, 1000, after, &rows, &n, &next),
                     RMQS_OK);
        pages++;
        for (size_t i = 0; i < n; i++) {
            snprintf(want, sizeof want, "s%02zu", seen++);
            cr_assert_str_eq(rows[i].name, want);
            bytes += store_item_bytes(
                JOB_BODY_TEXT, 0, strlen(rows[i].name) + strlen(rows[i].spec));
        }
        cr_assert(n == 1 || bytes <= BUDGET, "page %zu: %zu bytes", pages,
                  bytes);
        store_schedules_free(rows, n);
        free(after);
        after = next;
        if (next == NULL)
            break;
    }
    cr_assert_eq(seen, 8);
    /* s00-s02, s03 alone, s04-s06, s07 */
    cr_assert_eq(pages, 4);
}
