/*
 * http_filter.c - parse a job filter from a query or a JSON object (see
 * http_filter.h). Both sources go through one lookup function, so a
 * parameter means the same in GET /jobs and in POST /jobs/bulk.
 */
#include "http_filter.h"

#include <stdio.h>
#include <string.h>

#include "job.h"

typedef const char *(*lookup_fn)(void *ctx, const char *name);

static const char *const params[] = {"status", "source", "message_id", "schedule",
                                     NULL};

bool http_filter_is_param(const char *name)
{
    for (size_t i = 0; params[i] != NULL; i++)
        if (strcmp(params[i], name) == 0)
            return true;
    return false;
}

/* field for err: the bare name for a query, "filter.<name>" for JSON. */
static const char *field_of(bool json, const char *name, char *buf, size_t size)
{
    if (!json)
        return name;
    snprintf(buf, size, "filter.%s", name);
    return buf;
}

static rmqs_rc parse(lookup_fn get, void *ctx, bool json, store_filter *f,
                     rmqs_error *err)
{
    const char *status = get(ctx, "status"), *source = get(ctx, "source");
    char field[64];

    *f = (store_filter){.status = -1, .source = -1};
    f->message_id = get(ctx, "message_id");
    f->schedule = get(ctx, "schedule");
    if (status != NULL) {
        job_status s;
        if (job_status_parse(status, &s) != RMQS_OK)
            return rmqs_fail(err, RMQS_EINVAL, field_of(json, "status", field,
                                                         sizeof field),
                             "status: one of pending, publishing, sent, failed, "
                             "cancelled");
        f->status = (int)s;
    }
    if (source != NULL) {
        if (strcmp(source, "http") == 0)
            f->source = JOB_SOURCE_HTTP;
        else if (strcmp(source, "amqp") == 0)
            f->source = JOB_SOURCE_AMQP;
        else if (strcmp(source, "schedule") == 0)
            f->source = JOB_SOURCE_SCHEDULE;
        else
            return rmqs_fail(err, RMQS_EINVAL, field_of(json, "source", field,
                                                         sizeof field),
                             "source: http, amqp or schedule");
    }
    return RMQS_OK;
}

static const char *from_query(void *ctx, const char *name)
{
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

rmqs_rc http_filter_from_query(struct MHD_Connection *c, store_filter *f,
                               rmqs_error *err)
{
    return parse(from_query, c, false, f, err);
}

static const char *from_json(void *ctx, const char *name)
{
    return json_string_value(json_object_get(ctx, name));
}

rmqs_rc http_filter_from_json(const json_t *obj, store_filter *f, rmqs_error *err)
{
    const char *key;
    json_t *v;
    char field[64];

    if (obj == NULL || json_is_null(obj))
        return parse(from_json, NULL, true, f, err);
    if (!json_is_object(obj))
        return rmqs_fail(err, RMQS_EINVAL, "filter",
                         "filter: an object of GET /jobs query parameters");
    json_object_foreach((json_t *)obj, key, v) {
        if (!http_filter_is_param(key))
            return rmqs_fail(err, RMQS_EINVAL, field_of(true, key, field, sizeof field),
                             "not a filter parameter");
        if (!json_is_string(v))
            return rmqs_fail(err, RMQS_EINVAL, field_of(true, key, field, sizeof field),
                             "a filter value is a string, as in the query");
    }
    return parse(from_json, (void *)obj, true, f, err);
}
