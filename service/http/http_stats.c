/*
 * http_stats.c - GET /stats: the sampled history of stats.h as JSON for the
 * dashboard's Overview charts, plus the totals of now; GET /stats/failures:
 * the top reasons the most recent failed jobs failed (issue 25), grouped
 * by failgroup.h from store_failures_recent's window.
 *
 * Why a room of its own: http_api.c is the transport and the health and
 * metrics endpoints; this is the one reader of the stats ring. Times are
 * RFC 3339 like every time of the API; every other value is a plain
 * number, one object per sample in time order, so a chart maps a field
 * over the array.
 */
#include "http_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "failgroup.h"
#include "timeutil.h"

#define WINDOW_DEFAULT_S 3600
#define WINDOW_MAX_S 21600    /* the ring's 6 h at the default interval */
#define FAILURES_WINDOW 10000 /* failed jobs GET /stats/failures reads */
#define FAILURES_GROUPS 20    /* groups it answers, the largest */

/* "15m", "1h", "6h" or whole seconds 1..WINDOW_MAX_S; -1 otherwise. */
static int64_t parse_window(const char *w)
{
    int64_t v;

    if (w == NULL)
        return WINDOW_DEFAULT_S;
    if (strcmp(w, "15m") == 0)
        return 900;
    if (strcmp(w, "1h") == 0)
        return 3600;
    if (strcmp(w, "6h") == 0)
        return 21600;
    return http_parse_int(w, 1, WINDOW_MAX_S, &v) ? v : -1;
}

/* A percentile, or null when nothing was sent in the interval. */
static json_t *ms_or_null(double v)
{
    return v < 0 ? json_null()
                 : json_real((double)(int64_t)(v * 10 + 0.5) / 10);
}

static json_t *sample_json(const stats_sample *s)
{
    char t[TU_RFC3339_LEN + 1];

    tu_format_rfc3339(s->t_ms, t);
    return json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o}", "t", t, "scheduled",
        (json_int_t)s->scheduled, "sent", (json_int_t)s->sent, "failed",
        (json_int_t)s->failed, "cancelled", (json_int_t)s->cancelled, "pending",
        s->pending < 0 ? json_null() : json_integer(s->pending), "late_p50_ms",
        ms_or_null(s->late_p50_ms), "late_p90_ms", ms_or_null(s->late_p90_ms),
        "late_p99_ms", ms_or_null(s->late_p99_ms));
}

enum MHD_Result http_stats_get(http_api_t *api, struct MHD_Connection *c)
{
    static const char *const allowed[] = {"window", NULL};
    static const char *const status_names[5] = {"pending", "publishing", "sent",
                                                "failed", "cancelled"};
    const char *unknown = http_query_unknown(c, allowed);
    int64_t window_s = parse_window(
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "window"));
    int64_t now = tu_now_ms(), counts[5];
    metrics_snapshot totals;
    stats_sample *samples = NULL;
    size_t n = 0;
    json_t *root, *arr, *jobs;
    rmqs_error err = {0};
    char t[TU_RFC3339_LEN + 1];

    if (unknown != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, unknown, "unknown query parameter");
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    if (window_s < 0) {
        rmqs_fail(&err, RMQS_EINVAL, "window",
                  "window: 15m, 1h, 6h, or whole seconds from 1 to %d",
                  WINDOW_MAX_S);
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    if (api->opt.stats == NULL)
        return http_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                                "no such route");
    if (stats_window(api->opt.stats, now, window_s * 1000, &samples, &n) !=
        RMQS_OK)
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    metrics_read(&totals);
    tu_format_rfc3339(now, t);
    arr = json_array();
    jobs = json_object();
    if (store_counts(api->st, counts) == RMQS_OK && jobs != NULL) {
        for (int i = 0; i < 5; i++)
            json_object_set_new(jobs, status_names[i], json_integer(counts[i]));
    }
    for (size_t i = 0; arr != NULL && i < n; i++)
        json_array_append_new(arr, sample_json(&samples[i]));
    free(samples);
    root = json_pack(
        "{s:f, s:I, s:s, s:o, s:{s:I, s:I, s:I, s:I, s:o}}", "interval_s",
        (double)stats_interval_ms(api->opt.stats) / 1000.0, "window_s",
        (json_int_t)window_s, "now", t, "samples", arr, "totals", "scheduled",
        (json_int_t)totals.scheduled, "sent", (json_int_t)totals.sent, "failed",
        (json_int_t)totals.failed, "cancelled", (json_int_t)totals.cancelled,
        "jobs", jobs);
    return http_reply_json(c, MHD_HTTP_OK, root, NULL, NULL);
}

/* {"exchange","error","count","last_failed_at","example_job_id"} */
static json_t *group_json(const failgroup *g)
{
    char t[TU_RFC3339_LEN + 1];

    tu_format_rfc3339(g->last_failed_at, t);
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "exchange", g->exchange,
                     "error", g->error, "count", (json_int_t)g->count,
                     "last_failed_at", t, "example_job_id", g->example_job_id);
}

enum MHD_Result http_stats_failures(http_api_t *api, struct MHD_Connection *c)
{
    static const char *const allowed[] = {NULL};
    const char *unknown = http_query_unknown(c, allowed);
    store_failure *rows = NULL;
    failgroup_in *in = NULL;
    failgroup *g = NULL;
    size_t n = 0, ng = 0;
    rmqs_error err = {0};
    json_t *arr;
    rmqs_rc rc;

    if (unknown != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, unknown, "unknown query parameter");
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    rc = store_failures_recent(api->st, FAILURES_WINDOW, &rows, &n);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot read the failed jobs");
    if (n > 0 && (in = calloc(n, sizeof(*in))) == NULL)
        rc = RMQS_ENOMEM;
    for (size_t i = 0; rc == RMQS_OK && i < n; i++)
        in[i] = (failgroup_in){rows[i].id, rows[i].exchange, rows[i].error,
                               rows[i].failed_at};
    if (rc == RMQS_OK)
        rc = failgroup_build(in, n, FAILURES_GROUPS, &g, &ng);
    free(in);
    store_failures_free(rows, n);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "out of memory");
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < ng; i++)
        json_array_append_new(arr, group_json(&g[i]));
    failgroup_free(g, ng);
    return http_reply_json(
        c, MHD_HTTP_OK,
        json_pack("{s:I, s:o}", "window_jobs", (json_int_t)n, "groups", arr),
        NULL, NULL);
}
