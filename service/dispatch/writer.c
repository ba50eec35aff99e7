/*
 * writer.c - group commit for new jobs (see writer.h for why).
 *
 * The queue is a singly linked list of caller-owned writer_req, guarded by
 * one mutex. The thread detaches the whole list at once (bounded by
 * max_rows), commits it, and completes every request. Requests keep their
 * arrival order inside a transaction, so two requests with the same
 * Idempotency-Key resolve to the first one.
 */
#include "writer.h"

#include <stdatomic.h>
#include <string.h>
#include <stdint.h>
#include <stdlib.h>

#include "fair.h"
#include "log.h"
#include "metrics.h"
#include "worker.h"

#define MOD "writer"

struct writer {
    store_t *st;  /* borrowed */
    disp_t *disp; /* borrowed */
    size_t max_rows;
    int64_t min_free_bytes;
    atomic_bool disk_full; /* below the reserve at the last check */

    worker_t wk; /* the thread; wk.mu guards wk.stop,
                            head, tail and admission; wk.cv wakes it */
    writer_req *head, *tail;

    size_t budget;   /* request bytes admitted at once; 0 = any */
    size_t admitted; /* bytes admitted and not yet released */
    writer_waiter *wait_head, *wait_tail; /* not admitted yet, FIFO */
    writer_waiter *granted; /* admitted, to be woken by the thread */
    fair_t *fair;           /* borrowed; NULL: no --fair-key */
};

void writer_set_fair(writer_t *w, fair_t *fair)
{
    w->fair = fair;
}

writer_t *writer_new(store_t *st, disp_t *d, size_t max_rows,
                     int64_t min_free_bytes)
{
    writer_t *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    w->st = st;
    w->disp = d;
    w->max_rows = max_rows > 0 ? max_rows : 1;
    w->min_free_bytes = min_free_bytes;
    atomic_init(&w->disk_full, false);
    if (worker_init(&w->wk, false) != RMQS_OK) {
        free(w);
        return NULL;
    }
    return w;
}

rmqs_rc writer_submit(writer_t *w, writer_req *req)
{
    pthread_mutex_lock(&w->wk.mu);
    if (w->wk.stop) {
        pthread_mutex_unlock(&w->wk.mu);
        return RMQS_ESYS;
    }
    req->next = NULL;
    if (w->tail != NULL)
        w->tail->next = req;
    else
        w->head = req;
    w->tail = req;
    pthread_cond_signal(&w->wk.cv);
    pthread_mutex_unlock(&w->wk.mu);
    return RMQS_OK;
}

/* Detach up to max_rows rows of requests (at least one request). Called
 * with the mutex held. */
static size_t take_batch(writer_t *w, writer_req **batch, size_t cap)
{
    size_t n = 0, rows = 0;

    while (w->head != NULL && n < cap &&
           (n == 0 || rows + w->head->ins.n <= w->max_rows)) {
        writer_req *r = w->head;
        w->head = r->next;
        if (w->head == NULL)
            w->tail = NULL;
        rows += r->ins.n;
        batch[n++] = r;
    }
    return n;
}

/* Whether the filesystem has less free space than the reserve; logs each
 * change of state once. */
static bool below_reserve(writer_t *w)
{
    int64_t free_bytes;
    bool full;

    if (w->min_free_bytes <= 0)
        return false;
    free_bytes = store_free_bytes(w->st);
    full = free_bytes >= 0 && free_bytes < w->min_free_bytes;
    if (full != atomic_load(&w->disk_full)) {
        atomic_store(&w->disk_full, full);
        if (full)
            log_error(MOD,
                      "disk nearly full: refusing new jobs; stored "
                      "jobs are still delivered",
                      "free_bytes=%lld reserve=%lld", (long long)free_bytes,
                      (long long)w->min_free_bytes);
        else
            log_info(MOD, "disk space back: accepting new jobs",
                     "free_bytes=%lld", (long long)free_bytes);
    }
    return full;
}

void writer_set_admission_budget(writer_t *w, size_t queue_bytes)
{
    pthread_mutex_lock(&w->wk.mu);
    w->budget = queue_bytes;
    pthread_mutex_unlock(&w->wk.mu);
}

/* Whether bytes more fit the budget. Called with the mutex held. */
static bool fits_locked(const writer_t *w, size_t bytes)
{
    return w->budget == 0 || w->wk.stop || w->admitted == 0 ||
           w->admitted + bytes <= w->budget;
}

bool writer_admit(writer_t *w, size_t bytes, writer_waiter *waiter)
{
    bool ok;

    pthread_mutex_lock(&w->wk.mu);
    /* FIFO: nobody overtakes a waiter, or big requests could starve. */
    ok = w->wait_head == NULL && fits_locked(w, bytes);
    if (ok) {
        w->admitted += bytes;
    } else if (waiter != NULL) {
        waiter->bytes = bytes;
        waiter->granted = false;
        waiter->next = NULL;
        if (w->wait_tail)
            w->wait_tail->next = waiter;
        else
            w->wait_head = waiter;
        w->wait_tail = waiter;
    }
    pthread_mutex_unlock(&w->wk.mu);
    return ok;
}

/* Admit waiters in order while they fit (all of them when stopping) and
 * move them to w->granted, for the writer thread to wake: writer_release
 * runs in libmicrohttpd's completion callback, where resuming another
 * connection is best not done. Called with the mutex held. */
static void grant_locked(writer_t *w)
{
    while (w->wait_head != NULL && fits_locked(w, w->wait_head->bytes)) {
        writer_waiter *x = w->wait_head;
        w->wait_head = x->next;
        w->admitted += x->bytes;
        x->granted = true;
        x->stopping = w->wk.stop;
        x->next = w->granted;
        w->granted = x;
        pthread_cond_signal(&w->wk.cv);
    }
    if (w->wait_head == NULL)
        w->wait_tail = NULL;
}

static void wake_all(writer_waiter *list)
{
    while (list != NULL) {
        writer_waiter *next = list->next; /* wake may end list's owner */
        list->wake(list->cls);
        list = next;
    }
}

size_t writer_waiting(writer_t *w)
{
    size_t n = 0;

    pthread_mutex_lock(&w->wk.mu);
    for (writer_waiter *x = w->wait_head; x != NULL; x = x->next)
        n++;
    pthread_mutex_unlock(&w->wk.mu);
    return n;
}

void writer_release(writer_t *w, size_t bytes)
{
    pthread_mutex_lock(&w->wk.mu);
    w->admitted -= bytes <= w->admitted ? bytes : w->admitted;
    grant_locked(w);
    pthread_mutex_unlock(&w->wk.mu);
}

bool writer_disk_full(writer_t *w)
{
    return atomic_load(&w->disk_full);
}

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    size_t cap = w->max_rows;
    writer_req **batch = calloc(cap, sizeof(*batch));
    store_insert_req *reqs = calloc(cap, sizeof(*reqs));

    if (batch == NULL || reqs == NULL) {
        log_error(MOD, "out of memory; cannot start", NULL);
        cap = 1; /* fall back to one request at a time on the stack */
    }
    for (;;) {
        store_insert_req one;
        writer_req *single = NULL;
        writer_req **b = batch ? batch : &single;
        store_insert_req *rq = reqs ? reqs : &one;
        int64_t earliest = INT64_MAX;
        size_t n, rows = 0, scheduled = 0;
        writer_waiter *granted;
        rmqs_rc rc;

        pthread_mutex_lock(&w->wk.mu);
        while (w->head == NULL && w->granted == NULL && !w->wk.stop)
            (void)worker_cond_wait_ms(&w->wk.cv, &w->wk.mu, -1);
        granted = w->granted;
        w->granted = NULL;
        if (w->head == NULL && w->wk.stop) {
            pthread_mutex_unlock(&w->wk.mu);
            wake_all(granted);
            break;
        }
        n = w->head != NULL ? take_batch(w, b, batch && reqs ? cap : 1) : 0;
        pthread_mutex_unlock(&w->wk.mu);
        wake_all(granted); /* their requests get parsed meanwhile */
        if (n == 0)
            continue;

        for (size_t i = 0; i < n; i++) {
            rq[i] = b[i]->ins;
            /* The jobs are the requester's, lent until done(): their rank
             * among jobs due at the same ms is set here, where every new
             * job passes in order (fair.h). */
            for (size_t j = 0; w->fair != NULL && j < rq[i].n; j++)
                fair_rank(w->fair, (job_t *)&rq[i].jobs[j]);
        }
        if (below_reserve(w)) {
            rc = RMQS_EFULL;
            for (size_t i = 0; i < n; i++) {
                rq[i].rc = RMQS_EFULL;
                rq[i].nexisted = 0;
            }
        } else {
            rc = store_insert_batch(w->st, rq, n);
        }
        /* A refusal for lack of space is logged once by below_reserve. */
        if (rc != RMQS_OK && !atomic_load(&w->disk_full))
            log_error(MOD, "group commit failed; nothing stored",
                      "requests=%zu error=%s", n, rmqs_rc_name(rc));
        for (size_t i = 0; i < n; i++) {
            b[i]->ins = rq[i];
            rows += rq[i].n;
            if (rq[i].rc == RMQS_OK) {
                scheduled += rq[i].n - rq[i].nexisted;
                for (size_t j = 0; j < rq[i].n; j++)
                    if ((!rq[i].idem_keys || !rq[i].existed[j]) &&
                        rq[i].jobs[j].due_at < earliest)
                        earliest = rq[i].jobs[j].due_at;
            }
        }
        /* How full transactions are is the point of group commit: with
         * --log-level debug, one line per commit shows it. */
        log_debug(MOD, "group commit", "requests=%zu rows=%zu scheduled=%zu", n,
                  rows, scheduled);
        if (scheduled > 0)
            metrics_jobs_scheduled(scheduled);
        if (earliest != INT64_MAX)
            disp_notify(w->disp, earliest);
        for (size_t i = 0; i < n; i++)
            b[i]->done(b[i], b[i]->cls); /* may free b[i]: last use */
    }
    free(batch);
    free(reqs);
    return NULL;
}

rmqs_rc writer_start(writer_t *w)
{
    return worker_start(&w->wk, "rmqs-writer", writer_main, w);
}

void writer_stop(writer_t *w)
{
    writer_waiter *wake;

    if (w == NULL)
        return;
    pthread_mutex_lock(&w->wk.mu);
    worker_stop_locked(&w->wk);
    grant_locked(w); /* stopping: all of them */
    pthread_mutex_unlock(&w->wk.mu);
    worker_thread_join(&w->wk.thread); /* it wakes what it granted */
    /* Granted after the thread's last look (or it never ran). */
    pthread_mutex_lock(&w->wk.mu);
    wake = w->granted;
    w->granted = NULL;
    pthread_mutex_unlock(&w->wk.mu);
    wake_all(wake);
}

void writer_free(writer_t *w)
{
    if (w == NULL)
        return;
    writer_stop(w);
    worker_destroy(&w->wk);
    free(w);
}
