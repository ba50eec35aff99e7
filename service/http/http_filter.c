/*
 * http_filter.c - parse a job filter from a query or a JSON object (see
 * http_filter.h). Both sources go through one lookup function, so a
 * parameter means the same in GET /jobs and in POST /jobs/bulk.
 */
#include "http_filter.h"

#include <string.h>

#include "job.h"
#include "reqparse.h"
#include "timeutil.h"
#include "utf8.h"

#define Q_MIN_CHARS 3   /* the trigram indexes need 3 characters */
#define Q_MAX_BYTES 256 /* a search, not a document */
#define ID_PREFIX_MIN 4

typedef const char *(*lookup_fn)(void *ctx, const char *name);

static const char *const params[] = {
    "status",     "source",    "message_id",  "schedule",
    "held_by",    "exchange",  "routing_key", "deliver_from",
    "deliver_to", "id_prefix", "header",      "q",
    NULL};

bool http_filter_is_param(const char *name)
{
    for (size_t i = 0; params[i] != NULL; i++)
        if (strcmp(params[i], name) == 0)
            return true;
    return false;
}

/* field for err: the bare name for a query, "filter.<name>" for JSON (cut
 * as every client-chosen key is, reqparse.h). */
static const char *field_of(bool json, const char *name,
                            char buf[RP_FIELD_MAX + 1])
{
    if (!json)
        return name;
    return rp_key_field(buf, "filter.", name);
}

/* An RFC 3339 instant into *ms (the parser of timeutil). */
static rmqs_rc parse_time(const char *v, bool *has, int64_t *ms)
{
    if (v == NULL)
        return RMQS_OK;
    if (tu_parse_rfc3339(v, strlen(v), ms) != RMQS_OK)
        return RMQS_EINVAL;
    *has = true;
    return RMQS_OK;
}

/* Hex digits of an id's start, dashes allowed anywhere, into out
 * (lowercase, no dashes): at least ID_PREFIX_MIN of them, at most a whole
 * id's. */
static rmqs_rc parse_id_prefix(const char *v, char out[STORE_ID_PREFIX_MAX + 1])
{
    size_t n = 0;

    for (const char *p = v; *p != '\0'; p++) {
        char ch = *p;
        if (ch == '-')
            continue;
        if (ch >= 'A' && ch <= 'F')
            ch = (char)(ch - 'A' + 'a');
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')) ||
            n == STORE_ID_PREFIX_MAX)
            return RMQS_EINVAL;
        out[n++] = ch;
    }
    out[n] = '\0';
    return n >= ID_PREFIX_MIN ? RMQS_OK : RMQS_EINVAL;
}

/* "name:value": the name before the first ':' (not empty), the value after
 * it (may be empty, may hold ':'). */
static rmqs_rc parse_header(const char *v, store_filter *f)
{
    const char *colon = strchr(v, ':');

    if (colon == NULL || colon == v || !utf8_text(v, strlen(v)))
        return RMQS_EINVAL;
    f->header_name = v;
    f->header_name_len = (size_t)(colon - v);
    f->header_value = colon + 1;
    return RMQS_OK;
}

/* Characters (code points) of valid UTF-8 s, or -1 if s is not valid. */
static long utf8_chars(const char *s, size_t n)
{
    long chars = 0;

    for (size_t i = 0; i < n; chars++) {
        size_t l = utf8_char_len(s + i, n - i);
        if (l == 0)
            return -1;
        i += l;
    }
    return chars;
}

/* The fields the search adds (issue 14), after the first four. */
static rmqs_rc parse_search(lookup_fn get, void *ctx, bool json,
                            store_filter *f, rmqs_error *err)
{
    const char *from = get(ctx, "deliver_from"), *to = get(ctx, "deliver_to");
    const char *idp = get(ctx, "id_prefix"), *header = get(ctx, "header");
    const char *q = get(ctx, "q");
    char field[RP_FIELD_MAX + 1];

    f->exchange = get(ctx, "exchange");
    f->routing_key = get(ctx, "routing_key");
    if (parse_time(from, &f->has_deliver_from, &f->deliver_from) != RMQS_OK)
        return rmqs_fail(err, RMQS_EINVAL,
                         field_of(json, "deliver_from", field),
                         "deliver_from: an RFC 3339 instant");
    if (parse_time(to, &f->has_deliver_to, &f->deliver_to) != RMQS_OK)
        return rmqs_fail(err, RMQS_EINVAL, field_of(json, "deliver_to", field),
                         "deliver_to: an RFC 3339 instant");
    if (idp != NULL && parse_id_prefix(idp, f->id_prefix) != RMQS_OK)
        return rmqs_fail(err, RMQS_EINVAL, field_of(json, "id_prefix", field),
                         "id_prefix: %d to %d hex digits of a job id (dashes "
                         "allowed)",
                         ID_PREFIX_MIN, STORE_ID_PREFIX_MAX);
    if (header != NULL && parse_header(header, f) != RMQS_OK)
        return rmqs_fail(
            err, RMQS_EINVAL, field_of(json, "header", field),
            "header: name:value (the name not empty; valid UTF-8)");
    if (q != NULL) {
        size_t n = strlen(q);
        long chars = utf8_chars(q, n);
        if (chars < Q_MIN_CHARS || n > Q_MAX_BYTES)
            return rmqs_fail(err, RMQS_EINVAL, field_of(json, "q", field),
                             "q: %d characters at least, %d bytes at most, "
                             "of valid UTF-8",
                             Q_MIN_CHARS, Q_MAX_BYTES);
        f->q = q;
    }
    return RMQS_OK;
}

static rmqs_rc parse(lookup_fn get, void *ctx, bool json, store_filter *f,
                     rmqs_error *err)
{
    const char *status = get(ctx, "status"), *source = get(ctx, "source");
    char field[RP_FIELD_MAX + 1];

    *f = (store_filter){.status = -1, .source = -1};
    f->message_id = get(ctx, "message_id");
    f->schedule = get(ctx, "schedule");
    f->held_by = get(ctx, "held_by");
    if (status != NULL) {
        job_status s;
        if (job_status_parse(status, &s) != RMQS_OK)
            return rmqs_fail(
                err, RMQS_EINVAL, field_of(json, "status", field),
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
            return rmqs_fail(err, RMQS_EINVAL, field_of(json, "source", field),
                             "source: http, amqp or schedule");
    }
    return parse_search(get, ctx, json, f, err);
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

rmqs_rc http_filter_from_json(const json_t *obj, store_filter *f,
                              rmqs_error *err)
{
    const char *key;
    json_t *v;
    char field[RP_FIELD_MAX + 1];

    if (obj == NULL || json_is_null(obj))
        return parse(from_json, NULL, true, f, err);
    if (!json_is_object(obj))
        return rmqs_fail(err, RMQS_EINVAL, "filter",
                         "filter: an object of GET /jobs query parameters");
    key = rp_unknown_key((json_t *)obj, params,
                         sizeof params / sizeof params[0] - 1, NULL);
    if (key != NULL)
        return rmqs_fail(err, RMQS_EINVAL, field_of(true, key, field),
                         "not a filter parameter");
    json_object_foreach((json_t *)obj, key, v) {
        if (!json_is_string(v))
            return rmqs_fail(err, RMQS_EINVAL, field_of(true, key, field),
                             "a filter value is a string, as in the query");
    }
    return parse(from_json, (void *)obj, true, f, err);
}
