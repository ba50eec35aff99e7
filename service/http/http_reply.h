/*
 * http_reply.h - the reply layer under the HTTP endpoints (http_reply.c
 * says why): the answers, the thread-local request state, the request
 * checks the endpoints share. It includes the layer's state
 * (http_internal.h).
 */
#ifndef RMQS_HTTP_REPLY_H
#define RMQS_HTTP_REPLY_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_internal.h"
#include "job_json.h"
#include "rmqs.h"

/* ---- responses ----------------------------------------------------------
 * Each queues one answer on c and returns libmicrohttpd's result. Extra
 * header pairs (h1, v1) may be NULL. */

/* resp_json (stolen, NULL: out of memory) as compact JSON with status. */
enum MHD_Result http_reply_json(struct MHD_Connection *c, unsigned status,
                                json_t *resp_json, const char *h1,
                                const char *v1);
/* {"error":{"code","message"[,"field"]}}; field NULL or "" leaves it out. */
enum MHD_Result http_reply_error(struct MHD_Connection *c, unsigned status,
                                 const char *code, const char *field,
                                 const char *message);
enum MHD_Result http_reply_error_h(struct MHD_Connection *c, unsigned status,
                                   const char *code, const char *field,
                                   const char *message, const char *h1,
                                   const char *v1);
/* A store/validation failure as its documented status and code; err (may
 * be NULL) gives field and message, what the message otherwise. */
enum MHD_Result http_reply_rc(struct MHD_Connection *c, rmqs_rc rc,
                              const rmqs_error *err, const char *what);
/* The JSON text in b (taken over: b is left empty) with status, the
 * Location of job_id if not NULL, and Preference-Applied if minimal. A
 * buffer that ran out of memory gives a 500. */
enum MHD_Result http_reply_buf(struct MHD_Connection *c, unsigned status,
                               job_buf *b, const char *job_id, bool minimal);
/* A JSON string of s (new reference), bytes that are not UTF-8 as '?'. */
json_t *http_safe_string(const char *s);

/* text (len bytes, malloc'd, taken over; NULL: a JSON 500) with
 * content_type and hdrs (NULL, or name/value pairs ended by a NULL name). */
enum MHD_Result http_reply_raw(struct MHD_Connection *c, unsigned status,
                               const char *content_type, char *text, size_t len,
                               const char *const *hdrs);

/* Whether the request carries the bearer token (true when none is set). */
bool http_authorized(http_api_t *api, struct MHD_Connection *c);

/* An answer without a body (204). */
enum MHD_Result http_reply_empty(struct MHD_Connection *c, unsigned status);

/* A request's handler begins on this thread for api: no status is noted
 * yet, and the answers say Connection: close while api is stopping. */
void http_reply_begin(http_api_t *api);
/* The status of the answer this thread queued since http_reply_begin, or
 * 0 if none. */
unsigned http_reply_status(void);

/* ---- request checks shared by the endpoints ----------------------------- */

/* Whether Content-Type is application/json (parameters allowed). */
bool http_is_json_content(struct MHD_Connection *c);
/* The first query argument not in allowed (NULL-terminated), or NULL. */
const char *http_query_unknown(struct MHD_Connection *c,
                               const char *const *allowed);
/* The same, with the job filter's parameters (http_filter.h) allowed too. */
const char *http_query_unknown_filter(struct MHD_Connection *c,
                                      const char *const *allowed);
/* The checks of a named resource's route (/schedules/{name},
 * /limits/{name}: PUT, GET, PATCH, DELETE) before its handler: another
 * method is 405 with Allow, a name that is not name_ok 400 (field name),
 * a PUT or PATCH without application/json 415. True when it answered
 * (*ret), false when the handler goes on. */
bool http_resource_refused(struct MHD_Connection *c, const char *method,
                           bool name_ok, enum MHD_Result *ret);
/* Whether --allow-exchanges lets a job publish to name. */
bool http_exchange_allowed(const http_api_t *api, const char *name);
/* 403 forbidden: the exchange `name` is not in the allowed list; field
 * names where the request gave it ("exchange", "jobs[3].exchange",
 * "job.exchange"). */
enum MHD_Result http_reply_forbidden_exchange(struct MHD_Connection *c,
                                              const char *field,
                                              const char *name);

/* The one reader of an integer query value (api/openapi.yaml's limit,
 * max, count and window): s as a decimal integer in [lo, hi] (0 <= lo,
 * hi < INT64_MAX / 10) into *out. ASCII digits only (no sign, no spaces,
 * not empty), and at most one digit more than hi has: a leading zero is
 * let through, a run of them is not. False (*out untouched) otherwise. */
bool http_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* The query argument key of c as http_parse_int reads it; true, *out
 * untouched, when the request has no such argument. */
bool http_query_int(struct MHD_Connection *c, const char *key, int64_t lo,
                    int64_t hi, int64_t *out);

#endif
