/*
 * store_schedules.c - the front of the recurring schedules' store calls
 * (store.h, "Recurring schedules"; issue 13): checks the arguments, then
 * calls the backend's schedule table (store_backend.h's store_schedule_ops:
 * store_sqlite_schedules.c, store_pg_schedules.c).
 *
 * Why beside store.c rather than in it: the schedules are a second kind of
 * row with their own calls; store.c keeps the jobs' front. What they share
 * is the claimset: a schedule's last run that the dispatcher holds (claimed
 * ahead, its claim not written yet) reads as pending in the database, and
 * store_schedule_due shows it as publishing, as store_get would, so the
 * scheduler's "one outstanding run" rule sees what the dispatcher does.
 * A run is a job for everything else (store_cancel, store_get, the claim).
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "store_backend.h"

static bool name_ok(const char *name)
{
    return name != NULL && name[0] != '\0';
}

static void zero_out(store_schedule *out)
{
    if (out != NULL) {
        memset(out, 0, sizeof(*out));
        out->last_job_status = -1;
    }
}

rmqs_rc store_schedule_put(store_t *st, const store_schedule *s, bool *created,
                           bool *unchanged, store_schedule *out)
{
    bool c = false, u = false;
    rmqs_rc rc;

    zero_out(out);
    if (created)
        *created = false;
    if (unchanged)
        *unchanged = false;
    if (s == NULL || !name_ok(s->name) || s->spec == NULL)
        return RMQS_EINVAL;
    rc = st->ops->sched->put(st->b, s, &c, &u, out);
    if (rc == RMQS_OK) {
        if (created)
            *created = c;
        if (unchanged)
            *unchanged = u;
    }
    return rc;
}

rmqs_rc store_schedule_update(store_t *st, const store_schedule *s,
                              int64_t expect_generation, store_schedule *out)
{
    zero_out(out);
    if (s == NULL || !name_ok(s->name) || s->spec == NULL)
        return RMQS_EINVAL;
    return st->ops->sched->update(st->b, s, expect_generation, out);
}

rmqs_rc store_schedule_get(store_t *st, const char *name, store_schedule *out)
{
    zero_out(out);
    if (!name_ok(name))
        return RMQS_ENOTFOUND;
    return st->ops->sched->get(st->b, name, out);
}

rmqs_rc store_schedule_list(store_t *st, size_t limit, const char *after,
                            store_schedule **rows, size_t *n, char **next_out)
{
    store_schedule *r = NULL;
    size_t got = 0;
    bool more = false;
    rmqs_rc rc;

    *rows = NULL;
    *n = 0;
    *next_out = NULL;
    if (limit == 0)
        return RMQS_EINVAL;
    rc = st->ops->sched->list(st->b, limit, st->page_max_bytes, after, &r, &got,
                              &more);
    if (rc != RMQS_OK)
        return rc;
    if (more && got > 0) {
        *next_out = strdup(r[got - 1].name);
        if (*next_out == NULL) {
            store_schedules_free(r, got);
            return RMQS_ENOMEM;
        }
    }
    *rows = r;
    *n = got;
    return RMQS_OK;
}

rmqs_rc store_schedule_delete(store_t *st, const char *name)
{
    if (!name_ok(name))
        return RMQS_ENOTFOUND;
    return st->ops->sched->del(st->b, name);
}

rmqs_rc store_schedule_due(store_t *st, int64_t by_ms, size_t limit,
                           store_schedule **rows, size_t *n)
{
    unsigned char id[JOB_ID_BYTES];
    rmqs_rc rc;

    *rows = NULL;
    *n = 0;
    if (limit == 0)
        return RMQS_OK;
    rc = st->ops->sched->due(st->b, by_ms, limit, rows, n);
    if (rc != RMQS_OK)
        return rc;
    /* held by the dispatcher: publishing, as store_get shows it */
    for (size_t i = 0; i < *n; i++) {
        store_schedule *s = &(*rows)[i];
        if (s->last_job_status == JOB_PENDING &&
            job_id_parse(s->last_job_id, id) == RMQS_OK &&
            claimset_held(st->held, id))
            s->last_job_status = JOB_PUBLISHING;
    }
    return RMQS_OK;
}

rmqs_rc store_schedule_next_at(store_t *st, bool *any, int64_t *at)
{
    *any = false;
    return st->ops->sched->next_at(st->b, any, at);
}

rmqs_rc store_schedule_advance(store_t *st, store_advance *a, size_t n,
                               int64_t now_ms)
{
    for (size_t i = 0; i < n; i++) {
        a[i].applied = a[i].job_existed = false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!name_ok(a[i].name) ||
            (a[i].job != NULL && a[i].job->id[0] == '\0'))
            return RMQS_EINVAL;
    }
    return st->ops->sched->advance(st->b, a, n, now_ms);
}

rmqs_rc store_schedule_counts(store_t *st, int64_t counts[3])
{
    return st->ops->sched->counts(st->b, counts);
}

rmqs_rc store_schedule_recent(store_t *st, const char *const *names, size_t n,
                              int64_t now_ms, store_run_outcome *out)
{
    unsigned char id[JOB_ID_BYTES];
    rmqs_rc rc;

    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        store_run_outcome_clear(&out[i]);
        if (!name_ok(names[i]))
            return RMQS_EINVAL;
    }
    if (n == 0)
        return RMQS_OK;
    rc = st->ops->sched->recent(st->b, names, n, now_ms, out);
    for (size_t i = 0; i < n; i++) {
        store_run_outcome *o = &out[i];
        if (rc != RMQS_OK)
            store_run_outcome_clear(o);
        /* held by the dispatcher: publishing, as store_get shows it */
        else if (o->has_last && o->last_status == JOB_PENDING &&
                 job_id_parse(o->last_id, id) == RMQS_OK &&
                 claimset_held(st->held, id))
            o->last_status = JOB_PUBLISHING;
    }
    return rc;
}
