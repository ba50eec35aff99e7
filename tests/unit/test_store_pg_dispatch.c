/*
 * test_store_pg_dispatch.c - the query plan of the PostgreSQL claim
 * (service/store/pg/store_pg_dispatch.c, pg_claim_sql) on a real server: the claim
 * must find due jobs through the partial index jobs_due (due_at, seq) WHERE
 * status = 0, in index order, and update them by primary key, never scan
 * or sort the table. Its cost then stays flat however many jobs wait (the
 * benchmark measures it at 1M and 10M pending: tests/bench/stores.py).
 *
 * Why a unit test: the text is pg_claim_sql itself (store_pg.h), the exact
 * statement the dispatcher's read_due runs,
 * so a change to it that loses the index fails here; as the SQLite plan test
 * in test_store.c does with EXPLAIN QUERY PLAN. The server is tests/run.sh's
 * (RMQS_TEST_PG_*, tests/lib/common.sh); this test makes a database of its
 * own, migrates it through store_open, fills it with psql (the admin over
 * the server's unix socket), EXPLAINs a PREPAREd claim, and drops the
 * database.
 *
 * Also on that database, through the store's own calls: the round trips of
 * a group commit, a claim and a settle (pg_round_trips, the calling
 * thread's: 8, 4 and 4 before issue 24, 2, 2 and 1 now), of a request of
 * 1000 keyed jobs (2003 before its keys went in one statement, 4 now; 3 for
 * its retry), and the claim
 * shares of two instances (each claims its own share; one that claims
 * alone takes the other's jobs once they are due PG_STEAL_MS before its
 * horizon), and a claim whose answer never comes (its server backend
 * stopped) leaves no job claimed once that backend runs again.
 *
 * Suite "store_pg_dispatch" (CTest filters on the suite name).
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "store_pg_core.h"
#include "testutil.h"
#include "timeutil.h"

/* store.c's test hook: claimers as the store sees them, and its rank. */
int64_t store__claimers(store_t *st, int64_t *rank);

#define PSQL "/usr/lib/postgresql/15/bin/psql"

static char g_dir[UT_PATH_MAX];
static char g_db[64];

static const char *need_env(const char *name)
{
    const char *v = getenv(name);

    cr_assert(v != NULL && *v != '\0',
              "%s is not set: run the unit tests through tests/run.sh, which "
              "starts the PostgreSQL server they use",
              name);
    return v;
}

/* Run the SQL script text with psql as the admin in database db (unaligned,
 * tuples only, stop at the first error); returns its output (malloc'd). */
static char *psql(const char *db, const char *script)
{
    char file[UT_PATH_MAX], cmd[1024];
    size_t cap = 1 << 16, len = 0, got;
    char *out = calloc(1, cap);
    FILE *f, *p;

    cr_assert_not_null(out);
    ut_path(file, g_dir, "script.sql");
    f = fopen(file, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fputs(script, f) >= 0, true);
    cr_assert_eq(fclose(f), 0);
    snprintf(cmd, sizeof(cmd),
             "PGCONNECT_TIMEOUT=5 timeout 120 " PSQL
             " -X -q -A -t -v ON_ERROR_STOP=1 "
             "-d '%s dbname=%s' -f '%s' 2>&1",
             need_env("RMQS_TEST_PG_ADMIN"), db, file);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    while ((got = fread(out + len, 1, cap - 1 - len, p)) > 0)
        len += got;
    int status = pclose(p);
    cr_assert_eq(status, 0, "psql failed (%d) on:\n%s\n%s", status, script,
                 out);
    return out;
}

static void setup(void)
{
    ut_tmpdir(g_dir, "store-pg");
    snprintf(g_db, sizeof(g_db), "rmqs_u_%ld_%ld", (long)getpid(),
             (long)time(NULL));
    char sql[256];
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s OWNER %s;", g_db,
             need_env("RMQS_TEST_PG_USER"));
    free(psql("postgres", sql));
}

static void teardown(void)
{
    char sql[256];

    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE);",
             g_db);
    free(psql("postgres", sql));
    ut_rmtree(g_dir);
}

TestSuite(store_pg_dispatch, .init = setup, .fini = teardown, .timeout = 120);

/* The schema, as the service makes it: store_open migrates. */
static void migrate(void)
{
    char url[512];
    store_t *st;

    snprintf(url, sizeof(url), "%s/%s", need_env("RMQS_TEST_PG_URL"), g_db);
    st = ut_store_open(url, &(store_options){.synchronous_full = true});
    store_close(st);
}

/* n jobs, every tenth pending and due over the next n seconds, the rest
 * sent (finished jobs pile up in a real table). */
static void fill(int n)
{
    char sql[1024];

    snprintf(
        sql, sizeof(sql),
        "INSERT INTO jobs (id, status, exchange, routing_key, deliver_at, "
        "due_at, delay_ms, created_at, updated_at, attempts, max_attempts, "
        "body_kind, body) SELECT decode(lpad(to_hex(i), 32, '0'), 'hex'), "
        "CASE WHEN i %% 10 = 0 THEN 0 ELSE 2 END, '', 'rk', i * 1000, "
        "i * 1000, 0, 0, 0, 0, 5, 0, '\\x'::bytea "
        "FROM generate_series(1, %d) i;",
        n);
    free(psql(g_db, sql));
}

/* EXPLAIN of the store's claim text, prepared with the parameter types the
 * store's casts give them ($1 text, $9 the count slot smallint, the rest
 * bigint): claim up to 100 jobs due by 5,000,000 ms, as the second of
 * `claimers` instances (1: alone, the whole table its share). generic: the
 * plan the server keeps for a prepared statement after its fifth run (the
 * store prepares the claim once per connection), not one made for these
 * values. */
static char *claim_plan(int claimers, bool generic)
{
    const char *claim = pg_claim_sql;
    size_t len;
    char *script;

    len = strlen(claim) + 512;
    script = malloc(len);
    cr_assert_not_null(script);
    snprintf(script, len,
             "SET plan_cache_mode = %s;\n"
             "PREPARE claim(text, bigint, bigint, bigint, bigint, bigint, "
             "bigint, bigint, smallint) AS %s;\n"
             "EXPLAIN (COSTS OFF) EXECUTE claim('test', 10000, 0, 5000000, "
             "100, %d, %d, %s, 0);\n",
             generic ? "force_generic_plan" : "auto", claim, claimers,
             claimers > 1 ? 1 : 0,
             claimers > 1 ? "4999750" : "-9223372036854775808");
    char *plan = psql(g_db, script);
    free(script);
    return plan;
}

/* strict: the plan of a table with statistics (index scans in order, no
 * sort); otherwise any access through the two indexes will do, as long as
 * nothing reads the table or another index (every pending job). */
static void assert_claim_uses_due_index(const char *when, bool strict,
                                        int claimers, bool generic)
{
    char *plan = claim_plan(claimers, generic);
    bool due = strstr(plan, strict ? "Index Scan using jobs_due on jobs"
                                   : "jobs_due") != NULL;
    bool pkey = strstr(plan, strict ? "Index Scan using jobs_pkey on jobs"
                                    : "jobs_pkey") != NULL;
    bool ok = due && pkey && strstr(plan, "LockRows") != NULL &&
              strstr(plan, "Seq Scan") == NULL &&
              strstr(plan, "jobs_status_deliver") == NULL &&
              (!strict || (strstr(plan, "Sort") == NULL &&
                           strstr(plan, "Bitmap") == NULL));
    char msg[8192];

    snprintf(msg, sizeof(msg), "%s", plan);
    free(plan);
    cr_assert(ok,
              "%s, %d claimer(s)%s: the claim does not read jobs_due and "
              "update by seq (or it scans the table or another index):\n%s",
              when, claimers, generic ? ", generic plan" : "", msg);
}

/* With the statistics of a realistic table: 200,000 jobs, 10% pending. */
Test(store_pg_dispatch, claim_uses_partial_due_index)
{
    migrate();
    fill(200000);
    free(psql(g_db, "ANALYZE jobs;"));
    for (int claimers = 1; claimers <= 3; claimers += 2) {
        assert_claim_uses_due_index("200,000 jobs, analyzed", true, claimers,
                                    false);
        assert_claim_uses_due_index("200,000 jobs, analyzed", true, claimers,
                                    true);
    }
}

/* As deployed, before autovacuum has analyzed the table: 20,000 jobs
 * (autovacuum off for it, so none comes meanwhile), no statistics. (With a
 * second "status = 0" in the outer UPDATE, this found its rows through
 * "Index Scan using jobs_status_deliver (status = 0), Filter: seq =
 * ANY($1)": every pending job read by each claim until the first
 * ANALYZE.) */
Test(store_pg_dispatch, claim_uses_partial_due_index_without_statistics)
{
    migrate();
    free(psql(g_db, "ALTER TABLE jobs SET (autovacuum_enabled = false);"));
    fill(20000);
    for (int claimers = 1; claimers <= 3; claimers += 2) {
        assert_claim_uses_due_index("20,000 jobs, no statistics", false,
                                    claimers, false);
        assert_claim_uses_due_index("20,000 jobs, no statistics", false,
                                    claimers, true);
    }
}

/* ---- round trips and shares, through the store's calls ---- */

static store_t *open_store(void)
{
    char url[512];

    snprintf(url, sizeof(url), "%s/%s", need_env("RMQS_TEST_PG_URL"), g_db);
    return ut_store_open(url, &(store_options){.synchronous_full = true});
}

/* n pending jobs numbered from first, due at due (database clock), in one
 * group commit; returns the round trips it took. */
static uint64_t insert_due(store_t *st, int first, int n, int64_t due)
{
    job_t *jobs = calloc((size_t)n, sizeof(*jobs));
    store_insert_req *reqs = calloc((size_t)n, sizeof(*reqs));
    uint64_t before;

    cr_assert(jobs != NULL && reqs != NULL);
    for (int i = 0; i < n; i++) {
        ut_job_make(&jobs[i], first + i, due);
        reqs[i] = (store_insert_req){.jobs = &jobs[i], .n = 1};
    }
    before = pg_round_trips();
    cr_assert_eq(store_insert_batch(st, reqs, (size_t)n), RMQS_OK);
    before = pg_round_trips() - before;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(reqs[i].rc, RMQS_OK);
        job_clear(&jobs[i]);
    }
    free(jobs);
    free(reqs);
    return before;
}

/* Claim up to 1000 jobs due by due_by on st: how many. */
static size_t claim_by(store_t *st, int64_t due_by)
{
    job_t *jobs;
    size_t n;

    cr_assert_eq(store_claim_ahead(st, due_by, tu_now_ms(), 1000, &jobs, &n),
                 RMQS_OK);
    ut_jobs_free(jobs, n);
    return n;
}

Test(store_pg_dispatch, a_group_commit_a_claim_and_a_settle_in_few_round_trips)
{
    store_t *st;
    job_t *jobs;
    store_outcome *o;
    size_t n;
    uint64_t before, claim_trips, settle_trips;
    int64_t now;

    migrate();
    st = open_store();
    now = tu_now_ms() + store_clock_offset_ms(st);
    /* due at once, so the commit also wakes the others */
    cr_assert_eq(insert_due(st, 1, 50, now - 1000), 2,
                 "a group commit: BEGIN, lock, savepoint and COPY, then the "
                 "data, counts, COMMIT and NOTIFY");
    before = pg_round_trips();
    cr_assert_eq(store_claim_ahead(st, now + 500, now, 100, &jobs, &n),
                 RMQS_OK);
    claim_trips = pg_round_trips() - before;
    cr_assert_eq(n, 50);
    o = calloc(n, sizeof(*o));
    cr_assert_not_null(o);
    for (size_t i = 0; i < n; i++)
        o[i] = (store_outcome){.id = jobs[i].id, .kind = STORE_OUT_SENT};
    before = pg_round_trips();
    cr_assert_eq(store_settle(st, o, n, now), RMQS_OK);
    settle_trips = pg_round_trips() - before;
    cr_expect_eq(claim_trips, 2,
                 "a claim (BEGIN and the claim, COMMIT): "
                 "%llu round trips",
                 (unsigned long long)claim_trips);
    cr_expect_eq(settle_trips, 1, "a settle: %llu round trips",
                 (unsigned long long)settle_trips);
    {
        int64_t c[5];
        cr_assert_eq(store_counts(st, c), RMQS_OK);
        cr_expect_eq(c[JOB_PENDING], 0, "counted by the claim itself");
        cr_expect_eq(c[JOB_PUBLISHING], 0);
        cr_expect_eq(c[JOB_SENT], 50, "counted by the settle itself");
    }
    free(o);
    ut_jobs_free(jobs, n);
    store_close(st);
}

/* A request of n jobs, each keyed "kb-<i>" with request "{<i>}" (ids from
 * first): store_insert_batch of it alone; its round trips, and its
 * wall-clock ms in *ms. */
static uint64_t insert_keyed(store_t *st, int first, int n, size_t *nexisted,
                             double *ms)
{
    job_t *jobs = calloc((size_t)n, sizeof(*jobs));
    job_t *exj = calloc((size_t)n, sizeof(*exj));
    bool *ex = calloc((size_t)n, sizeof(*ex));
    char(*keys)[16] = calloc((size_t)n, sizeof(*keys));
    char(*reqs)[16] = calloc((size_t)n, sizeof(*reqs));
    const char **kp = calloc((size_t)n, sizeof(*kp));
    const char **rp = calloc((size_t)n, sizeof(*rp));
    store_insert_req r;
    uint64_t before;
    int64_t t0;

    cr_assert(jobs && exj && ex && keys && reqs && kp && rp);
    for (int i = 0; i < n; i++) {
        ut_job_make(&jobs[i], first + i, tu_now_ms() + 3600000);
        snprintf(keys[i], sizeof(keys[i]), "kb-%d", i);
        snprintf(reqs[i], sizeof(reqs[i]), "{%d}", i);
        kp[i] = keys[i];
        rp[i] = reqs[i];
    }
    r = (store_insert_req){.jobs = jobs,
                           .n = (size_t)n,
                           .idem_keys = kp,
                           .idem_requests = rp,
                           .existed = ex,
                           .existing = exj};
    t0 = tu_mono_us();
    before = pg_round_trips();
    cr_assert_eq(store_insert_batch(st, &r, 1), RMQS_OK);
    before = pg_round_trips() - before;
    *ms = (double)(tu_mono_us() - t0) / 1000.0;
    cr_assert_eq(r.rc, RMQS_OK);
    *nexisted = r.nexisted;
    for (int i = 0; i < n; i++) {
        job_clear(&jobs[i]);
        job_clear(&exj[i]);
    }
    free(jobs);
    free(exj);
    free(ex);
    free(keys);
    free(reqs);
    free(kp);
    free(rp);
    return before;
}

Test(store_pg_dispatch, a_keyed_batch_in_few_round_trips)
{
    store_t *st;
    size_t nexisted;
    double ms_new, ms_again;
    uint64_t trips_new, trips_again;

    migrate();
    st = open_store();
    (void)insert_keyed(st, 1, 1, &nexisted, &ms_new); /* statements ready */
    trips_new = insert_keyed(st, 101, 1000, &nexisted, &ms_new);
    cr_assert_eq(nexisted, 1, "kb-0 was stored by the first insert");
    trips_again = insert_keyed(st, 2001, 1000, &nexisted, &ms_again);
    cr_assert_eq(nexisted, 1000, "a retry stores nothing again");
    fprintf(stderr,
            "keyed batch of 1000: new %llu round trips %.1f ms; "
            "again %llu round trips %.1f ms\n",
            (unsigned long long)trips_new, ms_new,
            (unsigned long long)trips_again, ms_again);
    cr_expect_eq(trips_new, 4,
                 "BEGIN, savepoint, keys claimed and looked up; the COPY "
                 "(two) with the RELEASE; the commit: %llu",
                 (unsigned long long)trips_new);
    cr_expect_eq(trips_again, 3,
                 "BEGIN, savepoint, keys claimed and looked up; RELEASE; "
                 "the commit: %llu",
                 (unsigned long long)trips_again);
    {
        char *out = psql(g_db, "SELECT count(*) FROM jobs;");
        cr_assert_eq(strtol(out, NULL, 10), 1000);
        free(out);
    }
    store_close(st);
}

/* Until both stores see two claimers (each claims nothing now and then, so
 * that its keeper marks it a claimer), or the test's time runs out. */
static void both_claim(store_t *a, store_t *b)
{
    int64_t ra = -1, rb = -1;

    for (int i = 0; i < 1000; i++) {
        (void)claim_by(a, 0);
        (void)claim_by(b, 0);
        if (store__claimers(a, &ra) == 2 && store__claimers(b, &rb) == 2)
            break;
        usleep(10000);
    }
    cr_assert(store__claimers(a, &ra) == 2 && store__claimers(b, &rb) == 2,
              "the two instances never saw each other as claimers");
    cr_assert_neq(ra, rb, "two claimers of the same rank");
}

Test(store_pg_dispatch, two_claimers_share_the_due_jobs_and_take_the_unclaimed)
{
    store_t *a, *b;
    int64_t t;
    size_t na, nb, own;

    migrate();
    a = open_store();
    b = open_store();
    /* due times far ahead, and every claim's horizon given: nothing
     * depends on how long the test takes */
    t = tu_now_ms() + store_clock_offset_ms(a) + 3600000;
    (void)insert_due(a, 1, 320, t); /* 20 runs of 16 seq */
    both_claim(a, b);
    na = claim_by(a, t + 100);
    nb = claim_by(b, t + 100);
    cr_expect_eq(na + nb, 320, "claimed %zu + %zu of 320", na, nb);
    cr_expect(na >= 100 && nb >= 100,
              "each claims its own share: %zu and %zu of 320", na, nb);
    /* B claims no more: A takes only its own share while B's are not due
     * PG_STEAL_MS before its horizon, then B's too */
    (void)insert_due(a, 1001, 320, t + 10000);
    both_claim(a, b);
    own = claim_by(a, t + 10000 + PG_STEAL_MS - 100);
    cr_expect(own >= 100 && own <= 220, "A's own share: %zu of 320", own);
    cr_expect_eq(claim_by(a, t + 10000 + PG_STEAL_MS), 320 - own,
                 "A takes what B left unclaimed");
    cr_expect_eq(claim_by(b, t + 20000), 0, "nothing is claimed twice");
    store_close(b);
    store_close(a);
}

/* The pid of the server backend of this store's connection of role (its
 * application_name), or 0. */
static long backend_pid(const char *role)
{
    char sql[256];
    char *out;
    long pid;

    snprintf(sql, sizeof(sql),
             "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE "
             "datname = '%s' AND application_name = 'rmq-scheduler %s';",
             g_db, role);
    out = psql("postgres", sql);
    pid = strtol(out, NULL, 10);
    free(out);
    return pid;
}

Test(store_pg_dispatch, a_claim_whose_answer_never_came_leaves_nothing_claimed)
{
    store_t *st;
    long pid;
    int64_t due;
    char *out;

    migrate();
    {
        char url[512];
        snprintf(url, sizeof(url), "%s/%s", need_env("RMQS_TEST_PG_URL"), g_db);
        st = ut_store_open(url, &(store_options){.synchronous_full = true,
                                                 .db_timeout_ms = 500});
    }
    due = tu_now_ms() + store_clock_offset_ms(st) - 1000;
    (void)insert_due(st, 1, 10, due);
    (void)claim_by(st, 0); /* the feeder's connection, its statements */
    pid = backend_pid("feeder");
    cr_assert_gt(pid, 0, "no feeder backend");
    /* the server's side of the claim stops: the claim is sent, its answer
     * never comes, and the store gives the connection up */
    cr_assert_eq(kill((pid_t)pid, SIGSTOP), 0);
    {
        job_t *jobs;
        size_t n;
        rmqs_rc rc =
            store_claim_ahead(st, due + 1000, tu_now_ms(), 100, &jobs, &n);
        kill((pid_t)pid, SIGCONT);
        cr_assert_neq(rc, RMQS_OK, "the claim did not wait for the server");
    }
    /* the backend runs again, finds its client gone and ends */
    for (int i = 0; i < 500 && backend_pid("feeder") == pid; i++)
        usleep(10000);
    out = psql(g_db, "SELECT count(*) FROM jobs WHERE status = 1;");
    cr_expect_eq(strtol(out, NULL, 10), 0,
                 "jobs claimed by a claim whose answer never came: %s", out);
    free(out);
    cr_expect_eq(claim_by(st, due + 1000), 10, "claimed at the next claim");
    store_close(st);
}
