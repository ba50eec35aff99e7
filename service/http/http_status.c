/*
 * http_status.c - GET /status: the one small answer the dashboard's trouble
 * banner reads on every page, and the overdue count GET /metrics shares.
 *
 * Why a room of its own: /readyz answers a load balancer (ready or not);
 * this tells a person what is wrong and since when. The broker's state,
 * since and error come from the dispatcher's publisher thread
 * (disp_broker_status), which notes each change as it happens. The
 * database's come from the same checks /readyz makes (store_ping and the
 * writer's disk-full reserve); they are noted here whenever /status,
 * /readyz or /metrics looks, so "since" is when this instance first saw
 * the state (a /status poll every few seconds makes that close).
 *
 * Overdue: pending jobs whose deliver_at is more than OVERDUE_MARGIN_MS in
 * the past, the number counted with store_count (status and deliver_at:
 * an index on both stores) up to OVERDUE_CAP, and the oldest one's
 * deliver_at from the first job of store_list's deliver_at order. A job
 * waiting for a retry or held back by a limit is pending too, and counts
 * once its deliver_at is past.
 */
#include "http_handlers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "procself.h"
#include "timeutil.h"
#include "writer.h"

void http_db_note(http_api_t *api, http_db_state state, const char *error)
{
    pthread_mutex_lock(&api->db_mu);
    if (state != api->db_state) {
        api->db_state = state;
        api->db_since_ms = tu_now_ms();
    }
    if (error != NULL)
        snprintf(api->db_error, sizeof(api->db_error), "%s", error);
    pthread_mutex_unlock(&api->db_mu);
}

http_db_state http_db_check(http_api_t *api)
{
    rmqs_rc rc = store_ping(api->st);
    char msg[128];

    if (rc != RMQS_OK) {
        snprintf(msg, sizeof(msg), "the database does not answer (%s)",
                 rmqs_rc_name(rc));
        http_db_note(api, HTTP_DB_DOWN, msg);
        return HTTP_DB_DOWN;
    }
    if (writer_disk_full(api->writer)) {
        http_db_note(api, HTTP_DB_FULL,
                     "disk nearly full: new jobs refused (stored jobs are "
                     "still delivered)");
        return HTTP_DB_FULL;
    }
    http_db_note(api, HTTP_DB_UP, NULL);
    return HTTP_DB_UP;
}

rmqs_rc http_overdue(http_api_t *api, int64_t now_ms, int64_t *count,
                     bool *capped, int64_t *oldest_ms)
{
    store_filter f = {.status = JOB_PENDING,
                      .source = -1,
                      .has_deliver_to = true,
                      .deliver_to = now_ms - OVERDUE_MARGIN_MS};
    job_t *jobs = NULL;
    size_t n = 0;
    char *next = NULL;
    rmqs_rc rc;

    *count = 0;
    *capped = false;
    *oldest_ms = -1;
    rc = store_count(api->st, &f, OVERDUE_CAP, count, capped);
    if (rc != RMQS_OK || *count == 0)
        return rc;
    rc = store_list(api->st, &f, 1, NULL, &jobs, &n, &next);
    if (rc == RMQS_OK && n > 0)
        *oldest_ms = jobs[0].deliver_at;
    for (size_t i = 0; i < n; i++)
        job_clear(&jobs[i]);
    free(jobs);
    free(next);
    return rc;
}

static json_t *time_or_null(int64_t ms)
{
    char t[TU_RFC3339_LEN + 1];

    if (ms < 0)
        return json_null();
    tu_format_rfc3339(ms, t);
    return json_string(t);
}

/* {"state", "since", "last_error"} */
static json_t *part_json(const char *state, int64_t since_ms, const char *error)
{
    return json_pack("{s:s, s:o, s:o}", "state", state, "since",
                     time_or_null(since_ms), "last_error",
                     error[0] ? http_safe_string(error) : json_null());
}

enum MHD_Result http_status_get(http_api_t *api, struct MHD_Connection *c)
{
    static const char *const allowed[] = {NULL};
    static const char *const db_names[] = {"up", "down", "full"};
    static const char *const broker_names[] = {"down", "up", "blocked"};
    const char *unknown = http_query_unknown(c, allowed);
    int64_t now = tu_now_ms(), count, oldest, since;
    bool capped;
    disp_broker_state bs;
    http_db_state ds;
    char berr[DISP_BROKER_ERROR_MAX], derr[sizeof(api->db_error)];
    char store_id[STORE_IDENTITY_MAX];
    procself ps;
    rmqs_error err = {0};
    json_t *root, *overdue, *broker, *db;

    if (unknown != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, unknown, "unknown query parameter");
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    disp_broker_status(api->disp, &bs, &since, berr);
    broker = part_json(broker_names[bs], since, berr);
    ds = http_db_check(api);
    pthread_mutex_lock(&api->db_mu);
    since = api->db_since_ms;
    memcpy(derr, api->db_error, sizeof(derr));
    pthread_mutex_unlock(&api->db_mu);
    db = part_json(db_names[ds], since, derr);
    if (ds != HTTP_DB_DOWN &&
        http_overdue(api, now, &count, &capped, &oldest) == RMQS_OK)
        overdue = json_pack(
            "{s:I, s:b, s:o, s:o}", "count", (json_int_t)count, "capped",
            capped, "oldest_due_at", time_or_null(oldest), "oldest_age_s",
            oldest >= 0 ? json_real((double)(now - oldest) / 1000.0)
                        : json_null());
    else /* unknown: the database cannot say */
        overdue = json_pack("{s:n, s:b, s:n, s:n}", "count", "capped", false,
                            "oldest_due_at", "oldest_age_s");
    root = json_pack("{s:o, s:o, s:o, s:b, s:{s:s}}", "broker", broker,
                     "database", db, "overdue", overdue, "trouble",
                     bs != DISP_BROKER_UP || ds != HTTP_DB_UP, "instance",
                     "version", RMQS_VERSION);
    if (root != NULL) {
        json_t *inst = json_object_get(root, "instance");
        if (procself_read(&ps))
            json_object_set_new(
                inst, "started_at",
                time_or_null((int64_t)(ps.start_time_s * 1000.0)));
        if (store_identity(api->st, store_id) == RMQS_OK)
            json_object_set_new(inst, "store", json_string(store_id));
    }
    return http_reply_json(c, MHD_HTTP_OK, root, NULL, NULL);
}
