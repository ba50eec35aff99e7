/*
 * test_writer.c - service/dispatch/writer.c, the group-commit thread, against a real
 * store (a SQLite file in a fresh folder) and a real dispatcher that is
 * never started (its publisher is never connected: no traffic at all).
 *
 * What writer.h promises, and how a test sees it:
 *   - requests that piled up go into one transaction, at most max_rows
 *     rows each, never splitting a request: the writer's own "group commit"
 *     debug line (one per transaction) is read from stderr;
 *   - every request's done() runs once, on the writer thread, with its own
 *     outcome; the jobs are then in the file (read back with store_get and
 *     a raw SQLite connection);
 *   - the dispatcher is told the earliest new due time (test hook
 *     disp__notified_due in dispatcher.c), and only of jobs really stored;
 *   - below the free-space reserve nothing is stored (RMQS_EFULL);
 *   - admission (--write-queue-bytes): FIFO, release grants, wake from
 *     the writer thread with no writer lock held, everything at stop;
 *   - stop commits what is queued, then submit refuses.
 * Nothing sleeps: a test awaits done() calls and wakes with a deadline.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatcher.h"
#include "log.h"
#include "metrics.h"
#include "store.h"
#include "testutil.h"
#include "timeutil.h"
#include "writer.h"

/* Test hook defined in service/dispatch/dispatcher.c. */
int64_t disp__notified_due(disp_t *d);

#define MAX_SLOTS 16
#define AWAIT_MS 10000 /* generous: the machine is shared and sanitized */

/* A request as http_api holds one: the writer_req and what done() saw.
 * Static storage, so a failing test leaves nothing on a dead stack. */
typedef struct slot {
    writer_req req;
    job_t jobs[3];
    /* a keyed request's arrays (store_types.h): its first job keyed */
    const char *keys[3];
    const char *requests[3];
    bool existed[3];
    job_t existing[3];
    atomic_int calls;
    pthread_t thread; /* where done() ran */
} slot;

static char g_dir[UT_PATH_MAX];
static char g_path[UT_PATH_MAX];
static store_t *g_st;
static disp_t *g_disp;
static writer_t *g_w;
static slot g_slots[MAX_SLOTS];

static void setup(void)
{
    static const store_options so = {.synchronous_full = true};
    const amqpp_options po = {.url = "amqp://guest:guest@127.0.0.1:1/%2F"};
    const disp_options dopt = {.batch_size = 10,
                               .lookahead_ms = 500,
                               .backoff_base_ms = 1000,
                               .backoff_cap_ms = 60000,
                               .confirm_timeout_ms = 1000};
    rmqs_error err = {0};
    amqpp_t *pub;

    memset(g_slots, 0, sizeof(g_slots));
    ut_tmpdir(g_dir, "writer");
    ut_path(g_path, g_dir, "jobs.db");
    g_st = ut_store_open(g_path, &so);
    pub = amqpp_new(&po, &err);
    cr_assert_not_null(pub, "amqpp_new: %s", err.message);
    g_disp = disp_new(g_st, pub, &dopt);
    cr_assert_not_null(g_disp);
    g_w = NULL;
}

static void teardown(void)
{
    writer_free(g_w);
    disp_free(g_disp);
    store_close(g_st);
    for (size_t i = 0; i < MAX_SLOTS; i++) {
        for (size_t k = 0; k < 3; k++)
            job_clear(&g_slots[i].jobs[k]);
        for (size_t k = 0; k < 3; k++)
            job_clear(&g_slots[i].existing[k]);
    }
    ut_rmtree(g_dir);
}

TestSuite(writer, .init = setup, .fini = teardown, .timeout = 60);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static writer_t *new_writer(size_t max_rows, int64_t min_free_bytes)
{
    writer_t *w = writer_new(g_st, g_disp, max_rows, min_free_bytes);

    cr_assert_not_null(w);
    return w;
}

static void on_done(writer_req *req, void *cls)
{
    slot *s = cls;

    (void)req;
    s->thread = pthread_self();
    atomic_fetch_add(&s->calls, 1);
}

/* Slot i as a request of rows jobs numbered first, first+1, ..., due at
 * due_at; key/request: NULL or an Idempotency-Key and its request. */
static writer_req *request(int i, int first, size_t rows, int64_t due_at,
                           const char *key, const char *canonical)
{
    slot *s = &g_slots[i];

    cr_assert(i < MAX_SLOTS && rows >= 1 && rows <= 3);
    for (size_t k = 0; k < rows; k++)
        ut_job_make(&s->jobs[k], first + (int)k, due_at);
    for (size_t k = 0; k < 3; k++)
        job_clear(&s->existing[k]);
    memset(s->keys, 0, sizeof(s->keys));
    memset(s->existed, 0, sizeof(s->existed));
    s->keys[0] = key;
    s->requests[0] = canonical;
    s->req = (writer_req){.ins = {.jobs = s->jobs,
                                  .n = rows,
                                  .idem_keys = key ? s->keys : NULL,
                                  .idem_requests = s->requests,
                                  .existed = s->existed,
                                  .existing = s->existing},
                          .done = on_done,
                          .cls = s};
    return &s->req;
}

static void submit(int i, int first, size_t rows, int64_t due_at)
{
    cr_assert_eq(
        writer_submit(g_w, request(i, first, rows, due_at, NULL, NULL)),
        RMQS_OK);
}

typedef struct upto {
    int n;
} upto;

static bool slots_done(void *arg)
{
    const upto *u = arg;

    for (int i = 0; i < u->n; i++)
        if (atomic_load(&g_slots[i].calls) == 0)
            return false;
    return true;
}

/* Wait until slots 0..n-1 have had done() called. */
static void await_done(int n)
{
    upto u = {n};

    cr_assert(ut_await(AWAIT_MS, slots_done, &u),
              "done() not called for every one of %d requests", n);
}

static bool stored(int n)
{
    return ut_store_has(g_st, n);
}

static int64_t jobs_in_file(void)
{
    return ut_sql_int(g_path, "SELECT count(*) FROM jobs");
}

/* ------------------------------------------------------------------------ */
/* Group commit                                                             */

/* Queue requests of rows[0..n) jobs (numbered 1, 2, ... in order) before
 * the thread runs, as they pile up while a commit syncs; start, await every
 * done(), stop. Each must have succeeded. Returns what the writer logged
 * (at debug level; the caller frees). */
static char *commit_queue(size_t max_rows, const size_t *rows, int n)
{
    ut_capture cap;
    char *log;
    int next = 1;

    log_set_level(LOG_DEBUG);
    g_w = new_writer(max_rows, 0);
    for (int i = 0; i < n; i++) {
        submit(i, next, rows[i], 1000);
        next += (int)rows[i];
    }
    ut_capture_start(&cap);
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    await_done(n);
    writer_stop(g_w);
    log = ut_capture_end(&cap);
    for (int i = 0; i < n; i++) {
        cr_expect_eq(atomic_load(&g_slots[i].calls), 1, "request %d", i);
        cr_expect_eq(g_slots[i].req.ins.rc, RMQS_OK, "request %d", i);
        cr_expect_not(g_slots[i].existed[0], "request %d", i);
    }
    cr_expect_eq(jobs_in_file(), next - 1);
    return log;
}

Test(writer, requests_that_piled_up_commit_in_one_transaction)
{
    static const size_t rows[] = {1, 3, 1, 1, 1};
    char *log = commit_queue(100, rows, 5);

    cr_expect_eq(ut_count_lines_with(log, "msg=\"group commit\""), 1,
                 "one transaction expected:\n%s", log);
    cr_expect_eq(ut_count_lines_with(log, "requests=5 rows=7 scheduled=7"), 1,
                 "%s", log);
    for (int n = 1; n <= 7; n++)
        cr_expect(stored(n), "job %d not stored", n);
    free(log);
}

Test(writer, max_rows_bounds_a_transaction_but_never_splits_a_request)
{
    /* the last has more rows than max_rows: alone, whole */
    static const size_t rows[] = {1, 1, 1, 1, 1, 3};
    char *log = commit_queue(2, rows, 6);

    /* in arrival order: [1 2] [3 4] [5] (6 does not fit beside 5) [6] */
    cr_expect_eq(ut_count_lines_with(log, "msg=\"group commit\""), 4, "%s",
                 log);
    cr_expect_eq(ut_count_lines_with(log, "requests=2 rows=2 "), 2, "%s", log);
    cr_expect_eq(ut_count_lines_with(log, "requests=1 rows=1 "), 1, "%s", log);
    cr_expect_eq(ut_count_lines_with(log, "requests=1 rows=3 "), 1, "%s", log);
    free(log);
}

Test(writer, done_runs_once_per_request_on_the_writer_thread_with_its_outcome)
{
    g_w = new_writer(100, 0);
    submit(0, 1, 1, 1000);
    /* its second job repeats job 1's id: this request alone fails */
    submit(1, 2, 2, 1000);
    ut_job_id(1, g_slots[1].jobs[1].id);
    cr_assert_eq(writer_submit(g_w, request(2, 10, 1, 1000, "k", "{'a':1}")),
                 RMQS_OK);
    /* same key, same request: resolves to the first one (job 10) */
    cr_assert_eq(writer_submit(g_w, request(3, 11, 1, 1000, "k", "{'a':1}")),
                 RMQS_OK);
    /* same key, another request: a conflict */
    cr_assert_eq(writer_submit(g_w, request(4, 12, 1, 1000, "k", "{'a':2}")),
                 RMQS_OK);
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    await_done(5);
    writer_stop(g_w);

    for (int i = 0; i < 5; i++) {
        cr_expect_eq(atomic_load(&g_slots[i].calls), 1, "request %d", i);
        cr_expect_not(pthread_equal(g_slots[i].thread, pthread_self()),
                      "request %d completed on the caller's thread", i);
    }
    cr_expect_eq(g_slots[0].req.ins.rc, RMQS_OK);
    cr_expect_eq(g_slots[1].req.ins.rc, RMQS_ECONFLICT);
    cr_expect_eq(g_slots[1].req.ins.failed_index, 1);
    cr_expect_eq(g_slots[2].req.ins.rc, RMQS_OK);
    cr_expect_not(g_slots[2].existed[0]);
    cr_expect_eq(g_slots[3].req.ins.rc, RMQS_OK);
    cr_assert(g_slots[3].existed[0]);
    cr_expect_str_eq(g_slots[3].existing[0].id, g_slots[2].jobs[0].id);
    cr_expect_eq(g_slots[4].req.ins.rc, RMQS_ECONFLICT);
    cr_expect(stored(1));
    cr_expect_not(stored(2), "a failed request left its first job");
    cr_expect(stored(10));
    cr_expect_not(stored(11));
    cr_expect_not(stored(12));
    cr_expect_eq(jobs_in_file(), 2);
}

static int64_t scheduled_total(void)
{
    metrics_sources src = {.have_counts = false, .db_bytes = -1};
    char *text = metrics_render(&src);
    const char *at;
    long long v = -1;

    cr_assert_not_null(text);
    at = strstr(text, "\nrmqs_jobs_scheduled_total ");
    cr_assert_not_null(at, "%s", text);
    cr_assert_eq(sscanf(at, "\nrmqs_jobs_scheduled_total %lld", &v), 1);
    free(text);
    return v;
}

Test(writer, tells_the_dispatcher_the_earliest_due_time_it_stored)
{
    int64_t now = tu_now_ms();
    job_t first;

    /* a keyed job already stored: its replay below stores nothing */
    ut_job_make(&first, 20, now + 60000);
    cr_assert_eq(store_insert(g_st, &first, "k", "{}", NULL, NULL), RMQS_OK);
    job_clear(&first);

    g_w = new_writer(100, 0);
    submit(0, 1, 1, now + 5000);
    submit(1, 2, 2, now + 3000);
    submit(2, 4, 2, now + 1000); /* refused below: not a due time to wake for */
    ut_job_id(1, g_slots[2].jobs[1].id);
    cr_assert_eq(writer_submit(g_w, request(3, 6, 1, now + 500, "k", "{}")),
                 RMQS_OK);
    cr_assert_eq(disp__notified_due(g_disp), INT64_MAX);
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    await_done(4);
    writer_stop(g_w);

    cr_expect_eq(g_slots[2].req.ins.rc, RMQS_ECONFLICT);
    cr_expect(g_slots[3].existed[0]);
    cr_expect_eq(disp__notified_due(g_disp), now + 3000);
    cr_expect_eq(scheduled_total(), 3, "jobs 1, 2 and 3 were scheduled");
}

Test(writer, a_commit_that_stores_nothing_wakes_nobody)
{
    job_t j;

    ut_job_make(&j, 1, 1000);
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
    job_clear(&j);
    g_w = new_writer(100, 0);
    submit(0, 1, 1, 500); /* job 1 again: a duplicate id */
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    await_done(1);
    writer_stop(g_w);

    cr_expect_eq(g_slots[0].req.ins.rc, RMQS_ECONFLICT);
    cr_expect_eq(disp__notified_due(g_disp), INT64_MAX);
    cr_expect_eq(scheduled_total(), 0);
}

/* ------------------------------------------------------------------------ */
/* Free-space reserve                                                       */

Test(writer, below_the_reserve_nothing_is_stored_and_it_is_logged_once)
{
    ut_capture cap;
    char *log;

    /* No filesystem has this much free: every check finds it "full". */
    g_w = new_writer(100, INT64_MAX);
    cr_expect_not(writer_disk_full(g_w));
    ut_capture_start(&cap);
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    submit(0, 1, 1, 1000);
    await_done(1);
    submit(1, 2, 1, 1000);
    await_done(2);
    writer_stop(g_w);
    log = ut_capture_end(&cap);

    for (int i = 0; i < 2; i++) {
        cr_expect_eq(g_slots[i].req.ins.rc, RMQS_EFULL, "request %d", i);
        cr_expect_not(g_slots[i].existed[0], "request %d", i);
    }
    cr_expect(writer_disk_full(g_w));
    cr_expect_eq(jobs_in_file(), 0);
    cr_expect_eq(disp__notified_due(g_disp), INT64_MAX);
    cr_expect_eq(ut_count_lines_with(log, "disk nearly full"), 1, "%s", log);
    cr_expect_eq(ut_count_lines_with(log, "group commit failed"), 0, "%s", log);
    free(log);
}

Test(writer, above_the_reserve_jobs_are_stored)
{
    g_w = new_writer(100, 1); /* one byte free is enough */
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    submit(0, 1, 1, 1000);
    await_done(1);
    writer_stop(g_w);

    cr_expect_eq(g_slots[0].req.ins.rc, RMQS_OK);
    cr_expect_not(writer_disk_full(g_w));
    cr_expect(stored(1));
}

/* ------------------------------------------------------------------------ */
/* Stop                                                                     */

Test(writer, stop_commits_everything_queued_then_submit_refuses)
{
    g_w = new_writer(2, 0);
    submit(0, 1, 1, 1000);
    submit(1, 2, 1, 1000);
    submit(2, 3, 1, 1000);
    submit(3, 4, 1, 1000);
    submit(4, 5, 1, 1000);
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    writer_stop(g_w); /* at once: most of the queue is still waiting */

    for (int i = 0; i < 5; i++) {
        cr_expect_eq(atomic_load(&g_slots[i].calls), 1, "request %d", i);
        cr_expect_eq(g_slots[i].req.ins.rc, RMQS_OK, "request %d", i);
    }
    cr_expect_eq(jobs_in_file(), 5);
    cr_expect_eq(writer_submit(g_w, request(5, 6, 1, 1000, NULL, NULL)),
                 RMQS_ESYS);
    cr_expect_eq(atomic_load(&g_slots[5].calls), 0,
                 "a refused request completed");
    cr_expect_not(stored(6));
    writer_stop(g_w); /* twice is harmless */
}

/* ------------------------------------------------------------------------ */
/* Admission (--write-queue-bytes)                                          */

typedef struct waiter {
    writer_waiter w;
    atomic_int wakes;
    pthread_t thread;
    size_t waiting_seen; /* writer_waiting() from inside wake */
} waiter;

static waiter g_waiters[4];

static void on_wake(void *cls)
{
    waiter *x = cls;

    x->thread = pthread_self();
    /* Locks the writer's mutex: would deadlock if wake ran under it. */
    x->waiting_seen = writer_waiting(g_w);
    atomic_fetch_add(&x->wakes, 1);
}

static writer_waiter *waiter_of(int i)
{
    waiter *x = &g_waiters[i];

    memset(x, 0, sizeof(*x));
    x->w.wake = on_wake;
    x->w.cls = x;
    return &x->w;
}

static bool woken(void *arg)
{
    return atomic_load(&((waiter *)arg)->wakes) > 0;
}

static void await_woken(int i)
{
    cr_assert(ut_await(AWAIT_MS, woken, &g_waiters[i]), "waiter %d not woken",
              i);
}

Test(writer, admission_is_first_come_first_served_and_release_grants)
{
    g_w = new_writer(100, 0);
    writer_set_admission_budget(g_w, 100);
    cr_assert_eq(writer_start(g_w), RMQS_OK);

    cr_expect(writer_admit(g_w, 60, NULL));
    cr_expect_not(writer_admit(g_w, 60, NULL), "over the budget");
    cr_expect_eq(writer_waiting(g_w), 0, "no waiter given: nothing queued");
    cr_expect_not(writer_admit(g_w, 60, waiter_of(0)));
    /* 10 would fit, but nobody overtakes a waiter */
    cr_expect_not(writer_admit(g_w, 10, waiter_of(1)));
    cr_expect_eq(writer_waiting(g_w), 2);
    cr_expect_not(writer_admit(g_w, 1, NULL));
    cr_expect_eq(atomic_load(&g_waiters[0].wakes), 0);

    writer_release(g_w, 60); /* 60 + 10 now fit */
    await_woken(0);
    await_woken(1);
    for (int i = 0; i < 2; i++) {
        cr_expect(g_waiters[i].w.granted, "waiter %d", i);
        cr_expect_eq(atomic_load(&g_waiters[i].wakes), 1, "waiter %d", i);
        cr_expect_not(pthread_equal(g_waiters[i].thread, pthread_self()),
                      "waiter %d woken on the releasing thread", i);
    }
    cr_expect_eq(writer_waiting(g_w), 0);
    /* 70 admitted now: 30 more fit, 31 do not */
    cr_expect_not(writer_admit(g_w, 31, NULL));
    cr_expect(writer_admit(g_w, 30, NULL));
    writer_release(g_w, 60);
    writer_release(g_w, 10);
    writer_release(g_w, 30);
    writer_stop(g_w);
}

Test(writer, release_grants_only_what_fits_in_order)
{
    g_w = new_writer(100, 0);
    writer_set_admission_budget(g_w, 100);
    cr_assert_eq(writer_start(g_w), RMQS_OK);

    cr_expect(writer_admit(g_w, 50, NULL));
    cr_expect(writer_admit(g_w, 50, NULL));
    cr_expect_not(writer_admit(g_w, 40, waiter_of(0)));
    cr_expect_not(writer_admit(g_w, 40, waiter_of(1)));
    cr_expect_not(writer_admit(g_w, 40, waiter_of(2)));
    writer_release(g_w, 50); /* 50 + 40 fit; another 40 does not */
    await_woken(0);
    cr_expect(g_waiters[0].w.granted);
    cr_expect_not(g_waiters[1].w.granted);
    cr_expect_eq(atomic_load(&g_waiters[1].wakes), 0);
    cr_expect_eq(writer_waiting(g_w), 2);
    cr_expect_eq(g_waiters[0].waiting_seen, 2);
    writer_release(g_w, 50); /* 40 + 40 fit, then 40 more do not */
    await_woken(1);
    cr_expect(g_waiters[1].w.granted);
    cr_expect_not(g_waiters[2].w.granted);
    cr_expect_eq(writer_waiting(g_w), 1);
    writer_stop(g_w); /* the last one is woken by the stop */
    cr_expect(g_waiters[2].w.granted);
    cr_expect_eq(atomic_load(&g_waiters[2].wakes), 1);
}

Test(writer, with_nothing_admitted_any_size_gets_through)
{
    g_w = new_writer(100, 0);
    writer_set_admission_budget(g_w, 100);
    cr_expect(writer_admit(g_w, 1000, NULL),
              "first request larger than budget");
    cr_expect_not(writer_admit(g_w, 1, NULL));
    writer_release(g_w, 1000);
    cr_expect(writer_admit(g_w, 100, NULL));
    writer_release(g_w, 100);
}

Test(writer, no_budget_admits_everything)
{
    g_w = new_writer(100, 0);
    cr_expect(writer_admit(g_w, SIZE_MAX / 4, NULL));
    cr_expect(writer_admit(g_w, SIZE_MAX / 4, NULL));
    writer_set_admission_budget(g_w, 0);
    cr_expect(writer_admit(g_w, 1, NULL));
    cr_expect_eq(writer_waiting(g_w), 0);
}

Test(writer, stop_wakes_every_waiter_and_then_admits_everything)
{
    g_w = new_writer(100, 0);
    writer_set_admission_budget(g_w, 10);
    cr_assert_eq(writer_start(g_w), RMQS_OK);
    cr_expect(writer_admit(g_w, 10, NULL));
    cr_expect_not(writer_admit(g_w, 10, waiter_of(0)));
    cr_expect_not(writer_admit(g_w, 500, waiter_of(1)));
    writer_stop(g_w);

    /* by the time writer_stop returns, each was woken once, granted */
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(atomic_load(&g_waiters[i].wakes), 1, "waiter %d", i);
        cr_expect(g_waiters[i].w.granted, "waiter %d", i);
    }
    cr_expect_eq(writer_waiting(g_w), 0);
    cr_expect(writer_admit(g_w, 1000000, NULL), "stopping: admitted");
    cr_expect_eq(writer_submit(g_w, request(0, 1, 1, 1000, NULL, NULL)),
                 RMQS_ESYS);
}

Test(writer, stop_of_a_writer_never_started_still_wakes_waiters)
{
    g_w = new_writer(100, 0);
    writer_set_admission_budget(g_w, 10);
    cr_expect(writer_admit(g_w, 10, NULL));
    cr_expect_not(writer_admit(g_w, 10, waiter_of(0)));
    writer_stop(g_w);
    cr_expect_eq(atomic_load(&g_waiters[0].wakes), 1);
    cr_expect(g_waiters[0].w.granted);
}
