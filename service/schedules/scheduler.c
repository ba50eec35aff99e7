/*
 * scheduler.c - the thread that creates the runs of recurring schedules
 * (see scheduler.h).
 *
 * Why a thread of its own: a run must exist as a pending job before its
 * fire time, so the dispatcher claims it ahead and publishes it on the
 * millisecond like any one-shot job; creating it at the fire time would
 * make every run as late as a database round trip. So this thread looks
 * lead_ms ahead, creates each run as a job (due at its fire time) and
 * moves the schedule's next_fire_at on, both in one transaction of
 * store_schedule_advance, which is a compare-and-set on (generation,
 * next_fire_at): two instances (or a crash and a restart) that compute the
 * same advance apply it once, and the run's id, derived from (schedule,
 * generation, fire time), cannot be inserted twice.
 *
 * The rules of a pass, for each active schedule whose next fire time is
 * within the lead (earliest first, up to BATCH per transaction):
 *   - One outstanding run: while a run of the schedule is still pending
 *     more than STUCK_MS (500 ms) after its due time (the dispatcher
 *     publishes on the millisecond, so it is not publishing: the broker is
 *     away), no further run is created. Half the catch-up's 1 s, so that a
 *     1 s schedule with a 2 s lead, whose pass wakes just as its previous
 *     run turns 1 s overdue, is never decided by a millisecond of jitter.
 *     Due, not fire time: a catch-up's run fires late by design (its fire
 *     time is L, below, its due time when it was made), and measured by its
 *     fire time it held back the next run for a whole idle pass, which then
 *     went out half a second late (integration.schedules). The last run's
 *     status comes with the row; while it is pending the earliest pending
 *     run is looked up (one indexed read, only for a schedule that fires
 *     more often than the lead, with several runs ahead, or one whose run
 *     is late). The runs created before the
 *     outage (at most the lead's worth) fire when the broker is back if
 *     still within their grace, or the dispatcher expires them
 *     (STORE_OUT_EXPIRE); then the catch-up applies.
 *   - Catch-up: a next fire time more than 1 s in the past (downtime, or
 *     the wait above) is not fired run by run. L = the latest fire time up
 *     to now; every fire time before L is skipped; L fires once, at once
 *     (result misfired_fired), if now - L <= misfire_grace_ms, else it is
 *     skipped too; next_fire_at becomes the first fire time after now. One
 *     log line per schedule per catch-up.
 *   - Otherwise the run for next_fire_at is created (result fired) and
 *     next_fire_at moves to the following fire time, or -1 (ended) when
 *     there is none before end_at.
 * A pass that made progress is followed by another at once (a 1 s
 * schedule with a 2 s lead has two runs to create). Then the thread sleeps
 * until the earliest next fire time minus the lead, at most 1 s (changes
 * made by other instances, clock steps), or until scheduler_notify.
 */
#include "scheduler.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "schedule.h"
#include "timeutil.h"
#include "worker.h"

#define BATCH 1000       /* schedules per advance transaction */
#define IDLE_CAP_MS 1000 /* longest sleep without looking again */
#define MIN_SLEEP_MS 20  /* a row another instance holds: not a spin */
#define OVERDUE_MS 1000  /* a fire time this far past needs a catch-up */
#define STUCK_MS 500     /* a run pending this far past: not publishing */
#define MOD "scheduler"

struct scheduler {
    worker_t w;   /* w.mu guards notified */
    store_t *st;  /* borrowed */
    disp_t *disp; /* borrowed */
    scheduler_options opt;
    bool notified;
};

scheduler_t *scheduler_new(store_t *st, disp_t *d, const scheduler_options *opt)
{
    scheduler_t *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    if (worker_init(&s->w, false) != RMQS_OK) {
        free(s);
        return NULL;
    }
    s->st = st;
    s->disp = d;
    s->opt = *opt;
    if (s->opt.lead_ms < 0)
        s->opt.lead_ms = 0;
    return s;
}

void scheduler_notify(scheduler_t *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->w.mu);
    s->notified = true;
    pthread_cond_signal(&s->w.cv);
    pthread_mutex_unlock(&s->w.mu);
}

/* What one schedule's advance will count once applied. */
typedef struct plan {
    metrics_run_result result; /* of the run created, if any */
    bool has_run;
    int64_t skipped;
} plan;

/*
 * Whether schedule name has a run still pending more than STUCK_MS after
 * its due time (the dispatcher is not publishing). Asked only when the
 * last run is still pending: a schedule firing more often than the lead
 * has several runs created ahead, and the last one is always in the
 * future, so the earliest pending one is what tells.
 */
static bool earlier_run_overdue(scheduler_t *sc, const char *name, int64_t now)
{
    /* Claimed runs are publishing: the dispatcher holds them while away. */
    static const int statuses[] = {JOB_PENDING, JOB_PUBLISHING};
    bool overdue = false;

    for (size_t k = 0; k < sizeof statuses / sizeof statuses[0] && !overdue;
         k++) {
        store_filter f = {.status = statuses[k],
                          .source = JOB_SOURCE_SCHEDULE,
                          .schedule = name};
        job_t *jobs = NULL;
        size_t n = 0;
        char *next = NULL;

        if (store_list(sc->st, &f, 1, NULL, &jobs, &n, &next) != RMQS_OK)
            return true; /* unknown: do not pile up runs; looked at again soon */
        overdue = n > 0 && jobs[0].due_at < now - STUCK_MS;
        for (size_t i = 0; i < n; i++)
            job_clear(&jobs[i]);
        free(jobs);
        free(next);
    }
    return overdue;
}

/*
 * Decide the advance of one due schedule row at now_ms: fills *a (name and
 * generation borrowed from row), *job (the run, or zeroed) and *p. Returns
 * false if nothing is to be done now (the one outstanding run waits).
 */
static bool plan_one(scheduler_t *sc, const store_schedule *row, int64_t now,
                     store_advance *a, job_t *job, plan *p)
{
    schedule_t s;
    rmqs_error err = {0};
    int64_t next = row->next_fire_at, fire = next, due = next;
    bool ok = true;

    memset(job, 0, sizeof *job);
    *p = (plan){0};
    *a = (store_advance){.name = row->name,
                         .generation = row->generation,
                         .old_next = next,
                         .new_next = -1};
    if (row->last_job_id[0] != '\0' &&
        (row->last_job_status == JOB_PENDING ||
         row->last_job_status == JOB_PUBLISHING) &&
        earlier_run_overdue(sc, row->name, now))
        return false; /* one outstanding run: wait for it */
    if (schedule_from_request(row->name, row->spec, strlen(row->spec),
                              &sc->opt.limits, now, &s, NULL,
                              &err) != RMQS_OK) {
        /* Accepted once, refused now (a limit lowered since): ended, said. */
        log_error(MOD, "schedule spec no longer valid; schedule ended",
                  "schedule=\"%s\" field=%s error=\"%s\"", row->name, err.field,
                  err.message);
        return true;
    }
    if (s.every_ms > 0 && s.start_at < 0)
        s.anchor = next; /* the series' phase is its stored next fire time */
    if (next < now - OVERDUE_MS) {
        int64_t latest = next, skipped = 0;
        (void)schedule_latest(&s, next, now, &latest, &skipped);
        if (now - latest <= s.misfire_grace_ms) {
            fire = latest;
            due = now;
            p->has_run = true;
            p->result = MRR_MISFIRED_FIRED;
        } else {
            skipped++;
        }
        p->skipped = skipped;
        if (!schedule_next(&s, now, &a->new_next))
            a->new_next = -1;
        log_info(MOD, "catch-up",
                 "schedule=\"%s\" missed_since=%lld latest=%lld "
                 "skipped=%lld fired_late=%s next_fire_at=%lld",
                 row->name, (long long)next, (long long)latest,
                 (long long)skipped, p->has_run ? "yes" : "no",
                 (long long)a->new_next);
    } else {
        fire = due = next;
        p->has_run = true;
        p->result = MRR_FIRED;
        if (!schedule_next(&s, next, &a->new_next))
            a->new_next = -1;
    }
    if (p->has_run && schedule_make_run(&s, row->generation, fire, due, now,
                                        job) != RMQS_OK) {
        log_error(MOD, "out of memory; run not created now", "schedule=\"%s\"",
                  row->name);
        ok = false;
    }
    if (p->has_run && ok)
        a->job = job;
    schedule_clear(&s);
    return ok;
}

/*
 * One pass over the schedules due within the lead. Returns how many
 * advances applied (-1 on a store error); *blocked how many waited for
 * their outstanding run.
 */
static long pass(scheduler_t *sc, size_t *blocked)
{
    store_schedule *rows = NULL;
    store_advance *adv = NULL;
    job_t *jobs = NULL;
    plan *plans = NULL;
    size_t n = 0, k = 0;
    int64_t now = tu_now_ms(), earliest = INT64_MAX;
    long applied = 0;
    rmqs_rc rc;

    *blocked = 0;
    rc = store_schedule_due(sc->st, now + sc->opt.lead_ms, BATCH, &rows, &n);
    if (rc != RMQS_OK) {
        log_error(MOD, "cannot read due schedules", "error=%s",
                  rmqs_rc_name(rc));
        return -1;
    }
    if (n == 0)
        goto out;
    adv = calloc(n, sizeof(*adv));
    jobs = calloc(n, sizeof(*jobs));
    plans = calloc(n, sizeof(*plans));
    if (adv == NULL || jobs == NULL || plans == NULL) {
        log_error(MOD, "out of memory", "schedules=%zu", n);
        applied = -1;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (plan_one(sc, &rows[i], now, &adv[k], &jobs[k], &plans[k]))
            k++;
        else
            (*blocked)++;
    }
    if (k == 0)
        goto out;
    rc = store_schedule_advance(sc->st, adv, k, now);
    if (rc != RMQS_OK) {
        log_error(MOD, "cannot advance schedules", "schedules=%zu error=%s", k,
                  rmqs_rc_name(rc));
        applied = -1;
        goto out;
    }
    for (size_t i = 0; i < k; i++) {
        if (!adv[i].applied)
            continue;
        applied++;
        if (plans[i].skipped > 0)
            metrics_schedule_runs(MRR_SKIPPED, (uint64_t)plans[i].skipped);
        if (adv[i].job == NULL || adv[i].job_existed)
            continue;
        metrics_schedule_runs(plans[i].result, 1);
        metrics_jobs_scheduled(1);
        if (jobs[i].due_at < earliest)
            earliest = jobs[i].due_at;
        log_debug(MOD, "run created", "schedule=\"%s\" job_id=%s fire_at=%lld",
                  adv[i].name, jobs[i].id, (long long)jobs[i].fire_at);
    }
    if (earliest != INT64_MAX)
        disp_notify(sc->disp, earliest);
out:
    for (size_t i = 0; jobs != NULL && i < n; i++)
        job_clear(&jobs[i]);
    for (size_t i = 0; i < n; i++)
        store_schedule_clear(&rows[i]);
    free(rows);
    free(adv);
    free(jobs);
    free(plans);
    return applied;
}

/* How long to sleep after a pass that made no progress. */
static int64_t idle_ms(scheduler_t *sc, size_t blocked)
{
    bool any = false;
    int64_t at = 0, wait;

    if (blocked > 0) /* their next fire time is past: look again in a while */
        return IDLE_CAP_MS;
    if (store_schedule_next_at(sc->st, &any, &at) != RMQS_OK || !any)
        return IDLE_CAP_MS;
    wait = at - sc->opt.lead_ms - tu_now_ms();
    if (wait > IDLE_CAP_MS)
        wait = IDLE_CAP_MS;
    if (wait < MIN_SLEEP_MS)
        wait = MIN_SLEEP_MS;
    return wait;
}

static void *scheduler_main(void *arg)
{
    scheduler_t *sc = arg;

    log_info(MOD, "started", "lead_ms=%lld", (long long)sc->opt.lead_ms);
    while (!worker_stopping(&sc->w)) {
        size_t blocked = 0;
        long applied = pass(sc, &blocked);
        int64_t wait;

        if (applied > 0)
            continue; /* more may be due within the lead */
        wait = applied < 0 ? IDLE_CAP_MS : idle_ms(sc, blocked);
        pthread_mutex_lock(&sc->w.mu);
        if (!sc->notified && !sc->w.stop)
            (void)worker_cond_wait_ms(&sc->w.cv, &sc->w.mu, wait);
        sc->notified = false;
        pthread_mutex_unlock(&sc->w.mu);
    }
    return NULL;
}

rmqs_rc scheduler_start(scheduler_t *s)
{
    return worker_start(&s->w, "rmqs-scheduler", scheduler_main, s);
}

void scheduler_stop(scheduler_t *s)
{
    if (s != NULL)
        worker_stop(&s->w);
}

void scheduler_free(scheduler_t *s)
{
    if (s == NULL)
        return;
    scheduler_stop(s);
    worker_destroy(&s->w);
    free(s);
}
