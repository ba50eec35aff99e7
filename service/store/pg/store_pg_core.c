/*
 * store_pg_core.c - the bottom of the PostgreSQL backend, what every other
 * file of store/pg/ builds on (store_pg_core.h): connections and their
 * repair, statements, page measuring, transactions with their count
 * deltas and notifications, and rows -> jobs. Beneath it only
 * store_pg_url.c (URLs, secrets, SQLSTATE -> rmqs_rc); it calls nothing of
 * the files above it.
 */
#include "store_pg_core.h"

#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

#define MOD "store"


/* A failure after which the connection is not worth keeping: lost, a
 * server going down, or a server that no longer takes writes (a multi-host
 * URL then finds the new primary at the next connect). */
static bool conn_gone(PGconn *c, const char *st)
{
    if (PQstatus(c) != CONNECTION_OK)
        return true;
    if (st == NULL || *st == '\0')
        return true;
    return strncmp(st, "08", 2) == 0 || strncmp(st, "57P", 3) == 0 ||
           strcmp(st, "25006") == 0;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                              */

/* The first line of libpq's message, for one-line logs. */
void pg_first_line(const char *msg, char *buf, size_t len)
{
    size_t n = msg ? strcspn(msg, "\n") : 0;

    if (n >= len)
        n = len - 1;
    if (n)
        memcpy(buf, msg, n);
    buf[n] = '\0';
}

/* libpq's notices and asynchronous errors (a backend terminated, a
 * NOTICE): one log line instead of raw text on stderr. */
static void on_notice(void *arg, const char *msg)
{
    (void)arg;
    log_warn(MOD, "database notice", "message=\"%.*s\"",
             (int)strcspn(msg, "\n"), msg);
}

void pg_quiet(PGconn *c)
{
    PQsetNoticeProcessor(c, on_notice, NULL);
}

/* Seconds for libpq's connect_timeout: the call bound, at least 2 (libpq
 * waits at least 2 s whatever it is told). */
static void connect_seconds(const store_backend *b, char buf[24])
{
    int64_t s = (b->db_timeout_ms + 999) / 1000;

    pg_i64(buf, s < 2 ? 2 : s);
}

PGconn *pg_open_conn(store_backend *b, char *buf, size_t len)
{
    /* Before the URL: what the URL says wins (libpq's expand_dbname rule);
     * an empty value is skipped. Why each: a peer that vanished without a
     * word (host gone, path cut) is found by keepalives while idle and by
     * tcp_user_timeout while data waits for its acknowledgement, and a
     * server that accepts the TCP connection but never answers (frozen) by
     * connect_timeout; without them libpq waits for ever. */
    char cto[24], uto[24];
    const char *keys[] = {"connect_timeout",     "keepalives",
                          "keepalives_idle",     "keepalives_interval",
                          "keepalives_count",    "tcp_user_timeout",
                          "dbname",              NULL};
    const char *vals[] = {getenv("PGCONNECT_TIMEOUT") ? "" : cto,
                          "1",
                          "5",
                          "2",
                          "3",
                          uto,
                          b->url,
                          NULL};
    PGconn *c;

    connect_seconds(b, cto);
    pg_i64(uto, b->db_timeout_ms);
    c = PQconnectdbParams(keys, vals, 1);
    if (c == NULL) {
        snprintf(buf, len, "out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        /* libpq may quote the connection string, password and all */
        store_pg_scrub(b->url, PQerrorMessage(c), buf, len);
        PQfinish(c);
        return NULL;
    }
    pg_quiet(c);
    return c;
}

PGconn *pg_connect(store_backend *b, const char *role, bool relaxed,
                   int64_t timeout_ms, char *buf, size_t len)
{
    char set[320];
    PGconn *c = pg_open_conn(b, buf, len);
    PGresult *res;

    if (c == NULL)
        return NULL;
    /* the dispatcher's connections commit without waiting for the flush,
     * as SQLite's relaxed transactions (store.h): a claim or settle lost
     * by a server crash only makes a job published again. A session left
     * idle inside a transaction (its client frozen) is ended by the
     * server after the same bound, so the row locks it holds do not stop
     * the other instances. */
    snprintf(set, sizeof(set),
             "SET application_name = 'rmq-scheduler %s'; "
             "SET synchronous_commit = %s; SET client_min_messages = warning; "
             "SET statement_timeout = %lld; "
             "SET idle_in_transaction_session_timeout = %lld",
             role, relaxed ? "off" : "on", (long long)timeout_ms,
             (long long)(timeout_ms > 0 ? timeout_ms + PG_ANSWER_MARGIN_MS
                                        : 0));
    res = PQexec(c, set);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        store_pg_scrub(b->url, PQerrorMessage(c), buf, len);
        PQclear(res);
        PQfinish(c);
        return NULL;
    }
    PQclear(res);
    return c;
}

int64_t pg_deadline(const pg_conn *pc)
{
    return pc->timeout_ms > 0
               ? tu_mono_ms() + pc->timeout_ms + PG_ANSWER_MARGIN_MS
               : INT64_MAX;
}

PGresult *pg_result_by(pg_conn *pc, const char *op, int64_t deadline,
                       bool *late)
{
    *late = false;
    while (PQisBusy(pc->c)) {
        int64_t left = deadline == INT64_MAX ? -1 : deadline - tu_mono_ms();
        struct pollfd p = {.fd = PQsocket(pc->c), .events = POLLIN};
        int r;

        if (deadline != INT64_MAX && left <= 0) {
            /* A server or path that stopped answering: its cancel would
             * hang as well, so the connection is given up. Whatever the
             * call was doing is rolled back by the server, or committed
             * unacknowledged (the caller answered an error: a client
             * retries with its Idempotency-Key). */
            log_error(MOD, "the database did not answer in time; "
                      "connection given up",
                      "op=%s role=%s waited_ms=%lld", op, pc->role,
                      (long long)(pc->timeout_ms + PG_ANSWER_MARGIN_MS));
            PQfinish(pc->c);
            pc->c = NULL;
            *late = true;
            return NULL;
        }
        r = poll(&p, 1, left < 0 ? -1 : left > INT_MAX ? INT_MAX : (int)left);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && !PQconsumeInput(pc->c))
            break; /* lost: PQgetResult says so */
    }
    return PQgetResult(pc->c);
}

static bool res_ok(const PGresult *res)
{
    ExecStatusType s = PQresultStatus(res);

    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

/* Everything the statement sent on pc returns: the first failed result,
 * else the last one; NULL with *late after the deadline (pc->c closed). */
static PGresult *await_all(pg_conn *pc, const char *op, bool *late)
{
    int64_t deadline = pg_deadline(pc);
    PGresult *keep = NULL, *res;

    while ((res = pg_result_by(pc, op, deadline, late)) != NULL) {
        if (keep != NULL && !res_ok(keep)) {
            PQclear(res); /* the first failure is the one that counts */
            continue;
        }
        PQclear(keep);
        keep = res;
    }
    if (*late) {
        PQclear(keep);
        return NULL;
    }
    return keep;
}

/* pc (locked) up, (re)connected if needed. */
static rmqs_rc ensure_up(store_backend *b, pg_conn *pc)
{
    char msg[256];

    if (pc->c != NULL && PQstatus(pc->c) == CONNECTION_OK)
        return RMQS_OK;
    if (pc->c != NULL) {
        PQfinish(pc->c);
        pc->c = NULL;
    }
    if (tu_mono_ms() < pc->retry_at)
        return RMQS_EDB; /* the last connect failed a moment ago */
    pc->c =
        pg_connect(b, pc->role, pc->relaxed, pc->timeout_ms, msg, sizeof(msg));
    if (pc->c == NULL) {
        pc->retry_at = tu_mono_ms() + PG_RECONNECT_PAUSE_MS;
        log_error(MOD, "cannot connect to the database",
                  "role=%s url=%s reason=\"%s\"", pc->role, b->safe_url, msg);
        return RMQS_EDB;
    }
    pc->retry_at = 0;
    log_info(MOD, "database connected", "role=%s url=%s", pc->role,
             b->safe_url);
    return RMQS_OK;
}

rmqs_rc pg_use(store_backend *b, pg_conn *pc)
{
    pthread_mutex_lock(&pc->mu);
    return ensure_up(b, pc);
}

void pg_done(pg_conn *pc)
{
    pthread_mutex_unlock(&pc->mu);
}

/* Map and log a failed result; close the connection if it is gone. */
rmqs_rc pg_fail(pg_conn *pc, const char *op, PGresult *res)
{
    const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    rmqs_rc out = store_pg_map_sqlstate(st);
    char msg[256];

    pg_first_line(res ? PQresultErrorMessage(res) : NULL, msg, sizeof(msg));
    if (!msg[0])
        pg_first_line(PQerrorMessage(pc->c), msg, sizeof(msg));
    /* the caller's own conflicts (a job id taken, a row refused) are
     * logged by the caller, as warnings; a lock wait the caller cut short
     * itself (lock_timeout: only the search indexer sets one, and tries
     * again later) is expected under load, not a failure to shout about */
    if (st != NULL && strcmp(st, "55P03") == 0)
        log_debug(MOD, "lock wait given up", "op=%s role=%s", op, pc->role);
    else if (st != NULL && strcmp(st, "57014") == 0 && pc->budget)
        out = RMQS_ETIMEDOUT; /* a search past its budget: the caller's */
    else if (out != RMQS_ECONFLICT && out != RMQS_EINVAL)
        log_error(MOD, "database call failed",
                  "op=%s role=%s sqlstate=%s reason=\"%s\"", op, pc->role,
                  st ? st : "none", msg);
    if (conn_gone(pc->c, st)) {
        PQfinish(pc->c);
        pc->c = NULL;
        if (out != RMQS_EFULL)
            out = RMQS_EDB;
    }
    return out;
}

PGresult *pg_exec(pg_conn *pc, const char *op, const char *sql, int n,
                  const char *const *vals, const int *lens, const int *bin,
                  rmqs_rc *rc)
{
    PGresult *res;
    bool late;

    if (pc->c == NULL) {
        *rc = RMQS_EDB;
        return NULL;
    }
    if (!PQsendQueryParams(pc->c, sql, n, NULL, vals, lens, bin, 1)) {
        *rc = pg_fail(pc, op, NULL);
        return NULL;
    }
    res = await_all(pc, op, &late);
    if (late) {
        *rc = RMQS_EDB;
        return NULL;
    }
    if (res_ok(res)) {
        *rc = RMQS_OK;
        return res;
    }
    *rc = pg_fail(pc, op, res);
    PQclear(res);
    return NULL;
}

rmqs_rc pg_exec_simple(pg_conn *pc, const char *op, const char *sql)
{
    PGresult *res;
    rmqs_rc out = RMQS_OK;
    bool late;

    if (pc->c == NULL)
        return RMQS_EDB;
    if (!PQsendQuery(pc->c, sql))
        return pg_fail(pc, op, NULL);
    res = await_all(pc, op, &late);
    if (late)
        return RMQS_EDB;
    if (!res_ok(res))
        out = pg_fail(pc, op, res);
    PQclear(res);
    return out;
}

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

static rmqs_rc tx_begin(store_backend *b, pg_conn *pc, const char *sql)
{
    rmqs_rc rc;

    store_delta_clear(&pc->delta);
    pc->notify_due = INT64_MAX;
    rc = pg_exec_simple(pc, "begin", sql);
    /* A connection that died while idle (server restarted, failed over,
     * a backend terminated) is only found out here, before anything was
     * sent: connect again and begin once more. */
    if (rc == RMQS_EDB && pc->c == NULL && ensure_up(b, pc) == RMQS_OK)
        rc = pg_exec_simple(pc, "begin", sql);
    return rc;
}

rmqs_rc pg_tx_begin(store_backend *b, pg_conn *pc)
{
    return tx_begin(b, pc, "BEGIN");
}

rmqs_rc pg_tx_begin_insert(store_backend *b, pg_conn *pc)
{
    /* one round trip: the lock rides with the BEGIN */
    return tx_begin(b, pc,
                    "BEGIN; SELECT pg_advisory_xact_lock_shared(" PG_INSERT_LOCK
                    ")");
}

void pg_tx_abort(pg_conn *pc)
{
    store_delta_clear(&pc->delta);
    pc->notify_due = INT64_MAX;
    if (pc->c != NULL && PQtransactionStatus(pc->c) != PQTRANS_IDLE)
        (void)pg_exec_simple(pc, "rollback", "ROLLBACK");
}

void pg_note_due(pg_conn *pc, int64_t due_at)
{
    if (due_at < pc->notify_due)
        pc->notify_due = due_at;
}

const char *pg_i64(char buf[24], int64_t v)
{
    snprintf(buf, 24, "%" PRId64, v);
    return buf;
}

/* In the transaction: this connection's slot gets the nonzero deltas. */
static rmqs_rc counts_flush(pg_conn *pc)
{
    char slot[24], st[64] = "{", dv[256] = "{";
    const char *vals[3];
    size_t a = 1, d = 1;
    bool any = false;
    PGresult *res;
    rmqs_rc rc;

    for (int i = 0; i < STORE_N_STATUS; i++) {
        if (pc->delta.n[i] == 0)
            continue;
        a +=
            (size_t)snprintf(st + a, sizeof(st) - a, "%s%d", any ? "," : "", i);
        d += (size_t)snprintf(dv + d, sizeof(dv) - d, "%s%" PRId64,
                              any ? "," : "", pc->delta.n[i]);
        any = true;
    }
    if (!any)
        return RMQS_OK;
    snprintf(st + a, sizeof(st) - a, "}");
    snprintf(dv + d, sizeof(dv) - d, "}");
    vals[0] = pg_i64(slot, pc->slot);
    vals[1] = st;
    vals[2] = dv;
    res = pg_exec(pc, "counts_add",
                  "INSERT INTO job_counts (slot, status, n) "
                  "SELECT $1::smallint, s, d FROM "
                  "unnest($2::smallint[], $3::bigint[]) AS t(s, d) "
                  "ON CONFLICT (slot, status) DO UPDATE "
                  "SET n = job_counts.n + EXCLUDED.n",
                  3, vals, NULL, NULL, &rc);
    PQclear(res);
    return rc;
}

rmqs_rc pg_tx_commit(store_backend *b, pg_conn *pc)
{
    rmqs_rc rc = counts_flush(pc);
    char due[24];

    /* Only a job due soon is worth a wake-up: PostgreSQL serialises the
     * commits that notify (a global lock at commit), and the other
     * instances see later jobs by themselves (store_options). */
    if (rc == RMQS_OK && pc->notify_due != INT64_MAX &&
        (b->wake_horizon_ms <= 0 ||
         pc->notify_due < tu_now_ms() + atomic_load(&b->clock_offset) +
                              b->wake_horizon_ms)) {
        const char *vals[1] = {pg_i64(due, pc->notify_due)};
        PGresult *res = pg_exec(pc, "notify",
                                "SELECT pg_notify('" PG_NOTIFY_CHANNEL "', $1)",
                                1, vals, NULL, NULL, &rc);
        PQclear(res);
    }
    if (rc == RMQS_OK)
        rc = pg_exec_simple(pc, "commit", "COMMIT");
    if (rc != RMQS_OK)
        pg_tx_abort(pc);
    store_delta_clear(&pc->delta);
    pc->notify_due = INT64_MAX;
    return rc;
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
