/*
 * store_pg_conn.h - the PostgreSQL backend's wire, below every other file
 * of store/pg/ but store_pg_url.c: connections and their repair, the
 * bounded wait for every answer, and statements sent in as few round
 * trips as they can (prepared once per connection, libpq's pipelines, a
 * pending BEGIN that rides with a transaction's first statements, a COPY
 * in the same message as what surrounds it). store_pg_core.h (the
 * backend's map, its struct, transactions and rows) includes it.
 *
 * Why a header of its own: the wire knows a connection and where it goes
 * (pg_target), not the backend that holds them, so it calls nothing
 * above it; a round trip costs the same everywhere, so one place decides
 * how statements travel.
 */
#ifndef RMQS_STORE_PG_CONN_H
#define RMQS_STORE_PG_CONN_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rmqs.h"
#include "store_common.h"

/*
 * A statement of the service's hot paths: prepared once per connection
 * under its name (on first use, in the same round trip as its first run)
 * and run by name after that, so the server parses and plans it once.
 * Declared static const beside the code that runs it; the name is also
 * its op in logs, and unique among the backend's statements.
 */
typedef struct pg_stmt {
    const char *name;
    const char *sql;
    bool once; /* run once, not prepared (pg_exec) */
} pg_stmt;

/* The advisory lock every transaction inserting jobs holds shared
 * (pg_tx_begin_insert's BEGIN), and the search indexer takes exclusive for
 * a moment (store_pg_indexer.c). */
#define PG_INSERT_LOCK "hashtext('rmqs-jobs-insert')"

/* Statements a connection keeps prepared; more are run unprepared. */
#define PG_PREPARED_MAX 32

/* A BEGIN not sent yet (pg_tx_begin): it goes with the transaction's first
 * statements, in their round trip. */
enum { PG_BEGIN_NONE, PG_BEGIN_PLAIN, PG_BEGIN_INSERT };

/* The database every connection goes to (one, in store_backend). */
typedef struct pg_target {
    char *url;          /* as given (may hold a password: never logged) */
    char *safe_url;     /* for logs: no password */
    int64_t timeout_ms; /* store_options.db_timeout_ms: the bound of a
                           connect and of the session's set-up */
} pg_target;

/* One connection of a role, and its open transaction's bookkeeping. */
typedef struct pg_conn {
    pthread_mutex_t mu;  /* held by every call that uses it */
    const pg_target *db; /* where it connects */
    const char *role;    /* "writer", "feeder", "dispatch": for logs */
    PGconn *c;           /* NULL or broken: (re)opened by pg_use */
    bool relaxed;        /* synchronous_commit = off on this connection */
    int slot;            /* its job_counts slot */
    store_delta delta;   /* the open transaction's count changes */
    int64_t notify_due;  /* earliest pending due_at stored, or INT64_MAX */
    int64_t timeout_ms;  /* statement_timeout of the connection (its answer
                           is awaited PG_ANSWER_MARGIN_MS longer); 0: none */
    bool budget;         /* timeout_ms is a search budget: a statement it
                           ends is RMQS_ETIMEDOUT, the caller's answer */
    int64_t retry_at;    /* tu_mono_ms: no new connect before (after a
                            failed one), calls fail at once meanwhile */
    int begin;           /* PG_BEGIN_*: the pending BEGIN of pg_tx_begin */
    /* the statements prepared on c (emptied when c is closed) */
    const pg_stmt *prepared[PG_PREPARED_MAX];
    int n_prepared;
} pg_conn;

/* After a failed connect, how long a connection's calls fail at once
 * (RMQS_EDB) instead of each waiting for a connect of its own: during an
 * outage a client gets its 503 at once, and the threads that retry do not
 * queue behind one another's connect_timeout. */
#define PG_RECONNECT_PAUSE_MS 500

/* How much longer than a connection's statement_timeout its answer is
 * awaited before the connection is given up (store_pg_conn.c): the
 * server's own cancel comes first when the server is alive. */
#define PG_ANSWER_MARGIN_MS 1000
#define PG_DEFAULT_DB_TIMEOUT_MS 5000

/* Lock pc and make sure its connection is up: (re)opened if there is none,
 * or if the server closed it while it was idle (a restart, a failover, a
 * backend ended: seen without a round trip, so nothing is sent into a dead
 * connection); RMQS_EDB (logged) if it cannot be: pc stays locked either
 * way, the caller unlocks it (pg_done). */
rmqs_rc pg_use(pg_conn *pc);
void pg_done(pg_conn *pc);
/* Close pc's connection, if any (its prepared statements go with it):
 * pg_use opens a new one. */
void pg_close(pg_conn *pc);

/* Route c's notices and asynchronous errors to the log (one line each)
 * instead of stderr. */
void pg_quiet(PGconn *c);
/* Open a bare connection to db->url with the service's bounds (TCP
 * keepalives, tcp_user_timeout, and connect_timeout unless the URL or
 * PGCONNECT_TIMEOUT sets one); NULL (the reason, without the password, in
 * buf) on failure. */
PGconn *pg_open_conn(const pg_target *db, char *buf, size_t len);
/* pg_open_conn, set up for role (the application_name; relaxed:
 * synchronous_commit off; timeout_ms the statement_timeout and
 * idle_in_transaction_session_timeout, 0 none), in nonblocking mode (every
 * send is flushed by the bounded waits below); NULL (reason in buf) on
 * failure. */
PGconn *pg_connect(const pg_target *db, const char *role, bool relaxed,
                   int64_t timeout_ms, char *buf, size_t len);
/* The next result of what was sent on pc (what is not sent yet is flushed
 * meanwhile), awaited until deadline (tu_mono_ms): NULL when there is none
 * left, or when the deadline passed first (*late set: the connection is
 * closed and pc->c NULL, the call's outcome unknown, as after a crash). */
PGresult *pg_result_by(pg_conn *pc, const char *op, int64_t deadline,
                       bool *late);
/* The deadline of a statement sent on pc now (tu_mono_ms). */
int64_t pg_deadline(const pg_conn *pc);
/* The first line of libpq's message msg into buf, for one-line logs. */
void pg_first_line(const char *msg, char *buf, size_t len);
/* Map and log a failed result (res may be NULL: the connection's own
 * error); a broken connection is closed. */
rmqs_rc pg_fail(pg_conn *pc, const char *op, PGresult *res);

/* Round trips to the server made by the calling thread so far: the times
 * it sent statements and waited for their answers (connecting not
 * counted). test_store_pg_dispatch.c counts them per call. */
uint64_t pg_round_trips(void);

/*
 * Statements. Each call below sends everything it has at once, with the
 * pending BEGIN of pg_tx_begin ahead of it, then awaits every answer (each
 * until pg_deadline): one round trip, two with a COPY. A failure is mapped
 * (store_pg_map_sqlstate), logged with the statement's op and returned; a
 * broken connection is closed for pg_use to reopen.
 */
/* Run st with n text parameters (binary where bin[i] is nonzero; lens for
 * those), results in binary: the result (caller PQclear), or NULL after a
 * failure (in *rc). */
PGresult *pg_run(pg_conn *pc, const pg_stmt *st, int n, const char *const *vals,
                 const int *lens, const int *bin, rmqs_rc *rc);
/* As pg_run for sql that is not worth preparing (run once, or built at
 * run time), logged as op. */
PGresult *pg_exec(pg_conn *pc, const char *op, const char *sql, int n,
                  const char *const *vals, const int *lens, const int *bin,
                  rmqs_rc *rc);
/* One statement of pg_pipeline: st and its parameters as for pg_run; res
 * its result; rows NULL, or where its rows are counted as they come
 * (single-row mode: none is kept, res has none) and stay counted when the
 * statement fails on the way (a search cut short by its budget). */
typedef struct pg_call {
    const pg_stmt *st;
    int n;
    const char *const *vals;
    const int *lens, *bin;
    PGresult *res;
    int64_t *rows;
} pg_call;
/* calls[0..n) in one round trip (libpq's pipeline mode). They are one
 * transaction: the server commits them at the end of the pipeline, or
 * none of them (begun by pg_tx_begin, they are part of that one). On
 * success each calls[i].res holds its result (caller PQclear); after a
 * failure every res is NULL. */
rmqs_rc pg_pipeline(pg_conn *pc, pg_call *calls, size_t n);
/* stmts[0..n) in one message of the text protocol (no parameters; one of
 * them may be a COPY ... FROM STDIN, fed copy[0..copy_len)). With
 * failed_at or last, each stmts[i] is one statement: *failed_at gets the
 * index of the one that failed (-1: none did), *last the result of
 * stmts[n - 1] (NULL unless it ran; caller PQclear). */
rmqs_rc pg_exec_text(pg_conn *pc, const char *op, const char *const *stmts,
                     size_t n, const void *copy, size_t copy_len,
                     int *failed_at, PGresult **last);
/* pg_exec_text of one string (several statements OK). */
rmqs_rc pg_exec_simple(pg_conn *pc, const char *op, const char *sql);

/* Decimal text of v into buf (24 bytes). */
const char *pg_i64(char buf[24], int64_t v);

#endif
