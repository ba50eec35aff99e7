/*
 * taskpool.c - queued tasks run by a few named threads (see taskpool.h).
 *
 * One FIFO ring of max_queued slots under the first worker's mutex; each
 * thread takes the oldest task and runs it without the lock. At free, the
 * pool stops taking tasks, the threads empty the ring and leave: a queued
 * task always runs, so whoever waits on it (a suspended connection) is
 * always answered.
 */
#include "taskpool.h"

#include <stdio.h>
#include <stdlib.h>

#include "worker.h"

#define MAX_THREADS 16

typedef struct task {
    taskpool_fn fn;
    void *arg;
} task;

struct taskpool {
    worker_t w; /* w.mu guards the rest; w.cv wakes takers */
    worker_thread extra[MAX_THREADS - 1]; /* threads 2..n */
    int threads;
    task *ring;          /* max_queued slots */
    size_t cap, head, n; /* oldest at head, n queued */
    size_t running;
    bool stopping; /* no new tasks */
};

static void *run(void *arg)
{
    taskpool_t *p = arg;

    pthread_mutex_lock(&p->w.mu);
    for (;;) {
        task t;
        while (p->n == 0 && !p->stopping)
            (void)worker_cond_wait_ms(&p->w.cv, &p->w.mu, -1);
        if (p->n == 0)
            break; /* stopping, and nothing left */
        t = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->n--;
        p->running++;
        pthread_mutex_unlock(&p->w.mu);
        t.fn(t.arg);
        pthread_mutex_lock(&p->w.mu);
        p->running--;
    }
    pthread_mutex_unlock(&p->w.mu);
    return NULL;
}

taskpool_t *taskpool_new(const char *name, int threads, size_t max_queued,
                         rmqs_error *err)
{
    taskpool_t *p;
    char tname[16];

    if (threads < 1 || threads > MAX_THREADS || max_queued == 0) {
        rmqs_fail(err, RMQS_EINVAL, NULL,
                  "a task pool needs 1 to %d threads "
                  "and room for a task",
                  MAX_THREADS);
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (p != NULL)
        p->ring = calloc(max_queued, sizeof(*p->ring));
    if (p == NULL || p->ring == NULL) {
        free(p);
        rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    p->cap = max_queued;
    if (worker_init(&p->w, false) != RMQS_OK) {
        free(p->ring);
        free(p);
        rmqs_fail(err, RMQS_ESYS, NULL, "cannot set up a task pool");
        return NULL;
    }
    snprintf(tname, sizeof tname, "%.10s-1", name);
    if (worker_start(&p->w, tname, run, p) != RMQS_OK) {
        taskpool_free(p);
        rmqs_fail(err, RMQS_ESYS, NULL, "cannot start a task pool thread");
        return NULL;
    }
    p->threads = 1;
    for (int i = 1; i < threads; i++) {
        snprintf(tname, sizeof tname, "%.10s-%d", name, i + 1);
        if (worker_thread_start(&p->extra[i - 1], tname, run, p) != RMQS_OK) {
            taskpool_free(p);
            rmqs_fail(err, RMQS_ESYS, NULL, "cannot start a task pool thread");
            return NULL;
        }
        p->threads++;
    }
    return p;
}

bool taskpool_submit(taskpool_t *p, taskpool_fn fn, void *arg)
{
    bool queued = false;

    pthread_mutex_lock(&p->w.mu);
    if (!p->stopping && p->n < p->cap) {
        p->ring[(p->head + p->n) % p->cap] = (task){fn, arg};
        p->n++;
        queued = true;
        pthread_cond_signal(&p->w.cv);
    }
    pthread_mutex_unlock(&p->w.mu);
    return queued;
}

size_t taskpool_busy(taskpool_t *p)
{
    size_t n;

    pthread_mutex_lock(&p->w.mu);
    n = p->n + p->running;
    pthread_mutex_unlock(&p->w.mu);
    return n;
}

void taskpool_free(taskpool_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->w.mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->w.cv);
    pthread_mutex_unlock(&p->w.mu);
    for (int i = 1; i < p->threads; i++)
        worker_thread_join(&p->extra[i - 1]);
    worker_stop(&p->w); /* joins the first */
    worker_destroy(&p->w);
    free(p->ring);
    free(p);
}
