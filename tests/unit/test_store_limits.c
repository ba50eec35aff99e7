/*
 * test_store_limits.c - the flow limits of the store (store.h, "Flow
 * limits"; service/store/store_limits.c and both backends:
 * store_sqlite_limits.c, store_pg_limits.c) against a real SQLite file and
 * a real PostgreSQL database: every case runs on both (NAME_sqlite,
 * NAME_postgres), the PostgreSQL half on the server tests/run.sh starts
 * (RMQS_TEST_PG_*; a database per test, dropped in .fini), skipped when
 * none is named.
 *
 * What is proven: put creates (generation 1), leaves the same spec alone
 * (generation and times kept) and replaces another (generation + 1,
 * created_at kept); update is a compare-and-set on the generation; get of
 * a missing name; the list in bytewise name order; delete; the cap on
 * creation (never on a replace), also with creations racing from several
 * threads and, on PostgreSQL, from two stores (instances) at once; and
 * that limits survive closing and opening the store again.
 *
 * Suite "store_limits" (CTest: unit.store_limits).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "testutil.h"
#include "timeutil.h"

static ut_both g_b; /* g_b.pg: this case runs on PostgreSQL */
static store_t *g_st;
static int64_t g_now;

static const store_options k_opts = {.synchronous_full = true};

#define SPEC_A "{\"burst\":1,\"rate_per_s\":5}"
#define SPEC_B "{\"burst\":1,\"rate_per_s\":6}"
#define NO_CAP 0

static void setup(void)
{
    ut_both_init(&g_b, "limits");
    g_st = NULL;
    g_now = tu_now_ms();
}

static void teardown(void)
{
    ut_both_fini(&g_b);
}

TestSuite(store_limits, .init = setup, .fini = teardown, .timeout = 120);

static void open_store(bool pg)
{
    g_st = ut_both_open(&g_b, pg, &k_opts);
}

/* Each case body runs once per store (testutil.h). */
#define BOTH(name) UT_BOTH(store_limits, name, open_store)

/* Create name with spec, expecting a new row. */
static void create_ok(const char *name, const char *spec, int64_t max)
{
    bool created = false, unchanged = true;

    cr_assert_eq(store_limit_put(g_st, name, spec, g_now, max, &created,
                                 &unchanged, NULL),
                 RMQS_OK, "put %s", name);
    cr_assert(created && !unchanged, "put %s: created", name);
}

static int64_t count_rows(void)
{
    return ut_both_int(&g_b, "SELECT count(*) FROM limits");
}

/* ------------------------------------------------------------------------ */

BOTH(put_creates_replaces_and_leaves_unchanged)
{
    store_limit out;
    bool created, unchanged;

    cr_assert_eq(count_rows(), 0, "the migration made an empty table");
    cr_assert_eq(store_limit_put(g_st, "orders", SPEC_A, g_now, NO_CAP,
                                 &created, &unchanged, &out),
                 RMQS_OK);
    cr_expect(created);
    cr_expect_not(unchanged);
    cr_expect_str_eq(out.name, "orders");
    cr_expect_str_eq(out.spec, SPEC_A);
    cr_expect_eq(out.generation, 1);
    cr_expect_eq(out.created_at, g_now);
    cr_expect_eq(out.updated_at, g_now);
    store_limit_clear(&out);

    /* the same spec again: nothing changes, not even the times */
    cr_assert_eq(store_limit_put(g_st, "orders", SPEC_A, g_now + 50, NO_CAP,
                                 &created, &unchanged, &out),
                 RMQS_OK);
    cr_expect_not(created);
    cr_expect(unchanged);
    cr_expect_eq(out.generation, 1);
    cr_expect_eq(out.updated_at, g_now);
    store_limit_clear(&out);

    /* another spec: replaced, generation + 1, created_at kept */
    cr_assert_eq(store_limit_put(g_st, "orders", SPEC_B, g_now + 60, NO_CAP,
                                 &created, &unchanged, &out),
                 RMQS_OK);
    cr_expect_not(created);
    cr_expect_not(unchanged);
    cr_expect_str_eq(out.spec, SPEC_B);
    cr_expect_eq(out.generation, 2);
    cr_expect_eq(out.created_at, g_now);
    cr_expect_eq(out.updated_at, g_now + 60);
    store_limit_clear(&out);

    /* and back: generation + 1 again */
    cr_assert_eq(store_limit_put(g_st, "orders", SPEC_A, g_now + 70, NO_CAP,
                                 NULL, NULL, NULL),
                 RMQS_OK, "created, unchanged and out may be NULL");
    cr_assert_eq(store_limit_get(g_st, "orders", &out), RMQS_OK);
    cr_expect_eq(out.generation, 3);
    cr_expect_str_eq(out.spec, SPEC_A);
    store_limit_clear(&out);
    cr_expect_eq(count_rows(), 1);
}

BOTH(update_is_a_compare_and_set_on_the_generation)
{
    store_limit out;

    create_ok("orders", SPEC_A, NO_CAP);
    cr_assert_eq(
        store_limit_update(g_st, "orders", SPEC_B, 1, g_now + 10, &out),
        RMQS_OK);
    cr_expect_eq(out.generation, 2);
    cr_expect_str_eq(out.spec, SPEC_B);
    cr_expect_eq(out.created_at, g_now);
    cr_expect_eq(out.updated_at, g_now + 10);
    store_limit_clear(&out);

    /* a writer that read generation 1 lost: nothing changes */
    cr_expect_eq(
        store_limit_update(g_st, "orders", SPEC_A, 1, g_now + 20, &out),
        RMQS_ECONFLICT);
    cr_expect(ut_is_zero(&out, sizeof out), "*out zeroed on a conflict");
    cr_assert_eq(store_limit_get(g_st, "orders", &out), RMQS_OK);
    cr_expect_eq(out.generation, 2);
    cr_expect_str_eq(out.spec, SPEC_B);
    cr_expect_eq(out.updated_at, g_now + 10);
    store_limit_clear(&out);

    cr_expect_eq(store_limit_update(g_st, "nope", SPEC_A, 1, g_now, &out),
                 RMQS_ENOTFOUND);
    cr_expect_eq(
        store_limit_update(g_st, "orders", SPEC_A, 2, g_now + 30, NULL),
        RMQS_OK, "out may be NULL");
    cr_assert_eq(store_limit_get(g_st, "orders", &out), RMQS_OK);
    cr_expect_eq(out.generation, 3);
    store_limit_clear(&out);
}

BOTH(get_of_a_missing_limit_and_bad_arguments)
{
    store_limit out;
    bool created = true, unchanged = true;

    cr_expect_eq(store_limit_get(g_st, "nope", &out), RMQS_ENOTFOUND);
    cr_expect(ut_is_zero(&out, sizeof out));
    cr_expect_eq(store_limit_get(g_st, "", &out), RMQS_ENOTFOUND);
    cr_expect_eq(store_limit_get(g_st, NULL, &out), RMQS_ENOTFOUND);
    cr_expect_eq(store_limit_put(g_st, "", SPEC_A, g_now, NO_CAP, &created,
                                 &unchanged, &out),
                 RMQS_EINVAL);
    cr_expect_not(created);
    cr_expect_not(unchanged);
    cr_expect_eq(
        store_limit_put(g_st, "x", NULL, g_now, NO_CAP, NULL, NULL, NULL),
        RMQS_EINVAL);
    cr_expect_eq(
        store_limit_put(g_st, "x", "", g_now, NO_CAP, NULL, NULL, NULL),
        RMQS_EINVAL);
    cr_expect_eq(store_limit_update(g_st, NULL, SPEC_A, 1, g_now, NULL),
                 RMQS_EINVAL);
    cr_expect_eq(store_limit_delete(g_st, ""), RMQS_ENOTFOUND);
    cr_expect_eq(count_rows(), 0);
}

BOTH(list_is_every_limit_in_bytewise_name_order)
{
    /* bytewise: '-' < '.' < '0' < ':' < 'A' < '_' < 'a' (a collation by
     * language would put "B" between "a" and "b") */
    static const char *const sorted[] = {"-x", ".x", "0",   ":x",  "B",
                                         "_x", "a",  "a-b", "a.b", "b"};
    static const size_t order[] = {7, 2, 9, 0, 4, 6, 1, 8, 3, 5};
    const size_t n = sizeof sorted / sizeof sorted[0];
    store_limit *rows = (store_limit *)1;
    size_t got = 7;

    cr_assert_eq(store_limit_list(g_st, &rows, &got), RMQS_OK);
    cr_expect_null(rows, "none: NULL");
    cr_expect_eq(got, 0);
    for (size_t i = 0; i < n; i++)
        create_ok(sorted[order[i]], SPEC_A, NO_CAP);
    cr_assert_eq(store_limit_list(g_st, &rows, &got), RMQS_OK);
    cr_assert_eq(got, n);
    for (size_t i = 0; i < n; i++) {
        cr_expect_str_eq(rows[i].name, sorted[i], "row %zu", i);
        cr_expect_str_eq(rows[i].spec, SPEC_A);
        cr_expect_eq(rows[i].generation, 1);
        cr_expect_eq(rows[i].created_at, g_now);
    }
    store_limits_free(rows, got);
}

BOTH(delete_removes_one)
{
    store_limit out, *rows;
    size_t n;

    create_ok("a", SPEC_A, NO_CAP);
    create_ok("b", SPEC_B, NO_CAP);
    cr_assert_eq(store_limit_delete(g_st, "a"), RMQS_OK);
    cr_expect_eq(store_limit_get(g_st, "a", &out), RMQS_ENOTFOUND);
    cr_expect_eq(store_limit_delete(g_st, "a"), RMQS_ENOTFOUND);
    cr_assert_eq(store_limit_list(g_st, &rows, &n), RMQS_OK);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(rows[0].name, "b");
    store_limits_free(rows, n);
    /* created again: a new limit, generation 1 */
    create_ok("a", SPEC_B, NO_CAP);
    cr_assert_eq(store_limit_get(g_st, "a", &out), RMQS_OK);
    cr_expect_eq(out.generation, 1);
    store_limit_clear(&out);
}

BOTH(the_cap_refuses_creation_never_a_replace)
{
    store_limit out;
    bool created = true, unchanged = true;

    create_ok("a", SPEC_A, 2);
    create_ok("b", SPEC_A, 2);
    cr_expect_eq(store_limit_put(g_st, "c", SPEC_A, g_now, 2, &created,
                                 &unchanged, &out),
                 RMQS_ECONFLICT);
    cr_expect_not(created);
    cr_expect_not(unchanged);
    cr_expect(ut_is_zero(&out, sizeof out));
    cr_expect_eq(store_limit_get(g_st, "c", &out), RMQS_ENOTFOUND,
                 "nothing stored");
    cr_expect_eq(count_rows(), 2);

    /* at the cap: a replace, and the same spec again, still work */
    cr_assert_eq(store_limit_put(g_st, "a", SPEC_B, g_now, 2, &created,
                                 &unchanged, &out),
                 RMQS_OK);
    cr_expect_eq(out.generation, 2);
    store_limit_clear(&out);
    cr_assert_eq(store_limit_put(g_st, "a", SPEC_B, g_now, 2, &created,
                                 &unchanged, NULL),
                 RMQS_OK);
    cr_expect(unchanged);
    /* a lower cap than what is kept refuses creation, not what exists */
    cr_expect_eq(store_limit_put(g_st, "c", SPEC_A, g_now, 1, NULL, NULL, NULL),
                 RMQS_ECONFLICT);
    cr_assert_eq(store_limit_put(g_st, "b", SPEC_B, g_now, 1, NULL, NULL, NULL),
                 RMQS_OK);
    /* one deleted: room for one */
    cr_assert_eq(store_limit_delete(g_st, "b"), RMQS_OK);
    create_ok("c", SPEC_A, 2);
    cr_expect_eq(store_limit_put(g_st, "d", SPEC_A, g_now, 2, NULL, NULL, NULL),
                 RMQS_ECONFLICT);
    /* no cap */
    create_ok("d", SPEC_A, NO_CAP);
    create_ok("e", SPEC_A, -1);
    cr_expect_eq(count_rows(), 4);
}

/* ---- creations racing at the cap ----------------------------------------- */

#define RACERS 8
#define RACE_CAP 3

typedef struct racer {
    store_t *st;
    int n;
    rmqs_rc rc;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    char name[16];

    snprintf(name, sizeof name, "racer-%d", r->n);
    r->rc =
        store_limit_put(r->st, name, SPEC_A, g_now, RACE_CAP, NULL, NULL, NULL);
    return NULL;
}

BOTH(creations_racing_at_the_cap_never_pass_it)
{
    /* on PostgreSQL half the racers use a second store: another instance */
    store_t *other = g_b.pg ? ut_store_open(g_b.url, &k_opts) : g_st;
    racer r[RACERS];
    pthread_t t[RACERS];
    int ok = 0;

    for (int i = 0; i < RACERS; i++) {
        r[i] = (racer){.st = i % 2 ? other : g_st, .n = i};
        cr_assert_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < RACERS; i++) {
        pthread_join(t[i], NULL);
        cr_expect(r[i].rc == RMQS_OK || r[i].rc == RMQS_ECONFLICT,
                  "racer %d: %d", i, r[i].rc);
        ok += r[i].rc == RMQS_OK;
    }
    cr_expect_eq(ok, RACE_CAP);
    cr_expect_eq(count_rows(), RACE_CAP);
    if (other != g_st)
        store_close(other);
}

BOTH(limits_survive_closing_and_opening_the_store)
{
    store_limit out;

    create_ok("kept", SPEC_A, NO_CAP);
    cr_assert_eq(store_limit_update(g_st, "kept", SPEC_B, 1, g_now + 5, NULL),
                 RMQS_OK);
    store_close(g_b.st);
    g_b.st = NULL;
    g_st = ut_both_open(&g_b, g_b.pg, &k_opts);
    cr_assert_eq(store_limit_get(g_st, "kept", &out), RMQS_OK);
    cr_expect_str_eq(out.spec, SPEC_B);
    cr_expect_eq(out.generation, 2);
    cr_expect_eq(out.created_at, g_now);
    cr_expect_eq(out.updated_at, g_now + 5);
    store_limit_clear(&out);
}
