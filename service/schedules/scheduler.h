/*
 * scheduler.h - the thread that turns recurring schedules into jobs.
 *
 * One thread per instance (rmqs-scheduler). Each run is created ahead of
 * its fire time (lead_ms before it), as an ordinary pending job due at the
 * fire time, so the dispatcher publishes it as precisely as any one-shot
 * job; the schedule's next fire time moves on in the same transaction
 * (store_schedule_advance, compare-and-set), and the run's id comes from
 * (schedule, generation, fire time): a run is created once, across crashes
 * and across instances sharing a database. See scheduler.c for the rules
 * (one outstanding run, catch-up after downtime, wakes).
 */
#ifndef RMQS_SCHEDULER_H
#define RMQS_SCHEDULER_H

#include <stdint.h>

#include "dispatcher.h"
#include "job.h"
#include "rmqs.h"
#include "store.h"

typedef struct scheduler scheduler_t;

typedef struct scheduler_options {
    int64_t lead_ms;   /* runs are created this long before their fire time */
    job_limits limits; /* the job template's rules (as for POST /schedule) */
} scheduler_options;

/* A scheduler over st that wakes d for each run it creates (both borrowed,
 * outliving it). Not started. NULL on ENOMEM. */
scheduler_t *scheduler_new(store_t *st, disp_t *d,
                           const scheduler_options *opt);

/* Start the thread. RMQS_ESYS if it cannot. */
rmqs_rc scheduler_start(scheduler_t *s);

/* A schedule of this instance changed (PUT, PATCH, DELETE): look again now.
 * Cheap; callable from any thread; s may be NULL. */
void scheduler_notify(scheduler_t *s);

/* Stop and join the thread (the pass in progress finishes). Safe twice. */
void scheduler_stop(scheduler_t *s);
void scheduler_free(scheduler_t *s);

#endif
