/* Unit tests for service/util/config.c: defaults, environment, flags, bounds,
 * choices (enum settings) and the --ingest list parser. */
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

    cr_assert_eq(config_load(&c, 1, argv, envp, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_expect_eq(a, CONFIG_RUN);
    cr_expect_str_eq(c.listen, "127.0.0.1:8080");
    cr_expect_str_eq(c.db_path, "./data/scheduler.db");
    cr_expect_str_eq(c.amqp_url, "amqp://guest:guest@localhost:5672/");
    cr_expect_eq(c.max_attempts, 10);
    cr_expect_eq(c.max_body_bytes, 1048576);
    cr_expect_eq(c.http_header_timeout_s, 10);
    cr_expect_eq(c.http_body_timeout_s, 60);
    cr_expect_eq(c.http_max_conns_per_ip, 0); /* a tenth of the total */
    cr_expect(c.sync_full);
    config_clear(&c);
    fclose(out);
}

Test(config, environment_then_flags_win)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler", "--listen", "[::1]:9000",
                    "--max-attempts=3", NULL};
    char *envp[] = {"RMQS_LISTEN=0.0.0.0:1", "RMQS_DB=/tmp/x.db",
                    "RMQS_MAX_ATTEMPTS=7", "RMQS_SYNC=normal", NULL};
    FILE *out = sink();

    cr_assert_eq(config_load(&c, 4, argv, envp, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_expect_str_eq(c.listen, "[::1]:9000");
    cr_expect_str_eq(c.db_path, "/tmp/x.db");
    cr_expect_eq(c.max_attempts, 3);
    cr_expect_not(c.sync_full);
    config_clear(&c);
    fclose(out);
}

Test(config, rejects_bad_values_with_the_setting_named)
{
    static const struct {
        const char *arg;
        const char *field;
    } cases[] = {
        {"--max-attempts=0", "max-attempts"},
        {"--max-attempts=abc", "max-attempts"},
        {"--heartbeat-s=99999", "heartbeat-s"},
        {"--http-header-timeout-s=0", "http-header-timeout-s"},
        {"--http-header-timeout-s=3601", "http-header-timeout-s"},
        {"--http-body-timeout-s=0", "http-body-timeout-s"},
        {"--http-body-timeout-s=3601", "http-body-timeout-s"},
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
        cr_expect_neq(e.message[0], '\0', "case %s has no message",
                      cases[i].arg);
        config_clear(&c);
        fclose(out);
    }
}

Test(config, backoff_cap_below_base_rejected)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler", "--backoff-base-ms=5000",
                    "--backoff-cap-ms=10", NULL};
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
    char *argv[] = {"rmq-scheduler", "--ingest", "a.delayed=a",
                    "--ingest=b.delayed=b", NULL};
    char *envp[] = {"RMQS_INGEST=x.delayed=x", NULL};
    FILE *out = sink();

    cr_assert_eq(config_load(&c, 4, argv, envp, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_assert_eq(c.ingest.n, 2);
    cr_expect_str_eq(c.ingest.maps[0].ingest_exchange, "a.delayed");
    cr_expect_str_eq(c.ingest.maps[0].target_exchange, "a");
    cr_expect_str_eq(c.ingest.maps[1].ingest_exchange, "b.delayed");
    cr_expect_str_eq(c.ingest.maps[1].target_exchange, "b");
    config_clear(&c);
    cr_expect_eq(c.ingest.n, 0);
    cr_expect_null(c.ingest.maps);

    char *argv2[] = {"rmq-scheduler", NULL};
    cr_assert_eq(config_load(&c, 1, argv2, envp, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_assert_eq(c.ingest.n, 1);
    cr_expect_str_eq(c.ingest.maps[0].ingest_exchange, "x.delayed");
    cr_expect_str_eq(c.ingest.maps[0].target_exchange, "x");
    config_clear(&c);

    char *envp2[] = {NULL};
    cr_assert_eq(config_load(&c, 1, argv2, envp2, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_expect_eq(c.ingest.n, 0, "no --ingest: no mapping");
    config_clear(&c);
    fclose(out);
}

Test(config, ingest_list_parser_splits_at_the_first_equals_sign)
{
    config_ingest_list l = {0};
    rmqs_error e = {0};

    cr_assert_eq(config_parse_ingest("", &l, &e), RMQS_OK);
    cr_expect_eq(l.n, 0, "an empty text adds nothing");
    cr_assert_eq(config_parse_ingest("a.delayed=a,b=c=d,", &l, &e), RMQS_OK,
                 "%s", e.message);
    cr_assert_eq(l.n, 2);
    cr_expect_str_eq(l.maps[0].ingest_exchange, "a.delayed");
    cr_expect_str_eq(l.maps[0].target_exchange, "a");
    cr_expect_str_eq(l.maps[1].ingest_exchange, "b");
    cr_expect_str_eq(l.maps[1].target_exchange, "c=d");
    cr_assert_eq(config_parse_ingest("z=y", &l, &e), RMQS_OK, "%s", e.message);
    cr_assert_eq(l.n, 3, "a second text appends");
    cr_expect_str_eq(l.maps[2].ingest_exchange, "z");
    cr_expect_str_eq(l.maps[2].target_exchange, "y");
    config_ingest_list_clear(&l);
    cr_expect_eq(l.n, 0);
    cr_expect_null(l.maps);
}

Test(config, ingest_list_parser_rejects_a_bad_item_and_changes_nothing)
{
    static const char *bad[] = {"nodelim", "=target", "src=", "a=b,,c=d",
                                ",a=b",    "a=b,=c",  "a=b,c"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        config_ingest_list l = {0};
        rmqs_error e = {0};
        cr_assert_eq(config_parse_ingest("keep=me", &l, &e), RMQS_OK);
        cr_expect_eq(config_parse_ingest(bad[i], &l, &e), RMQS_EINVAL,
                     "case '%s' accepted", bad[i]);
        cr_expect_str_eq(e.field, "ingest", "case '%s'", bad[i]);
        cr_expect_not_null(strstr(e.message, "INGEST_EXCHANGE=TARGET_EXCHANGE"),
                           "case '%s': %s", bad[i], e.message);
        cr_assert_eq(l.n, 1, "case '%s' changed the list", bad[i]);
        cr_expect_str_eq(l.maps[0].ingest_exchange, "keep");
        cr_expect_str_eq(l.maps[0].target_exchange, "me");
        config_ingest_list_clear(&l);
    }
}

Test(config, choices_map_to_their_values)
{
    config c;
    config_action a;
    rmqs_error e = {0};
    char *argv[] = {"rmq-scheduler",
                    "--sync=normal",
                    "--log-level",
                    "warn",
                    "--log-format=json",
                    "--ingest-invalid=dead-letter",
                    "--ingest-dead-letter-exchange=dlx",
                    NULL};
    char *envp[] = {"RMQS_LOG_LEVEL=debug", NULL};
    char *argv0[] = {"rmq-scheduler", NULL};
    char *envp0[] = {NULL};
    FILE *out = sink();

    cr_assert_eq(config_load(&c, 1, argv0, envp0, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_expect(c.sync_full);
    cr_expect_eq(c.log_level, LOG_INFO);
    cr_expect_eq(c.log_format, LOG_FORMAT_TEXT);
    cr_expect_eq(c.ingest_invalid, INGEST_INVALID_ROUTE);
    config_clear(&c);

    cr_assert_eq(config_load(&c, 7, argv, envp, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_expect_not(c.sync_full);
    cr_expect_eq(c.log_level, LOG_WARN, "the flag wins over the environment");
    cr_expect_eq(c.log_format, LOG_FORMAT_JSON);
    cr_expect_eq(c.ingest_invalid, INGEST_INVALID_DEAD_LETTER);
    config_clear(&c);

    char *envp1[] = {"RMQS_LOG_LEVEL=error", "RMQS_SYNC=full", NULL};
    cr_assert_eq(config_load(&c, 1, argv0, envp1, out, &a, &e), RMQS_OK, "%s",
                 e.message);
    cr_expect_eq(c.log_level, LOG_ERROR);
    cr_expect(c.sync_full);
    config_clear(&c);
    fclose(out);
}

/* A bad value of a choice is refused with the setting, the value given and
 * every allowed value named, from a flag or from the environment. */
Test(config, a_bad_choice_names_the_allowed_values)
{
    static const struct {
        const char *arg, *env, *field, *value;
        const char *allowed[4];
    } cases[] = {
        {"--sync=sometimes", NULL, "sync", "sometimes", {"full", "normal"}},
        {NULL, "RMQS_SYNC=FULL", "sync", "FULL", {"full", "normal"}},
        {"--log-format=xml", NULL, "log-format", "xml", {"text", "json"}},
        {"--log-level=loud",
         NULL,
         "log-level",
         "loud",
         {"debug", "info", "warn", "error"}},
        {NULL,
         "RMQS_LOG_LEVEL=",
         "log-level",
         "''",
         {"debug", "info", "warn", "error"}},
        {"--ingest-invalid=drop",
         NULL,
         "ingest-invalid",
         "drop",
         {"route", "dead-letter"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        config c;
        config_action a;
        rmqs_error e = {0};
        char *argv[] = {"rmq-scheduler", (char *)cases[i].arg, NULL};
        char *envp[] = {(char *)cases[i].env, NULL};
        const char *what = cases[i].arg ? cases[i].arg : cases[i].env;
        FILE *out = sink();

        cr_expect_eq(
            config_load(&c, cases[i].arg ? 2 : 1, argv, envp, out, &a, &e),
            RMQS_EINVAL, "case %s accepted", what);
        cr_expect_str_eq(e.field, cases[i].field, "case %s", what);
        cr_expect_not_null(strstr(e.message, cases[i].value),
                           "case %s: the value is not named: %s", what,
                           e.message);
        for (size_t k = 0; k < 4 && cases[i].allowed[k] != NULL; k++)
            cr_expect_not_null(strstr(e.message, cases[i].allowed[k]),
                               "case %s: '%s' is not named: %s", what,
                               cases[i].allowed[k], e.message);
        config_clear(&c);
        fclose(out);
    }
}

/* --help shows the allowed values of each choice from the same table. */
Test(config, help_lists_the_allowed_values_of_each_choice)
{
    static const char *lines[][2] = {
        {"--sync ", "(one of: full, normal)"},
        {"--log-level ", "(one of: debug, info, warn, error)"},
        {"--log-format ", "(one of: text, json)"},
        {"--ingest-invalid ", "(one of: route, dead-letter)"},
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);

    config_usage(out);
    fclose(out);
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        const char *line = strstr(buf, lines[i][0]);
        cr_assert_not_null(line, "no %s line", lines[i][0]);
        size_t n = strcspn(line, "\n");
        const char *hit = strstr(line, lines[i][1]);
        cr_expect(hit != NULL && hit < line + n, "%s line lacks %s: %.*s",
                  lines[i][0], lines[i][1], (int)n, line);
    }
    free(buf);
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

/* --ui auto (the default) is on with an API token and read-only without
 * (an open dashboard must not cancel jobs); an explicit mode is kept. */
Test(config, ui_auto_follows_the_token)
{
    static const struct {
        const char *arg, *env;
        ui_mode want;
        bool autom;
    } cases[] = {
        {NULL, NULL, UI_MODE_READ_ONLY, true},
        {NULL, "RMQS_API_TOKEN=0123456789abcdef0123", UI_MODE_ON, true},
        {"--ui=off", "RMQS_API_TOKEN=0123456789abcdef0123", UI_MODE_OFF, false},
        {"--ui=on", NULL, UI_MODE_ON, false},
        {"--ui=read-only", "RMQS_API_TOKEN=0123456789abcdef0123",
         UI_MODE_READ_ONLY, false},
        {NULL, "RMQS_UI=off", UI_MODE_OFF, false},
    };
    FILE *out = sink();

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        config c;
        config_action a;
        rmqs_error e = {0};
        char *argv[] = {"rmq-scheduler", (char *)cases[i].arg, NULL};
        char *envp[] = {(char *)cases[i].env, NULL};
        cr_assert_eq(
            config_load(&c, cases[i].arg ? 2 : 1, argv, envp, out, &a, &e),
            RMQS_OK, "case %zu: %s", i, e.message);
        cr_expect_eq(c.ui, cases[i].want, "case %zu", i);
        cr_expect_eq(c.ui_auto, cases[i].autom, "case %zu", i);
        config_clear(&c);
    }
    rmqs_error e = {0};
    config c;
    config_action a;
    char *argv[] = {"rmq-scheduler", "--ui=maybe", NULL};
    char *envp[] = {NULL};
    cr_expect_eq(config_load(&c, 2, argv, envp, out, &a, &e), RMQS_EINVAL);
    cr_expect_str_eq(e.field, "ui");
    config_clear(&c);
    fclose(out);
}
