/*
 * amqp_message_build.c - a job's AMQP message: its basic properties and
 * header table, built as amqp_message.h's table names them (see
 * amqpm_build there).
 *
 * Why apart from amqp_message.c: the names and the size calculator are
 * pure and fuzzed with job.c without rabbitmq-c's library; building takes
 * tables from a rabbitmq-c pool. Both halves speak of the same message
 * through one header, so what the publisher sends is what job.c counted.
 */
#include "amqp_message.h"

#include <stdint.h>
#include <string.h>

#include "job.h"
#include "timeutil.h"

#define HEADER_PAYLOAD_FIXED 14 /* class, weight, body size, flags */
#define MAX_HEADER_DEPTH 8      /* nested tables/arrays in headers */

static rmqs_rc build_value(amqp_pool_t *pool, json_t *v,
                           amqp_field_value_t *out, int depth, rmqs_error *err);

static rmqs_rc build_table(amqp_pool_t *pool, json_t *obj, amqp_table_t *out,
                           int depth, rmqs_error *err)
{
    const char *key;
    json_t *v;
    int n = 0;
    rmqs_rc rc;

    out->num_entries = 0;
    out->entries = NULL;
    if (json_object_size(obj) == 0) {
        return RMQS_OK;
    }
    out->entries = amqp_pool_alloc(pool, json_object_size(obj) *
                                             sizeof(amqp_table_entry_t));
    if (!out->entries) {
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    }
    json_object_foreach(obj, key, v) {
        size_t klen = strlen(key);
        if (klen == 0 || klen > AMQPM_SHORTSTR_MAX) {
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "header name of %zu bytes (1-255 allowed)", klen);
        }
        out->entries[n].key = amqp_cstring_bytes(key);
        rc = build_value(pool, v, &out->entries[n].value, depth + 1, err);
        if (rc != RMQS_OK) {
            return rc;
        }
        n++;
    }
    out->num_entries = n;
    return RMQS_OK;
}

static rmqs_rc build_value(amqp_pool_t *pool, json_t *v,
                           amqp_field_value_t *out, int depth, rmqs_error *err)
{
    size_t i, n;

    if (depth > MAX_HEADER_DEPTH) {
        return rmqs_fail(err, RMQS_EINVAL, NULL,
                         "headers nested deeper than %d levels",
                         MAX_HEADER_DEPTH);
    }
    switch (json_typeof(v)) {
    case JSON_STRING:
        out->kind = AMQP_FIELD_KIND_UTF8;
        out->value.bytes.len = json_string_length(v);
        out->value.bytes.bytes = (void *)json_string_value(v);
        return RMQS_OK;
    case JSON_INTEGER:
        out->kind = AMQP_FIELD_KIND_I64;
        out->value.i64 = (int64_t)json_integer_value(v);
        return RMQS_OK;
    case JSON_REAL:
        out->kind = AMQP_FIELD_KIND_F64;
        out->value.f64 = json_real_value(v);
        return RMQS_OK;
    case JSON_TRUE:
    case JSON_FALSE:
        out->kind = AMQP_FIELD_KIND_BOOLEAN;
        out->value.boolean = json_is_true(v);
        return RMQS_OK;
    case JSON_NULL: out->kind = AMQP_FIELD_KIND_VOID; return RMQS_OK;
    case JSON_OBJECT:
        out->kind = AMQP_FIELD_KIND_TABLE;
        return build_table(pool, v, &out->value.table, depth, err);
    case JSON_ARRAY:
        out->kind = AMQP_FIELD_KIND_ARRAY;
        n = json_array_size(v);
        out->value.array.num_entries = (int)n;
        out->value.array.entries = NULL;
        if (n == 0) {
            return RMQS_OK;
        }
        out->value.array.entries =
            amqp_pool_alloc(pool, n * sizeof(amqp_field_value_t));
        if (!out->value.array.entries) {
            return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        }
        for (i = 0; i < n; i++) {
            rmqs_rc rc =
                build_value(pool, json_array_get(v, i),
                            &out->value.array.entries[i], depth + 1, err);
            if (rc != RMQS_OK) {
                return rc;
            }
        }
        return RMQS_OK;
    }
    return rmqs_fail(err, RMQS_EINVAL, NULL, "unsupported header value");
}

/* A header entry whose value is the text s (borrowed: it must outlive the
 * publish). */
static void put_text_header(amqp_table_entry_t *e, const char *key,
                            const char *s)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(s);
}

rmqs_rc amqpm_build(const struct job *job, int frame_max, amqp_pool_t *pool,
                    amqpm_message *m, rmqs_error *err)
{
    amqp_basic_properties_t *pr = &m->props;
    json_t *props = job->properties, *v;
    amqp_table_entry_t *e;
    const char *key;
    size_t size, i, n = 0;
    rmqs_rc rc;

    memset(pr, 0, sizeof *pr);
    if ((job->exchange && strlen(job->exchange) > AMQPM_SHORTSTR_MAX) ||
        (job->routing_key && strlen(job->routing_key) > AMQPM_SHORTSTR_MAX)) {
        return rmqs_fail(err, RMQS_EINVAL, NULL,
                         "exchange or routing key longer than 255 bytes");
    }
    if (props && !json_is_object(props)) {
        return rmqs_fail(err, RMQS_EINVAL, NULL, "properties is not an object");
    }
    if (job->headers && !json_is_object(job->headers)) {
        return rmqs_fail(err, RMQS_EINVAL, NULL, "headers is not an object");
    }

    pr->_flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
    pr->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    v = props ? json_object_get(props, AMQPM_PROP_PERSISTENT) : NULL;
    if (v && !json_is_boolean(v)) {
        return rmqs_fail(err, RMQS_EINVAL, NULL,
                         "property persistent is not a boolean");
    }
    if (v && json_is_false(v)) {
        pr->delivery_mode = AMQP_DELIVERY_NONPERSISTENT;
    }

    for (i = 0; props && i < amqpm_n_str_props; i++) {
        amqp_bytes_t *dst = amqpm_str_prop_field(pr, i);
        if (amqpm_str_props[i].flag == AMQP_BASIC_EXPIRATION_FLAG) {
            continue; /* its own rule: below */
        }
        v = json_object_get(props, amqpm_str_props[i].name);
        if (!v) {
            continue;
        }
        if (!json_is_string(v) || json_string_length(v) > AMQPM_SHORTSTR_MAX) {
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "property %s is not a string of at most 255 bytes",
                             amqpm_str_props[i].name);
        }
        dst->len = json_string_length(v);
        dst->bytes = (void *)json_string_value(v);
        pr->_flags |= amqpm_str_props[i].flag;
    }
    if (!(pr->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)) {
        pr->message_id = amqp_cstring_bytes(job->id);
        pr->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    }
    v = props ? json_object_get(props, "expiration") : NULL;
    if (v) {
        if (!amqpm_expiration_valid(v)) {
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "property expiration is not a string of decimal "
                             "digits (milliseconds, at most %llu)",
                             AMQPM_EXPIRATION_MAX);
        }
        pr->expiration.len = json_string_length(v);
        pr->expiration.bytes = (void *)json_string_value(v);
        pr->_flags |= AMQP_BASIC_EXPIRATION_FLAG;
    }
    v = props ? json_object_get(props, AMQPM_PROP_PRIORITY) : NULL;
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > AMQPM_PRIORITY_MAX) {
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "property priority is not an integer 0-%d",
                             AMQPM_PRIORITY_MAX);
        }
        pr->priority = (uint8_t)json_integer_value(v);
        pr->_flags |= AMQP_BASIC_PRIORITY_FLAG;
    }

    /* Headers: the job's own, then ours (which win over same-named ones). */
    e = amqp_pool_alloc(pool, (json_object_size(job->headers) + 5) *
                                  sizeof(amqp_table_entry_t));
    if (!e) {
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    }
    if (job->headers) {
        json_object_foreach(job->headers, key, v) {
            size_t klen = strlen(key);
            if (amqpm_reserved_header(key)) {
                continue;
            }
            if (klen == 0 || klen > AMQPM_SHORTSTR_MAX) {
                return rmqs_fail(err, RMQS_EINVAL, NULL,
                                 "header name of %zu bytes (1-255 allowed)",
                                 klen);
            }
            e[n].key = amqp_cstring_bytes(key);
            rc = build_value(pool, v, &e[n].value, 1, err);
            if (rc != RMQS_OK) {
                return rc;
            }
            n++;
        }
    }
    tu_format_rfc3339(job->deliver_at, m->scheduled_at);
    put_text_header(&e[n++], AMQPM_HDR_JOB_ID, job->id);
    put_text_header(&e[n++], AMQPM_HDR_SCHEDULED_AT, m->scheduled_at);
    /* x-delay as the plugin (3.x) writes it on delivery: minus the delay,
     * a signed 32-bit integer ("I"), which every client decodes alike
     * (python3-pika 1.2 reads a 64-bit "l" as unsigned); only a delay
     * beyond int32 (2^31 ms, about 24.9 days) needs a 64-bit long. */
    e[n].key = amqp_cstring_bytes(AMQPM_HDR_DELAY);
    if (job->delay_ms >= -(int64_t)INT32_MAX &&
        job->delay_ms <= -(int64_t)INT32_MIN) {
        e[n].value.kind = AMQP_FIELD_KIND_I32;
        e[n].value.value.i32 = (int32_t)-job->delay_ms;
    } else {
        e[n].value.kind = AMQP_FIELD_KIND_I64;
        e[n].value.value.i64 = -job->delay_ms;
    }
    n++;
    if (job->schedule != NULL) { /* a run: which schedule, which fire time */
        tu_format_rfc3339(job->fire_at, m->fire_time);
        put_text_header(&e[n++], AMQPM_HDR_SCHEDULE, job->schedule);
        put_text_header(&e[n++], AMQPM_HDR_FIRE_TIME, m->fire_time);
    }
    pr->headers.num_entries = (int)n;
    pr->headers.entries = e;
    pr->_flags |= AMQP_BASIC_HEADERS_FLAG;

    /* The content header must fit in one frame, or the encoder fails after
     * the publish method went out (and the connection is unusable). */
    size = amqpm_encoded_size(job->headers, props, strlen(job->id));
    if (size + HEADER_PAYLOAD_FIXED + AMQPM_FRAME_OVERHEAD >
        (size_t)frame_max) {
        return rmqs_fail(err, RMQS_EINVAL, NULL,
                         "headers and properties take %zu bytes, more than "
                         "the frame size %d allows",
                         size, frame_max);
    }
    return RMQS_OK;
}
