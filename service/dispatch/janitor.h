/*
 * janitor.h - keeps the database bounded: purges finished jobs after the
 * retention period and checkpoints the WAL, on a thread of its own so
 * neither happens inside the dispatcher's or the writer's commits.
 */
#ifndef RMQS_JANITOR_H
#define RMQS_JANITOR_H

#include <stdint.h>

#include "rmqs.h"
#include "store.h"

typedef struct janitor janitor_t;

typedef struct janitor_options {
    int64_t retention_ms;      /* finished jobs older than this are purged;
                                 0: keep them forever */
    int64_t purge_interval_ms; /* how often to look for old jobs */
    int64_t checkpoint_interval_ms;
    size_t purge_batch; /* rows per purge transaction */
} janitor_options;

/* st is borrowed. NULL on ENOMEM. */
janitor_t *janitor_new(store_t *st, const janitor_options *opt);
rmqs_rc janitor_start(janitor_t *j);
void janitor_stop(janitor_t *j);
void janitor_free(janitor_t *j);

#endif
