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
 */
#include "dispatcher.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "due_queue.h"
#include "log.h"
#include "metrics.h"
#include "timeutil.h"
#include "worker.h"

#define IDLE_CAP_MS 1000            /* longest sleep without looking again */
#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
#define SETTLE_BATCH 256            /* outcomes that are recorded at once */
#define SETTLE_DELAY_MS 10          /* ... or once the oldest waited this */
#define CLAIM_RETRY_MS 50           /* after a failed read: soon, no spin */
#define LEASE_MARGIN_MS 250         /* a claim this close to its lease's end
                                       is released, not published */

struct disp {
    store_t *st;            /* borrowed */
    amqpp_t *pub;           /* owned; used only by the publisher thread */
    disp_options opt;

    /* The feeder's worker: its mu (priority inheritance: the publisher
     * runs at real-time priority) guards everything below and its stop
     * flag stops all three threads; its cv wakes the feeder. */
    worker_t w;
    worker_thread publisher, recorder;
    int wake_fd;            /* eventfd: wakes the publisher thread */

    pthread_cond_t rec_cv;  /* CLOCK_MONOTONIC; wakes the recorder */
    bool publisher_done;    /* the publisher thread has handed back all */
    bool feeder_done;       /* the feeder thread claims no more */
    char (*claims)[JOB_ID_LEN + 1]; /* claimed ahead, claim not yet written */
    size_t claims_n, claims_cap;
    bool kicked;            /* a job wants claiming before next_claim_at */
    int64_t next_claim_at;  /* wall ms the feeder plans to claim at */
    int64_t notified_due;   /* earliest due time notified since the claim */
    bool can_claim;         /* the publisher is connected and unblocked */
    due_queue_t *q;         /* claimed, not yet published (`ahead`, by
                               due time), and answered, waiting to be
                               recorded (`done`); a dueq_item is owned by
                               the dispatcher from claim to record */

    atomic_bool connected;
};

int64_t disp_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms)
{
    int64_t d = base_ms;

    if (attempt < 1)
        attempt = 1;
    for (int i = 1; i < attempt && d < cap_ms; i++)
        d *= 2;
    return d < cap_ms ? d : cap_ms;
}

/* Now on the clock due times are compared with (file comment). */
static int64_t disp_now(const disp_t *d)
{
    return tu_now_ms() + store_clock_offset_ms(d->st);
}

/* Whether the claim on j may have passed to another instance by the time
 * a publish at now reaches the broker (its lease, as renewed, ends within
 * LEASE_MARGIN_MS). Claims without a lease (SQLite) never lapse. */
static bool lease_lapsing(const disp_t *d, const job_t *j, int64_t now)
{
    int64_t until = store_lease_renewed_until(d->st);

    if (j->lease_until == 0)
        return false;
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

static void wake_publisher(disp_t *d)
{
    uint64_t one = 1;
    ssize_t r = write(d->wake_fd, &one, sizeof one);

    (void)r; /* EAGAIN: the counter is already non-zero, it wakes anyway */
}

static void disp_on_report(void *cls, void *ctx, const amqpp_result *r);

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
    if (d->q == NULL || d->wake_fd < 0 ||
        amqpp_set_window(pub, window, d->opt.confirm_timeout_ms,
                         disp_on_report, d) != RMQS_OK) {
        d->pub = NULL; /* still the caller's on failure */
        disp_free(d);
        return NULL;
    }
    store_set_wake(st, on_store_wake, d);
    return d;
}

void disp_notify(disp_t *d, int64_t due_at_ms)
{
    pthread_mutex_lock(&d->w.mu);
    if (due_at_ms < d->notified_due)
        d->notified_due = due_at_ms;
    if (due_at_ms - d->opt.lookahead_ms < d->next_claim_at && !d->kicked) {
        d->kicked = true;
        pthread_cond_signal(&d->w.cv);
    }
    pthread_mutex_unlock(&d->w.mu);
}

bool disp_broker_connected(disp_t *d)
{
    return atomic_load(&d->connected);
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

/* Whether the queued outcomes should be recorded now. d->w.mu held. */
static bool done_ready_locked(const disp_t *d, int64_t now)
{
    size_t n = dueq_done_count(d->q);

    return n > 0 && (d->w.stop || !d->can_claim || n >= SETTLE_BATCH ||
                     now - dueq_done_since(d->q) >= SETTLE_DELAY_MS);
}

/* amqpp's report: what the broker said about one job (publisher thread). */
static void disp_on_report(void *cls, void *ctx, const amqpp_result *r)
{
    disp_t *d = cls;
    dueq_item *it = ctx;
    job_t *j = &it->job;
    int64_t now = disp_now(d);

    it->out = (store_outcome){.id = j->id};
    switch (r->kind) {
    case AMQPP_ACKED:
        it->out.kind = STORE_OUT_SENT;
        metrics_publish_attempts(1);
        metrics_job_sent(it->sent_ms - j->due_at);
        log_debug("dispatcher", "sent",
                  "job_id=%s exchange=\"%s\" routing_key=\"%s\" late_ms=%lld",
                  j->id, j->exchange, j->routing_key,
                  (long long)(it->sent_ms - j->due_at));
        break;
    case AMQPP_UNSENT:
        it->out.kind = STORE_OUT_RELEASE;
        break;
    case AMQPP_REFUSED:
        /* not an attempt at the broker, and never will be: failed now */
        metrics_job_failed();
        snprintf(it->reason, sizeof(it->reason), "%s", r->reason);
        it->out.kind = STORE_OUT_FAIL;
        it->out.error = it->reason;
        log_warn("dispatcher", "job failed",
                 "job_id=%s exchange=\"%s\" routing_key=\"%s\" "
                 "attempt=%d error=\"%s\"",
                 j->id, j->exchange, j->routing_key, j->attempts, r->reason);
        break;
    default:
        metrics_publish_attempts(1);
        metrics_publish_failure(r->kind == AMQPP_RETURNED ? MF_RETURNED
                                : r->kind == AMQPP_NACKED ? MF_NACKED
                                : r->kind == AMQPP_CLOSED ? MF_CHANNEL_CLOSED
                                                          : MF_CONNECTION_LOST);
        if (j->attempts >= j->max_attempts)
            metrics_job_failed();
        snprintf(it->reason, sizeof(it->reason), "%s", r->reason);
        it->out.kind = STORE_OUT_RETRY;
        it->out.error = it->reason;
        it->out.retry_at = now + disp_backoff_ms(j->attempts,
                                                 d->opt.backoff_base_ms,
                                                 d->opt.backoff_cap_ms);
        if (j->attempts >= j->max_attempts)
            log_warn("dispatcher", "job failed",
                     "job_id=%s exchange=\"%s\" routing_key=\"%s\" "
                     "attempt=%d error=\"%s\"",
                     j->id, j->exchange, j->routing_key, j->attempts,
                     r->reason);
        else
            log_warn("dispatcher", "publish attempt failed",
                     "job_id=%s exchange=\"%s\" routing_key=\"%s\" "
                     "attempt=%d max_attempts=%d error=\"%s\"",
                     j->id, j->exchange, j->routing_key, j->attempts,
                     j->max_attempts, r->reason);
        break;
    }
    done_push(d, it);
}

/* ------------------------------------------------------------------------ */
/* The recorder thread: writes claims and outcomes                          */

/* Write the claims (ids, nc of them) and every outcome in `list` (one
 * transaction), retried until the store takes them or the dispatcher stops
 * (jobs left pending or publishing are published again at the next
 * start). Frees the claims and the list. Returns the earliest due time of
 * the jobs it made pending again (a retry or a release), INT64_MAX if none. */
static int64_t record_list(disp_t *d, char (*claims)[JOB_ID_LEN + 1],
                           size_t nc, dueq_item *list, size_t n)
{
    store_outcome *out = NULL;
    const char **cl = NULL;
    int64_t now = disp_now(d), again = INT64_MAX;
    size_t i = 0;
    rmqs_rc rc;

    if (n == 0 && nc == 0)
        return INT64_MAX;
    /* Out of memory: retried like a store failure, never dropped while the
     * service runs (a claim dropped here would leave its job held, or
     * pending in the store and published again in this run). */
    for (;;) {
        out = n ? calloc(n, sizeof(*out)) : NULL;
        cl = nc ? calloc(nc, sizeof(*cl)) : NULL;
        if ((n == 0 || out != NULL) && (nc == 0 || cl != NULL))
            break;
        free(out);
        free(cl);
        out = NULL;
        cl = NULL;
        log_error("dispatcher", "cannot record claims and publish results; "
                  "retrying", "claims=%zu n=%zu error=\"out of memory\"", nc, n);
        if (worker_sleep(&d->w, 100))
            break;
    }
    if ((n && out == NULL) || (nc && cl == NULL)) { /* stopping */
        log_error("dispatcher", "stopping with unrecorded results",
                  "claims=%zu n=%zu note=\"jobs are published again at the "
                  "next start\"", nc, n);
        free(out);
        free(cl);
        free(claims);
        dueq_items_free(list);
        return INT64_MAX;
    }
    for (size_t k = 0; k < nc; k++)
        cl[k] = claims[k];
    for (dueq_item *it = list; it && i < n; it = it->next) {
        int64_t due = INT64_MAX;
        out[i++] = it->out;
        if (it->out.kind == STORE_OUT_RELEASE)
            due = it->job.due_at;
        else if (it->out.kind == STORE_OUT_RETRY &&
                 it->job.attempts < it->job.max_attempts)
            due = it->out.retry_at;
        if (due < again)
            again = due;
    }
    for (int64_t wait = 100;; wait = wait < 5000 ? wait * 2 : 5000) {
        bool stop;
        rc = store_record(d->st, cl, nc, out, n, now);
        if (rc == RMQS_OK)
            break;
        log_error("dispatcher", "cannot record claims and publish results; "
                  "retrying", "claims=%zu n=%zu error=%s", nc, n,
                  rmqs_rc_name(rc));
        pthread_mutex_lock(&d->w.mu);
        if (!d->w.stop)
            (void)worker_cond_wait_ms(&d->rec_cv, &d->w.mu, wait);
        stop = d->w.stop;
        pthread_mutex_unlock(&d->w.mu);
        if (stop) {
            log_error("dispatcher", "stopping with unrecorded results",
                      "n=%zu note=\"jobs stay publishing and are published "
                      "again at the next start\"", n);
            break;
        }
    }
    free(out);
    free(cl);
    free(claims);
    dueq_items_free(list);
    return again;
}

static void *disp_recorder_main(void *arg)
{
    disp_t *d = arg;

    for (;;) {
        char (*claims)[JOB_ID_LEN + 1] = NULL;
        dueq_item *list = NULL;
        size_t nc = 0, n = 0;
        int64_t now = tu_now_ms();

        pthread_mutex_lock(&d->w.mu);
        /* Claims at once (they are what makes a held job durable); the
         * outcomes in bunches. Both lists are taken together: every
         * outcome's claim is in this call or was in an earlier one. */
        if (d->claims_n > 0 || done_ready_locked(d, now)) {
            claims = d->claims;
            nc = d->claims_n;
            d->claims = NULL;
            d->claims_n = d->claims_cap = 0;
            list = dueq_done_take(d->q, &n);
        } else if (d->w.stop && d->publisher_done && d->feeder_done &&
                   dueq_done_count(d->q) == 0) {
            pthread_mutex_unlock(&d->w.mu);
            break;
        } else {
            int64_t wait = IDLE_CAP_MS;
            int64_t settle = dueq_done_since(d->q) + SETTLE_DELAY_MS - now;
            if (dueq_done_count(d->q) > 0 && settle < wait)
                wait = settle;
            if (wait > 0)
                (void)worker_cond_wait_ms(&d->rec_cv, &d->w.mu, wait);
        }
        pthread_mutex_unlock(&d->w.mu);
        if (nc > 0 || n > 0) {
            int64_t again = record_list(d, claims, nc, list, n);
            if (again != INT64_MAX)
                disp_notify(d, again); /* pending again: plan for it */
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The feeder thread: claims ahead                                          */

/* Room for k more claims in d->claims. d->w.mu held (the recorder swaps the
 * array out under it). */
static bool claims_reserve_locked(disp_t *d, size_t k)
{
    size_t ncap = d->claims_cap ? d->claims_cap : 64;
    void *nc;

    if (d->claims_n + k <= d->claims_cap)
        return true;
    while (ncap < d->claims_n + k)
        ncap *= 2;
    nc = realloc(d->claims, ncap * sizeof(*d->claims));
    if (nc == NULL)
        return false;
    d->claims = nc;
    d->claims_cap = ncap;
    return true;
}

/*
 * Claim what falls due before now + lookahead, as far as `ahead` has room.
 * Returns how many were claimed, or -1 on a store error (logged).
 */
static long feed(disp_t *d, size_t room, bool *more)
{
    job_t *jobs = NULL;
    dueq_item **items = NULL;
    size_t n = 0, k = 0;
    int64_t now = disp_now(d);
    rmqs_rc rc;

    *more = false;
    rc = store_claim_ahead(d->st, now + d->opt.lookahead_ms, now, room, &jobs,
                           &n);
    if (rc != RMQS_OK) {
        log_error("dispatcher", "cannot claim due jobs", "error=%s",
                  rmqs_rc_name(rc));
        return -1;
    }
    if (n == 0)
        return 0;
    *more = n == room;
    items = calloc(n, sizeof(*items));
    for (k = 0; items != NULL && k < n; k++) {
        items[k] = dueq_item_new(&jobs[k]); /* moves the job's allocations */
        if (items[k] == NULL)
            break;
    }
    /* One critical section from the room for the claims to the merge: the
     * recorder takes the claims array whenever it holds d->w.mu. */
    pthread_mutex_lock(&d->w.mu);
    if (k > 0 && !claims_reserve_locked(d, k)) {
        for (size_t i = 0; i < k; i++) { /* the jobs go back below */
            jobs[i] = items[i]->job;
            free(items[i]);
        }
        k = 0;
    }
    /* The claims first: the recorder writes each before its outcome. */
    for (size_t i = 0; i < k; i++)
        memcpy(d->claims[d->claims_n++], items[i]->job.id, JOB_ID_LEN + 1);
    /* A later claim can hold jobs due before the last ones of an earlier
     * claim (a job scheduled at short notice): dueq_merge keeps due order.
     * It fits (the claim was bounded by the room); at stop the publisher
     * has handed back `ahead` already. */
    if (k > 0 && (d->w.stop || dueq_merge(d->q, items, k) != RMQS_OK)) {
        for (size_t i = 0; i < k; i++)
            (void)dueq_release(d->q, items[i], now);
    }
    if (k > 0)
        pthread_cond_signal(&d->rec_cv);
    pthread_mutex_unlock(&d->w.mu);
    if (k < n) { /* out of memory: give the rest back untouched */
        store_outcome o;
        for (size_t i = k; i < n; i++) {
            o = (store_outcome){.id = jobs[i].id, .kind = STORE_OUT_RELEASE};
            store_settle(d->st, &o, 1, now);
            job_clear(&jobs[i]);
        }
        log_error("dispatcher", "out of memory; jobs released", "n=%zu",
                  n - k);
        n = k;
    }
    if (n > 0)
        wake_publisher(d);
    free(items);
    free(jobs);
    return (long)n;
}

static void *disp_feeder_main(void *arg)
{
    disp_t *d = arg;
    int64_t claim_retry_at = INT64_MIN; /* after a store error */

    for (;;) {
        size_t room;
        bool claim, more = false, any = false;
        int64_t now = disp_now(d), next = INT64_MAX, wait;

        pthread_mutex_lock(&d->w.mu);
        if (d->w.stop) {
            d->feeder_done = true;
            pthread_cond_signal(&d->rec_cv);
            pthread_mutex_unlock(&d->w.mu);
            break;
        }
        room = dueq_room(d->q);
        if (room > (size_t)d->opt.batch_size)
            room = (size_t)d->opt.batch_size; /* one claim's worth */
        claim = d->can_claim && room > 0 && now >= claim_retry_at &&
                (d->kicked || now >= d->next_claim_at);
        if (claim) {
            d->kicked = false;
            d->notified_due = INT64_MAX; /* this claim covers those */
        }
        pthread_mutex_unlock(&d->w.mu);

        if (claim) {
            long got = feed(d, room, &more);
            if (got < 0)
                claim_retry_at = disp_now(d) + CLAIM_RETRY_MS; /* no spinning */
            else if (!more && store_next_due(d->st, &any, &next) != RMQS_OK)
                any = false;
            pthread_mutex_lock(&d->w.mu);
            if (more) {
                d->next_claim_at = INT64_MIN; /* as soon as there is room */
            } else {
                /* Claim again lookahead before the next due job, but not
                 * sooner than a quarter of the lookahead from now: each
                 * claim then takes a bunch, still well ahead of time. */
                int64_t at = any ? next - d->opt.lookahead_ms : INT64_MAX;
                int64_t soonest = disp_now(d) + d->opt.lookahead_ms / 4;
                if (at < soonest)
                    at = soonest;
                if (d->notified_due != INT64_MAX &&
                    d->notified_due - d->opt.lookahead_ms < at)
                    at = d->notified_due - d->opt.lookahead_ms;
                d->next_claim_at = at;
            }
            pthread_mutex_unlock(&d->w.mu);
            continue; /* look at the plan again */
        }

        pthread_mutex_lock(&d->w.mu);
        now = disp_now(d);
        claim = !d->w.stop && d->can_claim && dueq_room(d->q) > 0 &&
                now >= claim_retry_at;
        if (!d->w.stop && !(claim && (d->kicked || now >= d->next_claim_at))) {
            wait = IDLE_CAP_MS;
            if (claim && d->next_claim_at < now + wait)
                wait = d->next_claim_at - now; /* > 0: checked above */
            else if (!claim && claim_retry_at > now &&
                     claim_retry_at < now + wait)
                wait = claim_retry_at - now;
            if (wait > 0)
                (void)worker_cond_wait_ms(&d->w.cv, &d->w.mu, wait);
        }
        pthread_mutex_unlock(&d->w.mu);
    }
    return NULL;
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
static void publish_loop(disp_t *d, int64_t idle_cap)
{
    bool was_blocked = true; /* so the first pass allows claiming */

    while (!worker_stopping(&d->w) && amqpp_connected(d->pub)) {
        int64_t now = disp_now(d), next_due = INT64_MAX;
        bool blocked = amqpp_blocked(d->pub);

        if (blocked != was_blocked) /* tell the feeder only of changes */
            set_can_claim(d, !blocked);
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
                log_warn("dispatcher", "run expired; not published",
                         "job_id=%s schedule=\"%s\" fire_at=%lld "
                         "expires_at=%lld claimed_at=%lld", it->job.id,
                         it->job.schedule ? it->job.schedule : "",
                         (long long)it->job.fire_at,
                         (long long)it->job.expires_at,
                         (long long)it->job.updated_at);
                it->out = (store_outcome){
                    .id = it->job.id, .kind = STORE_OUT_EXPIRE,
                    .error = "missed its fire time by more than "
                             "misfire_grace_ms"};
                metrics_jobs_cancelled(1);
                done_push(d, it);
                continue;
            }
            if (lease_lapsing(d, &it->job, now)) {
                log_warn("dispatcher", "claim lease lapsed; not published",
                         "job_id=%s lease_until=%lld now=%lld note=\"another "
                         "instance may have taken it over\"", it->job.id,
                         (long long)it->job.lease_until, (long long)now);
                metrics_lease_lapsed();
                pthread_mutex_lock(&d->w.mu);
                (void)dueq_release(d->q, it, tu_now_ms());
                pthread_cond_signal(&d->rec_cv);
                pthread_mutex_unlock(&d->w.mu);
                continue;
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

static void *disp_publisher_main(void *arg)
{
    disp_t *d = arg;
    int64_t reconnect_ms = RECONNECT_MIN_MS;
    int64_t idle_cap = IDLE_CAP_MS;
    bool was_down_logged = false;
    bool ever_connected = false;

    if (d->opt.heartbeat_s > 0 && d->opt.heartbeat_s * 500 < idle_cap)
        idle_cap = d->opt.heartbeat_s * 500;
    /* On a busy CPU a woken thread can wait tens of ms for a core: the one
     * thread whose wake-up is the due time goes first. It sleeps between
     * publishes, so it takes little; without CAP_SYS_NICE it stays normal. */
    if (d->opt.rt_priority > 0) {
        struct sched_param sp = {.sched_priority = d->opt.rt_priority};
        int e = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
        if (e == 0)
            log_info("dispatcher", "publisher thread at real-time priority",
                     "policy=SCHED_FIFO priority=%d", d->opt.rt_priority);
        else
            log_info("dispatcher", "publisher thread at normal priority",
                     "reason=\"%s\" note=\"SCHED_FIFO needs CAP_SYS_NICE\"",
                     strerror(e));
    }

    while (!worker_stopping(&d->w)) {
        rmqs_error err = {0};

        if (amqpp_connect(d->pub, &err) != RMQS_OK) {
            if (!was_down_logged)
                log_warn("dispatcher", "broker unreachable; retrying",
                         "url=%s error=\"%s\"", amqpp_safe_url(d->pub),
                         err.message);
            was_down_logged = true;
            /* disp_stop() writes the eventfd: no waiting out the delay. */
            (void)wait_events(d, INT64_MAX, tu_jitter_ms(reconnect_ms));
            reconnect_ms = reconnect_ms * 2 < RECONNECT_MAX_MS
                               ? reconnect_ms * 2 : RECONNECT_MAX_MS;
            continue;
        }
        if (was_down_logged)
            log_info("dispatcher", "broker connection restored", "url=%s",
                     amqpp_safe_url(d->pub));
        was_down_logged = false;
        if (ever_connected)
            metrics_broker_reconnect();
        ever_connected = true;
        reconnect_ms = RECONNECT_MIN_MS;
        atomic_store(&d->connected, true);
        if (d->opt.on_connected != NULL)
            d->opt.on_connected(d->opt.connected_cls);

        publish_loop(d, idle_cap);

        if (!amqpp_connected(d->pub)) {
            atomic_store(&d->connected, false);
            set_can_claim(d, false);
            release_ahead(d);
            log_warn("dispatcher", "broker connection lost", "url=%s",
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
    free(d->claims);
    if (d->wake_fd >= 0)
        close(d->wake_fd);
    pthread_cond_destroy(&d->rec_cv);
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
