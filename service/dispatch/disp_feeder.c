/*
 * disp_feeder.c - the dispatcher's feeder thread: claims the jobs due
 * within the lookahead from the store's snapshot, ahead of their time,
 * into `ahead` (due order), and queues their claims for the recorder; and
 * disp_feeder_plan() (disp_notify's work), which wakes it when a job is
 * due sooner than it planned to look. Never waits for a write nor the broker (dispatcher.c's file
 * comment says why; dispatcher_int.h what the threads share).
 */
#include "dispatcher_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "due_queue.h"
#include "log.h"
#include "worker.h"

#define MOD "dispatcher"

#define CLAIM_RETRY_MS 50 /* after a failed read: soon, no spin */

/* dispatcher_int.h; disp_notify()'s work, from any thread (the writer,
 * the store's wake-up, the recorder for a job pending again): the
 * feeder's plan moves sooner. */
void disp_feeder_plan(disp_t *d, int64_t due_at_ms)
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
        log_error(MOD, "cannot claim due jobs", "error=%s", rmqs_rc_name(rc));
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
        log_error(MOD, "out of memory; jobs released", "n=%zu", n - k);
        n = k;
    }
    if (n > 0)
        wake_publisher(d);
    free(items);
    free(jobs);
    return (long)n;
}

void *disp_feeder_main(void *arg)
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
