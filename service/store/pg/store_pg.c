/*
 * store_pg.c - the PostgreSQL backend of the store (store_backend.h; its
 * insides in store_pg.h): connections and their repair, error mapping,
 * transactions with their count deltas and notifications, rows <-> jobs,
 * the migrations runner, open and close, and the small calls (schema
 * version, purge, counts, ping, sizes). Clients' calls are in
 * store_pg_jobs.c, the dispatcher's in store_pg_dispatch.c.
 *
 * Why: one SQLite file is one machine's disk. Several instances sharing a
 * PostgreSQL database (replicated, failed over by Patroni or a managed
 * service) keep every acknowledged job when a host goes away (issue 12).
 * The behaviour above store.h is the same as SQLite's; what differs is
 * here: every instance claims with FOR NO KEY UPDATE SKIP LOCKED under a
 * lease, and counts live in per-slot rows instead of one hot row.
 *
 * How it works:
 *   - statements are sent with PQexecParams (bound parameters, binary
 *     results); ids and bodies go as binary bytea, numbers as text;
 *   - a write is BEGIN ... COMMIT on its role's connection; before COMMIT,
 *     in the same transaction, the nonzero count deltas are added to this
 *     connection's job_counts slot (one INSERT ... ON CONFLICT DO UPDATE)
 *     and, if the transaction stored or rescheduled pending jobs,
 *     pg_notify('rmqs_due', <earliest due_at>) wakes the other instances
 *     (a NOTIFY is delivered at COMMIT, never after a ROLLBACK);
 *   - errors: SQLSTATE -> rmqs_rc (store_pg_map_sqlstate): disk full is
 *     RMQS_EFULL (507/503 as SQLite's), a lost connection, a read-only
 *     server (25006, a standby or a demoted primary) or a shutdown is
 *     RMQS_EDB: the call fails, nothing is acknowledged, and the connection
 *     is closed so the next call connects again (following a multi-host
 *     URL to the new primary);
 *   - the URL may carry a password: it is kept for libpq and never logged
 *     (store_pg_safe_url is what logs and errors show);
 *   - migrations run at open under pg_advisory_lock, so N instances
 *     starting at once migrate once; a schema newer than the binary is
 *     refused with SQLite's message.
 */
#include "store_pg_impl.h"

#include <ctype.h>
#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

/* ------------------------------------------------------------------------ */
/* URLs and error codes (pure)                                              */

bool store_pg_is_url(const char *target)
{
    return target != NULL && (strncasecmp(target, "postgres://", 11) == 0 ||
                              strncasecmp(target, "postgresql://", 13) == 0);
}

/* Append s[0..n) to buf (len bytes, *at used), truncating. */
static void put(char *buf, size_t len, size_t *at, const char *s, size_t n)
{
    while (n-- > 0 && *at + 1 < len)
        buf[(*at)++] = *s++;
    buf[*at] = '\0';
}

/*
 * Secrets are found the way libpq finds them, not by pattern: the query
 * keywords whose libpq option is a password field (PQconndefaults' dispchar
 * "*": password, sslpassword, and any later one) are masked, whatever their
 * case or percent-encoding (%70assword); so is every keyword libpq does not
 * know (libpq refuses it anyway, and it may be a misspelt secret).
 */
static int url_hex(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* s[0..n) percent-decoded into out (cap bytes, NUL-terminated). */
static void url_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        if (s[i] == '%' && i + 2 < n + 0 && url_hex(s[i + 1]) >= 0 &&
            url_hex(s[i + 2]) >= 0) {
            out[o++] = (char)(url_hex(s[i + 1]) * 16 + url_hex(s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
}

/* Whether a query keyword (percent-encoded as written) must be masked. */
static bool secret_keyword(const char *k, size_t n)
{
    char key[64];
    PQconninfoOption *opts;
    bool known = false, secret = false;

    url_decode(k, n, key, sizeof(key));
    opts = PQconndefaults();
    if (opts == NULL)
        return true; /* out of memory: mask rather than guess */
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (strcasecmp(o->keyword, key) == 0) {
            known = true;
            secret = o->dispchar != NULL && strchr(o->dispchar, '*') != NULL;
            break;
        }
    }
    PQconninfoFree(opts);
    return secret || !known;
}

/* The user part of url: [*user, *at) is "user[:password]", *at the '@'
 * that ends it (the last '@' of the URL, so an unescaped '@' in a password
 * stays in the password), or *at NULL when there is none. *rest: after the
 * scheme's "://". */
static void url_userinfo(const char *url, const char **rest, const char **at)
{
    const char *p = strstr(url, "://");

    *rest = NULL;
    *at = NULL;
    if (p == NULL)
        return;
    *rest = p + 3;
    *at = strrchr(*rest, '@');
}

const char *store_pg_url_problem(const char *url)
{
    const char *rest, *at, *first;

    url_userinfo(url, &rest, &at);
    if (rest == NULL)
        return "not a URL";
    if (at == NULL)
        return NULL;
    /* libpq ends the user part at the first '@' or '/': where that is not
     * the '@' the password ends at, libpq would read part of the password
     * as the host, port or database, and quote it in its errors */
    first = rest + strcspn(rest, "@/");
    if (first != at)
        return "the user or password in the PostgreSQL URL holds an "
               "unencoded '@' or '/': percent-encode them (%40, %2F)";
    return NULL;
}

void store_pg_safe_url(const char *url, char *buf, size_t len)
{
    const char *rest, *at, *host, *q, *p;
    size_t out = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    if (url == NULL)
        return;
    url_userinfo(url, &rest, &at);
    if (rest == NULL) {
        put(buf, len, &out, "(not a URL)", 11);
        return;
    }
    put(buf, len, &out, url, (size_t)(rest - url));
    host = rest;
    if (at != NULL) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        size_t user = (size_t)((colon ? colon : at) - rest);
        /* a user part libpq would read otherwise (store_pg_url_problem)
         * shows nothing of itself */
        if (store_pg_url_problem(url) != NULL)
            put(buf, len, &out, "***", 3);
        else
            put(buf, len, &out, rest, user);
        put(buf, len, &out, "@", 1);
        host = at + 1;
    }
    q = strchr(host, '?');
    if (q == NULL) {
        put(buf, len, &out, host, strlen(host));
        return;
    }
    put(buf, len, &out, host, (size_t)(q - host));
    /* parameters: secrets masked, the rest kept */
    p = q;
    while (*p) {
        size_t n = strcspn(p + 1, "&") + 1; /* the separator and the pair */
        const char *eq = memchr(p + 1, '=', n - 1);
        size_t klen = eq ? (size_t)(eq - p - 1) : n - 1;
        put(buf, len, &out, p, 1);
        if (eq != NULL && secret_keyword(p + 1, klen)) {
            char key[64];
            url_decode(p + 1, klen, key, sizeof(key));
            put(buf, len, &out, key, strlen(key));
            put(buf, len, &out, "=***", 4);
        } else {
            put(buf, len, &out, p + 1, n - 1);
        }
        p += n;
    }
}

#define URL_SECRETS 16

/* The secrets of url, each as written and percent-decoded: the password of
 * the user part and the value of every masked parameter. Each one malloc'd
 * into sec (n returned); the caller frees them. */
static size_t url_secrets(const char *url, char *sec[URL_SECRETS])
{
    const char *rest, *at, *p;
    size_t n = 0;

    if (url == NULL)
        return 0;
    url_userinfo(url, &rest, &at);
    if (rest == NULL)
        return 0;
    if (at != NULL) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        if (colon != NULL && at > colon + 1) {
            sec[n++] = strndup(colon + 1, (size_t)(at - colon - 1));
            sec[n] = malloc((size_t)(at - colon));
            if (sec[n] != NULL)
                url_decode(colon + 1, (size_t)(at - colon - 1), sec[n],
                           (size_t)(at - colon));
            n++;
        }
    }
    for (p = strchr(at ? at : rest, '?'); p != NULL && *p && n + 2 <= URL_SECRETS;
         p = strchr(p + 1, '&')) {
        size_t pair = strcspn(p + 1, "&");
        const char *eq = memchr(p + 1, '=', pair);
        if (eq == NULL || !secret_keyword(p + 1, (size_t)(eq - p - 1)))
            continue;
        size_t vlen = pair - (size_t)(eq + 1 - (p + 1));
        if (vlen == 0)
            continue;
        sec[n++] = strndup(eq + 1, vlen);
        sec[n] = malloc(vlen + 1);
        if (sec[n] != NULL)
            url_decode(eq + 1, vlen, sec[n], vlen + 1);
        n++;
    }
    return n;
}

void store_pg_scrub(const char *url, const char *msg, char *buf, size_t len)
{
    char *sec[URL_SECRETS];
    size_t n, at = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    n = url_secrets(url, sec);
    for (const char *m = msg; m != NULL && *m && *m != '\n';) {
        bool hit = false;
        for (size_t i = 0; i < n && !hit; i++) {
            size_t sl = sec[i] ? strlen(sec[i]) : 0;
            if (sl > 0 && strncmp(m, sec[i], sl) == 0) {
                put(buf, len, &at, "***", 3);
                m += sl;
                hit = true;
            }
        }
        if (!hit)
            put(buf, len, &at, m++, 1);
    }
    for (size_t i = 0; i < n; i++)
        free(sec[i]);
}

rmqs_rc store_pg_map_sqlstate(const char *st)
{
    if (st == NULL || strlen(st) != 5)
        return RMQS_EDB; /* no answer from the server: connection lost */
    if (strcmp(st, "53100") == 0 || strcmp(st, "53400") == 0)
        return RMQS_EFULL;
    if (strcmp(st, "53200") == 0)
        return RMQS_ENOMEM;
    if (strcmp(st, "23505") == 0)
        return RMQS_ECONFLICT;
    if (strncmp(st, "23", 2) == 0 || strncmp(st, "22", 2) == 0)
        return RMQS_EINVAL;
    return RMQS_EDB;
}

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
    log_warn(MODULE, "database notice", "message=\"%.*s\"",
             (int)strcspn(msg, "\n"), msg);
}

void pg_quiet(PGconn *c)
{
    PQsetNoticeProcessor(c, on_notice, NULL);
}

/* Open a connection to b->url; NULL (message in buf) on failure. */
PGconn *pg_connect(store_backend *b, const char *role, bool relaxed,
                   int64_t timeout_ms, char *buf, size_t len)
{
    char set[192];
    PGconn *c = PQconnectdb(b->url);
    PGresult *res;

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
    /* the dispatcher's connections commit without waiting for the flush,
     * as SQLite's relaxed transactions (store.h): a claim or settle lost
     * by a server crash only makes a job published again */
    snprintf(set, sizeof(set),
             "SET application_name = 'rmq-scheduler %s'; "
             "SET synchronous_commit = %s; SET client_min_messages = warning; "
             "SET statement_timeout = %lld",
             role, relaxed ? "off" : "on", (long long)timeout_ms);
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
    pc->c = pg_connect(b, pc->role, pc->relaxed, pc->timeout_ms, msg,
                       sizeof(msg));
    if (pc->c == NULL) {
        log_error(MODULE, "cannot connect to the database",
                  "role=%s url=%s reason=\"%s\"", pc->role, b->safe_url, msg);
        return RMQS_EDB;
    }
    log_info(MODULE, "database connected", "role=%s url=%s", pc->role,
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
        log_debug(MODULE, "lock wait given up", "op=%s role=%s", op, pc->role);
    else if (st != NULL && strcmp(st, "57014") == 0 && pc->timeout_ms > 0)
        out = RMQS_ETIMEDOUT; /* a search past its budget: the caller's */
    else if (out != RMQS_ECONFLICT && out != RMQS_EINVAL)
        log_error(MODULE, "database call failed",
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
    ExecStatusType s;

    if (pc->c == NULL) {
        *rc = RMQS_EDB;
        return NULL;
    }
    res = PQexecParams(pc->c, sql, n, NULL, vals, lens, bin, 1);
    s = PQresultStatus(res);
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) {
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
    ExecStatusType s;
    rmqs_rc out = RMQS_OK;

    if (pc->c == NULL)
        return RMQS_EDB;
    res = PQexec(pc->c, sql);
    s = PQresultStatus(res);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
        out = pg_fail(pc, op, res);
    PQclear(res);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Page budgets (store_pg_impl.h)                                           */

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
        size_t item = store_item_bytes((int)pg_int(res, r, 0),
                                       (size_t)pg_int(res, r, 1),
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
        a += (size_t)snprintf(st + a, sizeof(st) - a, "%s%d", any ? "," : "",
                              i);
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

    (void)b;
    if (rc == RMQS_OK && pc->notify_due != INT64_MAX) {
        const char *vals[1] = {pg_i64(due, pc->notify_due)};
        PGresult *res = pg_exec(pc, "notify",
                                "SELECT pg_notify('" PG_NOTIFY_CHANNEL
                                "', $1)", 1, vals, NULL, NULL, &rc);
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

rmqs_rc pg_row_to_job(const PGresult *res, int r, job_t *out,
                      int64_t *seq_out)
{
    bool nomem = false;
    int n;

    memset(out, 0, sizeof(*out));
    if (PQgetisnull(res, r, PC_ID) ||
        PQgetlength(res, r, PC_ID) != JOB_ID_BYTES) {
        log_error(MODULE, "corrupt row", "seq=%" PRId64 " column=id",
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
    out->sent_at = PQgetisnull(res, r, PC_SENT_AT)
                       ? -1
                       : pg_int(res, r, PC_SENT_AT);
    out->lease_until = pg_int(res, r, PC_LEASE_UNTIL);
    out->attempts = (int)pg_int(res, r, PC_ATTEMPTS);
    out->max_attempts = (int)pg_int(res, r, PC_MAX_ATTEMPTS);
    out->body_kind = (job_body_kind)pg_int(res, r, PC_BODY_KIND);
    out->exchange = col_text(res, r, PC_EXCHANGE, &nomem);
    out->routing_key = col_text(res, r, PC_ROUTING_KEY, &nomem);
    out->last_error = col_text(res, r, PC_LAST_ERROR, &nomem);
    out->schedule = col_text(res, r, PC_SCHEDULE, &nomem);
    out->fire_at = PQgetisnull(res, r, PC_FIRE_AT)
                       ? -1
                       : pg_int(res, r, PC_FIRE_AT);
    out->expires_at = pg_int(res, r, PC_EXPIRES_AT); /* NULL: 0, never */
    if (nomem || !out->exchange || !out->routing_key)
        goto nomem;
    if (!PQgetisnull(res, r, PC_HEADERS) &&
        store_json_load(PQgetvalue(res, r, PC_HEADERS),
                        (size_t)PQgetlength(res, r, PC_HEADERS), out->id,
                        &out->headers) != RMQS_OK)
        goto bad;
    if (!PQgetisnull(res, r, PC_PROPERTIES) &&
        store_json_load(PQgetvalue(res, r, PC_PROPERTIES),
                        (size_t)PQgetlength(res, r, PC_PROPERTIES), out->id,
                        &out->properties) != RMQS_OK)
        goto bad;
    n = PQgetlength(res, r, PC_BODY);
    /* never NULL, even for an empty body: callers may memcpy from it */
    out->body = malloc(n > 0 ? (size_t)n : 1);
    if (!out->body)
        goto nomem;
    if (n > 0)
        memcpy(out->body, PQgetvalue(res, r, PC_BODY), (size_t)n);
    out->body_len = (size_t)n;
    return RMQS_OK;
bad:
    job_clear(out);
    return RMQS_EDB;
nomem:
    job_clear(out);
    return RMQS_ENOMEM;
}

/* ------------------------------------------------------------------------ */
/* Migrations                                                               */

/* The advisory lock of the migrations runner: one key for every instance
 * of every version. */
#define MIGRATE_LOCK "hashtext('rmq-scheduler schema migrations')"

static rmqs_rc migrate_fail(rmqs_error *err, pg_conn *pc, const char *what,
                            const char *url)
{
    char msg[256];

    pg_first_line(pc->c ? PQerrorMessage(pc->c) : "connection lost", msg,
               sizeof(msg));
    return rmqs_fail(err, RMQS_EDB, NULL, "cannot use database %s: %s: %s",
                     url, what, msg);
}

/* One query answering one integer in text (open time only); -1 on error. */
static int64_t query_int(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    int64_t v = -1;

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
        !PQgetisnull(res, 0, 0))
        v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

static rmqs_rc apply_migration(store_backend *b, const store_migration *m,
                               int current, rmqs_error *err)
{
    pg_conn *pc = &b->wr;
    char ver[24], now[24];
    const char *vals[3];
    PGresult *res;
    rmqs_rc rc;

    if (pg_exec_simple(pc, "migrate_begin", "BEGIN") != RMQS_OK)
        return migrate_fail(err, pc, "BEGIN", b->safe_url);
    res = PQexec(pc->c, m->sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK &&
        PQresultStatus(res) != PGRES_TUPLES_OK) {
        char msg[256];
        pg_first_line(PQresultErrorMessage(res), msg, sizeof(msg));
        PQclear(res);
        pg_tx_abort(pc);
        return rmqs_fail(err, RMQS_EDB, NULL,
                         "migration %s (version %d) failed: %s; rolled back, "
                         "schema stays at version %d (%s)", m->name,
                         m->version, msg, current, b->safe_url);
    }
    PQclear(res);
    vals[0] = pg_i64(ver, m->version);
    vals[1] = m->name;
    vals[2] = pg_i64(now, tu_now_ms());
    res = pg_exec(pc, "migrate_record",
                  "INSERT INTO schema_migrations (version, name, applied_at) "
                  "VALUES ($1, $2, $3)", 3, vals, NULL, NULL, &rc);
    PQclear(res);
    if (rc == RMQS_OK)
        rc = pg_exec_simple(pc, "migrate_commit", "COMMIT");
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        return migrate_fail(err, pc, "recording the migration", b->safe_url);
    }
    log_info(MODULE, "migration applied", "version=%d name=%s", m->version,
             m->name);
    return RMQS_OK;
}

/* Under the advisory lock: bring the schema to this binary's version. */
static rmqs_rc migrate(store_backend *b, const store_migration *m, size_t n,
                       rmqs_error *err)
{
    pg_conn *pc = &b->wr;
    int known = n ? m[n - 1].version : 0;
    int64_t current;
    rmqs_rc rc = RMQS_OK;

    if (pg_exec_simple(pc, "migrate_lock",
                       "SELECT pg_advisory_lock(" MIGRATE_LOCK ")") != RMQS_OK)
        return migrate_fail(err, pc, "taking the migrations lock",
                            b->safe_url);
    if (pg_exec_simple(pc, "migrate_table",
                       "CREATE TABLE IF NOT EXISTS schema_migrations ("
                       "version integer PRIMARY KEY, name text NOT NULL, "
                       "applied_at bigint NOT NULL)") != RMQS_OK) {
        rc = migrate_fail(err, pc, "creating schema_migrations", b->safe_url);
        goto unlock;
    }
    current = query_int(pc->c, "SELECT coalesce(max(version), 0) "
                               "FROM schema_migrations");
    if (current < 0) {
        rc = migrate_fail(err, pc, "reading schema_migrations", b->safe_url);
        goto unlock;
    }
    if (current > known) {
        rc = rmqs_fail(err, RMQS_EDB, NULL,
                       "database schema version %lld is newer than this "
                       "binary (knows up to %d); refusing to start (%s)",
                       (long long)current, known, b->safe_url);
        goto unlock;
    }
    for (size_t i = 0; i < n; i++) {
        if (m[i].version <= current)
            continue;
        rc = apply_migration(b, &m[i], (int)current, err);
        if (rc != RMQS_OK)
            goto unlock;
        current = m[i].version;
    }
unlock:
    if (pc->c != NULL)
        (void)pg_exec_simple(pc, "migrate_unlock",
                             "SELECT pg_advisory_unlock(" MIGRATE_LOCK ")");
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Open, close, the small calls                                             */

static void conn_init(pg_conn *pc, const char *role, bool relaxed, int slot)
{
    pthread_mutex_init(&pc->mu, NULL);
    pc->role = role;
    pc->relaxed = relaxed;
    pc->slot = slot;
    pc->notify_due = INT64_MAX;
}

static void conn_free(pg_conn *pc)
{
    if (pc->c != NULL)
        PQfinish(pc->c);
    pc->c = NULL;
    pthread_mutex_destroy(&pc->mu);
}

static void pg_free(store_backend *b)
{
    if (b == NULL)
        return;
    pg_threads_stop(b);
    pg_ix_stop(b);
    conn_free(&b->ix);
    conn_free(&b->wr);
    conn_free(&b->feed);
    conn_free(&b->disp);
    conn_free(&b->sched);
    for (int i = 0; i < PG_SEARCHERS; i++)
        conn_free(&b->search[i]);
    pthread_mutex_destroy(&b->wake_mu);
    pthread_mutex_destroy(&b->stop_mu);
    pthread_cond_destroy(&b->stop_cv);
    if (b->stop_pipe[0] >= 0)
        close(b->stop_pipe[0]);
    if (b->stop_pipe[1] >= 0)
        close(b->stop_pipe[1]);
    free(b->url);
    free(b->safe_url);
    free(b);
}

/* A random instance id (hex), and the job_counts slot base it hashes to. */
static rmqs_rc new_instance(store_backend *b, unsigned *hash)
{
    unsigned char r[12];
    unsigned h = 2166136261u; /* FNV-1a */

    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return RMQS_ESYS;
    for (size_t i = 0; i < sizeof(r); i++) {
        snprintf(b->instance + 2 * i, 3, "%02x", r[i]);
        h = (h ^ r[i]) * 16777619u;
    }
    *hash = h;
    return RMQS_OK;
}

/* Whether the schema has the search's mark (0003). */
static bool has_mark(store_backend *b)
{
    PGresult *res = PQexec(b->wr.c, "SELECT to_regclass('search_index') IS "
                                     "NOT NULL");
    bool yes = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
               PQgetvalue(res, 0, 0)[0] == 't';

    PQclear(res);
    return yes;
}

static rmqs_rc pg_open(const char *target, const store_options *opt,
                       const store_migration *migrations, size_t n,
                       store_backend **out, rmqs_error *err)
{
    store_backend *b;
    unsigned hash = 0;
    char msg[256];
    rmqs_rc rc;

    *out = NULL;
    rc = store_migrations_check(migrations, n, err);
    if (rc != RMQS_OK)
        return rc;
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    b->stop_pipe[0] = b->stop_pipe[1] = -1;
    pthread_mutex_init(&b->wake_mu, NULL);
    pthread_mutex_init(&b->stop_mu, NULL);
    {
        pthread_condattr_t ca; /* the keeper waits on CLOCK_MONOTONIC */
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&b->stop_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    b->lease_ms = opt && opt->lease_ms > 0 ? opt->lease_ms : PG_DEFAULT_LEASE_MS;
    if (b->lease_ms < PG_MIN_LEASE_MS)
        b->lease_ms = PG_MIN_LEASE_MS;
    b->url = strdup(target);
    b->safe_url = malloc(2 * strlen(target) + 64); /* "=***" may be longer */
    if (b->url == NULL || b->safe_url == NULL) {
        rc = rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    /* libpq knows the scheme in lower case only */
    for (char *p = b->url; *p && *p != ':'; p++)
        *p = (char)tolower((unsigned char)*p);
    store_pg_safe_url(target, b->safe_url, 2 * strlen(target) + 64);
    if (store_pg_url_problem(target) != NULL) {
        rc = rmqs_fail(err, RMQS_EINVAL, "db", "%s: %s", b->safe_url,
                       store_pg_url_problem(target));
        goto fail;
    }
    if (new_instance(b, &hash) != RMQS_OK) {
        rc = rmqs_fail(err, RMQS_ESYS, NULL, "no randomness for the "
                       "instance id");
        goto fail;
    }
    /* one slot per connection that writes counts, so two connections of
     * this instance never wait for each other's row lock */
    conn_init(&b->wr, "writer", opt && !opt->synchronous_full,
              (int)(hash % PG_SLOTS));
    conn_init(&b->feed, "feeder", true, (int)((hash + 1) % PG_SLOTS));
    conn_init(&b->disp, "dispatch", true, (int)((hash + 2) % PG_SLOTS));
    conn_init(&b->sched, "scheduler", b->wr.relaxed,
              (int)((hash + 3) % PG_SLOTS));
    /* rebuildable from the mark: no need to wait for the flush */
    conn_init(&b->ix, "indexer", true, (int)((hash + 4) % PG_SLOTS));
    b->ix_safe = b->ix_mark = -1;

    for (int i = 0; i < PG_SEARCHERS; i++) {
        conn_init(&b->search[i], "search", true, (int)((hash + 5) % PG_SLOTS));
        b->search[i].timeout_ms = opt ? opt->search_budget_ms : 0;
    }
    b->wr.c = pg_connect(b, "writer", b->wr.relaxed, 0, msg, sizeof(msg));
    if (b->wr.c == NULL) {
        rc = rmqs_fail(err, RMQS_EDB, NULL, "cannot connect to database %s: "
                       "%s", b->safe_url, msg);
        goto fail;
    }
    rc = migrate(b, migrations, n, err);
    if (rc != RMQS_OK)
        goto fail;
    b->feed.c = pg_connect(b, "feeder", true, 0, msg, sizeof(msg));
    b->disp.c = b->feed.c ? pg_connect(b, "dispatch", true, 0, msg, sizeof(msg))
                          : NULL;
    if (b->feed.c == NULL || b->disp.c == NULL) {
        rc = rmqs_fail(err, RMQS_EDB, NULL, "cannot connect to database %s: "
                       "%s", b->safe_url, msg);
        goto fail;
    }
    rc = pg_measure_clock(b, &b->disp);
    if (rc != RMQS_OK) {
        rc = rmqs_fail(err, rc, NULL, "cannot read the clock of database %s",
                       b->safe_url);
        goto fail;
    }
    /* no claim is older than this: its lease ends after open + lease */
    atomic_store(&b->renew_chain,
                 tu_now_ms() + atomic_load(&b->clock_offset) + b->lease_ms);
    rc = pg_threads_start(b, err);
    if (rc == RMQS_OK && (opt == NULL || !opt->index_manual) && has_mark(b))
        rc = pg_ix_start(b, err);
    if (rc != RMQS_OK)
        goto fail;
    log_info(MODULE, "database open",
             "backend=postgres url=%s instance=%s lease_ms=%" PRId64
             " clock_offset_ms=%" PRId64 " synchronous_commit=%s",
             b->safe_url, b->instance, b->lease_ms,
             atomic_load(&b->clock_offset), b->wr.relaxed ? "off" : "on");
    *out = b;
    return RMQS_OK;
fail:
    pg_free(b);
    return rc;
}

static int pg_schema_version(store_backend *b)
{
    PGresult *res;
    rmqs_rc rc;
    int v = -1;

    if (pg_use(b, &b->wr) == RMQS_OK) {
        res = pg_exec(&b->wr, "schema_version",
                      "SELECT coalesce(max(version), 0)::integer "
                      "FROM schema_migrations", 0, NULL, NULL, NULL, &rc);
        if (res != NULL && PQntuples(res) == 1)
            v = (int)pg_int(res, 0, 0);
        PQclear(res);
    }
    pg_done(&b->wr);
    return v;
}

static rmqs_rc pg_purge(store_backend *b, int64_t before_ms, size_t limit,
                        size_t *deleted)
{
    pg_conn *pc = &b->wr;
    char before[24], lim[24];
    const char *vals[2] = {pg_i64(before, before_ms),
                           pg_i64(lim, (int64_t)limit)};
    PGresult *res = NULL;
    rmqs_rc rc;

    *deleted = 0;
    rc = pg_use(b, pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto done;
    res = pg_exec(pc, "purge",
                  "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs "
                  "WHERE status >= 2 AND updated_at < $1 "
                  "ORDER BY updated_at LIMIT $2) RETURNING status",
                  2, vals, NULL, NULL, &rc);
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        goto done;
    }
    for (int i = 0; i < PQntuples(res); i++)
        store_delta_add(&pc->delta, (int)pg_int(res, i, 0), -1);
    rc = pg_tx_commit(b, pc);
    if (rc == RMQS_OK)
        *deleted = (size_t)PQntuples(res);
done:
    PQclear(res);
    pg_done(pc);
    return rc;
}

static rmqs_rc pg_checkpoint(store_backend *b, int64_t *wal_frames,
                             int64_t *copied)
{
    /* the server checkpoints by itself */
    (void)b;
    if (wal_frames)
        *wal_frames = 0;
    if (copied)
        *copied = 0;
    return RMQS_OK;
}

static rmqs_rc pg_counts(store_backend *b, int64_t counts[STORE_N_STATUS])
{
    PGresult *res = NULL;
    rmqs_rc rc;

    for (int i = 0; i < STORE_N_STATUS; i++)
        counts[i] = 0;
    rc = pg_use(b, &b->wr);
    if (rc == RMQS_OK)
        res = pg_exec(&b->wr, "counts",
                      "SELECT status, sum(n)::bigint FROM job_counts "
                      "GROUP BY status", 0, NULL, NULL, NULL, &rc);
    for (int i = 0; res != NULL && i < PQntuples(res); i++) {
        int64_t s = pg_int(res, i, 0);
        if (s >= 0 && s < STORE_N_STATUS)
            counts[s] = pg_int(res, i, 1);
    }
    PQclear(res);
    pg_done(&b->wr);
    return rc;
}

static int64_t pg_free_bytes(store_backend *b)
{
    (void)b;
    return -1; /* the server's disk is not ours to see */
}

static int64_t pg_size_bytes(store_backend *b)
{
    PGresult *res = NULL;
    int64_t v = -1;
    rmqs_rc rc;

    if (pg_use(b, &b->wr) == RMQS_OK)
        res = pg_exec(&b->wr, "size_bytes",
                      "SELECT pg_database_size(current_database())", 0, NULL,
                      NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1)
        v = pg_int(res, 0, 0);
    PQclear(res);
    pg_done(&b->wr);
    return v;
}

static rmqs_rc pg_ping(store_backend *b)
{
    rmqs_rc rc = pg_use(b, &b->wr);

    /* a server that answers but takes no writes (a standby, a demoted
     * primary) is not ready either */
    if (rc == RMQS_OK) {
        PGresult *res = pg_exec(&b->wr, "ping",
                                "SELECT pg_is_in_recovery() OR "
                                "current_setting('transaction_read_only')"
                                "::boolean", 0, NULL, NULL, NULL, &rc);
        if (res != NULL && PQntuples(res) == 1 &&
            PQgetvalue(res, 0, 0)[0] != 0) {
            log_warn(MODULE, "the database takes no writes (a standby, or read-only)", "url=%s",
                     b->safe_url);
            PQfinish(b->wr.c);
            b->wr.c = NULL; /* the next call looks for the primary */
            rc = RMQS_EDB;
        }
        PQclear(res);
    }
    pg_done(&b->wr);
    return rc;
}

const store_ops store_pg_ops = {
    .name = "postgres",
    .claims_in_read = true,
    .open = pg_open,
    .close = pg_free,
    .schema_version = pg_schema_version,
    .purge = pg_purge,
    .checkpoint = pg_checkpoint,
    .counts = pg_counts,
    .free_bytes = pg_free_bytes,
    .size_bytes = pg_size_bytes,
    .ping = pg_ping,
    .insert_batch = pg_insert_batch,
    .get = pg_get,
    .list = pg_list,
    .update = pg_update,
    .count = pg_count,
    .explain = pg_explain,
    .update_batch = pg_update_batch,
    .search_index = pg_search_index,
    .search_index_lag = pg_search_index_lag,
    .next_due = pg_next_due,
    .read_due = pg_read_due,
    .record = pg_record,
    .recover = pg_recover,
    .set_wake = pg_set_wake,
    .clock_offset_ms = pg_clock_offset_ms,
    .lease_renewed_until = pg_lease_renewed_until,
    .sched = &pg_schedule_ops,
};
