/*
 * amqp_message.c - the property and header names of a job's AMQP message,
 * and the one calculator of the bytes they take (see amqp_message.h).
 *
 * Why: job.c refuses, at POST time, a job whose properties would not fit in
 * one content-header frame, and the publisher checks the same frame against
 * the broker's frame_max before it sends. Both used to count on their own;
 * now both call amqpm_encoded_size(), which counts exactly what
 * amqpm_build() (amqp_message_build.c) puts on the wire.
 */
#include "amqp_message.h"

#include <string.h>

#include "timeutil.h"

#define P(field) offsetof(amqp_basic_properties_t, field)

const amqpm_str_prop amqpm_str_props[] = {
    {"content_type", AMQP_BASIC_CONTENT_TYPE_FLAG, P(content_type)},
    {"content_encoding", AMQP_BASIC_CONTENT_ENCODING_FLAG, P(content_encoding)},
    {"correlation_id", AMQP_BASIC_CORRELATION_ID_FLAG, P(correlation_id)},
    {"reply_to", AMQP_BASIC_REPLY_TO_FLAG, P(reply_to)},
    {"message_id", AMQP_BASIC_MESSAGE_ID_FLAG, P(message_id)},
    {"type", AMQP_BASIC_TYPE_FLAG, P(type)},
    {"app_id", AMQP_BASIC_APP_ID_FLAG, P(app_id)},
    {"user_id", AMQP_BASIC_USER_ID_FLAG, P(user_id)},
    {"expiration", AMQP_BASIC_EXPIRATION_FLAG, P(expiration)},
};

const size_t amqpm_n_str_props =
    sizeof amqpm_str_props / sizeof amqpm_str_props[0];

static const char *const reserved_headers[] = {
    AMQPM_HDR_JOB_ID, AMQPM_HDR_SCHEDULED_AT, AMQPM_HDR_DELAY,
    AMQPM_HDR_SCHEDULE, AMQPM_HDR_FIRE_TIME};

amqp_bytes_t *amqpm_str_prop_field(amqp_basic_properties_t *props, size_t i)
{
    return (amqp_bytes_t *)(void *)((char *)props + amqpm_str_props[i].offset);
}

const amqp_bytes_t *amqpm_str_prop_cfield(const amqp_basic_properties_t *props,
                                          size_t i)
{
    return (const amqp_bytes_t *)(const void *)((const char *)props +
                                                amqpm_str_props[i].offset);
}

bool amqpm_property_known(const char *name)
{
    if (strcmp(name, AMQPM_PROP_PRIORITY) == 0 ||
        strcmp(name, AMQPM_PROP_PERSISTENT) == 0)
        return true;
    for (size_t i = 0; i < amqpm_n_str_props; i++) {
        if (strcmp(name, amqpm_str_props[i].name) == 0)
            return true;
    }
    return false;
}

bool amqpm_expiration_valid(json_t *v)
{
    size_t len = json_string_length(v); /* 0 if not a string */
    unsigned long long ms = 0;

    if (!json_is_string(v) || len < 1 || len > 10)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = json_string_value(v)[i];
        if (c < '0' || c > '9')
            return false;
        ms = ms * 10 + (unsigned long long)(c - '0');
    }
    return ms <= AMQPM_EXPIRATION_MAX;
}

bool amqpm_reserved_header(const char *name)
{
    for (size_t i = 0; i < sizeof reserved_headers / sizeof reserved_headers[0];
         i++) {
        if (strcmp(name, reserved_headers[i]) == 0)
            return true;
    }
    return false;
}

bool amqpm_broker_refused_header(const char *name)
{
    /* RabbitMQ 3.x: 406 PRECONDITION_FAILED - invalid message:
     * {unacceptable_type_in_header,"CC",longstr} (case-sensitive names) */
    return strcmp(name, "CC") == 0 || strcmp(name, "BCC") == 0;
}

/* A field value: its kind byte and what follows it. */
static size_t value_size(json_t *v)
{
    const char *key;
    json_t *x;
    size_t size = 1, i;

    switch (json_typeof(v)) {
    case JSON_STRING: return size + 4 + json_string_length(v);
    case JSON_INTEGER:
    case JSON_REAL: return size + 8;
    case JSON_TRUE:
    case JSON_FALSE: return size + 1;
    case JSON_NULL: return size;
    case JSON_OBJECT:
        size += 4;
        json_object_foreach(v, key, x) {
            size += 1 + strlen(key) + value_size(x);
        }
        return size;
    case JSON_ARRAY:
        size += 4;
        json_array_foreach(v, i, x) {
            size += value_size(x);
        }
        return size;
    }
    return size;
}

size_t amqpm_encoded_size(json_t *headers, json_t *props, size_t id_len)
{
    const char *key;
    json_t *v;
    size_t size = 2 + 1; /* property flags, delivery_mode */

    for (size_t i = 0; i < amqpm_n_str_props; i++) {
        v = props != NULL ? json_object_get(props, amqpm_str_props[i].name)
                          : NULL;
        if (json_is_string(v)) {
            size += 1 + json_string_length(v);
        }
    }
    if (props == NULL || !json_is_string(json_object_get(props, "message_id")))
        size += 1 + id_len;
    if (props != NULL && json_object_get(props, AMQPM_PROP_PRIORITY) != NULL)
        size += 1;

    size += 4; /* the header table's length */
    size += 1 + strlen(AMQPM_HDR_JOB_ID) + 1 + 4 + id_len;
    size += 1 + strlen(AMQPM_HDR_SCHEDULED_AT) + 1 + 4 + TU_RFC3339_LEN;
    /* x-delay may go out as a 32-bit integer; count the 64-bit most (a
     * PATCH may also lengthen the delay after the POST's check). */
    size += 1 + strlen(AMQPM_HDR_DELAY) + 1 + 8;
    if (headers != NULL) {
        json_object_foreach(headers, key, v) {
            if (!amqpm_reserved_header(key))
                size += 1 + strlen(key) + value_size(v);
        }
    }
    return size;
}
