/*
 * dispatcher.c - the timing loop between the store and the broker.
 *
 * Why a thread of its own: rabbitmq-c connections belong to one thread, and
 * precise timing wants one place that knows the next due time. The loop:
 *
 *   connect (backoff while the broker is away)
 *   claim due jobs (pending -> publishing, attempts + 1, one transaction)
 *   publish them back to back, wait for every confirm / return / nack
 *   settle them (sent, retry later with backoff, failed, or released)
 *   nothing due: sleep on a CLOCK_MONOTONIC condition variable until the
 *   earliest due_at, or until disp_notify() says something sooner arrived
 *
 * Idle sleeps are capped (IDLE_CAP_MS, and half the heartbeat) so heartbeats
 * are answered and a step of the wall clock is noticed within a second.
 * Nothing due is ever lost while the broker is away: jobs stay pending in the
 * store and are claimed oldest first once the connection is back.
 */
#include "dispatcher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "timeutil.h"

#define IDLE_CAP_MS 1000            /* longest sleep without looking again */
#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
#define STALL_MS 200                /* pause when a round made no progress */

struct disp {
    store_t *st;            /* borrowed */
    amqpp_t *pub;           /* owned; used only by the thread */
    disp_options opt;

    pthread_t thread;
    bool started;

    pthread_mutex_t mu;     /* guards stop, kicked, sleep_until */
    pthread_cond_t cv;      /* CLOCK_MONOTONIC */
    bool stop;
    bool kicked;            /* a notify arrived since the thread last looked */
    int64_t sleep_until;    /* wall ms the thread sleeps towards; INT64_MAX
                               while it is busy or has nothing to wait for */

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

disp_t *disp_new(store_t *st, amqpp_t *pub, const disp_options *opt)
{
    disp_t *d = calloc(1, sizeof(*d));
    pthread_condattr_t ca;

    if (d == NULL)
        return NULL;
    d->st = st;
    d->pub = pub;
    d->opt = *opt;
    d->sleep_until = INT64_MAX;
    atomic_init(&d->connected, false);
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    return d;
}

void disp_notify(disp_t *d, int64_t due_at_ms)
{
    pthread_mutex_lock(&d->mu);
    if (due_at_ms < d->sleep_until || d->sleep_until == INT64_MAX) {
        d->kicked = true;
        pthread_cond_signal(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
}

bool disp_broker_connected(disp_t *d)
{
    return atomic_load(&d->connected);
}

/*
 * Sleep until the wall-clock time wall_ms (INT64_MAX: no target), at most
 * cap_ms, unless kicked or stopped first. Returns true if the thread should
 * stop.
 */
static bool disp_sleep(disp_t *d, int64_t wall_ms, int64_t cap_ms,
                       bool wake_on_notify)
{
    struct timespec now_rt, deadline;
    int64_t wait_ns;
    bool stop;

    clock_gettime(CLOCK_REALTIME, &now_rt);
    if (wall_ms == INT64_MAX) {
        wait_ns = cap_ms * 1000000;
    } else {
        int64_t now_ns = (int64_t)now_rt.tv_sec * 1000000000 + now_rt.tv_nsec;
        wait_ns = wall_ms * 1000000 - now_ns;
        if (wait_ns > cap_ms * 1000000)
            wait_ns = cap_ms * 1000000;
    }
    pthread_mutex_lock(&d->mu);
    if (wake_on_notify && d->kicked) {
        d->kicked = false;
        stop = d->stop;
        pthread_mutex_unlock(&d->mu);
        return stop;
    }
    if (wait_ns > 0 && !d->stop) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += wait_ns / 1000000000;
        deadline.tv_nsec += wait_ns % 1000000000;
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
        d->sleep_until = wake_on_notify ? wall_ms : INT64_MIN;
        while (!d->stop && !(wake_on_notify && d->kicked)) {
            if (pthread_cond_timedwait(&d->cv, &d->mu, &deadline) != 0)
                break; /* ETIMEDOUT */
        }
        d->sleep_until = INT64_MAX;
    }
    d->kicked = false;
    stop = d->stop;
    pthread_mutex_unlock(&d->mu);
    return stop;
}

static bool disp_stopping(disp_t *d)
{
    bool s;
    pthread_mutex_lock(&d->mu);
    s = d->stop;
    pthread_mutex_unlock(&d->mu);
    return s;
}

static int64_t jitter(int64_t ms)
{
    unsigned int r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = (unsigned int)tu_mono_ms();
    return ms / 2 + (int64_t)(r % (unsigned int)(ms / 2 + 1));
}

/* Record the outcomes of a published batch; retried until the store takes
 * them or the dispatcher stops (jobs left publishing are recovered at the
 * next start). Returns how many jobs progressed (not released). */
static size_t disp_settle(disp_t *d, job_t *jobs, const amqpp_result *res,
                          size_t n)
{
    store_outcome *out = calloc(n, sizeof(*out));
    int64_t now = tu_now_ms();
    size_t progressed = 0;
    rmqs_rc rc;

    if (out == NULL) {
        log_error("dispatcher", "cannot settle batch", "n=%zu error=\"out of memory\"", n);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        job_t *j = &jobs[i];
        out[i].id = j->id;
        switch (res[i].kind) {
        case AMQPP_ACKED:
            out[i].kind = STORE_OUT_SENT;
            progressed++;
            metrics_publish_attempts(1);
            metrics_job_sent(now - j->deliver_at);
            log_debug("dispatcher", "sent",
                      "job_id=%s exchange=\"%s\" routing_key=\"%s\" late_ms=%lld",
                      j->id, j->exchange, j->routing_key,
                      (long long)(now - j->deliver_at));
            break;
        case AMQPP_UNSENT:
            out[i].kind = STORE_OUT_RELEASE;
            break;
        default:
            metrics_publish_attempts(1);
            metrics_publish_failure(
                res[i].kind == AMQPP_RETURNED ? MF_RETURNED
                : res[i].kind == AMQPP_NACKED ? MF_NACKED
                : res[i].kind == AMQPP_CLOSED ? MF_CHANNEL_CLOSED
                                              : MF_CONNECTION_LOST);
            if (j->attempts >= j->max_attempts)
                metrics_job_failed();
            out[i].kind = STORE_OUT_RETRY;
            out[i].error = res[i].reason;
            out[i].retry_at = now + disp_backoff_ms(j->attempts,
                                                    d->opt.backoff_base_ms,
                                                    d->opt.backoff_cap_ms);
            progressed++;
            if (j->attempts >= j->max_attempts)
                log_warn("dispatcher", "job failed",
                         "job_id=%s exchange=\"%s\" routing_key=\"%s\" "
                         "attempt=%d error=\"%s\"",
                         j->id, j->exchange, j->routing_key, j->attempts,
                         res[i].reason);
            else
                log_warn("dispatcher", "publish attempt failed",
                         "job_id=%s exchange=\"%s\" routing_key=\"%s\" "
                         "attempt=%d max_attempts=%d error=\"%s\"",
                         j->id, j->exchange, j->routing_key, j->attempts,
                         j->max_attempts, res[i].reason);
            break;
        }
    }
    for (int64_t wait = 100;; wait = wait < 5000 ? wait * 2 : 5000) {
        rc = store_settle(d->st, out, n, now);
        if (rc == RMQS_OK)
            break;
        log_error("dispatcher", "cannot record publish results; retrying",
                  "n=%zu error=%s", n, rmqs_rc_name(rc));
        if (disp_sleep(d, INT64_MAX, wait, false)) {
            log_error("dispatcher", "stopping with unrecorded results",
                      "n=%zu note=\"jobs stay publishing and are published "
                      "again at the next start\"", n);
            break;
        }
    }
    free(out);
    return progressed;
}

/* One round: claim what is due and publish it. Returns how many jobs were
 * claimed (0: nothing due), or -1 on a store error. *progress tells whether
 * anything moved on (all released means the broker refused to take them). */
static long disp_round(disp_t *d, bool *progress)
{
    job_t *jobs = NULL;
    const job_t **ptrs = NULL;
    amqpp_result *res = NULL;
    size_t n = 0;
    long claimed = -1;
    rmqs_rc rc;

    *progress = false;
    rc = store_claim_due(d->st, tu_now_ms(), (size_t)d->opt.batch_size, &jobs,
                         &n);
    if (rc != RMQS_OK) {
        log_error("dispatcher", "cannot claim due jobs", "error=%s",
                  rmqs_rc_name(rc));
        goto out;
    }
    claimed = (long)n;
    if (n == 0)
        goto out;
    ptrs = calloc(n, sizeof(*ptrs));
    res = calloc(n, sizeof(*res));
    if (ptrs == NULL || res == NULL) {
        /* Give the claimed jobs back untouched. */
        store_outcome o;
        for (size_t i = 0; i < n; i++) {
            o = (store_outcome){.id = jobs[i].id, .kind = STORE_OUT_RELEASE};
            store_settle(d->st, &o, 1, tu_now_ms());
        }
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &jobs[i];
    rc = amqpp_publish(d->pub, ptrs, n, res, d->opt.confirm_timeout_ms);
    if (rc != RMQS_OK) {
        atomic_store(&d->connected, false);
        log_warn("dispatcher", "broker connection lost while publishing",
                 "n=%zu", n);
    }
    *progress = disp_settle(d, jobs, res, n) > 0;
out:
    for (size_t i = 0; i < n; i++)
        job_clear(&jobs[i]);
    free(jobs);
    free(ptrs);
    free(res);
    return claimed;
}

static void *disp_main(void *arg)
{
    disp_t *d = arg;
    int64_t reconnect_ms = RECONNECT_MIN_MS;
    int64_t idle_cap = IDLE_CAP_MS;
    bool was_down_logged = false;
    bool ever_connected = false;

    if (d->opt.heartbeat_s > 0 && d->opt.heartbeat_s * 500 < idle_cap)
        idle_cap = d->opt.heartbeat_s * 500;

    while (!disp_stopping(d)) {
        bool progress;
        bool any = false;
        int64_t next = INT64_MAX;
        long claimed;

        if (!amqpp_connected(d->pub)) {
            rmqs_error err = {0};
            atomic_store(&d->connected, false);
            if (amqpp_connect(d->pub, &err) != RMQS_OK) {
                if (!was_down_logged)
                    log_warn("dispatcher", "broker unreachable; retrying",
                             "url=%s error=\"%s\"", amqpp_safe_url(d->pub),
                             err.message);
                was_down_logged = true;
                if (disp_sleep(d, INT64_MAX, jitter(reconnect_ms), false))
                    break;
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
        }

        claimed = disp_round(d, &progress);
        if (claimed > 0) {
            if (!progress && disp_sleep(d, INT64_MAX, STALL_MS, false))
                break;
            continue; /* more may be due */
        }
        if (claimed < 0) { /* store trouble: logged; do not spin */
            if (disp_sleep(d, INT64_MAX, IDLE_CAP_MS, false))
                break;
            continue;
        }
        if (store_next_due(d->st, &any, &next) != RMQS_OK || !any)
            next = INT64_MAX;
        if (disp_sleep(d, next, idle_cap, true))
            break;
        if (amqpp_service(d->pub, 0) != RMQS_OK) {
            atomic_store(&d->connected, false);
            log_warn("dispatcher", "broker connection lost", "url=%s",
                     amqpp_safe_url(d->pub));
        }
    }
    amqpp_disconnect(d->pub);
    atomic_store(&d->connected, false);
    return NULL;
}

rmqs_rc disp_start(disp_t *d)
{
    if (pthread_create(&d->thread, NULL, disp_main, d) != 0)
        return RMQS_ESYS;
    d->started = true;
    return RMQS_OK;
}

void disp_stop(disp_t *d)
{
    if (d == NULL || !d->started)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    d->started = false;
}

void disp_free(disp_t *d)
{
    if (d == NULL)
        return;
    disp_stop(d);
    amqpp_free(d->pub);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
