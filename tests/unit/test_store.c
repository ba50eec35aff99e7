/*
 * test_store.c - the store's contract (service/store/store.h) on both
 * stores: every BOTH(name) case runs as name_sqlite on a fresh SQLite file
 * and as name_postgres on a fresh database of the server tests/run.sh
 * starts (testutil.h, UT_BOTH); no mocks. Raw SQL on the same database
 * (ut_both_int, ut_both_exec) checks what the store wrote and plants
 * states the API cannot make. The dispatcher's calls are driven as the
 * dispatcher drives them: store_claim_ahead, then store_record (ut_claim).
 *
 * The Test(store, ...) cases are about SQLite alone, each for a reason
 * its comment or name gives: the SQLite migration runner and file
 * handling, EXPLAIN QUERY PLAN of the statements the service runs, a full
 * disk (PRAGMA max_page_count), the sync policy (PRAGMA synchronous), the
 * WAL checkpoint, and the claim ahead of the write (PostgreSQL's read is
 * the claim itself: test_store_pg*.c). Test hooks from store.c (declared
 * below, not in store.h) expose those.
 *
 * Suite "store" (CTest filters on the suite name); migration runner cases are
 * named migrate_*.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "job.h"
#include "store.h"
#include "testutil.h"

/* Test hooks defined in service/store/store.c. */
const char *store__sql(const char *name);
rmqs_rc store__set_max_pages(store_t *st, int64_t pages, int64_t *applied);
int store__synchronous(store_t *st);

static ut_both g_b; /* the store of this case: g_b.pg for PostgreSQL */
static store_t *g_st;

static void setup(void)
{
    ut_both_init(&g_b, "store");
    g_st = NULL;
}

static void teardown(void)
{
    store_close(g_st);
    g_st = NULL;
    ut_both_fini(&g_b);
}

TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static const store_options k_opts = {.synchronous_full = true};

/* A list filter on status only (-1: any). */
#define FILTER(st) (&(store_filter){.status = (st), .source = -1})

/* The store of this case (SQLite unless BOTH's PostgreSQL half chose it),
 * opened on the same file or database each time. */
static store_t *open_store(void)
{
    return ut_store_open(ut_both_target(&g_b, g_b.pg), &k_opts);
}

static void use_store(bool pg)
{
    (void)ut_both_target(&g_b, pg);
}

/* Each case body runs once per store (testutil.h); a Test(store, ...) case
 * is about SQLite alone and says why. */
#define BOTH(name) UT_BOTH(store, name, use_store)

/* Keys and requests of a one-job store_insert_req (store_types.h). */
static const char *const KEY_K[1] = {"k"};
static const char *const REQ_EMPTY[1] = {"{}"};
static const char *const REQ_OTHER[1] = {"{\"other\":1}"};

/* Close the store and open it again, as a restart after a crash: what the
 * dispatcher held in memory is gone, what it wrote stays. */
static void reopen_store(void)
{
    store_close(g_st);
    g_st = open_store();
}

static void insert_job(store_t *st, int n, int64_t deliver_at)
{
    job_t j;

    ut_job_make(&j, n, deliver_at);
    cr_assert_eq(store_insert(st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
    job_clear(&j);
}

/* A due_at the store derived from a time the caller gave (a reschedule, a
 * run now): SQLite takes it as given (the caller's clock), PostgreSQL makes
 * it the later of that and the database's clock (store.h "Shared stores":
 * due times are compared with the one clock every instance shares), so
 * there it is no earlier. */
static void assert_due(int64_t got, int64_t want)
{
    if (g_b.pg)
        cr_assert_geq(got, want, "due_at %lld < %lld", (long long)got,
                      (long long)want);
    else
        cr_assert_eq(got, want);
}

static void assert_job_eq(const job_t *a, const job_t *b)
{
    cr_assert_str_eq(a->id, b->id);
    cr_assert_eq(a->status, b->status);
    cr_assert_str_eq(a->exchange, b->exchange);
    cr_assert_str_eq(a->routing_key, b->routing_key);
    cr_assert_eq(a->deliver_at, b->deliver_at);
    /* a job inserted due after its deliver_at (the HTTP clock was ahead)
     * is due at the later of deliver_at and the database's clock on
     * PostgreSQL (store_pg_jobs.c DUE_AT_SQL): SQLite keeps it as given */
    if (!g_b.pg)
        cr_assert_eq(a->due_at, b->due_at);
    cr_assert_eq(a->delay_ms, b->delay_ms);
    cr_assert_eq(a->created_at, b->created_at);
    cr_assert_eq(a->updated_at, b->updated_at);
    cr_assert_eq(a->sent_at, b->sent_at);
    cr_assert_eq(a->attempts, b->attempts);
    cr_assert_eq(a->max_attempts, b->max_attempts);
    if (a->last_error || b->last_error) {
        cr_assert(a->last_error && b->last_error);
        cr_assert_str_eq(a->last_error, b->last_error);
    }
    if (a->headers || b->headers)
        cr_assert(json_equal(a->headers, b->headers), "headers differ");
    if (a->properties || b->properties)
        cr_assert(json_equal(a->properties, b->properties),
                  "properties differ");
    cr_assert_eq(a->body_kind, b->body_kind);
    cr_assert_eq(a->body_len, b->body_len);
    if (a->body_len)
        cr_assert_arr_eq(a->body, b->body, a->body_len);
}

static job_t get_job(store_t *st, int n)
{
    char id[JOB_ID_LEN + 1];
    job_t j;

    ut_job_id(n, id);
    cr_assert_eq(store_get(st, id, &j), RMQS_OK, "get %s", id);
    return j;
}

/* ------------------------------------------------------------------------ */
/* Open and migrations                                                      */

Test(store, open_creates_schema_and_records_migrations)
{
    char q[128];

    g_st = open_store();
    cr_assert_geq(store_builtin_migrations_count, 1);
    int top =
        store_builtin_migrations[store_builtin_migrations_count - 1].version;
    cr_assert_eq(store_schema_version(g_st), top);
    cr_assert_eq(store_ping(g_st), RMQS_OK);

    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM schema_migrations"),
                 (int64_t)store_builtin_migrations_count);
    cr_assert_eq(ut_both_int(&g_b,
                             "SELECT count(*) FROM schema_migrations WHERE "
                             "version = 1 AND name = '0001_init.sql' AND "
                             "applied_at > 1600000000000"),
                 1);
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM sqlite_schema WHERE name IN "
             "('jobs','idempotency','jobs_due',"
             "'jobs_status_deliver','jobs_deliver')");
    cr_assert_eq(ut_both_int(&g_b, q), 5);
    /* WAL is a property of the file */
    sqlite3 *db = ut_sql_open(g_b.path);
    sqlite3_stmt *s;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(s, 0), "wal");
    sqlite3_finalize(s);
    sqlite3_close(db);
}

Test(store, migrate_reopen_applies_nothing)
{
    g_st = open_store();
    store_close(g_st);
    g_st = NULL;
    int64_t stamp =
        ut_both_int(&g_b, "SELECT sum(applied_at) FROM schema_migrations");
    int64_t rows = ut_both_int(&g_b, "SELECT count(*) FROM schema_migrations");

    usleep(5000);
    g_st = open_store();
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM schema_migrations"),
                 rows);
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT sum(applied_at) FROM schema_migrations"),
        stamp);
}

Test(store, migrate_applies_new_versions_in_order)
{
    size_t nb = store_builtin_migrations_count;
    store_migration *m = calloc(nb + 2, sizeof(*m));
    rmqs_error err = {0};
    int top = store_builtin_migrations[nb - 1].version;

    cr_assert_not_null(m);
    memcpy(m, store_builtin_migrations, nb * sizeof(*m));
    m[nb] = (store_migration){top + 1, "9001_extra.sql",
                              "CREATE TABLE extra (x INTEGER);"};
    m[nb + 1] = (store_migration){top + 2, "9002_more.sql",
                                  "ALTER TABLE extra ADD COLUMN y TEXT;"};

    /* first the built-ins only, then the longer list on the same file */
    g_st = open_store();
    store_close(g_st);
    g_st = NULL;
    cr_assert_eq(store_open_with(g_b.path, &k_opts, m, nb + 2, &g_st, &err),
                 RMQS_OK, "%s", err.message);
    cr_assert_eq(store_schema_version(g_st), top + 2);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM schema_migrations"),
                 (int64_t)nb + 2);
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT count(*) FROM pragma_table_info('extra')"),
        2);
    store_close(g_st);
    g_st = NULL;

    /* now the plain binary sees a newer schema and must refuse it */
    cr_assert_eq(store_open(g_b.path, &k_opts, &g_st, &err), RMQS_EDB);
    cr_assert_null(g_st);
    cr_assert(strstr(err.message, "is newer than this binary"), "%s",
              err.message);
    free(m);
}

Test(store, migrate_newer_db_refused)
{
    rmqs_error err = {0};
    char want[128];

    g_st = open_store();
    store_close(g_st);
    g_st = NULL;
    ut_both_exec(&g_b,
                 "INSERT INTO schema_migrations (version, name, applied_at) "
                 "VALUES (9999, '9999_future.sql', 1)");

    cr_assert_eq(store_open(g_b.path, &k_opts, &g_st, &err), RMQS_EDB);
    cr_assert_null(g_st);
    snprintf(
        want, sizeof(want),
        "database schema version 9999 is newer than this binary "
        "(knows up to %d); refusing to start",
        store_builtin_migrations[store_builtin_migrations_count - 1].version);
    cr_assert(strstr(err.message, want), "message: %s", err.message);
    /* refusing changed nothing */
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT max(version) FROM schema_migrations"), 9999);
}

Test(store, migrate_broken_rolls_back_and_names_file)
{
    size_t nb = store_builtin_migrations_count;
    store_migration *m = calloc(nb + 1, sizeof(*m));
    rmqs_error err = {0};
    int top = store_builtin_migrations[nb - 1].version;

    cr_assert_not_null(m);
    memcpy(m, store_builtin_migrations, nb * sizeof(*m));
    m[nb] = (store_migration){top + 1, "9001_broken.sql",
                              "CREATE TABLE half (x INTEGER);\n"
                              "INSERT INTO nowhere VALUES (1);\n"};

    cr_assert_eq(store_open_with(g_b.path, &k_opts, m, nb + 1, &g_st, &err),
                 RMQS_EDB);
    cr_assert_null(g_st);
    cr_assert(strstr(err.message, "9001_broken.sql"), "%s", err.message);
    cr_assert(strstr(err.message, "no such table: nowhere"), "%s", err.message);
    /* the earlier migrations stay, the broken one left nothing behind */
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT max(version) FROM schema_migrations"), top);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM sqlite_schema "
                                   "WHERE name = 'half'"),
                 0);
    /* and the database still opens with the good list */
    g_st = open_store();
    cr_assert_eq(store_schema_version(g_st), top);
    free(m);
}

Test(store, migrate_list_not_ascending_rejected)
{
    static const store_migration down[] = {
        {2, "0002_b.sql", "CREATE TABLE b (x);"},
        {1, "0001_a.sql", "CREATE TABLE a (x);"},
    };
    static const store_migration dup[] = {
        {1, "0001_a.sql", "CREATE TABLE a (x);"},
        {1, "0001_b.sql", "CREATE TABLE b (x);"},
    };
    static const store_migration zero[] = {
        {0, "0000_a.sql", "CREATE TABLE a (x);"},
    };
    rmqs_error err = {0};

    cr_assert_eq(store_open_with(g_b.path, &k_opts, down, 2, &g_st, &err),
                 RMQS_EINVAL);
    cr_assert_null(g_st);
    cr_assert(strstr(err.message, "not strictly ascending"), "%s", err.message);
    cr_assert(strstr(err.message, "0001_a.sql"), "%s", err.message);
    cr_assert_eq(store_open_with(g_b.path, &k_opts, dup, 2, &g_st, &err),
                 RMQS_EINVAL);
    cr_assert_eq(store_open_with(g_b.path, &k_opts, zero, 1, &g_st, &err),
                 RMQS_EINVAL);
    /* rejected before the file was touched */
    cr_assert_neq(access(g_b.path, F_OK), 0);
}

Test(store, open_garbage_file_is_edb_with_message)
{
    rmqs_error err = {0};
    FILE *f = fopen(g_b.path, "w");

    cr_assert_not_null(f);
    for (int i = 0; i < 200; i++)
        fputs("this is not a database, just some text\n", f);
    fclose(f);

    cr_assert_eq(store_open(g_b.path, &k_opts, &g_st, &err), RMQS_EDB);
    cr_assert_null(g_st);
    cr_assert(strstr(err.message, g_b.path), "%s", err.message);
    cr_assert(strstr(err.message, sqlite3_errstr(SQLITE_NOTADB)), "%s",
              err.message);
}

Test(store, open_missing_directory_is_edb)
{
    rmqs_error err = {0};
    char path[160];

    snprintf(path, sizeof(path), "%s/missing/jobs.db", g_b.dir);
    cr_assert_eq(store_open(path, &k_opts, &g_st, &err), RMQS_EDB);
    cr_assert_null(g_st);
    cr_assert(strstr(err.message, path), "%s", err.message);
    cr_assert(strstr(err.message, sqlite3_errstr(SQLITE_CANTOPEN)), "%s",
              err.message);
}

Test(store, open_unreachable_postgres_url_is_edb_without_password)
{
    /* port 1 on loopback: nothing listens, refused at once */
    const char *urls[] = {"postgres://app:secret@127.0.0.1:1/appdb",
                          "POSTGRESQL://app:secret@127.0.0.1:1/appdb"};

    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        rmqs_error err = {0};

        cr_assert_not(store_is_file(urls[i]), "%s", urls[i]);
        cr_assert_eq(store_open(urls[i], &k_opts, &g_st, &err), RMQS_EDB, "%s",
                     urls[i]);
        cr_assert_null(g_st);
        cr_assert(strstr(err.message, "cannot connect to database ") &&
                      strstr(err.message, "://app@127.0.0.1:1/appdb"),
                  "%s", err.message);
        cr_assert_null(strstr(err.message, "secret"), "%s", err.message);
    }
    cr_assert(store_is_file(g_b.path));
    cr_assert(store_is_file("postgres.db"));
}

Test(store, open_normal_sync_and_null_options)
{
    store_options normal = {.synchronous_full = false};
    rmqs_error err = {0};

    cr_assert_eq(store_open(g_b.path, &normal, &g_st, &err), RMQS_OK, "%s",
                 err.message);
    insert_job(g_st, 1, 100);
    store_close(g_st);
    g_st = NULL;
    cr_assert_eq(store_open(g_b.path, NULL, &g_st, &err), RMQS_OK, "%s",
                 err.message);
    job_t j = get_job(g_st, 1);
    job_clear(&j);
}

/* ------------------------------------------------------------------------ */
/* Insert and get                                                           */

BOTH(insert_get_roundtrip_every_field)
{
    static const unsigned char bin[] = {0x00, 0xff, 0x10, 0x00, 0x80, 0x7f};
    json_error_t jerr;
    job_t in[4];

    g_st = open_store();

    ut_job_make(&in[0], 1, 1700000000123);
    in[0].status = JOB_PENDING;
    free(in[0].exchange);
    in[0].exchange = ut_strdup(""); /* default exchange */
    in[0].due_at = 1700000005000;
    in[0].delay_ms = 0;
    in[0].created_at = 1699999999000;
    in[0].updated_at = 1699999999500;
    in[0].sent_at = 1700000000999;
    in[0].attempts = 2;
    in[0].max_attempts = 7;
    in[0].last_error = ut_strdup("NO_ROUTE: \"quoted\" \xc3\xa9");
    in[0].headers = json_loads("{\"a\":1,\"b\":[true,null,\"x\"],"
                               "\"c\":{\"d\":-2.5}}",
                               0, &jerr);
    in[0].properties = json_loads("{\"content_type\":\"text/plain\","
                                  "\"priority\":5}",
                                  0, &jerr);
    cr_assert(in[0].headers && in[0].properties);

    ut_job_make(&in[1], 2, 42);
    in[1].body_kind = JOB_BODY_JSON;
    free(in[1].body);
    in[1].body = (unsigned char *)ut_strdup("{\"k\":[1,2,3]}");
    in[1].body_len = strlen("{\"k\":[1,2,3]}");
    /* headers, properties, last_error NULL; sent_at -1 */

    ut_job_make(&in[2], 3, 43);
    in[2].body_kind = JOB_BODY_BINARY;
    free(in[2].body);
    in[2].body = malloc(sizeof(bin));
    memcpy(in[2].body, bin, sizeof(bin));
    in[2].body_len = sizeof(bin);
    in[2].status = JOB_SENT;

    ut_job_make(&in[3], 4, 44); /* empty body */
    free(in[3].body);
    in[3].body = NULL;
    in[3].body_len = 0;

    for (int i = 0; i < 4; i++)
        cr_assert_eq(store_insert(g_st, &in[i], NULL, NULL, NULL, NULL),
                     RMQS_OK);

    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 4; i++) {
            job_t out = get_job(g_st, i + 1);
            assert_job_eq(&in[i], &out);
            cr_assert_not_null(out.body); /* even when empty */
            if (!in[i].headers)
                cr_assert_null(out.headers);
            if (!in[i].last_error)
                cr_assert_null(out.last_error);
            job_clear(&out);
        }
        /* and the same after a reopen: it is on disk */
        store_close(g_st);
        g_st = open_store();
    }
    /* stored as documented: 16-byte id, compact JSON, NULL sent_at (the
     * SQLite file; PostgreSQL's columns are bytea and jsonb) */
    if (g_b.pg)
        goto out;
    cr_assert_eq(ut_both_int(&g_b, "SELECT length(id) FROM jobs WHERE seq = 1"),
                 16);
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT headers = '{\"a\":1,\"b\":[true,null,\"x\"],"
                          "\"c\":{\"d\":-2.5}}' FROM jobs WHERE seq = 1"),
        1);
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT sent_at IS NULL FROM jobs WHERE seq = 2"), 1);
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT typeof(body) = 'blob' AND length(body) = 0 "
                          "FROM jobs WHERE seq = 4"),
        1);
out:
    for (int i = 0; i < 4; i++)
        job_clear(&in[i]);
}

BOTH(get_unknown_is_notfound)
{
    char id[JOB_ID_LEN + 1];
    job_t j;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    ut_job_id(999, id);
    cr_assert_eq(store_get(g_st, id, &j), RMQS_ENOTFOUND);
    cr_assert_eq(store_get(g_st, "not-a-uuid", &j), RMQS_ENOTFOUND);
    cr_assert_eq(store_get(g_st, "", &j), RMQS_ENOTFOUND);
    cr_assert_null(j.exchange);
}

BOTH(insert_duplicate_id_is_conflict)
{
    job_t j;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    ut_job_make(&j, 1, 200);
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL),
                 RMQS_ECONFLICT);
    job_clear(&j);
    /* values the schema refuses are the caller's error */
    ut_job_make(&j, 3, 200);
    j.max_attempts = 0;
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_EINVAL);
    j.max_attempts = 1;
    j.status = (job_status)9;
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_EINVAL);
    j.status = JOB_PENDING;
    memcpy(j.id, "bad", 4);
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_EINVAL);
    job_clear(&j);
    /* the store is still fine */
    insert_job(g_st, 2, 200);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 2);
}

/* ------------------------------------------------------------------------ */
/* Idempotency                                                              */

BOTH(idempotency_same_request_existed_different_conflict)
{
    job_t a, b, c, existing;
    bool existed = true;

    g_st = open_store();
    ut_job_make(&a, 1, 100);
    cr_assert_eq(
        store_insert(g_st, &a, "key-1", "{\"req\":1}", &existed, &existing),
        RMQS_OK);
    cr_assert_not(existed);
    cr_assert_null(existing.exchange);

    ut_job_make(&b, 2, 100); /* a retry of the same request gets a fresh id */
    cr_assert_eq(
        store_insert(g_st, &b, "key-1", "{\"req\":1}", &existed, &existing),
        RMQS_OK);
    cr_assert(existed);
    assert_job_eq(&a, &existing);
    job_clear(&existing);

    ut_job_make(&c, 3, 100);
    cr_assert_eq(
        store_insert(g_st, &c, "key-1", "{\"req\":2}", &existed, &existing),
        RMQS_ECONFLICT);
    cr_assert_not(existed);

    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 1);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM idempotency"), 1);
    /* another key is independent */
    cr_assert_eq(
        store_insert(g_st, &c, "key-2", "{\"req\":2}", &existed, &existing),
        RMQS_OK);
    cr_assert_not(existed);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 2);
    job_clear(&a);
    job_clear(&b);
    job_clear(&c);
}

enum { RACE_THREADS = 8 };

typedef struct race_arg {
    store_t *st;
    int n;
    bool existed;
    rmqs_rc rc;
    char got_id[JOB_ID_LEN + 1];
} race_arg;

static void *race_insert(void *p)
{
    race_arg *a = p;
    job_t j, existing;

    ut_job_make(&j, a->n, 100);
    a->rc = store_insert(a->st, &j, "same-key", "same-request", &a->existed,
                         &existing);
    strcpy(a->got_id, a->existed ? existing.id : j.id);
    job_clear(&existing);
    job_clear(&j);
    return NULL;
}

BOTH(idempotency_concurrent_inserts_create_one_job)
{
    store_t *other = NULL;
    pthread_t th[RACE_THREADS];
    race_arg args[RACE_THREADS];
    int created = 0;

    g_st = open_store();
    other = open_store(); /* a second connection on the same file */
    for (int i = 0; i < RACE_THREADS; i++) {
        args[i] = (race_arg){.st = i % 2 ? other : g_st, .n = i + 1};
        cr_assert_eq(pthread_create(&th[i], NULL, race_insert, &args[i]), 0);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < RACE_THREADS; i++) {
        cr_assert_eq(args[i].rc, RMQS_OK, "thread %d: %d", i, args[i].rc);
        created += !args[i].existed;
        cr_assert_str_eq(args[i].got_id, args[0].got_id);
    }
    cr_assert_eq(created, 1);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 1);
    store_close(other);
}

/* Two keyed batches of the same RB_N keys at the same moment, on two
 * connections, the second with its items in the reverse order: neither
 * waits for the other for ever, each key gets one job, and the one that
 * loses a key answers with the winner's job; or, where one key's request
 * differs (odd_key >= 0), exactly one of them is refused at that key. */
enum { RB_N = 200 };

typedef struct race_batch {
    store_t *st;
    int first;    /* job numbers from first */
    bool reverse; /* items in the reverse order of the keys */
    int odd_key;  /* the key whose request this batch changes, or -1 */
    job_t jobs[RB_N], existing[RB_N];
    bool existed[RB_N];
    char keys[RB_N][16], reqs[RB_N][24];
    const char *kp[RB_N], *rp[RB_N];
    store_insert_req r;
    rmqs_rc rc;
    char got[RB_N][JOB_ID_LEN + 1]; /* by key: the job it answered with */
} race_batch;

static void *race_batch_insert(void *p)
{
    race_batch *a = p;

    for (int i = 0; i < RB_N; i++) {
        int key = a->reverse ? RB_N - 1 - i : i;

        ut_job_make(&a->jobs[i], a->first + i, 100);
        snprintf(a->keys[i], sizeof(a->keys[i]), "race-%d", key);
        snprintf(a->reqs[i], sizeof(a->reqs[i]), "{%d%s}", key,
                 key == a->odd_key ? ",odd" : "");
        a->kp[i] = a->keys[i];
        a->rp[i] = a->reqs[i];
    }
    a->r = (store_insert_req){.jobs = a->jobs,
                              .n = RB_N,
                              .idem_keys = a->kp,
                              .idem_requests = a->rp,
                              .existed = a->existed,
                              .existing = a->existing};
    a->rc = store_insert_batch(a->st, &a->r, 1);
    for (int i = 0; i < RB_N; i++) {
        int key = a->reverse ? RB_N - 1 - i : i;

        strcpy(a->got[key], a->existed[i] ? a->existing[i].id : a->jobs[i].id);
        job_clear(&a->existing[i]);
        job_clear(&a->jobs[i]);
    }
    return NULL;
}

static void race_batches(int odd_key)
{
    static race_batch a, b;
    store_t *other;
    pthread_t ta, tb;

    g_st = open_store();
    other = open_store();
    a = (race_batch){.st = g_st, .first = 1, .odd_key = -1};
    b = (race_batch){
        .st = other, .first = 1001, .reverse = true, .odd_key = odd_key};
    cr_assert_eq(pthread_create(&ta, NULL, race_batch_insert, &a), 0);
    cr_assert_eq(pthread_create(&tb, NULL, race_batch_insert, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_assert_eq(a.rc, RMQS_OK);
    cr_assert_eq(b.rc, RMQS_OK);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), RB_N);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM idempotency"), RB_N);
    if (odd_key < 0) {
        cr_assert_eq(a.r.rc, RMQS_OK);
        cr_assert_eq(b.r.rc, RMQS_OK);
        cr_assert_eq(a.r.nexisted + b.r.nexisted, RB_N,
                     "each key stored once: %zu + %zu existed", a.r.nexisted,
                     b.r.nexisted);
        for (int k = 0; k < RB_N; k++)
            cr_assert_str_eq(a.got[k], b.got[k], "key %d", k);
    } else {
        /* the one that came second is refused at the odd key, in its own
         * item order, and stored nothing */
        race_batch *lost = a.r.rc == RMQS_OK ? &b : &a;
        race_batch *won = lost == &a ? &b : &a;

        cr_assert_eq(won->r.rc, RMQS_OK);
        cr_assert_eq(won->r.nexisted, 0);
        cr_assert_eq(lost->r.rc, RMQS_ECONFLICT);
        cr_assert_eq(lost->r.failed_index,
                     (size_t)(lost->reverse ? RB_N - 1 - odd_key : odd_key));
        cr_assert_eq(lost->r.nexisted, 0);
    }
    store_close(other);
}

BOTH(idempotency_racing_keyed_batches_store_each_key_once)
{
    race_batches(-1);
}

BOTH(idempotency_racing_keyed_batches_one_refused_at_a_changed_key)
{
    race_batches(RB_N / 4);
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                  */

BOTH(list_orders_by_deliver_at_then_insertion_and_filters)
{
    /* n -> deliver_at; ties keep insertion order */
    static const int64_t at[] = {500, 100, 300, 100, 500, 200};
    static const int want[] = {2, 4, 6, 3, 1, 5};
    char id[JOB_ID_LEN + 1];
    job_t *jobs, out;
    size_t n;
    char *next;

    g_st = open_store();
    for (int i = 0; i < 6; i++)
        insert_job(g_st, i + 1, at[i]);

    cr_assert_eq(store_list(g_st, FILTER(-1), 100, NULL, &jobs, &n, &next),
                 RMQS_OK);
    cr_assert_eq(n, 6);
    cr_assert_null(next);
    for (size_t i = 0; i < n; i++) {
        ut_job_id(want[i], id);
        cr_assert_str_eq(jobs[i].id, id, "position %zu", i);
    }
    ut_jobs_free(jobs, n);

    /* cancel 4 and 1: the filter sees only them, in order */
    ut_job_id(1, id);
    cr_assert_eq(store_cancel(g_st, id, 20, &out), RMQS_OK);
    job_clear(&out);
    ut_job_id(4, id);
    cr_assert_eq(store_cancel(g_st, id, 20, &out), RMQS_OK);
    job_clear(&out);
    cr_assert_eq(
        store_list(g_st, FILTER(JOB_CANCELLED), 100, NULL, &jobs, &n, &next),
        RMQS_OK);
    cr_assert_eq(n, 2);
    cr_assert_null(next);
    ut_job_id(4, id);
    cr_assert_str_eq(jobs[0].id, id);
    ut_job_id(1, id);
    cr_assert_str_eq(jobs[1].id, id);
    cr_assert_eq(jobs[0].status, JOB_CANCELLED);
    ut_jobs_free(jobs, n);

    cr_assert_eq(
        store_list(g_st, FILTER(JOB_PENDING), 100, NULL, &jobs, &n, &next),
        RMQS_OK);
    cr_assert_eq(n, 4);
    ut_jobs_free(jobs, n);
    cr_assert_eq(
        store_list(g_st, FILTER(JOB_SENT), 100, NULL, &jobs, &n, &next),
        RMQS_OK);
    cr_assert_eq(n, 0);
    cr_assert_null(next);
    free(jobs);
}

static bool cursor_is_url_safe(const char *c)
{
    for (; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
              *c == '.' || *c == '_' || *c == '-'))
            return false;
    return true;
}

/* Walk every page; every job comes exactly once, in global order. */
static void walk_pages(int status, size_t limit, int total,
                       const int *expect_order)
{
    char *after = NULL;
    int seen = 0;
    char id[JOB_ID_LEN + 1];

    for (int pages = 0;; pages++) {
        job_t *jobs;
        size_t n;
        char *next;

        cr_assert_lt(pages, total + 2, "pagination does not end");
        cr_assert_eq(
            store_list(g_st, FILTER(status), limit, after, &jobs, &n, &next),
            RMQS_OK);
        cr_assert_leq(n, limit);
        for (size_t i = 0; i < n; i++) {
            cr_assert_lt(seen, total);
            ut_job_id(expect_order[seen], id);
            cr_assert_str_eq(jobs[i].id, id, "limit %zu, item %d", limit, seen);
            seen++;
        }
        ut_jobs_free(jobs, n);
        free(after);
        after = next;
        if (!next) {
            break;
        }
        cr_assert_eq(n, limit, "a page before the last one is full");
        cr_assert(cursor_is_url_safe(next), "cursor %s", next);
    }
    cr_assert_eq(seen, total);
}

BOTH(list_pagination_with_cursors_visits_each_job_once)
{
    enum { N = 25 };
    int order[N], pending[N];
    int k = 0, kp = 0;
    char id[JOB_ID_LEN + 1];
    job_t out;

    g_st = open_store();
    /* deliver_at 1000 + (n % 4): lots of ties across page boundaries */
    for (int n = 1; n <= N; n++)
        insert_job(g_st, n, 1000 + n % 4);
    for (int r = 0; r < 4; r++)
        for (int n = 1; n <= N; n++)
            if (n % 4 == r) {
                order[k++] = n;
                if (n % 3 != 0)
                    pending[kp++] = n;
            }
    for (int n = 3; n <= N; n += 3) {
        ut_job_id(n, id);
        cr_assert_eq(store_cancel(g_st, id, 5, &out), RMQS_OK);
        job_clear(&out);
    }

    static const size_t limits[] = {1, 2, 3, 4, 5, 7, 24, 25, 26, 1000};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        walk_pages(-1, limits[i], N, order);
        walk_pages(JOB_PENDING, limits[i], kp, pending);
    }
}

BOTH(list_rejects_malformed_cursor_and_bad_args)
{
    static const char *bad[] = {
        "",
        "abc",
        "1.",
        ".1",
        "1.2.3",
        "1.-2",
        " 1.2",
        "1.2 ",
        "+1.2",
        "1,2",
        "0x10.1",
        "1.2x",
        "99999999999999999999.1",
        "1.99999999999999999999",
        "--1.2",
        "-.2",
    };
    job_t *jobs = (job_t *)1;
    size_t n = 7;
    char *next = (char *)1;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(store_list(g_st, FILTER(-1), 10, bad[i], &jobs, &n, &next),
                     RMQS_EINVAL, "cursor \"%s\"", bad[i]);
        cr_assert_null(jobs);
        cr_assert_eq(n, 0);
        cr_assert_null(next);
    }
    cr_assert_eq(store_list(g_st, FILTER(-1), 0, NULL, &jobs, &n, &next),
                 RMQS_EINVAL);
    cr_assert_eq(store_list(g_st, FILTER(9), 10, NULL, &jobs, &n, &next),
                 RMQS_EINVAL);
    /* well-formed cursors, even for rows that do not exist, are fine */
    cr_assert_eq(store_list(g_st, FILTER(-1), 10, "-5.0", &jobs, &n, &next),
                 RMQS_OK);
    cr_assert_eq(n, 1);
    ut_jobs_free(jobs, n);
    cr_assert_eq(store_list(g_st, FILTER(-1), 10, "100.1", &jobs, &n, &next),
                 RMQS_OK);
    cr_assert_eq(n, 0);
    free(jobs);
}

/* ------------------------------------------------------------------------ */
/* Dispatcher: next due, claim, settle, recover                             */

BOTH(next_due_tracks_earliest_pending)
{
    char id[JOB_ID_LEN + 1];
    bool any = true;
    int64_t due = 0;
    job_t out, *jobs;
    size_t n;

    g_st = open_store();
    cr_assert_eq(store_next_due(g_st, &any, &due), RMQS_OK);
    cr_assert_not(any);

    insert_job(g_st, 1, 500);
    insert_job(g_st, 2, 300);
    insert_job(g_st, 3, 900);
    cr_assert_eq(store_next_due(g_st, &any, &due), RMQS_OK);
    cr_assert(any);
    cr_assert_eq(due, 300);

    ut_job_id(2, id);
    cr_assert_eq(store_cancel(g_st, id, 1, &out), RMQS_OK);
    job_clear(&out);
    cr_assert_eq(store_next_due(g_st, &any, &due), RMQS_OK);
    cr_assert_eq(due, 500);

    cr_assert_eq(ut_claim(g_st, 600, 600, 10, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 1);
    ut_jobs_free(jobs, n);
    cr_assert_eq(store_next_due(g_st, &any, &due), RMQS_OK);
    cr_assert_eq(due, 900);
}

static void assert_ids(job_t *jobs, size_t n, const int *want, size_t nwant)
{
    char id[JOB_ID_LEN + 1];

    cr_assert_eq(n, nwant, "got %zu jobs, want %zu", n, nwant);
    for (size_t i = 0; i < n; i++) {
        ut_job_id(want[i], id);
        cr_assert_str_eq(jobs[i].id, id, "position %zu", i);
    }
}

BOTH(claim_order_limit_and_state)
{
    job_t *jobs;
    size_t n;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    insert_job(g_st, 2, 50);
    insert_job(g_st, 3, 100);
    insert_job(g_st, 4, 200);
    insert_job(g_st, 5, 1000);
    insert_job(g_st, 6, 10); /* inserted last, due first */

    cr_assert_eq(ut_claim(g_st, 150, 150, 3, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){6, 2, 1}, 3);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(jobs[i].status, JOB_PUBLISHING);
        cr_assert_eq(jobs[i].attempts, 1);
        cr_assert_eq(jobs[i].updated_at, 150);
        cr_assert_str_eq(jobs[i].exchange, "ex");
        cr_assert_eq(jobs[i].body_len, 5);
    }
    ut_jobs_free(jobs, n);

    job_t j = get_job(g_st, 6);
    cr_assert_eq(j.status, JOB_PUBLISHING);
    cr_assert_eq(j.attempts, 1);
    job_clear(&j);

    /* claimed ones are not claimed again; only due ones come */
    cr_assert_eq(ut_claim(g_st, 150, 150, 10, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){3}, 1);
    ut_jobs_free(jobs, n);

    cr_assert_eq(ut_claim(g_st, 150, 150, 10, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 0);
    cr_assert_null(jobs);

    cr_assert_eq(ut_claim(g_st, 1000, 1000, 0, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 0);

    cr_assert_eq(ut_claim(g_st, 1000, 1000, 10, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){4, 5}, 2);
    ut_jobs_free(jobs, n);
}

BOTH(claim_ahead_of_time_records_the_real_clock)
{
    job_t *jobs;
    size_t n;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    insert_job(g_st, 2, 140);
    insert_job(g_st, 3, 200);

    /* at 90, claim what falls due by 150: updated_at is 90, not 150 */
    cr_assert_eq(ut_claim(g_st, 150, 90, 10, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){1, 2}, 2);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(jobs[i].updated_at, 90);
    ut_jobs_free(jobs, n);
    job_t j = get_job(g_st, 3);
    cr_assert_eq(j.status, JOB_PENDING);
    job_clear(&j);
}

BOTH(claim_sorts_many)
{
    enum { N = 200 };
    job_t *jobs;
    size_t n;

    g_st = open_store();
    for (int i = 0; i < N; i++)
        insert_job(g_st, i + 1, (i * 7919) % 97); /* scrambled, with ties */
    cr_assert_eq(ut_claim(g_st, 1000, 1000, N, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, N);
    for (size_t i = 1; i < n; i++) {
        cr_assert_leq(jobs[i - 1].due_at, jobs[i].due_at);
        if (jobs[i - 1].due_at == jobs[i].due_at) /* then insertion order */
            cr_assert_lt(strcmp(jobs[i - 1].id, jobs[i].id), 0);
    }
    ut_jobs_free(jobs, n);
}

static void claim_all(int64_t now, size_t expect)
{
    job_t *jobs;
    size_t n;

    cr_assert_eq(ut_claim(g_st, now, now, 100, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, expect);
    ut_jobs_free(jobs, n);
}

BOTH(settle_sent_retry_release)
{
    char id1[JOB_ID_LEN + 1], id2[JOB_ID_LEN + 1], id3[JOB_ID_LEN + 1];
    job_t j;

    g_st = open_store();
    ut_job_make(&j, 1, 100);
    j.last_error = ut_strdup("earlier failure");
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
    job_clear(&j);
    ut_job_make(&j, 2, 100);
    j.max_attempts = 2;
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
    job_clear(&j);
    insert_job(g_st, 3, 100);
    ut_job_id(1, id1);
    ut_job_id(2, id2);
    ut_job_id(3, id3);

    claim_all(100, 3);
    store_outcome o[] = {
        {.id = id1, .kind = STORE_OUT_SENT},
        {.id = id2,
         .kind = STORE_OUT_RETRY,
         .error = "NO_ROUTE",
         .retry_at = 5000},
        {.id = id3, .kind = STORE_OUT_RELEASE},
    };
    cr_assert_eq(store_settle(g_st, o, 3, 200), RMQS_OK);

    j = get_job(g_st, 1);
    cr_assert_eq(j.status, JOB_SENT);
    cr_assert_eq(j.sent_at, 200);
    cr_assert_eq(j.updated_at, 200);
    cr_assert_eq(j.attempts, 1);
    cr_assert_str_eq(j.last_error, "earlier failure"); /* kept */
    job_clear(&j);

    j = get_job(g_st, 2);
    cr_assert_eq(j.status, JOB_PENDING);
    cr_assert_eq(j.due_at, 5000);
    cr_assert_eq(j.deliver_at, 100); /* the requested time stays */
    cr_assert_eq(j.attempts, 1);
    cr_assert_str_eq(j.last_error, "NO_ROUTE");
    cr_assert_eq(j.sent_at, -1);
    job_clear(&j);

    j = get_job(g_st, 3);
    cr_assert_eq(j.status, JOB_PENDING);
    cr_assert_eq(j.due_at, 100);
    cr_assert_eq(j.attempts, 0);
    cr_assert_null(j.last_error);
    job_clear(&j);

    /* job 2 is not due before 5000; job 3 is */
    claim_all(4999, 1);
    o[2].kind = STORE_OUT_RELEASE;
    cr_assert_eq(store_settle(g_st, &o[2], 1, 300), RMQS_OK);

    /* second attempt of job 2 fails too: max_attempts 2 reached -> failed */
    claim_all(5000, 2);
    o[1].error = "channel closed";
    o[1].retry_at = 9000;
    cr_assert_eq(store_settle(g_st, &o[1], 1, 6000), RMQS_OK);
    j = get_job(g_st, 2);
    cr_assert_eq(j.status, JOB_FAILED);
    cr_assert_eq(j.attempts, 2);
    cr_assert_str_eq(j.last_error, "channel closed");
    cr_assert_eq(j.updated_at, 6000);
    job_clear(&j);

    /* only publishing rows are touched: a SENT for a pending or failed job
     * is ignored */
    store_outcome late[] = {
        {.id = id2, .kind = STORE_OUT_SENT},
        {.id = id1, .kind = STORE_OUT_RETRY, .error = "x", .retry_at = 1},
    };
    cr_assert_eq(store_settle(g_st, late, 2, 7000), RMQS_OK);
    j = get_job(g_st, 2);
    cr_assert_eq(j.status, JOB_FAILED);
    job_clear(&j);
    j = get_job(g_st, 1);
    cr_assert_eq(j.status, JOB_SENT);
    cr_assert_str_eq(j.last_error, "earlier failure");
    job_clear(&j);

    cr_assert_eq(store_settle(g_st, NULL, 0, 1), RMQS_OK);
}

BOTH(settle_malformed_id_applies_nothing)
{
    char id1[JOB_ID_LEN + 1];
    job_t j;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    ut_job_id(1, id1);
    claim_all(100, 1);
    store_outcome o[] = {
        {.id = id1, .kind = STORE_OUT_SENT},
        {.id = "garbage", .kind = STORE_OUT_SENT},
    };
    cr_assert_eq(store_settle(g_st, o, 2, 200), RMQS_EINVAL);
    j = get_job(g_st, 1);
    cr_assert_eq(j.status, JOB_PUBLISHING);
    job_clear(&j);
}

/* SQLite alone: its store_recover puts every publishing job back (one
 * instance owns the file). PostgreSQL's reclaims only the jobs whose lease
 * expired, never those of live instances, by design (store.h "Shared
 * stores"; proved by integration.instances.postgres). */
Test(store, recover_returns_publishing_to_pending)
{
    size_t n = 99;
    job_t j;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    insert_job(g_st, 2, 100);
    insert_job(g_st, 3, 100);
    insert_job(g_st, 4, 9999);
    cr_assert_eq(store_recover(g_st, &n), RMQS_OK);
    cr_assert_eq(n, 0);

    claim_all(100, 3);
    /* a crash: the claims are written, the process that held them is gone
     * (store_recover runs at start-up, before any claim) */
    reopen_store();
    cr_assert_eq(store_recover(g_st, &n), RMQS_OK);
    cr_assert_eq(n, 3);
    for (int i = 1; i <= 3; i++) {
        j = get_job(g_st, i);
        cr_assert_eq(j.status, JOB_PENDING);
        cr_assert_eq(j.attempts, 0);
        job_clear(&j);
    }
    cr_assert_eq(store_recover(g_st, &n), RMQS_OK);
    cr_assert_eq(n, 0);
    claim_all(100, 3);
}

/* ------------------------------------------------------------------------ */
/* Client changes                                                           */

BOTH(reschedule_only_pending)
{
    char id[JOB_ID_LEN + 1];
    job_t out, j;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    insert_job(g_st, 2, 100);
    ut_job_id(1, id);

    cr_assert_eq(store_reschedule(g_st, id, 7000, 6000, 1000, &out), RMQS_OK);
    cr_assert_eq(out.deliver_at, 7000);
    assert_due(out.due_at, 7000);
    cr_assert_eq(out.delay_ms, 6000);
    cr_assert_eq(out.updated_at, 1000);
    cr_assert_eq(out.status, JOB_PENDING);
    j = get_job(g_st, 1);
    assert_job_eq(&out, &j);
    job_clear(&j);
    job_clear(&out);

    /* moved to a time already past (500 at 1200): due from the reschedule */
    cr_assert_eq(store_reschedule(g_st, id, 500, 0, 1200, &out), RMQS_OK);
    cr_assert_eq(out.deliver_at, 500, "the requested time is kept");
    assert_due(out.due_at, 1200);
    job_clear(&out);

    /* job 2 goes publishing: conflict */
    claim_all(100, 1);
    ut_job_id(2, id);
    cr_assert_eq(store_reschedule(g_st, id, 7000, 6000, 1000, &out),
                 RMQS_ECONFLICT);
    /* the conflict answers with the job as it is, unchanged */
    cr_assert_str_eq(out.id, id);
    cr_assert_eq(out.status, JOB_PUBLISHING);
    cr_assert_eq(out.deliver_at, 100);
    job_clear(&out);
    j = get_job(g_st, 2);
    cr_assert_eq(j.deliver_at, 100);
    job_clear(&j);

    ut_job_id(77, id);
    cr_assert_eq(store_reschedule(g_st, id, 1, 1, 1, &out), RMQS_ENOTFOUND);
    cr_assert_eq(store_reschedule(g_st, "nope", 1, 1, 1, &out), RMQS_ENOTFOUND);
}

BOTH(cancel_state_rules)
{
    char id[JOB_ID_LEN + 1];
    job_t out, *jobs;
    size_t n;

    g_st = open_store();
    insert_job(g_st, 1, 100); /* pending -> cancelled */
    insert_job(g_st, 2, 100); /* publishing */
    insert_job(g_st, 3, 100); /* sent */
    insert_job(g_st, 4, 100); /* failed */
    insert_job(g_st, 5, 100); /* stays pending */

    ut_job_id(1, id);
    cr_assert_eq(store_cancel(g_st, id, 50, &out), RMQS_OK);
    cr_assert_eq(out.status, JOB_CANCELLED);
    cr_assert_eq(out.updated_at, 50);
    job_clear(&out);
    /* again: OK, unchanged */
    cr_assert_eq(store_cancel(g_st, id, 60, &out), RMQS_OK);
    cr_assert_eq(out.status, JOB_CANCELLED);
    cr_assert_eq(out.updated_at, 50);
    job_clear(&out);

    cr_assert_eq(ut_claim(g_st, 100, 100, 3, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){2, 3, 4}, 3);
    ut_jobs_free(jobs, n);
    char id3[JOB_ID_LEN + 1], id4[JOB_ID_LEN + 1];
    ut_job_id(3, id3);
    ut_job_id(4, id4);
    store_outcome o[] = {
        {.id = id3, .kind = STORE_OUT_SENT},
        {.id = id4, .kind = STORE_OUT_RETRY, .error = "e", .retry_at = 1},
    };
    /* job 4 has max_attempts 3: make it fail for good */
    ut_both_exec(&g_b, "UPDATE jobs SET max_attempts = 1 WHERE seq = 4");
    cr_assert_eq(store_settle(g_st, o, 2, 70), RMQS_OK);

    static const struct {
        int n;
        job_status st;
    } conflicts[] = {{2, JOB_PUBLISHING}, {3, JOB_SENT}, {4, JOB_FAILED}};
    for (size_t i = 0; i < 3; i++) {
        job_t j = get_job(g_st, conflicts[i].n);
        cr_assert_eq(j.status, conflicts[i].st);
        job_clear(&j);
        ut_job_id(conflicts[i].n, id);
        cr_assert_eq(store_cancel(g_st, id, 80, &out), RMQS_ECONFLICT, "job %d",
                     conflicts[i].n);
        /* the conflict answers with the job as it is */
        cr_assert_str_eq(out.id, id);
        cr_assert_eq(out.status, conflicts[i].st, "job %d", conflicts[i].n);
        job_clear(&out);
        j = get_job(g_st, conflicts[i].n);
        cr_assert_eq(j.status, conflicts[i].st);
        job_clear(&j);
    }

    ut_job_id(99, id);
    cr_assert_eq(store_cancel(g_st, id, 1, &out), RMQS_ENOTFOUND);
    cr_assert_eq(
        store_cancel(g_st, "01890A5D-AC96-7B3C-8F00-000000000001", 1, &out),
        RMQS_ENOTFOUND);

    /* a cancelled job is never claimed */
    cr_assert_eq(ut_claim(g_st, 10000, 10000, 10, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){5}, 1);
    ut_jobs_free(jobs, n);
}

/* Run now, retry and the bulk page (issue 14): the state rules and the
 * status counts, moved in the transaction of the change. */
BOTH(run_retry_and_batch_rules)
{
    char id[5][JOB_ID_LEN + 1];
    const char *ids[6];
    bool changed[6];
    size_t n_changed, n;
    int64_t counts[5];
    job_t out, *jobs;
    store_change run = {.kind = STORE_CHANGE_RUN};
    store_change retry = {.kind = STORE_CHANGE_RETRY, .deliver_at = 500};
    store_change bulk_retry = {.kind = STORE_CHANGE_RETRY,
                               .keep_deliver_at = true};
    store_change cancel = {.kind = STORE_CHANGE_CANCEL};

    g_st = open_store();
    for (int i = 0; i < 5; i++) {
        insert_job(g_st, i + 1, 100000);
        ut_job_id(i + 1, id[i]);
    }
    /* run now: due at now, a reschedule to now */
    cr_assert_eq(store_update(g_st, id[0], &run, 40, &out), RMQS_OK);
    cr_assert_eq(out.status, JOB_PENDING);
    cr_assert_eq(out.deliver_at, 40);
    assert_due(out.due_at, 40);
    job_clear(&out);
    /* jobs 1 and 2 fail for good (max_attempts 1) */
    ut_both_exec(&g_b, "UPDATE jobs SET max_attempts = 1 WHERE seq IN (1, 2)");
    ut_both_exec(&g_b,
                 "UPDATE jobs SET deliver_at = 50, due_at = 50 WHERE seq = 2");
    /* PostgreSQL made job 1 due at the database's now: back to 40 */
    ut_both_exec(&g_b, "UPDATE jobs SET due_at = 40 WHERE seq = 1");
    cr_assert_eq(ut_claim(g_st, 60, 60, 10, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 2);
    ut_jobs_free(jobs, n);
    store_outcome o[] = {
        {.id = id[0],
         .kind = STORE_OUT_RETRY,
         .error = "404 NOT_FOUND",
         .retry_at = 1},
        {.id = id[1],
         .kind = STORE_OUT_RETRY,
         .error = "312 NO_ROUTE",
         .retry_at = 1},
    };
    cr_assert_eq(store_settle(g_st, o, 2, 70), RMQS_OK);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_assert_eq(counts[JOB_FAILED], 2);
    cr_assert_eq(counts[JOB_PENDING], 3);

    /* run now of a failed job, retry of a pending one: conflicts */
    cr_assert_eq(store_update(g_st, id[0], &run, 80, &out), RMQS_ECONFLICT);
    cr_assert_eq(out.status, JOB_FAILED);
    job_clear(&out);
    cr_assert_eq(store_update(g_st, id[2], &retry, 80, &out), RMQS_ECONFLICT);
    cr_assert_eq(out.status, JOB_PENDING);
    job_clear(&out);

    /* retry: pending, attempts 0, the new time, last_error kept */
    cr_assert_eq(store_update(g_st, id[0], &retry, 80, &out), RMQS_OK);
    cr_assert_eq(out.status, JOB_PENDING);
    cr_assert_eq(out.attempts, 0);
    cr_assert_eq(out.deliver_at, 500);
    cr_assert_str_eq(out.last_error, "404 NOT_FOUND");
    job_clear(&out);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_assert_eq(counts[JOB_FAILED], 1);
    cr_assert_eq(counts[JOB_PENDING], 4);

    /* a bulk retry page: only the failed one changes, deliver_at kept */
    for (int i = 0; i < 5; i++)
        ids[i] = id[i];
    ids[5] = "not-an-id";
    cr_assert_eq(
        store_update_batch(g_st, ids, 6, &bulk_retry, 90, changed, &n_changed),
        RMQS_OK);
    cr_assert_eq(n_changed, 1);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(changed[i], i == 1, "job %d", i + 1);
    out = get_job(g_st, 2);
    cr_assert_eq(out.status, JOB_PENDING);
    cr_assert_eq(out.deliver_at, 50);
    assert_due(out.due_at, 90); /* due now */
    cr_assert_eq(out.attempts, 0);
    job_clear(&out);

    /* a bulk cancel page: every pending one, in one transaction */
    cr_assert_eq(
        store_update_batch(g_st, ids, 6, &cancel, 95, changed, &n_changed),
        RMQS_OK);
    cr_assert_eq(n_changed, 5);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_assert_eq(counts[JOB_CANCELLED], 5);
    cr_assert_eq(counts[JOB_PENDING], 0);
    /* again: nothing pending is left, nothing changes */
    cr_assert_eq(
        store_update_batch(g_st, ids, 6, &cancel, 96, changed, &n_changed),
        RMQS_OK);
    cr_assert_eq(n_changed, 0);
    cr_assert_eq(
        store_update_batch(g_st, ids, 6, &run, 96, changed, &n_changed),
        RMQS_EINVAL);
}

/* ------------------------------------------------------------------------ */
/* Query plans                                                              */

static char *query_plan(const char *sql)
{
    sqlite3 *db = ut_sql_open(g_b.path);
    sqlite3_stmt *s = NULL;
    char *eqp = sqlite3_mprintf("EXPLAIN QUERY PLAN %s", sql);
    size_t cap = 4096, len = 0;
    char *plan = calloc(1, cap);

    cr_assert_eq(sqlite3_prepare_v2(db, eqp, -1, &s, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(db));
    while (sqlite3_step(s) == SQLITE_ROW)
        len += (size_t)snprintf(plan + len, cap - len, "%s\n",
                                (const char *)sqlite3_column_text(s, 3));
    cr_assert_lt(len, cap);
    sqlite3_finalize(s);
    sqlite3_free(eqp);
    sqlite3_close(db);
    return plan;
}

/* Assert that the plan of the store's statement `name` contains `want`
 * and none of the `bad` fragments. */
static void check_plan(const char *name, const char *want)
{
    static const char *bad[] = {"TEMP B-TREE", "SCAN jobs\n"};
    const char *sql = store__sql(name);
    char msg[4200];
    bool ok;

    cr_assert_not_null(sql, "%s", name);
    char *plan = query_plan(sql);
    ok = strstr(plan, want) != NULL;
    for (size_t i = 0; i < 2; i++)
        ok = ok && !strstr(plan, bad[i]);
    snprintf(msg, sizeof(msg), "%s", plan);
    free(plan);
    cr_assert(ok, "plan of %s lacks \"%s\" or sorts/scans:\n%s", name, want,
              msg);
}

static void check_all_plans(void)
{
    /* the dispatcher's statements: the due read and the next due time on
     * the read connection, then the claim and each outcome by id
     * (store_record) */
    check_plan("read_due", "SEARCH jobs USING INDEX jobs_due (due_at<?)");
    check_plan("read_next", "INDEX jobs_due");
    check_plan("claim_held", "INDEX jobs_id (id=?)");
    check_plan("settle_sent", "INDEX jobs_id (id=?)");
    check_plan("settle_retry", "INDEX jobs_id (id=?)");
    check_plan("settle_release", "INDEX jobs_id (id=?)");
    check_plan("settle_expire", "INDEX jobs_id (id=?)");
    check_plan("settle_fail", "INDEX jobs_id (id=?)");
    check_plan("list_all", "INDEX jobs_deliver");
    check_plan("list_all_after", "INDEX jobs_deliver");
    check_plan("list_status", "INDEX jobs_status_deliver (status=?)");
    check_plan("list_status_after", "INDEX jobs_status_deliver (status=?");
    check_plan("get", "INDEX jobs_id (id=?)"); /* 0006 */
    /* recurring schedules (issue 13): due schedules and the next fire
     * time from their partial index (a schedule's runs, like every
     * filter but the status: test_store_search.c) */
    check_plan("sched_due", "USING INDEX schedules_due (next_fire_at>? AND "
                            "next_fire_at<?)");
    check_plan("sched_next", "INDEX schedules_due");
    check_plan("sched_list", "SEARCH schedules USING PRIMARY KEY (name>?)");
    /* a schedule's last run and failure streak (issue 25): both read
     * backwards from an index, no sort, no scan, whatever its run count */
    check_plan("sched_recent",
               "SEARCH jobs USING INDEX jobs_schedule (schedule=? AND "
               "deliver_at<?)");
    check_plan("sched_recent",
               "SEARCH jobs USING COVERING INDEX jobs_schedule_done "
               "(schedule=?)");
}

Test(store, due_queries_use_partial_index)
{
    g_st = open_store();
    for (int i = 1; i <= 50; i++)
        insert_job(g_st, i, i * 10);
    /* as deployed: no statistics */
    check_all_plans();

    /* and with statistics of a realistic table: 20000 jobs, 10% pending */
    ut_both_exec(
        &g_b, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c "
              "WHERE i < 20000) INSERT INTO jobs (id, status, exchange, "
              "routing_key, deliver_at, due_at, delay_ms, created_at, "
              "updated_at, attempts, max_attempts, body_kind, body) "
              "SELECT randomblob(16), CASE WHEN i % 10 = 0 THEN 0 ELSE 2 END, "
              "'', 'rk', i, i, 0, 0, 0, 0, 1, 0, x'' FROM c; ANALYZE;");
    check_all_plans();
    cr_assert_null(store__sql("no_such_statement"));
}

/* ------------------------------------------------------------------------ */
/* A full database                                                          */

Test(store, full_database_is_efull_and_recovers)
{
    enum { BIG = 256 * 1024 };
    int64_t applied = 0;
    bool existed = true;
    job_t big, out;
    size_t n;
    job_t *jobs;
    char *next;

    g_st = open_store();
    insert_job(g_st, 1, 100);

    ut_job_make(&big, 2, 200);
    free(big.body);
    big.body = malloc(BIG);
    cr_assert_not_null(big.body);
    for (size_t i = 0; i < BIG; i++)
        big.body[i] = (unsigned char)(i * 31);
    big.body_len = BIG;
    big.body_kind = JOB_BODY_BINARY;

    /* the file may not grow any more */
    cr_assert_eq(store__set_max_pages(g_st, 1, &applied), RMQS_OK);
    cr_assert_gt(applied, 1);

    cr_assert_eq(store_insert(g_st, &big, NULL, NULL, NULL, NULL), RMQS_EFULL);
    cr_assert_eq(store_get(g_st, big.id, &out), RMQS_ENOTFOUND);
    cr_assert_eq(store_insert(g_st, &big, "big-key", "big-req", &existed, &out),
                 RMQS_EFULL);
    cr_assert_not(existed);
    cr_assert_eq(store_list(g_st, FILTER(-1), 10, NULL, &jobs, &n, &next),
                 RMQS_OK);
    cr_assert_eq(n, 1);
    ut_jobs_free(jobs, n);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM idempotency"), 0);

    /* the same store_t still works: reads, and writes that fit */
    cr_assert_eq(store_ping(g_st), RMQS_OK);
    insert_job(g_st, 3, 300);
    claim_all(1000, 2);

    /* disk space returns: the same insert now succeeds, without reopening */
    cr_assert_eq(store__set_max_pages(g_st, 1073741823, &applied), RMQS_OK);
    cr_assert_eq(store_insert(g_st, &big, "big-key", "big-req", &existed, &out),
                 RMQS_OK);
    cr_assert_not(existed);
    out = get_job(g_st, 2);
    assert_job_eq(&big, &out);
    job_clear(&out);
    job_clear(&big);
}


/* A request of many jobs, some keyed (POST /schedule/batch's items with an
 * idempotency_key): new keys inserted with their jobs, known ones answered
 * with the earlier job in their place, one known with another request
 * refusing the whole request. */
#define KB_N 6

static void keyed_req(store_insert_req *r, job_t *jobs, const char **keys,
                      const char **reqs, bool *ex, job_t *exj)
{
    memset(ex, 0, KB_N * sizeof(*ex));
    memset(exj, 0, KB_N * sizeof(*exj));
    *r = (store_insert_req){.jobs = jobs,
                            .n = KB_N,
                            .idem_keys = keys,
                            .idem_requests = reqs,
                            .existed = ex,
                            .existing = exj};
}

BOTH(idempotency_keyed_batch_new_existing_conflict)
{
    job_t first[KB_N], again[KB_N], changed[KB_N], exj[KB_N];
    const char *keys[KB_N] = {"a", NULL, "b", "c", NULL, "d"};
    const char *reqs[KB_N] = {"{1}", NULL, "{2}", "{3}", NULL, "{4}"};
    const char *keys2[KB_N] = {"a", "e", "b", NULL, "f", "d"};
    const char *reqs2[KB_N] = {"{1}", "{5}", "{2}", NULL, "{6}", "{4}"};
    const char *reqs3[KB_N] = {"{1}", "{5}", "{changed}", NULL, "{6}", "{4}"};
    bool ex[KB_N];
    store_insert_req r;

    g_st = open_store();
    for (int i = 0; i < KB_N; i++) {
        ut_job_make(&first[i], 1 + i, 100 + i);
        ut_job_make(&again[i], 11 + i, 100 + i);
        ut_job_make(&changed[i], 21 + i, 100 + i);
    }
    /* every key new: all inserted, with their keys */
    keyed_req(&r, first, keys, reqs, ex, exj);
    cr_assert_eq(store_insert_batch(g_st, &r, 1), RMQS_OK);
    cr_assert_eq(r.rc, RMQS_OK);
    cr_assert_eq(r.nexisted, 0);
    for (int i = 0; i < KB_N; i++)
        cr_assert_not(ex[i]);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 6);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM idempotency"), 4);

    /* a known key with another request: nothing of the request stored, the
     * item named */
    keyed_req(&r, changed, keys2, reqs3, ex, exj);
    cr_assert_eq(store_insert_batch(g_st, &r, 1), RMQS_OK);
    cr_assert_eq(r.rc, RMQS_ECONFLICT);
    cr_assert_eq(r.failed_index, 2);
    cr_assert_eq(r.nexisted, 0);
    for (int i = 0; i < KB_N; i++) {
        cr_assert_not(ex[i]);
        cr_assert_null(exj[i].exchange);
    }
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 6);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM idempotency"), 4);

    /* known keys (a, b, d) answered with the jobs stored first, new keys
     * (e, f) and the unkeyed job inserted */
    keyed_req(&r, again, keys2, reqs2, ex, exj);
    cr_assert_eq(store_insert_batch(g_st, &r, 1), RMQS_OK);
    cr_assert_eq(r.rc, RMQS_OK);
    cr_assert_eq(r.nexisted, 3);
    cr_assert(ex[0] && ex[2] && ex[5]);
    cr_assert_not(ex[1] || ex[3] || ex[4]);
    assert_job_eq(&first[0], &exj[0]);
    assert_job_eq(&first[2], &exj[2]);
    assert_job_eq(&first[5], &exj[5]);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 9);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM idempotency"), 6);
    for (int i = 0; i < KB_N; i++) {
        job_t got = {0};

        cr_assert_eq(store_get(g_st, again[i].id, &got),
                     ex[i] ? RMQS_ENOTFOUND : RMQS_OK, "job %d", i);
        job_clear(&got);
        job_clear(&exj[i]);
    }

    /* the first batch once more: its keyed jobs exist, but its unkeyed
     * ones carry ids the first insert took */
    keyed_req(&r, first, keys, reqs, ex, exj);
    cr_assert_eq(store_insert_batch(g_st, &r, 1), RMQS_OK);
    cr_assert_eq(r.rc, RMQS_ECONFLICT);
    cr_assert_eq(r.failed_index, 1);
    cr_assert_eq(r.nexisted, 0);
    for (int i = 0; i < KB_N; i++)
        cr_assert_null(exj[i].exchange);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 9);
    for (int i = 0; i < KB_N; i++) {
        job_clear(&first[i]);
        job_clear(&again[i]);
        job_clear(&changed[i]);
    }
}

/* ------------------------------------------------------------------------ */
/* Group commit, counts, purge, checkpoint                                  */

BOTH(insert_batch_isolates_each_request)
{
    job_t a[2], b, c;
    store_insert_req reqs[3];
    job_t got = {0}, exj[1];
    bool ex[1] = {false};

    memset(exj, 0, sizeof(exj));
    g_st = open_store();
    ut_job_make(&a[0], 1, 100);
    ut_job_make(&a[1], 2, 200);
    ut_job_make(&b, 3, 300);
    ut_job_make(&c, 1, 400); /* same id as a[0]: this request must fail alone */
    reqs[0] = (store_insert_req){.jobs = a, .n = 2};
    reqs[1] = (store_insert_req){.jobs = &b,
                                 .n = 1,
                                 .idem_keys = KEY_K,
                                 .idem_requests = REQ_EMPTY,
                                 .existed = ex,
                                 .existing = exj};
    reqs[2] = (store_insert_req){.jobs = &c, .n = 1};
    cr_assert_eq(store_insert_batch(g_st, reqs, 3), RMQS_OK);
    cr_expect_eq(reqs[0].rc, RMQS_OK);
    cr_expect_eq(reqs[1].rc, RMQS_OK);
    cr_expect_eq(reqs[2].rc, RMQS_ECONFLICT);
    cr_expect_eq(store_get(g_st, a[1].id, &got), RMQS_OK);
    cr_expect_eq(got.deliver_at, 200);
    job_clear(&got);
    cr_expect_eq(store_get(g_st, b.id, &got), RMQS_OK);
    job_clear(&got);
    cr_expect_eq(store_get(g_st, a[0].id, &got), RMQS_OK);
    cr_expect_eq(got.deliver_at, 100, "the failed request overwrote a job");
    job_clear(&got);
    job_clear(&a[0]);
    job_clear(&a[1]);
    job_clear(&b);
    job_clear(&c);
}

BOTH(counts_follow_every_status_change)
{
    int64_t counts[5];
    job_t *jobs = NULL;
    size_t n = 0;
    job_t got = {0};
    char id[JOB_ID_LEN + 1];

    g_st = open_store();
    for (int i = 1; i <= 4; i++)
        insert_job(g_st, i, 100 * i);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PENDING], 4);
    cr_assert_eq(ut_claim(g_st, 250, 250, 10, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 2);
    store_outcome o[2] = {{.id = jobs[0].id, .kind = STORE_OUT_SENT},
                          {.id = jobs[1].id, .kind = STORE_OUT_RELEASE}};
    cr_assert_eq(store_settle(g_st, o, 2, 300), RMQS_OK);
    ut_jobs_free(jobs, n);
    ut_job_id(4, id);
    cr_assert_eq(store_cancel(g_st, id, 300, &got), RMQS_OK);
    job_clear(&got);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PENDING], 2);
    cr_expect_eq(counts[JOB_PUBLISHING], 0);
    cr_expect_eq(counts[JOB_SENT], 1);
    cr_expect_eq(counts[JOB_CANCELLED], 1);
}

BOTH(purge_deletes_only_finished_jobs_past_retention)
{
    job_t *jobs = NULL, got = {0};
    size_t n = 0, deleted = 0;
    char id[JOB_ID_LEN + 1];
    int64_t counts[5];

    g_st = open_store();
    for (int i = 1; i <= 5; i++)
        insert_job(g_st, i, 100);
    cr_assert_eq(ut_claim(g_st, 100, 100, 2, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 2);
    store_outcome o[2] = {{.id = jobs[0].id, .kind = STORE_OUT_SENT},
                          {.id = jobs[1].id, .kind = STORE_OUT_SENT}};
    cr_assert_eq(store_settle(g_st, o, 2, 1000),
                 RMQS_OK); /* finished at 1000 */
    ut_jobs_free(jobs, n);
    ut_job_id(5, id);
    cr_assert_eq(store_cancel(g_st, id, 5000, &got), RMQS_OK); /* at 5000 */
    job_clear(&got);

    cr_assert_eq(store_purge(g_st, 1000, 100, &deleted), RMQS_OK);
    cr_expect_eq(deleted, 0, "a job finished exactly at the limit is kept");
    cr_assert_eq(store_purge(g_st, 1001, 1, &deleted), RMQS_OK);
    cr_expect_eq(deleted, 1, "the limit bounds one transaction");
    cr_assert_eq(store_purge(g_st, 1001, 100, &deleted), RMQS_OK);
    cr_expect_eq(deleted, 1);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_SENT], 0);
    cr_expect_eq(counts[JOB_CANCELLED], 1);
    cr_expect_eq(counts[JOB_PENDING], 2, "pending jobs are never purged");
    cr_assert_eq(store_purge(g_st, INT64_MAX, 100, &deleted), RMQS_OK);
    cr_expect_eq(deleted, 1);
    cr_expect_eq(store_get(g_st, id, &got), RMQS_ENOTFOUND);
}

/* ------------------------------------------------------------------------ */
/* job_counts kept by the store (no triggers): exact after every operation */

/* store_counts() must equal a real count of jobs, read through a second
 * connection, after every kind of change. */
static void check_counts(const char *after)
{
    int64_t got[5], want;
    char sql[64];

    cr_assert_eq(store_counts(g_st, got), RMQS_OK, "store_counts after %s",
                 after);
    for (int i = 0; i < 5; i++) {
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM jobs WHERE status = %d", i);
        want = ut_both_int(&g_b, sql);
        cr_assert_eq(got[i], want,
                     "after %s: status %d: job_counts says %lld, jobs hold "
                     "%lld",
                     after, i, (long long)got[i], (long long)want);
    }
}

/* A job whose status is set at insert (the API inserts pending only, but
 * the store counts whatever the new row holds). */
static void make_job_status(job_t *j, int n, int64_t deliver_at,
                            job_status status)
{
    ut_job_make(j, n, deliver_at);
    j->status = status;
    if (status == JOB_SENT)
        j->sent_at = 50;
}

BOTH(counts_exact_after_insert_batch_with_failing_requests)
{
    job_t ok[2], mixed[2], dup[2], bad[2], keyed, again;
    store_insert_req reqs[5];
    int64_t counts[5];
    job_t exj[2];
    bool ex[2] = {false};

    memset(exj, 0, sizeof(exj));
    g_st = open_store();
    check_counts("open");
    ut_job_make(&ok[0], 1, 100);
    make_job_status(&ok[1], 2, 100, JOB_SENT);
    ut_job_make(&keyed, 3, 100);
    /* second job duplicates job 1: the whole request goes (ROLLBACK TO),
     * its first job with it, and must not be counted */
    ut_job_make(&dup[0], 4, 100);
    ut_job_make(&dup[1], 1, 100);
    /* a status the schema refuses, after a good job: same */
    ut_job_make(&bad[0], 5, 100);
    make_job_status(&bad[1], 6, 100, (job_status)7);
    make_job_status(&mixed[0], 7, 100, JOB_CANCELLED);
    make_job_status(&mixed[1], 8, 100, JOB_FAILED);
    reqs[0] = (store_insert_req){.jobs = ok, .n = 2};
    reqs[1] = (store_insert_req){.jobs = &keyed,
                                 .n = 1,
                                 .idem_keys = KEY_K,
                                 .idem_requests = REQ_EMPTY,
                                 .existed = ex,
                                 .existing = exj};
    reqs[2] = (store_insert_req){.jobs = dup, .n = 2};
    reqs[3] = (store_insert_req){.jobs = bad, .n = 2};
    reqs[4] = (store_insert_req){.jobs = mixed, .n = 2};
    cr_assert_eq(store_insert_batch(g_st, reqs, 5), RMQS_OK);
    cr_assert_eq(reqs[0].rc, RMQS_OK);
    cr_assert_eq(reqs[1].rc, RMQS_OK);
    cr_assert_eq(reqs[2].rc, RMQS_ECONFLICT);
    cr_assert_eq(reqs[2].failed_index, 1);
    cr_assert_eq(reqs[3].rc, RMQS_EINVAL);
    cr_assert_eq(reqs[4].rc, RMQS_OK);
    check_counts("a batch with two failed requests");
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PENDING], 2);
    cr_expect_eq(counts[JOB_SENT], 1);
    cr_expect_eq(counts[JOB_FAILED], 1);
    cr_expect_eq(counts[JOB_CANCELLED], 1);

    /* the same key again: the known job, nothing inserted; another request
     * under it: a conflict, nothing inserted */
    ut_job_make(&again, 9, 100);
    reqs[0] = (store_insert_req){.jobs = &again,
                                 .n = 1,
                                 .idem_keys = KEY_K,
                                 .idem_requests = REQ_EMPTY,
                                 .existed = ex,
                                 .existing = exj};
    reqs[1] = (store_insert_req){.jobs = &again,
                                 .n = 1,
                                 .idem_keys = KEY_K,
                                 .idem_requests = REQ_OTHER,
                                 .existed = ex + 1,
                                 .existing = exj + 1};
    cr_assert_eq(store_insert_batch(g_st, reqs, 2), RMQS_OK);
    cr_assert(ex[0]);
    cr_assert_eq(reqs[0].nexisted, 1);
    job_clear(&exj[0]);
    cr_assert_eq(reqs[1].rc, RMQS_ECONFLICT);
    check_counts("idempotent repeats");

    /* a batch whose every request fails commits no count either */
    reqs[0] = (store_insert_req){.jobs = dup, .n = 2};
    cr_assert_eq(store_insert_batch(g_st, reqs, 1), RMQS_OK);
    cr_assert_eq(reqs[0].rc, RMQS_ECONFLICT);
    check_counts("a batch of one failed request");

    for (int i = 0; i < 2; i++) {
        job_clear(&ok[i]);
        job_clear(&dup[i]);
        job_clear(&bad[i]);
        job_clear(&mixed[i]);
    }
    job_clear(&keyed);
    job_clear(&again);
}

BOTH(counts_exact_after_claim_and_every_settle_outcome)
{
    char id[6][JOB_ID_LEN + 1];
    job_t j;
    int64_t counts[5];

    g_st = open_store();
    for (int i = 1; i <= 5; i++) {
        ut_job_make(&j, i, 100);
        j.max_attempts = i == 3 ? 1 : 3; /* job 3: its first failure is final */
        cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
        job_clear(&j);
        ut_job_id(i, id[i]);
    }
    claim_all(100, 5);
    check_counts("claim");
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PUBLISHING], 5);

    store_outcome o[] = {
        {.id = id[1], .kind = STORE_OUT_SENT},
        {.id = id[2],
         .kind = STORE_OUT_RETRY,
         .error = "NO_ROUTE",
         .retry_at = 5000}, /* -> pending */
        {.id = id[3],
         .kind = STORE_OUT_RETRY,
         .error = "nack",
         .retry_at = 5000}, /* -> failed */
        {.id = id[4], .kind = STORE_OUT_RELEASE},
    };
    cr_assert_eq(store_settle(g_st, &o[0], 1, 200), RMQS_OK);
    check_counts("settle sent");
    cr_assert_eq(store_settle(g_st, &o[1], 1, 200), RMQS_OK);
    check_counts("settle retry -> pending");
    cr_assert_eq(store_settle(g_st, &o[2], 1, 200), RMQS_OK);
    check_counts("settle retry -> failed at max_attempts");
    cr_assert_eq(store_settle(g_st, &o[3], 1, 200), RMQS_OK);
    check_counts("settle release");
    j = get_job(g_st, 3);
    cr_assert_eq(j.status, JOB_FAILED);
    job_clear(&j);

    /* settling jobs that are no longer publishing changes nothing: one
     * transaction of every kind, matching no row */
    cr_assert_eq(store_settle(g_st, o, 4, 300), RMQS_OK);
    check_counts("settles matching no publishing job");

    /* all outcomes in one transaction: job 5 is still publishing */
    claim_all(6000, 2); /* jobs 2 (retry due 5000) and 4 (released) */
    store_outcome all[] = {
        {.id = id[2], .kind = STORE_OUT_RETRY, .error = "x", .retry_at = 9000},
        {.id = id[4], .kind = STORE_OUT_SENT},
        {.id = id[5], .kind = STORE_OUT_RELEASE},
    };
    cr_assert_eq(store_settle(g_st, all, 3, 6000), RMQS_OK);
    check_counts("one settle of mixed outcomes");
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PENDING], 2);
    cr_expect_eq(counts[JOB_PUBLISHING], 0);
    cr_expect_eq(counts[JOB_SENT], 2);
    cr_expect_eq(counts[JOB_FAILED], 1);
}

/* SQLite alone, for its store_recover (see
 * recover_returns_publishing_to_pending). */
Test(store, counts_exact_after_cancel_reschedule_recover_purge)
{
    char id[JOB_ID_LEN + 1];
    job_t got, *jobs;
    size_t n = 0, deleted = 0;
    int64_t counts[5];

    g_st = open_store();
    for (int i = 1; i <= 6; i++)
        insert_job(g_st, i, 100 * i);
    ut_job_id(1, id);
    cr_assert_eq(store_cancel(g_st, id, 1000, &got), RMQS_OK);
    job_clear(&got);
    check_counts("cancel");
    cr_assert_eq(store_cancel(g_st, id, 1000, &got), RMQS_OK); /* again */
    job_clear(&got);
    check_counts("cancelling a cancelled job");
    ut_job_id(2, id);
    cr_assert_eq(store_reschedule(g_st, id, 50, 10, 40, &got), RMQS_OK);
    job_clear(&got);
    check_counts("reschedule");

    cr_assert_eq(ut_claim(g_st, 300, 300, 10, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 2); /* jobs 2 (now due 50) and 3 */
    ut_jobs_free(jobs, n);
    cr_assert_eq(store_cancel(g_st, id, 1000, &got), RMQS_ECONFLICT);
    job_clear(&got);
    check_counts("cancel refused (publishing)");
    cr_assert_eq(store_reschedule(g_st, id, 50, 0, 1000, &got), RMQS_ECONFLICT);
    job_clear(&got);
    check_counts("reschedule refused (publishing)");
    reopen_store(); /* a crash; store_recover runs at start-up */
    cr_assert_eq(store_recover(g_st, &n), RMQS_OK);
    cr_assert_eq(n, 2);
    check_counts("recover");
    cr_assert_eq(store_recover(g_st, &n), RMQS_OK);
    cr_assert_eq(n, 0);
    check_counts("recover with nothing to do");

    /* finish a few: sent (job 2), failed by insert, cancelled (job 1) */
    cr_assert_eq(ut_claim(g_st, 50, 50, 1, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 1);
    store_outcome o = {.id = jobs[0].id, .kind = STORE_OUT_SENT};
    cr_assert_eq(store_settle(g_st, &o, 1, 2000), RMQS_OK);
    ut_jobs_free(jobs, n);
    job_t f;
    make_job_status(&f, 7, 100, JOB_FAILED);
    f.updated_at = 3000;
    cr_assert_eq(store_insert(g_st, &f, NULL, NULL, NULL, NULL), RMQS_OK);
    job_clear(&f);
    check_counts("before purge");

    cr_assert_eq(store_purge(g_st, 1500, 100, &deleted), RMQS_OK);
    cr_assert_eq(deleted, 1); /* the cancel at 1000 */
    check_counts("purge of one cancelled job");
    cr_assert_eq(store_purge(g_st, INT64_MAX, 1, &deleted), RMQS_OK);
    cr_assert_eq(deleted, 1);
    check_counts("purge limited to one");
    cr_assert_eq(store_purge(g_st, INT64_MAX, 100, &deleted), RMQS_OK);
    cr_assert_eq(deleted, 1);
    check_counts("purge of the rest");
    cr_assert_eq(store_purge(g_st, INT64_MAX, 100, &deleted), RMQS_OK);
    cr_assert_eq(deleted, 0);
    check_counts("purge with nothing to do");
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PENDING], 4);
    cr_expect_eq(counts[JOB_SENT] + counts[JOB_FAILED] + counts[JOB_CANCELLED],
                 0);
}

Test(store, counts_exact_after_a_transaction_sqlite_rolled_back)
{
    enum { BIG = 256 * 1024 };
    int64_t applied = 0;
    job_t small, big, after;
    store_insert_req reqs[2];

    g_st = open_store();
    insert_job(g_st, 1, 100);
    ut_job_make(&small, 2, 100);
    ut_job_make(&big, 3, 100);
    free(big.body);
    big.body = calloc(1, BIG);
    cr_assert_not_null(big.body);
    big.body_len = BIG;
    big.body_kind = JOB_BODY_BINARY;

    /* request 0 is inserted and released (its count joins the
     * transaction's deltas), then request 1 fills the database: SQLite
     * rolls the whole transaction back by itself, and those deltas must
     * die with it rather than reach job_counts with a later commit */
    cr_assert_eq(store__set_max_pages(g_st, 1, &applied), RMQS_OK);
    reqs[0] = (store_insert_req){.jobs = &small, .n = 1};
    reqs[1] = (store_insert_req){.jobs = &big, .n = 1};
    cr_assert_eq(store_insert_batch(g_st, reqs, 2), RMQS_EFULL);
    cr_assert_eq(reqs[0].rc, RMQS_EFULL);
    check_counts("a batch rolled back by SQLITE_FULL");
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 1);

    /* the next transactions start from zero deltas; the small job fits
     * (so in the batch it was inserted, then undone with the big one) */
    cr_assert_eq(store_insert(g_st, &small, NULL, NULL, NULL, NULL), RMQS_OK);
    check_counts("an insert after the failed batch");
    claim_all(1000, 2);
    check_counts("a claim after the failed batch");
    cr_assert_eq(store__set_max_pages(g_st, 1073741823, &applied), RMQS_OK);
    ut_job_make(&after, 4, 100);
    cr_assert_eq(store_insert(g_st, &after, NULL, NULL, NULL, NULL), RMQS_OK);
    check_counts("an insert once space returned");
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM jobs"), 3);
    job_clear(&small);
    job_clear(&big);
    job_clear(&after);
}

Test(store, migrate_to_job_counts_without_triggers)
{
    size_t n4 = 0;

    while (n4 < store_builtin_migrations_count &&
           store_builtin_migrations[n4].version <= 4)
        n4++;
    cr_assert_eq(store_builtin_migrations[n4 - 1].version, 4);
    cr_assert_gt(store_builtin_migrations_count, n4, "no migration 5");

    /* a database as schema 4 left it: counts kept by its triggers (made
     * raw: this binary's store cannot open schema 4 without migrating) */
    ut_sql_migrate(g_b.path, store_builtin_migrations, n4);
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT max(version) FROM schema_migrations"), 4);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM sqlite_schema "
                                   "WHERE type = 'trigger'"),
                 3);
    ut_both_exec(
        &g_b,
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c "
        "WHERE i < 103) "
        "INSERT INTO jobs (id, status, exchange, routing_key, deliver_at, "
        "due_at, delay_ms, created_at, updated_at, max_attempts, "
        "body_kind, body) "
        "SELECT CAST(printf('%016x', i) AS BLOB), i % 5, 'ex', 'rk', i, "
        "i, 0, 1, 1, 3, 0, x'' FROM c");
    ut_both_exec(&g_b,
                 "UPDATE jobs SET status = 2 WHERE status = 1 AND seq > 50");
    ut_both_exec(&g_b, "DELETE FROM jobs WHERE status = 3 AND seq < 30");
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT n FROM job_counts WHERE status = 0"),
        ut_both_int(&g_b, "SELECT count(*) FROM jobs WHERE status = 0"));
    /* and drifted, as a database restored by hand might be: the migration
     * must count, not trust */
    ut_both_exec(&g_b, "UPDATE job_counts SET n = 42 WHERE status = 3");
    ut_both_exec(&g_b, "DELETE FROM job_counts WHERE status = 4");

    g_st = open_store();
    cr_assert_eq(
        store_schema_version(g_st),
        store_builtin_migrations[store_builtin_migrations_count - 1].version);
    /* the counting triggers are gone (0007's search triggers keep side
     * tables, not counts) */
    cr_assert_eq(
        ut_both_int(&g_b, "SELECT count(*) FROM sqlite_schema "
                          "WHERE type = 'trigger' AND sql LIKE '%job_counts%'"),
        0);
    cr_assert_eq(ut_both_int(&g_b, "SELECT count(*) FROM job_counts"), 5);
    check_counts("migration 5");
    cr_assert_eq(ut_both_int(&g_b, "SELECT sum(n) FROM job_counts"), 103 - 6);

    /* and the store keeps them from there, alone: no double counting */
    insert_job(g_st, 1000, 0);
    check_counts("an insert after migration 5");
    claim_all(0, 1);
    check_counts("a claim after migration 5");
}

/* ------------------------------------------------------------------------ */
/* The dispatcher's transactions commit with synchronous=NORMAL            */

Test(store, dispatcher_calls_put_synchronous_full_back)
{
    job_t *jobs, *none;
    size_t n = 0;
    store_options normal = {.synchronous_full = false};
    rmqs_error err = {0};

    g_st = open_store();
    cr_assert_eq(store__synchronous(g_st), 2);
    insert_job(g_st, 1, 100);
    insert_job(g_st, 2, 100);
    cr_assert_eq(ut_claim(g_st, 100, 100, 10, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(store__synchronous(g_st), 2, "FULL again after a claim");
    store_outcome o[] = {{.id = jobs[0].id, .kind = STORE_OUT_SENT}};
    cr_assert_eq(store_settle(g_st, o, 1, 200), RMQS_OK);
    cr_assert_eq(store__synchronous(g_st), 2, "FULL again after a settle");
    /* a settle refused before its transaction */
    store_outcome bad[] = {{.id = "garbage", .kind = STORE_OUT_SENT}};
    cr_assert_eq(store_settle(g_st, bad, 1, 200), RMQS_EINVAL);
    cr_assert_eq(store__synchronous(g_st), 2);
    cr_assert_eq(store_recover(g_st, &n), RMQS_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(store__synchronous(g_st), 2, "FULL again after recover");
    cr_assert_eq(ut_claim(g_st, 0, 0, 10, &none, &n), RMQS_OK);
    cr_assert_eq(n, 0);
    free(none);
    cr_assert_eq(store__synchronous(g_st), 2, "FULL after an empty claim");
    ut_jobs_free(jobs, 2);
    check_counts("dispatcher calls");

    /* a store opened NORMAL stays NORMAL throughout */
    store_close(g_st);
    g_st = NULL;
    cr_assert_eq(store_open(g_b.path, &normal, &g_st, &err), RMQS_OK, "%s",
                 err.message);
    cr_assert_eq(store__synchronous(g_st), 1);
    claim_all(100, 1); /* the job recover put back */
    cr_assert_eq(store__synchronous(g_st), 1);
    insert_job(g_st, 3, 100);
    cr_assert_eq(store__synchronous(g_st), 1);
}

Test(store, manual_checkpoint_empties_the_wal)
{
    store_options opts = {.synchronous_full = true, .manual_checkpoint = true};
    rmqs_error err = {0};
    int64_t frames = -1, copied = -1;

    cr_assert_eq(store_open(g_b.path, &opts, &g_st, &err), RMQS_OK, "%s",
                 err.message);
    for (int i = 1; i <= 300; i++)
        insert_job(g_st, i, 100);
    cr_assert_eq(store_checkpoint(g_st, &frames, &copied), RMQS_OK);
    cr_expect_gt(frames, 0, "inserts with autocheckpoint off leave frames");
    cr_expect_eq(copied, frames, "nothing blocks a passive checkpoint here");
}

BOTH(list_filters_on_source_and_message_id)
{
    job_t j;
    job_t *jobs = NULL;
    size_t n = 0;
    char *next = NULL;

    g_st = open_store();
    for (int i = 1; i <= 6; i++) {
        ut_job_make(&j, i, 100 * i);
        j.source = i % 2 ? JOB_SOURCE_AMQP : JOB_SOURCE_HTTP;
        if (i <= 4)
            j.properties =
                json_pack("{s:s}", "message_id", i <= 2 ? "m-1" : "m-2");
        cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
        job_clear(&j);
    }
    cr_assert_eq(
        store_list(g_st,
                   &(store_filter){.status = -1, .source = JOB_SOURCE_AMQP}, 2,
                   NULL, &jobs, &n, &next),
        RMQS_OK);
    cr_expect_eq(n, 2);
    cr_expect_eq(jobs[0].deliver_at, 100);
    cr_expect_eq(jobs[1].deliver_at, 300);
    cr_expect_eq(jobs[0].source, JOB_SOURCE_AMQP);
    cr_assert_not_null(next);
    ut_jobs_free(jobs, n);
    char *cursor = next;
    cr_assert_eq(
        store_list(g_st,
                   &(store_filter){.status = -1, .source = JOB_SOURCE_AMQP}, 2,
                   cursor, &jobs, &n, &next),
        RMQS_OK);
    free(cursor);
    cr_expect_eq(n, 1);
    cr_expect_eq(jobs[0].deliver_at, 500);
    cr_expect_null(next);
    ut_jobs_free(jobs, n);

    cr_assert_eq(
        store_list(
            g_st,
            &(store_filter){.status = -1, .source = -1, .message_id = "m-2"},
            10, NULL, &jobs, &n, &next),
        RMQS_OK);
    cr_expect_eq(n, 2);
    cr_expect_eq(jobs[0].deliver_at, 300);
    cr_expect_eq(jobs[1].deliver_at, 400);
    ut_jobs_free(jobs, n);
    cr_assert_eq(store_list(g_st,
                            &(store_filter){.status = -1,
                                            .source = JOB_SOURCE_HTTP,
                                            .message_id = "m-1"},
                            10, NULL, &jobs, &n, &next),
                 RMQS_OK);
    cr_expect_eq(n, 1);
    cr_expect_eq(jobs[0].deliver_at, 200);
    ut_jobs_free(jobs, n);
    cr_assert_eq(
        store_list(
            g_st,
            &(store_filter){.status = -1, .source = -1, .message_id = "none"},
            10, NULL, &jobs, &n, &next),
        RMQS_OK);
    cr_expect_eq(n, 0);
    ut_jobs_free(jobs, n);
}

/* ------------------------------------------------------------------------ */
/* Claiming ahead from a snapshot (store_claim_ahead, store_record)         */

static int64_t raw_status(int n)
{
    char sql[160];
    char id[JOB_ID_LEN + 1];
    unsigned char bin[JOB_ID_BYTES];
    char hex[2 * JOB_ID_BYTES + 1];

    ut_job_id(n, id);
    cr_assert_eq(job_id_parse(id, bin), RMQS_OK);
    for (int i = 0; i < JOB_ID_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", bin[i]);
    snprintf(sql, sizeof(sql), "SELECT status FROM jobs WHERE id = x'%s'", hex);
    return ut_both_int(&g_b, sql);
}

/* SQLite alone: the claim is written after the read. On PostgreSQL the
 * read is the claim itself (the jobs are publishing in the database at
 * once), by design: the database arbitrates between instances. */
Test(store, claim_ahead_holds_jobs_until_their_claim_is_written)
{
    char id1[JOB_ID_LEN + 1], id2[JOB_ID_LEN + 1];
    job_t *jobs, j;
    size_t n;
    bool any;
    int64_t due, counts[5];

    g_st = open_store();
    insert_job(g_st, 1, 100);
    insert_job(g_st, 2, 50);
    insert_job(g_st, 3, 900);
    ut_job_id(1, id1);
    ut_job_id(2, id2);

    cr_assert_eq(store_claim_ahead(g_st, 150, 120, 10, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){2, 1}, 2);
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(jobs[i].status, JOB_PUBLISHING);
        cr_expect_eq(jobs[i].attempts, 1);
        cr_expect_eq(jobs[i].updated_at, 120);
        cr_expect_eq(jobs[i].body_len, 5);
    }
    ut_jobs_free(jobs, n);

    /* not written yet: the file says pending, the store says publishing */
    cr_expect_eq(raw_status(1), JOB_PENDING);
    j = get_job(g_st, 1);
    cr_expect_eq(j.status, JOB_PUBLISHING);
    cr_expect_eq(j.attempts, 1);
    job_clear(&j);
    /* refused as publishing, and answered with the job as store_get shows
     * it (held: publishing, attempt counted) */
    cr_expect_eq(store_cancel(g_st, id1, 130, &j), RMQS_ECONFLICT);
    cr_expect_str_eq(j.id, id1);
    cr_expect_eq(j.status, JOB_PUBLISHING);
    cr_expect_eq(j.attempts, 1);
    job_clear(&j);
    cr_expect_eq(store_reschedule(g_st, id2, 5000, 5000, 130, &j),
                 RMQS_ECONFLICT);
    cr_expect_str_eq(j.id, id2);
    cr_expect_eq(j.status, JOB_PUBLISHING);
    job_clear(&j);
    cr_expect_eq(raw_status(1), JOB_PENDING,
                 "the refused cancel wrote nothing");

    /* held jobs are not read again, nor planned for */
    cr_assert_eq(store_claim_ahead(g_st, 150, 120, 10, &jobs, &n), RMQS_OK);
    cr_expect_eq(n, 0);
    cr_assert_eq(store_next_due(g_st, &any, &due), RMQS_OK);
    cr_expect(any);
    cr_expect_eq(due, 900);

    /* the recorder writes the claims, then an outcome */
    const char *claims[] = {id2, id1};
    cr_assert_eq(store_record(g_st, claims, 2, NULL, 0, 140), RMQS_OK);
    cr_expect_eq(raw_status(1), JOB_PUBLISHING);
    cr_expect_eq(
        ut_both_int(&g_b, "SELECT attempts FROM jobs WHERE status = 1 LIMIT 1"),
        1);
    cr_assert_eq(store_counts(g_st, counts), RMQS_OK);
    cr_expect_eq(counts[JOB_PUBLISHING], 2);
    cr_expect_eq(counts[JOB_PENDING], 1);
    j = get_job(g_st, 1);
    cr_expect_eq(j.attempts, 1, "no double count once written");
    job_clear(&j);

    store_outcome o[] = {{.id = id1, .kind = STORE_OUT_SENT},
                         {.id = id2, .kind = STORE_OUT_RELEASE}};
    cr_assert_eq(store_record(g_st, NULL, 0, o, 2, 150), RMQS_OK);
    cr_expect_eq(raw_status(1), JOB_SENT);
    cr_expect_eq(raw_status(2), JOB_PENDING);
    /* released: claimable again, attempt not counted */
    cr_assert_eq(store_claim_ahead(g_st, 150, 160, 10, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){2}, 1);
    cr_expect_eq(jobs[0].attempts, 1);
    ut_jobs_free(jobs, n);
}

BOTH(claim_ahead_and_its_record_in_one_call)
{
    char id1[JOB_ID_LEN + 1];
    job_t *jobs;
    size_t n;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    ut_job_id(1, id1);
    cr_assert_eq(store_claim_ahead(g_st, 100, 100, 10, &jobs, &n), RMQS_OK);
    cr_assert_eq(n, 1);
    ut_jobs_free(jobs, n);
    /* claim and a failed attempt together: pending again at retry_at */
    const char *claims[] = {id1};
    store_outcome o = {.id = id1,
                       .kind = STORE_OUT_RETRY,
                       .error = "NO_ROUTE",
                       .retry_at = 700};
    cr_assert_eq(store_record(g_st, claims, 1, &o, 1, 110), RMQS_OK);
    job_t j = get_job(g_st, 1);
    cr_expect_eq(j.status, JOB_PENDING);
    cr_expect_eq(j.attempts, 1);
    cr_expect_eq(j.due_at, 700);
    cr_expect_str_eq(j.last_error, "NO_ROUTE");
    job_clear(&j);
    check_counts("claim + retry in one record");
    /* malformed input changes nothing */
    const char *bad[] = {"not-an-id"};
    cr_expect_eq(store_record(g_st, bad, 1, NULL, 0, 120), RMQS_EINVAL);
}

BOTH(a_job_cancelled_or_rescheduled_first_is_not_claimed_ahead)
{
    char id1[JOB_ID_LEN + 1], id2[JOB_ID_LEN + 1];
    job_t *jobs, j;
    size_t n;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    insert_job(g_st, 2, 100);
    insert_job(g_st, 3, 100);
    ut_job_id(1, id1);
    ut_job_id(2, id2);
    cr_assert_eq(store_cancel(g_st, id1, 90, &j), RMQS_OK);
    job_clear(&j);
    cr_assert_eq(store_reschedule(g_st, id2, 60000, 60000, 90, &j), RMQS_OK);
    job_clear(&j);
    cr_assert_eq(store_claim_ahead(g_st, 150, 100, 10, &jobs, &n), RMQS_OK);
    assert_ids(jobs, n, (int[]){3}, 1);
    ut_jobs_free(jobs, n);
}

/* SQLite alone: a writer holding the file's write lock (PostgreSQL has
 * row locks, and no single writer). */
Test(store, claim_ahead_never_waits_for_a_write_in_progress)
{
    sqlite3 *db;
    job_t *jobs;
    size_t n;
    struct timespec t0, t1;
    double ms;

    g_st = open_store();
    insert_job(g_st, 1, 100);
    /* another connection holds the write lock (as the writer does through
     * its commit and fsync), with an uncommitted change to job 1 */
    db = ut_sql_open(g_b.path);
    cr_assert_eq(sqlite3_exec(db, "BEGIN IMMEDIATE; UPDATE jobs SET due_at = 5",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(store_claim_ahead(g_st, 150, 100, 10, &jobs, &n), RMQS_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
         (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    assert_ids(jobs, n, (int[]){1}, 1);
    cr_expect_eq(jobs[0].due_at, 100, "read the committed state only");
    ut_jobs_free(jobs, n);
    cr_expect_lt(ms, 1000.0, "claim_ahead took %.1f ms behind a writer", ms);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
}

/* The race: cancels and reschedules on one thread, claims ahead on
 * another, over the same due jobs. A job whose cancel or reschedule was
 * answered OK must never be handed out; every other one is, exactly once. */
enum { RACE_JOBS = 1500 };
static int g_race_rc[RACE_JOBS + 1];
static atomic_bool g_race_done;

static void *race_changer(void *arg)
{
    (void)arg;
    for (int i = 1; i <= RACE_JOBS; i++) {
        char id[JOB_ID_LEN + 1];
        job_t j;
        ut_job_id(i, id);
        if (i % 2)
            g_race_rc[i] = store_cancel(g_st, id, 100, &j);
        else
            g_race_rc[i] =
                store_reschedule(g_st, id, 1000000, 1000000, 100, &j);
        job_clear(&j);
    }
    atomic_store(&g_race_done, true);
    return NULL;
}

BOTH(cancel_racing_claim_ahead_never_hands_out_a_changed_job)
{
    static int claimed[RACE_JOBS + 1];
    job_t j;
    pthread_t t;
    bool done = false;

    g_st = open_store();
    {
        store_insert_req *r = calloc(RACE_JOBS, sizeof(*r));
        job_t *js = calloc(RACE_JOBS, sizeof(*js));
        for (int i = 0; i < RACE_JOBS; i++) {
            ut_job_make(&js[i], i + 1, 100);
            r[i] = (store_insert_req){.jobs = &js[i], .n = 1};
        }
        cr_assert_eq(store_insert_batch(g_st, r, RACE_JOBS), RMQS_OK);
        for (int i = 0; i < RACE_JOBS; i++)
            job_clear(&js[i]);
        free(js);
        free(r);
    }
    memset(claimed, 0, sizeof(claimed));
    atomic_store(&g_race_done, false);
    cr_assert_eq(pthread_create(&t, NULL, race_changer, NULL), 0);
    while (!done) {
        job_t *jobs;
        size_t n;
        bool changer_done = atomic_load(&g_race_done);
        cr_assert_eq(store_claim_ahead(g_st, 150, 100, 7, &jobs, &n), RMQS_OK);
        for (size_t i = 0; i < n; i++) {
            int k = (int)strtol(jobs[i].id + 24, NULL, 16);
            cr_assert(k >= 1 && k <= RACE_JOBS);
            claimed[k]++;
            /* the recorder's part: claim written, then settled as sent */
            const char *c[] = {jobs[i].id};
            store_outcome o = {.id = jobs[i].id, .kind = STORE_OUT_SENT};
            cr_assert_eq(store_record(g_st, c, 1, &o, 1, 110), RMQS_OK);
        }
        ut_jobs_free(jobs, n);
        /* every job had its change tried: nothing may be left to claim */
        done = n == 0 && changer_done;
    }
    pthread_join(t, NULL);
    int changed = 0, handed = 0;
    for (int i = 1; i <= RACE_JOBS; i++) {
        cr_assert_leq(claimed[i], 1, "job %d handed out %d times", i,
                      claimed[i]);
        if (g_race_rc[i] == RMQS_OK) {
            changed++;
            cr_assert_eq(claimed[i], 0,
                         "job %d %s answered OK, then handed out", i,
                         i % 2 ? "cancelled" : "rescheduled");
        } else {
            cr_assert_eq(g_race_rc[i], RMQS_ECONFLICT, "job %d: %d", i,
                         g_race_rc[i]);
            cr_assert_eq(claimed[i], 1,
                         "job %d refused its change, never handed out", i);
            handed++;
        }
    }
    cr_log_info("race: %d changed, %d claimed ahead", changed, handed);
    j = get_job(g_st, 1);
    job_clear(&j);
    check_counts("after the race");
}
