/*
 * http_reply.c - the reply layer under the HTTP endpoints: how an answer is
 * made, and the checks of a request that the endpoints share.
 *
 * Why a module of its own: every answer, from the router and from every
 * endpoint, goes out through respond(), the one place a response is made,
 * given its headers and queued; errors all have one shape, {"error":
 * {"code", "message", "field"}}, and an rmqs_rc one HTTP status
 * (http_reply_rc). It sits below the endpoints and calls none of them, so
 * the router above can call both.
 *
 * The thread-local request state is the status of the answer queued (the
 * router notes it for metrics) and the API the thread serves, so that
 * answers say Connection: close while it stops. Request checks: the
 * bearer token, the JSON content type, a named resource's method, name
 * and media type, unknown query arguments, integer query values
 * (http_parse_int, the one reader of limit, max, count and window) and
 * --allow-exchanges.
 */
#include "http_reply.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_filter.h"

/* The status of the response this thread queued last (for metrics). */
static __thread unsigned tl_status;
/* The API whose handler runs on this thread (set by http_reply_begin, which
 * the router calls), so that respond() can tell a stopping service's
 * clients to go away. */
static __thread http_api_t *tl_api;

/* ---- responses --------------------------------------------------------- */

#define CONTENT_JSON "application/json"
/* The answer to Prefer: return=minimal says it was honoured (RFC 7240). */
#define PREFERENCE_APPLIED "Preference-Applied"

/*
 * The one path that queues an answer. text (len bytes, malloc'd) is taken
 * over, also on failure; NULL means it could not be made, and a JSON 500
 * goes out instead. hdrs: NULL, or name/value pairs ended by a NULL name,
 * added after Content-Type. Notes the status for metrics.
 */
static enum MHD_Result respond(struct MHD_Connection *c, unsigned status,
                               const char *content_type, char *text, size_t len,
                               const char *const *hdrs)
{
    static const char oom[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (text == NULL) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        content_type = CONTENT_JSON;
        r = MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom,
                                            MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    }
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    for (; hdrs != NULL && hdrs[0] != NULL; hdrs += 2)
        MHD_add_response_header(r, hdrs[0], hdrs[1]);
    /* Stopping: a keep-alive client sends its next request elsewhere
     * rather than into a connection that is about to close. */
    if (tl_api != NULL && atomic_load(&tl_api->stopping))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        tl_status = status;
    return ret;
}

void http_reply_begin(http_api_t *api)
{
    tl_status = 0;
    tl_api = api;
}

unsigned http_reply_status(void)
{
    return tl_status;
}

enum MHD_Result http_reply_raw(struct MHD_Connection *c, unsigned status,
                               const char *content_type, char *text, size_t len,
                               const char *const *hdrs)
{
    return respond(c, status, content_type, text, len, hdrs);
}

enum MHD_Result http_reply_json(struct MHD_Connection *c, unsigned status,
                                json_t *resp_json, const char *h1,
                                const char *v1)
{
    const char *hdrs[] = {h1, v1, NULL};
    char *text = NULL;

    if (resp_json != NULL)
        text = json_dumps(resp_json, JSON_COMPACT);
    json_decref(resp_json);
    return respond(c, status, CONTENT_JSON, text,
                   text != NULL ? strlen(text) : 0, hdrs);
}

json_t *http_safe_string(const char *s)
{
    json_t *v = json_string(s);
    char *copy;

    if (v != NULL)
        return v;
    copy = strdup(s);
    if (copy == NULL)
        return NULL;
    for (char *p = copy; *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    v = json_string(copy);
    free(copy);
    return v;
}

enum MHD_Result http_reply_error_h(struct MHD_Connection *c, unsigned status,
                                   const char *code, const char *field,
                                   const char *message, const char *h1,
                                   const char *v1)
{
    json_t *e = json_pack("{s:s, s:o}", "code", code, "message",
                          http_safe_string(message));
    if (e != NULL && field != NULL && *field != '\0')
        json_object_set_new(e, "field", http_safe_string(field));
    return http_reply_json(c, status, e ? json_pack("{s:o}", "error", e) : NULL,
                           h1, v1);
}

enum MHD_Result http_reply_error(struct MHD_Connection *c, unsigned status,
                                 const char *code, const char *field,
                                 const char *message)
{
    return http_reply_error_h(c, status, code, field, message, NULL, NULL);
}

enum MHD_Result http_reply_rc(struct MHD_Connection *c, rmqs_rc rc,
                              const rmqs_error *err, const char *what)
{
    const char *field = err != NULL ? err->field : NULL;
    const char *msg = err != NULL && err->message[0] ? err->message : what;

    switch (rc) {
    case RMQS_EINVAL:
        return http_reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_argument",
                                field, msg);
    case RMQS_ENOTFOUND:
        return http_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                                "no such job");
    case RMQS_ECONFLICT:
        return http_reply_error(c, MHD_HTTP_CONFLICT, "conflict", NULL, msg);
    case RMQS_EFULL:
        return http_reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "storage_full",
                                NULL,
                                "the database is full; nothing was stored");
    case RMQS_EDB:
        return http_reply_error(
            c, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable", NULL,
            "the database is unavailable; nothing was stored");
    case RMQS_ETIMEDOUT:
        return http_reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                                "search_timeout", NULL,
                                "the search ran past its time budget "
                                "(--search-timeout-ms): narrow it (a status, "
                                "an exchange, a due range, a shorter page)");
    default:
        return http_reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                NULL, "internal error");
    }
}

enum MHD_Result http_reply_empty(struct MHD_Connection *c, unsigned status)
{
    char *text = malloc(1);

    if (text != NULL)
        text[0] = '\0';
    return respond(c, status, CONTENT_JSON, text, 0, NULL);
}

enum MHD_Result http_reply_buf(struct MHD_Connection *c, unsigned status,
                               job_buf *b, const char *job_id, bool minimal)
{
    char loc[sizeof("/jobs/") + JOB_ID_LEN];
    const char *hdrs[5];
    size_t k = 0;
    char *text = b->data;
    size_t len = b->len;

    if (b->oom || b->data == NULL) {
        job_buf_free(b);
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    }
    memset(b, 0, sizeof(*b)); /* respond() owns the text now */
    if (job_id != NULL) {
        snprintf(loc, sizeof(loc), "/jobs/%.36s", job_id);
        hdrs[k++] = MHD_HTTP_HEADER_LOCATION;
        hdrs[k++] = loc;
    }
    if (minimal) {
        hdrs[k++] = PREFERENCE_APPLIED;
        hdrs[k++] = "return=minimal";
    }
    hdrs[k] = NULL;
    return respond(c, status, CONTENT_JSON, text, len, hdrs);
}

/* ---- request checks ----------------------------------------------------- */

/* Compare in time that depends only on the expected token's length. */
static bool token_matches(const char *given, const char *expected)
{
    size_t gl = strlen(given), el = strlen(expected);
    unsigned char diff = gl != el;

    for (size_t i = 0; i < el; i++)
        diff |= (unsigned char)(expected[i] ^ given[i < gl ? i : 0]);
    return diff == 0;
}

bool http_authorized(http_api_t *api, struct MHD_Connection *c)
{
    const char *h;

    if (api->token == NULL)
        return true;
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_AUTHORIZATION);
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    return token_matches(h, api->token);
}

bool http_is_json_content(struct MHD_Connection *c)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t n = strlen("application/json");

    if (ct == NULL)
        return false;
    while (*ct == ' ')
        ct++;
    if (strncasecmp(ct, "application/json", n) != 0)
        return false;
    ct += n;
    while (*ct == ' ')
        ct++;
    return *ct == '\0' || *ct == ';';
}

bool http_resource_refused(struct MHD_Connection *c, const char *method,
                           bool name_ok, enum MHD_Result *ret)
{
    bool change = strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0;

    if (!change && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
        strcmp(method, "DELETE") != 0)
        *ret = http_reply_error_h(c, MHD_HTTP_METHOD_NOT_ALLOWED,
                                  "method_not_allowed", NULL,
                                  "method not allowed", MHD_HTTP_HEADER_ALLOW,
                                  "PUT, GET, PATCH, DELETE");
    else if (!name_ok)
        *ret = http_reply_error(
            c, MHD_HTTP_BAD_REQUEST, "invalid_argument", "name",
            "name: 1 to 200 characters of A-Z a-z 0-9 . _ : -");
    else if (change && !http_is_json_content(c))
        *ret = http_reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                "unsupported_media_type", NULL,
                                "Content-Type must be application/json");
    else
        return false;
    return true;
}

/* Collect query arguments not in allowed[] (first one wins). */
typedef struct query_check {
    const char *const *allowed;
    bool filter; /* the job filter's parameters are allowed too */
    const char *unknown;
} query_check;

static enum MHD_Result query_visit(void *cls, enum MHD_ValueKind kind,
                                   const char *key, const char *value)
{
    query_check *q = cls;
    if (q->filter && http_filter_is_param(key))
        return MHD_YES;
    for (const char *const *a = q->allowed; *a != NULL; a++)
        if (strcmp(*a, key) == 0)
            return MHD_YES;
    if (q->unknown == NULL)
        q->unknown = key;
    return MHD_YES;
}

const char *http_query_unknown(struct MHD_Connection *c,
                               const char *const *allowed)
{
    query_check q = {allowed, false, NULL};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_visit, &q);
    return q.unknown;
}

const char *http_query_unknown_filter(struct MHD_Connection *c,
                                      const char *const *allowed)
{
    query_check q = {allowed, true, NULL};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_visit, &q);
    return q.unknown;
}

bool http_exchange_allowed(const http_api_t *api, const char *name)
{
    return pubpol_exchange_allowed(api->policy, name);
}

enum MHD_Result http_reply_forbidden_exchange(struct MHD_Connection *c,
                                              const char *field,
                                              const char *name)
{
    char msg[320];

    snprintf(msg, sizeof(msg), "exchange '%.255s' is not in the allowed list",
             name);
    return http_reply_error(c, MHD_HTTP_FORBIDDEN, "forbidden", field, msg);
}

bool http_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    size_t digits = 1, i = 0;
    int64_t v = 0;

    for (int64_t m = hi; m >= 10; m /= 10)
        digits++;
    for (; s[i] >= '0' && s[i] <= '9' && i <= digits; i++)
        v = v * 10 + (s[i] - '0');
    if (i == 0 || s[i] != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool http_query_int(struct MHD_Connection *c, const char *key, int64_t lo,
                    int64_t hi, int64_t *out)
{
    const char *s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);

    return s == NULL || http_parse_int(s, lo, hi, out);
}
