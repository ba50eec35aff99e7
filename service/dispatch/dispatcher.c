/*
 * dispatcher.c - the timing loop between the store and the broker.
 *
 * Why three threads: a job must leave the moment it is due, and the things
 * that take time between the store and the broker - a write transaction (it
 * waits for the store lock, which the writer holds through its commit and
 * fsync, and a neighbour on the same disk can stall an fsync for a second)
 * and a publisher confirm (the broker's round trip and its own fsync) - must
 * not stand in the way of that moment. So:
 *
 *   feeder (store, reads only)   publisher (broker side)       recorder
 *   claims jobs due within the   owns the AMQP connection      writes what the
 *   lookahead from a WAL         (rabbitmq-c connections       other two did,
 *   snapshot (store_claim_       belong to one thread);        one transaction
 *   ahead: never waits for a     sleeps (ppoll on an eventfd   per bunch
 *   write) into `ahead`, in      and the socket) until the     (store_record):
 *   due order, ahead of their    first job in `ahead` is due,  the claims
 *   time, and queues their       publishes it at once          queued by the
 *   claims for the recorder      (pipelined: a window of       feeder, then the
 *                                unconfirmed publishes),       outcomes; it may
 *                                reads confirms and returns    wait for the
 *                                as they come and hands each   writer as long
 *                                outcome to the recorder       as the disk does
 *
 * The publisher never waits for the database, the feeder never waits for a
 * write nor the broker, and only the recorder waits for the store lock. A
 * job claimed ahead is held by the store (store.h) from its read on, so it
 * cannot be cancelled or rescheduled even before its claim is written; the
 * recorder writes each claim before (or with) its outcome, since claims are
 * queued before the job can be published. Claiming ahead means a job is
 * `publishing` from up to
 * lookahead_ms before its deliver_at (so it can no longer be cancelled or
 * rescheduled then: 409); it is still published only once the wall clock
 * has reached its due time. Jobs claimed but not published when the
 * connection goes, or at stop, are released (pending again, the attempt not
 * counted); after a crash the store's recovery does the same.
 *
 * Waking: the feeder plans its next claim for lookahead_ms before the next
 * pending due time. disp_notify() (a job stored or rescheduled) wakes it
 * only when the new due time is earlier than that plan allows. Idle sleeps
 * are capped (IDLE_CAP_MS, and half the heartbeat) so heartbeats are
 * answered and a step of the wall clock is noticed within a second.
 *
 * One clock for due times: disp_now() is this host's wall clock corrected
 * by store_clock_offset_ms(), so instances that share a database (and
 * whose own clocks disagree) compare due times with the database's clock,
 * never ahead of it; 0 on SQLite. A claim from such a database carries a
 * lease (job_t.lease_until, renewed by the store): a job whose lease is
 * about to end is not published but released, since another instance may
 * have taken it over (an instance frozen past its lease wakes to find
 * this).
 *
 * Runs of recurring schedules carry an expiry (job_t.expires_at): one
 * claimed after it (the broker was away past the schedule's grace) is
 * settled STORE_OUT_EXPIRE instead of published.
 *
 * Nothing due is ever lost while the broker is away: jobs stay pending in
 * the store (the feeder does not claim while the publisher is not
 * connected) and are claimed oldest first once the connection is back.
 *
 * The jobs between the threads (`ahead` in due order, `done` for the
 * recorder) are a due_queue (due_queue.c), guarded by the feeder worker's
 * mutex (worker.c), which all three threads share; its stop flag stops all
 * three.
 *
 * Where: this file holds the dispatcher's life (new, start, stop, free)
 * and the calls of dispatcher.h; each thread has a file of its own
 * (disp_feeder.c, disp_publisher.c, disp_recorder.c), what they share is
 * in dispatcher_int.h, and the types it builds on (the handle, the
 * options) in disp_types.h. Calls point down only: this file starts the
 * threads, the recorder asks the feeder to plan, no thread calls up here.
 */
#include "dispatcher.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "dispatcher_int.h"
#include "due_queue.h"
#include "worker.h"

/* store_set_wake's callback: another instance stored or rescheduled a job
 * due at due_at_ms (the store's thread). */
static void on_store_wake(void *arg, int64_t due_at_ms)
{
    disp_notify(arg, due_at_ms);
}

disp_t *disp_new(store_t *st, amqpp_t *pub, const disp_options *opt)
{
    disp_t *d = calloc(1, sizeof(*d));
    size_t window;

    if (d == NULL)
        return NULL;
    /* The publisher runs at real-time priority and shares d->w.mu with the
     * feeder and the recorder: a normal thread preempted while holding it
     * would hold the publisher up (priority inversion). With inheritance
     * the holder runs at the publisher's priority until it lets go. */
    if (worker_init(&d->w, true) != RMQS_OK) {
        free(d);
        return NULL;
    }
    if (worker_cond_init(&d->rec_cv) != RMQS_OK) {
        worker_destroy(&d->w);
        free(d);
        return NULL;
    }
    d->st = st;
    d->pub = pub;
    d->opt = *opt;
    if (d->opt.batch_size < 1)
        d->opt.batch_size = 1;
    if (d->opt.lookahead_ms < 0)
        d->opt.lookahead_ms = 0;
    window = d->opt.window > 0 ? (size_t)d->opt.window
                               : 2 * (size_t)d->opt.batch_size;
    d->q = dueq_new(2 * (size_t)d->opt.batch_size); /* claims: batch_size */
    d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    d->next_claim_at = INT64_MIN; /* claim at once */
    d->notified_due = INT64_MAX;
    atomic_init(&d->connected, false);
    atomic_init(&d->blocked, false);
    pthread_mutex_init(&d->broker_mu, NULL);
    d->broker_state = DISP_BROKER_DOWN;
    d->broker_since_ms = tu_now_ms();
    d->flow = flow_new();
    d->limits_read_at = INT64_MIN;
    atomic_init(&d->limits_kick, false);
    if (d->q == NULL || d->wake_fd < 0 || d->flow == NULL ||
        amqpp_set_window(pub, window, d->opt.confirm_timeout_ms, disp_on_report,
                         d) != RMQS_OK) {
        d->pub = NULL; /* still the caller's on failure */
        disp_free(d);
        return NULL;
    }
    store_set_wake(st, on_store_wake, d);
    return d;
}

void disp_notify(disp_t *d, int64_t due_at_ms)
{
    disp_feeder_plan(d, due_at_ms); /* the feeder's plan: disp_feeder.c */
}

void disp_limits_changed(disp_t *d)
{
    atomic_store(&d->limits_kick, true);
    pthread_mutex_lock(&d->w.mu); /* the feeder reads them now */
    pthread_cond_signal(&d->w.cv);
    pthread_mutex_unlock(&d->w.mu);
}

flow_t *disp_flow(disp_t *d)
{
    return d->flow;
}

bool disp_broker_blocked(disp_t *d)
{
    return atomic_load(&d->blocked);
}

bool disp_broker_connected(disp_t *d)
{
    return atomic_load(&d->connected);
}

void disp_broker_status(disp_t *d, disp_broker_state *state, int64_t *since_ms,
                        char error[DISP_BROKER_ERROR_MAX])
{
    pthread_mutex_lock(&d->broker_mu);
    *state = d->broker_state;
    *since_ms = d->broker_since_ms;
    memcpy(error, d->broker_error, DISP_BROKER_ERROR_MAX);
    pthread_mutex_unlock(&d->broker_mu);
}

rmqs_rc disp_start(disp_t *d)
{
    if (worker_start(&d->w, "rmqs-feeder", disp_feeder_main, d) != RMQS_OK)
        return RMQS_ESYS;
    if (worker_thread_start(&d->publisher, "rmqs-publisher",
                            disp_publisher_main, d) != RMQS_OK ||
        worker_thread_start(&d->recorder, "rmqs-recorder", disp_recorder_main,
                            d) != RMQS_OK) {
        disp_stop(d);
        return RMQS_ESYS;
    }
    return RMQS_OK;
}

void disp_stop(disp_t *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->w.mu);
    if (!d->publisher.started)
        d->publisher_done = true;
    if (!d->w.thread.started)
        d->feeder_done = true;
    worker_stop_locked(&d->w); /* wakes the feeder */
    pthread_cond_broadcast(&d->rec_cv);
    pthread_mutex_unlock(&d->w.mu);
    if (d->wake_fd >= 0)
        wake_publisher(d);
    /* The feeder first: it ends at once, while the publisher may wait up
     * to the confirm timeout for its confirms. A stop cut short by the
     * grace period (_exit while the publisher waits) then leaves no ended
     * thread unjoined (ThreadSanitizer reports one as a thread leak). */
    worker_thread_join(&d->w.thread);
    worker_thread_join(&d->publisher);
    worker_thread_join(&d->recorder); /* after both: it writes what they
                                         left */
}

void disp_free(disp_t *d)
{
    if (d == NULL)
        return;
    /* no more wake-ups from the store's thread (it calls under a lock) */
    store_set_wake(d->st, NULL, NULL);
    disp_stop(d);
    amqpp_free(d->pub);
    /* Items are left only if the threads never ran. */
    dueq_free(d->q);
    flow_free(d->flow);
    free(d->claims);
    if (d->wake_fd >= 0)
        close(d->wake_fd);
    pthread_cond_destroy(&d->rec_cv);
    pthread_mutex_destroy(&d->broker_mu);
    worker_destroy(&d->w);
    free(d);
}

/* Test hook (declared in tests/unit/test_writer.c, not in dispatcher.h):
 * the earliest due time disp_notify() was told of since the feeder's last
 * claim, INT64_MAX if none; lets the writer's test see its notification on
 * a dispatcher that is not started. */
int64_t disp__notified_due(disp_t *d);
int64_t disp__notified_due(disp_t *d)
{
    int64_t due;

    pthread_mutex_lock(&d->w.mu);
    due = d->notified_due;
    pthread_mutex_unlock(&d->w.mu);
    return due;
}
