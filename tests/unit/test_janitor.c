/*
 * test_janitor.c - service/dispatch/janitor.c on a real store (a SQLite file in a
 * fresh folder, opened with manual_checkpoint as the service does, so the
 * janitor is the only one that checkpoints).
 *
 * What janitor.h promises, and how a test sees it without sleeping:
 *   - checkpoints: the WAL is copied into the database file. A checkpoint
 *     is seen by copying the main file alone (without its -wal) and
 *     counting the jobs in the copy: a job is there only once a checkpoint
 *     moved it. Tests await that with a deadline (ut_await);
 *   - purge: finished jobs (sent, failed, cancelled) older than the
 *     retention go, with their idempotency keys, in transactions of
 *     purge_batch rows; pending and publishing jobs and recent ones stay;
 *     retention 0 keeps everything; a purge runs once per purge interval;
 *   - stop: prompt even in the middle of a long sleep, and one last
 *     checkpoint.
 * Job times are built from now; intervals are 20 ms ("often") or an hour
 * ("not again during the test").
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "janitor.h"
#include "store.h"
#include "testutil.h"
#include "timeutil.h"

#define AWAIT_MS 10000 /* generous: the machine is shared and sanitized */
#define OFTEN_MS 20
#define HOUR_MS UT_HOUR

static char g_dir[UT_PATH_MAX];
static char g_path[UT_PATH_MAX];
static char g_snap[UT_PATH_MAX];
static store_t *g_st;
static janitor_t *g_j;

static void setup(void)
{
    static const store_options so = {.synchronous_full = true,
                                     .manual_checkpoint = true};

    ut_tmpdir(g_dir, "janitor");
    ut_path(g_path, g_dir, "jobs.db");
    ut_path(g_snap, g_dir, "snapshot.db");
    g_st = ut_store_open(g_path, &so);
    g_j = NULL;
}

static void teardown(void)
{
    janitor_free(g_j);
    store_close(g_st);
    ut_rmtree(g_dir);
}

TestSuite(janitor, .init = setup, .fini = teardown, .timeout = 60);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static janitor_t *start(int64_t retention_ms, int64_t purge_interval_ms,
                        int64_t checkpoint_interval_ms, size_t purge_batch)
{
    const janitor_options o = {.retention_ms = retention_ms,
                               .purge_interval_ms = purge_interval_ms,
                               .checkpoint_interval_ms = checkpoint_interval_ms,
                               .purge_batch = purge_batch};
    janitor_t *j = janitor_new(g_st, &o);

    cr_assert_not_null(j);
    cr_assert_eq(janitor_start(j), RMQS_OK);
    return j;
}

/* Store job n with this status, last changed at updated_at. */
static void put(int n, job_status status, int64_t updated_at, const char *key)
{
    job_t j;

    ut_job_make(&j, n, updated_at);
    j.status = status;
    j.created_at = updated_at;
    j.updated_at = updated_at;
    if (status == JOB_SENT)
        j.sent_at = updated_at;
    cr_assert_eq(store_insert(g_st, &j, key, key ? "{}" : NULL, NULL, NULL),
                 RMQS_OK, "job %d", n);
    job_clear(&j);
}

static bool in_store(int n)
{
    return ut_store_has(g_st, n);
}

/* The WHERE clause for job n's id (stored as 16 bytes). */
static void id_clause(int n, char out[64])
{
    char id[JOB_ID_LEN + 1], hex[33];
    size_t k = 0;

    ut_job_id(n, id);
    for (const char *p = id; *p; p++)
        if (*p != '-')
            hex[k++] = *p;
    hex[k] = '\0';
    snprintf(out, 64, "id = X'%s'", hex);
}

/* Whether job n is in the database file itself, WAL left aside: copy the
 * main file alone and look in the copy. false while the copy cannot be
 * read (no checkpoint has written the schema yet, or one is under way). */
static bool in_main_file(int n)
{
    char wal[UT_PATH_MAX + 8], where[64], sql[128];
    size_t len;
    char *bytes = ut_read_file(g_path, &len);
    FILE *f;
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    bool found = false;

    snprintf(wal, sizeof(wal), "%s-wal", g_snap);
    remove(wal);
    f = fopen(g_snap, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
    free(bytes);
    id_clause(n, where);
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM jobs WHERE %s", where);
    if (sqlite3_open_v2(g_snap, &db, SQLITE_OPEN_READWRITE, NULL) ==
            SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        found = sqlite3_column_int(s, 0) == 1;
    sqlite3_finalize(s);
    sqlite3_close(db);
    return found;
}

static bool main_file_has(void *n)
{
    return in_main_file(*(int *)n);
}

/* Await a checkpoint that carries job n into the database file. */
static void await_checkpointed(int n)
{
    cr_assert(ut_await(AWAIT_MS, main_file_has, &n),
              "job %d never reached the database file", n);
}

static bool gone(void *n)
{
    return !in_store(*(int *)n);
}

/* Await the purge of job n. */
static void await_purged(int n)
{
    cr_assert(ut_await(AWAIT_MS, gone, &n), "job %d never purged", n);
}

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                              */

Test(janitor, checkpoints_at_start_and_then_every_interval)
{
    put(1, JOB_PENDING, tu_now_ms(), NULL);
    cr_assert_not(in_main_file(1), "only in the WAL before the janitor runs");
    g_j = start(0, HOUR_MS, OFTEN_MS, 0);
    await_checkpointed(1);
    put(2, JOB_PENDING, tu_now_ms(), NULL);
    await_checkpointed(2);
    put(3, JOB_PENDING, tu_now_ms(), NULL);
    await_checkpointed(3);
}

Test(janitor, sleeps_between_checkpoints_and_checkpoints_once_more_at_stop)
{
    int64_t t0;

    put(1, JOB_PENDING, tu_now_ms(), NULL);
    g_j = start(0, HOUR_MS, HOUR_MS, 0);
    await_checkpointed(1); /* the one at start */
    put(2, JOB_PENDING, tu_now_ms(), NULL);
    cr_expect_not(in_main_file(2), "checkpointed again within the hour");

    t0 = tu_mono_ms();
    janitor_stop(g_j); /* wakes it from its hour-long sleep */
    cr_expect_lt(tu_mono_ms() - t0, 2000, "stop waited for the sleep");
    cr_expect(in_main_file(2), "no checkpoint at stop");
    janitor_stop(g_j); /* twice is harmless */
}

/* ------------------------------------------------------------------------ */
/* Retention purge                                                          */

Test(janitor, purges_finished_jobs_past_retention_in_small_transactions)
{
    int64_t now = tu_now_ms(), old = now - 2 * HOUR_MS, recent = now - 60000;
    int64_t counts[5];

    /* seven finished and old: more than two purge_batch transactions */
    for (int n = 1; n <= 5; n++)
        put(n, JOB_SENT, old, NULL);
    put(6, JOB_FAILED, old, NULL);
    put(7, JOB_CANCELLED, old, "key-of-7");
    /* what stays: not finished, or finished within the retention */
    put(8, JOB_PENDING, old, NULL);
    put(9, JOB_PUBLISHING, old, NULL);
    put(10, JOB_SENT, recent, "key-of-10");
    /* one round (the interval is an hour) must take all seven */
    g_j = start(HOUR_MS, HOUR_MS, OFTEN_MS, 2);
    for (int n = 1; n <= 7; n++)
        await_purged(n);
    for (int n = 8; n <= 10; n++)
        cr_expect(in_store(n), "job %d purged", n);
    cr_expect_eq(ut_sql_int(g_path, "SELECT count(*) FROM idempotency "
                                    "WHERE key = 'key-of-7'"),
                 0, "a purged job's key stayed");
    cr_expect_eq(ut_sql_int(g_path, "SELECT count(*) FROM idempotency "
                                    "WHERE key = 'key-of-10'"),
                 1);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PENDING], 1);
    cr_expect_eq(counts[JOB_PUBLISHING], 1);
    cr_expect_eq(counts[JOB_SENT], 1);
    cr_expect_eq(counts[JOB_FAILED], 0);
    cr_expect_eq(counts[JOB_CANCELLED], 0);
}

Test(janitor, purges_once_per_purge_interval)
{
    int64_t old = tu_now_ms() - 2 * HOUR_MS;

    put(1, JOB_SENT, old, NULL);
    g_j = start(HOUR_MS, HOUR_MS, OFTEN_MS, 0);
    await_purged(1);
    put(2, JOB_SENT, old, NULL);
    /* a later pass of the loop has run once this is in the file */
    await_checkpointed(2);
    put(3, JOB_PENDING, tu_now_ms(), NULL);
    await_checkpointed(3);
    cr_expect(in_store(2), "purged again before the purge interval");
}

Test(janitor, retention_zero_keeps_every_job)
{
    int64_t ancient = tu_now_ms() - 3650 * UT_DAY;

    put(1, JOB_SENT, ancient, NULL);
    g_j = start(0, OFTEN_MS, OFTEN_MS, 1);
    await_checkpointed(1);
    put(2, JOB_FAILED, ancient, NULL);
    await_checkpointed(2); /* several passes later */
    cr_expect(in_store(1));
    cr_expect(in_store(2));
}

Test(janitor, stop_and_free_are_harmless_on_a_janitor_never_started)
{
    const janitor_options o = {.retention_ms = HOUR_MS};

    g_j = janitor_new(g_st, &o);
    cr_assert_not_null(g_j);
    janitor_stop(g_j);
    janitor_stop(NULL);
    janitor_free(NULL);
}
