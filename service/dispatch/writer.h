/*
 * writer.h - group commit: the one thread that inserts new jobs.
 *
 * An fsync costs the same for one row as for a thousand, so HTTP handlers
 * do not insert themselves: they hand a validated request to the writer,
 * suspend their connection and return. The writer takes everything that
 * piled up while the previous commit was syncing, inserts it in one
 * transaction (store_insert_batch), wakes the dispatcher once for the
 * earliest new due time, and calls each request's done() callback, which
 * resumes the connection. A 201 therefore still means "on disk".
 */
#ifndef RMQS_WRITER_H
#define RMQS_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dispatcher.h"
#include "fair.h"
#include "rmqs.h"
#include "store.h"

typedef struct writer writer_t;

typedef struct writer_req writer_req;
/* Called on the writer thread once req->ins holds the outcome. Must be
 * quick and must not touch the writer. */
typedef void (*writer_done_fn)(writer_req *req, void *cls);

struct writer_req {
    store_insert_req ins; /* in: jobs and key; out: outcome (see store.h) */
    writer_done_fn done;
    void *cls;
    writer_req *next; /* the writer's queue link */
};

/* A writer over st and d (both borrowed); max_rows bounds one transaction.
 * New jobs are refused with RMQS_EFULL while less than min_free_bytes are
 * free on the database's filesystem: that reserve is left for the
 * dispatcher, so jobs already stored keep being delivered (and marked
 * sent) on a full disk. NULL on ENOMEM. */
writer_t *writer_new(store_t *st, disp_t *d, size_t max_rows,
                     int64_t min_free_bytes);

/* Whether the last check found less than the reserve free (for /readyz). */
bool writer_disk_full(writer_t *w);
rmqs_rc writer_start(writer_t *w);

/* --fair-key: rank every new job among those due at the same ms (fair.h)
 * before it is stored. fair is borrowed and outlives w; call before
 * writer_start. */
void writer_set_fair(writer_t *w, fair_t *fair);

/*
 * Queue req (borrowed until its done() runs). RMQS_ESYS if the writer is
 * stopping: then req is not queued and done() will not be called.
 */
rmqs_rc writer_submit(writer_t *w, writer_req *req);

/*
 * Admission: requests waiting for the writer hold their jobs parsed in
 * memory, so a flood of clients could grow the process without bound. A
 * request asks for its body size out of a budget (bytes; 0 = no budget, set
 * with writer_set_admission_budget) before it is parsed, and gives it back
 * with writer_release once it is answered. When nothing is admitted any
 * size gets through, so no request waits forever; while the writer is
 * stopping everything is admitted (and writer_submit refuses).
 *
 * writer_admit: true if admitted now. Otherwise, if waiter is not NULL, it
 * is queued (FIFO, nobody overtakes it) and waiter->wake(cls) is called
 * later - from another thread, with no writer lock held - once it has been
 * admitted (waiter->granted). A caller that suspends its connection to
 * wait must suspend before queueing the waiter.
 */
typedef struct writer_waiter writer_waiter;
struct writer_waiter {
    size_t bytes;
    bool granted;  /* out: admitted by a writer_release */
    bool stopping; /* out: admitted because the writer stops: the caller
                      answers at once, without parsing (writer_submit
                      would refuse it anyway) */
    void (*wake)(void *cls);
    void *cls;
    writer_waiter *next; /* the writer's queue link */
};
void writer_set_admission_budget(writer_t *w, size_t bytes);
bool writer_admit(writer_t *w, size_t bytes, writer_waiter *waiter);
void writer_release(writer_t *w, size_t bytes);
/* How many requests wait for admission now (for /metrics). */
size_t writer_waiting(writer_t *w);

/* Commit everything queued so far, then end the thread (waking every
 * request still waiting for admission). */
void writer_stop(writer_t *w);
void writer_free(writer_t *w);

#endif
