/*
 * testutil.h - the scaffolding several unit tests need, written once:
 * temporary folders and real store files, job construction, raw SQLite
 * looks at a database file, waiting for a condition with a deadline,
 * reading a file and capturing what a module writes to stderr, and the
 * harness that runs one store test on both backends (UT_BOTH).
 *
 * Why a shared file: test_store, test_writer and test_janitor all run
 * against real SQLite files in a fresh folder, and test_log and
 * test_writer both read the log lines the service writes. Copies of this
 * scaffolding had started to drift. Every helper fails the running test
 * (cr_assert) when it cannot do its job, so callers need no error checks.
 *
 * Criterion runs each test in a process of its own, so nothing here is
 * shared between tests; a helper's state lives in what the caller holds.
 */
#ifndef RMQS_TESTUTIL_H
#define RMQS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "job.h"
#include "store.h"

#define UT_HOUR 3600000LL
#define UT_DAY 86400000LL

/* Limits to validate requests with: 5 attempts by default, at most 10, up
 * to 30 days ahead. */
extern const job_limits ut_limits;

/* Room for a folder from ut_tmpdir plus a file name in it. */
#define UT_PATH_MAX 128

/* Whether the n bytes at p are all zero. */
bool ut_is_zero(const void *p, size_t n);

/* strdup that fails the test instead of returning NULL (caller frees). */
char *ut_strdup(const char *s);

/* A JSON text written with ' in place of " (readable in C tables): a
 * malloc'd copy with each ' turned back into ". The caller frees it. */
char *ut_json_quotes(const char *s);

/* Make a fresh folder /tmp/rmqs-<tag>-XXXXXX; its path goes to dir. */
void ut_tmpdir(char dir[UT_PATH_MAX], const char *tag);

/* Remove dir and everything below it; a no-op for "" (nothing made). */
void ut_rmtree(const char *dir);

/* dir/name into out (UT_PATH_MAX bytes). */
void ut_path(char out[UT_PATH_MAX], const char *dir, const char *name);

/* store_open(path, opt) that must succeed; the caller closes the store. */
store_t *ut_store_open(const char *path, const store_options *opt);

/* A fixed, valid job id for number n (distinct n, distinct ids). */
void ut_job_id(int n, char out[JOB_ID_LEN + 1]);

/* A pending job number n, due at deliver_at, exchange "ex", routing key
 * "rk", 3 attempts allowed, text body "hello". The caller owns *j
 * (job_clear). */
void ut_job_make(job_t *j, int n, int64_t deliver_at);

/* Job number n of the search tests (test_store_search.c,
 * test_store_pg_search.c): as ut_job_make, and then exchange "ex<n%3>",
 * routing key "rk<n%5>", status sent when n%10 == 0, failed when n%10 ==
 * 1, else pending; deliver_at 1000000 + 1000 n; headers {"tenant":
 * "t<n%7>", "n": n}; body by n%4: 0 text "hello <script>n</script>", 1
 * JSON {"k":"Needle n"}, 2 binary "needle-bytes", 3 text "plain text". */
void ut_search_job(job_t *j, int n);

/* Whether st holds job number n (store_get: found or RMQS_ENOTFOUND; any
 * other answer fails the test). */
bool ut_store_has(store_t *st, int n);

/* job_clear every one of n jobs, then free the array. */
void ut_jobs_free(job_t *jobs, size_t n);

/* A raw SQLite connection on the file at path (read-write, busy timeout
 * 5 s), to look at what a module wrote. The caller closes it. */
sqlite3 *ut_sql_open(const char *path);

/* Run sql (statements without results) on a raw connection to path. */
void ut_sql_exec(const char *path, const char *sql);

/* Make the file at path a database of the first n of migrations, as the
 * store's runner would (each in its transaction with its schema_migrations
 * row, foreign keys on, WAL), without opening a store: a store of this
 * binary cannot open an older schema without migrating it (its statements
 * need the newest one), so tests of a migration build the old database
 * with this. */
void ut_sql_migrate(const char *path, const store_migration *m, size_t n);

/* The first column of the first row of sql on a raw connection to path. */
int64_t ut_sql_int(const char *path, const char *sql);

/* PostgreSQL, the server tests/run.sh starts (RMQS_TEST_PG_URL, the app
 * user's URL without a database; RMQS_TEST_PG_ADMIN, the admin's libpq
 * conninfo over the server's socket). */
#define UT_URL_MAX 512
/* Whether the environment names a server (else the caller skips). */
bool ut_pg_available(void);
/* A fresh database owned by the app user: its name into name, the app's
 * URL of it into url. The caller drops it (ut_pg_drop). */
void ut_pg_create(char name[64], char url[UT_URL_MAX]);
/* Drop the database name (if it exists; its connections are ended). */
void ut_pg_drop(const char *name);
/* Run sql (statements without results) at url (a URL or conninfo). */
void ut_pg_exec(const char *url, const char *sql);
/* The first column of the first row of sql at url, as an integer (NULL:
 * -1). */
int64_t ut_pg_int(const char *url, const char *sql);

/* One store suite for both backends (as River's driver test suite and
 * Oban's engines): a case written once runs as NAME_sqlite on a fresh
 * SQLite file and as NAME_postgres on a fresh database of the server
 * tests/run.sh starts (skipped when none is named). A suite keeps one
 * ut_both, calls ut_both_init in its .init and ut_both_fini in its .fini,
 * and names a function open(bool pg) that opens its store through
 * ut_both_open; UT_BOTH(suite, name, open) then defines both cases. */
typedef struct ut_both {
    bool pg;                /* the store of this run: PostgreSQL, else SQLite */
    char dir[UT_PATH_MAX];  /* a fresh folder (the SQLite file is in it) */
    char path[UT_PATH_MAX]; /* dir/jobs.db */
    char pgdb[64];          /* the PostgreSQL database, "" if none */
    char url[UT_URL_MAX];   /* its URL */
    store_t *st;            /* what ut_both_open opened, closed at fini */
} ut_both;

void ut_both_init(ut_both *b, const char *tag);
void ut_both_fini(ut_both *b);
/* The target of this run's store (path or URL), making the PostgreSQL
 * database first (or skipping the test when there is no server): for a
 * test that opens the store itself. */
const char *ut_both_target(ut_both *b, bool pg);
/* Open this run's store on ut_both_target with opt; b->st. */
store_t *ut_both_open(ut_both *b, bool pg, const store_options *opt);
/* ut_sql_exec / ut_sql_int on this run's database, whichever it is (the
 * SQL must read the same on both). */
void ut_both_exec(const ut_both *b, const char *sql);
int64_t ut_both_int(const ut_both *b, const char *sql);

#define UT_BOTH(suite, name, open) \
    static void name(void);        \
    Test(suite, name##_sqlite)     \
    {                              \
        open(false);               \
        name();                    \
    }                              \
    Test(suite, name##_postgres)   \
    {                              \
        open(true);                \
        name();                    \
    }                              \
    static void name(void)

/* The dispatcher's claim (dispatch/dispatcher.c): store_claim_ahead, then
 * the claims written by store_record, so the jobs are publishing in the
 * database as the live path leaves them; the jobs as store_claim_ahead
 * returns them (the caller frees them, ut_jobs_free). */
rmqs_rc ut_claim(store_t *st, int64_t due_by_ms, int64_t now_ms, size_t limit,
                 job_t **jobs_out, size_t *n_out);

/* Poll done(arg) every millisecond until it returns true or timeout_ms
 * have passed (CLOCK_MONOTONIC); returns its last answer. For conditions
 * another thread makes true: a test awaits them instead of sleeping. */
bool ut_await(int64_t timeout_ms, bool (*done)(void *arg), void *arg);

/* The whole file at path, NUL-terminated (the caller frees); its length
 * without the NUL goes to *len if len is not NULL. */
char *ut_read_file(const char *path, size_t *len);

/* Capture everything written to file descriptor 2 between ut_capture_start
 * and ut_capture_end (from any thread) in an unlinked temporary file. */
typedef struct ut_capture {
    int saved_fd; /* the real stderr, put back by ut_capture_end */
    int file_fd;  /* the temporary file */
} ut_capture;

void ut_capture_start(ut_capture *c);

/* Put stderr back and return what was written, NUL-terminated (the caller
 * frees). */
char *ut_capture_end(ut_capture *c);

/* How many lines of text (each ending in '\n') contain needle. */
size_t ut_count_lines_with(const char *text, const char *needle);

#endif
