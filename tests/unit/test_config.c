/* Unit tests for service/config.c: defaults, environment, flags, bounds. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

static FILE *sink(void)
{
    FILE *f = fopen("/dev/null", "w");
    cr_assert_not_null(f);
    return f;
}

Test(config, defaults_when_nothing_given)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler", NULL};
    char *envp[] = {NULL};
    FILE *out = sink();

    cr_assert_eq(config_load(&c, 1, argv, envp, out, &a, &e), RMQS_OK, "%s", e.message);
    cr_expect_eq(a, CONFIG_RUN);
    cr_expect_str_eq(c.listen, "127.0.0.1:8080");
    cr_expect_str_eq(c.db_path, "./data/scheduler.db");
    cr_expect_str_eq(c.amqp_url, "amqp://guest:guest@localhost:5672/");
    cr_expect_eq(c.max_attempts, 10);
    cr_expect_eq(c.max_body_bytes, 1048576);
    cr_expect(c.sync_full);
    config_clear(&c);
    fclose(out);
}

Test(config, environment_then_flags_win)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler", "--listen", "[::1]:9000", "--max-attempts=3", NULL};
    char *envp[] = {"RMQS_LISTEN=0.0.0.0:1", "RMQS_DB=/tmp/x.db",
                    "RMQS_MAX_ATTEMPTS=7", "RMQS_SYNC=normal", NULL};
    FILE *out = sink();

    cr_assert_eq(config_load(&c, 4, argv, envp, out, &a, &e), RMQS_OK, "%s", e.message);
    cr_expect_str_eq(c.listen, "[::1]:9000");
    cr_expect_str_eq(c.db_path, "/tmp/x.db");
    cr_expect_eq(c.max_attempts, 3);
    cr_expect_not(c.sync_full);
    config_clear(&c);
    fclose(out);
}

Test(config, rejects_bad_values_with_the_setting_named)
{
    static const struct { const char *arg; const char *field; } cases[] = {
        {"--max-attempts=0", "max-attempts"},
        {"--max-attempts=abc", "max-attempts"},
        {"--heartbeat-s=99999", "heartbeat-s"},
        {"--sync=sometimes", "sync"},
        {"--log-level=loud", "log-level"},
        {"--no-such-option=1", "--no-such-option=1"},
        {"positional", "positional"},
        {"--db", "db"},
        {"--listen=127.0.0.1:99999", "listen"},
        {"--listen=not-an-address", "listen"},
        {"--listen=[::1]8080", "listen"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        config c;
        config_action a;
        rmqs_error e = {0};
        char *argv[] = {"rmq-scheduler", (char *)cases[i].arg, NULL};
        char *envp[] = {NULL};
        FILE *out = sink();
        cr_expect_eq(config_load(&c, 2, argv, envp, out, &a, &e), RMQS_EINVAL,
                     "case %s accepted", cases[i].arg);
        cr_expect_str_eq(e.field, cases[i].field, "case %s", cases[i].arg);
        cr_expect_neq(e.message[0], '\0', "case %s has no message", cases[i].arg);
        config_clear(&c);
        fclose(out);
    }
}

Test(config, backoff_cap_below_base_rejected)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler", "--backoff-base-ms=5000", "--backoff-cap-ms=10", NULL};
    char *envp[] = {NULL};
    FILE *out = sink();

    cr_expect_eq(config_load(&c, 3, argv, envp, out, &a, &e), RMQS_EINVAL);
    cr_expect_str_eq(e.field, "backoff-cap-ms");
    config_clear(&c);
    fclose(out);
}

Test(config, help_lists_every_variable)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler", "--help", NULL};
    char *envp[] = {NULL};
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);

    cr_assert_eq(config_load(&c, 2, argv, envp, out, &a, &e), RMQS_OK);
    fclose(out);
    cr_expect_eq(a, CONFIG_HELP);
    cr_expect_not_null(strstr(buf, "RMQS_AMQP_URL"));
    cr_expect_not_null(strstr(buf, "--max-body-bytes"));
    cr_expect_not_null(strstr(buf, "RMQS_BACKOFF_CAP_MS"));
    free(buf);
    config_clear(&c);
}

Test(config, ingest_flags_append_and_replace_the_environment)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler", "--ingest", "a.delayed=a", "--ingest=b.delayed=b", NULL};
    char *envp[] = {"RMQS_INGEST=x.delayed=x", NULL};
    FILE *out = sink();

    cr_assert_eq(config_load(&c, 4, argv, envp, out, &a, &e), RMQS_OK, "%s", e.message);
    cr_expect_str_eq(c.ingest, "a.delayed=a,b.delayed=b");
    config_clear(&c);

    char *argv2[] = {"rmq-scheduler", NULL};
    cr_assert_eq(config_load(&c, 1, argv2, envp, out, &a, &e), RMQS_OK, "%s", e.message);
    cr_expect_str_eq(c.ingest, "x.delayed=x");
    config_clear(&c);
    fclose(out);
}

Test(config, ingest_mappings_and_rules_are_checked)
{
    static const char *bad[][2] = {
        {"--ingest=nodelim", "ingest"},
        {"--ingest==target", "ingest"},
        {"--ingest=src=", "ingest"},
        {"--ingest-invalid=drop", "ingest-invalid"},
        {"--ingest-invalid=dead-letter", "ingest-dead-letter-exchange"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        config c;
        config_action a;
        rmqs_error e = {0};
        char *argv[] = {"rmq-scheduler", (char *)bad[i][0], NULL};
        char *envp[] = {NULL};
        FILE *out = sink();
        cr_expect_eq(config_load(&c, 2, argv, envp, out, &a, &e), RMQS_EINVAL,
                     "case %s accepted", bad[i][0]);
        cr_expect_str_eq(e.field, bad[i][1], "case %s", bad[i][0]);
        config_clear(&c);
        fclose(out);
    }
}
