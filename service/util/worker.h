/*
 * worker.h - a thread of the service: its name, a stop flag, a condition
 * variable on CLOCK_MONOTONIC and a sleep that stop cuts short.
 *
 * Why: the writer, the janitor, the dispatcher's three threads and the
 * ingest each wrote this by hand (create, name, a stop flag under a mutex,
 * a monotonic condition variable, "sleep unless stopped", join), and the
 * copies had begun to differ. Names matter: `top -H`, perf and the
 * benchmark find the threads by them (rmqs-writer, rmqs-janitor,
 * rmqs-feeder, rmqs-publisher, rmqs-recorder, rmqs-ingest).
 *
 * A worker_t is embedded in its owner's struct. Its mutex guards `stop`
 * and may guard the owner's own state too (the writer's queue, the
 * dispatcher's claims): the owner locks w->mu, reads w->stop, and waits on
 * w->cv (or on a condition variable of its own made by worker_cond_init)
 * with worker_cond_wait_ms. A thread that sleeps on something else (the
 * dispatcher's publisher in ppoll) uses only the naming and the stop flag,
 * and is woken by its owner's own means.
 */
#ifndef RMQS_WORKER_H
#define RMQS_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "rmqs.h"

typedef void *(*worker_fn)(void *arg);

/* A named thread, without a stop flag of its own (see worker_t). Must
 * stay in place while the thread runs (it is embedded in its owner). */
typedef struct worker_thread {
    pthread_t id;
    bool started;
    char name[16]; /* private: for the thread to name itself */
    worker_fn fn;
    void *arg;
} worker_thread;

/* Start fn(arg) on a new thread named name (at most 15 characters: the
 * kernel's limit; a longer one is cut). The name is set before fn runs
 * and before this returns. RMQS_ESYS if it cannot start. */
rmqs_rc worker_thread_start(worker_thread *t, const char *name, worker_fn fn,
                            void *arg);

/* Wait for the thread to end; a no-op if it was not started (or already
 * joined). */
void worker_thread_join(worker_thread *t);

/* Let the thread run to the end of the process with nobody to join it
 * (the stop sequence's watchdog, which outlives every owner). A no-op if
 * it was not started; the thread is no longer joinable afterwards. */
void worker_thread_detach(worker_thread *t);

/* A condition variable on CLOCK_MONOTONIC (a step of the wall clock does
 * not stretch or cut a wait). RMQS_ESYS on failure. */
rmqs_rc worker_cond_init(pthread_cond_t *cv);

/* With mu held: wait on cv until signalled or ms have passed (ms < 0: no
 * limit; ms == 0: returns at once). cv must come from worker_cond_init.
 * Returns false when the time ran out, true otherwise (woken, perhaps
 * spuriously: the caller checks its condition again). */
bool worker_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

typedef struct worker {
    pthread_mutex_t mu; /* guards stop, and whatever the owner adds */
    pthread_cond_t cv;  /* CLOCK_MONOTONIC; broadcast at stop */
    bool stop;          /* set once, by worker_stop(_locked) */
    worker_thread thread;
} worker_t;

/* Set up mu and cv (not started). prio_inherit: the mutex uses priority
 * inheritance, for a mutex shared with a real-time thread (a holder
 * preempted by a normal thread would hold the real-time one up). */
rmqs_rc worker_init(worker_t *w, bool prio_inherit);

/* Release mu and cv; the thread must have been joined (worker_stop). */
void worker_destroy(worker_t *w);

/* Start fn(arg) as the worker's thread, named name. RMQS_ESYS on failure. */
rmqs_rc worker_start(worker_t *w, const char *name, worker_fn fn, void *arg);

/* With w->mu held: set stop and wake everything waiting on w->cv. */
void worker_stop_locked(worker_t *w);

/* Set stop, wake the thread (w->cv) and join it. Safe to call twice, and
 * on a worker that never started. */
void worker_stop(worker_t *w);

/* Whether stop is set (takes w->mu: callable from any thread). */
bool worker_stopping(worker_t *w);

/* Sleep ms (<= 0: not at all) unless stopped first; returns whether stop
 * is set. A stop wakes it at once. Takes w->mu. */
bool worker_sleep(worker_t *w, int64_t ms);

#endif
