/*
 * test_worker.c - service/util/worker.c: the named threads, stop flags and
 * interruptible sleeps the writer, janitor, dispatcher and ingest run on.
 *
 * What worker.h promises, and how a test sees it:
 *   - the thread carries its name (read back with pthread_getname_np,
 *     from outside and from inside the thread), cut at the kernel's 15
 *     characters;
 *   - worker_sleep ends at its deadline (CLOCK_MONOTONIC) when nothing
 *     stops it, and not before;
 *   - worker_stop wakes a thread in the middle of an hour-long sleep at
 *     once, and the sleep says it was stopped; a sleep after stop does not
 *     sleep;
 *   - worker_cond_wait_ms times out on the monotonic clock, and a signal
 *     ends it;
 *   - worker_init(prio_inherit) gives a priority-inheritance mutex (the
 *     dispatcher shares it with its SCHED_FIFO publisher).
 * Nothing sleeps to wait for the other thread: tests await a flag with a
 * deadline (ut_await). A stop that does not wake its thread would hang
 * the join: those tests carry a Criterion timeout, so they fail instead.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "testutil.h"
#include "timeutil.h"
#include "worker.h"

#define AWAIT_MS 10000  /* generous: the machine is shared and sanitized */
#define PROMPT_MS 1000  /* "at once", on a loaded sanitized machine */
#define LONG_MS UT_HOUR /* a sleep no test waits out */
#define GLIBC_MUTEX_PRIO_INHERIT 0x20

typedef struct probe {
    worker_t w;
    atomic_bool entered;  /* the thread is about to sleep */
    atomic_bool returned; /* worker_sleep came back */
    atomic_int tid;       /* the thread's kernel id */
    bool sleep_said_stop; /* what it returned */
    char name[32];        /* the thread's name, as it read it */
} probe;

static bool is_set(void *arg)
{
    return atomic_load((atomic_bool *)arg);
}

static void *sleep_long(void *arg)
{
    probe *p = arg;

    pthread_getname_np(pthread_self(), p->name, sizeof p->name);
    atomic_store(&p->tid, (int)syscall(SYS_gettid));
    atomic_store(&p->entered, true);
    p->sleep_said_stop = worker_sleep(&p->w, LONG_MS);
    atomic_store(&p->returned, true);
    return NULL;
}

/* The probe's thread is blocked in the kernel (state S): past the flag
 * check, waiting on the condition variable. */
static bool is_blocked(void *arg)
{
    probe *p = arg;
    char path[64], buf[256], *close;
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "/proc/self/task/%d/stat",
             atomic_load(&p->tid));
    f = fopen(path, "r");
    if (f == NULL)
        return false;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    close = strrchr(buf, ')');
    return close != NULL && close[1] == ' ' && close[2] == 'S';
}

static void probe_init(probe *p)
{
    memset(p, 0, sizeof(*p));
    cr_assert_eq(worker_init(&p->w, false), RMQS_OK);
    atomic_init(&p->entered, false);
    atomic_init(&p->returned, false);
}

Test(worker, names_its_thread)
{
    probe p;
    char outside[32] = "";

    probe_init(&p);
    cr_assert_eq(worker_start(&p.w, "rmqs-test", sleep_long, &p), RMQS_OK);
    cr_assert(ut_await(AWAIT_MS, is_set, &p.entered));
    cr_assert_eq(pthread_getname_np(p.w.thread.id, outside, sizeof outside), 0);
    cr_expect_str_eq(outside, "rmqs-test");
    cr_expect_str_eq(p.name, "rmqs-test"); /* set before it ran, too */
    worker_stop(&p.w);
    worker_destroy(&p.w);
}

Test(worker, cuts_a_long_name_at_fifteen_characters)
{
    probe p;

    probe_init(&p);
    cr_assert_eq(worker_start(&p.w, "rmqs-0123456789abcdef", sleep_long, &p),
                 RMQS_OK);
    cr_assert(ut_await(AWAIT_MS, is_set, &p.entered));
    worker_stop(&p.w);
    cr_expect_str_eq(p.name, "rmqs-0123456789"); /* 15 characters */
    worker_destroy(&p.w);
}

Test(worker, stop_wakes_a_sleeping_worker_at_once, .timeout = 30)
{
    probe p;
    int64_t t0, took;

    probe_init(&p);
    cr_assert_eq(worker_start(&p.w, "rmqs-test", sleep_long, &p), RMQS_OK);
    cr_assert(ut_await(AWAIT_MS, is_set, &p.entered));
    /* Really waiting, so it is the wake-up that is tested, not the flag
     * worker_sleep reads before it waits. */
    cr_assert(ut_await(AWAIT_MS, is_blocked, &p));
    t0 = tu_mono_ms();
    worker_stop(&p.w); /* joins */
    took = tu_mono_ms() - t0;
    cr_assert(atomic_load(&p.returned));
    cr_expect(p.sleep_said_stop, "the sleep must say it was stopped");
    cr_expect_lt(took, PROMPT_MS, "stop took %lld ms", (long long)took);
    cr_expect(worker_stopping(&p.w));
    worker_destroy(&p.w);
}

Test(worker, sleep_ends_at_its_deadline_not_before)
{
    worker_t w;
    int64_t t0, took;

    cr_assert_eq(worker_init(&w, false), RMQS_OK);
    t0 = tu_mono_ms();
    cr_expect_not(worker_sleep(&w, 120), "not stopped");
    took = tu_mono_ms() - t0;
    cr_expect_geq(took, 120, "woke early: %lld ms", (long long)took);
    cr_expect_lt(took, 120 + PROMPT_MS, "overslept: %lld ms", (long long)took);
    cr_expect_not(worker_stopping(&w));
    worker_destroy(&w);
}

Test(worker, sleep_after_stop_returns_at_once)
{
    worker_t w;
    int64_t t0;

    cr_assert_eq(worker_init(&w, false), RMQS_OK);
    worker_stop(&w); /* never started: only the flag */
    t0 = tu_mono_ms();
    cr_expect(worker_sleep(&w, LONG_MS));
    cr_expect(worker_sleep(&w, 0));
    cr_expect_lt(tu_mono_ms() - t0, PROMPT_MS);
    worker_stop(&w); /* twice: harmless */
    worker_destroy(&w);
}

Test(worker, zero_sleep_does_not_wait)
{
    worker_t w;
    int64_t t0;

    cr_assert_eq(worker_init(&w, false), RMQS_OK);
    t0 = tu_mono_ms();
    cr_expect_not(worker_sleep(&w, 0));
    cr_expect_not(worker_sleep(&w, -5));
    cr_expect_lt(tu_mono_ms() - t0, PROMPT_MS);
    worker_destroy(&w);
}

Test(worker, cond_wait_times_out_on_the_monotonic_clock)
{
    worker_t w;
    pthread_cond_t cv;
    int64_t t0, took;
    bool woken;

    cr_assert_eq(worker_init(&w, false), RMQS_OK);
    cr_assert_eq(worker_cond_init(&cv), RMQS_OK);
    pthread_mutex_lock(&w.mu);
    t0 = tu_mono_ms();
    woken = worker_cond_wait_ms(&cv, &w.mu, 80);
    took = tu_mono_ms() - t0;
    cr_expect_not(woken, "nobody signalled: a timeout");
    cr_expect_geq(took, 80, "returned early: %lld ms", (long long)took);
    cr_expect_not(worker_cond_wait_ms(&cv, &w.mu, 0), "0: no wait");
    pthread_mutex_unlock(&w.mu);
    pthread_cond_destroy(&cv);
    worker_destroy(&w);
}

typedef struct waiter {
    worker_t w;
    atomic_bool entered;
} waiter;

/* Waits on w.cv with no time limit until stop, as the writer does. */
static void *wait_for_stop(void *arg)
{
    waiter *x = arg;

    pthread_mutex_lock(&x->w.mu);
    atomic_store(&x->entered, true);
    while (!x->w.stop)
        (void)worker_cond_wait_ms(&x->w.cv, &x->w.mu, -1);
    pthread_mutex_unlock(&x->w.mu);
    return NULL;
}

Test(worker, stop_wakes_a_thread_waiting_on_the_condition_variable,
     .timeout = 30)
{
    waiter x;
    int64_t t0;

    memset(&x, 0, sizeof x);
    cr_assert_eq(worker_init(&x.w, false), RMQS_OK);
    atomic_init(&x.entered, false);
    cr_assert_eq(worker_start(&x.w, "rmqs-test", wait_for_stop, &x), RMQS_OK);
    cr_assert(ut_await(AWAIT_MS, is_set, &x.entered));
    t0 = tu_mono_ms();
    worker_stop(&x.w);
    cr_expect_lt(tu_mono_ms() - t0, PROMPT_MS);
    worker_destroy(&x.w);
}

Test(worker, prio_inherit_gives_a_priority_inheritance_mutex)
{
    worker_t plain, pi;

    cr_assert_eq(worker_init(&plain, false), RMQS_OK);
    cr_assert_eq(worker_init(&pi, true), RMQS_OK);
    /* Nothing in POSIX reads the protocol back from a mutex; glibc (Debian
     * 12) keeps it in the mutex's kind, as PTHREAD_MUTEX_PRIO_INHERIT_NP
     * (0x20, nptl/pthreadP.h, not in the public headers). */
    cr_expect(pi.mu.__data.__kind & GLIBC_MUTEX_PRIO_INHERIT);
    cr_expect_not(plain.mu.__data.__kind & GLIBC_MUTEX_PRIO_INHERIT);
    /* and it locks and unlocks like any other */
    cr_expect_eq(pthread_mutex_lock(&pi.mu), 0);
    cr_expect_eq(pthread_mutex_unlock(&pi.mu), 0);
    worker_destroy(&plain);
    worker_destroy(&pi);
}

/* A detached thread (the stop watchdog's way): it runs, named, with nobody
 * to join it, and the worker_thread no longer counts as joinable (a join
 * after it is a no-op, not a wait on a thread that is gone). */
typedef struct detached_probe {
    char name[32];
    atomic_bool ran;
} detached_probe;

static void *note_and_end(void *arg)
{
    detached_probe *d = arg;

    pthread_getname_np(pthread_self(), d->name, sizeof d->name);
    atomic_store(&d->ran, true);
    return NULL;
}

Test(worker, a_detached_thread_runs_named_and_is_not_joined)
{
    static worker_thread t; /* outlives the thread, as the watchdog's */
    static detached_probe d;

    atomic_init(&d.ran, false);
    cr_assert_eq(worker_thread_start(&t, "rmqs-detached", note_and_end, &d),
                 RMQS_OK);
    cr_assert(t.started);
    worker_thread_detach(&t);
    cr_expect_not(t.started);
    cr_assert(ut_await(AWAIT_MS, is_set, &d.ran));
    cr_expect_str_eq(d.name, "rmqs-detached");
    worker_thread_join(&t); /* a no-op: returns at once */
}
