/*
 * store_pg_core.c - what every file of store/pg/ above the wire builds on
 * (store_pg_core.h): transactions with their count deltas and
 * notifications, page measuring, and rows -> jobs. Beneath it only the
 * wire (store_pg_conn.c: connections, statements, round trips) and
 * store_pg_url.c; it calls nothing of the files above it.
 */
#include "store_pg_core.h"

#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

#define MOD "store"

/* ------------------------------------------------------------------------ */
/* Page budgets (store_pg_core.h)                                           */

rmqs_rc pg_page_measure(pg_conn *pc, const char *op, const char *sql, int n,
                        const char *const *vals, const int *lens,
                        const int *bin, store_page *page)
{
    PGresult *res;
    rmqs_rc rc = pg_exec_simple(pc, "page_begin",
                                "BEGIN ISOLATION LEVEL REPEATABLE READ "
                                "READ ONLY");

    if (rc != RMQS_OK)
        return rc;
    res = pg_exec(pc, op, sql, n, vals, lens, bin, &rc);
    if (res == NULL)
        return rc;
    for (int r = 0; r < PQntuples(res); r++) {
        size_t item =
            store_item_bytes((int)pg_int(res, r, 0), (size_t)pg_int(res, r, 1),
                             (size_t)pg_int(res, r, 2));
        if (!store_page_take(page, item))
            break;
    }
    PQclear(res);
    return RMQS_OK;
}

void pg_page_end(pg_conn *pc)
{
    if (pc->c != NULL && PQtransactionStatus(pc->c) == PQTRANS_INTRANS)
        (void)pg_exec_simple(pc, "page_end", "COMMIT");
    pg_tx_abort(pc); /* a failed one: rolled back */
}

/* ------------------------------------------------------------------------ */
/* Transactions                                                             */

static rmqs_rc tx_begin(pg_conn *pc, int begin)
{
    store_delta_clear(&pc->delta);
    pc->notify_due = INT64_MAX;
    pc->begin = begin;
    return pc->c != NULL ? RMQS_OK : RMQS_EDB;
}

rmqs_rc pg_tx_begin(store_backend *b, pg_conn *pc)
{
    (void)b;
    return tx_begin(pc, PG_BEGIN_PLAIN);
}

rmqs_rc pg_tx_begin_insert(store_backend *b, pg_conn *pc)
{
    (void)b;
    return tx_begin(pc, PG_BEGIN_INSERT);
}

void pg_tx_abort(pg_conn *pc)
{
    store_delta_clear(&pc->delta);
    pc->notify_due = INT64_MAX;
    pc->begin = PG_BEGIN_NONE; /* nothing sent: nothing to roll back */
    if (pc->c != NULL && PQtransactionStatus(pc->c) != PQTRANS_IDLE)
        (void)pg_exec_simple(pc, "rollback", "ROLLBACK");
}

void pg_note_due(pg_conn *pc, int64_t due_at)
{
    if (due_at < pc->notify_due)
        pc->notify_due = due_at;
}

/* The statement that adds pc's nonzero deltas to its job_counts slot, into
 * sql; false if there are none. */
static bool counts_sql(const pg_conn *pc, char *sql, size_t len)
{
    size_t at = (size_t)snprintf(sql, len,
                                 "INSERT INTO job_counts (slot, status, n) "
                                 "VALUES ");
    bool any = false;

    for (int i = 0; i < STORE_N_STATUS; i++) {
        if (pc->delta.n[i] == 0)
            continue;
        at += (size_t)snprintf(sql + at, len - at, "%s(%d, %d, %" PRId64 ")",
                               any ? ", " : "", pc->slot, i, pc->delta.n[i]);
        any = true;
    }
    snprintf(sql + at, len - at,
             " ON CONFLICT (slot, status) DO UPDATE "
             "SET n = job_counts.n + EXCLUDED.n");
    return any;
}

/* The wake-up of the other instances for pc->notify_due into sql, in a
 * transaction of its own that does not wait for the flush (a lost wake-up
 * costs nothing: they look again); false if there is none worth sending:
 * only a job due soon is (store_options.wake_horizon_ms), the others see
 * later jobs by themselves. */
static bool notify_sql(store_backend *b, const pg_conn *pc, char *sql,
                       size_t len)
{
    if (pc->notify_due == INT64_MAX ||
        (b->wake_horizon_ms > 0 &&
         pc->notify_due >=
             tu_now_ms() + atomic_load(&b->clock_offset) + b->wake_horizon_ms))
        return false;
    snprintf(sql, len,
             "SELECT set_config('synchronous_commit', 'off', true), "
             "pg_notify('" PG_NOTIFY_CHANNEL "', '%" PRId64 "')",
             pc->notify_due);
    return true;
}

rmqs_rc pg_tx_commit_with(store_backend *b, pg_conn *pc, const char *op,
                          const char *const *stmts, size_t n, const void *copy,
                          size_t copy_len, int *failed_at)
{
    char counts[64 + STORE_N_STATUS * 48 + 96], notify[160];
    const char *few[8], **all = few;
    size_t m = 0, notify_at = SIZE_MAX;
    int at = -1;
    rmqs_rc rc;

    *failed_at = -1;
    if (n + 3 > sizeof(few) / sizeof(few[0]) &&
        (all = malloc((n + 3) * sizeof(*all))) == NULL) {
        pg_tx_abort(pc);
        return RMQS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        all[m++] = stmts[i];
    if (counts_sql(pc, counts, sizeof(counts)))
        all[m++] = counts;
    all[m++] = "COMMIT";
    if (notify_sql(b, pc, notify, sizeof(notify))) {
        notify_at = m;
        all[m++] = notify;
    }
    if (m == 1 && pc->begin != PG_BEGIN_NONE)
        rc = RMQS_OK; /* nothing was sent, nothing to send */
    else
        rc = pg_exec_text(pc, op, all, m, copy, copy_len, &at, NULL);
    if (all != few)
        free(all);
    if (rc != RMQS_OK && at >= 0 && (size_t)at < n) {
        *failed_at = at; /* the caller's: its transaction is still open */
        return rc;
    }
    if (rc != RMQS_OK && (size_t)at == notify_at)
        rc = RMQS_OK; /* committed; the others look again by themselves */
    if (rc != RMQS_OK)
        pg_tx_abort(pc);
    pc->begin = PG_BEGIN_NONE;
    store_delta_clear(&pc->delta);
    pc->notify_due = INT64_MAX;
    return rc;
}

rmqs_rc pg_tx_commit(store_backend *b, pg_conn *pc)
{
    int failed_at;

    return pg_tx_commit_with(b, pc, "commit", NULL, 0, NULL, 0, &failed_at);
}

void pg_notify_due(store_backend *b, pg_conn *pc)
{
    char sql[160];

    if (notify_sql(b, pc, sql, sizeof(sql)))
        (void)pg_exec_simple(pc, "notify", sql);
    pc->notify_due = INT64_MAX;
}

/* ------------------------------------------------------------------------ */
/* Rows <-> jobs                                                            */

int64_t pg_int(const PGresult *res, int r, int c)
{
    const char *v;
    int len;

    if (PQgetisnull(res, r, c))
        return 0;
    v = PQgetvalue(res, r, c);
    len = PQgetlength(res, r, c);
    if (len == 8) {
        uint64_t x;
        memcpy(&x, v, 8);
        return (int64_t)be64toh(x);
    }
    if (len == 4) {
        uint32_t x;
        memcpy(&x, v, 4);
        return (int32_t)be32toh(x);
    }
    if (len == 2) {
        uint16_t x;
        memcpy(&x, v, 2);
        return (int16_t)be16toh(x);
    }
    return 0;
}

/* A text column as a malloc'd string; NULL if NULL (*nomem on failure). */
static char *col_text(const PGresult *res, int r, int c, bool *nomem)
{
    int len = PQgetlength(res, r, c);
    char *out;

    if (PQgetisnull(res, r, c))
        return NULL;
    out = malloc((size_t)len + 1);
    if (out == NULL) {
        *nomem = true;
        return NULL;
    }
    memcpy(out, PQgetvalue(res, r, c), (size_t)len);
    out[len] = '\0';
    return out;
}

/* A column's text in place, or NULL when the column is NULL. */
static const char *col_or_null(const PGresult *res, int r, int c)
{
    return PQgetisnull(res, r, c) ? NULL : PQgetvalue(res, r, c);
}

rmqs_rc pg_row_to_job(const PGresult *res, int r, job_t *out, int64_t *seq_out)
{
    bool nomem = false;
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (PQgetisnull(res, r, PC_ID) ||
        PQgetlength(res, r, PC_ID) != JOB_ID_BYTES) {
        log_error(MOD, "corrupt row", "seq=%" PRId64 " column=id",
                  pg_int(res, r, PC_SEQ));
        return RMQS_EDB;
    }
    if (seq_out)
        *seq_out = pg_int(res, r, PC_SEQ);
    job_id_format((const unsigned char *)PQgetvalue(res, r, PC_ID), out->id);
    out->status = (job_status)pg_int(res, r, PC_STATUS);
    out->source = (job_source)pg_int(res, r, PC_SOURCE);
    out->deliver_at = pg_int(res, r, PC_DELIVER_AT);
    out->due_at = pg_int(res, r, PC_DUE_AT);
    out->delay_ms = pg_int(res, r, PC_DELAY_MS);
    out->created_at = pg_int(res, r, PC_CREATED_AT);
    out->updated_at = pg_int(res, r, PC_UPDATED_AT);
    out->sent_at =
        PQgetisnull(res, r, PC_SENT_AT) ? -1 : pg_int(res, r, PC_SENT_AT);
    out->lease_until = pg_int(res, r, PC_LEASE_UNTIL);
    out->attempts = (int)pg_int(res, r, PC_ATTEMPTS);
    out->max_attempts = (int)pg_int(res, r, PC_MAX_ATTEMPTS);
    out->body_kind = (job_body_kind)pg_int(res, r, PC_BODY_KIND);
    out->exchange = col_text(res, r, PC_EXCHANGE, &nomem);
    out->routing_key = col_text(res, r, PC_ROUTING_KEY, &nomem);
    out->last_error = col_text(res, r, PC_LAST_ERROR, &nomem);
    out->schedule = col_text(res, r, PC_SCHEDULE, &nomem);
    out->fire_at =
        PQgetisnull(res, r, PC_FIRE_AT) ? -1 : pg_int(res, r, PC_FIRE_AT);
    out->expires_at = pg_int(res, r, PC_EXPIRES_AT); /* NULL: 0, never */
    out->priority = (int)pg_int(res, r, PC_PRIORITY);
    out->claim_rank = pg_int(res, r, PC_CLAIM_RANK);
    out->held_by = col_text(res, r, PC_HELD_BY, &nomem);
    out->held_ms = pg_int(res, r, PC_HELD_MS);
    out->failed_at = pg_int(res, r, PC_FAILED_AT); /* NULL: 0 */
    if (nomem || !out->exchange || !out->routing_key)
        goto nomem;
    rc = store_job_row_tail(out, col_or_null(res, r, PC_HEADERS),
                            (size_t)PQgetlength(res, r, PC_HEADERS),
                            col_or_null(res, r, PC_PROPERTIES),
                            (size_t)PQgetlength(res, r, PC_PROPERTIES),
                            PQgetvalue(res, r, PC_BODY),
                            (size_t)PQgetlength(res, r, PC_BODY));
    if (rc != RMQS_OK)
        job_clear(out);
    return rc;
nomem:
    job_clear(out);
    return RMQS_ENOMEM;
}

char *pg_text_array(const char *const *v, size_t n)
{
    size_t cap = 3, at = 0;
    char *s;

    for (size_t i = 0; i < n; i++)
        cap += 2 * strlen(v[i] ? v[i] : "") + 5;
    s = malloc(cap);
    if (s == NULL)
        return NULL;
    s[at++] = '{';
    for (size_t i = 0; i < n; i++) {
        const char *p = v[i];
        if (i > 0)
            s[at++] = ',';
        if (p == NULL) {
            memcpy(s + at, "NULL", 4);
            at += 4;
            continue;
        }
        s[at++] = '"';
        for (; *p; p++) {
            if (*p == '"' || *p == '\\')
                s[at++] = '\\';
            s[at++] = *p;
        }
        s[at++] = '"';
    }
    s[at++] = '}';
    s[at] = '\0';
    return s;
}

char *pg_int_array(const int64_t *v, size_t n)
{
    char *s = malloc(n * 22 + 3);
    size_t at = 0;

    if (s == NULL)
        return NULL;
    s[at++] = '{';
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(s + at, 23, "%s%lld", i ? "," : "",
                               (long long)v[i]);
    s[at++] = '}';
    s[at] = '\0';
    return s;
}
