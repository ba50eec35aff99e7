/*
 * test_store_pg.c - the pure parts of the PostgreSQL backend
 * (service/store/pg/store_pg_url.c): which targets are PostgreSQL URLs, the
 * password-free form of a URL that logs and errors show, the SQLSTATE -> rmqs_rc mapping
 * (test_store.c opens a URL where nothing listens). What needs a server
 * (claims, leases, NOTIFY) is tested by the integration suite's postgres
 * half.
 *
 * Suite "store_pg".
 */
#include <criterion/criterion.h>
#include <string.h>

#include "store.h"
#include "store_pg.h"

static void safe(const char *url, const char *want)
{
    char buf[256];

    store_pg_safe_url(url, buf, sizeof(buf));
    cr_expect_str_eq(buf, want, "%s", url);
}

Test(store_pg, urls_are_recognised_by_scheme)
{
    cr_expect(store_pg_is_url("postgres://h/db"));
    cr_expect(store_pg_is_url("postgresql://h/db"));
    cr_expect(store_pg_is_url("POSTGRES://h/db"));
    cr_expect_not(store_pg_is_url("./data/scheduler.db"));
    cr_expect_not(store_pg_is_url("postgres.db"));
    cr_expect_not(store_pg_is_url("host=h dbname=db")); /* URLs only */
    cr_expect_not(store_pg_is_url(NULL));
    cr_expect(store_is_file("./data/scheduler.db"));
    cr_expect_not(store_is_file("postgresql://u:p@h/db"));
}

Test(store_pg, safe_url_drops_the_password)
{
    safe("postgres://app:secret@127.0.0.1:5432/appdb",
         "postgres://app@127.0.0.1:5432/appdb");
    safe("postgresql://app@h/db", "postgresql://app@h/db");
    safe("postgres://h:5432/db", "postgres://h:5432/db");
    /* an unescaped '@' in the password: libpq would read part of it as the
     * host, so nothing of the user part is shown (and the store refuses it) */
    safe("postgres://u:p@ss@h/db", "postgres://***@h/db");
    /* multi-host, parameters kept but the password parameter masked */
    safe("postgresql://u:pw@127.0.0.1:1,127.0.0.1:2/db?"
         "target_session_attrs=read-write&password=pw2&connect_timeout=2",
         "postgresql://u@127.0.0.1:1,127.0.0.1:2/db?"
         "target_session_attrs=read-write&password=***&connect_timeout=2");
    safe("postgres://h/db?PASSWORD=x", "postgres://h/db?PASSWORD=***");
    safe("postgres://u:pw@h", "postgres://u@h");
}

Test(store_pg, safe_url_masks_what_libpq_calls_a_secret)
{
    /* percent-encoded and other-case keywords are the same keyword */
    safe("postgres://h/db?%70assword=x&sslmode=require",
         "postgres://h/db?password=***&sslmode=require");
    safe("postgres://h/db?sslpassword=keypw&sslkey=/k.pem",
         "postgres://h/db?sslpassword=***&sslkey=/k.pem");
    safe("postgres://h/db?SSLPassword=keypw",
         "postgres://h/db?SSLPassword=***");
    /* a keyword libpq does not know may be a misspelt secret */
    safe("postgres://h/db?passwrod=x", "postgres://h/db?passwrod=***");
    /* '/' unencoded in the password: nothing of it shows; '?' is read
     * as libpq reads it (the user part ends at the first '@' or '/') */
    safe("postgres://u:pa/ss@h/db", "postgres://***@h/db");
    safe("postgres://u:pa?ss@h/db?sslmode=disable",
         "postgres://u@h/db?sslmode=disable");
    safe("postgres://u:pa%2Fss@h/db", "postgres://u@h/db");
}

Test(store_pg, a_url_libpq_would_read_otherwise_is_refused)
{
    cr_expect_null(store_pg_url_problem("postgres://u:pa%2Fss%40x@h:5432/db"));
    cr_expect_null(store_pg_url_problem("postgres://h/db?password=x"));
    cr_expect_null(store_pg_url_problem("postgres://u@h/db"));
    cr_expect_not_null(store_pg_url_problem("postgres://u:pa/ss@h/db"));
    cr_expect_null(store_pg_url_problem("postgres://u:pa?ss@h/db"));
    cr_expect_not_null(store_pg_url_problem("postgres://u:p@ss@h/db"));
    cr_expect(strstr(store_pg_url_problem("postgres://u:s3cr/t@h/db"),
                     "s3cr") == NULL);
}

Test(store_pg, scrub_removes_secrets_as_written_and_decoded)
{
    char buf[256];

    store_pg_scrub("postgres://u:s%3Acret@h/db?sslpassword=k%20pw",
                   "bad password s:cret or s%3Acret, key k pw\nsecond line",
                   buf, sizeof(buf));
    cr_expect_str_eq(buf, "bad password *** or ***, key ***");
    store_pg_scrub("postgres://u:pw@h/db", "x pw y\nz", buf, sizeof(buf));
    cr_expect_str_eq(buf, "x *** y");
}

Test(store_pg, safe_url_truncates_and_terminates)
{
    char buf[12];

    store_pg_safe_url("postgres://app:secret@127.0.0.1/db", buf, sizeof(buf));
    cr_expect_str_eq(buf, "postgres://");
    store_pg_safe_url("postgres://a:b@h/d", buf, sizeof(buf));
    cr_expect_str_eq(buf, "postgres://");
    cr_expect_eq(strlen(buf), 11);
    store_pg_safe_url("no scheme", buf, sizeof(buf));
    cr_expect_str_eq(buf, "(not a URL)");
}

Test(store_pg, scrub_masks_passwords_in_libpq_messages)
{
    const char *url = "postgres://app:pw1@h:1/db?password=pw2&sslmode=off";
    char buf[160];

    store_pg_scrub(url,
                   "missing \"=\" after \"postgres://app:pw1@h:1/db?"
                   "password=pw2&sslmode=off\" in connection info string\n"
                   "second line",
                   buf, sizeof(buf));
    cr_expect_str_eq(buf,
                     "missing \"=\" after \"postgres://app:***@h:1/db?"
                     "password=***&sslmode=off\" in connection info string");
    store_pg_scrub("postgres://h/db", "no secret here", buf, sizeof(buf));
    cr_expect_str_eq(buf, "no secret here");
    store_pg_scrub(url, NULL, buf, sizeof(buf));
    cr_expect_str_eq(buf, "");
}

Test(store_pg, safe_target_keeps_paths)
{
    char buf[64];

    store_safe_target("/var/lib/rmqs/scheduler.db", buf, sizeof(buf));
    cr_expect_str_eq(buf, "/var/lib/rmqs/scheduler.db");
    store_safe_target("postgres://a:secret@h/d", buf, sizeof(buf));
    cr_expect_str_eq(buf, "postgres://a@h/d");
}

Test(store_pg, sqlstates_map_to_the_service_codes)
{
    struct {
        const char *st;
        rmqs_rc rc;
    } cases[] = {
        {"53100", RMQS_EFULL},     /* disk full */
        {"53400", RMQS_EFULL},     /* configuration limit exceeded */
        {"53200", RMQS_ENOMEM},    /* out of memory */
        {"23505", RMQS_ECONFLICT}, /* unique violation: a job id taken */
        {"23514", RMQS_EINVAL},    /* check violation */
        {"23502", RMQS_EINVAL},    /* not null */
        {"22021", RMQS_EINVAL},    /* invalid byte sequence */
        {"25006", RMQS_EDB},       /* read-only transaction: a standby */
        {"08006", RMQS_EDB},       /* connection failure */
        {"57P01", RMQS_EDB},       /* admin shutdown */
        {"40001", RMQS_EDB},       /* serialization failure */
        {"42P01", RMQS_EDB},       /* undefined table: schema broken */
        {"", RMQS_EDB},            /* no answer at all */
        {NULL, RMQS_EDB},
        {"2350", RMQS_EDB}, /* not a SQLSTATE */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_expect_eq(store_pg_map_sqlstate(cases[i].st), cases[i].rc,
                     "sqlstate %s", cases[i].st ? cases[i].st : "NULL");
}
