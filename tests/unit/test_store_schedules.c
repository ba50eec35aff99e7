/*
 * test_store_schedules.c - the recurring schedules of the store (store.h,
 * "Recurring schedules"; service/store/store_schedules.c and both backends:
 * store_sqlite_schedules.c, store_pg_schedules.c) and the job fields of a
 * schedule's run (schedule, fire_at, expires_at, STORE_OUT_EXPIRE, GET
 * /jobs?schedule=), against a real SQLite file and a real PostgreSQL
 * database: every case runs on both (NAME_sqlite, NAME_postgres), the
 * PostgreSQL half on the server tests/run.sh starts (RMQS_TEST_PG_*; a
 * database per test, dropped in .fini), skipped when none is named.
 * Migrations from the previous schema of each store, with jobs in it, are
 * checked row by row.
 *
 * Times are relative to now (tu_now_ms), never calendar dates.
 *
 * Suite "store_schedules" (CTest: unit.store_schedules).
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "job.h"
#include "store.h"
#include "testutil.h"
#include "timeutil.h"

static ut_both g_b; /* g_b.pg: this case runs on PostgreSQL */
static store_t *g_st;
static int64_t g_now;

static const store_options k_opts = {.synchronous_full = true};

static void setup(void)
{
    ut_both_init(&g_b, "sched");
    g_st = NULL;
    g_now = tu_now_ms();
}

static void teardown(void)
{
    if (g_st != g_b.st)
        store_close(g_st);
    ut_both_fini(&g_b);
}

TestSuite(store_schedules, .init = setup, .fini = teardown, .timeout = 120);

static void open_store(bool pg)
{
    g_st = ut_both_open(&g_b, pg, &k_opts);
}

/* Each case body runs once per store (testutil.h). */
#define BOTH(name) UT_BOTH(store_schedules, name, open_store)

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

/* A schedule to store (borrowed strings). */
static store_schedule sched(const char *name, const char *spec, int64_t next)
{
    store_schedule s = {.name = (char *)name,
                        .spec = (char *)spec,
                        .generation = 99,
                        .created_at = g_now,
                        .updated_at = g_now,
                        .next_fire_at = next,
                        .last_fire_at = -1};
    return s;
}

static void put_ok(const char *name, const char *spec, int64_t next,
                   bool paused)
{
    store_schedule s = sched(name, spec, next);
    bool created = false, unchanged = true;

    s.paused = paused;
    cr_assert_eq(store_schedule_put(g_st, &s, &created, &unchanged, NULL),
                 RMQS_OK, "put %s", name);
    cr_assert(created && !unchanged, "put %s: created", name);
}

/* Run number n of schedule name, for fire time fire (the caller clears). */
static void run_make(job_t *j, int n, const char *name, int64_t fire)
{
    ut_job_make(j, n, fire);
    j->source = JOB_SOURCE_SCHEDULE;
    j->schedule = ut_strdup(name);
    j->fire_at = fire;
    j->expires_at = fire + 60000;
    j->created_at = g_now;
    j->updated_at = g_now;
}

static store_schedule get_ok(const char *name)
{
    store_schedule s;

    cr_assert_eq(store_schedule_get(g_st, name, &s), RMQS_OK, "get %s", name);
    return s;
}

static void advance_one(store_advance *a, bool applied, bool existed)
{
    cr_assert_eq(store_schedule_advance(g_st, a, 1, g_now), RMQS_OK);
    cr_assert_eq(a->applied, applied, "%s: applied", a->name);
    cr_assert_eq(a->job_existed, existed, "%s: job_existed", a->name);
}

/* Jobs of schedule name (all statuses). */
static size_t runs_of(const char *name)
{
    store_filter f = {.status = -1, .source = -1, .schedule = name};
    job_t *jobs;
    size_t n;
    char *next;

    cr_assert_eq(store_list(g_st, &f, 1000, NULL, &jobs, &n, &next), RMQS_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_str_eq(jobs[i].schedule, name);
    ut_jobs_free(jobs, n);
    free(next);
    return n;
}

static void counts(int64_t want_pending, int64_t want_publishing,
                   int64_t want_sent, int64_t want_cancelled)
{
    int64_t c[5];

    cr_assert_eq(store_counts(g_st, c), RMQS_OK);
    cr_expect_eq(c[JOB_PENDING], want_pending, "pending %ld", (long)c[0]);
    cr_expect_eq(c[JOB_PUBLISHING], want_publishing, "publishing %ld",
                 (long)c[1]);
    cr_expect_eq(c[JOB_SENT], want_sent, "sent %ld", (long)c[2]);
    cr_expect_eq(c[JOB_CANCELLED], want_cancelled, "cancelled %ld", (long)c[4]);
}

/* Claim every run due by due_by as the dispatcher does (claim ahead),
 * expecting n; ids into ids (JOB_ID_LEN + 1 each). */
static void claim_ahead(int64_t due_by, size_t want, char ids[][JOB_ID_LEN + 1])
{
    job_t *jobs;
    size_t n;

    cr_assert_eq(store_claim_ahead(g_st, due_by, g_now, 100, &jobs, &n),
                 RMQS_OK);
    cr_assert_eq(n, want, "claimed %zu", n);
    for (size_t i = 0; i < n; i++)
        memcpy(ids[i], jobs[i].id, JOB_ID_LEN + 1);
    ut_jobs_free(jobs, n);
}

/* ------------------------------------------------------------------------ */
/* Put, update, get, list, delete                                           */

BOTH(put_creates_replaces_and_leaves_unchanged)
{
    store_schedule s = sched("daily", "{\"cron\":\"0 8 * * *\"}", g_now + 1000);
    store_schedule out;
    bool created, unchanged;

    cr_assert_eq(store_schedule_put(g_st, &s, &created, &unchanged, &out),
                 RMQS_OK);
    cr_assert(created);
    cr_assert_not(unchanged);
    cr_expect_eq(out.generation, 1, "1 at creation, whatever was given");
    cr_expect_str_eq(out.name, "daily");
    cr_expect_str_eq(out.spec, s.spec);
    cr_expect_eq(out.created_at, g_now);
    cr_expect_eq(out.next_fire_at, g_now + 1000);
    cr_expect_eq(out.last_fire_at, -1);
    cr_expect_str_eq(out.last_job_id, "");
    cr_expect_not(out.paused);
    store_schedule_clear(&out);

    /* the same body again: nothing changes, not even the times */
    s.updated_at = g_now + 50;
    s.next_fire_at = g_now + 7000;
    cr_assert_eq(store_schedule_put(g_st, &s, &created, &unchanged, &out),
                 RMQS_OK);
    cr_assert_not(created);
    cr_assert(unchanged);
    cr_expect_eq(out.generation, 1);
    cr_expect_eq(out.updated_at, g_now);
    cr_expect_eq(out.next_fire_at, g_now + 1000);
    store_schedule_clear(&out);

    /* another body: replaced, generation + 1, created_at kept */
    s.spec = "{\"cron\":\"0 9 * * *\"}";
    s.created_at = g_now + 5;
    s.updated_at = g_now + 60;
    s.paused = true;
    s.next_fire_at = g_now + 2000;
    cr_assert_eq(store_schedule_put(g_st, &s, &created, &unchanged, &out),
                 RMQS_OK);
    cr_assert_not(created);
    cr_assert_not(unchanged);
    cr_expect_eq(out.generation, 2);
    cr_expect_eq(out.created_at, g_now);
    cr_expect_eq(out.updated_at, g_now + 60);
    cr_expect_str_eq(out.spec, "{\"cron\":\"0 9 * * *\"}");
    cr_expect(out.paused);
    cr_expect_eq(out.next_fire_at, g_now + 2000);
    store_schedule_clear(&out);

    out = get_ok("daily");
    cr_expect_eq(out.generation, 2);
    cr_expect_str_eq(out.spec, "{\"cron\":\"0 9 * * *\"}");
    cr_expect_eq(out.last_job_status, -1);
    store_schedule_clear(&out);

    /* bad input changes nothing */
    s.name = "";
    cr_expect_eq(store_schedule_put(g_st, &s, NULL, NULL, NULL), RMQS_EINVAL);
    s.name = "daily";
    s.spec = NULL;
    cr_expect_eq(store_schedule_put(g_st, &s, NULL, NULL, NULL), RMQS_EINVAL);
    out = get_ok("daily");
    cr_expect_eq(out.generation, 2);
    store_schedule_clear(&out);
}

BOTH(update_is_a_compare_and_set_on_the_generation)
{
    store_schedule s = sched("p", "{\"every_ms\":1000}", g_now + 1000);
    store_schedule out;

    put_ok("p", "{\"every_ms\":1000}", g_now + 1000, false);
    s.spec = "{\"every_ms\":1000,\"paused\":true}";
    s.paused = true;
    s.next_fire_at = -1;
    s.updated_at = g_now + 10;
    cr_assert_eq(store_schedule_update(g_st, &s, 1, &out), RMQS_OK);
    cr_expect_eq(out.generation, 2);
    cr_expect(out.paused);
    cr_expect_eq(out.next_fire_at, -1);
    cr_expect_eq(out.updated_at, g_now + 10);
    cr_expect_eq(out.created_at, g_now);
    store_schedule_clear(&out);

    /* a writer that read generation 1 loses, and changes nothing */
    s.spec = "{\"every_ms\":5000}";
    s.paused = false;
    cr_assert_eq(store_schedule_update(g_st, &s, 1, &out), RMQS_ECONFLICT);
    cr_expect_null(out.name);
    out = get_ok("p");
    cr_expect_eq(out.generation, 2);
    cr_expect_str_eq(out.spec, "{\"every_ms\":1000,\"paused\":true}");
    cr_expect(out.paused);
    store_schedule_clear(&out);

    /* it re-reads and retries with 2 */
    cr_assert_eq(store_schedule_update(g_st, &s, 2, NULL), RMQS_OK);
    out = get_ok("p");
    cr_expect_eq(out.generation, 3);
    cr_expect_str_eq(out.spec, "{\"every_ms\":5000}");
    store_schedule_clear(&out);

    s.name = "nope";
    cr_expect_eq(store_schedule_update(g_st, &s, 1, NULL), RMQS_ENOTFOUND);
}

BOTH(list_pages_in_bytewise_name_order_and_delete)
{
    const char *names[] = {"b", "a", "c", "aa", "B"};
    const char *want[] = {"B", "a", "aa", "b", "c"};
    store_schedule *rows;
    size_t n, seen = 0;
    char *next = NULL, *after = NULL;

    for (size_t i = 0; i < 5; i++)
        put_ok(names[i], "{}", g_now + 1000, false);
    do {
        cr_assert_eq(store_schedule_list(g_st, 2, after, &rows, &n, &next),
                     RMQS_OK);
        for (size_t i = 0; i < n; i++)
            cr_expect_str_eq(rows[i].name, want[seen + i]);
        seen += n;
        cr_expect_eq(next != NULL, seen < 5, "next after %zu", seen);
        store_schedules_free(rows, n);
        free(after);
        after = next;
    } while (next != NULL && seen < 10);
    cr_expect_eq(seen, 5);

    cr_assert_eq(store_schedule_delete(g_st, "aa"), RMQS_OK);
    cr_expect_eq(store_schedule_get(g_st, "aa", &(store_schedule){0}),
                 RMQS_ENOTFOUND);
    cr_expect_eq(store_schedule_delete(g_st, "aa"), RMQS_ENOTFOUND);
    cr_expect_eq(store_schedule_delete(g_st, ""), RMQS_ENOTFOUND);
    cr_assert_eq(store_schedule_list(g_st, 10, NULL, &rows, &n, &next),
                 RMQS_OK);
    cr_expect_eq(n, 4);
    cr_expect_null(next, "the last page has no cursor");
    store_schedules_free(rows, n);
    cr_expect_eq(store_schedule_list(g_st, 0, NULL, &rows, &n, &next),
                 RMQS_EINVAL);
}

/* ------------------------------------------------------------------------ */
/* The scheduler's reads                                                    */

BOTH(due_is_active_schedules_earliest_first_with_last_job_status)
{
    store_schedule *rows;
    size_t n;
    bool any;
    int64_t at;
    char ids[4][JOB_ID_LEN + 1];
    job_t run;

    cr_assert_eq(store_schedule_next_at(g_st, &any, &at), RMQS_OK);
    cr_expect_not(any, "no schedules: nothing next");
    put_ok("late", "{}", g_now + 3000, false);
    put_ok("x2", "{}", g_now + 2000, false);
    put_ok("early", "{}", g_now + 1000, false);
    put_ok("mid", "{}", g_now + 2000, false);
    put_ok("paused", "{}", g_now + 500, true);
    put_ok("ended", "{}", -1, false);
    put_ok("far", "{}", g_now + 100000, false);

    cr_assert_eq(store_schedule_due(g_st, g_now + 2500, 10, &rows, &n),
                 RMQS_OK);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(rows[0].name, "early");
    cr_expect_str_eq(rows[1].name, "mid", "ties by name");
    cr_expect_str_eq(rows[2].name, "x2");
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(rows[i].last_job_status, -1, "no run yet");
    store_schedules_free(rows, n);
    cr_assert_eq(store_schedule_due(g_st, g_now + 2500, 2, &rows, &n), RMQS_OK);
    cr_expect_eq(n, 2, "at most limit");
    store_schedules_free(rows, n);
    cr_assert_eq(store_schedule_next_at(g_st, &any, &at), RMQS_OK);
    cr_expect(any);
    cr_expect_eq(at, g_now + 1000, "a paused schedule is not next");

    /* a run of "early": its status follows the job's */
    run_make(&run, 1, "early", g_now + 1000);
    store_advance a = {.name = "early",
                       .generation = 1,
                       .old_next = g_now + 1000,
                       .new_next = g_now + 1500,
                       .job = &run};
    advance_one(&a, true, false);
    cr_assert_eq(store_schedule_due(g_st, g_now + 1500, 10, &rows, &n),
                 RMQS_OK);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(rows[0].last_job_id, run.id);
    cr_expect_eq(rows[0].last_fire_at, g_now + 1000);
    cr_expect_eq(rows[0].next_fire_at, g_now + 1500);
    cr_expect_eq(rows[0].last_job_status, JOB_PENDING);
    store_schedules_free(rows, n);

    /* claimed by the dispatcher (SQLite: held, its claim not written
     * yet): publishing, as store_get shows it */
    claim_ahead(g_now + 1000, 1, ids);
    cr_assert_str_eq(ids[0], run.id);
    cr_assert_eq(store_schedule_due(g_st, g_now + 1500, 10, &rows, &n),
                 RMQS_OK);
    cr_expect_eq(rows[0].last_job_status, JOB_PUBLISHING);
    store_schedules_free(rows, n);
    const char *claims[] = {ids[0]};
    store_outcome o = {.id = ids[0], .kind = STORE_OUT_SENT};
    cr_assert_eq(store_record(g_st, claims, 1, &o, 1, g_now + 1), RMQS_OK);
    cr_assert_eq(store_schedule_due(g_st, g_now + 1500, 10, &rows, &n),
                 RMQS_OK);
    cr_expect_eq(rows[0].last_job_status, JOB_SENT);
    store_schedules_free(rows, n);

    /* purged: gone, -1, but the schedule still names it */
    size_t purged;
    cr_assert_eq(store_purge(g_st, g_now + UT_DAY, 100, &purged), RMQS_OK);
    cr_expect_eq(purged, 1);
    cr_assert_eq(store_schedule_due(g_st, g_now + 1500, 10, &rows, &n),
                 RMQS_OK);
    cr_expect_eq(rows[0].last_job_status, -1);
    cr_expect_str_eq(rows[0].last_job_id, run.id);
    store_schedules_free(rows, n);
    job_clear(&run);
}

BOTH(counts_by_state)
{
    int64_t c[3] = {9, 9, 9};

    cr_assert_eq(store_schedule_counts(g_st, c), RMQS_OK);
    cr_expect(c[0] == 0 && c[1] == 0 && c[2] == 0);
    put_ok("a1", "{}", g_now + 1000, false);
    put_ok("a2", "{}", g_now + 2000, false);
    put_ok("p1", "{}", g_now + 1000, true);
    put_ok("p2", "{}", -1, true); /* paused wins over ended */
    put_ok("e1", "{}", -1, false);
    cr_assert_eq(store_schedule_counts(g_st, c), RMQS_OK);
    cr_expect_eq(c[STORE_SCHED_ACTIVE], 2);
    cr_expect_eq(c[STORE_SCHED_PAUSED], 2);
    cr_expect_eq(c[STORE_SCHED_ENDED], 1);
}

/* ------------------------------------------------------------------------ */
/* Advance                                                                  */

BOTH(advance_is_a_compare_and_set_and_creates_each_run_once)
{
    int64_t f = g_now + 1000;
    store_schedule s;
    job_t run, again, got;

    put_ok("s", "{}", f, false);
    run_make(&run, 1, "s", f);
    store_advance a = {.name = "s",
                       .generation = 1,
                       .old_next = f,
                       .new_next = f + 1000,
                       .job = &run};
    advance_one(&a, true, false);
    s = get_ok("s");
    cr_expect_eq(s.next_fire_at, f + 1000);
    cr_expect_eq(s.last_fire_at, f);
    cr_expect_str_eq(s.last_job_id, run.id);
    cr_expect_eq(s.generation, 1, "an advance is not a change of spec");
    store_schedule_clear(&s);
    cr_assert_eq(store_get(g_st, run.id, &got), RMQS_OK);
    cr_expect_eq(got.source, JOB_SOURCE_SCHEDULE);
    cr_expect_str_eq(got.schedule, "s");
    cr_expect_eq(got.fire_at, f);
    cr_expect_eq(got.expires_at, f + 60000);
    cr_expect_eq(got.status, JOB_PENDING);
    cr_expect_eq(got.deliver_at, f);
    job_clear(&got);

    /* a second advance with the old next (another instance, a retry
     * after a crash): not applied, and nothing else for it */
    advance_one(&a, false, false);
    /* a stale generation neither */
    store_advance stale = {.name = "s",
                           .generation = 2,
                           .old_next = f + 1000,
                           .new_next = f + 2000,
                           .job = NULL};
    advance_one(&stale, false, false);
    s = get_ok("s");
    cr_expect_eq(s.next_fire_at, f + 1000);
    store_schedule_clear(&s);
    cr_expect_eq(runs_of("s"), 1);

    /* the same run id twice (e.g. after a replace back to the same
     * generation's fire time): one job; the schedule still moves on */
    put_ok("t", "{}", f, false);
    run_make(&again, 1, "t", f); /* the id of s's run */
    store_advance b = {.name = "t",
                       .generation = 1,
                       .old_next = f,
                       .new_next = f + 500,
                       .job = &again};
    advance_one(&b, true, true);
    s = get_ok("t");
    cr_expect_eq(s.next_fire_at, f + 500);
    store_schedule_clear(&s);
    cr_expect_eq(runs_of("t"), 0, "the existing job was left as it was");
    counts(1, 0, 0, 0);

    /* a batch: a skipped fire time (no job), a run, and an end */
    job_t r2;
    run_make(&r2, 2, "s", f + 1000);
    store_advance batch[] = {
        {.name = "t",
         .generation = 1,
         .old_next = f + 500,
         .new_next = f + 1500,
         .job = NULL},
        {.name = "s",
         .generation = 1,
         .old_next = f + 1000,
         .new_next = -1,
         .job = &r2},
        {.name = "missing", .generation = 1, .old_next = f, .new_next = f + 1},
    };
    cr_assert_eq(store_schedule_advance(g_st, batch, 3, g_now), RMQS_OK);
    cr_expect(batch[0].applied && !batch[0].job_existed);
    cr_expect(batch[1].applied && !batch[1].job_existed);
    cr_expect_not(batch[2].applied);
    s = get_ok("t");
    cr_expect_eq(s.next_fire_at, f + 1500);
    cr_expect_eq(s.last_fire_at, f,
                 "a skipped fire time is no run: the "
                 "last run stays the one before");
    store_schedule_clear(&s);
    s = get_ok("s");
    cr_expect_eq(s.next_fire_at, -1, "ended");
    cr_expect_eq(s.last_fire_at, f + 1000);
    cr_expect_str_eq(s.last_job_id, r2.id);
    store_schedule_clear(&s);
    cr_expect_eq(runs_of("s"), 2);
    counts(2, 0, 0, 0);
    job_clear(&run);
    job_clear(&again);
    job_clear(&r2);
}

BOTH(advance_refused_by_the_schema_keeps_nothing)
{
    int64_t f = g_now + 1000;
    store_schedule s;
    job_t good, bad;

    put_ok("s", "{}", f, false);
    put_ok("t", "{}", f, false);
    run_make(&good, 1, "s", f);
    run_make(&bad, 2, "t", f);
    bad.max_attempts = 0; /* CHECK (max_attempts >= 1) */
    store_advance batch[] = {
        {.name = "s",
         .generation = 1,
         .old_next = f,
         .new_next = f + 1,
         .job = &good},
        {.name = "t",
         .generation = 1,
         .old_next = f,
         .new_next = f + 1,
         .job = &bad},
    };
    cr_assert_eq(store_schedule_advance(g_st, batch, 2, g_now), RMQS_EINVAL);
    cr_expect_not(batch[0].applied, "nothing of the call was kept");
    cr_expect_not(batch[1].applied);
    s = get_ok("s");
    cr_expect_eq(s.next_fire_at, f);
    cr_expect_str_eq(s.last_job_id, "");
    store_schedule_clear(&s);
    cr_expect_eq(runs_of("s"), 0);
    counts(0, 0, 0, 0);
    /* and the store goes on */
    batch[1].job = NULL;
    cr_assert_eq(store_schedule_advance(g_st, batch, 2, g_now), RMQS_OK);
    cr_expect(batch[0].applied && batch[1].applied);
    counts(1, 0, 0, 0);
    job_clear(&good);
    job_clear(&bad);
}

/* ------------------------------------------------------------------------ */
/* Runs as jobs                                                             */

BOTH(expire_outcome_cancels_a_claimed_run)
{
    const char *why = "missed its fire time by more than misfire_grace_ms";
    int64_t f = g_now - 5000;
    char ids[4][JOB_ID_LEN + 1];
    job_t run, got;

    put_ok("s", "{}", f, false);
    run_make(&run, 1, "s", f);
    run.expires_at = f + 1000;
    store_advance a = {.name = "s",
                       .generation = 1,
                       .old_next = f,
                       .new_next = f + 60000,
                       .job = &run};
    advance_one(&a, true, false);
    claim_ahead(g_now, 1, ids);
    const char *claims[] = {ids[0]};
    store_outcome o = {.id = ids[0], .kind = STORE_OUT_EXPIRE, .error = why};
    cr_assert_eq(store_record(g_st, claims, 1, &o, 1, g_now + 7), RMQS_OK);
    cr_assert_eq(store_get(g_st, run.id, &got), RMQS_OK);
    cr_expect_eq(got.status, JOB_CANCELLED);
    cr_expect_str_eq(got.last_error, why);
    cr_expect_eq(got.updated_at, g_now + 7);
    cr_expect_eq(got.attempts, 1, "as claimed");
    cr_expect_eq(got.sent_at, -1);
    job_clear(&got);
    counts(0, 0, 0, 1);
    /* settled: not claimed again, and a second EXPIRE changes nothing */
    claim_ahead(g_now + UT_HOUR, 0, ids);
    cr_assert_eq(store_settle(g_st, &o, 1, g_now + 9), RMQS_OK);
    counts(0, 0, 0, 1);
    job_clear(&run);
}

BOTH(list_filters_on_schedule)
{
    store_filter f = {.status = -1, .source = -1, .schedule = "s"};
    job_t jobs[5], *page;
    size_t n;
    char *next, *next2;

    for (int i = 0; i < 3; i++)
        run_make(&jobs[i], i + 1, "s", g_now + 1000 * (3 - i));
    run_make(&jobs[3], 4, "t", g_now + 500);
    ut_job_make(&jobs[4], 5, g_now + 100); /* not a run */
    for (int i = 0; i < 5; i++)
        cr_assert_eq(store_insert(g_st, &jobs[i], NULL, NULL, NULL, NULL),
                     RMQS_OK);

    cr_assert_eq(store_list(g_st, &f, 2, NULL, &page, &n, &next), RMQS_OK);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(page[0].id, jobs[2].id, "deliver_at order");
    cr_expect_str_eq(page[1].id, jobs[1].id);
    cr_assert_not_null(next);
    ut_jobs_free(page, n);
    cr_assert_eq(store_list(g_st, &f, 2, next, &page, &n, &next2), RMQS_OK);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(page[0].id, jobs[0].id);
    cr_expect_null(next2);
    ut_jobs_free(page, n);
    free(next);

    /* with a status: one of them cancelled (the old claim path this used
     * to settle one as sent is issue 22's dead code, and failed now and
     * then on PostgreSQL) */
    job_t changed = {0};
    store_change cancel = {.kind = STORE_CHANGE_CANCEL};
    cr_assert_eq(store_update(g_st, jobs[2].id, &cancel, g_now, &changed),
                 RMQS_OK);
    cr_assert_eq(changed.status, JOB_CANCELLED);
    job_clear(&changed);
    f.status = JOB_PENDING;
    cr_assert_eq(store_list(g_st, &f, 10, NULL, &page, &n, &next), RMQS_OK);
    cr_expect_eq(n, 2);
    ut_jobs_free(page, n);
    free(next);

    f = (store_filter){.status = -1, .source = JOB_SOURCE_SCHEDULE};
    cr_assert_eq(store_list(g_st, &f, 10, NULL, &page, &n, &next), RMQS_OK);
    cr_expect_eq(n, 4, "source=schedule: every run");
    ut_jobs_free(page, n);
    free(next);
    cr_expect_eq(runs_of("nope"), 0);
    for (int i = 0; i < 5; i++)
        job_clear(&jobs[i]);
}

BOTH(job_fields_round_trip_for_runs_and_other_jobs)
{
    job_t plain, run, batch[3], got;
    store_insert_req req = {.jobs = batch, .n = 3};

    /* a job that is no run: fire_at -1 and expires_at 0 back, whatever a
     * zeroed job carried */
    ut_job_make(&plain, 1, g_now + 1000);
    cr_assert_eq(plain.fire_at, 0);
    cr_assert_eq(store_insert(g_st, &plain, NULL, NULL, NULL, NULL), RMQS_OK);
    cr_assert_eq(store_get(g_st, plain.id, &got), RMQS_OK);
    cr_expect_null(got.schedule);
    cr_expect_eq(got.fire_at, -1);
    cr_expect_eq(got.expires_at, 0);
    cr_expect_eq(got.source, JOB_SOURCE_HTTP);
    job_clear(&got);

    /* a run through the one-job insert */
    run_make(&run, 2, "sched.name:1-x", g_now + 2000);
    cr_assert_eq(store_insert(g_st, &run, NULL, NULL, NULL, NULL), RMQS_OK);
    cr_assert_eq(store_get(g_st, run.id, &got), RMQS_OK);
    cr_expect_str_eq(got.schedule, "sched.name:1-x");
    cr_expect_eq(got.fire_at, g_now + 2000);
    cr_expect_eq(got.expires_at, g_now + 62000);
    cr_expect_eq(got.source, JOB_SOURCE_SCHEDULE);
    job_clear(&got);

    /* and through a group commit (PostgreSQL: its COPY path) */
    for (int i = 0; i < 3; i++)
        run_make(&batch[i], 10 + i, "b", g_now + 3000 + i);
    batch[1].expires_at = 0;
    cr_assert_eq(store_insert_batch(g_st, &req, 1), RMQS_OK);
    cr_assert_eq(req.rc, RMQS_OK);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(store_get(g_st, batch[i].id, &got), RMQS_OK);
        cr_expect_str_eq(got.schedule, "b");
        cr_expect_eq(got.fire_at, g_now + 3000 + i);
        cr_expect_eq(got.expires_at, i == 1 ? 0 : g_now + 63000 + i);
        cr_expect_eq(got.source, JOB_SOURCE_SCHEDULE);
        job_clear(&got);
    }

    /* the claim returns them too */
    job_t *claimed;
    size_t n;
    cr_assert_eq(store_claim_ahead(g_st, g_now + 2000, g_now, 10, &claimed, &n),
                 RMQS_OK);
    cr_assert_eq(n, 2);
    cr_expect_null(claimed[0].schedule);
    cr_expect_eq(claimed[0].fire_at, -1);
    cr_expect_str_eq(claimed[1].schedule, "sched.name:1-x");
    cr_expect_eq(claimed[1].fire_at, g_now + 2000);
    cr_expect_eq(claimed[1].expires_at, g_now + 62000);
    ut_jobs_free(claimed, n);
    job_clear(&plain);
    job_clear(&run);
    for (int i = 0; i < 3; i++)
        job_clear(&batch[i]);
}

/* ------------------------------------------------------------------------ */
/* PostgreSQL: instances do not wait for each other                         */

Test(store_schedules, advance_skips_a_row_another_instance_is_advancing)
{
    int64_t f = g_now + 1000;
    PGconn *other;
    PGresult *r;
    struct timespec t0, t1;

    open_store(true);
    put_ok("s", "{}", f, false);
    /* another instance's advance holds the row */
    other = PQconnectdb(g_b.url);
    cr_assert_eq(PQstatus(other), CONNECTION_OK);
    r = PQexec(other, "BEGIN; SELECT 1 FROM schedules WHERE name = 's' "
                      "FOR UPDATE");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);

    store_advance a = {
        .name = "s", .generation = 1, .old_next = f, .new_next = f + 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    advance_one(&a, false, false);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_expect_lt((t1.tv_sec - t0.tv_sec) * 1000 +
                     (t1.tv_nsec - t0.tv_nsec) / 1000000,
                 2000, "skipped, not waited for");

    r = PQexec(other, "ROLLBACK");
    PQclear(r);
    PQfinish(other);
    advance_one(&a, true, false);
}

/* ------------------------------------------------------------------------ */
/* Migrations from the previous schema, with jobs in it                     */

/* Every job column the previous schema had, one text per database. */
#define SQLITE_DIGEST                                                         \
    "SELECT group_concat(x, ';') FROM (SELECT seq || '|' || hex(id) || '|' "  \
    "|| status || '|' || exchange || '|' || routing_key || '|' || "           \
    "deliver_at || '|' || due_at || '|' || delay_ms || '|' || created_at || " \
    "'|' || updated_at || '|' || coalesce(sent_at, '-') || '|' || attempts "  \
    "|| '|' || max_attempts || '|' || coalesce(last_error, '-') || '|' || "   \
    "coalesce(headers, '-') || '|' || coalesce(properties, '-') || '|' || "   \
    "body_kind || '|' || hex(body) || '|' || source || '|' || "               \
    "coalesce(message_id, '-') AS x FROM jobs ORDER BY seq)"

static char *sqlite_text(const char *sql)
{
    sqlite3 *db = ut_sql_open(g_b.path);
    sqlite3_stmt *s = NULL;
    char *out;

    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
    out = ut_strdup(sqlite3_column_text(s, 0)
                        ? (const char *)sqlite3_column_text(s, 0)
                        : "");
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
}

/* After a migration: job 3 (binary id) reads as a job that is no run, and
 * the store takes a run (source 2). */
static void old_job_and_new_run(const unsigned char id_bytes[JOB_ID_BYTES])
{
    char id[JOB_ID_LEN + 1];
    job_t got, run;

    job_id_format(id_bytes, id);
    cr_assert_eq(store_get(g_st, id, &got), RMQS_OK);
    cr_expect_eq(got.fire_at, -1);
    cr_expect_eq(got.expires_at, 0);
    cr_expect_null(got.schedule);
    cr_expect_str_eq(got.routing_key, "rk3");
    job_clear(&got);
    run_make(&run, 9999, "s", g_now);
    cr_expect_eq(store_insert(g_st, &run, NULL, NULL, NULL, NULL), RMQS_OK);
    /* ids are still unique */
    memcpy(run.id, id, sizeof(run.id));
    cr_expect_eq(store_insert(g_st, &run, NULL, NULL, NULL, NULL),
                 RMQS_ECONFLICT);
    job_clear(&run);
}

Test(store_schedules, sqlite_migration_keeps_jobs_keys_counts_and_indexes)
{
    size_t n5 = 0;
    int64_t c[5];
    char *before, *after, *idx_before, *idx_after;
    const char *idx_sql =
        "SELECT group_concat(name, ',') FROM (SELECT name "
        "FROM sqlite_schema WHERE type = 'index' AND "
        "tbl_name = 'jobs' AND sql IS NOT NULL ORDER BY name)";
    job_t run;

    while (n5 < store_builtin_migrations_count &&
           store_builtin_migrations[n5].version <= 5)
        n5++;
    cr_assert_eq(store_builtin_migrations[n5 - 1].version, 5);
    /* schema 5 with jobs of every status, source and shape, and keys */
    ut_sql_migrate(g_b.path, store_builtin_migrations, n5);
    ut_sql_exec(g_b.path,
                "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
                "FROM c WHERE i < 250) "
                "INSERT INTO jobs (id, status, exchange, routing_key, "
                "deliver_at, due_at, delay_ms, created_at, updated_at, "
                "sent_at, attempts, max_attempts, last_error, headers, "
                "properties, body_kind, body, source, message_id) "
                "SELECT CAST(printf('%016x', i) AS BLOB), i % 5, 'ex', "
                "'rk' || i, i * 10, i * 10 + 1, 5, 1, 2, "
                "CASE WHEN i % 5 = 2 THEN i END, i % 3, 3, "
                "CASE WHEN i % 7 = 0 THEN 'boom' END, "
                "CASE WHEN i % 2 = 0 THEN '{\"h\":1}' END, "
                "CASE WHEN i % 4 = 0 THEN '{\"message_id\":\"m' || i || "
                "'\"}' END, i % 3, randomblob(i % 17), i % 2, "
                "CASE WHEN i % 4 = 0 THEN 'm' || i END FROM c");
    ut_sql_exec(g_b.path, "DELETE FROM jobs WHERE seq % 50 = 0"); /* gaps */
    ut_sql_exec(g_b.path,
                "INSERT INTO idempotency (key, job_seq, request) "
                "SELECT 'k' || seq, seq, 'r' FROM jobs WHERE seq % 3 = 0");
    /* schema 5: counts kept by the store; the rows above went in behind
     * its back, so count them as 0005 would */
    ut_sql_exec(g_b.path, "UPDATE job_counts SET n = (SELECT count(*) FROM "
                          "jobs WHERE jobs.status = job_counts.status)");
    before = sqlite_text(SQLITE_DIGEST);
    idx_before = sqlite_text(idx_sql);
    int64_t keys = ut_sql_int(g_b.path, "SELECT count(*) FROM idempotency");
    cr_assert_gt(keys, 50);

    /* applies 0006 and every later one: the store prepares its statements
     * for the latest schema (0009 adds the flow columns), so it opens at
     * no other; the indexes below are the latest schema's */
    rmqs_error err = {0};
    (void)ut_both_target(&g_b, false);
    cr_assert_eq(store_open_with(g_b.path, &k_opts, store_builtin_migrations,
                                 store_builtin_migrations_count, &g_st, &err),
                 RMQS_OK, "%s", err.message);
    cr_assert_eq(
        store_schema_version(g_st),
        store_builtin_migrations[store_builtin_migrations_count - 1].version);
    after = sqlite_text(SQLITE_DIGEST);
    cr_expect_str_eq(after, before, "every job, every column, every seq");
    idx_after = sqlite_text(idx_sql);
    char want_idx[512];
    snprintf(want_idx, sizeof(want_idx), "%s", idx_before);
    cr_expect_str_eq(idx_after,
                     "jobs_deliver,jobs_due,jobs_exchange,jobs_failed_at,"
                     "jobs_finished,jobs_held_by,jobs_id,jobs_message_id,"
                     "jobs_routing_key,jobs_schedule,jobs_schedule_done,"
                     "jobs_schedule_seq,jobs_source,jobs_status_deliver,"
                     "jobs_status_seq",
                     "before: %s", want_idx);
    cr_expect_eq(ut_sql_int(g_b.path, "SELECT count(*) FROM idempotency"), keys,
                 "the keys survive the rebuild");
    cr_expect_eq(ut_sql_int(g_b.path,
                            "SELECT count(*) FROM sqlite_schema WHERE "
                            "name = 'idempotency_job'"),
                 1);
    cr_expect_eq(ut_sql_int(g_b.path,
                            "SELECT count(*) FROM sqlite_schema WHERE "
                            "name = 'jobs_id' AND sql LIKE "
                            "'CREATE UNIQUE INDEX%'"),
                 1);
    cr_expect_eq(
        ut_sql_int(g_b.path, "SELECT count(*) FROM pragma_foreign_key_check"),
        0);
    cr_expect_eq(ut_sql_int(g_b.path, "SELECT count(*) FROM sqlite_schema "
                                      "WHERE name LIKE '%0006'"),
                 0, "no scratch table left");
    cr_assert_eq(store_counts(g_st, c), RMQS_OK);
    for (int s = 0; s < 5; s++) {
        char q[96];
        snprintf(q, sizeof(q), "SELECT count(*) FROM jobs WHERE status = %d",
                 s);
        cr_expect_eq(c[s], ut_sql_int(g_b.path, q), "status %d", s);
    }
    cr_expect_eq(c[0] + c[1] + c[2] + c[3] + c[4], 245);
    old_job_and_new_run((const unsigned char *)"0000000000000003");
    /* and the new schema still refuses a source 3 */
    run_make(&run, 9998, "s", g_now);
    run.source = (job_source)3;
    cr_expect_eq(store_insert(g_st, &run, NULL, NULL, NULL, NULL), RMQS_EINVAL);
    job_clear(&run);
    free(before);
    free(after);
    free(idx_before);
    free(idx_after);
}

#define PG_DIGEST                                                           \
    "SELECT md5(string_agg(concat_ws('|', seq, encode(id, 'hex'), status, " \
    "exchange, routing_key, deliver_at, due_at, delay_ms, created_at, "     \
    "updated_at, coalesce(sent_at, -1), attempts, max_attempts, "           \
    "coalesce(last_error, '-'), coalesce(headers, '-'), "                   \
    "coalesce(properties, '-'), body_kind, encode(body, 'hex'), source, "   \
    "coalesce(message_id, '-'), coalesce(owner, '-'), "                     \
    "coalesce(lease_until, -1)), ';' ORDER BY seq))::text FROM jobs"

/* The digest of PG_DIGEST as a number (its first 15 hex digits). */
static int64_t pg_digest(void)
{
    return ut_pg_int(g_b.url, "SELECT ('x' || substr((" PG_DIGEST
                              "), 1, 15))::bit(60)::bigint");
}

Test(store_schedules, postgres_migration_keeps_jobs_keys_and_counts)
{
    store_t *old;
    int64_t c[5], before, keys;

    (void)ut_both_target(&g_b, true); /* as schema 1 made it: */
    cr_assert_geq(store_pg_migrations_count, 2);
    cr_assert_eq(store_pg_migrations[0].version, 1);
    rmqs_error err = {0};
    cr_assert_eq(
        store_open_with(g_b.url, &k_opts, store_pg_migrations, 1, &old, &err),
        RMQS_OK, "%s", err.message);
    store_close(old);
    ut_pg_exec(g_b.url,
               "INSERT INTO jobs (id, status, exchange, routing_key, "
               "deliver_at, due_at, delay_ms, created_at, updated_at, sent_at, "
               "attempts, max_attempts, last_error, headers, properties, "
               "body_kind, body, source, message_id, owner, lease_until) "
               "SELECT decode(lpad(to_hex(i), 32, '0'), 'hex'), i % 5, 'ex', "
               "'rk' || i, i * 10, i * 10 + 1, 5, 1, 2, "
               "CASE WHEN i % 5 = 2 THEN i END, i % 3, 3, "
               "CASE WHEN i % 7 = 0 THEN 'boom' END, "
               "CASE WHEN i % 2 = 0 THEN '{\"h\":1}' END, NULL, i % 3, "
               "decode(repeat('ab', i % 9), 'hex'), i % 2, "
               "CASE WHEN i % 4 = 0 THEN 'm' || i END, "
               "CASE WHEN i % 5 = 1 THEN 'inst' END, "
               "CASE WHEN i % 5 = 1 THEN 99 END "
               "FROM generate_series(1, 250) i");
    ut_pg_exec(g_b.url,
               "INSERT INTO idempotency (key, job_id, request) "
               "SELECT 'k' || seq, id, 'r' FROM jobs WHERE seq % 3 = 0");
    ut_pg_exec(g_b.url, "INSERT INTO job_counts (slot, status, n) "
                        "SELECT 7, status, count(*) FROM jobs GROUP BY status");
    before = pg_digest();
    keys = ut_pg_int(g_b.url, "SELECT count(*) FROM idempotency");

    /* applies 0002 and every later one: the store's statements are the
     * latest schema's (0005 adds the flow columns) */
    cr_assert_eq(store_open_with(g_b.url, &k_opts, store_pg_migrations,
                                 store_pg_migrations_count, &g_st, &err),
                 RMQS_OK, "%s", err.message);
    cr_assert_eq(store_schema_version(g_st),
                 store_pg_migrations[store_pg_migrations_count - 1].version);
    cr_expect_eq(pg_digest(), before, "every job, every column, every seq");
    cr_expect_eq(ut_pg_int(g_b.url, "SELECT count(*) FROM idempotency"), keys);
    cr_assert_eq(store_counts(g_st, c), RMQS_OK);
    cr_expect_eq(c[0] + c[1] + c[2] + c[3] + c[4], 250);
    cr_expect_eq(c[2], 50);
    old_job_and_new_run(
        (const unsigned char *)"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x03");
    cr_expect_eq(ut_pg_int(g_b.url, "SELECT count(*) FROM pg_constraint WHERE "
                                    "conname = 'jobs_source_check' AND "
                                    "pg_get_constraintdef(oid) LIKE '%2%'"),
                 1, "source may be 2");
    cr_expect_eq(ut_pg_int(g_b.url, "SELECT count(*) FROM pg_indexes WHERE "
                                    "indexname IN ('jobs_schedule', "
                                    "'schedules_due')"),
                 2);
}

/* ------------------------------------------------------------------------ */
/* What an operator reads: the last run and the failure streak (issue 25)   */

/* Store run number n of schedule name for fire time fire, then give it
 * status (and last_error err, may be NULL) as the dispatcher's outcome
 * would have. */
static void run_with_status(int n, const char *name, int64_t fire, int status,
                            const char *err)
{
    job_t j;
    char sql[400];

    run_make(&j, n, name, fire);
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
    snprintf(sql, sizeof sql,
             "UPDATE jobs SET status = %d, last_error = %s%s%s "
             "WHERE schedule = '%s' AND fire_at = %lld",
             status, err ? "'" : "", err ? err : "NULL", err ? "'" : "", name,
             (long long)fire);
    ut_both_exec(&g_b, sql);
    job_clear(&j);
}

static store_run_outcome recent_ok(const char *name)
{
    store_run_outcome o;

    cr_assert_eq(store_schedule_recent(g_st, &name, 1, g_now, &o), RMQS_OK);
    return o;
}

BOTH(recent_is_the_last_due_run_and_the_failure_streak)
{
    store_run_outcome o = recent_ok("s");

    cr_expect_not(o.has_last, "no run yet");
    cr_expect_eq(o.last_fire_at, -1);
    cr_expect_eq(o.failure_streak, 0);
    cr_expect_not(o.streak_capped);
    store_run_outcome_clear(&o);

    run_with_status(1, "s", g_now - 5000, JOB_SENT, NULL);
    run_with_status(2, "s", g_now - 4000, JOB_FAILED, "NOT_FOUND - old");
    run_with_status(3, "s", g_now - 3000, JOB_CANCELLED, "expired");
    run_with_status(4, "s", g_now - 2000, JOB_FAILED, "NOT_FOUND - new");
    run_with_status(5, "s", g_now - 1000, JOB_PENDING, NULL);
    run_with_status(6, "s", g_now + 5000, JOB_PENDING, NULL); /* ahead */
    run_with_status(7, "t", g_now - 500, JOB_FAILED, "another schedule");
    o = recent_ok("s");
    cr_assert(o.has_last);
    cr_expect_eq(o.last_fire_at, g_now - 1000,
                 "the last run due, not the one created ahead");
    cr_expect_eq(o.last_status, JOB_PENDING);
    cr_expect_null(o.last_error);
    cr_expect_eq(o.failure_streak, 2,
                 "failed, cancelled skipped, failed, then sent");
    cr_expect_not(o.streak_capped);
    store_run_outcome_clear(&o);

    ut_both_exec(&g_b, "UPDATE jobs SET status = 3, last_error = 'boom' "
                       "WHERE schedule = 's' AND status = 0 AND "
                       "fire_at < (SELECT max(fire_at) FROM jobs "
                       "WHERE schedule = 's')");
    o = recent_ok("s");
    cr_expect_eq(o.last_status, JOB_FAILED);
    cr_expect_str_eq(o.last_error, "boom");
    cr_expect_eq(o.failure_streak, 3);
    store_run_outcome_clear(&o);

    /* a sent run newer than the failures ends the streak */
    run_with_status(8, "s", g_now - 100, JOB_SENT, NULL);
    o = recent_ok("s");
    cr_expect_eq(o.last_status, JOB_SENT);
    cr_expect_eq(o.failure_streak, 0);
    store_run_outcome_clear(&o);
}

BOTH(recent_counts_the_streak_up_to_the_cap)
{
    store_run_outcome o;

    run_with_status(1, "c", g_now - 200000, JOB_SENT, NULL);
    for (int i = 0; i < STORE_STREAK_CAP; i++)
        run_with_status(2 + i, "c", g_now - 100000 + i * 10, JOB_FAILED, "x");
    o = recent_ok("c");
    cr_expect_eq(o.failure_streak, STORE_STREAK_CAP);
    cr_expect_not(o.streak_capped, "exactly the cap, then a sent run");
    store_run_outcome_clear(&o);

    run_with_status(500, "c", g_now - 50, JOB_FAILED, "x");
    o = recent_ok("c");
    cr_expect_eq(o.failure_streak, STORE_STREAK_CAP);
    cr_expect(o.streak_capped, "more than the cap");
    store_run_outcome_clear(&o);
}

BOTH(recent_reads_a_page_of_schedules_at_once)
{
    const char *names[] = {"a", "none", "b", "a"};
    store_run_outcome o[4];

    run_with_status(1, "a", g_now - 3000, JOB_SENT, NULL);
    run_with_status(2, "a", g_now - 2000, JOB_FAILED, "a failed");
    run_with_status(3, "b", g_now - 2500, JOB_FAILED, "b1");
    run_with_status(4, "b", g_now - 1500, JOB_FAILED, "b2");
    run_with_status(5, "b", g_now + 9000, JOB_PENDING, NULL);
    cr_assert_eq(store_schedule_recent(g_st, names, 4, g_now, o), RMQS_OK);
    cr_expect(o[0].has_last);
    cr_expect_eq(o[0].last_fire_at, g_now - 2000);
    cr_expect_str_eq(o[0].last_error, "a failed");
    cr_expect_eq(o[0].failure_streak, 1);
    cr_expect_not(o[1].has_last, "a name without runs");
    cr_expect_eq(o[1].failure_streak, 0);
    cr_expect_eq(o[1].last_status, -1);
    cr_expect(o[2].has_last);
    cr_expect_eq(o[2].last_fire_at, g_now - 1500, "each in its own place");
    cr_expect_str_eq(o[2].last_error, "b2");
    cr_expect_eq(o[2].failure_streak, 2, "no sent run: every failed one");
    cr_expect_eq(o[3].last_fire_at, g_now - 2000, "a name twice");
    cr_expect_eq(o[3].failure_streak, 1);
    for (int i = 0; i < 4; i++)
        store_run_outcome_clear(&o[i]);
    cr_assert_eq(store_schedule_recent(g_st, names, 0, g_now, o), RMQS_OK);
}
