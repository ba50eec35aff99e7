/*
 * store_pg_conn.c - the PostgreSQL backend's wire (store_pg_conn.h):
 * connections and their repair, the bounded wait for answers, and how
 * statements travel. Beneath it only store_pg_url.c.
 *
 * Why every wait has a deadline: a server that is frozen, or a path that
 * stops forwarding while the kernel still acknowledges, fires no TCP
 * keepalive and no statement_timeout; only the client's own bound ends
 * the wait (pg_result_by, put_copy). Sends do not block either: the
 * connection is nonblocking and what is not sent yet is flushed by the
 * same bounded waits.
 *
 * Why so few round trips: on a busy machine every round trip is two
 * context switches and a wait for the server's turn on a core, and the
 * dispatcher's claim and settle sit on the path of every job. So the hot
 * statements are prepared once per connection (in the round trip of their
 * first run), a transaction's BEGIN goes with its first statements, a
 * pipeline sends several statements and reads every answer after one
 * flush, and a text message may carry a COPY with what surrounds it.
 */
#include "store_pg_conn.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store_pg_url.h"
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
static void connect_seconds(const pg_target *db, char buf[24])
{
    int64_t s = (db->timeout_ms + 999) / 1000;

    pg_i64(buf, s < 2 ? 2 : s);
}

PGconn *pg_open_conn(const pg_target *db, char *buf, size_t len)
{
    /* Before the URL: what the URL says wins (libpq's expand_dbname rule);
     * an empty value is skipped. Why each: a peer that vanished without a
     * word (host gone, path cut) is found by keepalives while idle and by
     * tcp_user_timeout while data waits for its acknowledgement, and a
     * server that accepts the TCP connection but never answers (frozen) by
     * connect_timeout; without them libpq waits for ever. */
    char cto[24], uto[24];
    const char *keys[] = {"connect_timeout",  "keepalives",
                          "keepalives_idle",  "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout",
                          "dbname",           NULL};
    const char *vals[] = {getenv("PGCONNECT_TIMEOUT") ? "" : cto,
                          "1",
                          "5",
                          "2",
                          "3",
                          uto,
                          db->url,
                          NULL};
    PGconn *c;

    connect_seconds(db, cto);
    pg_i64(uto, db->timeout_ms);
    c = PQconnectdbParams(keys, vals, 1);
    if (c == NULL) {
        snprintf(buf, len, "out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        /* libpq may quote the connection string, password and all */
        store_pg_scrub(db->url, PQerrorMessage(c), buf, len);
        PQfinish(c);
        return NULL;
    }
    pg_quiet(c);
    return c;
}

PGconn *pg_connect(const pg_target *db, const char *role, bool relaxed,
                   int64_t timeout_ms, char *buf, size_t len)
{
    char set[320];
    PGconn *c = pg_open_conn(db, buf, len);
    pg_conn tmp = {.role = role, .c = c};
    PGresult *res;
    bool late = false, ok = true;

    if (c == NULL)
        return NULL;
    /* the dispatcher's connections commit without waiting for the flush,
     * as SQLite's relaxed transactions (store.h): a claim or settle lost
     * by a server crash only makes a job published again. A session left
     * idle inside a transaction (its client frozen) is ended by the
     * server after the same bound, so the row locks it holds do not stop
     * the other instances. */
    snprintf(
        set, sizeof(set),
        "SET application_name = 'rmq-scheduler %s'; "
        "SET synchronous_commit = %s; SET client_min_messages = warning; "
        "SET statement_timeout = %lld; "
        "SET idle_in_transaction_session_timeout = %lld",
        role, relaxed ? "off" : "on", (long long)timeout_ms,
        (long long)(timeout_ms > 0 ? timeout_ms + PG_ANSWER_MARGIN_MS : 0));
    /* nonblocking: a send never waits on a server that stops reading;
     * the waits of pg_result_by flush it, bounded like the answers */
    if (PQsetnonblocking(c, 1) != 0 || !PQsendQuery(c, set))
        ok = false;
    while (ok && (res = pg_result_by(&tmp, "connect",
                                     tu_mono_ms() + db->timeout_ms +
                                         PG_ANSWER_MARGIN_MS,
                                     &late)) != NULL) {
        ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
    }
    if (late) {
        snprintf(buf, len, "the server did not answer the session set-up");
        return NULL; /* pg_result_by closed it */
    }
    if (!ok) {
        store_pg_scrub(db->url, PQerrorMessage(c), buf, len);
        PQfinish(c);
        return NULL;
    }
    return c;
}

int64_t pg_deadline(const pg_conn *pc)
{
    return pc->timeout_ms > 0
               ? tu_mono_ms() + pc->timeout_ms + PG_ANSWER_MARGIN_MS
               : INT64_MAX;
}

void pg_close(pg_conn *pc)
{
    if (pc->c != NULL)
        PQfinish(pc->c);
    pc->c = NULL;
    pc->n_prepared = 0; /* they lived in that session */
}

PGresult *pg_result_by(pg_conn *pc, const char *op, int64_t deadline,
                       bool *late)
{
    *late = false;
    while (PQisBusy(pc->c)) {
        int64_t left = deadline == INT64_MAX ? -1 : deadline - tu_mono_ms();
        int unsent = PQflush(pc->c); /* 1: more to send */
        struct pollfd p = {.fd = PQsocket(pc->c),
                           .events = POLLIN | (unsent > 0 ? POLLOUT : 0)};
        int r;

        if (unsent < 0 || PQstatus(pc->c) != CONNECTION_OK)
            break; /* lost: PQgetResult says so */
        if (deadline != INT64_MAX && left <= 0) {
            /* A server or path that stopped answering: its cancel would
             * hang as well, so the connection is given up. Whatever the
             * call was doing is rolled back by the server, or committed
             * unacknowledged (the caller answered an error: a client
             * retries with its Idempotency-Key). */
            log_error(MOD,
                      "the database did not answer in time; "
                      "connection given up",
                      "op=%s role=%s waited_ms=%lld", op, pc->role,
                      (long long)(pc->timeout_ms + PG_ANSWER_MARGIN_MS));
            pg_close(pc);
            *late = true;
            return NULL;
        }
        r = poll(&p, 1, left < 0 ? -1 : left > INT_MAX ? INT_MAX : (int)left);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && (p.revents & ~POLLOUT) && !PQconsumeInput(pc->c))
            break; /* lost: PQgetResult says so */
    }
    return PQgetResult(pc->c);
}

static bool res_ok(const PGresult *res)
{
    ExecStatusType s = PQresultStatus(res);

    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

/* Whether c, idle, is still open: a server that closed it (restart,
 * failover, backend terminated) has sent its FIN or error by now, read
 * here without blocking. */
static bool conn_alive(PGconn *c)
{
    struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};

    if (PQstatus(c) != CONNECTION_OK)
        return false;
    if (poll(&p, 1, 0) > 0 && !PQconsumeInput(c))
        return false;
    return PQstatus(c) == CONNECTION_OK;
}

/* pc (locked) up, (re)connected if needed. */
static rmqs_rc ensure_up(pg_conn *pc)
{
    char msg[256];

    if (pc->c != NULL && conn_alive(pc->c))
        return RMQS_OK;
    pg_close(pc);
    if (tu_mono_ms() < pc->retry_at)
        return RMQS_EDB; /* the last connect failed a moment ago */
    pc->c = pg_connect(pc->db, pc->role, pc->relaxed, pc->timeout_ms, msg,
                       sizeof(msg));
    if (pc->c == NULL) {
        pc->retry_at = tu_mono_ms() + PG_RECONNECT_PAUSE_MS;
        log_error(MOD, "cannot connect to the database",
                  "role=%s url=%s reason=\"%s\"", pc->role, pc->db->safe_url,
                  msg);
        return RMQS_EDB;
    }
    pc->retry_at = 0;
    log_info(MOD, "database connected", "role=%s url=%s", pc->role,
             pc->db->safe_url);
    return RMQS_OK;
}

rmqs_rc pg_use(pg_conn *pc)
{
    pthread_mutex_lock(&pc->mu);
    return ensure_up(pc);
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
    /* 26000: a prepared statement the session no longer has (a pooler
     * between, DISCARD ALL): a new session prepares them again */
    if (conn_gone(pc->c, st) || (st != NULL && strcmp(st, "26000") == 0)) {
        pg_close(pc);
        if (out != RMQS_EFULL)
            out = RMQS_EDB;
    }
    return out;
}

/* ------------------------------------------------------------------------ */
/* Statements                                                               */

static _Thread_local uint64_t round_trips;

uint64_t pg_round_trips(void)
{
    return round_trips;
}

/* The statements a pending BEGIN stands for, in either protocol. */
#define INSERT_LOCK_SQL \
    "SELECT pg_advisory_xact_lock_shared(" PG_INSERT_LOCK ")"
static const pg_stmt begin_stmt = {"begin", "BEGIN", false};
static const pg_stmt insert_lock_stmt = {"insert_lock", INSERT_LOCK_SQL, false};

static bool is_prepared(const pg_conn *pc, const pg_stmt *st)
{
    for (int i = 0; i < pc->n_prepared; i++)
        if (pc->prepared[i] == st)
            return true;
    return false;
}

/* What one answer of a pipeline is for. */
typedef struct pipe_slot {
    const pg_stmt *st;
    bool prepare;  /* st's PREPARE (else its run) */
    pg_call *call; /* the call run, NULL for the BEGIN's statements */
} pipe_slot;

/* Queue st (prepared first if it is worth it and not yet) and note the
 * answers to expect in slots[*ns...]; *preparing counts the PREPAREs. */
static bool pipe_send(pg_conn *pc, const pg_stmt *st, pg_call *call,
                      pipe_slot *slots, size_t *ns, int *preparing)
{
    int n = call ? call->n : 0;
    const char *const *vals = call ? call->vals : NULL;
    const int *lens = call ? call->lens : NULL, *bin = call ? call->bin : NULL;
    bool named = !st->once && (is_prepared(pc, st) ||
                               pc->n_prepared + *preparing < PG_PREPARED_MAX);
    bool queued = false; /* its PREPARE is in this pipeline already */

    for (size_t i = 0; named && i < *ns; i++)
        queued = queued || (slots[i].prepare && slots[i].st == st);
    if (named && !queued && !is_prepared(pc, st)) {
        if (!PQsendPrepare(pc->c, st->name, st->sql, 0, NULL))
            return false;
        slots[(*ns)++] = (pipe_slot){st, true, call};
        (*preparing)++;
    }
    if (named ? !PQsendQueryPrepared(pc->c, st->name, n, vals, lens, bin, 1)
              : !PQsendQueryParams(pc->c, st->sql, n, NULL, vals, lens, bin, 1))
        return false;
    /* set in pipeline mode, single-row mode ends with its statement (set
     * outside it, libpq 15 would keep it for the first statement of the
     * next pipeline) */
    if (call != NULL && call->rows != NULL && !PQsetSingleRowMode(pc->c))
        return false;
    slots[(*ns)++] = (pipe_slot){st, false, call};
    return true;
}

/* Read the answers of slots[0..ns) and the end of the pipeline. The first
 * failed answer into *fail (its op in *fail_op); false if the connection
 * was lost or given up (*late) on the way. */
static bool pipe_read(pg_conn *pc, pipe_slot *slots, size_t ns, PGresult **fail,
                      const char **fail_op, bool *late)
{
    size_t k = 0;
    int nulls = 0;

    /* at most an answer and its end per slot, and the end (rows counted
     * in single-row mode aside) */
    for (size_t reads = 0; reads < 2 * ns + 4; reads++) {
        const char *op = slots[k < ns ? k : ns - 1].st->name;
        PGresult *res = pg_result_by(pc, op, pg_deadline(pc), late);
        ExecStatusType s;

        if (*late)
            return false;
        if (res == NULL) { /* one between two statements' answers */
            if (++nulls > 1 || PQstatus(pc->c) != CONNECTION_OK)
                return false;
            continue;
        }
        nulls = 0;
        s = PQresultStatus(res);
        if (s == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            return k == ns;
        }
        if (s == PGRES_SINGLE_TUPLE && k < ns && slots[k].call != NULL &&
            slots[k].call->rows != NULL) {
            (*slots[k].call->rows)++; /* more of the same statement follow */
            PQclear(res);
            reads--;
            continue;
        }
        if (k == ns || s == PGRES_PIPELINE_ABORTED) {
            PQclear(res);
        } else if (!res_ok(res)) {
            if (*fail == NULL) {
                *fail = res;
                *fail_op = op;
            } else {
                PQclear(res);
            }
        } else if (slots[k].prepare) {
            pc->prepared[pc->n_prepared++] = slots[k].st;
            PQclear(res);
        } else if (slots[k].call != NULL) {
            slots[k].call->res = res;
        } else {
            PQclear(res);
        }
        if (k < ns)
            k++;
    }
    return false; /* answers that do not end: out of step */
}

rmqs_rc pg_pipeline(pg_conn *pc, pg_call *calls, size_t n)
{
    pipe_slot few[8], *slots = few;
    size_t cap = 2 * (n + 2), ns = 0;
    const char *op = n > 0 ? calls[0].st->name : "pipeline", *fail_op = op;
    PGresult *fail = NULL;
    int preparing = 0;
    bool sent, late = false, whole;
    rmqs_rc rc = RMQS_OK;

    for (size_t i = 0; i < n; i++)
        calls[i].res = NULL;
    if (n == 0 && pc->begin == PG_BEGIN_NONE)
        return RMQS_OK;
    if (pc->c == NULL)
        return RMQS_EDB;
    if (cap > sizeof(few) / sizeof(few[0]) &&
        (slots = malloc(cap * sizeof(*slots))) == NULL)
        return RMQS_ENOMEM;
    sent = PQenterPipelineMode(pc->c) == 1;
    if (sent && pc->begin != PG_BEGIN_NONE)
        sent = pipe_send(pc, &begin_stmt, NULL, slots, &ns, &preparing) &&
               (pc->begin != PG_BEGIN_INSERT ||
                pipe_send(pc, &insert_lock_stmt, NULL, slots, &ns, &preparing));
    pc->begin = PG_BEGIN_NONE;
    for (size_t i = 0; sent && i < n; i++)
        sent = pipe_send(pc, calls[i].st, &calls[i], slots, &ns, &preparing);
    if (sent)
        sent = PQpipelineSync(pc->c) == 1;
    if (!sent) { /* the connection is in no state to go on with */
        rc = pg_fail(pc, op, NULL);
        pg_close(pc);
        goto out;
    }
    round_trips++;
    whole = pipe_read(pc, slots, ns, &fail, &fail_op, &late);
    if (late)
        rc = RMQS_EDB; /* given up, closed */
    else if (fail != NULL)
        rc = pg_fail(pc, fail_op, fail);
    else if (!whole)
        rc = pg_fail(pc, op, NULL);
    if (pc->c != NULL && (!whole || PQexitPipelineMode(pc->c) != 1))
        pg_close(pc); /* answers missing: the session is out of step */
out:
    PQclear(fail);
    if (rc != RMQS_OK)
        for (size_t i = 0; i < n; i++) {
            PQclear(calls[i].res);
            calls[i].res = NULL;
        }
    if (slots != few)
        free(slots);
    return rc;
}

PGresult *pg_run(pg_conn *pc, const pg_stmt *st, int n, const char *const *vals,
                 const int *lens, const int *bin, rmqs_rc *rc)
{
    pg_call call = {st, n, vals, lens, bin, NULL, NULL};

    *rc = pg_pipeline(pc, &call, 1);
    return call.res;
}

PGresult *pg_exec(pg_conn *pc, const char *op, const char *sql, int n,
                  const char *const *vals, const int *lens, const int *bin,
                  rmqs_rc *rc)
{
    pg_stmt st = {op, sql, true};

    return pg_run(pc, &st, n, vals, lens, bin, rc);
}

/* Feed data[0..len) to the COPY in progress on pc and end it, flushing as
 * the server takes it (its answers read meanwhile), until pc's deadline. */
static bool put_copy(pg_conn *pc, const char *op, const void *data, size_t len,
                     bool *late)
{
    const size_t chunk = 1 << 16;
    int64_t deadline = pg_deadline(pc);
    size_t at = 0;

    for (;;) {
        size_t n = len - at < chunk ? len - at : chunk;
        bool end = at == len;
        int unsent;

        if (end ? PQputCopyEnd(pc->c, NULL) != 1
                : PQputCopyData(pc->c, (const char *)data + at, (int)n) != 1)
            return false;
        at += n;
        while ((unsent = PQflush(pc->c)) == 1) {
            int64_t left = deadline == INT64_MAX ? -1 : deadline - tu_mono_ms();
            struct pollfd p = {.fd = PQsocket(pc->c),
                               .events = POLLIN | POLLOUT};

            if (deadline != INT64_MAX && left <= 0) {
                log_error(MOD,
                          "the database did not take the data in time; "
                          "connection given up",
                          "op=%s role=%s", op, pc->role);
                pg_close(pc);
                *late = true;
                return false;
            }
            if (poll(&p, 1,
                     left < 0         ? -1
                     : left > INT_MAX ? INT_MAX
                                      : (int)left) > 0 &&
                (p.revents & ~POLLOUT) && !PQconsumeInput(pc->c))
                return false;
        }
        if (unsent < 0)
            return false;
        if (end)
            return true;
    }
}

rmqs_rc pg_exec_text(pg_conn *pc, const char *op, const char *const *stmts,
                     size_t n, const void *copy, size_t copy_len,
                     int *failed_at, PGresult **last)
{
    int at = pc->begin == PG_BEGIN_INSERT  ? -2
             : pc->begin == PG_BEGIN_PLAIN ? -1
                                           : 0; /* the answer's statement */
    size_t len = sizeof("BEGIN; " INSERT_LOCK_SQL "; ");
    PGresult *res, *fail = NULL, *kept = NULL;
    bool late = false, broken = false;
    char *sql;

    if (failed_at != NULL)
        *failed_at = -1;
    if (last != NULL)
        *last = NULL;
    if (pc->c == NULL)
        return RMQS_EDB;
    for (size_t i = 0; i < n; i++)
        len += strlen(stmts[i]) + 2;
    if ((sql = malloc(len)) == NULL)
        return RMQS_ENOMEM;
    snprintf(sql, len, "%s",
             pc->begin == PG_BEGIN_INSERT  ? "BEGIN; " INSERT_LOCK_SQL "; "
             : pc->begin == PG_BEGIN_PLAIN ? "BEGIN; "
                                           : "");
    for (size_t i = 0; i < n; i++) {
        strcat(sql, stmts[i]);
        if (i + 1 < n)
            strcat(sql, "; ");
    }
    pc->begin = PG_BEGIN_NONE;
    if (!PQsendQuery(pc->c, sql)) {
        free(sql);
        return pg_fail(pc, op, NULL);
    }
    free(sql);
    round_trips++;
    while ((res = pg_result_by(pc, op, pg_deadline(pc), &late)) != NULL) {
        if (PQresultStatus(res) == PGRES_COPY_IN) { /* its answer follows */
            PQclear(res);
            round_trips++;
            broken = copy == NULL ? PQputCopyEnd(pc->c, "no data") != 1
                                  : !put_copy(pc, op, copy, copy_len, &late);
            if (broken)
                break;
            continue;
        }
        if (!res_ok(res) && fail == NULL) {
            fail = res;
            if (failed_at != NULL && at >= 0)
                *failed_at = at;
        } else if (last != NULL && at == (int)n - 1 && res_ok(res)) {
            kept = res;
        } else {
            PQclear(res);
        }
        at++;
    }
    if (late) {
        PQclear(fail);
        PQclear(kept);
        return RMQS_EDB;
    }
    if (fail != NULL || broken || PQstatus(pc->c) != CONNECTION_OK) {
        rmqs_rc rc = pg_fail(pc, op, fail);
        if (broken)
            pg_close(pc); /* a COPY cut short: the session is out of step */
        PQclear(fail);
        PQclear(kept);
        return rc;
    }
    if (last != NULL)
        *last = kept;
    return RMQS_OK;
}

rmqs_rc pg_exec_simple(pg_conn *pc, const char *op, const char *sql)
{
    return pg_exec_text(pc, op, &sql, 1, NULL, 0, NULL, NULL);
}

const char *pg_i64(char buf[24], int64_t v)
{
    snprintf(buf, 24, "%" PRId64, v);
    return buf;
}
