/*
 * taskpool.h - a few named threads that run queued tasks, with a bounded
 * queue: work that may take long (a search over a million jobs) runs here
 * instead of on the thread that received it.
 *
 * Why: libmicrohttpd's pool threads each serve many connections in turn,
 * so a request handler that blocks for 20 ms holds up every connection of
 * its thread for 20 ms (measured: POST /schedule 0.4 ms alone, 40 ms
 * beside two searches looping). A handler that would block suspends its
 * connection, submits a task here and returns at once; the task resumes the
 * connection when done. The queue is bounded, so a flood of slow requests
 * is refused at once (the caller answers 503) rather than queued without
 * end; the threads come from worker.c.
 */
#ifndef RMQS_TASKPOOL_H
#define RMQS_TASKPOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "rmqs.h"

typedef struct taskpool taskpool_t;

typedef void (*taskpool_fn)(void *arg);

/* threads (1..16) threads named "<name>-<i>" (name at most 10
 * characters), at most max_queued tasks waiting. NULL with err on
 * failure (RMQS_EINVAL, RMQS_ENOMEM, RMQS_ESYS). */
taskpool_t *taskpool_new(const char *name, int threads, size_t max_queued,
                         rmqs_error *err);

/* Queue fn(arg) for a thread of the pool. false when the queue is full or
 * the pool is stopping: nothing was queued, fn will not run. */
bool taskpool_submit(taskpool_t *p, taskpool_fn fn, void *arg);

/* Tasks waiting and running (a gauge for tests and logs). */
size_t taskpool_busy(taskpool_t *p);

/* Refuse new tasks, run every queued one, join the threads, free. NULL is
 * a no-op. */
void taskpool_free(taskpool_t *p);

#endif
