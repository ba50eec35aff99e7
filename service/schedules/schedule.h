/*
 * schedule.h - a recurring schedule: what PUT /schedules/{name} accepted,
 * when it fires, and the job each run makes.
 *
 * This module is pure, like job.c: it turns request bodies into validated
 * schedules, computes fire times (cron.h in a time zone of tz.h, or a
 * fixed interval) and builds the run's job from the template. It touches
 * no database, socket or clock (the caller passes "now"), so every rule is
 * unit tested on its own (tests/unit/test_schedule.c). The thread that
 * creates runs is scheduler.c; the HTTP side is http_schedules.c.
 *
 * Ownership: a schedule_t owns every pointer inside it (schedule_clear).
 * It is immutable once parsed and may be read by several threads.
 */
#ifndef RMQS_SCHEDULE_H
#define RMQS_SCHEDULE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cron.h"
#include "job.h"
#include "rmqs.h"
#include "tz.h"

#define SCHEDULE_NAME_MAX 200
#define SCHEDULE_EVERY_MIN_MS 1000LL
#define SCHEDULE_EVERY_MAX_MS (366LL * 86400000LL)
#define SCHEDULE_GRACE_DEFAULT_MS 60000LL
#define SCHEDULE_GRACE_MAX_MS (7LL * 86400000LL)
#define SCHEDULE_NEXT_RUNS_MAX 1000

typedef struct schedule {
    char *name;       /* owned */
    char *cron_text;  /* owned; NULL for an every_ms schedule */
    cron_expr *cron;  /* owned; NULL for an every_ms schedule */
    int64_t every_ms; /* 0 for a cron schedule */
    int64_t anchor;   /* every_ms: a fire instant of the series
                                (start_at, else the time of the PUT; the
                                caller may move it to keep the phase) */
    tz_t *tz;         /* owned; "UTC" when not given */
    int64_t start_at; /* ms; -1: none (no fire before it) */
    int64_t end_at;   /* ms; -1: none (no fire after it) */
    bool paused;
    int64_t misfire_grace_ms;
    cron_dst dst;     /* resolved: the expression's defaults with the
                                body's "dst" parts over them */
    json_t *job_json; /* owned: the template as given */
    job_t tmpl;       /* owned: the template validated by job.c
                                (its timing fields unused) */
} schedule_t;

/* Release everything s owns and zero it. Safe on a zeroed schedule. */
void schedule_clear(schedule_t *s);

/* Whether name is 1-200 bytes of [A-Za-z0-9._:-]. */
bool schedule_name_valid(const char *name);

/*
 * Validate a PUT body (already parsed; root borrowed) for the schedule
 * `name` at now_ms into *out (anchor = start_at, else now_ms). On success,
 * if spec_out is not NULL it receives the malloc'd canonical spec: the body
 * as compact JSON with sorted keys (the same body twice gives the same
 * text). On failure RMQS_EINVAL (or RMQS_ENOMEM) with err's field ("cron",
 * "job.routing_key", ...) and message (a cron error names its position),
 * and *out zeroed.
 */
rmqs_rc schedule_from_json(const char *name, json_t *root,
                           const job_limits *lim, int64_t now_ms,
                           schedule_t *out, char **spec_out, rmqs_error *err);

/* As schedule_from_json from the body's bytes (a JSON object). */
rmqs_rc schedule_from_request(const char *name, const char *buf, size_t len,
                              const job_limits *lim, int64_t now_ms,
                              schedule_t *out, char **spec_out,
                              rmqs_error *err);

/*
 * A PATCH: merge the top-level members of patch (a JSON object; a member
 * set to null removes that field, "job" is replaced whole) into the stored
 * spec text and validate the result as a PUT body. *merged_out (may be
 * NULL) gets the merged spec's canonical text (malloc'd).
 */
rmqs_rc schedule_patch(const char *name, const char *spec, const char *buf,
                       size_t len, const job_limits *lim, int64_t now_ms,
                       schedule_t *out, char **merged_out, rmqs_error *err);

/* The first fire instant strictly after after_ms (ms): cron_next in the
 * schedule's zone, or the next anchor + k * every_ms; never before
 * start_at, never after end_at. false if there is none (ended). */
bool schedule_next(const schedule_t *s, int64_t after_ms, int64_t *next_ms);

/*
 * The latest fire instant <= now_ms at or after from_ms (a fire instant
 * the caller knows of, e.g. next_fire_at), and how many fire instants lie
 * in [from_ms, latest) (those a catch-up skips). Enumerated up to 100,000
 * then estimated at that pace (every_ms: exact arithmetic). false if no
 * fire instant lies in [from_ms, now_ms].
 */
bool schedule_latest(const schedule_t *s, int64_t from_ms, int64_t now_ms,
                     int64_t *latest_ms, int64_t *skipped);

/* The run id of (name, generation, fire_ms): a UUID whose first 48 bits are
 * fire_ms (time-ordered like UUIDv7), version 8, variant 10, the other 74
 * bits from FNV-1a 64 of "<name>\n<generation>\n<fire_ms>" (two seeds). */
void schedule_run_id(const char *name, int64_t generation, int64_t fire_ms,
                     char out[JOB_ID_LEN + 1]);

/*
 * The job of the run for fire_ms of generation: a copy of the template,
 * source schedule, schedule = the name, deliver_at = fire_at = fire_ms,
 * due_at = due_ms (the fire time, or now for a misfire fired late),
 * expires_at = fire_ms + misfire_grace_ms, created_at = updated_at =
 * now_ms, id = schedule_run_id. RMQS_ENOMEM (out zeroed).
 */
rmqs_rc schedule_make_run(const schedule_t *s, int64_t generation,
                          int64_t fire_ms, int64_t due_ms, int64_t now_ms,
                          job_t *out);

/* The GET representation's spec fields with defaults filled in, as a new
 * jansson object: name, cron | every_ms, timezone, start_at, end_at,
 * paused, misfire_grace_ms, dst {skipped, repeated}, job. NULL on ENOMEM. */
json_t *schedule_spec_json(const schedule_t *s);

/* ms as an RFC 3339 UTC string, or null when ms < 0 (new reference). */
json_t *schedule_time_json(int64_t ms);

/* Up to count fire instants after after_ms as [{"utc","local"}] (new
 * reference). NULL on ENOMEM. */
json_t *schedule_next_runs_json(const schedule_t *s, int64_t after_ms,
                                size_t count);

#endif
