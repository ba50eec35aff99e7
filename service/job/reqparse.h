/*
 * reqparse.h - the request-parsing kit: what job.c (POST /schedule, PATCH
 * and retry of a job), schedule.c (PUT and PATCH /schedules/{name}),
 * limit.c (PUT and PATCH /limits/{name}) and http_filter.c (the filter of
 * POST /jobs/bulk) share to read a client's
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
/* An AMQP short string (exchange, queue and header names, routing keys)
 * holds at most this many bytes. */
#define RP_SHORTSTR_MAX 255

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
 * A member v named field that must be an object (described by shape in
 * the message, e.g. "{\"skipped\", \"repeated\"}") whose keys are among
 * allowed[0..n). RMQS_EINVAL "<field>: must be an object <shape>" on
 * field, or "unknown field" on "<field>.<key>" (rp_known_keys).
 */
rmqs_rc rp_object(json_t *v, const char *field, const char *shape,
                  const char *const *allowed, size_t n, rmqs_error *err);

/*
 * A PATCH of a resource kept as a JSON object's text (a schedule's or a
 * limit's stored spec): buf[0..len) read as rp_parse_object does, and its
 * top-level members merged into spec: a member set to null is removed,
 * any other replaces the spec's whole (an object is not merged member by
 * member). *merged_out is the result and *patch_out (may be NULL) the
 * patch, new references; both NULL on failure: RMQS_EINVAL (the body's
 * fault as rp_parse_object says, or "internal: the stored spec is not a
 * JSON object") or RMQS_ENOMEM.
 */
rmqs_rc rp_merge_patch(const char *spec, const char *buf, size_t len,
                       json_t **patch_out, json_t **merged_out,
                       rmqs_error *err);

/*
 * Exactly one of the members a and b of obj: *va and *vb are borrowed (the
 * absent one NULL). Neither is RMQS_EINVAL on field a, "one of <a> or <b>
 * is required"; both, RMQS_EINVAL on field b, "only one of <a> or <b> may
 * be given".
 */
rmqs_rc rp_one_of(json_t *obj, const char *a, const char *b, json_t **va,
                  json_t **vb, rmqs_error *err);

/*
 * A short string member v (NULL: absent) named field in errors: a JSON
 * string of at most RP_SHORTSTR_MAX bytes, without control characters
 * (below 0x20, 0x7f) when forbid_control. *out is borrowed from v (NULL
 * when absent and not required). RMQS_EINVAL on field with "<field>:
 * required", "must be a string", "longer than 255 bytes" or "must not
 * contain control characters".
 */
rmqs_rc rp_short_string(json_t *v, const char *field, bool required,
                        bool forbid_control, const char **out, rmqs_error *err);

/* Whether s[0..len) holds a control character (below 0x20, or 0x7f). */
bool rp_has_control(const char *s, size_t len);

/* Whether name is a resource name (a schedule's, a limit's): 1 to max
 * bytes of [A-Za-z0-9._:-]. NULL is not. */
bool rp_name_valid(const char *name, size_t max);

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
