/*
 * dispatcher_int.h - the dispatcher's insides, shared by its files only
 * (dispatcher.c: the struct's life and the public calls; disp_feeder.c:
 * the feeder thread, claims ahead, and disp_feeder_plan(); disp_publisher.c:
 * the publisher thread, publishes on time and reads the broker's answers;
 * disp_recorder.c: the recorder thread, writes claims and outcomes).
 * Everything else sees only dispatcher.h (the retry policy's unit test
 * also this header, for disp_backoff_ms).
 *
 * Why one header: the three threads work on one struct disp under one
 * mutex (dispatcher.c's file comment says why three threads, and the
 * struct below says what the mutex guards). The calls point one way:
 * dispatcher.c (dispatcher.h's calls) starts the threads, the recorder
 * asks the feeder to plan (disp_feeder_plan), and no thread's file calls
 * back into dispatcher.c nor includes dispatcher.h: the types come from
 * disp_types.h, and what all of them use is here, inline.
 */
#ifndef RMQS_DISPATCHER_INT_H
#define RMQS_DISPATCHER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "amqp_publisher.h"
#include "disp_types.h"
#include "due_queue.h"
#include "flow.h"
#include "store.h"
#include "timeutil.h"
#include "worker.h"

#define IDLE_CAP_MS 1000   /* longest sleep without looking again */
#define SETTLE_BATCH 256   /* outcomes that are recorded at once */
#define SETTLE_DELAY_MS 10 /* ... or once the oldest waited this */

struct disp {
    store_t *st;  /* borrowed */
    amqpp_t *pub; /* owned; used only by the publisher thread */
    disp_options opt;

    /* The feeder's worker: its mu (priority inheritance: the publisher
     * runs at real-time priority) guards everything below and its stop
     * flag stops all three threads; its cv wakes the feeder. */
    worker_t w;
    worker_thread publisher, recorder;
    int wake_fd; /* eventfd: wakes the publisher thread */

    pthread_cond_t rec_cv; /* CLOCK_MONOTONIC; wakes the recorder */
    bool publisher_done;   /* the publisher thread has handed back all */
    bool feeder_done;      /* the feeder thread claims no more */
    char (*claims)[JOB_ID_LEN + 1]; /* claimed ahead, claim not yet written */
    size_t claims_n, claims_cap;
    bool kicked;           /* a job wants claiming before next_claim_at */
    int64_t next_claim_at; /* wall ms the feeder plans to claim at */
    int64_t notified_due;  /* earliest due time notified since the claim */
    bool can_claim;        /* the publisher is connected and unblocked */
    due_queue_t *q;        /* claimed, not yet published (`ahead`, by
                               due time), and answered, waiting to be
                               recorded (`done`); a dueq_item is owned by
                               the dispatcher from claim to record */

    atomic_bool connected;
    atomic_bool
        blocked; /* the broker blocked publishing (connection.blocked) */

    /* The broker's state for GET /status (disp_broker_status): what it
     * is, since when (wall ms) and the error that last took it down. Its
     * own mutex, held only to copy: the HTTP threads read it. */
    pthread_mutex_t broker_mu;
    disp_broker_state broker_state;
    int64_t broker_since_ms;
    char broker_error[DISP_BROKER_ERROR_MAX]; /* "": none yet */

    /* Flow control (flow.h): the limits as last read from the store, used
     * by the feeder alone; read again every LIMITS_REFRESH_MS and when
     * disp_limits_changed() sets limits_kick. */
    flow_t *flow;
    int64_t limits_read_at; /* wall ms of the last read, INT64_MIN: never */
    atomic_bool limits_kick;

    /* The feeder's failed claims since its last log line, and when that
     * was (tu_mono_ms): one line a second at most. The feeder's own. */
    int64_t claim_failures, claim_failed_logged;
};

/* The publisher thread notes the broker's state: since moves only on a
 * change of state; error (NULL: keep the last one) is the reason it went
 * down or blocked. */
static inline void disp_broker_note(disp_t *d, disp_broker_state state,
                                    const char *error)
{
    pthread_mutex_lock(&d->broker_mu);
    if (state != d->broker_state) {
        d->broker_state = state;
        d->broker_since_ms = tu_now_ms();
    }
    if (error != NULL)
        snprintf(d->broker_error, sizeof(d->broker_error), "%s", error);
    pthread_mutex_unlock(&d->broker_mu);
}

#define LIMITS_REFRESH_MS 1000 /* another instance's change shows by then */

/* Now on the clock due times are compared with (dispatcher.c's file
 * comment). */
static inline int64_t disp_now(const disp_t *d)
{
    return tu_now_ms() + store_clock_offset_ms(d->st);
}

static inline void wake_publisher(disp_t *d)
{
    uint64_t one = 1;
    ssize_t r = write(d->wake_fd, &one, sizeof one);

    (void)r; /* EAGAIN: the counter is already non-zero, it wakes anyway */
}

/* The three threads (worker.c's thread functions; arg: the disp_t),
 * started by disp_start(). */
void *disp_feeder_main(void *arg);    /* disp_feeder.c */
void *disp_publisher_main(void *arg); /* disp_publisher.c */
void *disp_recorder_main(void *arg);  /* disp_recorder.c */

/* amqpp's report (disp_new() hands it to amqpp_set_window): what the broker
 * said about one job; runs on the publisher thread. disp_publisher.c */
void disp_on_report(void *cls, void *ctx, const amqpp_result *r);

/* Retry delay after the given failed attempt (1-based): base * 2^(n-1),
 * capped. Pure; exposed for unit tests. disp_publisher.c */
int64_t disp_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms);

/* disp_notify()'s work, for the dispatcher's own threads (the recorder,
 * for a job pending again): a job is due at due_at_ms; wake the feeder if
 * that is sooner than it planned to look. Takes d->w.mu. disp_feeder.c */
void disp_feeder_plan(disp_t *d, int64_t due_at_ms);

/* A limit holds j back until wall ms `until`: j->held_by = limit (copied;
 * out of memory leaves the old one), j->held_ms += until - due_at.
 * disp_feeder.c */
void disp_mark_held(job_t *j, const char *limit, int64_t until);

#endif
