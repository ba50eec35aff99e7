/*
 * http_limits.c - the flow limit endpoints of the HTTP contract
 * (api/openapi.yaml; issue 23): PUT, GET, PATCH, DELETE /limits/{name} and
 * GET /limits.
 *
 * Why a room of its own: http_api.c is the transport, http_reply.c how an
 * answer is made, http_schedules.c the recurring schedules; this file is
 * what the API does with limits, in the schedules' way. Bodies are
 * validated by limit.c, rows are read and written through the store's
 * limit calls (store.h), and whoever applies the limits is told of every
 * change (http_api_options.limits_changed): this file keeps the resource,
 * the dispatcher's side applies it.
 *
 * A limit is answered as its canonical spec (limit.h: defaults filled in)
 * made again from the stored text by this binary's rules, with its name,
 * generation and times (RFC 3339 with milliseconds, as a schedule's). The
 * same body PUT again changes nothing (200, generation unchanged: the
 * store compares the canonical spec). A PUT that would create one limit
 * more than --max-limits is 409, as --max-schedules is for schedules; the
 * store counts in the transaction of the insert, so racing PUTs never pass
 * the cap. A PATCH is a compare-and-set on the generation it read,
 * retried a few times against concurrent changes, then 409.
 */
#include "http_handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"
#include "limit.h"
#include "log.h"
#include "schedule.h"
#include "timeutil.h"

#define MAX_LIMITS_DEFAULT 1000
#define PATCH_RETRIES 5
#define MOD "http"

static enum MHD_Result reply_not_found(struct MHD_Connection *c)
{
    return http_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                            "no such limit");
}

static void changed(http_api_t *api)
{
    if (api->opt.limits_changed != NULL)
        api->opt.limits_changed(api->opt.limits_cls);
}

/* How many pending jobs limit `name` holds now (a count capped at
 * HELD_COUNT_CAP), -1 if the store cannot say. */
int64_t http_limit_held_now(http_api_t *api, const char *name, bool *capped)
{
    store_filter f = {.status = JOB_PENDING, .source = -1, .held_by = name};
    int64_t n = -1;

    *capped = false;
    if (store_count(api->st, &f, HELD_COUNT_CAP, &n, capped) != RMQS_OK)
        return -1;
    return n;
}

/* What this instance's dispatcher did under the limit (flow_stats_of) and
 * what the limit holds now, as the representation's "stats"; NULL when the
 * dispatcher has not read the limit yet. */
static json_t *stats_json(http_api_t *api, const char *name)
{
    flow_limit_stats st;
    bool capped;
    int64_t held;

    if (!flow_stats_of(disp_flow(api->disp), name, tu_now_ms(), &st))
        return json_null();
    held = http_limit_held_now(api, name, &capped);
    return json_pack(
        "{s:o, s:b, s:I, s:I, s:I, s:I, s:I, s:f, s:{s:I, s:o, s:o}}",
        "held_now", held >= 0 ? json_integer(held) : json_null(),
        "held_now_capped", capped, "granted", (json_int_t)st.granted, "held",
        (json_int_t)st.held, "delayed", (json_int_t)st.delayed, "overflow",
        (json_int_t)st.overflow, "buckets", (json_int_t)st.buckets,
        "rate_per_s", st.rate_now, "wait_ms", "count",
        (json_int_t)st.wait_count, "p50",
        st.wait_p50_ms >= 0 ? json_integer(st.wait_p50_ms) : json_null(), "p99",
        st.wait_p99_ms >= 0 ? json_integer(st.wait_p99_ms) : json_null());
}

/* The representation of row (new reference, NULL on failure): the
 * canonical spec's members, name, generation, created_at, updated_at, and
 * this instance's stats. */
static json_t *limit_json(http_api_t *api, const store_limit *row)
{
    limit_t l;
    rmqs_error err = {0};
    char *spec = NULL;
    json_t *o;

    if (limit_from_request(row->name, row->spec, strlen(row->spec), &l, &spec,
                           &err) != RMQS_OK) {
        log_error(MOD, "stored limit spec does not parse",
                  "limit=\"%s\" error=\"%s\"", row->name, err.message);
        return NULL;
    }
    o = json_loads(spec, 0, NULL);
    if (o != NULL &&
        (json_object_set_new(o, "name", json_string(row->name)) != 0 ||
         json_object_set_new(o, "generation", json_integer(row->generation)) !=
             0 ||
         json_object_set_new(o, "created_at",
                             schedule_time_json(row->created_at)) != 0 ||
         json_object_set_new(o, "updated_at",
                             schedule_time_json(row->updated_at)) != 0 ||
         json_object_set_new(o, "stats", stats_json(api, row->name)) != 0)) {
        json_decref(o);
        o = NULL;
    }
    limit_clear(&l);
    free(spec);
    return o;
}

static enum MHD_Result reply_limit(http_api_t *api, struct MHD_Connection *c,
                                   unsigned status, const store_limit *row)
{
    json_t *o = limit_json(api, row);

    if (o == NULL)
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "cannot show the limit");
    return http_reply_json(c, status, o, NULL, NULL);
}

static enum MHD_Result h_put(http_api_t *api, struct MHD_Connection *c,
                             const char *name, http_req *rq)
{
    int64_t cap =
        api->opt.max_limits > 0 ? api->opt.max_limits : MAX_LIMITS_DEFAULT;
    limit_t l;
    store_limit row = {0};
    rmqs_error err = {0};
    char *spec = NULL;
    bool created = false, unchanged = false;
    enum MHD_Result ret;
    rmqs_rc rc;

    rc = limit_from_request(name, rq->body ? rq->body : "", rq->len, &l, &spec,
                            &err);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, &err, "invalid limit");
    limit_clear(&l);
    rc = store_limit_put(api->st, name, spec, tu_now_ms(), cap, &created,
                         &unchanged, &row);
    free(spec);
    if (rc == RMQS_ECONFLICT) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "the service keeps %lld limits, its --max-limits: delete "
                 "one or raise the limit",
                 (long long)cap);
        return http_reply_error(c, MHD_HTTP_CONFLICT, "conflict", NULL, msg);
    }
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot store the limit");
    if (!unchanged) {
        log_info(MOD, created ? "limit created" : "limit replaced",
                 "limit=\"%s\" generation=%lld", name,
                 (long long)row.generation);
        changed(api);
    }
    ret = reply_limit(api, c, created ? MHD_HTTP_CREATED : MHD_HTTP_OK, &row);
    store_limit_clear(&row);
    return ret;
}

static enum MHD_Result h_patch(http_api_t *api, struct MHD_Connection *c,
                               const char *name, http_req *rq)
{
    store_limit old = {0}, stored = {0};
    rmqs_error err = {0};
    enum MHD_Result ret;
    rmqs_rc rc = RMQS_ECONFLICT;

    for (int attempt = 0; attempt < PATCH_RETRIES && rc == RMQS_ECONFLICT;
         attempt++) {
        limit_t l;
        char *merged = NULL;

        store_limit_clear(&old);
        rc = store_limit_get(api->st, name, &old);
        if (rc != RMQS_OK)
            break;
        rc = limit_patch(name, old.spec, rq->body ? rq->body : "", rq->len, &l,
                         &merged, &err);
        if (rc != RMQS_OK) {
            ret = http_reply_rc(c, rc, &err, "invalid limit");
            goto out;
        }
        limit_clear(&l);
        if (strcmp(merged, old.spec) == 0) { /* nothing to change */
            free(merged);
            ret = reply_limit(api, c, MHD_HTTP_OK, &old);
            goto out;
        }
        store_limit_clear(&stored);
        rc = store_limit_update(api->st, name, merged, old.generation,
                                tu_now_ms(), &stored);
        free(merged);
    }
    if (rc == RMQS_ENOTFOUND) {
        ret = reply_not_found(c);
    } else if (rc != RMQS_OK) {
        ret = http_reply_rc(c, rc, NULL,
                            rc == RMQS_ECONFLICT ? "the limit kept changing "
                                                   "under this request: try "
                                                   "again"
                                                 : "cannot change the limit");
    } else {
        log_info(MOD, "limit changed", "limit=\"%s\" generation=%lld", name,
                 (long long)stored.generation);
        changed(api);
        ret = reply_limit(api, c, MHD_HTTP_OK, &stored);
    }
out:
    store_limit_clear(&old);
    store_limit_clear(&stored);
    return ret;
}

static enum MHD_Result h_delete(http_api_t *api, struct MHD_Connection *c,
                                const char *name)
{
    rmqs_rc rc = store_limit_delete(api->st, name);

    if (rc == RMQS_ENOTFOUND)
        return reply_not_found(c);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot delete the limit");
    log_info(MOD, "limit deleted", "limit=\"%s\"", name);
    changed(api);
    return http_reply_empty(c, MHD_HTTP_NO_CONTENT);
}

/* An unknown query parameter is a 400 naming it (none is known here). */
static bool query_refused(struct MHD_Connection *c, enum MHD_Result *ret)
{
    static const char *const allowed[] = {NULL};
    const char *unknown = http_query_unknown(c, allowed);

    if (unknown == NULL)
        return false;
    *ret = http_reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument",
                            unknown, "unknown query parameter");
    return true;
}

static enum MHD_Result h_get(http_api_t *api, struct MHD_Connection *c,
                             const char *name)
{
    store_limit row = {0};
    enum MHD_Result ret;
    rmqs_rc rc;

    if (query_refused(c, &ret))
        return ret;
    rc = store_limit_get(api->st, name, &row);
    if (rc == RMQS_ENOTFOUND)
        return reply_not_found(c);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot read the limit");
    ret = reply_limit(api, c, MHD_HTTP_OK, &row);
    store_limit_clear(&row);
    return ret;
}

enum MHD_Result http_limits_one(http_api_t *api, struct MHD_Connection *c,
                                const char *method, const char *name,
                                http_req *rq)
{
    bool put = strcmp(method, "PUT") == 0, patch = strcmp(method, "PATCH") == 0;
    enum MHD_Result ret;

    if (http_resource_refused(c, method, limit_name_valid(name), &ret))
        return ret;
    if (put)
        return h_put(api, c, name, rq);
    if (patch)
        return h_patch(api, c, name, rq);
    if (strcmp(method, "DELETE") == 0)
        return h_delete(api, c, name);
    return h_get(api, c, name);
}

enum MHD_Result http_limits_list(http_api_t *api, struct MHD_Connection *c)
{
    store_limit *rows = NULL;
    size_t n = 0;
    json_t *list;
    enum MHD_Result ret;
    rmqs_rc rc;

    if (query_refused(c, &ret))
        return ret;
    rc = store_limit_list(api->st, &rows, &n);
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot list the limits");
    list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        json_t *o = limit_json(api, &rows[i]);
        if (o == NULL || json_array_append_new(list, o) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    if (list == NULL)
        ret = http_reply_rc(c, RMQS_ENOMEM, NULL, "cannot list the limits");
    else
        ret = http_reply_json(c, MHD_HTTP_OK,
                              json_pack("{s:o}", "limits", list), NULL, NULL);
    store_limits_free(rows, n);
    return ret;
}
