/*
 * store_common.c - the backend-independent parts of the store (contract:
 * store_common.h): job counts deltas, the listing cursor, the JSON text of
 * headers and properties, due order.
 *
 * Why: so that SQLite (store_sqlite*.c) and a later backend keep one set of
 * rules; see store_common.h for each.
 */
#include "store_common.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexdigit.h"
#include "log.h"

#define MOD "store"

void store_delta_clear(store_delta *d)
{
    memset(d->n, 0, sizeof(d->n));
}

void store_delta_add(store_delta *d, int status, int64_t n)
{
    if (status >= 0 && status < STORE_N_STATUS)
        d->n[status] += n;
}

void store_delta_move(store_delta *d, int from, int to, int64_t n)
{
    store_delta_add(d, from, -n);
    store_delta_add(d, to, n);
}

void store_delta_merge(store_delta *d, const store_delta *src)
{
    for (int i = 0; i < STORE_N_STATUS; i++)
        d->n[i] += src->n[i];
}

/* One signed base-10 int64 of exactly len bytes, no sign but '-'. */
static bool parse_i64(const char *s, size_t len, int64_t *out)
{
    bool neg = false;
    uint64_t v = 0;
    size_t i = 0;

    if (len > 0 && s[0] == '-') {
        neg = true;
        i = 1;
    }
    if (i == len || len - i > 19)
        return false;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

bool store_cursor_parse(const char *text, store_cursor *out)
{
    const char *dot;

    if (!text || strlen(text) >= STORE_CURSOR_MAX)
        return false;
    out->deliver_at = 0;
    if (text[0] == 'c' || text[0] == 'C') {
        out->order =
            text[0] == 'c' ? STORE_ORDER_CREATED : STORE_ORDER_CREATED_DESC;
        return parse_i64(text + 1, strlen(text + 1), &out->seq) &&
               out->seq >= 0;
    }
    out->order = STORE_ORDER_DUE;
    if (text[0] == 'D') {
        out->order = STORE_ORDER_DUE_DESC;
        text++;
    }
    dot = strchr(text, '.');
    if (!dot)
        return false;
    return parse_i64(text, (size_t)(dot - text), &out->deliver_at) &&
           parse_i64(dot + 1, strlen(dot + 1), &out->seq) && out->seq >= 0;
}

char *store_cursor_format(const store_cursor *c)
{
    char *out = malloc(STORE_CURSOR_MAX);

    if (!out)
        return NULL;
    if (c->order == STORE_ORDER_CREATED || c->order == STORE_ORDER_CREATED_DESC)
        snprintf(out, STORE_CURSOR_MAX, "%c%" PRId64,
                 c->order == STORE_ORDER_CREATED ? 'c' : 'C', c->seq);
    else
        snprintf(out, STORE_CURSOR_MAX, "%s%" PRId64 ".%" PRId64,
                 c->order == STORE_ORDER_DUE_DESC ? "D" : "", c->deliver_at,
                 c->seq);
    return out;
}

rmqs_rc store_json_text(const json_t *v, char **out)
{
    *out = NULL;
    if (!v)
        return RMQS_OK;
    *out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    return *out ? RMQS_OK : RMQS_ENOMEM;
}

rmqs_rc store_json_load(const char *text, size_t len, const char *job_id,
                        json_t **out)
{
    json_error_t jerr;

    *out = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
    if (*out)
        return RMQS_OK;
    log_error(MOD, "corrupt row", "id=%s reason=\"%s\"", job_id, jerr.text);
    return RMQS_EDB;
}

rmqs_rc store_job_row_tail(job_t *out, const char *headers, size_t headers_len,
                           const char *properties, size_t properties_len,
                           const void *body, size_t body_len)
{
    if (headers != NULL && store_json_load(headers, headers_len, out->id,
                                           &out->headers) != RMQS_OK)
        return RMQS_EDB;
    if (properties != NULL &&
        store_json_load(properties, properties_len, out->id,
                        &out->properties) != RMQS_OK)
        return RMQS_EDB;
    out->body = malloc(body_len > 0 ? body_len : 1);
    if (out->body == NULL)
        return RMQS_ENOMEM;
    if (body_len > 0)
        memcpy(out->body, body, body_len);
    out->body_len = body_len;
    return RMQS_OK;
}

const char *store_job_message_id(const job_t *job)
{
    json_t *mid =
        job->properties ? json_object_get(job->properties, "message_id") : NULL;

    return json_is_string(mid) ? json_string_value(mid) : NULL;
}

static int claimed_cmp(const void *a, const void *b)
{
    const store_claimed *x = a, *y = b;

    if (x->job.due_at != y->job.due_at)
        return x->job.due_at < y->job.due_at ? -1 : 1;
    if (x->job.claim_rank != y->job.claim_rank)
        return x->job.claim_rank < y->job.claim_rank ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void store_claimed_sort(store_claimed *c, size_t n)
{
    if (n > 1)
        qsort(c, n, sizeof(*c), claimed_cmp);
}

static int finished_cmp_newest(const void *a, const void *b)
{
    const store_finished_run *x = a, *y = b;

    if (x->deliver_at != y->deliver_at)
        return x->deliver_at > y->deliver_at ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq > y->seq ? -1 : 1;
    return 0;
}

void store_streak_of(store_finished_run *runs, size_t n, store_run_outcome *out)
{
    size_t failed = 0;

    if (n > 1)
        qsort(runs, n, sizeof(*runs), finished_cmp_newest);
    while (failed < n && runs[failed].status == JOB_FAILED)
        failed++; /* a sent run ends the streak */
    out->streak_capped = failed > STORE_STREAK_CAP;
    out->failure_streak =
        failed > STORE_STREAK_CAP ? STORE_STREAK_CAP : (int)failed;
}

void store_jobs_sort_due(job_t *jobs, size_t n)
{
    /* insertion sort: stable, and the rounds are each in order already */
    for (size_t i = 1; i < n; i++) {
        job_t t = jobs[i];
        size_t k = i;
        while (k > 0 && (jobs[k - 1].due_at > t.due_at ||
                         (jobs[k - 1].due_at == t.due_at &&
                          jobs[k - 1].claim_rank > t.claim_rank))) {
            jobs[k] = jobs[k - 1];
            k--;
        }
        jobs[k] = t;
    }
}

void *store_grow(void *arr, size_t *cap, size_t elem)
{
    size_t ncap = *cap ? *cap * 2 : 16;
    void *out = ncap > SIZE_MAX / elem ? NULL : realloc(arr, ncap * elem);

    if (out)
        *cap = ncap;
    return out;
}

void store_jobs_free(job_t *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        job_clear(&jobs[i]);
    free(jobs);
}

void store_insert_req_undo(store_insert_req *r)
{
    for (size_t i = 0; r->idem_keys != NULL && i < r->n; i++) {
        if (r->existing != NULL)
            job_clear(&r->existing[i]);
        if (r->existed != NULL)
            r->existed[i] = false;
    }
    r->nexisted = 0;
}

bool store_insert_req_valid(const store_insert_req *r)
{
    if (r->n == 0 || r->jobs == NULL)
        return false;
    if (r->idem_keys == NULL)
        return true;
    if (r->idem_requests == NULL || r->existed == NULL || r->existing == NULL)
        return false;
    for (size_t i = 0; i < r->n; i++)
        if (r->idem_keys[i] != NULL && r->idem_requests[i] == NULL)
            return false;
    return true;
}

void store_insert_reqs_reset(store_insert_req *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        reqs[i].rc = RMQS_OK;
        reqs[i].failed_index = 0;
        reqs[i].nexisted = 0;
        for (size_t j = 0; reqs[i].idem_keys != NULL && reqs[i].existed &&
                           reqs[i].existing && j < reqs[i].n;
             j++) {
            reqs[i].existed[j] = false;
            memset(&reqs[i].existing[j], 0, sizeof(reqs[i].existing[j]));
        }
    }
}

void store_insert_reqs_fail(store_insert_req *reqs, size_t n, rmqs_rc rc)
{
    for (size_t i = 0; i < n; i++) {
        store_insert_req_undo(&reqs[i]);
        reqs[i].rc = rc;
    }
}

rmqs_rc store_migrations_check(const store_migration *m, size_t n,
                               rmqs_error *err)
{
    if (n && !m)
        return rmqs_fail(err, RMQS_EINVAL, NULL, "migration list is NULL");
    for (size_t i = 0; i < n; i++) {
        if (m[i].version < 1 || !m[i].name || !m[i].sql)
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "migration #%zu (%s) is malformed: needs version "
                             ">= 1, a name and SQL",
                             i, m[i].name ? m[i].name : "?");
        if (i > 0 && m[i].version <= m[i - 1].version)
            return rmqs_fail(err, RMQS_EINVAL, NULL,
                             "migration list is not strictly ascending: %s "
                             "(version %d) follows %s (version %d)",
                             m[i].name, m[i].version, m[i - 1].name,
                             m[i - 1].version);
    }
    return RMQS_OK;
}

/* ------------------------------------------------------------------------ */
/* Search filters (issue 14)                                                */

bool store_filter_is_search(const store_filter *f)
{
    return f != NULL &&
           (f->exchange != NULL || f->routing_key != NULL ||
            f->has_deliver_from || f->has_deliver_to ||
            f->id_prefix[0] != '\0' || f->header_name != NULL || f->q != NULL);
}

/* A digit of an id prefix (checked as hex by the filter's parser; anything
 * else counts as 0, as it always has). */
static int prefix_digit(char c)
{
    int v = hex_digit(c);

    return v < 0 ? 0 : v;
}

bool store_id_prefix_range(const char *prefix, unsigned char lo[JOB_ID_BYTES],
                           unsigned char hi[JOB_ID_BYTES])
{
    size_t n = strlen(prefix);
    int carry = 1;

    if (n > 2 * JOB_ID_BYTES)
        n = 2 * JOB_ID_BYTES;
    memset(lo, 0, JOB_ID_BYTES);
    for (size_t i = 0; i < n; i++)
        lo[i / 2] |=
            (unsigned char)(prefix_digit(prefix[i]) << (i % 2 ? 0 : 4));
    memcpy(hi, lo, JOB_ID_BYTES);
    /* + 1 at the last digit given, carrying towards the first */
    for (size_t i = n; i-- > 0 && carry;) {
        unsigned shift = i % 2 ? 0 : 4;
        unsigned d = ((unsigned)hi[i / 2] >> shift) & 0xfu;
        d = (d + 1) & 0xfu;
        carry = d == 0;
        hi[i / 2] =
            (unsigned char)((hi[i / 2] & ~(0xfu << shift)) | (d << shift));
    }
    return !carry;
}

bool store_text_add(store_text *b, const char *fmt, ...)
{
    va_list ap;
    int need;

    if (b->failed)
        return false;
    va_start(ap, fmt);
    need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0)
        goto fail;
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = (b->len + (size_t)need + 1) * 2;
        char *t = realloc(b->text, cap);
        if (t == NULL)
            goto fail;
        b->text = t;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->text + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
    return true;
fail:
    free(b->text);
    *b = (store_text){.failed = true};
    return false;
}

/* ------------------------------------------------------------------------ */
/* Page budgets (issue 21)                                                  */

void store_page_init(store_page *p, size_t limit, size_t max_bytes)
{
    *p = (store_page){.limit = limit,
                      .max_bytes =
                          max_bytes ? max_bytes : STORE_PAGE_MAX_BYTES_DEFAULT};
}

bool store_page_take(store_page *p, size_t item_bytes)
{
    if (p->n >= p->limit ||
        (p->n > 0 &&
         (item_bytes > p->max_bytes || p->bytes > p->max_bytes - item_bytes))) {
        p->more = true;
        return false;
    }
    p->n++;
    p->bytes =
        item_bytes > SIZE_MAX - p->bytes ? SIZE_MAX : p->bytes + item_bytes;
    return true;
}

size_t store_item_bytes(int body_kind, size_t body_len, size_t texts_len)
{
    /* base64: 4 characters per 3 bytes, the last group padded */
    size_t body = body_kind == JOB_BODY_BINARY
                      ? body_len / 3 * 4 + (body_len % 3 ? 4 : 0)
                      : body_len;
    size_t sum = STORE_ITEM_OVERHEAD;

    sum = body > SIZE_MAX - sum ? SIZE_MAX : sum + body;
    return texts_len > SIZE_MAX - sum ? SIZE_MAX : sum + texts_len;
}

void store_schedule_clear(store_schedule *s)
{
    if (s == NULL)
        return;
    free(s->name);
    free(s->spec);
    memset(s, 0, sizeof(*s));
}

void store_schedules_free(store_schedule *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++)
        store_schedule_clear(&rows[i]);
    free(rows);
}

void store_run_outcome_clear(store_run_outcome *o)
{
    if (o == NULL)
        return;
    free(o->last_error);
    memset(o, 0, sizeof(*o));
    o->last_fire_at = -1;
    o->last_status = -1;
}

void store_limit_clear(store_limit *l)
{
    if (l == NULL)
        return;
    free(l->name);
    free(l->spec);
    memset(l, 0, sizeof(*l));
}

void store_limits_free(store_limit *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++)
        store_limit_clear(&rows[i]);
    free(rows);
}

void store_failures_free(store_failure *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        free(rows[i].exchange);
        free(rows[i].error);
    }
    free(rows);
}
