/*
 * janitor.c - retention purge and WAL checkpoints (see janitor.h).
 *
 * Purging deletes in small transactions (purge_batch rows) with a pause
 * between them, so the store's lock is never held long and the dispatcher
 * keeps its timing. Checkpoints are PASSIVE on the store's second
 * connection: they copy what they can and never wait for a writer.
 */
#include "janitor.h"

#include <stdbool.h>
#include <stdlib.h>

#include "log.h"
#include "timeutil.h"
#include "worker.h"

#define MOD "janitor"

#define PURGE_PAUSE_MS 5 /* between two purge transactions */

struct janitor {
    store_t *st; /* borrowed */
    janitor_options opt;
    worker_t w; /* the thread, its stop flag and its sleeps */
};

static bool purge_round(janitor_t *j)
{
    int64_t before = tu_now_ms() - j->opt.retention_ms;
    size_t total = 0, n = 0;

    do {
        if (store_purge(j->st, before, j->opt.purge_batch, &n) != RMQS_OK)
            break; /* logged by the store; try again next round */
        total += n;
        if (n == j->opt.purge_batch && worker_sleep(&j->w, PURGE_PAUSE_MS))
            return true;
    } while (n == j->opt.purge_batch);
    if (total > 0)
        log_info(MOD, "purged finished jobs", "n=%zu retention_s=%lld", total,
                 (long long)(j->opt.retention_ms / 1000));
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
        if (worker_sleep(&j->w, j->opt.checkpoint_interval_ms))
            break;
    }
    store_checkpoint(j->st, NULL, NULL);
    return NULL;
}

janitor_t *janitor_new(store_t *st, const janitor_options *opt)
{
    janitor_t *j = calloc(1, sizeof(*j));

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
    if (worker_init(&j->w, false) != RMQS_OK) {
        free(j);
        return NULL;
    }
    return j;
}

rmqs_rc janitor_start(janitor_t *j)
{
    return worker_start(&j->w, "rmqs-janitor", jan_main, j);
}

void janitor_stop(janitor_t *j)
{
    if (j == NULL)
        return;
    worker_stop(&j->w);
}

void janitor_free(janitor_t *j)
{
    if (j == NULL)
        return;
    janitor_stop(j);
    worker_destroy(&j->w);
    free(j);
}
