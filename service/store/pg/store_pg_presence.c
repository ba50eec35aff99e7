/*
 * store_pg_presence.c - this instance's session on the database, the
 * wake-ups it listens for there, and the watch for instances whose session
 * ended (store_pg_core.h; migration 0006_instances.sql).
 *
 * Why: a claimed job belongs to its claimer until its lease ends (10 s by
 * default), so the jobs of an instance killed with -9 used to wait a whole
 * lease while every other job went out on time. But PostgreSQL knows at
 * once when a process dies: its sockets close, the server ends its
 * backends, and the session-level locks they held are free. That is the
 * signal used here; the lease stays the rule for an instance that is
 * alive but silent (frozen, cut off), whose session the server keeps.
 *
 * How it works:
 *   - The session. The listener thread's connection LISTENs for rmqs_due
 *     and, on it, takes pg_try_advisory_lock(PG_PRESENCE_NS, hashtext(id))
 *     and inserts (id, started_at, host, pid) into instances. The id is the
 *     owner of every claim made while the session lasts.
 *   - Its loss. When that connection is lost, no claim is valid any more
 *     (pg_claims_valid_since says "never"): the dispatcher publishes none
 *     of the claims it holds and hands them back, and no claim is made
 *     until a new session begins. The new session takes a new id: the
 *     server may keep the old backend, and its lock, for a while (a cut
 *     network is seen only through keepalives), and a new id never waits
 *     for it. Outcomes are still settled for the last PG_OWNED_IDS ids
 *     (a job published just before the loss is marked sent, not sent
 *     again); claims of an old id that nobody settles are taken over by
 *     the watch once its lock is free, or by the lease.
 *   - The watch (pg_watch, from the keeper thread every
 *     PG_WATCH_MS): one statement deletes the rows of instances whose lock
 *     nobody holds and puts their publishing jobs back to pending (a
 *     NOTIFY wakes the dispatchers). Several instances may run it at once:
 *     the row locks make the later ones find nothing. An instance of an
 *     earlier version has no row: its claims are left to the lease. In the
 *     same round trip (one pipeline), the shares (store_pg_dispatch.c):
 *     this instance's mark as a claimer (instances.claiming_until,
 *     migration 0007) is kept PG_CLAIMER_MS ahead while its dispatcher
 *     claims, and the claimers and its rank among them are read again; a
 *     change wakes the dispatcher (with 0), whose share just changed.
 *   - Wake-ups. A NOTIFY rmqs_due carries the earliest due time stored by
 *     a commit; the listener passes it to the wake callback
 *     (store_set_wake), and 0 after a new session: anything may have been
 *     missed.
 */
#include "store_pg_core.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

#define MOD "store"

/* The first key of the presence locks (two-key advisory locks: no clash
 * with the migrations' one-key lock); "RMQS". */
#define PG_PRESENCE_NS "1380799827"

/* A session idle this long sends a statement (pg_listener_main). */
#define PG_SESSION_PING_MS 60000

/* ------------------------------------------------------------------------ */
/* Ids                                                                      */

rmqs_rc pg_new_id(char out[PG_ID_LEN])
{
    unsigned char r[12];

    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return RMQS_ESYS;
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return RMQS_OK;
}

void pg_owner_current(store_backend *b, char out[PG_ID_LEN])
{
    pthread_mutex_lock(&b->id_mu);
    memcpy(out, b->ids[b->id_at], PG_ID_LEN);
    pthread_mutex_unlock(&b->id_mu);
}

void pg_owner_mine(store_backend *b, char out[PG_OWNED_LEN])
{
    size_t at = 0;

    pthread_mutex_lock(&b->id_mu);
    out[at++] = '{';
    for (int i = 0; i < PG_OWNED_IDS; i++) {
        if (b->ids[i][0] == '\0')
            continue;
        if (at > 1)
            out[at++] = ',';
        memcpy(out + at, b->ids[i], strlen(b->ids[i]));
        at += strlen(b->ids[i]);
    }
    out[at++] = '}';
    out[at] = '\0';
    pthread_mutex_unlock(&b->id_mu);
}

/* A new current id (a new session), keeping the last PG_OWNED_IDS. */
static rmqs_rc next_id(store_backend *b)
{
    char id[PG_ID_LEN];

    if (pg_new_id(id) != RMQS_OK)
        return RMQS_ESYS;
    pthread_mutex_lock(&b->id_mu);
    b->id_at = (b->id_at + 1) % PG_OWNED_IDS;
    memcpy(b->ids[b->id_at], id, PG_ID_LEN);
    pthread_mutex_unlock(&b->id_mu);
    return RMQS_OK;
}

/* The database's clock, as measured (store_pg_dispatch.c). */
static int64_t db_now(store_backend *b)
{
    return tu_now_ms() + atomic_load(&b->clock_offset);
}

int64_t pg_claims_valid_since(store_backend *b)
{
    return atomic_load(&b->present_since);
}

/* ------------------------------------------------------------------------ */
/* The session                                                              */

/* On pc (up, this thread's): LISTEN, the lock of the current id (a new id
 * while another session holds it: a hash shared by chance) and its row.
 * RMQS_OK once all three are done. */
static rmqs_rc begin_session(store_backend *b, pg_conn *pc)
{
    char id[PG_ID_LEN], now[24], host[256] = "", pid[24];
    PGresult *res;
    rmqs_rc rc = pg_exec_simple(pc, "listen", "LISTEN " PG_NOTIFY_CHANNEL);

    for (int tries = 0; rc == RMQS_OK; tries++) {
        bool got;
        const char *vals[1] = {id};

        pg_owner_current(b, id);
        res = pg_exec(pc, "presence_lock",
                      "SELECT pg_try_advisory_lock(" PG_PRESENCE_NS
                      ", hashtext($1))",
                      1, vals, NULL, NULL, &rc);
        got = res != NULL && PQntuples(res) == 1 && *PQgetvalue(res, 0, 0) != 0;
        PQclear(res);
        if (rc != RMQS_OK || got)
            break;
        if (tries >= 3 || next_id(b) != RMQS_OK)
            return RMQS_EDB;
    }
    if (rc != RMQS_OK)
        return rc;
    (void)gethostname(host, sizeof(host) - 1);
    {
        const char *vals[4] = {id, pg_i64(now, db_now(b)), host,
                               pg_i64(pid, (int64_t)getpid())};
        res = pg_exec(pc, "presence_row",
                      "INSERT INTO instances (id, started_at, host, pid) "
                      "VALUES ($1, $2::bigint, $3, $4::integer) "
                      "ON CONFLICT (id) DO NOTHING",
                      4, vals, NULL, NULL, &rc);
        PQclear(res);
    }
    if (rc == RMQS_OK) {
        /* no claim of this session is older than its beginning */
        atomic_store(&b->renew_chain, db_now(b) + b->lease_ms);
        atomic_store(&b->present_since, db_now(b));
    }
    return rc;
}

/* The session lost (or never begun): no claim holds, a new id for the
 * next one. Logged once per loss. */
static void end_session(store_backend *b, pg_conn *pc, bool had)
{
    char id[PG_ID_LEN];

    atomic_store(&b->present_since, INT64_MAX);
    atomic_store(&b->renew_chain, 0); /* no claim of before is renewed */
    atomic_store(&b->renewed_until, 0);
    pg_close(pc);
    if (!had)
        return;
    pg_owner_current(b, id);
    log_warn(MOD,
             "lost the database session that marks this instance alive: "
             "its claimed jobs are handed back, and none is claimed until "
             "a new session begins",
             "instance=%s url=%s", id, b->db.safe_url);
    if (next_id(b) != RMQS_OK)
        log_error(MOD, "no randomness for a new instance id; keeping it",
                  "instance=%s", id);
}

rmqs_rc pg_presence_open(store_backend *b)
{
    pg_conn *pc = &b->lsn;
    char msg[256];
    rmqs_rc rc;

    pc->c =
        pg_connect(&b->db, pc->role, true, pc->timeout_ms, msg, sizeof(msg));
    if (pc->c == NULL)
        return RMQS_EDB;
    rc = begin_session(b, pc);
    if (rc != RMQS_OK)
        end_session(b, pc, false);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Wake-ups                                                                 */

void pg_set_wake(store_backend *b, store_wake_fn fn, void *arg)
{
    pthread_mutex_lock(&b->wake_mu);
    b->wake_fn = fn;
    b->wake_arg = arg;
    pthread_mutex_unlock(&b->wake_mu);
}

static void wake(store_backend *b, int64_t due_at)
{
    pthread_mutex_lock(&b->wake_mu);
    if (b->wake_fn != NULL)
        b->wake_fn(b->wake_arg, due_at);
    pthread_mutex_unlock(&b->wake_mu);
}

/* A new session on pc, or false (logged once per outage). */
static bool session_again(store_backend *b, pg_conn *pc, bool *logged)
{
    char msg[256] = "";

    pc->c =
        pg_connect(&b->db, pc->role, true, pc->timeout_ms, msg, sizeof(msg));
    if (pc->c != NULL && begin_session(b, pc) == RMQS_OK) {
        char id[PG_ID_LEN];
        pg_owner_current(b, id);
        log_info(MOD, "database session begun; claiming again",
                 "instance=%s url=%s", id, b->db.safe_url);
        *logged = false;
        return true;
    }
    if (!*logged)
        log_warn(MOD, "cannot begin a database session; retrying",
                 "url=%s reason=\"%s\"", b->db.safe_url,
                 msg[0] ? msg : "the session's statements failed");
    *logged = true;
    end_session(b, pc, false);
    return false;
}

/* The byte on stop_pipe read: true if it says stop (pg_threads_stop), else
 * it was pg_session_doubt's. */
static bool kicked(store_backend *b)
{
    char x;
    bool stop;

    (void)!read(b->stop_pipe[0], &x, 1);
    pthread_mutex_lock(&b->stop_mu);
    stop = b->stopping;
    pthread_mutex_unlock(&b->stop_mu);
    return stop;
}

void pg_session_doubt(store_backend *b)
{
    atomic_store(&b->session_doubt, true);
    if (b->stop_pipe[1] >= 0)
        (void)!write(b->stop_pipe[1], "d", 1);
}

void *pg_listener_main(void *arg)
{
    store_backend *b = arg;
    pg_conn *pc = &b->lsn;
    bool logged = false;

    for (;;) {
        struct pollfd fds[2] = {{.fd = b->stop_pipe[0], .events = POLLIN},
                                {.fd = -1, .events = POLLIN}};
        int64_t due = INT64_MAX;
        PGnotify *nf;

        if (pc->c == NULL) {
            if (!session_again(b, pc, &logged)) {
                if (poll(fds, 1, 1000) > 0 && kicked(b))
                    break; /* stopping */
                continue;
            }
            wake(b, 0); /* claims may be waiting, wake-ups were missed */
        }
        fds[1].fd = PQsocket(pc->c);
        int r = poll(fds, 2, PG_SESSION_PING_MS);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[0].revents) {
            if (kicked(b))
                break; /* stopping */
            if (atomic_exchange(&b->session_doubt, false)) {
                char id[PG_ID_LEN];
                pg_owner_current(b, id);
                log_warn(MOD,
                         "a claim's outcome is unknown: this session "
                         "ends, so that its claims go back to pending",
                         "instance=%s", id);
                end_session(b, pc, true);
            }
            continue;
        }
        if (r == 0) {
            /* a session idle this long says it lives: a proxy's idle
             * timeout does not end it, and a path that died silently is
             * found (the statement is bounded like any other) */
            if (pg_exec_simple(pc, "session_ping", "SELECT 1") != RMQS_OK) {
                end_session(b, pc, true);
                continue;
            }
            /* notifications that came with its answer: below */
        } else if (!PQconsumeInput(pc->c)) {
            end_session(b, pc, true);
            continue;
        }
        while ((nf = PQnotifies(pc->c)) != NULL) {
            char *end;
            long long v = strtoll(nf->extra, &end, 10);
            if (end != nf->extra && v < due)
                due = v;
            PQfreemem(nf);
        }
        if (due != INT64_MAX)
            wake(b, due);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The watch                                                                */

/* Rows of instances whose lock is free go, and their publishing jobs back
 * to pending (counted in slot $1); the dead ids (no jobs: NULL due_at) and
 * the jobs' due times come back in one result. */
static const pg_stmt watch_stmt = {
    "watch",
    "WITH dead AS (DELETE FROM instances i WHERE NOT EXISTS ("
    "SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' "
    "AND l.database = (SELECT oid FROM pg_database "
    "WHERE datname = current_database()) "
    "AND l.classid = " PG_PRESENCE_NS " AND l.objid = hashtext(i.id)::oid "
    "AND l.objsubid = 2 AND l.granted) RETURNING i.id), "
    "moved AS (UPDATE jobs SET status = 0, "
    "attempts = greatest(attempts - 1, 0), owner = NULL, lease_until = NULL "
    "WHERE status = 1 AND owner IN (SELECT id FROM dead) "
    "RETURNING due_at, status AS moved_to)" PG_COUNTED(
        "1", "$1") "SELECT due_at, NULL::text FROM moved "
                   "UNION ALL SELECT NULL::bigint, id FROM dead",
    false};

/* This instance's mark as a claimer ($1 its id), kept PG_CLAIMER_MS ($2)
 * ahead when $3; then the other claimers, and those of them before it in
 * the order of ids (its rank). After the watch, in its transaction: the
 * dead are gone. */
static const pg_stmt shares_stmt = {
    "shares",
    "WITH mark AS (UPDATE instances SET claiming_until = " PG_NOW_MS
    " + $2::bigint WHERE id = $1 AND $3::boolean RETURNING 1) "
    "SELECT count(*) FILTER (WHERE id <> $1), count(*) FILTER (WHERE id < $1) "
    "FROM instances WHERE claiming_until >= " PG_NOW_MS,
    false};

/* Whether this instance claims (its dispatcher claimed lately) and its
 * mark would lapse soon: then the mark is renewed. */
static bool mark_due(store_backend *b)
{
    int64_t claimed = atomic_load(&b->claimed_at);

    return claimed > 0 && tu_mono_ms() - claimed < PG_CLAIMER_MS / 2 &&
           db_now(b) + PG_CLAIMER_MS / 2 >= b->claimer_until;
}

/* The shares read by the watch (shares_stmt's row) into b->shares; the
 * dispatcher is woken when they changed (what is its own has changed). */
static void shares_read(store_backend *b, const PGresult *res, bool marked)
{
    int64_t shares, before;

    if (res == NULL || PQntuples(res) != 1)
        return;
    if (marked)
        b->claimer_until = db_now(b) + PG_CLAIMER_MS;
    shares = (pg_int(res, 0, 0) + 1) << 32 | pg_int(res, 0, 1);
    before = atomic_exchange(&b->shares, shares);
    if (before != shares) {
        log_info(MOD, "claim shares", "claimers=%" PRId64 " rank=%" PRId64,
                 shares >> 32, shares & 0xffffffff);
        wake(b, 0);
    }
}

rmqs_rc pg_watch(store_backend *b, pg_conn *pc, size_t *n_out)
{
    char ids[256] = "", slot[24], claimer[24], id[PG_ID_LEN];
    bool marked = mark_due(b);
    const char *w_vals[1] = {pg_i64(slot, pc->slot)};
    const char *s_vals[3] = {id, pg_i64(claimer, PG_CLAIMER_MS),
                             marked ? "true" : "false"};
    pg_call calls[2] = {{&watch_stmt, 1, w_vals, NULL, NULL, NULL, NULL},
                        {&shares_stmt, 3, s_vals, NULL, NULL, NULL, NULL}};
    PGresult *res;
    size_t at = 0, jobs = 0, dead = 0;
    rmqs_rc rc;

    *n_out = 0;
    pg_owner_current(b, id);
    rc = pg_pipeline(pc, calls, 2);
    if (rc != RMQS_OK)
        return rc;
    res = calls[0].res;
    for (int i = 0; i < PQntuples(res); i++) {
        if (!PQgetisnull(res, i, 0)) {
            pg_note_due(pc, pg_int(res, i, 0));
            jobs++;
        } else if (at + PG_ID_LEN + 2 < sizeof(ids)) {
            at += (size_t)snprintf(ids + at, sizeof(ids) - at, "%s%s",
                                   dead ? "," : "", PQgetvalue(res, i, 1));
            dead++;
        }
    }
    PQclear(res);
    shares_read(b, calls[1].res, marked);
    PQclear(calls[1].res);
    pg_notify_due(b, pc);
    if (dead > 0)
        log_warn(MOD,
                 "instances whose database session ended: their claimed "
                 "jobs go to the others",
                 "n=%zu instances=%s", jobs, ids);
    *n_out = jobs;
    return RMQS_OK;
}
