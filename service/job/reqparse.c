/*
 * reqparse.c - the helpers every request parser shares (see reqparse.h):
 * reading a body into a JSON object, naming the smallest unknown key,
 * exactly one of two members, short strings, resource names, and turning
 * a client-chosen key into an error's field.
 */
#include "reqparse.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

rmqs_rc rp_fail_nomem(rmqs_error *err)
{
    return rmqs_fail(err, RMQS_ENOMEM, "", "out of memory");
}

static bool in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, list[i]) == 0)
            return true;
    return false;
}

const char *rp_unknown_key(json_t *obj, const char *const *allowed, size_t n,
                           bool (*known)(const char *key))
{
    const char *key, *found = NULL;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (!in_list(key, allowed, n) && (known == NULL || !known(key)) &&
            (found == NULL || strcmp(key, found) < 0))
            found = key;
    }
    return found;
}

rmqs_rc rp_known_keys(json_t *obj, const char *prefix,
                      const char *const *allowed, size_t n, rmqs_error *err)
{
    char field[RP_FIELD_MAX + 1];
    const char *unknown = rp_unknown_key(obj, allowed, n, NULL);

    if (unknown == NULL)
        return RMQS_OK;
    return rmqs_fail(err, RMQS_EINVAL, rp_key_field(field, prefix, unknown),
                     "unknown field");
}

rmqs_rc rp_object(json_t *v, const char *field, const char *shape,
                  const char *const *allowed, size_t n, rmqs_error *err)
{
    char prefix[RP_FIELD_MAX + 1];

    if (!json_is_object(v))
        return rmqs_fail(err, RMQS_EINVAL, field, "%s: must be an object %s",
                         field, shape);
    snprintf(prefix, sizeof prefix, "%s.", field);
    return rp_known_keys(v, prefix, allowed, n, err);
}

rmqs_rc rp_merge_patch(const char *spec, const char *buf, size_t len,
                       json_t **patch_out, json_t **merged_out, rmqs_error *err)
{
    json_t *patch = NULL, *merged = NULL, *v;
    const char *key;
    rmqs_rc rc;

    *merged_out = NULL;
    if (patch_out != NULL)
        *patch_out = NULL;
    rc = rp_parse_object(buf, len, &patch, err);
    if (rc != RMQS_OK)
        return rc;
    merged = json_loads(spec != NULL ? spec : "", 0, NULL);
    if (!json_is_object(merged)) {
        rc = rmqs_fail(err, RMQS_EINVAL, "",
                       "internal: the stored spec is not a JSON object");
        goto fail;
    }
    json_object_foreach(patch, key, v) {
        if (json_is_null(v))
            json_object_del(merged, key);
        else if (json_object_set(merged, key, v) != 0) {
            rc = rp_fail_nomem(err);
            goto fail;
        }
    }
    *merged_out = merged;
    if (patch_out != NULL)
        *patch_out = patch;
    else
        json_decref(patch);
    return RMQS_OK;
fail:
    json_decref(patch);
    json_decref(merged);
    return rc;
}

rmqs_rc rp_one_of(json_t *obj, const char *a, const char *b, json_t **va,
                  json_t **vb, rmqs_error *err)
{
    *va = json_object_get(obj, a);
    *vb = json_object_get(obj, b);
    if (*va == NULL && *vb == NULL)
        return rmqs_fail(err, RMQS_EINVAL, a, "one of %s or %s is required", a,
                         b);
    if (*va != NULL && *vb != NULL)
        return rmqs_fail(err, RMQS_EINVAL, b,
                         "only one of %s or %s may be given", a, b);
    return RMQS_OK;
}

bool rp_has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return true;
    }
    return false;
}

rmqs_rc rp_short_string(json_t *v, const char *field, bool required,
                        bool forbid_control, const char **out, rmqs_error *err)
{
    size_t len;

    *out = NULL;
    if (v == NULL) {
        if (required)
            return rmqs_fail(err, RMQS_EINVAL, field, "%s: required", field);
        return RMQS_OK;
    }
    if (!json_is_string(v))
        return rmqs_fail(err, RMQS_EINVAL, field, "%s: must be a string",
                         field);
    len = json_string_length(v);
    if (len > RP_SHORTSTR_MAX)
        return rmqs_fail(err, RMQS_EINVAL, field, "%s: longer than %d bytes",
                         field, RP_SHORTSTR_MAX);
    if (forbid_control && rp_has_control(json_string_value(v), len))
        return rmqs_fail(err, RMQS_EINVAL, field,
                         "%s: must not contain control characters", field);
    *out = json_string_value(v);
    return RMQS_OK;
}

bool rp_name_valid(const char *name, size_t max)
{
    size_t n = name != NULL ? strlen(name) : 0;

    if (n < 1 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
              c == '-'))
            return false;
    }
    return true;
}

const char *rp_key_field(char out[RP_FIELD_MAX + 1], const char *prefix,
                         const char *key)
{
    size_t plen = strlen(prefix), klen = strlen(key);
    size_t room = plen < RP_FIELD_MAX ? RP_FIELD_MAX - plen : 0;
    if (klen > room) {
        klen = room;
        while (klen > 0 && ((unsigned char)key[klen] & 0xC0) == 0x80)
            klen--; /* key[klen] continues a character: cut before it */
    }
    /* memcpy, not snprintf: GCC 12 at -O2 cannot see that klen fits and
     * calls the inlined snprintf a truncation (-Wformat-truncation) */
    if (plen > RP_FIELD_MAX)
        plen = RP_FIELD_MAX;
    memcpy(out, prefix, plen);
    memcpy(out + plen, key, klen); /* klen <= room: it fits */
    out[plen + klen] = '\0';
    return out;
}

rmqs_rc rp_parse_object(const char *buf, size_t len, json_t **root_out,
                        rmqs_error *err)
{
    json_error_t jerr;
    *root_out = NULL;
    if (buf == NULL && len > 0)
        return rmqs_fail(err, RMQS_EINVAL, "", "request body missing");
    /* A raw NUL is never valid JSON text, but jansson 2.14 skips one that
     * directly follows a number or a literal ({"delay_ms":1\0} parses as
     * {"delay_ms":1}): refuse it before parsing. */
    const char *nul = len > 0 ? memchr(buf, '\0', len) : NULL;
    if (nul != NULL)
        return rmqs_fail(err, RMQS_EINVAL, "",
                         "invalid JSON: NUL byte at offset %zu",
                         (size_t)(nul - buf));
    json_t *root =
        json_loadb(buf != NULL ? buf : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return rp_fail_nomem(err);
        /* jansson quotes the input "near" the error, and may cut it inside a
         * character: '"\u00e' then the first byte of a 2-byte character
         * (found by fuzzing; the answer became a 500). */
        utf8_sanitize(jerr.text);
        return rmqs_fail(err, RMQS_EINVAL, "",
                         "invalid JSON: %s (line %d, column %d)", jerr.text,
                         jerr.line, jerr.column);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return rmqs_fail(err, RMQS_EINVAL, "",
                         "request body must be a JSON object");
    }
    *root_out = root;
    return RMQS_OK;
}
