/*
 * store_pg_dispatch.c - the dispatcher's calls of the PostgreSQL backend and
 * what makes N instances on one database safe (store_pg_core.h; the contract is
 * store.h and store_backend.h): the claim, the settle as a compare-and-set
 * on the owner, lease renewal, reclaim of expired leases, the LISTEN/NOTIFY
 * wake-up and the clock offset.
 *
 * Why: every instance dispatches; no leader. A job must be published by one
 * of them, again (at least once) if its claimer dies, and never marked by
 * an instance that lost it.
 *
 * How it works:
 *   - Claim. read_due IS the claim, on the feeder's connection, one
 *     statement (pg_claim_sql) that counts its move itself (PG_COUNTED),
 *     sent with its BEGIN; the COMMIT follows once the claimed rows are in
 *     hand (two round trips, four before): a claim committed by a server
 *     whose answer never reached us would be jobs held by nobody, their
 *     lease renewed for ever by this instance:
 *       UPDATE jobs SET status = publishing, owner = <instance>,
 *         lease_until = <db now + lease>, attempts = attempts + 1
 *       WHERE seq = ANY(ARRAY(SELECT seq ... WHERE status = pending AND
 *         due_at <= <due_by> AND <its own share> ORDER BY due_at,
 *         claim_rank, seq LIMIT n FOR NO KEY UPDATE SKIP LOCKED, then as
 *         many of the others' shares, due by <due_by> - PG_STEAL_MS))
 *     Two instances claiming at once skip each other's locked rows, so a
 *     job is claimed once; a cancel or reschedule waits for the claim's row
 *     lock and then finds the job publishing (409), or holds the row first
 *     and the claim skips it. The jobs are returned as before the claim
 *     (pending, attempts not bumped): store.c's front turns them into what
 *     the claim made them, as for SQLite.
 *   - Shares. Instances that all claim from the head of jobs_due get in
 *     each other's way: a NOTIFY wakes them all at once for the same jobs,
 *     each claim locks rows the others then walk past or re-check, and a
 *     burst is fought over row by row. So the due jobs are dealt out: runs
 *     of PG_SHARE_RUN consecutive seq, (seq / run) % claimers, go to the
 *     claimer of that rank in the order of ids, where the claimers are the
 *     instances whose mark is current (instances.claiming_until, migration
 *     0007; store_pg_presence.c's watch keeps this instance's mark while
 *     its dispatcher claims, and reads claimers and rank every
 *     PG_WATCH_MS). A claim takes its own share's due jobs in due order
 *     and, only if they are fewer than its limit, others' jobs due
 *     PG_STEAL_MS before its horizon that nobody claimed yet: a healthy
 *     claimer has claimed its own by then (it claims lookahead ahead, every
 *     lookahead/4 at most), so these are the jobs of a claimer that is
 *     gone, frozen, stopped claiming or fell behind; they are still
 *     claimed ahead of their time. Why it is safe: the share only chooses
 *     which rows a claim reads first; every row is still locked with SKIP
 *     LOCKED and re-checked pending, so two instances whose views of the
 *     claimers differ for a moment (one joined, one died) may read the same
 *     rows but never both claim one, and a share whose claimer is gone is
 *     taken by the others within PG_STEAL_MS of their horizon, then dealt
 *     anew once the watch drops it (its session ended: at once; its mark
 *     lapsed: PG_CLAIMER_MS). Due order: each claim takes its jobs in due
 *     order, its own share first; every share is claimed ahead of its time
 *     while its claimer keeps up, or else by the others PG_STEAL_MS before
 *     their horizon. In a backlog (everything overdue, every claim full of
 *     its own share) a claimer that falls silent keeps its share until its
 *     mark lapses, and one that is slower than the others until they have
 *     drained theirs: then they take its oldest jobs first.
 *     next_due likewise answers the earliest due time this instance would
 *     claim at: its own share's, or another's plus PG_STEAL_MS.
 *   - Settle (record): claims are already written; outcomes are UPDATE ...
 *     WHERE id = ANY(...) AND status = publishing AND owner = <instance>,
 *     each counting its moves, all of a record in one pipeline (one round
 *     trip, one transaction).
 *     A job reclaimed by another instance is never marked by us: counted,
 *     one warning per batch, not an error.
 *   - Housekeeping thread, every lease/4 (on the dispatch connection):
 *     renews the leases of the jobs this instance holds (lease_until = db
 *     now + lease, while the process lives), puts publishing jobs whose
 *     lease expired back to pending (attempts - 1, as SQLite's recover),
 *     and measures the clock. A crashed instance's jobs are therefore
 *     published again within lease + lease/4 (plus the claim's look-ahead).
 *     store_recover at start-up does the same reclaim: it never touches the
 *     jobs of live instances, whose leases are current.
 *   - Wake: every transaction that stores or reschedules pending jobs
 *     (anywhere) is followed by pg_notify('rmqs_due', <earliest due_at>),
 *     right after its COMMIT (pg_tx_commit, pg_notify_due in
 *     store_pg_core.c); a listener thread with a connection of its own
 *     polls its socket and calls the wake callback (store_set_wake). After
 *     a reconnect, or when the shares change, it is called with 0:
 *     anything may have been missed.
 *   - Clock: every due time is compared with the database's clock. The
 *     offset (db - local CLOCK_REALTIME) is measured as db_ts - t_after,
 *     the best of three round trips, at open and every lease/4: a lower
 *     bound, so local + offset is never ahead of the database (by more
 *     than a round trip: when [db_ts - t_after, db_ts - t_before] holds 0,
 *     the clocks agree within the round trip and the offset is 0). Every
 *     time the dispatcher passes (due_by, retry_at) or gets back (due_at,
 *     next_due, lease_until) is on the database's clock: the dispatcher
 *     adds the offset to its own clock.
 */
#include "store_pg_core.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"
#include "worker.h"

#define MOD "store"

/* The claim, one statement (prepared) sent with its BEGIN, its COMMIT
 * sent once its rows are in hand: two round trips; returns the jobs as
 * they were (pending, attempts before), and counts the move itself
 * (PG_COUNTED). $1 owner, $2 lease, $3 now, $4
 * due by, $5 limit, $6 claimers, $7 this one's rank among them, $8 due by
 * for another's jobs (PG_STEAL_MS before $4; none at all when alone), $9
 * the count slot.
 * The rows are locked by the inner SELECTs (re-checked pending when
 * locked), so the outer UPDATE finds them by seq alone: a second "status =
 * 0" there let the planner of a table without statistics read every
 * pending job through jobs_status_deliver and filter on seq
 * (test_store_pg_dispatch.c). FOR NO KEY UPDATE, the lock the UPDATE
 * itself takes (it changes no key): FOR UPDATE also conflicts with the KEY
 * SHARE lock that an insert into job_text (REFERENCES jobs (seq)) holds on
 * the job until the indexer's batch commits, so SKIP LOCKED passed over
 * due jobs while the indexer ran (found by the store unit tests on
 * PostgreSQL). Two claims, and a claim and a cancel or reschedule, still
 * exclude each other. The second SELECT (another's share) runs only when
 * the first one found fewer than the limit (the outer LIMIT stops
 * pulling); alone, its range is empty (one step into the index). */
const char pg_claim_sql[] =
    "WITH moved AS (UPDATE jobs SET status = 1, owner = $1, "
    "lease_until = " PG_NOW_MS " + $2::bigint, attempts = attempts + 1, "
    "updated_at = $3::bigint "
    "WHERE seq = ANY(ARRAY(SELECT seq FROM ("
    "SELECT seq FROM (SELECT seq FROM jobs WHERE status = 0 "
    "AND due_at <= $4::bigint "
    "AND (seq / " PG_SHARE_RUN ") % $6::bigint = $7::bigint "
    "ORDER BY due_at, claim_rank, seq LIMIT $5::bigint "
    "FOR NO KEY UPDATE SKIP LOCKED) AS own UNION ALL "
    "SELECT seq FROM (SELECT seq FROM jobs WHERE status = 0 "
    "AND due_at <= $8::bigint "
    "AND (seq / " PG_SHARE_RUN ") % $6::bigint <> $7::bigint "
    "ORDER BY due_at, claim_rank, seq LIMIT $5::bigint "
    "FOR NO KEY UPDATE SKIP LOCKED) AS others) AS due LIMIT $5::bigint)) "
    "RETURNING seq, id, 0::smallint, exchange, routing_key, deliver_at, "
    "due_at, delay_ms, created_at, updated_at, sent_at, attempts - 1, "
    "max_attempts, last_error, headers, properties, body_kind, body, source, "
    "lease_until, schedule, fire_at, expires_at, priority, claim_rank, "
    "held_by, held_ms, failed_at, status AS moved_to)" PG_COUNTED(
        "0", "$9") "SELECT * FROM moved";
static const pg_stmt claim_stmt = {"claim", pg_claim_sql, false};

/* The earliest due time this instance would claim at: its own share's
 * first, or another's first plus PG_STEAL_MS ($3), whichever comes first
 * ($1 claimers, $2 this one's rank). Its own are looked for only among the
 * jobs due within $3 of the first one. */
static const pg_stmt next_due_stmt = {
    "next_due",
    "SELECT least((SELECT due_at FROM jobs WHERE status = 0 "
    "AND due_at <= m.v + $3::bigint "
    "AND (seq / " PG_SHARE_RUN ") % $1::bigint = $2::bigint "
    "ORDER BY due_at, claim_rank, seq LIMIT 1), m.v + $3::bigint) "
    "FROM (SELECT min(due_at) AS v FROM jobs WHERE status = 0) AS m",
    false};

/* Expired leases back to pending (every instance, every lease/4). */
static const pg_stmt reclaim_stmt = {
    "reclaim",
    "WITH moved AS (UPDATE jobs SET status = 0, "
    "attempts = greatest(attempts - 1, 0), owner = NULL, lease_until = NULL "
    "WHERE status = 1 AND lease_until < " PG_NOW_MS
    " RETURNING due_at, status AS moved_to)" PG_COUNTED(
        "1", "$1") "SELECT due_at FROM moved",
    false};

static const pg_stmt clock_stmt = {
    "clock",
    "SELECT floor(extract(epoch from clock_timestamp()) * 1000000)::bigint",
    false};

int64_t pg_clock_offset_ms(store_backend *b)
{
    return atomic_load(&b->clock_offset);
}

static int64_t real_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

rmqs_rc pg_measure_clock(store_backend *b, pg_conn *pc)
{
    int64_t best = INT64_MIN;
    rmqs_rc rc = RMQS_OK;

    for (int i = 0; i < 3 && rc == RMQS_OK; i++) {
        int64_t before = real_us();
        PGresult *res = pg_run(pc, &clock_stmt, 0, NULL, NULL, NULL, &rc);
        int64_t after = real_us();

        if (res != NULL && PQntuples(res) == 1) {
            int64_t db = pg_int(res, 0, 0);
            int64_t lo = db - after;  /* <= the true offset */
            int64_t hi = db - before; /* >= the true offset */
            /* floor to ms, so it stays a lower bound; a round trip that
             * brackets 0 is one clock (one host, or NTP-synced to within
             * the round trip): 0, rather than 1 ms late for ever */
            int64_t ms = lo <= 0 && hi >= 0 ? 0
                         : lo >= 0          ? lo / 1000
                                            : -((-lo + 999) / 1000);
            if (ms > best)
                best = ms;
        }
        PQclear(res);
    }
    if (best != INT64_MIN)
        atomic_store(&b->clock_offset, best);
    return best != INT64_MIN ? RMQS_OK : rc;
}

/* ------------------------------------------------------------------------ */
/* Next due, claim                                                          */

/* This instance's share as parameters: claimers, its rank, and the wait
 * before another's job is taken (0 when it is alone: all is its own).
 * Returns the claimers. */
static int64_t share_params(store_backend *b, char n[24], char k[24],
                            char steal[24])
{
    int64_t shares = atomic_load(&b->shares);
    int64_t claimers = shares >> 32;

    if (claimers < 1) { /* not known yet: all of it */
        claimers = 1;
        shares = 0;
    }
    pg_i64(n, claimers);
    pg_i64(k, shares & 0xffffffff);
    pg_i64(steal, claimers > 1 ? PG_STEAL_MS : 0);
    return claimers;
}

rmqs_rc pg_next_due(store_backend *b, claimset_t *held, bool *any,
                    int64_t *due_at_out)
{
    char n[24], k[24], steal[24];
    const char *vals[3] = {n, k, steal};
    PGresult *res = NULL;
    rmqs_rc rc;

    (void)held; /* a claimed job is publishing in the database already */
    *any = false;
    share_params(b, n, k, steal);
    rc = pg_use(&b->feed);
    if (rc == RMQS_OK)
        res = pg_run(&b->feed, &next_due_stmt, 3, vals, NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        *any = true;
        *due_at_out = pg_int(res, 0, 0);
    }
    PQclear(res);
    pg_done(&b->feed);
    return rc;
}

/* The claim on the feeder's connection: up to limit jobs due by
 * due_by_ms (database clock), into c[] (grown), in due order, as before
 * the claim. */
static rmqs_rc claim(store_backend *b, int64_t due_by_ms, int64_t now_ms,
                     size_t limit, store_claimed **c, size_t *cap,
                     size_t *n_out)
{
    char lease[24], now[24], due[24], lim[24], id[PG_ID_LEN], n_sh[24],
        k_sh[24], steal[24], others[24], slot[24];
    const char *vals[9] = {id, lease, now, due, lim, n_sh, k_sh, others, slot};
    PGresult *res = NULL;
    pg_conn *pc = &b->feed;
    size_t n = 0;
    rmqs_rc rc;

    *n_out = 0;
    /* no claim without the session that marks this instance alive: the
     * others would take it over at once (store_pg_presence.c) */
    if (pg_claims_valid_since(b) == INT64_MAX)
        return RMQS_OK;
    atomic_store(&b->claimed_at, tu_mono_ms()); /* a claimer (the watch) */
    if (limit > (size_t)INT64_MAX)
        limit = (size_t)INT64_MAX;
    pg_owner_current(b, id);
    pg_i64(lease, b->lease_ms);
    pg_i64(now, now_ms);
    pg_i64(due, due_by_ms);
    pg_i64(lim, (int64_t)limit);
    /* another's jobs: none when alone, else those due PG_STEAL_MS sooner */
    pg_i64(others, share_params(b, n_sh, k_sh, steal) == 1
                       ? INT64_MIN
                       : due_by_ms - PG_STEAL_MS);
    rc = pg_use(pc);
    if (rc == RMQS_OK) {
        pg_i64(slot, pc->slot);
        rc = pg_tx_begin(b, pc);
    }
    if (rc == RMQS_OK)
        res = pg_run(pc, &claim_stmt, 9, vals, NULL, NULL, &rc);
    for (int i = 0; rc == RMQS_OK && i < PQntuples(res); i++) {
        if (n == *cap) {
            store_claimed *nc = store_grow(*c, cap, sizeof(**c));
            if (nc == NULL) {
                rc = RMQS_ENOMEM;
                break;
            }
            *c = nc;
        }
        rc = pg_row_to_job(res, i, &(*c)[n].job, &(*c)[n].seq);
        if (rc == RMQS_OK)
            n++;
    }
    /* the COMMIT only once the rows are in hand: a claim whose answer
     * never came (a server frozen, a path cut) is rolled back with its
     * session, instead of committed for an instance that does not know it
     * holds those jobs and would renew their lease for ever */
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc);
    else
        pg_tx_abort(pc);
    if (rc != RMQS_OK && n > 0) {
        /* the COMMIT's answer lost: committed or not, the jobs cannot be
         * handed over. If it was, they are ours in the database and the
         * keeper would renew their lease while we live: the session ends
         * instead (a new id), and the watch puts them back to pending. */
        log_error(MOD,
                  "claimed jobs dropped; the session ends so that they "
                  "go back to pending",
                  "n=%zu", n);
        pg_session_doubt(b);
        for (size_t i = 0; i < n; i++)
            job_clear(&(*c)[i].job);
        n = 0;
    }
    PQclear(res);
    pg_done(pc);
    /* RETURNING order is unspecified: due order is (due_at, seq) */
    store_claimed_sort(*c, n);
    *n_out = n;
    return rc;
}

rmqs_rc pg_read_due(store_backend *b, claimset_t *held, int64_t due_by_ms,
                    size_t limit, store_claimed **c, size_t *cap, size_t *n_out)
{
    (void)held; /* nothing held is pending in the database */
    return claim(b, due_by_ms, tu_now_ms(), limit, c, cap, n_out);
}

/* ------------------------------------------------------------------------ */
/* Record: outcomes as a compare-and-set on the owner                       */

/* Whether outcome o is settled with the others of kind k in one statement
 * (a group): SENT and RELEASE, but not a SENT that a limit held back (its
 * held_by and held_ms are its own: the held group). */
static bool in_group(const store_outcome *o, store_outcome_kind k)
{
    return o->kind == k && !(k == STORE_OUT_SENT && o->held_by != NULL);
}

/* "{hex,hex,...}" of the ids of outcomes of kind k, for decode(..., 'hex');
 * malloc'd, *count how many (0: NULL returned, nothing to do). */
static char *id_array(const store_outcome *o,
                      const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                      store_outcome_kind k, size_t *count)
{
    size_t m = 0, at = 0;
    char *s;

    for (size_t i = 0; i < n; i++)
        m += in_group(&o[i], k);
    *count = m;
    if (m == 0)
        return NULL;
    s = malloc(m * (2 * JOB_ID_BYTES + 1) + 3);
    if (s == NULL)
        return NULL;
    s[at++] = '{';
    for (size_t i = 0; i < n; i++) {
        if (!in_group(&o[i], k))
            continue;
        if (at > 1)
            s[at++] = ',';
        for (int j = 0; j < JOB_ID_BYTES; j++)
            at += (size_t)snprintf(s + at, 3, "%02x", ids[i][j]);
    }
    s[at++] = '}';
    s[at] = '\0';
    return s;
}

/* attempt_errors with this attempt's error appended ($1 now, $3 the
 * error, cut to JOB_ATTEMPT_ERROR_CHARS characters), the oldest dropped
 * beyond JOB_ATTEMPT_ERRORS_MAX (one is added at a time, so one drop
 * keeps the bound); as store_sqlite_core.c's. */
#define ATTEMPT_ERRORS_ADD                                                 \
    "(CASE WHEN jsonb_array_length(coalesce(attempt_errors, '[]')) >= 10 " \
    "THEN attempt_errors - 0 ELSE coalesce(attempt_errors, '[]') END) || " \
    "jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', "     \
    "$1::bigint, 'error', coalesce(substr($3::text, 1, 512), '')))"
_Static_assert(JOB_ATTEMPT_ERRORS_MAX == 10 && JOB_ATTEMPT_ERROR_CHARS == 512,
               "ATTEMPT_ERRORS_ADD writes the bounds as literals");

/* The settle statements. Each one moves the jobs still claimed by one of
 * this instance's ids ($3, or $5, $4, $6: owner = ANY), counts its moves
 * (PG_COUNTED: the last parameter is the count slot) and returns what the
 * caller notes: the due times of the jobs made pending again. */
#define IDS_MATCH                                                         \
    "id = ANY(ARRAY(SELECT decode(h, 'hex') FROM unnest($2::text[]) h)) " \
    "AND status = 1 AND owner = ANY($3::text[])"
#define HELD_MATCH                                                       \
    "FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) "   \
    "AS u(x, h, d, m) WHERE j.id = decode(u.x, 'hex') AND j.status = 1 " \
    "AND j.owner = ANY($6::text[]) RETURNING j.due_at, j.status AS moved_to)"
static const pg_stmt sent_stmt = {
    "settle_sent",
    "WITH moved AS (UPDATE jobs SET status = 2, sent_at = $1::bigint, "
    "updated_at = $1::bigint, owner = NULL, lease_until = NULL "
    "WHERE " IDS_MATCH " RETURNING due_at, status AS moved_to)" PG_COUNTED(
        "1", "$4") "SELECT due_at FROM moved",
    false};
static const pg_stmt release_stmt = {
    "settle_release",
    "WITH moved AS (UPDATE jobs SET status = 0, "
    "attempts = greatest(attempts - 1, 0), updated_at = $1::bigint, "
    "owner = NULL, lease_until = NULL "
    "WHERE " IDS_MATCH " RETURNING due_at, status AS moved_to)" PG_COUNTED(
        "1", "$4") "SELECT due_at FROM moved",
    false};
static const pg_stmt retry_stmt = {
    "settle_retry",
    "WITH moved AS (UPDATE jobs SET last_error = $3, "
    "updated_at = $1::bigint, attempt_errors = " ATTEMPT_ERRORS_ADD ", "
    "failed_at = CASE WHEN attempts >= max_attempts THEN $1::bigint END, "
    "status = CASE WHEN attempts >= max_attempts THEN 3 ELSE 0 END, "
    "due_at = CASE WHEN attempts >= max_attempts "
    "THEN due_at ELSE $4::bigint END, owner = NULL, lease_until = NULL "
    "WHERE id = $2 AND status = 1 AND owner = ANY($5::text[]) "
    "RETURNING status AS moved_to, due_at)" PG_COUNTED(
        "1", "$6") "SELECT moved_to, due_at FROM moved",
    false};
static const pg_stmt fail_stmt = {
    "settle_fail",
    "WITH moved AS (UPDATE jobs SET status = 3, last_error = $3, "
    "attempt_errors = " ATTEMPT_ERRORS_ADD ", failed_at = $1::bigint, "
    "updated_at = $1::bigint, owner = NULL, lease_until = NULL "
    "WHERE id = $2 AND status = 1 AND owner = ANY($4::text[]) "
    "RETURNING status AS moved_to)" PG_COUNTED("1", "$5") "SELECT 1 FROM moved",
    false};
static const pg_stmt expire_stmt = {
    "settle_expire",
    "WITH moved AS (UPDATE jobs SET status = 4, last_error = $3, "
    "updated_at = $1::bigint, owner = NULL, lease_until = NULL "
    "WHERE id = $2 AND status = 1 AND owner = ANY($4::text[]) "
    "RETURNING status AS moved_to)" PG_COUNTED("1", "$5") "SELECT 1 FROM moved",
    false};
static const pg_stmt hold_stmt = {
    "settle_hold",
    "WITH moved AS (UPDATE jobs j SET status = 0, "
    "attempts = greatest(j.attempts - 1, 0), updated_at = $1::bigint, "
    "held_by = u.h, due_at = u.d, held_ms = u.m, owner = NULL, "
    "lease_until = NULL " HELD_MATCH PG_COUNTED(
        "1", "$7") "SELECT due_at FROM moved",
    false};
static const pg_stmt sent_held_stmt = {
    "settle_sent_held",
    "WITH moved AS (UPDATE jobs j SET status = 2, sent_at = $1::bigint, "
    "updated_at = $1::bigint, held_by = u.h, held_ms = u.m, owner = NULL, "
    "lease_until = NULL " HELD_MATCH PG_COUNTED(
        "1", "$7") "SELECT due_at FROM moved",
    false};

/* One statement of a record, and what it needs until the pipeline ran. */
typedef struct settle {
    const pg_stmt *st;
    size_t asked;        /* outcomes it settles */
    const char *vals[7]; /* its parameters */
    int lens[7], bin[7];
    char num[24];   /* retry_at */
    char *owned[4]; /* arrays (freed) */
    bool note;      /* its rows' due_at: pending again, for the wake-up */
} settle;

/* The group of SENT or RELEASE outcomes (k) into *s; false on ENOMEM;
 * s->asked 0: none. */
static bool settle_group(settle *s, const store_outcome *o,
                         const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                         store_outcome_kind k, const char *const common[3])
{
    s->owned[0] = id_array(o, ids, n, k, &s->asked);
    if (s->asked == 0)
        return true;
    s->st = k == STORE_OUT_SENT ? &sent_stmt : &release_stmt;
    s->note = k == STORE_OUT_RELEASE;
    s->vals[0] = common[0];
    s->vals[1] = s->owned[0];
    s->vals[2] = common[1];
    s->vals[3] = common[2];
    return s->owned[0] != NULL;
}

/* One RETRY, EXPIRE or FAIL outcome into *s. */
static void settle_one(settle *s, const store_outcome *o,
                       const unsigned char id[JOB_ID_BYTES],
                       const char *const common[3])
{
    bool retry = o->kind == STORE_OUT_RETRY;
    int at = 0;

    s->st = retry                         ? &retry_stmt
            : o->kind == STORE_OUT_EXPIRE ? &expire_stmt
                                          : &fail_stmt;
    s->asked = 1;
    s->vals[at++] = common[0];
    s->lens[at] = JOB_ID_BYTES;
    s->bin[at] = 1;
    s->vals[at++] = (const char *)id;
    s->vals[at++] = o->error;
    if (retry)
        s->vals[at++] = pg_i64(s->num, o->retry_at);
    s->vals[at++] = common[1];
    s->vals[at++] = common[2];
}

/* Whether o is in the held group: a HOLD, or a SENT that a limit held
 * back. */
static bool is_held(const store_outcome *o)
{
    return o->kind == STORE_OUT_HOLD ||
           (o->kind == STORE_OUT_SENT && o->held_by != NULL);
}

/* Every HOLD outcome (hold true: pending again at retry_at, held by a
 * limit) or every SENT one that a limit held back (hold false), each with
 * its own held_by and held_ms, into *s: one statement over arrays (a burst
 * held by a limit is thousands of them). false on ENOMEM. */
static bool settle_held(settle *s, const store_outcome *o,
                        const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                        bool hold, const char *const common[3])
{
    const char **hex = calloc(n ? n : 1, sizeof(*hex)),
               **by = calloc(n ? n : 1, sizeof(*by));
    char(*buf)[2 * JOB_ID_BYTES + 1] = calloc(n ? n : 1, sizeof(*buf));
    int64_t *at = calloc(n ? n : 1, sizeof(*at)),
            *ms = calloc(n ? n : 1, sizeof(*ms));
    size_t m = 0;
    bool ok = false;

    if (hex == NULL || by == NULL || buf == NULL || at == NULL || ms == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (!is_held(&o[i]) || (o[i].kind == STORE_OUT_HOLD) != hold)
            continue;
        for (int j = 0; j < JOB_ID_BYTES; j++)
            snprintf(buf[m] + 2 * j, 3, "%02x", ids[i][j]);
        hex[m] = buf[m];
        by[m] = o[i].held_by;
        at[m] = o[i].retry_at;
        ms[m] = o[i].held_ms;
        m++;
    }
    s->asked = m;
    ok = true;
    if (m == 0)
        goto out;
    s->st = hold ? &hold_stmt : &sent_held_stmt;
    s->note = hold;
    s->owned[0] = pg_text_array(hex, m);
    s->owned[1] = pg_text_array(by, m);
    s->owned[2] = pg_int_array(at, m);
    s->owned[3] = pg_int_array(ms, m);
    ok = s->owned[0] && s->owned[1] && s->owned[2] && s->owned[3];
    s->vals[0] = common[0];
    for (int i = 0; i < 4; i++)
        s->vals[1 + i] = s->owned[i];
    s->vals[5] = common[1];
    s->vals[6] = common[2];
out:
    free(hex);
    free(by);
    free(buf);
    free(at);
    free(ms);
    return ok;
}

/* How many parameters s's statement takes. */
static int settle_params(const settle *s)
{
    return s->st == &sent_stmt || s->st == &release_stmt  ? 4
           : s->st == &retry_stmt                         ? 6
           : s->st == &fail_stmt || s->st == &expire_stmt ? 5
                                                          : 7;
}

/*
 * Every outcome in one pipeline, one round trip: the SENT and the RELEASE
 * groups, each RETRY, EXPIRE and FAIL, the SENT held back and the HOLD
 * groups, in that order, one transaction; then, if it made jobs pending
 * again that are due soon, the wake-up of the others (a second round trip,
 * after the commit).
 */
rmqs_rc pg_record(store_backend *b, const unsigned char (*claims)[JOB_ID_BYTES],
                  size_t n_claims, const store_outcome *o,
                  const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                  int64_t now_ms)
{
    pg_conn *pc = &b->disp;
    settle *s = calloc(n + 4, sizeof(*s));
    pg_call *calls = calloc(n + 4, sizeof(*calls));
    char now[24], mine[PG_OWNED_LEN], slot[24];
    const char *common[3] = {pg_i64(now, now_ms), mine, slot};
    size_t m = 0, lost = 0;
    bool ok = s != NULL && calls != NULL;
    rmqs_rc rc;

    (void)claims; /* written by the claim itself (read_due) */
    (void)n_claims;
    if (n == 0 || !ok) {
        free(s);
        free(calls);
        return ok || n == 0 ? RMQS_OK : RMQS_ENOMEM;
    }
    pg_owner_mine(b, mine);
    rc = pg_use(pc);
    pg_i64(slot, pc->slot);
    for (int k = 0; ok && k < 2; k++) {
        ok = settle_group(&s[m], o, ids, n,
                          k == 0 ? STORE_OUT_SENT : STORE_OUT_RELEASE, common);
        m += s[m].asked > 0;
    }
    for (size_t i = 0; ok && i < n; i++)
        if (o[i].kind == STORE_OUT_RETRY)
            settle_one(&s[m++], &o[i], ids[i], common);
    for (size_t i = 0; ok && i < n; i++)
        if (o[i].kind == STORE_OUT_EXPIRE || o[i].kind == STORE_OUT_FAIL)
            settle_one(&s[m++], &o[i], ids[i], common);
    for (int hold = 0; ok && hold < 2; hold++) {
        ok = settle_held(&s[m], o, ids, n, hold, common);
        m += s[m].asked > 0;
    }
    if (!ok)
        rc = RMQS_ENOMEM;
    for (size_t i = 0; i < m; i++)
        calls[i] = (pg_call){
            s[i].st, settle_params(&s[i]), s[i].vals, s[i].lens, s[i].bin, NULL,
            NULL};
    if (rc == RMQS_OK)
        rc = pg_pipeline(pc, calls, m);
    for (size_t i = 0; i < m; i++) {
        int rows = rc == RMQS_OK ? PQntuples(calls[i].res) : 0;
        lost += s[i].asked - (size_t)rows;
        for (int r = 0; s[i].note && r < rows; r++)
            pg_note_due(pc, pg_int(calls[i].res, r, 0));
        /* a retry: pending again, or failed at its last attempt */
        if (s[i].st == &retry_stmt && rows == 1 &&
            pg_int(calls[i].res, 0, 0) == JOB_PENDING)
            pg_note_due(pc, pg_int(calls[i].res, 0, 1));
        PQclear(calls[i].res);
    }
    if (rc == RMQS_OK)
        pg_notify_due(b, pc);
    pc->notify_due = INT64_MAX;
    if (rc == RMQS_OK && lost > 0) {
        char id[PG_ID_LEN];
        pg_owner_current(b, id);
        log_warn(MOD,
                 "outcomes not recorded: the jobs are no longer "
                 "this instance's (lease expired or session lost, and "
                 "taken over)",
                 "n=%zu of=%zu instance=%s", lost, n, id);
    }
    pg_done(pc);
    for (size_t i = 0; i < n + 4; i++)
        for (int j = 0; j < 4; j++)
            free(s[i].owned[j]);
    free(s);
    free(calls);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Leases: renew ours, reclaim expired ones                                 */

/* On pc (locked, up): expired leases back to pending, one statement (it
 * counts its moves); *n_out how many, the others woken for them. */
static rmqs_rc reclaim(store_backend *b, pg_conn *pc, size_t *n_out)
{
    char slot[24];
    const char *vals[1] = {pg_i64(slot, pc->slot)};
    PGresult *res;
    rmqs_rc rc;

    *n_out = 0;
    res = pg_run(pc, &reclaim_stmt, 1, vals, NULL, NULL, &rc);
    if (rc != RMQS_OK)
        return rc;
    *n_out = (size_t)PQntuples(res);
    for (int i = 0; i < PQntuples(res); i++)
        pg_note_due(pc, pg_int(res, i, 0));
    PQclear(res);
    pg_notify_due(b, pc);
    return RMQS_OK;
}

/* At start-up: the jobs of instances whose session ended (this process's
 * previous run, killed, among them) and those whose lease expired. */
rmqs_rc pg_recover(store_backend *b, size_t *n_out)
{
    size_t dead = 0, expired = 0;
    rmqs_rc rc = pg_use(&b->disp);

    *n_out = 0;
    if (rc == RMQS_OK)
        rc = pg_watch(b, &b->disp, &dead);
    if (rc == RMQS_OK)
        rc = reclaim(b, &b->disp, &expired);
    pg_done(&b->disp);
    *n_out = dead + expired;
    return rc;
}

/* Renew the leases of the jobs this instance holds (on pc, locked, up),
 * and keep store_lease_renewed_until: it covers every claim of this
 * instance only while the renewals are continuous, each made before the
 * end of the lease the previous one wrote (the first one before open +
 * lease, which no earlier claim's lease ends before). A renewal that comes
 * later (the process was frozen, or cut off from the database) may follow
 * a reclaim of some of our jobs by another instance: from then on the
 * value stays 0, and each claim holds only until its own lease_until. */
static const pg_stmt renew_stmt = {
    "renew",
    "WITH u AS (SELECT " PG_NOW_MS " AS r), "
    "upd AS (UPDATE jobs SET lease_until = (SELECT r FROM u) + $2::bigint "
    "WHERE status = 1 AND owner = $1 "
    "AND lease_until >= (SELECT r FROM u) RETURNING 1) "
    "SELECT (SELECT r FROM u), (SELECT count(*) FROM upd)",
    false};

static rmqs_rc renew(store_backend *b, pg_conn *pc, size_t *n_out)
{
    char lease[24], id[PG_ID_LEN];
    const char *vals[2] = {id, pg_i64(lease, b->lease_ms)};
    PGresult *res;
    rmqs_rc rc;

    *n_out = 0;
    pg_owner_current(b, id);
    res = pg_run(pc, &renew_stmt, 2, vals, NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1) {
        int64_t r = pg_int(res, 0, 0);
        int64_t prev = atomic_load(&b->renew_chain);

        *n_out = (size_t)pg_int(res, 0, 1);
        if (prev > 0 && r <= prev) {
            atomic_store(&b->renew_chain, r + b->lease_ms);
            atomic_store(&b->renewed_until, r + b->lease_ms);
        } else if (prev > 0) {
            atomic_store(&b->renew_chain, 0);
            atomic_store(&b->renewed_until, 0);
            log_warn(MOD,
                     "lease renewal came after the lease ended "
                     "(frozen, or cut off from the database): each claim "
                     "now holds only until its own lease",
                     "late_ms=%" PRId64 " instance=%s", r - prev, id);
        }
    }
    PQclear(res);
    return rc;
}

int64_t pg_lease_renewed_until(store_backend *b)
{
    return atomic_load(&b->renewed_until);
}

/* Wait up to ms on the stop condition; true if stopping. */
static bool wait_stop(store_backend *b, int64_t ms)
{
    struct timespec ts = tu_mono_deadline(ms);
    bool stop;

    pthread_mutex_lock(&b->stop_mu);
    while (!b->stopping &&
           pthread_cond_timedwait(&b->stop_cv, &b->stop_mu, &ts) == 0)
        ;
    stop = b->stopping;
    pthread_mutex_unlock(&b->stop_mu);
    return stop;
}

/* Every PG_WATCH_MS the watch for instances whose session ended
 * (store_pg_presence.c); every lease/4 the clock, our renewals and the
 * reclaim of expired leases. */
static void *keeper_main(void *arg)
{
    store_backend *b = arg;
    int64_t period = b->lease_ms / 4, next_lease = tu_mono_ms() + period;

    while (!wait_stop(b, PG_WATCH_MS)) {
        pg_conn *pc = &b->disp;
        size_t renewed = 0, reclaimed = 0, taken = 0;
        bool lease_work = tu_mono_ms() >= next_lease;

        if (pg_use(pc) == RMQS_OK) {
            (void)pg_watch(b, pc, &taken);
            if (lease_work && pc->c != NULL)
                (void)pg_measure_clock(b, pc);
            if (lease_work && pc->c != NULL)
                (void)renew(b, pc, &renewed);
            if (lease_work && pc->c != NULL)
                (void)reclaim(b, pc, &reclaimed);
        }
        pg_done(pc);
        if (lease_work)
            next_lease = tu_mono_ms() + period;
        if (reclaimed > 0)
            log_warn(MOD,
                     "jobs whose claimer's lease expired will be "
                     "published again",
                     "n=%zu", reclaimed);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                  */

rmqs_rc pg_threads_start(store_backend *b, rmqs_error *err)
{
    if (pipe(b->stop_pipe) != 0)
        return rmqs_fail(err, RMQS_ESYS, NULL, "pipe: %s", strerror(errno));
    if (worker_thread_start(&b->keeper, "rmqs-pg-keeper", keeper_main, b) !=
        RMQS_OK)
        return rmqs_fail(err, RMQS_ESYS, NULL,
                         "cannot start the lease keeper thread");
    /* the session begins now, so that claims can be made at once; if it
     * cannot, the listener keeps trying */
    (void)pg_presence_open(b);
    if (worker_thread_start(&b->listener, "rmqs-pg-listen", pg_listener_main,
                            b) != RMQS_OK)
        return rmqs_fail(err, RMQS_ESYS, NULL,
                         "cannot start the listener thread");
    return RMQS_OK;
}

void pg_threads_stop(store_backend *b)
{
    pthread_mutex_lock(&b->stop_mu);
    b->stopping = true;
    pthread_cond_broadcast(&b->stop_cv);
    pthread_mutex_unlock(&b->stop_mu);
    if (b->stop_pipe[1] >= 0)
        (void)!write(b->stop_pipe[1], "x", 1);
    worker_thread_join(&b->keeper);
    worker_thread_join(&b->listener);
}
