/*
 * reqparse.h - the request-parsing kit: what job.c (POST /schedule, PATCH
 * and retry of a job), schedule.c (PUT and PATCH /schedules/{name}) and
 * http_filter.c (the filter of POST /jobs/bulk) share to read a client's
 * JSON and to name what is wrong with it.
 *
 * Why a module of its own: schedule.c once carried a copy of job.c's
 * helpers, and the copies drifted (one cut a field name inside a UTF-8
 * character, which jansson then refuses to encode in the answer). One kit
 * makes every parser answer alike: the same "invalid JSON" messages, the
 * same smallest-key-first rule, the same field names.
 *
 * Pure: no state; it allocates only the JSON it returns.
 */
#ifndef RMQS_REQPARSE_H
#define RMQS_REQPARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "rmqs.h"

/* What rmqs_error.field holds, without its NUL. */
#define RP_FIELD_MAX (sizeof((rmqs_error *)0)->field - 1)

/* RMQS_ENOMEM with field "" and "out of memory". */
rmqs_rc rp_fail_nomem(rmqs_error *err);

/*
 * Parse buf[0..len) (buf may be NULL only when len is 0) into a JSON
 * object: duplicate keys and raw NUL bytes are refused, a value that is not
 * an object too. On success *root_out is a new reference; otherwise NULL,
 * and RMQS_EINVAL (or RMQS_ENOMEM) with err's message starting "invalid
 * JSON" or "request body ...".
 */
rmqs_rc rp_parse_object(const char *buf, size_t len, json_t **root_out,
                        rmqs_error *err);

/* The smallest key of obj (byte order) that is neither among
 * allowed[0..n) nor, when known is not NULL, one known() says yes to; NULL
 * if there is none. The answer does not depend on jansson's hash order.
 * Borrowed from obj. */
const char *rp_unknown_key(json_t *obj, const char *const *allowed, size_t n,
                           bool (*known)(const char *key));

/* RMQS_OK if every key of obj is among allowed[0..n); else RMQS_EINVAL,
 * "unknown field", on the field prefix + the smallest other key. */
rmqs_rc rp_known_keys(json_t *obj, const char *prefix,
                      const char *const *allowed, size_t n, rmqs_error *err);

/*
 * Exactly one of the members a and b of obj: *va and *vb are borrowed (the
 * absent one NULL). Neither is RMQS_EINVAL on field a, "one of <a> or <b>
 * is required"; both, RMQS_EINVAL on field b, "only one of <a> or <b> may
 * be given".
 */
rmqs_rc rp_one_of(json_t *obj, const char *a, const char *b, json_t **va,
                  json_t **vb, rmqs_error *err);

/*
 * The field name for a client-chosen key: prefix + key, cut so that it fits
 * rmqs_error.field (63 bytes) and at a UTF-8 character boundary. The field
 * and the messages built from it go into JSON answers; a name cut inside a
 * multi-byte character would make them invalid UTF-8, which jansson refuses
 * to encode (the answer became a 500, or lost its "field" or, in a batch,
 * the item's error). key is valid UTF-8 (jansson checked it). Returns out.
 */
const char *rp_key_field(char out[RP_FIELD_MAX + 1], const char *prefix,
                         const char *key);

#endif
