/*
 * worker.c - named threads, stop flags and interruptible sleeps (see
 * worker.h for why they are written once).
 *
 * Deadlines are CLOCK_MONOTONIC (tu_mono_deadline): a sleep lasts what it
 * says even when the wall clock is stepped.
 */
#include "worker.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "timeutil.h"

/* The thread names itself before it runs fn, and its creator names it too
 * (whichever comes first): a reader of the name sees it from the moment
 * worker_thread_start returns, and the thread from its first line. */
static void *named_main(void *arg)
{
    worker_thread *t = arg;

    (void)pthread_setname_np(pthread_self(), t->name);
    return t->fn(t->arg);
}

rmqs_rc worker_thread_start(worker_thread *t, const char *name, worker_fn fn,
                            void *arg)
{
    snprintf(t->name, sizeof t->name, "%s", name); /* cut at 15 */
    t->fn = fn;
    t->arg = arg;
    if (pthread_create(&t->id, NULL, named_main, t) != 0)
        return RMQS_ESYS;
    t->started = true;
    (void)pthread_setname_np(t->id, t->name); /* for top -H, perf */
    return RMQS_OK;
}

void worker_thread_join(worker_thread *t)
{
    if (!t->started)
        return;
    pthread_join(t->id, NULL);
    t->started = false;
}

void worker_thread_detach(worker_thread *t)
{
    if (!t->started)
        return;
    pthread_detach(t->id);
    t->started = false;
}

rmqs_rc worker_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int e;

    if (pthread_condattr_init(&ca) != 0)
        return RMQS_ESYS;
    e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (e == 0)
        e = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return e == 0 ? RMQS_OK : RMQS_ESYS;
}

bool worker_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    struct timespec dl;

    if (ms < 0)
        return pthread_cond_wait(cv, mu) == 0;
    if (ms == 0)
        return false;
    dl = tu_mono_deadline(ms);
    return pthread_cond_timedwait(cv, mu, &dl) == 0;
}

rmqs_rc worker_init(worker_t *w, bool prio_inherit)
{
    pthread_mutexattr_t ma;
    int e;

    memset(w, 0, sizeof(*w));
    if (pthread_mutexattr_init(&ma) != 0)
        return RMQS_ESYS;
    if (prio_inherit)
        (void)pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
    e = pthread_mutex_init(&w->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    if (e != 0)
        return RMQS_ESYS;
    if (worker_cond_init(&w->cv) != RMQS_OK) {
        pthread_mutex_destroy(&w->mu);
        return RMQS_ESYS;
    }
    return RMQS_OK;
}

void worker_destroy(worker_t *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

rmqs_rc worker_start(worker_t *w, const char *name, worker_fn fn, void *arg)
{
    return worker_thread_start(&w->thread, name, fn, arg);
}

void worker_stop_locked(worker_t *w)
{
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
}

void worker_stop(worker_t *w)
{
    pthread_mutex_lock(&w->mu);
    worker_stop_locked(w);
    pthread_mutex_unlock(&w->mu);
    worker_thread_join(&w->thread);
}

bool worker_stopping(worker_t *w)
{
    bool s;

    pthread_mutex_lock(&w->mu);
    s = w->stop;
    pthread_mutex_unlock(&w->mu);
    return s;
}

bool worker_sleep(worker_t *w, int64_t ms)
{
    struct timespec dl;
    bool s;

    pthread_mutex_lock(&w->mu);
    if (ms > 0) {
        dl = tu_mono_deadline(ms);
        while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &dl) == 0)
            ;
    }
    s = w->stop;
    pthread_mutex_unlock(&w->mu);
    return s;
}
