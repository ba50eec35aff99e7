/*
 * store_indexer.c - the search indexer's thread (see store_indexer.h).
 */
#include "store_indexer.h"

#include <stdlib.h>

#include "timeutil.h"

struct store_ix {
    worker_t wk; /* wk.mu guards kicked */
    bool kicked;
    const store_ix_ops *ops;
    void *arg;
};

/* The next batch's size: about target_ms at the rate the last full one
 * ran, growing at most twofold. */
static size_t next_batch(const store_ix_ops *o, size_t batch, size_t n,
                         int64_t took_us)
{
    double want;

    if (n < batch) /* caught up: its rate says little */
        return batch;
    if (took_us < 1)
        took_us = 1;
    want = (double)batch * ((double)o->target_ms * 1000.0) / (double)took_us;
    if (want > 2.0 * (double)batch)
        want = 2.0 * (double)batch;
    if (want < (double)o->min)
        return o->min;
    return want > (double)o->max ? o->max : (size_t)want;
}

static void *ix_main(void *arg)
{
    store_ix *ix = arg;
    const store_ix_ops *o = ix->ops;
    size_t batch = o->first;
    bool more = true; /* a restart may have a backlog: look at once */

    for (;;) {
        size_t n = 0;
        int64_t t0;

        pthread_mutex_lock(&ix->wk.mu);
        while (!ix->wk.stop && !ix->kicked && !more)
            if (!worker_cond_wait_ms(&ix->wk.cv, &ix->wk.mu, o->poll_ms))
                break; /* look anyway */
        ix->kicked = false;
        if (ix->wk.stop) {
            pthread_mutex_unlock(&ix->wk.mu);
            break;
        }
        pthread_mutex_unlock(&ix->wk.mu);

        t0 = tu_mono_us();
        more = false;
        if (o->batch(ix->arg, batch, &n, &more) != RMQS_OK) {
            more = true;
            if (worker_sleep(&ix->wk, o->retry_ms))
                break;
            continue;
        }
        batch = next_batch(o, batch, n, tu_mono_us() - t0);
        if (more && o->pause != NULL && o->pause(ix->arg, &ix->wk))
            break;
    }
    return NULL;
}

rmqs_rc store_ix_start(store_ix **out, const store_ix_ops *ops, void *arg,
                       rmqs_error *err)
{
    store_ix *ix = calloc(1, sizeof(*ix));

    *out = NULL;
    if (ix == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    ix->ops = ops;
    ix->arg = arg;
    if (worker_init(&ix->wk, false) != RMQS_OK) {
        free(ix);
        return rmqs_fail(err, RMQS_ESYS, NULL, "indexer: worker_init failed");
    }
    if (worker_start(&ix->wk, ops->name, ix_main, ix) != RMQS_OK) {
        worker_destroy(&ix->wk);
        free(ix);
        return rmqs_fail(err, RMQS_ESYS, NULL, "cannot start the indexer");
    }
    *out = ix;
    return RMQS_OK;
}

void store_ix_stop(store_ix **ix)
{
    if (*ix == NULL)
        return;
    worker_stop(&(*ix)->wk);
    worker_destroy(&(*ix)->wk);
    free(*ix);
    *ix = NULL;
}

void store_ix_kick(store_ix *ix)
{
    if (ix == NULL)
        return;
    pthread_mutex_lock(&ix->wk.mu);
    ix->kicked = true;
    pthread_cond_signal(&ix->wk.cv);
    pthread_mutex_unlock(&ix->wk.mu);
}
