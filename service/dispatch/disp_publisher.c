/*
 * disp_publisher.c - the dispatcher's publisher thread: owns the AMQP
 * connection (rabbitmq-c connections belong to one thread), sleeps until
 * the first job of `ahead` is due, publishes it at once (a window of
 * unconfirmed publishes), reads the broker's confirms and returns as they
 * come and hands each outcome to the recorder. Never waits for the
 * database (dispatcher.c's file comment says why; dispatcher_int.h what the
 * threads share).
 */
#include "dispatcher_int.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "due_queue.h"
#include "log.h"
#include "metrics.h"
#include "timeutil.h"
#include "worker.h"

#define MOD "dispatcher"

#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
#define LEASE_MARGIN_MS \
    250 /* a claim this close to its lease's end
                                       is released, not published */

/* dispatcher_int.h; the delay of a retry (disp_on_report below). */
int64_t disp_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms)
{
    int64_t d = base_ms;

    if (attempt < 1)
        attempt = 1;
    for (int i = 1; i < attempt && d < cap_ms; i++)
        d *= 2;
    return d < cap_ms ? d : cap_ms;
}

/* Whether the claim on j may have passed to another instance by the time
 * a publish at now reaches the broker: it was made before this instance's
 * database session began (the session was lost since), or its lease, as
 * renewed, ends within LEASE_MARGIN_MS. Claims without a lease (SQLite)
 * never lapse. */
static bool lease_lapsing(const disp_t *d, const job_t *j, int64_t now)
{
    int64_t until = store_lease_renewed_until(d->st);

    if (j->lease_until == 0)
        return false;
    if (j->updated_at < store_claims_valid_since(d->st))
        return true;
    if (until < j->lease_until)
        until = j->lease_until;
    return now >= until - LEASE_MARGIN_MS;
}

/* A job with an expiry (a run of a recurring schedule: its fire time plus
 * misfire_grace_ms) claimed after it: it is not published but settled
 * STORE_OUT_EXPIRE (cancelled). The claim time is what counts (updated_at
 * of the claim), not the publish: a run claimed ahead on time goes out
 * even if the broker's confirm of the previous ones took a while. */
static bool claimed_expired(const job_t *j)
{
    return j->expires_at != 0 && j->updated_at > j->expires_at;
}

/* ------------------------------------------------------------------------ */
/* Outcomes (publisher thread -> recorder thread)                           */

/* Queue an answered item for the recorder, and wake it when the first one
 * arrives (to time SETTLE_DELAY_MS) or a full batch is there. Outcomes are
 * recorded in bunches: a transaction per published job would cost the
 * writer (same lock) more than the few ms a `sent` mark waits. Takes
 * d->w.mu. */
static void done_push(disp_t *d, dueq_item *it)
{
    size_t n;

    pthread_mutex_lock(&d->w.mu);
    n = dueq_done_push(d->q, it, tu_now_ms());
    if (n == 1 || n == SETTLE_BATCH)
        pthread_cond_signal(&d->rec_cv);
    pthread_mutex_unlock(&d->w.mu);
}

/* The line a job that will not be published again leaves in the log
 * (refused by the broker, or its last attempt failed). */
static void log_job_failed(const job_t *j, const char *reason)
{
    log_warn(MOD, "job failed",
             "job_id=%s exchange=\"%s\" routing_key=\"%s\" attempt=%d "
             "error=\"%s\"",
             j->id, j->exchange, j->routing_key, j->attempts, reason);
}

/* amqpp's report: what the broker said about one job (publisher thread). */
void disp_on_report(void *cls, void *ctx, const amqpp_result *r)
{
    disp_t *d = cls;
    dueq_item *it = ctx;
    job_t *j = &it->job;
    int64_t now = disp_now(d);

    it->out = (store_outcome){.id = j->id};
    switch (r->kind) {
    case AMQPP_ACKED:
        it->out.kind = STORE_OUT_SENT;
        if (it->delayed) { /* a limit held it back: say which, and how long */
            it->out.held_by = j->held_by;
            it->out.held_ms = j->held_ms;
        }
        metrics_publish_attempts(1);
        metrics_job_sent(it->sent_ms - j->due_at);
        log_debug(MOD, "sent",
                  "job_id=%s exchange=\"%s\" routing_key=\"%s\" late_ms=%lld",
                  j->id, j->exchange, j->routing_key,
                  (long long)(it->sent_ms - j->due_at));
        break;
    case AMQPP_UNSENT: it->out.kind = STORE_OUT_RELEASE; break;
    case AMQPP_REFUSED:
        /* not an attempt at the broker, and never will be: failed now */
        metrics_job_failed(j->exchange);
        snprintf(it->reason, sizeof(it->reason), "%s", r->reason);
        it->out.kind = STORE_OUT_FAIL;
        it->out.error = it->reason;
        log_job_failed(j, r->reason);
        break;
    default:
        metrics_publish_attempts(1);
        metrics_publish_failure(r->kind == AMQPP_RETURNED ? MF_RETURNED
                                : r->kind == AMQPP_NACKED ? MF_NACKED
                                : r->kind == AMQPP_CLOSED ? MF_CHANNEL_CLOSED
                                                          : MF_CONNECTION_LOST);
        if (j->attempts >= j->max_attempts)
            metrics_job_failed(j->exchange);
        snprintf(it->reason, sizeof(it->reason), "%s", r->reason);
        it->out.kind = STORE_OUT_RETRY;
        it->out.error = it->reason;
        it->out.retry_at =
            now + disp_backoff_ms(j->attempts, d->opt.backoff_base_ms,
                                  d->opt.backoff_cap_ms);
        if (j->attempts >= j->max_attempts)
            log_job_failed(j, r->reason);
        else
            log_warn(MOD, "publish attempt failed",
                     "job_id=%s exchange=\"%s\" routing_key=\"%s\" "
                     "attempt=%d max_attempts=%d error=\"%s\"",
                     j->id, j->exchange, j->routing_key, j->attempts,
                     j->max_attempts, r->reason);
        break;
    }
    done_push(d, it);
}

/* ------------------------------------------------------------------------ */
/* Queue holds: hold_when_queue_ready_over                                  */

#define QUEUE_READ_MS \
    100 /* a queue's ready count is read again
                                      after this long */
#define QUEUE_HELD_MIN_MS \
    250 /* a job held for a full queue comes
                                      back after this long, then twice as
                                      long each time, up to ... */
#define QUEUE_HELD_MAX_MS 5000
#define QUEUE_STATES 64 /* queues watched at once (LRU) */

/* What the publisher knows of a watched queue (its thread alone). */
typedef struct qstate {
    char name[JOB_MAX_SHORTSTR + 1];
    int64_t ready;      /* ready messages at the last read */
    int64_t sent_since; /* publishes counted against it since */
    int64_t read_at;    /* wall ms of the last read, INT64_MIN: never */
    bool missing;       /* no such queue at the last read (not held) */
    bool holding;       /* the last check held a job (for the log) */
} qstate;

typedef struct qstates {
    qstate q[QUEUE_STATES];
    size_t n;
} qstates;

static qstate *qstate_of(qstates *qs, const char *name)
{
    size_t oldest = 0;

    for (size_t i = 0; i < qs->n; i++) {
        if (strcmp(qs->q[i].name, name) == 0)
            return &qs->q[i];
        if (qs->q[i].read_at < qs->q[oldest].read_at)
            oldest = i;
    }
    if (qs->n < QUEUE_STATES)
        oldest = qs->n++;
    qs->q[oldest] = (qstate){.read_at = INT64_MIN};
    snprintf(qs->q[oldest].name, sizeof qs->q[oldest].name, "%s", name);
    return &qs->q[oldest];
}

/* Whether it's queue holds it back now: more ready than the limit allows,
 * counting what was published since the last read (a read at most
 * QUEUE_READ_MS old). A queue that does not exist holds nothing (said
 * once); a lost connection neither (the publish reports it). */
static bool queue_too_full(disp_t *d, qstate *q, const dueq_item *it,
                           int64_t now)
{
    if (q->read_at == INT64_MIN || now - q->read_at >= QUEUE_READ_MS) {
        rmqs_error err = {0};
        int64_t ready = 0;
        rmqs_rc rc = amqpp_queue_ready(d->pub, q->name, &ready, &err);

        if (rc != RMQS_OK && rc != RMQS_ENOTFOUND)
            return false;
        if (rc == RMQS_ENOTFOUND && !q->missing)
            log_warn(MOD,
                     "the queue of a limit's hold does not exist; not held",
                     "limit=\"%s\" queue=\"%s\" error=\"%s\"", it->hold_limit,
                     q->name, err.message);
        q->missing = rc == RMQS_ENOTFOUND;
        q->ready = ready;
        q->sent_since = 0;
        q->read_at = now;
    }
    return q->ready + q->sent_since > it->hold_messages;
}

/* Give it back to the store, pending, held by its queue's limit: it comes
 * back after QUEUE_HELD_MIN_MS, then longer the longer it has been held. */
static void hold_for_queue(disp_t *d, dueq_item *it, qstate *q, int64_t now)
{
    int64_t wait = it->job.held_ms;

    if (wait < QUEUE_HELD_MIN_MS)
        wait = QUEUE_HELD_MIN_MS;
    if (wait > QUEUE_HELD_MAX_MS)
        wait = QUEUE_HELD_MAX_MS;
    if (!q->holding)
        log_info(MOD, "queue too full; holding its jobs",
                 "limit=\"%s\" queue=\"%s\" ready=%lld max=%lld",
                 it->hold_limit, q->name, (long long)q->ready,
                 (long long)it->hold_messages);
    q->holding = true;
    disp_mark_held(&it->job, it->hold_limit, now + wait);
    flow_count_held(d->flow, it->hold_limit);
    it->out = (store_outcome){.id = it->job.id,
                              .kind = STORE_OUT_HOLD,
                              .retry_at = now + wait,
                              .held_by = it->job.held_by,
                              .held_ms = it->job.held_ms};
    done_push(d, it);
}

/* ------------------------------------------------------------------------ */
/* The publisher thread: publishes on time, reads the broker's answers      */

static void set_can_claim(disp_t *d, bool v)
{
    pthread_mutex_lock(&d->w.mu);
    if (d->can_claim != v) {
        d->can_claim = v;
        if (v)
            d->next_claim_at = INT64_MIN;
        pthread_cond_signal(&d->w.cv);
        pthread_cond_signal(&d->rec_cv); /* outcomes go at once now */
    }
    pthread_mutex_unlock(&d->w.mu);
}

/* Give every job of `ahead` back to the store (not published). */
static void release_ahead(disp_t *d)
{
    pthread_mutex_lock(&d->w.mu);
    (void)dueq_release_ahead(d->q, tu_now_ms());
    pthread_cond_signal(&d->w.cv);
    pthread_cond_signal(&d->rec_cv);
    pthread_mutex_unlock(&d->w.mu);
}

/* Take the first job of `ahead` if it is due at now_ms; else NULL and
 * *next_due its due time (INT64_MAX: none). */
static dueq_item *take_due(disp_t *d, int64_t now_ms, int64_t *next_due)
{
    dueq_item *it;

    pthread_mutex_lock(&d->w.mu);
    it = dueq_take_due(d->q, now_ms, next_due);
    if (it != NULL && dueq_ahead(d->q) == dueq_cap(d->q) / 2)
        pthread_cond_signal(&d->w.cv); /* room to claim more */
    pthread_mutex_unlock(&d->w.mu);
    return it;
}

/*
 * Wait until wall_ms on disp_now()'s clock (at most cap_ms), a wake-up
 * through the eventfd, or a frame on the AMQP socket. Returns true if the
 * socket (or rabbitmq-c's buffer) has something to read.
 */
static bool wait_events(disp_t *d, int64_t wall_ms, int64_t cap_ms)
{
    struct pollfd fds[2];
    struct timespec now_rt, ts;
    int64_t wait_ns;
    int nfds = 1, fd = amqpp_fd(d->pub);
    uint64_t count;

    if (amqpp_buffered(d->pub))
        return true;
    clock_gettime(CLOCK_REALTIME, &now_rt);
    wait_ns = cap_ms * 1000000;
    if (wall_ms != INT64_MAX) {
        int64_t to_due = (wall_ms - store_clock_offset_ms(d->st)) * 1000000 -
                         ((int64_t)now_rt.tv_sec * 1000000000 + now_rt.tv_nsec);
        if (to_due < wait_ns)
            wait_ns = to_due;
    }
    if (wait_ns < 0)
        wait_ns = 0;
    ts.tv_sec = wait_ns / 1000000000;
    ts.tv_nsec = wait_ns % 1000000000;
    fds[0] = (struct pollfd){.fd = d->wake_fd, .events = POLLIN};
    if (fd >= 0)
        fds[nfds++] = (struct pollfd){.fd = fd, .events = POLLIN};
    if (ppoll(fds, (nfds_t)nfds, &ts, NULL) <= 0)
        return false;
    if (fds[0].revents & POLLIN) {
        ssize_t r = read(d->wake_fd, &count, sizeof count);
        (void)r;
    }
    return nfds > 1 && fds[1].revents != 0;
}

/* Connected and publishing until the connection goes or stop. */
static void publish_loop(disp_t *d, int64_t idle_cap, qstates *qs)
{
    bool was_blocked = true; /* so the first pass allows claiming */

    qs->n = 0; /* the queues are read again on every connection */

    while (!worker_stopping(&d->w) && amqpp_connected(d->pub)) {
        int64_t now = disp_now(d), next_due = INT64_MAX;
        bool blocked = amqpp_blocked(d->pub);

        if (blocked != was_blocked) { /* tell the feeder only of changes */
            set_can_claim(d, !blocked);
            atomic_store(&d->blocked, blocked);
            disp_broker_note(d, blocked ? DISP_BROKER_BLOCKED : DISP_BROKER_UP,
                             blocked ? "the broker blocks publishing "
                                       "(connection.blocked: a memory or "
                                       "disk alarm)"
                                     : NULL);
        }
        was_blocked = blocked;
        if (blocked)
            release_ahead(d); /* hand them back; claimed again once unblocked */
        /* Publish everything due, back to back, while the window has
         * room; confirms are read as they come. */
        while (amqpp_can_send(d->pub)) {
            dueq_item *it = take_due(d, now, &next_due);
            if (it == NULL)
                break;
            if (claimed_expired(&it->job)) {
                log_warn(MOD, "run expired; not published",
                         "job_id=%s schedule=\"%s\" fire_at=%lld "
                         "expires_at=%lld claimed_at=%lld",
                         it->job.id, it->job.schedule ? it->job.schedule : "",
                         (long long)it->job.fire_at,
                         (long long)it->job.expires_at,
                         (long long)it->job.updated_at);
                it->out = (store_outcome){
                    .id = it->job.id,
                    .kind = STORE_OUT_EXPIRE,
                    .error = "missed its fire time by more than "
                             "misfire_grace_ms"};
                metrics_jobs_cancelled(1);
                done_push(d, it);
                continue;
            }
            if (lease_lapsing(d, &it->job, now)) {
                log_warn(MOD, "claim lease lapsed; not published",
                         "job_id=%s lease_until=%lld now=%lld note=\"another "
                         "instance may have taken it over\"",
                         it->job.id, (long long)it->job.lease_until,
                         (long long)now);
                metrics_lease_lapsed();
                pthread_mutex_lock(&d->w.mu);
                (void)dueq_release(d->q, it, tu_now_ms());
                pthread_cond_signal(&d->rec_cv);
                pthread_mutex_unlock(&d->w.mu);
                continue;
            }
            if (it->hold_queue[0] != '\0') {
                qstate *q = qstate_of(qs, it->hold_queue);
                if (queue_too_full(d, q, it, now)) {
                    hold_for_queue(d, it, q, now);
                    continue;
                }
                if (q->holding)
                    log_info(MOD, "queue has room again; publishing",
                             "limit=\"%s\" queue=\"%s\" ready=%lld",
                             it->hold_limit, q->name, (long long)q->ready);
                q->holding = false;
                q->sent_since++;
            }
            it->sent_ms = now;
            if (amqpp_send(d->pub, &it->job, it) != RMQS_OK)
                break; /* the connection went: everything reported */
            now = disp_now(d);
        }
        amqpp_flush(d->pub);
        if (!amqpp_connected(d->pub))
            break;
        if (!amqpp_can_send(d->pub))
            next_due = INT64_MAX; /* wait for confirms, not the clock */
        (void)wait_events(d, next_due, idle_cap);
        /* Acks, returns, heartbeats; gives up on overdue confirms. */
        if (amqpp_poll(d->pub, 0) != RMQS_OK)
            break;
    }
}

void *disp_publisher_main(void *arg)
{
    disp_t *d = arg;
    int64_t reconnect_ms = RECONNECT_MIN_MS;
    int64_t idle_cap = IDLE_CAP_MS;
    bool was_down_logged = false;
    bool ever_connected = false;
    qstates qs; /* about 18 KiB: the publisher thread's stack has room */

    if (d->opt.heartbeat_s > 0 && d->opt.heartbeat_s * 500 < idle_cap)
        idle_cap = d->opt.heartbeat_s * 500;
    /* On a busy CPU a woken thread can wait tens of ms for a core: the one
     * thread whose wake-up is the due time goes first. It sleeps between
     * publishes, so it takes little; without CAP_SYS_NICE it stays normal. */
    if (d->opt.rt_priority > 0) {
        struct sched_param sp = {.sched_priority = d->opt.rt_priority};
        int e = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
        if (e == 0)
            log_info(MOD, "publisher thread at real-time priority",
                     "policy=SCHED_FIFO priority=%d", d->opt.rt_priority);
        else
            log_info(MOD, "publisher thread at normal priority",
                     "reason=\"%s\" note=\"SCHED_FIFO needs CAP_SYS_NICE\"",
                     strerror(e));
    }

    while (!worker_stopping(&d->w)) {
        rmqs_error err = {0};

        if (amqpp_connect(d->pub, &err) != RMQS_OK) {
            disp_broker_note(d, DISP_BROKER_DOWN,
                             err.message[0] ? err.message
                                            : "cannot connect to the broker");
            if (!was_down_logged)
                log_warn(MOD, "broker unreachable; retrying",
                         "url=%s error=\"%s\"", amqpp_safe_url(d->pub),
                         err.message);
            was_down_logged = true;
            /* disp_stop() writes the eventfd: no waiting out the delay. */
            (void)wait_events(d, INT64_MAX, tu_jitter_ms(reconnect_ms));
            reconnect_ms = reconnect_ms * 2 < RECONNECT_MAX_MS
                               ? reconnect_ms * 2
                               : RECONNECT_MAX_MS;
            continue;
        }
        if (was_down_logged)
            log_info(MOD, "broker connection restored", "url=%s",
                     amqpp_safe_url(d->pub));
        was_down_logged = false;
        if (ever_connected)
            metrics_broker_reconnect();
        ever_connected = true;
        reconnect_ms = RECONNECT_MIN_MS;
        atomic_store(&d->connected, true);
        disp_broker_note(d, DISP_BROKER_UP, NULL);
        if (d->opt.on_connected != NULL)
            d->opt.on_connected(d->opt.connected_cls);

        publish_loop(d, idle_cap, &qs);

        atomic_store(&d->blocked, false);
        if (!amqpp_connected(d->pub)) {
            atomic_store(&d->connected, false);
            disp_broker_note(d, DISP_BROKER_DOWN, "broker connection lost");
            set_can_claim(d, false);
            release_ahead(d);
            log_warn(MOD, "broker connection lost", "url=%s",
                     amqpp_safe_url(d->pub));
        }
    }

    /* Stopping: nothing more is published; what is unconfirmed gets its
     * answer (bounded by the confirm timeout) and is recorded. */
    set_can_claim(d, false);
    release_ahead(d);
    while (amqpp_connected(d->pub) && amqpp_unconfirmed(d->pub) > 0) {
        if (amqpp_poll(d->pub, 100) != RMQS_OK)
            break;
    }
    amqpp_disconnect(d->pub); /* reports anything left as lost */
    atomic_store(&d->connected, false);
    pthread_mutex_lock(&d->w.mu);
    d->publisher_done = true;
    pthread_cond_broadcast(&d->w.cv);
    pthread_cond_broadcast(&d->rec_cv);
    pthread_mutex_unlock(&d->w.mu);
    return NULL;
}
