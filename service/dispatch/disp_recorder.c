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
#include <string.h>

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

/* The earliest due time of the jobs out[0..n) make pending again (a
 * retry, a release, a hold), INT64_MAX if none. */
static int64_t pending_again(const dueq_item *const *items,
                             const store_outcome *out, size_t n)
{
    int64_t again = INT64_MAX;

    for (size_t i = 0; i < n; i++) {
        int64_t due = INT64_MAX;
        if (out[i].kind == STORE_OUT_RELEASE)
            due = items[i]->job.due_at;
        else if ((out[i].kind == STORE_OUT_RETRY &&
                  items[i]->job.attempts < items[i]->job.max_attempts) ||
                 out[i].kind == STORE_OUT_HOLD)
            due = out[i].retry_at;
        if (due < again)
            again = due;
    }
    return again;
}

typedef struct by_slot {
    int64_t at;
    size_t i;
} by_slot;

static int cmp_slot(const void *a, const void *b)
{
    const by_slot *x = a, *y = b;

    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * The order outcomes are written in: the others first, as they came, then
 * the holds by slot (each chunk of SETTLE_BATCH commits on its own). A
 * held job can be claimed again only once its hold is committed, and past
 * its slot + flow.c's grace it takes a new slot at the end of the queue:
 * a burst held at once (thousands, one transaction) made its first slots
 * claimable only when the last was written, on a loaded machine after
 * their grace, so they went last (a limit's order broken, its rate
 * dipping). Returns how many go in the first transaction with the
 * claims: the others, or all n when there are fewer than two holds or no
 * memory to sort them (list order then, one transaction, as before).
 */
static size_t order_for_record(dueq_item **items, store_outcome *out, size_t n)
{
    size_t others = 0, nh;
    by_slot *h;
    dueq_item **hi;
    store_outcome *ho;

    for (size_t i = 0; i < n; i++)
        if (out[i].kind != STORE_OUT_HOLD)
            others++;
    nh = n - others;
    if (nh < 2)
        return n;
    h = malloc(nh * sizeof(*h));
    hi = malloc(nh * sizeof(*hi));
    ho = malloc(nh * sizeof(*ho));
    if (h == NULL || hi == NULL || ho == NULL) {
        free(h);
        free(hi);
        free(ho);
        return n;
    }
    for (size_t i = 0, k = 0; i < n; i++)
        if (out[i].kind == STORE_OUT_HOLD)
            h[k++] = (by_slot){.at = out[i].retry_at, .i = i};
    qsort(h, nh, sizeof(*h), cmp_slot);
    for (size_t k = 0; k < nh; k++) {
        hi[k] = items[h[k].i];
        ho[k] = out[h[k].i];
    }
    for (size_t i = 0, k = 0; i < n; i++) /* the others, in order, first */
        if (out[i].kind != STORE_OUT_HOLD) {
            items[k] = items[i];
            out[k++] = out[i];
        }
    memcpy(items + others, hi, nh * sizeof(*hi));
    memcpy(out + others, ho, nh * sizeof(*ho));
    free(h);
    free(hi);
    free(ho);
    return others;
}

/* Write out[0..n) and the claims (cl, nc of them; NULL, 0 for none) in
 * one transaction, retried until the store takes them or the dispatcher
 * stops. False if it stopped first (logged). */
static bool record_chunk(disp_t *d, const char **cl, size_t nc,
                         const store_outcome *out, size_t n, int64_t now)
{
    for (int64_t wait = 100;; wait = wait < 5000 ? wait * 2 : 5000) {
        bool stop;
        rmqs_rc rc = store_record(d->st, cl, nc, out, n, now);
        if (rc == RMQS_OK)
            return true;
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
            return false;
        }
    }
}

/* Write the claims (ids, nc of them) and every outcome in `list`: the
 * claims with the outcomes that are not holds and the first chunk of
 * holds, then the other holds chunk by chunk in slot order
 * (order_for_record), each retried until the store takes it or the
 * dispatcher stops (jobs left pending or publishing are published again
 * at the next start; held ones, claimed still, once their lease runs
 * out). After each commit the feeder plans for the jobs it made pending
 * again (a retry, a release, a hold). Frees the claims and the list. */
static void record_list(disp_t *d, char (*claims)[JOB_ID_LEN + 1], size_t nc,
                        dueq_item *list, size_t n)
{
    dueq_item **items = NULL;
    store_outcome *out = NULL;
    const char **cl = NULL;
    int64_t now = disp_now(d);
    size_t i = 0, first;

    if (n == 0 && nc == 0)
        return;
    /* Out of memory: retried like a store failure, never dropped while the
     * service runs (a claim dropped here would leave its job held, or
     * pending in the store and published again in this run). */
    for (;;) {
        out = n ? calloc(n, sizeof(*out)) : NULL;
        items = n ? calloc(n, sizeof(*items)) : NULL;
        cl = nc ? calloc(nc, sizeof(*cl)) : NULL;
        if ((n == 0 || (out != NULL && items != NULL)) &&
            (nc == 0 || cl != NULL))
            break;
        free(out);
        free(items);
        free(cl);
        out = NULL;
        items = NULL;
        cl = NULL;
        log_error(MOD,
                  "cannot record claims and publish results; "
                  "retrying",
                  "claims=%zu n=%zu error=\"out of memory\"", nc, n);
        if (worker_sleep(&d->w, 100))
            break;
    }
    if ((n && (out == NULL || items == NULL)) || (nc && cl == NULL)) {
        log_error(MOD, "stopping with unrecorded results", /* stopping */
                  "claims=%zu n=%zu note=\"jobs are published again at the "
                  "next start\"",
                  nc, n);
        free(out);
        free(items);
        free(cl);
        free(claims);
        dueq_items_free(list);
        return;
    }
    for (size_t k = 0; k < nc; k++)
        cl[k] = claims[k];
    for (dueq_item *it = list; it && i < n; it = it->next) {
        items[i] = it;
        out[i++] = it->out;
    }
    first = order_for_record(items, out, n);
    first += n - first < SETTLE_BATCH ? n - first : SETTLE_BATCH;
    for (size_t off = 0, len = first;;) {
        int64_t again;
        if (!record_chunk(d, off == 0 ? cl : NULL, off == 0 ? nc : 0, out + off,
                          len, now))
            break;
        again = pending_again((const dueq_item *const *)items + off, out + off,
                              len);
        if (again != INT64_MAX)
            disp_feeder_plan(d, again); /* pending again: plan for it */
        off += len;
        if (off >= n)
            break;
        len = n - off < SETTLE_BATCH ? n - off : SETTLE_BATCH;
    }
    free(out);
    free(items);
    free(cl);
    free(claims);
    dueq_items_free(list);
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
        if (nc > 0 || n > 0)
            record_list(d, claims, nc, list, n);
    }
    return NULL;
}
