/*
 * store_indexer.h - the thread of a backend's search indexer (internal to
 * the store: store_sqlite_indexer.c and store_pg_indexer.c use it).
 *
 * Why: both backends fill their search side tables off the insert path the
 * same way: a thread that sleeps until an insert kicks it (or a poll
 * interval passes), runs batches sized to take about a target time while
 * there is work, and waits after a failure. Only the batch (and, on
 * SQLite, how it lets others go first between batches) differs.
 */
#ifndef RMQS_STORE_INDEXER_H
#define RMQS_STORE_INDEXER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rmqs.h"
#include "worker.h"

typedef struct store_ix_ops {
    const char *name; /* the thread's name (at most 15 characters) */
    /* One batch of at most limit jobs: *n indexed, *more whether to run
     * another at once. A failure (logged by the backend) waits retry_ms. */
    rmqs_rc (*batch)(void *arg, size_t limit, size_t *n, bool *more);
    /* Between batches when *more (NULL: none); returns true when wk is
     * stopping. */
    bool (*pause)(void *arg, worker_t *wk);
    size_t first, min, max; /* batch sizes */
    int64_t target_ms;      /* a full batch takes about this long */
    int64_t poll_ms;        /* look for work without a kick this often */
    int64_t retry_ms;
} store_ix_ops;

typedef struct store_ix store_ix;

/* Start the thread (ops and arg borrowed until store_ix_stop). */
rmqs_rc store_ix_start(store_ix **out, const store_ix_ops *ops, void *arg,
                       rmqs_error *err);
/* Stop and free it; *ix NULL afterwards (a no-op when NULL). */
void store_ix_stop(store_ix **ix);
/* Wake it: jobs were inserted (NULL: a no-op). */
void store_ix_kick(store_ix *ix);

#endif
