/*
 * schedule.c - validation, fire times and runs of recurring schedules (see
 * schedule.h).
 *
 * Why it exists: every rule about what PUT /schedules/{name} accepts and
 * when a schedule fires lives in one pure module, unit tested on its own,
 * so the scheduler thread and the HTTP layer only move rows and map codes.
 *
 * How it works: a body is parsed once with jansson (duplicate keys
 * rejected) and checked in a fixed order: unknown keys, cron | every_ms,
 * timezone, dst, the cron expression (cron.c names the position of a bad
 * part), start_at, end_at, misfire_grace_ms, paused, the job template,
 * and last whether the cron ever fires. The job template is validated by
 * job.c itself (job_from_json on a copy with "delay_ms": 0, since it has
 * no timing of its own), so a schedule accepts exactly what POST /schedule
 * accepts, and its errors name the field as "job.<field>". The canonical
 * spec is the body as jansson's compact text with sorted keys: the store
 * compares it to tell "the same body again" (nothing changes) from a
 * replace.
 *
 * Fire times: a cron schedule asks cron_next in its zone with its DST
 * rules; an every_ms schedule fires at anchor + k * every_ms (the anchor is
 * start_at, else the time of the PUT). start_at and end_at bound both
 * (inclusive). Run ids are derived from (name, generation, fire time), so
 * the store's unique id makes a second creation of one run impossible.
 */
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqparse.h"
#include "timeutil.h"

#define LATEST_ENUM_CAP 100000

void schedule_clear(schedule_t *s)
{
    if (s == NULL)
        return;
    free(s->name);
    free(s->cron_text);
    if (s->cron != NULL)
        cron_free(s->cron);
    if (s->tz != NULL)
        tz_free(s->tz);
    json_decref(s->job_json);
    job_clear(&s->tmpl);
    memset(s, 0, sizeof *s);
}

bool schedule_name_valid(const char *name)
{
    return rp_name_valid(name, SCHEDULE_NAME_MAX);
}

/* ------------------------------------------------------------------------ */
/* validation                                                                */

static rmqs_rc parse_time_field(json_t *root, const char *name, int64_t *out,
                                rmqs_error *err)
{
    json_t *v = json_object_get(root, name);

    *out = -1;
    if (v == NULL)
        return RMQS_OK;
    if (!json_is_string(v) ||
        tu_parse_rfc3339(json_string_value(v), json_string_length(v), out) !=
            RMQS_OK)
        return rmqs_fail(err, RMQS_EINVAL, name,
                         "%s: not an RFC 3339 timestamp", name);
    return RMQS_OK;
}

static rmqs_rc parse_dst(json_t *v, cron_dst *dst, rmqs_error *err)
{
    static const char *const allowed[] = {"skipped", "repeated"};
    const char *t;
    json_t *p;
    rmqs_rc rc;

    if (v == NULL)
        return RMQS_OK;
    rc = rp_object(v, "dst", "{\"skipped\", \"repeated\"}", allowed,
                   sizeof allowed / sizeof allowed[0], err);
    if (rc != RMQS_OK)
        return rc;
    p = json_object_get(v, "skipped");
    if (p != NULL) {
        t = json_string_value(p);
        if (t != NULL && strcmp(t, "next") == 0)
            dst->skipped = CRON_SKIPPED_NEXT;
        else if (t != NULL && strcmp(t, "skip") == 0)
            dst->skipped = CRON_SKIPPED_SKIP;
        else
            return rmqs_fail(err, RMQS_EINVAL, "dst.skipped",
                             "dst.skipped: \"next\" or \"skip\"");
    }
    p = json_object_get(v, "repeated");
    if (p != NULL) {
        t = json_string_value(p);
        if (t != NULL && strcmp(t, "first") == 0)
            dst->repeated = CRON_REPEATED_FIRST;
        else if (t != NULL && strcmp(t, "both") == 0)
            dst->repeated = CRON_REPEATED_BOTH;
        else
            return rmqs_fail(err, RMQS_EINVAL, "dst.repeated",
                             "dst.repeated: \"first\" or \"both\"");
    }
    return RMQS_OK;
}

/* The job template, by job.c's own rules: a copy with "delay_ms": 0 (a
 * template has no timing of its own), errors named "job.<field>". */
static rmqs_rc parse_template(json_t *v, const job_limits *lim, int64_t now_ms,
                              job_t *out, rmqs_error *err)
{
    char field[RP_FIELD_MAX + 1];
    json_t *copy;
    rmqs_rc rc;

    if (v == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "job",
                         "job: required (the template of each run's job)");
    if (!json_is_object(v))
        return rmqs_fail(err, RMQS_EINVAL, "job", "job: must be an object");
    if (json_object_get(v, "deliver_at") != NULL ||
        json_object_get(v, "delay_ms") != NULL)
        return rmqs_fail(err, RMQS_EINVAL,
                         json_object_get(v, "deliver_at") != NULL
                             ? "job.deliver_at"
                             : "job.delay_ms",
                         "job: a run is due at its fire time; deliver_at and "
                         "delay_ms are not allowed");
    copy = json_copy(v);
    if (copy == NULL ||
        json_object_set_new(copy, "delay_ms", json_integer(0)) != 0) {
        json_decref(copy);
        return rp_fail_nomem(err);
    }
    rc = job_from_json(copy, lim, now_ms, out, NULL, err);
    json_decref(copy);
    if (rc == RMQS_EINVAL && err != NULL) {
        rp_key_field(field, err->field[0] ? "job." : "job", err->field);
        memcpy(err->field, field, sizeof field);
    }
    return rc;
}

rmqs_rc schedule_from_json(const char *name, json_t *root,
                           const job_limits *lim, int64_t now_ms,
                           schedule_t *out, char **spec_out, rmqs_error *err)
{
    static const char *const allowed[] = {
        "cron",   "every_ms",         "timezone", "start_at", "end_at",
        "paused", "misfire_grace_ms", "dst",      "job"};
    schedule_t s = {0};
    json_t *cron, *every, *v;
    cron_dst dst;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (spec_out != NULL)
        *spec_out = NULL;
    if (out == NULL || lim == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "", "internal: missing argument");
    if (!schedule_name_valid(name))
        return rmqs_fail(err, RMQS_EINVAL, "name",
                         "name: 1 to %d characters of A-Z a-z 0-9 . _ : -",
                         SCHEDULE_NAME_MAX);
    if (!json_is_object(root))
        return rmqs_fail(err, RMQS_EINVAL, "",
                         "request body must be a JSON object");
    rc = rp_known_keys(root, "", allowed, sizeof allowed / sizeof allowed[0],
                       err);
    if (rc != RMQS_OK)
        return rc;

    rc = rp_one_of(root, "cron", "every_ms", &cron, &every, err);
    if (rc != RMQS_OK)
        return rc;
    if (cron != NULL && !json_is_string(cron))
        return rmqs_fail(err, RMQS_EINVAL, "cron", "cron: must be a string");
    if (every != NULL) {
        if (!json_is_integer(every) ||
            json_integer_value(every) < SCHEDULE_EVERY_MIN_MS ||
            json_integer_value(every) > SCHEDULE_EVERY_MAX_MS)
            return rmqs_fail(err, RMQS_EINVAL, "every_ms",
                             "every_ms: an integer from %lld (1 s) to %lld "
                             "(366 days)",
                             SCHEDULE_EVERY_MIN_MS, SCHEDULE_EVERY_MAX_MS);
        s.every_ms = json_integer_value(every);
    }

    v = json_object_get(root, "timezone");
    if (v != NULL && !json_is_string(v))
        return rmqs_fail(err, RMQS_EINVAL, "timezone",
                         "timezone: must be a string (an IANA name)");
    rc = tz_open(v != NULL ? json_string_value(v) : "UTC", &s.tz, err);
    if (rc != RMQS_OK)
        goto out;

    if (cron != NULL) {
        rc = cron_parse(json_string_value(cron), &s.cron, err);
        if (rc != RMQS_OK)
            goto out;
        s.cron_text = strdup(json_string_value(cron));
        if (s.cron_text == NULL) {
            rc = rp_fail_nomem(err);
            goto out;
        }
        dst = cron_default_dst(s.cron);
    } else { /* an interval is real elapsed time: no wall clock involved */
        dst = (cron_dst){CRON_SKIPPED_SKIP, CRON_REPEATED_BOTH};
    }
    rc = parse_dst(json_object_get(root, "dst"), &dst, err);
    if (rc != RMQS_OK)
        goto out;
    s.dst = dst;

    rc = parse_time_field(root, "start_at", &s.start_at, err);
    if (rc == RMQS_OK)
        rc = parse_time_field(root, "end_at", &s.end_at, err);
    if (rc != RMQS_OK)
        goto out;
    if (s.start_at >= 0 && s.end_at >= 0 && s.end_at <= s.start_at) {
        rc = rmqs_fail(err, RMQS_EINVAL, "end_at",
                       "end_at: must be after start_at");
        goto out;
    }

    s.misfire_grace_ms = SCHEDULE_GRACE_DEFAULT_MS;
    v = json_object_get(root, "misfire_grace_ms");
    if (v != NULL) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > SCHEDULE_GRACE_MAX_MS) {
            rc = rmqs_fail(
                err, RMQS_EINVAL, "misfire_grace_ms",
                "misfire_grace_ms: an integer from 0 to %lld (7 days)",
                SCHEDULE_GRACE_MAX_MS);
            goto out;
        }
        s.misfire_grace_ms = json_integer_value(v);
    }

    v = json_object_get(root, "paused");
    if (v != NULL && !json_is_boolean(v)) {
        rc = rmqs_fail(err, RMQS_EINVAL, "paused",
                       "paused: must be true or false");
        goto out;
    }
    s.paused = v != NULL && json_is_true(v);

    rc =
        parse_template(json_object_get(root, "job"), lim, now_ms, &s.tmpl, err);
    if (rc != RMQS_OK)
        goto out;

    if (s.cron != NULL && !cron_ever_fires(s.cron, s.tz, s.dst)) {
        rc = rmqs_fail(err, RMQS_EINVAL, "cron",
                       "cron: never fires (no such date, e.g. 30 February)");
        goto out;
    }

    s.anchor = s.start_at >= 0 ? s.start_at : now_ms;
    s.job_json = json_incref(json_object_get(root, "job"));
    s.name = strdup(name);
    if (s.name == NULL) {
        rc = rp_fail_nomem(err);
        goto out;
    }
    if (spec_out != NULL) {
        *spec_out = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
        if (*spec_out == NULL) {
            rc = rp_fail_nomem(err);
            goto out;
        }
    }
    *out = s;
    return RMQS_OK;
out:
    schedule_clear(&s);
    return rc;
}

rmqs_rc schedule_from_request(const char *name, const char *buf, size_t len,
                              const job_limits *lim, int64_t now_ms,
                              schedule_t *out, char **spec_out, rmqs_error *err)
{
    json_t *root;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (spec_out != NULL)
        *spec_out = NULL;
    rc = rp_parse_object(buf, len, &root, err);
    if (rc != RMQS_OK)
        return rc;
    rc = schedule_from_json(name, root, lim, now_ms, out, spec_out, err);
    json_decref(root);
    return rc;
}

rmqs_rc schedule_patch(const char *name, const char *spec, const char *buf,
                       size_t len, const job_limits *lim, int64_t now_ms,
                       schedule_t *out, char **merged_out, rmqs_error *err)
{
    json_t *merged;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (merged_out != NULL)
        *merged_out = NULL;
    rc = rp_merge_patch(spec, buf, len, NULL, &merged, err);
    if (rc != RMQS_OK)
        return rc;
    rc = schedule_from_json(name, merged, lim, now_ms, out, merged_out, err);
    json_decref(merged);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* fire times                                                                */

/* floor(a / b) for b > 0. */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

bool schedule_next(const schedule_t *s, int64_t after_ms, int64_t *next_ms)
{
    int64_t t;

    if (s->start_at >= 0 && after_ms < s->start_at - 1)
        after_ms = s->start_at - 1;
    if (s->every_ms > 0) {
        int64_t k = floor_div(after_ms - s->anchor, s->every_ms) + 1;
        t = s->anchor + k * s->every_ms;
    } else if (s->cron == NULL ||
               !cron_next(s->cron, s->tz, s->dst, after_ms, &t)) {
        return false;
    }
    if (s->end_at >= 0 && t > s->end_at)
        return false;
    *next_ms = t;
    return true;
}

bool schedule_latest(const schedule_t *s, int64_t from_ms, int64_t now_ms,
                     int64_t *latest_ms, int64_t *skipped)
{
    int64_t prev = from_ms, n, count = 0, limit = now_ms;

    if (from_ms > now_ms || (s->end_at >= 0 && from_ms > s->end_at))
        return false;
    if (s->end_at >= 0 && limit > s->end_at)
        limit = s->end_at;
    if (s->every_ms > 0) {
        count = (limit - from_ms) / s->every_ms;
        *latest_ms = from_ms + count * s->every_ms;
        *skipped = count;
        return true;
    }
    while (count < LATEST_ENUM_CAP && schedule_next(s, prev, &n) &&
           n <= limit) {
        prev = n;
        count++;
    }
    if (count == LATEST_ENUM_CAP) {
        /* Too many to walk: find the last one by looking back from limit
         * in growing windows, and estimate the count at the pace so far. */
        int64_t pace = (prev - from_ms) / count, w = pace > 0 ? 2 * pace : 1000;
        int64_t t;
        for (;;) {
            if (schedule_next(s, limit - w, &t) && t <= limit) {
                while (schedule_next(s, t, &n) && n <= limit)
                    t = n;
                break;
            }
            if (limit - w <= prev) {
                t = prev;
                break;
            }
            w *= 2;
        }
        if (pace > 0)
            count += (t - prev) / pace;
        prev = t;
    }
    *latest_ms = prev;
    *skipped = count;
    return true;
}

/* ------------------------------------------------------------------------ */
/* runs                                                                      */

static uint64_t fnv1a64(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void schedule_run_id(const char *name, int64_t generation, int64_t fire_ms,
                     char out[JOB_ID_LEN + 1])
{
    unsigned char b[JOB_ID_BYTES];
    char text[SCHEDULE_NAME_MAX + 48];
    int n = snprintf(text, sizeof text, "%s\n%lld\n%lld", name,
                     (long long)generation, (long long)fire_ms);
    size_t len = n < 0                     ? 0
                 : (size_t)n < sizeof text ? (size_t)n
                                           : sizeof text - 1;
    uint64_t h1 = fnv1a64(0xcbf29ce484222325ULL, text, len);
    uint64_t h2 = fnv1a64(0x84222325cbf29ce4ULL ^ h1, text, len);
    uint64_t t = (uint64_t)fire_ms;

    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(t >> (40 - 8 * i));
    b[6] = (unsigned char)(0x80 | ((h1 >> 60) & 0x0f)); /* version 8 */
    b[7] = (unsigned char)(h1 >> 52);
    b[8] = (unsigned char)(0x80 | ((h1 >> 46) & 0x3f)); /* variant 10 */
    for (int i = 0; i < 7; i++)
        b[9 + i] = (unsigned char)(h2 >> (56 - 8 * i));
    job_id_format(b, out);
}

rmqs_rc schedule_make_run(const schedule_t *s, int64_t generation,
                          int64_t fire_ms, int64_t due_ms, int64_t now_ms,
                          job_t *out)
{
    const job_t *t = &s->tmpl;
    job_t j = {0};

    memset(out, 0, sizeof *out);
    j.exchange = strdup(t->exchange != NULL ? t->exchange : "");
    j.routing_key = strdup(t->routing_key != NULL ? t->routing_key : "");
    j.schedule = strdup(s->name);
    if (t->body_len > 0) {
        j.body = malloc(t->body_len);
        if (j.body != NULL)
            memcpy(j.body, t->body, t->body_len);
    }
    j.headers = t->headers != NULL ? json_deep_copy(t->headers) : NULL;
    j.properties = t->properties != NULL ? json_deep_copy(t->properties) : NULL;
    if (j.exchange == NULL || j.routing_key == NULL || j.schedule == NULL ||
        (t->body_len > 0 && j.body == NULL) ||
        (t->headers != NULL && j.headers == NULL) ||
        (t->properties != NULL && j.properties == NULL)) {
        job_clear(&j);
        return RMQS_ENOMEM;
    }
    j.body_len = t->body_len;
    j.body_kind = t->body_kind;
    j.max_attempts = t->max_attempts;
    j.priority = t->priority;
    j.claim_rank = t->claim_rank;
    j.status = JOB_PENDING;
    j.source = JOB_SOURCE_SCHEDULE;
    j.fire_at = fire_ms;
    j.deliver_at = fire_ms;
    j.due_at = due_ms;
    j.expires_at = fire_ms + s->misfire_grace_ms;
    if (j.expires_at == 0)
        j.expires_at = 1; /* 0 means never */
    j.delay_ms = fire_ms > now_ms ? fire_ms - now_ms : 0;
    j.created_at = now_ms;
    j.updated_at = now_ms;
    j.sent_at = -1;
    schedule_run_id(s->name, generation, fire_ms, j.id);
    *out = j;
    return RMQS_OK;
}

/* ------------------------------------------------------------------------ */
/* JSON of the GET answer                                                    */

json_t *schedule_time_json(int64_t ms)
{
    char t[TU_RFC3339_LEN + 1];

    if (ms < 0)
        return json_null();
    tu_format_rfc3339(ms, t);
    return json_string(t);
}

json_t *schedule_spec_json(const schedule_t *s)
{
    json_t *o = json_object();

    if (o == NULL)
        return NULL;
    json_object_set_new(o, "name", json_string(s->name));
    if (s->cron_text != NULL)
        json_object_set_new(o, "cron", json_string(s->cron_text));
    else
        json_object_set_new(o, "every_ms", json_integer(s->every_ms));
    json_object_set_new(o, "timezone", json_string(tz_name(s->tz)));
    json_object_set_new(o, "start_at", schedule_time_json(s->start_at));
    json_object_set_new(o, "end_at", schedule_time_json(s->end_at));
    json_object_set_new(o, "paused", json_boolean(s->paused));
    json_object_set_new(o, "misfire_grace_ms",
                        json_integer(s->misfire_grace_ms));
    json_object_set_new(
        o, "dst",
        json_pack("{s:s, s:s}", "skipped",
                  s->dst.skipped == CRON_SKIPPED_SKIP ? "skip" : "next",
                  "repeated",
                  s->dst.repeated == CRON_REPEATED_BOTH ? "both" : "first"));
    json_object_set(o, "job", s->job_json);
    return o;
}

#define PREVIEW_LAST_MS 253402300799999LL /* 9999-12-31T23:59:59.999 */

json_t *schedule_next_runs_json(const schedule_t *s, int64_t after_ms,
                                size_t count)
{
    json_t *a = json_array();
    int64_t t = after_ms, n;

    for (size_t i = 0; a != NULL && i < count && schedule_next(s, t, &n); i++) {
        char utc[TU_RFC3339_LEN + 1], local[40];
        /* RFC 3339 ends with year 9999: no fire time is shown whose UTC
         * or local time would be later (an every_ms schedule goes on) */
        if (n > PREVIEW_LAST_MS ||
            n + (int64_t)tz_offset_at(s->tz, n / 1000) * 1000 > PREVIEW_LAST_MS)
            break;
        tu_format_rfc3339(n, utc);
        tz_format_local(s->tz, n, local);
        if (json_array_append_new(
                a, json_pack("{s:s, s:s}", "utc", utc, "local", local)) != 0) {
            json_decref(a);
            return NULL;
        }
        t = n;
    }
    return a;
}
