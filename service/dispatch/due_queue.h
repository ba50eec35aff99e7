/*
 * due_queue.h - the jobs the dispatcher has claimed and not yet recorded:
 * those waiting for their due time (`ahead`, in due order) and those the
 * broker has answered, waiting for the recorder (`done`, in arrival
 * order).
 *
 * Why a module: the order of `ahead` is what makes a job leave on time
 * (the publisher only ever looks at the first one), and it is easy to get
 * wrong: a later claim can hold a job due before the last ones of an
 * earlier claim (a job scheduled at short notice), so claims are merged,
 * not appended. Here it is tested on its own (tests/unit/test_due_queue.c),
 * the way beanstalkd tests its heap.
 *
 * Not thread-safe: the dispatcher calls it under its mutex. Times are wall
 * ms (job due times), passed in by the caller.
 */
#ifndef RMQS_DUE_QUEUE_H
#define RMQS_DUE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "limit.h"
#include "rmqs.h"
#include "store.h"

/* A claimed job on its way: in `ahead`, unconfirmed at the broker (the
 * caller's), then in `done` with its outcome. */
typedef struct dueq_item {
    job_t job;       /* owned */
    int64_t sent_ms; /* wall ms of the publish, -1 before */
    bool delayed;    /* a limit moved its due_at in this claim (its
                               held_by and held_ms are recorded when sent) */
    /* A limit that holds publishing while a queue is too full (the
     * publisher checks it), or hold_queue[0] == '\0': */
    char hold_limit[LIMIT_NAME_MAX + 1];
    char hold_queue[JOB_MAX_SHORTSTR + 1];
    int64_t hold_messages;
    store_outcome out;      /* set when the broker answered (or released) */
    char reason[256];       /* out.error points here */
    struct dueq_item *next; /* in `done` */
} dueq_item;

typedef struct due_queue due_queue_t;

/* A queue holding at most cap jobs ahead (cap >= 1). NULL on ENOMEM. */
due_queue_t *dueq_new(size_t cap);

/* Free the queue and every item still in it, ahead or done. */
void dueq_free(due_queue_t *q);

/* A new item that takes over *job's allocations (*job is zeroed), not
 * sent. NULL on ENOMEM (*job untouched). */
dueq_item *dueq_item_new(job_t *job);

/* Free a list of items linked by next, with their jobs. */
void dueq_items_free(dueq_item *list);

size_t dueq_cap(const due_queue_t *q);
/* How many wait ahead, and how many more fit. */
size_t dueq_ahead(const due_queue_t *q);
size_t dueq_room(const due_queue_t *q);

/* Merge n items, in due order among themselves (as the store claims
 * them), into `ahead`, which stays in due order; of equal due times the
 * one already there goes first. The queue owns them then. RMQS_EINVAL
 * (nothing taken) if more than dueq_room. */
rmqs_rc dueq_merge(due_queue_t *q, dueq_item **in, size_t n);

/* Take the first item of `ahead` if it is due at now_ms (due_at <=
 * now_ms): the caller owns it then. Otherwise NULL, and *next_due is the
 * first one's due time (INT64_MAX if `ahead` is empty). Never returns a job
 * early. */
dueq_item *dueq_take_due(due_queue_t *q, int64_t now_ms, int64_t *next_due);

/* Queue an answered item (it->out set) on `done`, which owns it then.
 * Returns how many are on `done` now. */
size_t dueq_done_push(due_queue_t *q, dueq_item *it, int64_t now_ms);

/* Mark it released (not published after all: STORE_OUT_RELEASE) and queue
 * it on `done`. Returns how many are on `done` now. */
size_t dueq_release(due_queue_t *q, dueq_item *it, int64_t now_ms);

/* Release everything `ahead` (at stop, on connection loss, while the
 * broker blocks publishers), in due order. Returns how many. */
size_t dueq_release_ahead(due_queue_t *q, int64_t now_ms);

/* How many are on `done`, and the wall ms the oldest of them arrived
 * (meaningless when none). */
size_t dueq_done_count(const due_queue_t *q);
int64_t dueq_done_since(const due_queue_t *q);

/* Take the whole `done` list (arrival order; the caller owns it, see
 * dueq_items_free); its length goes to *n. NULL if empty. */
dueq_item *dueq_done_take(due_queue_t *q, size_t *n);

#endif
