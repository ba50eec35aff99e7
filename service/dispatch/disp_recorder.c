/*
 * disp_recorder.c - the dispatcher's recorder thread: writes what the
 * other two did, one transaction per bunch (store_record): the claims
 * queued by the feeder, then the outcomes handed over by the publisher.
 * The only thread of the three that waits for the store lock, as long as
 * the disk makes it (dispatcher.c's file comment says why; dispatcher_int.h
 * what the threads share).
 */
#include "dispatcher_int.h"

#include <pthread.h>
#include <stdlib.h>

#include "due_queue.h"
#include "log.h"
#include "worker.h"

#define MOD "dispatcher"

/* ------------------------------------------------------------------------ */
/* The recorder thread: writes claims and outcomes                          */

/* Whether the queued outcomes should be recorded now. d->w.mu held. */
static bool done_ready_locked(const disp_t *d, int64_t now)
{
    size_t n = dueq_done_count(d->q);

    return n > 0 && (d->w.stop || !d->can_claim || n >= SETTLE_BATCH ||
                     now - dueq_done_since(d->q) >= SETTLE_DELAY_MS);
}

/* Write the claims (ids, nc of them) and every outcome in `list` (one
 * transaction), retried until the store takes them or the dispatcher stops
 * (jobs left pending or publishing are published again at the next
 * start). Frees the claims and the list. Returns the earliest due time of
 * the jobs it made pending again (a retry or a release), INT64_MAX if none. */
static int64_t record_list(disp_t *d, char (*claims)[JOB_ID_LEN + 1], size_t nc,
                           dueq_item *list, size_t n)
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
        log_error(MOD,
                  "cannot record claims and publish results; "
                  "retrying",
                  "claims=%zu n=%zu error=\"out of memory\"", nc, n);
        if (worker_sleep(&d->w, 100))
            break;
    }
    if ((n && out == NULL) || (nc && cl == NULL)) { /* stopping */
        log_error(MOD, "stopping with unrecorded results",
                  "claims=%zu n=%zu note=\"jobs are published again at the "
                  "next start\"",
                  nc, n);
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
        else if ((it->out.kind == STORE_OUT_RETRY &&
                  it->job.attempts < it->job.max_attempts) ||
                 it->out.kind == STORE_OUT_HOLD)
            due = it->out.retry_at;
        if (due < again)
            again = due;
    }
    for (int64_t wait = 100;; wait = wait < 5000 ? wait * 2 : 5000) {
        bool stop;
        rc = store_record(d->st, cl, nc, out, n, now);
        if (rc == RMQS_OK)
            break;
        log_error(MOD,
                  "cannot record claims and publish results; "
                  "retrying",
                  "claims=%zu n=%zu error=%s", nc, n, rmqs_rc_name(rc));
        pthread_mutex_lock(&d->w.mu);
        if (!d->w.stop)
            (void)worker_cond_wait_ms(&d->rec_cv, &d->w.mu, wait);
        stop = d->w.stop;
        pthread_mutex_unlock(&d->w.mu);
        if (stop) {
            log_error(MOD, "stopping with unrecorded results",
                      "n=%zu note=\"jobs stay publishing and are published "
                      "again at the next start\"",
                      n);
            break;
        }
    }
    free(out);
    free(cl);
    free(claims);
    dueq_items_free(list);
    return again;
}

void *disp_recorder_main(void *arg)
{
    disp_t *d = arg;

    for (;;) {
        char(*claims)[JOB_ID_LEN + 1] = NULL;
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
                disp_feeder_plan(d, again); /* pending again: plan for it */
        }
    }
    return NULL;
}
