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
 *   - Claim. read_due IS the claim, on the feeder's connection:
 *       UPDATE jobs SET status = publishing, owner = <instance>,
 *         lease_until = <db now + lease>, attempts = attempts + 1
 *       WHERE seq = ANY(ARRAY(SELECT seq ... WHERE status = pending AND
 *         due_at <= <due_by> ORDER BY due_at, claim_rank, seq LIMIT n
 *         FOR NO KEY UPDATE SKIP LOCKED))
 *     Two instances claiming at once skip each other's locked rows, so a
 *     job is claimed once; a cancel or reschedule waits for the claim's row
 *     lock and then finds the job publishing (409), or holds the row first
 *     and the claim skips it. The jobs are returned as before the claim
 *     (pending, attempts not bumped): store.c's front turns them into what
 *     the claim made them, as for SQLite.
 *   - Settle (record): claims are already written; outcomes are UPDATE ...
 *     WHERE id = ANY(...) AND status = publishing AND owner = <instance>.
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
 *     (anywhere) sends pg_notify('rmqs_due', <earliest due_at>) at COMMIT
 *     (pg_tx_commit, store_pg_core.c); a listener thread with a connection of its own polls
 *     its socket and calls the wake callback (store_set_wake). After a
 *     reconnect it calls it with 0: anything may have been missed.
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

/* The claim; returns the jobs as they were (pending, attempts before). The
 * rows are locked by the inner SELECT (re-checked pending when locked), so
 * the outer UPDATE finds them by seq alone: a second "status = 0" there let
 * the planner of a table without statistics read every pending job through
 * jobs_status_deliver and filter on seq (test_store_pg_dispatch.c).
 * FOR NO KEY UPDATE, the lock the UPDATE itself takes (it changes no key):
 * FOR UPDATE also conflicts with the KEY SHARE lock that an insert into
 * job_text (REFERENCES jobs (seq)) holds on the job until the indexer's
 * batch commits, so SKIP LOCKED passed over due jobs while the indexer
 * ran (found by the store unit tests on PostgreSQL). Two claims, and a
 * claim and a cancel or reschedule, still exclude each other. */
const char pg_claim_sql[] =
    "UPDATE jobs SET status = 1, owner = $1, "
    "lease_until = " PG_NOW_MS " + $2::bigint, attempts = attempts + 1, "
    "updated_at = $3::bigint "
    "WHERE seq = ANY(ARRAY(SELECT seq FROM jobs WHERE status = 0 AND "
    "due_at <= $4::bigint ORDER BY due_at, claim_rank, seq LIMIT $5::bigint "
    "FOR NO KEY UPDATE SKIP LOCKED)) "
    "RETURNING seq, id, 0::smallint, exchange, routing_key, deliver_at, "
    "due_at, delay_ms, created_at, updated_at, sent_at, attempts - 1, "
    "max_attempts, last_error, headers, properties, body_kind, body, source, "
    "lease_until, schedule, fire_at, expires_at, priority, claim_rank, "
    "held_by, held_ms";

/* Expired leases back to pending (every instance, every lease/4). */
static const char reclaim_sql[] =
    "UPDATE jobs SET status = 0, attempts = greatest(attempts - 1, 0), "
    "owner = NULL, lease_until = NULL "
    "WHERE status = 1 AND lease_until < " PG_NOW_MS " RETURNING due_at";

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
        PGresult *res = pg_exec(pc, "clock",
                                "SELECT floor(extract(epoch from "
                                "clock_timestamp()) * 1000000)::bigint",
                                0, NULL, NULL, NULL, &rc);
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

rmqs_rc pg_next_due(store_backend *b, claimset_t *held, bool *any,
                    int64_t *due_at_out)
{
    PGresult *res = NULL;
    rmqs_rc rc;

    (void)held; /* a claimed job is publishing in the database already */
    *any = false;
    rc = pg_use(b, &b->feed);
    if (rc == RMQS_OK)
        res = pg_exec(&b->feed, "next_due",
                      "SELECT min(due_at) FROM jobs WHERE status = 0", 0, NULL,
                      NULL, NULL, &rc);
    if (res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        *any = true;
        *due_at_out = pg_int(res, 0, 0);
    }
    PQclear(res);
    pg_done(&b->feed);
    return rc;
}

/* The claim on the feeder's connection: up to limit jobs due by
 * due_by_ms (database clock), into c[] (grown), in due order, as before the claim. */
static rmqs_rc claim(store_backend *b, int64_t due_by_ms, int64_t now_ms,
                     size_t limit, store_claimed **c, size_t *cap,
                     size_t *n_out)
{
    char lease[24], now[24], due[24], lim[24], id[PG_ID_LEN];
    const char *vals[5];
    PGresult *res = NULL;
    pg_conn *pc = &b->feed;
    size_t n = 0;
    rmqs_rc rc;

    *n_out = 0;
    /* no claim without the session that marks this instance alive: the
     * others would take it over at once (store_pg_presence.c) */
    if (pg_claims_valid_since(b) == INT64_MAX)
        return RMQS_OK;
    if (limit > (size_t)INT64_MAX)
        limit = (size_t)INT64_MAX;
    pg_owner_current(b, id);
    vals[0] = id;
    vals[1] = pg_i64(lease, b->lease_ms);
    vals[2] = pg_i64(now, now_ms);
    vals[3] = pg_i64(due, due_by_ms);
    vals[4] = pg_i64(lim, (int64_t)limit);
    rc = pg_use(b, pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto done;
    res = pg_exec(pc, "claim", pg_claim_sql, 5, vals, NULL, NULL, &rc);
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        goto done;
    }
    store_delta_move(&pc->delta, JOB_PENDING, JOB_PUBLISHING, PQntuples(res));
    rc = pg_tx_commit(b, pc);
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
    if (rc != RMQS_OK && n > 0) {
        /* committed, but we cannot hand them over: the lease brings them
         * back (they stay ours until it expires, never lost) */
        log_error(MOD, "claimed jobs dropped; their lease will expire", "n=%zu",
                  n);
        for (size_t i = 0; i < n; i++)
            job_clear(&(*c)[i].job);
        n = 0;
    }
done:
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
 * (settle_group): SENT and RELEASE, but not a SENT that a limit held back
 * (its held_by and held_ms are its own: settle_held). */
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

#define IDS_MATCH                                                         \
    "id = ANY(ARRAY(SELECT decode(h, 'hex') FROM unnest($2::text[]) h)) " \
    "AND status = 1 AND owner = ANY($3::text[])"

/* SENT or RELEASE of every outcome of kind k, one statement; *matched
 * gets the rows changed. */
static rmqs_rc settle_group(pg_conn *pc, store_backend *b,
                            const store_outcome *o,
                            const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                            store_outcome_kind k, int64_t now_ms, size_t *asked,
                            size_t *matched)
{
    char now[24], mine[PG_OWNED_LEN];
    char *arr = id_array(o, ids, n, k, asked);
    const char *vals[3] = {pg_i64(now, now_ms), arr, mine};
    PGresult *res;
    rmqs_rc rc;

    *matched = 0;
    if (*asked == 0)
        return RMQS_OK;
    if (arr == NULL)
        return RMQS_ENOMEM;
    pg_owner_mine(b, mine);
    res = k == STORE_OUT_SENT
              ? pg_exec(pc, "settle_sent",
                        "UPDATE jobs SET status = 2, sent_at = $1, "
                        "updated_at = $1, owner = NULL, lease_until = NULL "
                        "WHERE " IDS_MATCH " RETURNING due_at",
                        3, vals, NULL, NULL, &rc)
              : pg_exec(pc, "settle_release",
                        "UPDATE jobs SET status = 0, "
                        "attempts = greatest(attempts - 1, 0), "
                        "updated_at = $1, owner = NULL, lease_until = NULL "
                        "WHERE " IDS_MATCH " RETURNING due_at",
                        3, vals, NULL, NULL, &rc);
    free(arr);
    if (rc != RMQS_OK)
        return rc;
    *matched = (size_t)PQntuples(res);
    store_delta_move(&pc->delta, JOB_PUBLISHING,
                     k == STORE_OUT_SENT ? JOB_SENT : JOB_PENDING,
                     (int64_t)*matched);
    for (size_t i = 0; k == STORE_OUT_RELEASE && i < *matched; i++)
        pg_note_due(pc, pg_int(res, (int)i, 0));
    PQclear(res);
    return RMQS_OK;
}

/* One RETRY outcome; *matched 0 or 1. */
static rmqs_rc settle_retry(pg_conn *pc, store_backend *b,
                            const store_outcome *o,
                            const unsigned char id[JOB_ID_BYTES],
                            int64_t now_ms, size_t *matched)
{
    char now[24], retry[24], mine[PG_OWNED_LEN];
    const char *vals[5] = {pg_i64(now, now_ms), (const char *)id, o->error,
                           pg_i64(retry, o->retry_at), mine};
    int lens[5] = {0, JOB_ID_BYTES, 0, 0, 0}, fmts[5] = {0, 1, 0, 0, 0};
    PGresult *res;
    rmqs_rc rc;

    *matched = 0;
    pg_owner_mine(b, mine);
    res = pg_exec(pc, "settle_retry",
                  "UPDATE jobs SET last_error = $3, updated_at = $1, "
                  "status = CASE WHEN attempts >= max_attempts "
                  "THEN 3 ELSE 0 END, "
                  "due_at = CASE WHEN attempts >= max_attempts "
                  "THEN due_at ELSE $4::bigint END, "
                  "owner = NULL, lease_until = NULL "
                  "WHERE id = $2 AND status = 1 AND owner = ANY($5::text[]) "
                  "RETURNING status, due_at",
                  5, vals, lens, fmts, &rc);
    if (rc != RMQS_OK)
        return rc;
    if (PQntuples(res) == 1) {
        int status = (int)pg_int(res, 0, 0);
        *matched = 1;
        store_delta_move(&pc->delta, JOB_PUBLISHING, status, 1);
        if (status == JOB_PENDING)
            pg_note_due(pc, pg_int(res, 0, 1));
    }
    PQclear(res);
    return RMQS_OK;
}

/* Whether o is settled by settle_held: a HOLD, or a SENT that a limit
 * held back. */
static bool is_held(const store_outcome *o)
{
    return o->kind == STORE_OUT_HOLD ||
           (o->kind == STORE_OUT_SENT && o->held_by != NULL);
}

/* Every HOLD outcome (hold true: pending again at retry_at, held by a
 * limit) or every SENT one that a limit held back (hold false), with its
 * own held_by and held_ms: one statement over arrays (a burst held by a
 * limit is thousands of them); *asked and *matched count them. */
static rmqs_rc settle_held(pg_conn *pc, store_backend *b,
                           const store_outcome *o,
                           const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                           bool hold, int64_t now_ms, size_t *asked,
                           size_t *matched)
{
    const char **hex = calloc(n ? n : 1, sizeof(*hex)),
               **by = calloc(n ? n : 1, sizeof(*by));
    char(*buf)[2 * JOB_ID_BYTES + 1] = calloc(n ? n : 1, sizeof(*buf));
    int64_t *at = calloc(n ? n : 1, sizeof(*at)),
            *ms = calloc(n ? n : 1, sizeof(*ms));
    char *a_ids = NULL, *a_by = NULL, *a_at = NULL, *a_ms = NULL, now[24];
    char mine[PG_OWNED_LEN];
    PGresult *res = NULL;
    size_t m = 0;
    rmqs_rc rc = RMQS_ENOMEM;

    *asked = *matched = 0;
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
    *asked = m;
    rc = RMQS_OK;
    if (m == 0)
        goto out;
    a_ids = pg_text_array(hex, m);
    a_by = pg_text_array(by, m);
    a_at = pg_int_array(at, m);
    a_ms = pg_int_array(ms, m);
    if (a_ids == NULL || a_by == NULL || a_at == NULL || a_ms == NULL) {
        rc = RMQS_ENOMEM;
        goto out;
    }
    pg_owner_mine(b, mine);
    const char *vals[6] = {pg_i64(now, now_ms), a_ids, a_by, a_at, a_ms,
                           mine};
    res = hold ? pg_exec(pc, "settle_hold",
                         "UPDATE jobs j SET status = 0, "
                         "attempts = greatest(j.attempts - 1, 0), "
                         "updated_at = $1, held_by = u.h, due_at = u.d, "
                         "held_ms = u.m, owner = NULL, lease_until = NULL "
                         "FROM unnest($2::text[], $3::text[], $4::bigint[], "
                         "$5::bigint[]) AS u(x, h, d, m) "
                         "WHERE j.id = decode(u.x, 'hex') AND j.status = 1 "
                         "AND j.owner = ANY($6::text[]) RETURNING j.due_at",
                         6, vals, NULL, NULL, &rc)
               : pg_exec(pc, "settle_sent_held",
                         "UPDATE jobs j SET status = 2, sent_at = $1, "
                         "updated_at = $1, held_by = u.h, held_ms = u.m, "
                         "owner = NULL, lease_until = NULL "
                         "FROM unnest($2::text[], $3::text[], $4::bigint[], "
                         "$5::bigint[]) AS u(x, h, d, m) "
                         "WHERE j.id = decode(u.x, 'hex') AND j.status = 1 "
                         "AND j.owner = ANY($6::text[]) RETURNING j.due_at",
                         6, vals, NULL, NULL, &rc);
    if (rc != RMQS_OK)
        goto out;
    *matched = (size_t)PQntuples(res);
    store_delta_move(&pc->delta, JOB_PUBLISHING, hold ? JOB_PENDING : JOB_SENT,
                     (int64_t)*matched);
    for (size_t i = 0; hold && i < *matched; i++)
        pg_note_due(pc, pg_int(res, (int)i, 0));
out:
    PQclear(res);
    free(hex);
    free(by);
    free(buf);
    free(at);
    free(ms);
    free(a_ids);
    free(a_by);
    free(a_at);
    free(a_ms);
    return rc;
}

/* One EXPIRE outcome (its own error text); *matched 0 or 1. */
/* EXPIRE (cancelled) or FAIL (failed): ends a claimed job unpublished. */
static rmqs_rc settle_expire(pg_conn *pc, store_backend *b,
                             const store_outcome *o,
                             const unsigned char id[JOB_ID_BYTES],
                             int64_t now_ms, size_t *matched)
{
    bool fail = o->kind == STORE_OUT_FAIL;
    char now[24], mine[PG_OWNED_LEN];
    const char *vals[4] = {pg_i64(now, now_ms), (const char *)id, o->error,
                           mine};
    int lens[4] = {0, JOB_ID_BYTES, 0, 0}, fmts[4] = {0, 1, 0, 0};
    PGresult *res;
    rmqs_rc rc;

    *matched = 0;
    pg_owner_mine(b, mine);
    res =
        fail
            ? pg_exec(pc, "settle_fail",
                      "UPDATE jobs SET status = 3, last_error = $3, "
                      "updated_at = $1, owner = NULL, lease_until = NULL "
                      "WHERE id = $2 AND status = 1 AND owner = ANY($4::text[]) "
                      "RETURNING 1",
                      4, vals, lens, fmts, &rc)
            : pg_exec(pc, "settle_expire",
                      "UPDATE jobs SET status = 4, last_error = $3, "
                      "updated_at = $1, owner = NULL, lease_until = NULL "
                      "WHERE id = $2 AND status = 1 AND owner = ANY($4::text[]) "
                      "RETURNING 1",
                      4, vals, lens, fmts, &rc);
    if (rc != RMQS_OK)
        return rc;
    if (PQntuples(res) == 1) {
        *matched = 1;
        store_delta_move(&pc->delta, JOB_PUBLISHING,
                         fail ? JOB_FAILED : JOB_CANCELLED, 1);
    }
    PQclear(res);
    return RMQS_OK;
}

rmqs_rc pg_record(store_backend *b, const unsigned char (*claims)[JOB_ID_BYTES],
                  size_t n_claims, const store_outcome *o,
                  const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                  int64_t now_ms)
{
    pg_conn *pc = &b->disp;
    size_t asked, matched, lost = 0;
    rmqs_rc rc;

    (void)claims; /* written by the claim itself (read_due) */
    (void)n_claims;
    if (n == 0)
        return RMQS_OK;
    rc = pg_use(b, pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto unlock;
    rc = settle_group(pc, b, o, ids, n, STORE_OUT_SENT, now_ms, &asked,
                      &matched);
    lost += asked - matched;
    if (rc == RMQS_OK) {
        rc = settle_group(pc, b, o, ids, n, STORE_OUT_RELEASE, now_ms, &asked,
                          &matched);
        lost += asked - matched;
    }
    for (size_t i = 0; rc == RMQS_OK && i < n; i++) {
        if (o[i].kind != STORE_OUT_RETRY)
            continue;
        rc = settle_retry(pc, b, &o[i], ids[i], now_ms, &matched);
        lost += 1 - matched;
    }
    for (size_t i = 0; rc == RMQS_OK && i < n; i++) {
        if (o[i].kind != STORE_OUT_EXPIRE && o[i].kind != STORE_OUT_FAIL)
            continue;
        rc = settle_expire(pc, b, &o[i], ids[i], now_ms, &matched);
        lost += 1 - matched;
    }
    for (int hold = 0; rc == RMQS_OK && hold < 2; hold++) {
        rc = settle_held(pc, b, o, ids, n, hold, now_ms, &asked, &matched);
        lost += asked - matched;
    }
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc);
    else
        pg_tx_abort(pc);
    if (rc == RMQS_OK && lost > 0) {
        char id[PG_ID_LEN];
        pg_owner_current(b, id);
        log_warn(MOD,
                 "outcomes not recorded: the jobs are no longer "
                 "this instance's (lease expired or session lost, and "
                 "taken over)",
                 "n=%zu of=%zu instance=%s", lost, n, id);
    }
unlock:
    pg_done(pc);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Leases: renew ours, reclaim expired ones                                 */

/* On pc (locked, up): expired leases back to pending; *n_out how many. */
static rmqs_rc reclaim(store_backend *b, pg_conn *pc, size_t *n_out)
{
    PGresult *res;
    rmqs_rc rc;

    *n_out = 0;
    rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        return rc;
    res = pg_exec(pc, "reclaim", reclaim_sql, 0, NULL, NULL, NULL, &rc);
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        return rc;
    }
    store_delta_move(&pc->delta, JOB_PUBLISHING, JOB_PENDING, PQntuples(res));
    for (int i = 0; i < PQntuples(res); i++)
        pg_note_due(pc, pg_int(res, i, 0));
    rc = pg_tx_commit(b, pc);
    if (rc == RMQS_OK)
        *n_out = (size_t)PQntuples(res);
    PQclear(res);
    return rc;
}

/* At start-up: the jobs of instances whose session ended (this process's
 * previous run, killed, among them) and those whose lease expired. */
rmqs_rc pg_recover(store_backend *b, size_t *n_out)
{
    size_t dead = 0, expired = 0;
    rmqs_rc rc = pg_use(b, &b->disp);

    *n_out = 0;
    if (rc == RMQS_OK)
        rc = pg_watch_dead(b, &b->disp, &dead);
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
static rmqs_rc renew(store_backend *b, pg_conn *pc, size_t *n_out)
{
    char lease[24], id[PG_ID_LEN];
    const char *vals[2] = {id, pg_i64(lease, b->lease_ms)};
    PGresult *res;
    rmqs_rc rc;

    *n_out = 0;
    pg_owner_current(b, id);
    res = pg_exec(pc, "renew",
                  "WITH u AS (SELECT " PG_NOW_MS " AS r), "
                  "upd AS (UPDATE jobs SET lease_until = "
                  "(SELECT r FROM u) + $2::bigint "
                  "WHERE status = 1 AND owner = $1 "
                  "AND lease_until >= (SELECT r FROM u) RETURNING 1) "
                  "SELECT (SELECT r FROM u), (SELECT count(*) FROM upd)",
                  2, vals, NULL, NULL, &rc);
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

        if (pg_use(b, pc) == RMQS_OK) {
            (void)pg_watch_dead(b, pc, &taken);
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
