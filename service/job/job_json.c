/*
 * job_json.c - the one JSON representation of a job (see job_json.h).
 *
 * Why it exists: every answer that carries a job (POST /schedule and
 * /schedule/batch, GET /jobs and /jobs/{id}, PATCH, DELETE, the minimal
 * form of Prefer: return=minimal) is written here and nowhere else, so
 * they cannot drift apart.
 *
 * How it works: the text is written straight into a growing buffer in
 * jansson's compact form (same member order, same escapes, numbers and
 * nested objects dumped by jansson itself), not built as a jansson tree and
 * dumped: a tree per job cost POST /schedule/batch more than parsing and
 * validating the request did. tests/unit/test_job_json.c holds the text to
 * "jansson parses it and dumps it back byte for byte", and to fixed
 * answers; tests/fuzz/fuzz_job_request.c checks every accepted job.
 */
#include "job_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "timeutil.h"
#include "utf8.h"

/* ------------------------------------------------------------------------ */
/* the buffer                                                                */

rmqs_rc job_buf_reserve(job_buf *b, size_t extra)
{
    size_t need, cap;
    char *p;

    if (b->oom)
        return RMQS_ENOMEM;
    if (__builtin_add_overflow(b->len, extra, &need) ||
        __builtin_add_overflow(need, 1, &need))
        goto nomem;
    if (need <= b->cap)
        return RMQS_OK;
    cap = b->cap > 0 ? b->cap : 256;
    while (cap < need) {
        if (__builtin_mul_overflow(cap, 2, &cap))
            goto nomem;
    }
    p = realloc(b->data, cap);
    if (p == NULL)
        goto nomem;
    b->data = p;
    b->cap = cap;
    return RMQS_OK;
nomem:
    b->oom = true;
    return RMQS_ENOMEM;
}

rmqs_rc job_buf_append(job_buf *b, const char *s, size_t n)
{
    if (job_buf_reserve(b, n) != RMQS_OK)
        return RMQS_ENOMEM;
    if (n > 0)
        memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return RMQS_OK;
}

void job_buf_free(job_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------------------ */
/* one job                                                                   */

#define PUT_LIT(b, lit) job_buf_append((b), (lit), sizeof(lit) - 1)

/*
 * s[0..len) as a JSON string, escaped as jansson's dump_string does without
 * flags: '"', '\\' and control characters only (\b \f \n \r \t, else
 * \u00XX in upper case). A string that is not valid UTF-8 (a damaged row)
 * is written with each byte >= 0x80 as '?' rather than failing the answer.
 */
static void put_string(job_buf *b, const char *s, size_t len)
{
    bool ascii_only = !utf8_valid(s, len);
    size_t run = 0; /* start of the bytes not written yet */

    if (len == 0) {
        PUT_LIT(b, "\"\"");
        return;
    }
    PUT_LIT(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        const char *e = NULL;

        if (c >= 0x20 && c != '"' && c != '\\' && (c < 0x80 || !ascii_only))
            continue;
        job_buf_append(b, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        default:
            if (c >= 0x80) {
                e = "?";
            } else {
                snprintf(esc, sizeof esc, "\\u%04X", (unsigned)c);
                e = esc;
            }
        }
        job_buf_append(b, e, strlen(e));
    }
    job_buf_append(b, s + run, len - run);
    PUT_LIT(b, "\"");
}

static void put_cstring(job_buf *b, const char *s)
{
    put_string(b, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

static void put_time(job_buf *b, int64_t ms, bool present)
{
    char t[TU_RFC3339_LEN + 3];

    if (!present) {
        PUT_LIT(b, "null");
        return;
    }
    t[0] = '"';
    tu_format_rfc3339(ms, t + 1);
    t[TU_RFC3339_LEN + 1] = '"';
    job_buf_append(b, t, TU_RFC3339_LEN + 2);
}

static void put_int(job_buf *b, long long v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%lld", v);
    job_buf_append(b, t, (size_t)n);
}

static int dump_to_buf(const char *s, size_t n, void *data)
{
    return job_buf_append(data, s, n) == RMQS_OK ? 0 : -1;
}

/* An object member as jansson writes it; NULL is "{}". */
static void put_object(job_buf *b, const json_t *obj)
{
    if (obj == NULL) {
        PUT_LIT(b, "{}");
        return;
    }
    if (json_dump_callback(obj, dump_to_buf, b, JSON_COMPACT) != 0)
        b->oom = true;
}

/*
 * "body" (a string for a text body, the JSON value for a JSON body) or
 * "body_base64". A body whose bytes do not read back as its kind (a damaged
 * row, text that is not UTF-8) is shown losslessly as body_base64.
 */
static void put_body_member(job_buf *b, const job_t *job, unsigned flags)
{
    const char *bytes = (const char *)job->body;
    size_t len = bytes != NULL ? job->body_len : 0;
    char *enc;

    if (job->body_kind == JOB_BODY_TEXT && utf8_valid(bytes, len)) {
        PUT_LIT(b, ",\"body\":");
        put_string(b, bytes, len);
        return;
    }
    if (job->body_kind == JOB_BODY_JSON && bytes != NULL) {
        json_t *v;

        if (flags & JOB_WRITE_OWN_BODY) {
            PUT_LIT(b, ",\"body\":");
            job_buf_append(b, bytes, len);
            return;
        }
        v = json_loadb(bytes, len, 0, NULL);
        if (v != NULL) {
            PUT_LIT(b, ",\"body\":");
            if (json_dump_callback(v, dump_to_buf, b, JSON_COMPACT) != 0)
                b->oom = true;
            json_decref(v);
            return;
        }
    }
    enc = base64_encode(job->body, len);
    if (enc == NULL) {
        b->oom = true;
        return;
    }
    PUT_LIT(b, ",\"body_base64\":");
    put_string(b, enc, strlen(enc));
    free(enc);
}

/* ',"attempt_errors":[{"attempt":n,"at":"<RFC 3339>","error":"..."}...]'
 * from the stored array (at in ms); an element not of that shape (never
 * written by the stores) is left out. */
static void put_attempt_errors(job_buf *b, const json_t *arr)
{
    size_t i, n = 0;
    json_t *e;

    PUT_LIT(b, ",\"attempt_errors\":[");
    json_array_foreach(arr, i, e) {
        json_t *at = json_object_get(e, "at");
        json_t *err = json_object_get(e, "error");
        if (!json_is_integer(at) || !json_is_string(err))
            continue;
        if (n++ > 0)
            PUT_LIT(b, ",");
        PUT_LIT(b, "{\"attempt\":");
        put_int(b, json_integer_value(json_object_get(e, "attempt")));
        PUT_LIT(b, ",\"at\":");
        put_time(b, json_integer_value(at), true);
        PUT_LIT(b, ",\"error\":");
        put_string(b, json_string_value(err), json_string_length(err));
        PUT_LIT(b, "}");
    }
    PUT_LIT(b, "]");
}

rmqs_rc job_write_json(job_buf *b, const job_t *job, unsigned flags)
{
    PUT_LIT(b, "{\"id\":");
    put_cstring(b, job->id);
    PUT_LIT(b, ",\"status\":");
    put_cstring(b, job_status_name(job->status));
    if (flags & JOB_WRITE_MINIMAL) {
        PUT_LIT(b, ",\"deliver_at\":");
        put_time(b, job->deliver_at, true);
        PUT_LIT(b, "}");
        return b->oom ? RMQS_ENOMEM : RMQS_OK;
    }
    if (job->source == JOB_SOURCE_SCHEDULE) {
        /* a run of a recurring schedule: which one, and for which fire time */
        PUT_LIT(b, ",\"source\":\"schedule\",\"schedule\":");
        put_cstring(b, job->schedule);
        PUT_LIT(b, ",\"fire_at\":");
        put_time(b, job->fire_at, job->fire_at >= 0);
        PUT_LIT(b, ",\"expires_at\":");
        put_time(b, job->expires_at, job->expires_at != 0);
        PUT_LIT(b, ",\"exchange\":");
    } else if (job->source == JOB_SOURCE_AMQP) {
        PUT_LIT(b, ",\"source\":\"amqp\",\"exchange\":");
    } else {
        PUT_LIT(b, ",\"source\":\"http\",\"exchange\":");
    }
    put_cstring(b, job->exchange);
    PUT_LIT(b, ",\"routing_key\":");
    put_cstring(b, job->routing_key);
    PUT_LIT(b, ",\"deliver_at\":");
    put_time(b, job->deliver_at, true);
    PUT_LIT(b, ",\"next_attempt_at\":");
    put_time(b, job->due_at, job->status == JOB_PENDING);
    PUT_LIT(b, ",\"created_at\":");
    put_time(b, job->created_at, true);
    PUT_LIT(b, ",\"updated_at\":");
    put_time(b, job->updated_at, true);
    PUT_LIT(b, ",\"sent_at\":");
    put_time(b, job->sent_at, job->sent_at >= 0);
    PUT_LIT(b, ",\"failed_at\":");
    put_time(b, job->failed_at,
             job->status == JOB_FAILED && job->failed_at > 0);
    PUT_LIT(b, ",\"attempts\":");
    put_int(b, job->attempts);
    PUT_LIT(b, ",\"max_attempts\":");
    put_int(b, job->max_attempts);
    PUT_LIT(b, ",\"priority\":");
    put_int(b, job->priority);
    PUT_LIT(b, ",\"held_by\":");
    if (job->held_by != NULL)
        put_cstring(b, job->held_by);
    else
        PUT_LIT(b, "null");
    PUT_LIT(b, ",\"held_ms\":");
    put_int(b, job->held_ms);
    PUT_LIT(b, ",\"last_error\":");
    if (job->last_error != NULL)
        put_cstring(b, job->last_error);
    else
        PUT_LIT(b, "null");
    if ((flags & JOB_WRITE_ATTEMPTS) && job->attempt_errors != NULL)
        put_attempt_errors(b, job->attempt_errors);
    PUT_LIT(b, ",\"headers\":");
    put_object(b, job->headers);
    PUT_LIT(b, ",\"properties\":");
    put_object(b, job->properties);
    put_body_member(b, job, flags);
    PUT_LIT(b, "}");
    return b->oom ? RMQS_ENOMEM : RMQS_OK;
}

/* ------------------------------------------------------------------------ */
/* lists of jobs                                                             */

/* Room for n jobs at once: a minimal item is about 100 bytes, a full one
 * about 420 plus its body as written (a binary one in base64), so a page
 * of large jobs is one allocation too, not a doubling chain whose copies
 * would hold the page twice over while it grows. */
static void reserve_for(job_buf *b, const job_t *jobs, size_t n, unsigned flags,
                        size_t extra)
{
    size_t per = (flags & JOB_WRITE_MINIMAL) ? 110 : 420, need;

    if (__builtin_mul_overflow(n, per, &need) ||
        __builtin_add_overflow(need, extra, &need))
        return;
    for (size_t i = 0; !(flags & JOB_WRITE_MINIMAL) && i < n; i++) {
        size_t body = jobs[i].body_len;
        if (jobs[i].body_kind == JOB_BODY_BINARY)
            body = body / 3 * 4 + 4;
        if (__builtin_add_overflow(need, body, &need))
            return;
    }
    job_buf_reserve(b, need);
}

/* "[job,job,...]" */
static void put_jobs(job_buf *b, const job_t *jobs, size_t n, unsigned flags)
{
    PUT_LIT(b, "[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            PUT_LIT(b, ",");
        job_write_json(b, &jobs[i], flags);
    }
    PUT_LIT(b, "]");
}

rmqs_rc job_write_batch(job_buf *b, const job_t *jobs, size_t n, unsigned flags)
{
    reserve_for(b, jobs, n, flags, 16);
    PUT_LIT(b, "{\"jobs\":");
    put_jobs(b, jobs, n, flags);
    PUT_LIT(b, "}");
    return b->oom ? RMQS_ENOMEM : RMQS_OK;
}

rmqs_rc job_write_page(job_buf *b, const job_t *jobs, size_t n,
                       const char *next)
{
    reserve_for(b, jobs, n, 0, 32 + (next != NULL ? strlen(next) : 0));
    PUT_LIT(b, "{\"jobs\":");
    put_jobs(b, jobs, n, 0);
    PUT_LIT(b, ",\"next\":");
    if (next != NULL)
        put_cstring(b, next);
    else
        PUT_LIT(b, "null");
    PUT_LIT(b, "}");
    return b->oom ? RMQS_ENOMEM : RMQS_OK;
}
