/*
 * janitor.c - retention purge and WAL checkpoints (see janitor.h).
 *
 * Purging deletes in small transactions (purge_batch rows) with a pause
 * between them, so the store's lock is never held long and the dispatcher
 * keeps its timing. Checkpoints are PASSIVE on the store's second
 * connection: they copy what they can and never wait for a writer.
 */
#include "janitor.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "timeutil.h"

#define PURGE_PAUSE_MS 5 /* between two purge transactions */

struct janitor {
    store_t *st; /* borrowed */
    janitor_options opt;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* guards stop */
    pthread_cond_t cv;  /* CLOCK_MONOTONIC */
    bool stop;
};

/* Sleep ms unless stopped first; true if the thread should stop. */
static bool jan_sleep(janitor_t *j, int64_t ms)
{
    struct timespec dl;
    bool stop;

    dl = tu_mono_deadline(ms);
    pthread_mutex_lock(&j->mu);
    while (!j->stop && pthread_cond_timedwait(&j->cv, &j->mu, &dl) == 0)
        ;
    stop = j->stop;
    pthread_mutex_unlock(&j->mu);
    return stop;
}

static bool purge_round(janitor_t *j)
{
    int64_t before = tu_now_ms() - j->opt.retention_ms;
    size_t total = 0, n = 0;

    do {
        if (store_purge(j->st, before, j->opt.purge_batch, &n) != RMQS_OK)
            break; /* logged by the store; try again next round */
        total += n;
        if (n == j->opt.purge_batch && jan_sleep(j, PURGE_PAUSE_MS))
            return true;
    } while (n == j->opt.purge_batch);
    if (total > 0)
        log_info("janitor", "purged finished jobs", "n=%zu retention_s=%lld",
                 total, (long long)(j->opt.retention_ms / 1000));
    return false;
}

static void *jan_main(void *arg)
{
    janitor_t *j = arg;
    int64_t next_purge = tu_mono_ms();

    for (;;) {
        int64_t now = tu_mono_ms();
        if (j->opt.retention_ms > 0 && now >= next_purge) {
            if (purge_round(j))
                break;
            next_purge = tu_mono_ms() + j->opt.purge_interval_ms;
        }
        store_checkpoint(j->st, NULL, NULL);
        if (jan_sleep(j, j->opt.checkpoint_interval_ms))
            break;
    }
    store_checkpoint(j->st, NULL, NULL);
    return NULL;
}

janitor_t *janitor_new(store_t *st, const janitor_options *opt)
{
    janitor_t *j = calloc(1, sizeof(*j));
    pthread_condattr_t ca;

    if (j == NULL)
        return NULL;
    j->st = st;
    j->opt = *opt;
    if (j->opt.purge_batch == 0)
        j->opt.purge_batch = 500;
    if (j->opt.checkpoint_interval_ms <= 0)
        j->opt.checkpoint_interval_ms = 1000;
    if (j->opt.purge_interval_ms <= 0)
        j->opt.purge_interval_ms = 60000;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    return j;
}

rmqs_rc janitor_start(janitor_t *j)
{
    if (pthread_create(&j->thread, NULL, jan_main, j) != 0)
        return RMQS_ESYS;
    pthread_setname_np(j->thread, "rmqs-janitor"); /* for top -H, perf */
    j->started = true;
    return RMQS_OK;
}

void janitor_stop(janitor_t *j)
{
    if (j == NULL || !j->started)
        return;
    pthread_mutex_lock(&j->mu);
    j->stop = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
    j->started = false;
}

void janitor_free(janitor_t *j)
{
    if (j == NULL)
        return;
    janitor_stop(j);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}
