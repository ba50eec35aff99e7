/*
 * http_filter.h - the one parser of a job filter (what GET /jobs, GET
 * /jobs/count and POST /jobs/bulk select), from a query string or from a
 * JSON object with the same names.
 *
 * Why one module: the dashboard's list, its count and its bulk actions must
 * select exactly the same jobs for the same filter; two parsers would drift.
 * The store_filter filled in borrows its strings from the source (the
 * request's arguments, or the JSON object), so it lives no longer than that.
 */
#ifndef RMQS_HTTP_FILTER_H
#define RMQS_HTTP_FILTER_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "rmqs.h"
#include "store.h"

/* Whether name is one of the filter's parameters (the query check). */
bool http_filter_is_param(const char *name);

/*
 * Fill *f from the query arguments of c (parameters not in the filter are
 * left alone: the caller checks for unknown ones). RMQS_EINVAL with
 * err->field naming the bad parameter.
 */
rmqs_rc http_filter_from_query(struct MHD_Connection *c, store_filter *f,
                               rmqs_error *err);

/*
 * Fill *f from obj (NULL: match all), a JSON object whose members have the
 * query's names and string values (limit/after are not filter members).
 * RMQS_EINVAL for a member that is not a filter parameter or not a string,
 * with err->field "filter.<name>".
 */
rmqs_rc http_filter_from_json(const json_t *obj, store_filter *f,
                              rmqs_error *err);

#endif
