/*
 * store_pg_copy.c - the binary COPY stream of new jobs, the PostgreSQL
 * backend's bulk path: a group commit's jobs (store_pg_jobs.c: unkeyed and
 * keyed requests alike) and a schedule's runs go to the server as one
 * `COPY ... FROM STDIN (FORMAT binary)` (store_pg_core.h).
 *
 * Why a room of its own: the stream's encoding (PostgreSQL's binary COPY
 * format: a header, per row a field count and length-prefixed big-endian
 * fields, a trailer) is a format, not a store call; the callers only need
 * the bytes and the index of a job it cannot encode.
 */
#include "store_pg_core.h"

#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A growing buffer for the binary COPY stream. */
typedef struct cbuf {
    unsigned char *p;
    size_t n, cap;
    bool oom;
} cbuf;

static void cb_put(cbuf *b, const void *v, size_t len)
{
    if (b->oom)
        return;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        unsigned char *np;
        while (cap < b->n + len)
            cap *= 2;
        np = realloc(b->p, cap);
        if (np == NULL) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, v, len);
    b->n += len;
}

static void cb_u16(cbuf *b, uint16_t v)
{
    v = htobe16(v);
    cb_put(b, &v, 2);
}

static void cb_u32(cbuf *b, uint32_t v)
{
    v = htobe32(v);
    cb_put(b, &v, 4);
}

/* One field: its length, then its bytes (NULL: length -1). */
static void cb_field(cbuf *b, const void *v, size_t len)
{
    if (v == NULL) {
        cb_u32(b, UINT32_MAX);
        return;
    }
    cb_u32(b, (uint32_t)len);
    cb_put(b, v, len);
}

static void cb_i16(cbuf *b, int v)
{
    cb_u32(b, 2);
    cb_u16(b, (uint16_t)v);
}

static void cb_i32(cbuf *b, int v)
{
    cb_u32(b, 4);
    cb_u32(b, (uint32_t)v);
}

static void cb_i64(cbuf *b, int64_t v)
{
    uint64_t x = htobe64((uint64_t)v);
    cb_u32(b, 8);
    cb_put(b, &x, 8);
}

static void cb_text(cbuf *b, const char *t)
{
    cb_field(b, t, t ? strlen(t) : 0);
}


rmqs_rc pg_copy_jobs(const job_t *const *jobs, size_t n, int64_t offset,
                     pg_copy_buf *out, size_t *bad)
{
    static const char head[19] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0";
    cbuf b = {0};
    rmqs_rc rc = RMQS_OK;

    *bad = 0;
    cb_put(&b, head, sizeof(head));
    for (size_t i = 0; i < n && rc == RMQS_OK && !b.oom; i++) {
        const job_t *j = jobs[i];
        unsigned char id[JOB_ID_BYTES];
        char *hdr = NULL, *props = NULL;
        int64_t due = j->due_at;

        if (job_id_parse(j->id, id) != RMQS_OK || j->body_len > INT32_MAX) {
            *bad = i;
            rc = RMQS_EINVAL;
            break;
        }
        if (store_json_text(j->headers, &hdr) != RMQS_OK ||
            store_json_text(j->properties, &props) != RMQS_OK) {
            free(hdr);
            rc = RMQS_ENOMEM;
            break;
        }
        if (due > j->deliver_at)
            due = j->created_at + offset > j->deliver_at
                      ? j->created_at + offset
                      : j->deliver_at;
        cb_u16(&b, PG_JOB_NCOLS);
        cb_field(&b, id, JOB_ID_BYTES);
        cb_i16(&b, (int)j->status);
        cb_text(&b, j->exchange ? j->exchange : "");
        cb_text(&b, j->routing_key ? j->routing_key : "");
        cb_i64(&b, j->deliver_at);
        cb_i64(&b, due);
        cb_i64(&b, j->delay_ms);
        cb_i64(&b, j->created_at);
        cb_i64(&b, j->updated_at);
        if (j->sent_at >= 0)
            cb_i64(&b, j->sent_at);
        else
            cb_field(&b, NULL, 0);
        cb_i32(&b, j->attempts);
        cb_i32(&b, j->max_attempts);
        cb_text(&b, j->last_error);
        cb_text(&b, hdr);
        cb_text(&b, props);
        cb_i16(&b, (int)j->body_kind);
        cb_field(&b, j->body_len ? (const void *)j->body : "", j->body_len);
        cb_i16(&b, j->source == JOB_SOURCE_SCHEDULE ? 2
                   : j->source == JOB_SOURCE_AMQP   ? 1
                                                    : 0);
        cb_text(&b, store_job_message_id(j));
        cb_text(&b, j->schedule);
        if (j->schedule != NULL)
            cb_i64(&b, j->fire_at);
        else
            cb_field(&b, NULL, 0);
        if (j->expires_at > 0)
            cb_i64(&b, j->expires_at);
        else
            cb_field(&b, NULL, 0);
        cb_i16(&b, j->priority);
        cb_i64(&b, j->claim_rank);
        free(hdr);
        free(props);
    }
    cb_u16(&b, UINT16_MAX); /* trailer: -1 */
    if (rc == RMQS_OK && b.oom)
        rc = RMQS_ENOMEM;
    if (rc != RMQS_OK) {
        free(b.p);
        return rc;
    }
    out->p = b.p;
    out->n = b.n;
    return RMQS_OK;
}
