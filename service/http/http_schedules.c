/*
 * http_schedules.c - the recurring-schedule endpoints of the HTTP contract
 * (api/openapi.yaml): PUT, GET, PATCH, DELETE /schedules/{name}, GET
 * /schedules and POST /schedules/{name}/run.
 *
 * Why a room of its own: http_api.c is the transport, http_reply.c how an
 * answer is made, http_jobs.c the one-shot jobs; this file is what the API does with schedules. Bodies are
 * validated by schedule.c (whose job template goes through job.c's own
 * rules), rows are read and written through the store's schedule calls
 * (store.h), and the scheduler thread is told of every change
 * (scheduler_notify) so a new next fire time is looked at at once.
 *
 * A change takes effect for the next run: on a replace (PUT with another
 * body), a PATCH and a DELETE, the runs already created for a fire time
 * still ahead and still pending are cancelled (a run the dispatcher
 * already holds, claimed within its lookahead of the fire time, goes out);
 * runs whose fire time has passed keep their lifecycle. The new next fire
 * time is the first after now, and after the last run that could not be
 * cancelled. The same body PUT again changes nothing (200, generation
 * unchanged): the store compares the canonical spec.
 *
 * What an operator reads (issue 25): every schedule object carries its
 * last run whose time has come (job id, fire time, status now, error) and
 * its failure streak (the latest finished runs that failed in a row, up to
 * STORE_STREAK_CAP), one bounded store read per schedule
 * (store_schedule_recent). Run now (POST .../run) makes one extra run from
 * the template, due now, with an id of its own (a fresh UUIDv7, not the
 * (schedule, generation, fire time) id of the series, so it can never take
 * a fire time's place), stored through the writer as POST /schedule is,
 * Idempotency-Key included; the schedule row is not touched, so its fire
 * times, its last_run_at and its one-outstanding-run rule stay the
 * series'. Paused or ended, it runs all the same: an operator's act.
 */
#include "http_handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "schedule.h"
#include "timeutil.h"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000
#define NEXT_RUNS_DEFAULT 5
#define PATCH_RETRIES 5
#define MOD "http"

static enum MHD_Result reply_not_found(struct MHD_Connection *c)
{
    return http_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                            "no such schedule");
}

static enum MHD_Result reply_bad_query(struct MHD_Connection *c,
                                       const char *field, const char *msg)
{
    return http_reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument", field,
                            msg);
}

static const char *state_name(const store_schedule *row)
{
    if (row->paused)
        return "paused";
    return row->next_fire_at < 0 ? "ended" : "active";
}

/* The stored spec of row as a schedule, with the every_ms phase the row
 * carries (its next fire time, else its last one). */
static rmqs_rc parse_row(http_api_t *api, const store_schedule *row,
                         int64_t now, schedule_t *s, rmqs_error *err)
{
    rmqs_rc rc = schedule_from_request(row->name, row->spec, strlen(row->spec),
                                       &api->opt.limits, now, s, NULL, err);
    if (rc == RMQS_OK && s->every_ms > 0 && s->start_at < 0) {
        if (row->next_fire_at >= 0)
            s->anchor = row->next_fire_at;
        else if (row->last_fire_at >= 0)
            s->anchor = row->last_fire_at;
    }
    return rc;
}

/* last_run: null, or {job_id, fire_time, status, error} (new reference). */
static json_t *last_run_json(const store_run_outcome *o)
{
    if (!o->has_last)
        return json_null();
    return json_pack("{s:s, s:o, s:s, s:o}", "job_id", o->last_id, "fire_time",
                     schedule_time_json(o->last_fire_at), "status",
                     job_status_name(o->last_status), "error",
                     o->last_error != NULL ? http_safe_string(o->last_error)
                                           : json_null());
}

/* The GET representation of row with count next runs and its recent runs
 * (read here when recent is NULL; a list reads its page's at once): a new
 * reference, or NULL on failure with *rc saying why. */
static json_t *schedule_json(http_api_t *api, const store_schedule *row,
                             size_t count, int64_t now,
                             const store_run_outcome *recent, rmqs_rc *rc)
{
    schedule_t s;
    store_run_outcome own = {0};
    const char *name = row->name;
    rmqs_error err = {0};
    json_t *o;
    int64_t after;

    *rc = RMQS_ENOMEM;
    if (parse_row(api, row, now, &s, &err) != RMQS_OK) {
        log_error(MOD, "stored schedule spec does not parse",
                  "schedule=\"%s\" "
                  "error=\"%s\"",
                  row->name, err.message);
        return NULL;
    }
    if (recent == NULL) {
        *rc = store_schedule_recent(api->st, &name, 1, now, &own);
        if (*rc != RMQS_OK) {
            log_error(MOD, "cannot read the recent runs of a schedule",
                      "schedule=\"%s\" error=%s", name, rmqs_rc_name(*rc));
            schedule_clear(&s);
            return NULL;
        }
        recent = &own;
    }
    *rc = RMQS_ENOMEM;
    o = schedule_spec_json(&s);
    if (o != NULL) {
        json_object_set_new(o, "last_run", last_run_json(recent));
        json_object_set_new(o, "failure_streak",
                            json_integer(recent->failure_streak));
        json_object_set_new(o, "failure_streak_capped",
                            json_boolean(recent->streak_capped));
        json_object_set_new(o, "state", json_string(state_name(row)));
        json_object_set_new(o, "generation", json_integer(row->generation));
        json_object_set_new(o, "created_at",
                            schedule_time_json(row->created_at));
        json_object_set_new(o, "updated_at",
                            schedule_time_json(row->updated_at));
        json_object_set_new(o, "last_run_at",
                            schedule_time_json(row->last_fire_at));
        json_object_set_new(o, "last_job_id",
                            row->last_job_id[0] ? json_string(row->last_job_id)
                                                : json_null());
        /* Active: from now on (runs created ahead included), or from the
         * next fire time if that is overdue. Paused: what would fire if
         * resumed now. Ended: none. */
        if (row->next_fire_at < 0) {
            json_object_set_new(o, "next_runs", json_array());
        } else {
            after = !row->paused && row->next_fire_at <= now
                        ? row->next_fire_at - 1
                        : now;
            json_object_set_new(o, "next_runs",
                                schedule_next_runs_json(&s, after, count));
        }
        *rc = RMQS_OK;
    }
    store_run_outcome_clear(&own);
    schedule_clear(&s);
    return o;
}

static enum MHD_Result reply_schedule(http_api_t *api, struct MHD_Connection *c,
                                      unsigned status,
                                      const store_schedule *row, size_t count)
{
    rmqs_rc rc;
    json_t *o = schedule_json(api, row, count, tu_now_ms(), NULL, &rc);

    if (o == NULL)
        return http_reply_rc(c, rc, NULL, "cannot show the schedule");
    return http_reply_json(c, status, o, NULL, NULL);
}

/*
 * Cancel the runs of schedule name created for a fire time after now and
 * still pending, except those of generation keep_gen (0: none kept) that
 * the scheduler may have made for the new spec already. *kept_max gets the
 * latest fire time of a future run that could not be cancelled (held by
 * the dispatcher: it goes out), -1 if none.
 */
/* One page of cancel_future_runs. */
static void cancel_runs_page(http_api_t *api, const char *name,
                             int64_t keep_gen, int64_t now, const job_t *jobs,
                             size_t n, size_t *cancelled, int64_t *kept_max)
{
    for (size_t i = 0; i < n; i++) {
        const job_t *j = &jobs[i];
        job_t out = {0};
        char own[JOB_ID_LEN + 1];

        if (j->fire_at <= now)
            continue; /* its fire time has passed: its own lifecycle */
        if (keep_gen > 0) {
            schedule_run_id(name, keep_gen, j->fire_at, own);
            if (strcmp(own, j->id) == 0)
                continue;
        }
        if (j->status == JOB_PENDING &&
            store_cancel(api->st, j->id, now, &out) == RMQS_OK)
            (*cancelled)++;
        else if (j->fire_at > *kept_max)
            *kept_max = j->fire_at;
        job_clear(&out);
    }
}

static void cancel_future_runs(http_api_t *api, const char *name,
                               int64_t keep_gen, int64_t now, int64_t *kept_max)
{
    static const int statuses[] = {JOB_PENDING, JOB_PUBLISHING};
    size_t cancelled = 0;

    *kept_max = -1;
    for (size_t k = 0; k < sizeof statuses / sizeof statuses[0]; k++) {
        store_filter f = {.status = statuses[k],
                          .source = JOB_SOURCE_SCHEDULE,
                          .schedule = name};
        char *after = NULL;

        /* every page: a page stops at the store's byte budget, so runs with
         * large bodies may take several */
        do {
            job_t *jobs = NULL;
            size_t n = 0;
            char *next = NULL;

            if (store_list(api->st, &f, LIST_LIMIT_MAX, after, &jobs, &n,
                           &next) != RMQS_OK) {
                log_error(MOD, "cannot list the runs of a changed schedule",
                          "schedule=\"%s\"", name);
                break;
            }
            cancel_runs_page(api, name, keep_gen, now, jobs, n, &cancelled,
                             kept_max);
            for (size_t i = 0; i < n; i++)
                job_clear(&jobs[i]);
            free(jobs);
            free(after);
            after = next;
        } while (after != NULL);
        free(after);
    }
    if (cancelled > 0 || *kept_max >= 0)
        log_info(MOD, "future runs of a changed schedule",
                 "schedule=\"%s\" "
                 "cancelled=%zu held_until=%lld",
                 name, cancelled, (long long)*kept_max);
}

/*
 * After a change stored as row (generation row->generation): cancel the
 * future runs of the old spec and, if one of them could not be cancelled
 * at or after the new next fire time, move next_fire_at past it
 * (compare-and-set; a newer change wins). *row is updated.
 */
static void settle_change(http_api_t *api, store_schedule *row, int64_t now)
{
    int64_t kept = -1, next;
    schedule_t s;
    rmqs_error err = {0};

    cancel_future_runs(api, row->name, row->generation, now, &kept);
    if (kept < 0 || row->next_fire_at < 0 || row->next_fire_at > kept)
        goto out;
    if (parse_row(api, row, now, &s, &err) != RMQS_OK)
        goto out;
    if (!schedule_next(&s, kept, &next))
        next = -1;
    schedule_clear(&s);
    {
        store_schedule upd = *row, stored = {0};
        upd.next_fire_at = next;
        upd.updated_at = now;
        if (store_schedule_update(api->st, &upd, row->generation, &stored) ==
            RMQS_OK) {
            store_schedule_clear(row);
            *row = stored;
        } else {
            store_schedule_clear(&stored);
        }
    }
out:
    scheduler_notify(api->opt.scheduler);
}

/* The first fire time of s after now, -1 if none. Runs created ahead for
 * a later fire time are cancelled by settle_change, which moves the next
 * fire time past any it could not cancel. */
static int64_t first_fire(const schedule_t *s, int64_t now)
{
    int64_t next;

    return schedule_next(s, now, &next) ? next : -1;
}

/* The every_ms of a stored spec text, 0 if none. */
static int64_t spec_every_ms(const char *spec)
{
    json_t *o = json_loads(spec, 0, NULL);
    int64_t v = json_is_integer(json_object_get(o, "every_ms"))
                    ? json_integer_value(json_object_get(o, "every_ms"))
                    : 0;
    json_decref(o);
    return v;
}

/* The template's user_id is the broker login (pubpol.h). */
static rmqs_rc check_template_user(const http_api_t *api, const schedule_t *s,
                                   rmqs_error *err)
{
    rmqs_error e = {0};

    if (pubpol_check_user_id(api->policy, s->tmpl.properties, NULL, &e) ==
        RMQS_OK)
        return RMQS_OK;
    return rmqs_fail(err, RMQS_EINVAL, "job.properties.user_id", "job.%s",
                     e.message);
}

static enum MHD_Result h_put(http_api_t *api, struct MHD_Connection *c,
                             const char *name, http_req *rq)
{
    schedule_t s;
    store_schedule old = {0}, row = {0}, stored = {0};
    rmqs_error err = {0};
    char *spec = NULL;
    bool existed, created = false, unchanged = false;
    int64_t now = tu_now_ms();
    enum MHD_Result ret;
    rmqs_rc rc;

    rc = schedule_from_request(name, rq->body ? rq->body : "", rq->len,
                               &api->opt.limits, now, &s, &spec, &err);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, &err, "invalid schedule");
    if (check_template_user(api, &s, &err) != RMQS_OK) {
        ret = http_reply_rc(c, RMQS_EINVAL, &err, "invalid schedule");
        goto out;
    }
    if (!http_exchange_allowed(api, s.tmpl.exchange)) {
        ret = http_reply_forbidden_exchange(c, "job.exchange", s.tmpl.exchange);
        goto out;
    }
    rc = store_schedule_get(api->st, name, &old);
    if (rc != RMQS_OK && rc != RMQS_ENOTFOUND) {
        ret = http_reply_rc(c, rc, NULL, "cannot read the schedule");
        goto out;
    }
    existed = rc == RMQS_OK;
    if (!existed) {
        /* A cap, so that one client cannot make the scheduler's every pass
         * walk millions of schedules; checked before the insert, so two
         * PUTs racing at the cap may both pass (by the HTTP threads). */
        int64_t by_state[3] = {0};
        rc = store_schedule_counts(api->st, by_state);
        if (rc != RMQS_OK) {
            ret = http_reply_rc(c, rc, NULL, "cannot count the schedules");
            goto out;
        }
        if (by_state[0] + by_state[1] + by_state[2] >= api->opt.max_schedules) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "the service keeps %lld schedules, its "
                     "--max-schedules: delete one or raise the limit",
                     (long long)api->opt.max_schedules);
            ret = http_reply_error(c, MHD_HTTP_CONFLICT, "conflict", NULL, msg);
            goto out;
        }
    }
    /* every_ms without start_at: anchored at this PUT (a replace
     * re-anchors it). */
    row.name = (char *)name;
    row.spec = spec;
    row.paused = s.paused;
    row.created_at = now;
    row.updated_at = now;
    row.last_fire_at = existed ? old.last_fire_at : -1;
    if (existed)
        memcpy(row.last_job_id, old.last_job_id, sizeof row.last_job_id);
    row.next_fire_at = first_fire(&s, now);
    rc = store_schedule_put(api->st, &row, &created, &unchanged, &stored);
    if (rc != RMQS_OK) {
        ret = http_reply_rc(c, rc, NULL, "cannot store the schedule");
        goto out;
    }
    if (!unchanged) {
        log_info(MOD, created ? "schedule created" : "schedule replaced",
                 "schedule=\"%s\" generation=%lld next_fire_at=%lld", name,
                 (long long)stored.generation, (long long)stored.next_fire_at);
        if (created)
            scheduler_notify(api->opt.scheduler);
        else
            settle_change(api, &stored, now);
    }
    ret = reply_schedule(api, c, created ? MHD_HTTP_CREATED : MHD_HTTP_OK,
                         &stored, NEXT_RUNS_DEFAULT);
out:
    schedule_clear(&s);
    free(spec);
    store_schedule_clear(&old);
    store_schedule_clear(&stored);
    return ret;
}

static enum MHD_Result h_patch(http_api_t *api, struct MHD_Connection *c,
                               const char *name, http_req *rq)
{
    store_schedule old = {0}, stored = {0};
    rmqs_error err = {0};
    enum MHD_Result ret;
    rmqs_rc rc = RMQS_ECONFLICT;

    for (int attempt = 0; attempt < PATCH_RETRIES && rc == RMQS_ECONFLICT;
         attempt++) {
        schedule_t s;
        char *merged = NULL;
        int64_t now = tu_now_ms();

        store_schedule_clear(&old);
        rc = store_schedule_get(api->st, name, &old);
        if (rc == RMQS_ENOTFOUND) {
            ret = reply_not_found(c);
            goto out;
        }
        if (rc != RMQS_OK) {
            ret = http_reply_rc(c, rc, NULL, "cannot read the schedule");
            goto out;
        }
        rc = schedule_patch(name, old.spec, rq->body ? rq->body : "", rq->len,
                            &api->opt.limits, now, &s, &merged, &err);
        if (rc == RMQS_OK && check_template_user(api, &s, &err) != RMQS_OK) {
            schedule_clear(&s);
            free(merged);
            rc = RMQS_EINVAL;
        }
        if (rc != RMQS_OK) {
            ret = http_reply_rc(c, rc, &err, "invalid schedule");
            goto out;
        }
        if (!http_exchange_allowed(api, s.tmpl.exchange)) {
            char msg[320];
            snprintf(msg, sizeof msg,
                     "exchange '%.255s' is not in the allowed "
                     "list",
                     s.tmpl.exchange);
            schedule_clear(&s);
            free(merged);
            ret = http_reply_error(c, MHD_HTTP_FORBIDDEN, "forbidden",
                                   "job.exchange", msg);
            goto out;
        }
        if (strcmp(merged, old.spec) == 0) { /* nothing to change */
            schedule_clear(&s);
            free(merged);
            ret = reply_schedule(api, c, MHD_HTTP_OK, &old, NEXT_RUNS_DEFAULT);
            goto out;
        }
        /* The same interval keeps its phase; a new one starts now. */
        if (s.every_ms > 0 && s.start_at < 0 && old.next_fire_at >= 0 &&
            spec_every_ms(old.spec) == s.every_ms)
            s.anchor = old.next_fire_at;
        {
            store_schedule upd = old;
            upd.spec = merged;
            upd.paused = s.paused;
            upd.updated_at = now;
            upd.next_fire_at = first_fire(&s, now);
            store_schedule_clear(&stored);
            rc = store_schedule_update(api->st, &upd, old.generation, &stored);
        }
        schedule_clear(&s);
        free(merged);
        if (rc == RMQS_OK) {
            log_info(MOD, "schedule changed",
                     "schedule=\"%s\" generation=%lld "
                     "next_fire_at=%lld paused=%s",
                     name, (long long)stored.generation,
                     (long long)stored.next_fire_at,
                     stored.paused ? "true" : "false");
            settle_change(api, &stored, now);
        }
    }
    if (rc == RMQS_ENOTFOUND)
        ret = reply_not_found(c);
    else if (rc != RMQS_OK)
        ret = http_reply_rc(c, rc, NULL, "cannot change the schedule");
    else
        ret = reply_schedule(api, c, MHD_HTTP_OK, &stored, NEXT_RUNS_DEFAULT);
out:
    store_schedule_clear(&old);
    store_schedule_clear(&stored);
    return ret;
}

static enum MHD_Result h_delete(http_api_t *api, struct MHD_Connection *c,
                                const char *name)
{
    int64_t now = tu_now_ms(), kept;
    rmqs_rc rc = store_schedule_delete(api->st, name);

    if (rc == RMQS_ENOTFOUND)
        return reply_not_found(c);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot delete the schedule");
    log_info(MOD, "schedule deleted", "schedule=\"%s\"", name);
    cancel_future_runs(api, name, 0, now, &kept);
    scheduler_notify(api->opt.scheduler);
    return http_reply_empty(c, MHD_HTTP_NO_CONTENT);
}

static enum MHD_Result h_get(http_api_t *api, struct MHD_Connection *c,
                             const char *name)
{
    static const char *const allowed[] = {"count", NULL};
    const char *unknown = http_query_unknown(c, allowed);
    store_schedule row = {0};
    int64_t count = NEXT_RUNS_DEFAULT;
    enum MHD_Result ret;
    rmqs_rc rc;

    if (unknown != NULL)
        return reply_bad_query(c, unknown, "unknown query parameter");
    if (!http_query_int(c, "count", 1, SCHEDULE_NEXT_RUNS_MAX, &count))
        return reply_bad_query(c, "count", "count: an integer from 1 to 1000");
    rc = store_schedule_get(api->st, name, &row);
    if (rc == RMQS_ENOTFOUND)
        return reply_not_found(c);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot read the schedule");
    ret = reply_schedule(api, c, MHD_HTTP_OK, &row, (size_t)count);
    store_schedule_clear(&row);
    return ret;
}

enum MHD_Result http_schedules_one(http_api_t *api, struct MHD_Connection *c,
                                   const char *method, const char *name,
                                   http_req *rq)
{
    bool put = strcmp(method, "PUT") == 0, patch = strcmp(method, "PATCH") == 0;
    enum MHD_Result ret;

    if (http_resource_refused(c, method, schedule_name_valid(name), &ret))
        return ret;
    if (put)
        return h_put(api, c, name, rq);
    if (patch)
        return h_patch(api, c, name, rq);
    if (strcmp(method, "DELETE") == 0)
        return h_delete(api, c, name);
    return h_get(api, c, name);
}

enum MHD_Result http_schedules_list(http_api_t *api, struct MHD_Connection *c)
{
    static const char *const allowed[] = {"limit", "after", NULL};
    const char *unknown = http_query_unknown(c, allowed);
    const char *after =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
    store_schedule *rows = NULL;
    store_run_outcome *recent = NULL;
    const char **names = NULL;
    size_t n = 0;
    int64_t limit = LIST_LIMIT_DEFAULT;
    char *next = NULL;
    json_t *list = NULL;
    int64_t now = tu_now_ms();
    enum MHD_Result ret;
    rmqs_rc rc;

    if (unknown != NULL)
        return reply_bad_query(c, unknown, "unknown query parameter");
    if (!http_query_int(c, "limit", 1, LIST_LIMIT_MAX, &limit))
        return reply_bad_query(c, "limit", "limit: an integer from 1 to 1000");
    rc = store_schedule_list(api->st, (size_t)limit, after, &rows, &n, &next);
    if (rc == RMQS_EINVAL)
        return reply_bad_query(c, "after", "after: not a cursor from this API");
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot list schedules");
    /* the page's recent runs in one store call (one round trip) */
    names = calloc(n > 0 ? n : 1, sizeof(*names));
    recent = calloc(n > 0 ? n : 1, sizeof(*recent));
    rc = names != NULL && recent != NULL ? RMQS_OK : RMQS_ENOMEM;
    for (size_t i = 0; rc == RMQS_OK && i < n; i++)
        names[i] = rows[i].name;
    if (rc == RMQS_OK)
        rc = store_schedule_recent(api->st, names, n, now, recent);
    if (rc != RMQS_OK)
        log_error(MOD, "cannot read the recent runs of the schedules",
                  "schedules=%zu error=%s", n, rmqs_rc_name(rc));
    list = rc == RMQS_OK ? json_array() : NULL;
    if (rc == RMQS_OK)
        rc = RMQS_ENOMEM;
    for (size_t i = 0; list != NULL && i < n; i++) {
        json_t *o = schedule_json(api, &rows[i], NEXT_RUNS_DEFAULT, now,
                                  &recent[i], &rc);
        if (o == NULL || json_array_append_new(list, o) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    for (size_t i = 0; recent != NULL && i < n; i++)
        store_run_outcome_clear(&recent[i]);
    free(recent);
    free(names);
    if (list == NULL)
        ret = http_reply_rc(c, rc == RMQS_OK ? RMQS_ENOMEM : rc, NULL,
                            "cannot list schedules");
    else
        ret = http_reply_json(
            c, MHD_HTTP_OK,
            json_pack("{s:o, s:o}", "schedules", list, "next",
                      next != NULL ? json_string(next) : json_null()),
            NULL, NULL);
    for (size_t i = 0; i < n; i++)
        store_schedule_clear(&rows[i]);
    free(rows);
    free(next);
    return ret;
}

/* The Idempotency-Key fingerprint of a run now: no JSON body can have it,
 * so a key used for a POST /schedule answers 409 here and the other way
 * round. */
static char *run_fingerprint(const char *name)
{
    size_t n = strlen("POST /schedules//run") + strlen(name) + 1;
    char *fp = malloc(n);

    if (fp != NULL)
        snprintf(fp, n, "POST /schedules/%s/run", name);
    return fp;
}

enum MHD_Result http_schedules_run(http_api_t *api, struct MHD_Connection *c,
                                   const char *method, const char *name,
                                   http_req *rq)
{
    store_schedule row = {0};
    schedule_t s = {0};
    rmqs_error err = {0};
    int64_t now;
    enum MHD_Result ret;
    rmqs_rc rc;

    if (strcmp(method, "POST") != 0)
        return http_reply_error_h(
            c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", NULL,
            "method not allowed", MHD_HTTP_HEADER_ALLOW, "POST");
    if (!schedule_name_valid(name))
        return http_reply_error(
            c, MHD_HTTP_BAD_REQUEST, "invalid_argument", "name",
            "name: 1 to 200 characters of A-Z a-z 0-9 . _ : -");
    if (rq->len > 0)
        return http_reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument",
                                NULL,
                                "run now takes no body: the run is the "
                                "schedule's job template");
    if (!http_jobs_admit(api, c, rq))
        return MHD_YES; /* suspended until the writer has room */
    if (http_jobs_idem_key(c, rq, &ret))
        return ret;
    now = tu_now_ms();
    rc = store_schedule_get(api->st, name, &row);
    if (rc == RMQS_ENOTFOUND)
        return reply_not_found(c);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot read the schedule");
    if (parse_row(api, &row, now, &s, &err) != RMQS_OK) {
        ret = http_reply_rc(c, RMQS_EINVAL, &err,
                            "the stored schedule is no longer valid");
        goto out;
    }
    if (!http_exchange_allowed(api, s.tmpl.exchange)) {
        ret = http_reply_forbidden_exchange(c, "job.exchange", s.tmpl.exchange);
        goto out;
    }
    rq->jobs = calloc(1, sizeof(*rq->jobs));
    if (rq->jobs == NULL) {
        ret = http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
        goto out;
    }
    /* fire time and due time now: sent at once, headers as any run's */
    rc = schedule_make_run(&s, row.generation, now, now, now, &rq->jobs[0]);
    if (rc == RMQS_OK) {
        rq->njobs = 1; /* the request's to free from here on */
        rc = job_id_generate(now, rq->jobs[0].id);
    }
    if (rc == RMQS_OK && rq->idem_key != NULL) {
        rq->canonical = run_fingerprint(name);
        if (rq->canonical == NULL)
            rc = RMQS_ENOMEM;
    }
    if (rc != RMQS_OK) {
        ret = http_reply_rc(c, rc, NULL, "cannot make the run");
        goto out;
    }
    log_info(MOD, "schedule run now", "schedule=\"%s\" job_id=%s", name,
             rq->jobs[0].id);
    ret = http_jobs_submit(api, c, rq);
out:
    schedule_clear(&s);
    store_schedule_clear(&row);
    return ret;
}
