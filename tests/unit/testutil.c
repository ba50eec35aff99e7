/*
 * testutil.c - the shared unit-test scaffolding (see testutil.h for why).
 *
 * Linked into unit_tests next to the test_*.c files; not a test file
 * itself, so tests/CMakeLists.txt registers no unit.<module> for it.
 */
#include "testutil.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "timeutil.h"

const job_limits ut_limits = {
    .default_max_attempts = 5,
    .max_max_attempts = 10,
    .max_delay_ms = 30 * UT_DAY,
};

bool ut_is_zero(const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

char *ut_strdup(const char *s)
{
    char *d = strdup(s);

    cr_assert_not_null(d);
    return d;
}

char *ut_json_quotes(const char *s)
{
    char *t = ut_strdup(s);

    for (char *p = t; *p != '\0'; p++)
        if (*p == '\'')
            *p = '"';
    return t;
}

void ut_tmpdir(char dir[UT_PATH_MAX], const char *tag)
{
    int n = snprintf(dir, UT_PATH_MAX / 2, "/tmp/rmqs-%s-XXXXXX", tag);

    cr_assert(n > 0 && n < UT_PATH_MAX / 2, "tag too long: %s", tag);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

static int rm_entry(const char *p, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void ut_rmtree(const char *dir)
{
    if (dir != NULL && dir[0] != '\0')
        nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

void ut_path(char out[UT_PATH_MAX], const char *dir, const char *name)
{
    int n = snprintf(out, UT_PATH_MAX, "%s/%s", dir, name);

    cr_assert(n > 0 && n < UT_PATH_MAX, "path too long: %s/%s", dir, name);
}

store_t *ut_store_open(const char *path, const store_options *opt)
{
    rmqs_error err = {0};
    store_t *st = NULL;
    rmqs_rc rc = store_open(path, opt, &st, &err);

    cr_assert_eq(rc, RMQS_OK, "store_open: %s", err.message);
    cr_assert_not_null(st);
    return st;
}

void ut_job_id(int n, char out[JOB_ID_LEN + 1])
{
    snprintf(out, JOB_ID_LEN + 1, "01890a5d-ac96-7b3c-8f00-%012x", n);
}

void ut_job_make(job_t *j, int n, int64_t deliver_at)
{
    memset(j, 0, sizeof(*j));
    ut_job_id(n, j->id);
    j->status = JOB_PENDING;
    j->exchange = ut_strdup("ex");
    j->routing_key = ut_strdup("rk");
    j->deliver_at = deliver_at;
    j->due_at = deliver_at;
    j->delay_ms = 1000;
    j->created_at = 10;
    j->updated_at = 10;
    j->sent_at = -1;
    j->attempts = 0;
    j->max_attempts = 3;
    j->body_kind = JOB_BODY_TEXT;
    j->body = (unsigned char *)ut_strdup("hello");
    j->body_len = 5;
}

void ut_search_job(job_t *j, int n)
{
    char buf[64];

    ut_job_make(j, n, 1000000 + 1000 * (int64_t)n);
    free(j->exchange);
    free(j->routing_key);
    free(j->body);
    snprintf(buf, sizeof buf, "ex%d", n % 3);
    j->exchange = ut_strdup(buf);
    snprintf(buf, sizeof buf, "rk%d", n % 5);
    j->routing_key = ut_strdup(buf);
    j->status = n % 10 == 0 ? JOB_SENT : n % 10 == 1 ? JOB_FAILED : JOB_PENDING;
    if (j->status == JOB_SENT)
        j->sent_at = j->deliver_at;
    snprintf(buf, sizeof buf, "t%d", n % 7);
    j->headers = json_pack("{sssi}", "tenant", buf, "n", n);
    j->body_kind = n % 4 == 2   ? JOB_BODY_BINARY
                   : n % 4 == 1 ? JOB_BODY_JSON
                                : JOB_BODY_TEXT;
    if (n % 4 == 0)
        snprintf(buf, sizeof buf, "hello <script>%d</script>", n);
    else if (n % 4 == 1)
        snprintf(buf, sizeof buf, "{\"k\":\"Needle %d\"}", n);
    else
        snprintf(buf, sizeof buf, "%s",
                 n % 4 == 2 ? "needle-bytes" : "plain text");
    j->body = (unsigned char *)ut_strdup(buf);
    j->body_len = strlen(buf);
}

bool ut_store_has(store_t *st, int n)
{
    char id[JOB_ID_LEN + 1];
    job_t j;
    rmqs_rc rc;

    ut_job_id(n, id);
    rc = store_get(st, id, &j);
    if (rc == RMQS_OK)
        job_clear(&j);
    else
        cr_assert_eq(rc, RMQS_ENOTFOUND, "store_get %s", id);
    return rc == RMQS_OK;
}

void ut_jobs_free(job_t *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        job_clear(&jobs[i]);
    free(jobs);
}

sqlite3 *ut_sql_open(const char *path)
{
    sqlite3 *db = NULL;

    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
                 SQLITE_OK, "open %s", path);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

void ut_sql_exec(const char *path, const char *sql)
{
    sqlite3 *db = ut_sql_open(path);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "");
    sqlite3_free(msg);
    sqlite3_close(db);
}

void ut_sql_migrate(const char *path, const store_migration *m, size_t n)
{
    sqlite3 *db = NULL;
    char *msg = NULL;
    int rc;

    cr_assert_eq(sqlite3_open_v2(path, &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                 NULL),
                 SQLITE_OK, "create %s", path);
    rc = sqlite3_exec(db,
                      "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; "
                      "CREATE TABLE IF NOT EXISTS schema_migrations ("
                      "version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                      "applied_at INTEGER NOT NULL)",
                      NULL, NULL, &msg);

    cr_assert_eq(rc, SQLITE_OK, "schema_migrations: %s", msg ? msg : "");
    for (size_t i = 0; i < n; i++) {
        char row[256];
        snprintf(row, sizeof(row),
                 "INSERT INTO schema_migrations VALUES (%d, '%s', 1)",
                 m[i].version, m[i].name);
        rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(db, m[i].sql, NULL, NULL, &msg);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(db, row, NULL, NULL, &msg);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(db, "COMMIT", NULL, NULL, &msg);
        cr_assert_eq(rc, SQLITE_OK, "migration %s: %s", m[i].name,
                     msg ? msg : "");
    }
    sqlite3_free(msg);
    sqlite3_close(db);
}

bool ut_pg_available(void)
{
    const char *u = getenv("RMQS_TEST_PG_URL");
    const char *a = getenv("RMQS_TEST_PG_ADMIN");

    return u != NULL && *u != '\0' && a != NULL && *a != '\0';
}

static PGconn *pg_connect_or_fail(const char *url)
{
    PGconn *c = PQconnectdb(url);

    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    return c;
}

void ut_pg_exec(const char *url, const char *sql)
{
    PGconn *c = pg_connect_or_fail(url);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);

    cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
              PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

int64_t ut_pg_int(const char *url, const char *sql)
{
    PGconn *c = pg_connect_or_fail(url);
    PGresult *r = PQexec(c, sql);
    int64_t v;

    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
                 PQerrorMessage(c));
    cr_assert_geq(PQntuples(r), 1, "%s: no row", sql);
    v = PQgetisnull(r, 0, 0) ? -1 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return v;
}

void ut_pg_create(char name[64], char url[UT_URL_MAX])
{
    static unsigned seq;
    char sql[256];
    const char *user = getenv("RMQS_TEST_PG_USER");

    cr_assert(ut_pg_available() && user != NULL,
              "RMQS_TEST_PG_* not set: run through tests/run.sh");
    snprintf(name, 64, "rmqs_ut_%ld_%ld_%u", (long)getpid(), (long)time(NULL),
             seq++);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s OWNER %s", name, user);
    ut_pg_exec(getenv("RMQS_TEST_PG_ADMIN"), sql);
    snprintf(url, UT_URL_MAX, "%s/%s", getenv("RMQS_TEST_PG_URL"), name);
}

void ut_pg_drop(const char *name)
{
    char sql[256];

    if (name == NULL || name[0] == '\0' || !ut_pg_available())
        return;
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
    ut_pg_exec(getenv("RMQS_TEST_PG_ADMIN"), sql);
}

int64_t ut_sql_int(const char *path, const char *sql)
{
    sqlite3 *db = ut_sql_open(path);
    sqlite3_stmt *s = NULL;
    int64_t v;

    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK, "%s: %s",
                 sql, sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW, "%s", sql);
    v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

bool ut_await(int64_t timeout_ms, bool (*done)(void *arg), void *arg)
{
    int64_t deadline = tu_mono_ms() + timeout_ms;
    const struct timespec tick = {0, 1000000};

    for (;;) {
        if (done(arg))
            return true;
        if (tu_mono_ms() >= deadline)
            return done(arg);
        nanosleep(&tick, NULL);
    }
}

/* Everything readable from fd (at its current offset), NUL-terminated. */
static char *read_fd(int fd, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);

    cr_assert_not_null(buf);
    for (;;) {
        ssize_t r;
        if (cap - n < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        r = read(fd, buf + n, cap - n - 1);
        cr_assert(r >= 0, "read failed");
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

char *ut_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *text;

    cr_assert(fd >= 0, "open %s", path);
    text = read_fd(fd, len);
    close(fd);
    return text;
}

void ut_capture_start(ut_capture *c)
{
    char tmpl[] = "/tmp/rmqs-stderr-XXXXXX";

    c->file_fd = mkostemp(tmpl, O_CLOEXEC);
    cr_assert(c->file_fd >= 0, "mkostemp");
    unlink(tmpl); /* gone with the last descriptor */
    fflush(stderr);
    c->saved_fd = dup(STDERR_FILENO);
    cr_assert(c->saved_fd >= 0, "dup stderr");
    cr_assert(dup2(c->file_fd, STDERR_FILENO) >= 0, "dup2 stderr");
}

char *ut_capture_end(ut_capture *c)
{
    char *text;

    fflush(stderr);
    cr_assert(dup2(c->saved_fd, STDERR_FILENO) >= 0, "restore stderr");
    close(c->saved_fd);
    cr_assert(lseek(c->file_fd, 0, SEEK_SET) == 0, "rewind capture");
    text = read_fd(c->file_fd, NULL);
    close(c->file_fd);
    return text;
}

size_t ut_count_lines_with(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *hit = memmem(line, len, needle, strlen(needle));
        if (hit != NULL)
            n++;
        line += len + (end ? 1 : 0);
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* One store suite for both backends                                        */

void ut_both_init(ut_both *b, const char *tag)
{
    memset(b, 0, sizeof(*b));
    ut_tmpdir(b->dir, tag);
    ut_path(b->path, b->dir, "jobs.db");
}

void ut_both_fini(ut_both *b)
{
    store_close(b->st);
    b->st = NULL;
    ut_pg_drop(b->pgdb);
    b->pgdb[0] = '\0';
    ut_rmtree(b->dir);
}

const char *ut_both_target(ut_both *b, bool pg)
{
    b->pg = pg;
    if (!pg)
        return b->path;
    if (!ut_pg_available())
        cr_skip_test("no PostgreSQL server (RMQS_TEST_PG_*): run through "
                     "tests/run.sh");
    if (b->pgdb[0] == '\0')
        ut_pg_create(b->pgdb, b->url);
    return b->url;
}

store_t *ut_both_open(ut_both *b, bool pg, const store_options *opt)
{
    const char *target = ut_both_target(b, pg);

    b->st = ut_store_open(target, opt);
    return b->st;
}

void ut_both_exec(const ut_both *b, const char *sql)
{
    if (b->pg)
        ut_pg_exec(b->url, sql);
    else
        ut_sql_exec(b->path, sql);
}

int64_t ut_both_int(const ut_both *b, const char *sql)
{
    return b->pg ? ut_pg_int(b->url, sql) : ut_sql_int(b->path, sql);
}

rmqs_rc ut_claim(store_t *st, int64_t due_by_ms, int64_t now_ms, size_t limit,
                 job_t **jobs_out, size_t *n_out)
{
    const char **ids = NULL;
    rmqs_rc rc;

    rc = store_claim_ahead(st, due_by_ms, now_ms, limit, jobs_out, n_out);
    if (rc != RMQS_OK || *n_out == 0)
        return rc;
    ids = calloc(*n_out, sizeof(*ids));
    cr_assert_not_null(ids);
    for (size_t i = 0; i < *n_out; i++)
        ids[i] = (*jobs_out)[i].id;
    rc = store_record(st, ids, *n_out, NULL, 0, now_ms);
    free(ids);
    return rc;
}
