/*
 * http_bulk.c - POST /jobs/bulk (a bulk cancel or retry over a job filter)
 * and GET /jobs/bulk/{id} (its progress), in front of bulk.c.
 *
 * Why a room of its own: the request is small but has rules of its own
 * (the filter is parsed only by http_filter.c, from a copy the operation
 * keeps; an empty filter cancels nothing unless "all": true says so), and
 * the work is bulk.c's, on its thread, not this event loop's.
 */
#include "http_handlers.h"

#include <string.h>

#include "http_filter.h"
#include "log.h"

static bool filter_is_empty(const json_t *f)
{
    return f == NULL || json_object_size(f) == 0;
}

static enum MHD_Result h_submit(http_api_t *api, struct MHD_Connection *c,
                                http_req *rq)
{
    json_error_t jerr;
    json_t *root, *action, *filter, *all, *copy = NULL, *op;
    const char *key;
    json_t *value;
    rmqs_error err = {0};
    store_filter f;
    bulk_action a;
    char id[JOB_ID_LEN + 1], loc[sizeof("/jobs/bulk/") + JOB_ID_LEN];
    enum MHD_Result ret;
    rmqs_rc rc;

    if (!http_is_json_content(c))
        return http_reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                "unsupported_media_type", NULL,
                                "Content-Type must be application/json");
    if (rq->len > 0 && memchr(rq->body, '\0', rq->len) != NULL) {
        rmqs_fail(&err, RMQS_EINVAL, "", "request body contains a NUL byte");
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    root = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES,
                      &jerr);
    if (root == NULL || !json_is_object(root)) {
        rmqs_fail(&err, RMQS_EINVAL, "",
                  root == NULL ? "invalid JSON"
                               : "request body must be a JSON object");
        json_decref(root);
        return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
    }
    json_object_foreach(root, key, value) {
        if (strcmp(key, "action") != 0 && strcmp(key, "filter") != 0 &&
            strcmp(key, "all") != 0) {
            rmqs_fail(&err, RMQS_EINVAL, key, "unknown field");
            goto invalid;
        }
    }
    action = json_object_get(root, "action");
    filter = json_object_get(root, "filter");
    all = json_object_get(root, "all");
    if (!json_is_string(action) ||
        (strcmp(json_string_value(action), "cancel") != 0 &&
         strcmp(json_string_value(action), "retry") != 0)) {
        rmqs_fail(&err, RMQS_EINVAL, "action",
                  "action: \"cancel\" or \"retry\"");
        goto invalid;
    }
    a = strcmp(json_string_value(action), "cancel") == 0 ? BULK_CANCEL
                                                         : BULK_RETRY;
    if (filter != NULL && !json_is_object(filter)) {
        rmqs_fail(&err, RMQS_EINVAL, "filter", "filter: an object");
        goto invalid;
    }
    if (filter != NULL &&
        json_dumpb(filter, NULL, 0, JSON_COMPACT) > BULK_FILTER_MAX_BYTES) {
        rmqs_fail(&err, RMQS_EINVAL, "filter",
                  "filter: at most %d bytes as compact JSON",
                  BULK_FILTER_MAX_BYTES);
        goto invalid;
    }
    if (all != NULL && !json_is_boolean(all)) {
        rmqs_fail(&err, RMQS_EINVAL, "all", "all: a boolean");
        goto invalid;
    }
    if (a == BULK_CANCEL && filter_is_empty(filter) && !json_is_true(all)) {
        rmqs_fail(&err, RMQS_EINVAL, "filter",
                  "an empty filter matches every job: give \"all\": true to "
                  "cancel every pending job");
        goto invalid;
    }
    /* The operation keeps the copy; the filter's strings point into it. */
    copy = filter != NULL ? json_deep_copy(filter) : json_object();
    if (copy == NULL) {
        json_decref(root);
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    }
    if (http_filter_from_json(copy, &f, &err) != RMQS_OK) {
        json_decref(copy);
        goto invalid;
    }
    json_decref(root);
    if (api->opt.bulk == NULL)
        return http_reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable",
                                NULL, "bulk actions are not running");
    rc = bulk_submit(api->opt.bulk, a, copy, &f, id);
    if (rc == RMQS_ECONFLICT) {
        rmqs_fail(&err, rc, NULL, "bulk operation %s is running; one at a time",
                  id);
        return http_reply_rc(c, rc, &err, NULL);
    }
    if (rc != RMQS_OK)
        return http_reply_rc(c, rc, NULL, "cannot start the bulk operation");
    op = bulk_get_json(api->opt.bulk, id);
    if (op == NULL)
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    snprintf(loc, sizeof(loc), "/jobs/bulk/%s", id);
    ret = http_reply_json(c, MHD_HTTP_ACCEPTED, op, MHD_HTTP_HEADER_LOCATION,
                          loc);
    return ret;
invalid:
    json_decref(root);
    return http_reply_rc(c, RMQS_EINVAL, &err, NULL);
}

enum MHD_Result http_bulk(http_api_t *api, struct MHD_Connection *c,
                          const char *method, const char *id, http_req *rq)
{
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    json_t *op;

    if (id == NULL) {
        if (strcmp(method, "POST") != 0)
            return http_reply_error_h(
                c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", NULL,
                "method not allowed", MHD_HTTP_HEADER_ALLOW, "POST");
        return h_submit(api, c, rq);
    }
    if (!get)
        return http_reply_error_h(
            c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", NULL,
            "method not allowed", MHD_HTTP_HEADER_ALLOW, "GET");
    op = api->opt.bulk != NULL ? bulk_get_json(api->opt.bulk, id) : NULL;
    if (op == NULL)
        return http_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                                "no such bulk operation (kept in memory: the "
                                "last 100, until a restart)");
    return http_reply_json(c, MHD_HTTP_OK, op, NULL, NULL);
}
