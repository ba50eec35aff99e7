/*
 * config.c - one table of settings drives parsing (flags and RMQS_*
 * environment variables), validation (bounds, allowed values) and --help.
 *
 * Each entry names its flag, its variable, its type, its default, its bounds
 * (numbers) or allowed values (choices) and one line of help; adding a
 * setting is adding a line here and a field in struct config. A choice is
 * checked against its list here and nowhere else, and --help prints the
 * same list, so the two cannot disagree.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http_origin.h"
#include "netaddr.h"

typedef enum {
    OPT_STR,    /* a string; the last one given wins */
    OPT_INGEST, /* INGEST=TARGET mappings; a repeated flag appends */
    OPT_INT,
    OPT_ENUM, /* one of choices, stored as its value in an enum field */
    OPT_BOOL  /* one of choices, stored as a bool */
} opt_type;

/* An allowed value of an OPT_ENUM / OPT_BOOL setting and what it maps to. */
typedef struct opt_choice {
    const char *name;
    int value;
} opt_choice;

typedef struct opt_def {
    const char *flag; /* without the leading "--"; NULL: environment only
                             (secrets must not show in ps) */
    const char *env;
    opt_type type;
    size_t offset;    /* of the field in struct config */
    const char *def;  /* default, as text; NULL: unset */
    int64_t min, max; /* bounds for OPT_INT */
    const char *help;
    const opt_choice *choices; /* OPT_ENUM / OPT_BOOL: ends with a NULL name */
} opt_def;

#define F(field) offsetof(config, field)

/* OPT_ENUM stores an int: every enum it fills must be int-sized. */
_Static_assert(sizeof(log_level) == sizeof(int), "log_level is an int");
_Static_assert(sizeof(log_format) == sizeof(int), "log_format is an int");
_Static_assert(sizeof(ingest_invalid_rule) == sizeof(int),
               "ingest_invalid_rule is an int");

_Static_assert(sizeof(ui_mode) == sizeof(int), "ui_mode is an int");

static const opt_choice ui_choices[] = {{"auto", UI_MODE_AUTO},
                                        {"off", UI_MODE_OFF},
                                        {"read-only", UI_MODE_READ_ONLY},
                                        {"on", UI_MODE_ON},
                                        {NULL, 0}};
static const opt_choice sync_choices[] = {
    {"full", true}, {"normal", false}, {NULL, 0}};
static const opt_choice log_level_choices[] = {{"debug", LOG_DEBUG},
                                               {"info", LOG_INFO},
                                               {"warn", LOG_WARN},
                                               {"error", LOG_ERROR},
                                               {NULL, 0}};
static const opt_choice log_format_choices[] = {
    {"text", LOG_FORMAT_TEXT}, {"json", LOG_FORMAT_JSON}, {NULL, 0}};
static const opt_choice ingest_invalid_choices[] = {
    {"route", INGEST_INVALID_ROUTE},
    {"dead-letter", INGEST_INVALID_DEAD_LETTER},
    {NULL, 0}};

static const opt_def opt_table[] = {
    {"listen", "RMQS_LISTEN", OPT_STR, F(listen), "127.0.0.1:8080", 0, 0,
     "HTTP listen address, host:port ([::1]:port for IPv6)", NULL},
    {"db", "RMQS_DB", OPT_STR, F(db_path), "./data/scheduler.db", 0, 0,
     "SQLite database file (its folder is created), or a PostgreSQL URL "
     "postgres://user:pass@host:port/db (several instances may share it; "
     "host1:port1,host2:port2 with target_session_attrs=read-write follows "
     "failover)",
     NULL},
    {"amqp-url", "RMQS_AMQP_URL", OPT_STR, F(amqp_url),
     "amqp://guest:guest@localhost:5672/", 0, 0,
     "RabbitMQ URL, amqp://user:pass@host:port/vhost; several separated by "
     "commas are tried in turn",
     NULL},
    {"max-attempts", "RMQS_MAX_ATTEMPTS", OPT_INT, F(max_attempts), "10", 1,
     CONFIG_MAX_ATTEMPTS_MAX, "default max_attempts of a job", NULL},
    {"backoff-base-ms", "RMQS_BACKOFF_BASE_MS", OPT_INT, F(backoff_base_ms),
     "1000", 1, 86400000,
     "retry delay after the first failed attempt (doubles)", NULL},
    {"backoff-cap-ms", "RMQS_BACKOFF_CAP_MS", OPT_INT, F(backoff_cap_ms),
     "300000", 1, 86400000, "longest retry delay", NULL},
    {"max-body-bytes", "RMQS_MAX_BODY_BYTES", OPT_INT, F(max_body_bytes),
     "1048576", 1024, 64 * 1024 * 1024, "largest request body (413 above)",
     NULL},
    {"max-delay-days", "RMQS_MAX_DELAY_DAYS", OPT_INT, F(max_delay_days),
     "3650", 1, 36500, "scheduling horizon: deliver_at at most this far ahead",
     NULL},
    {"heartbeat-s", "RMQS_HEARTBEAT_S", OPT_INT, F(heartbeat_s), "10", 1, 600,
     "AMQP heartbeat; a dead broker is noticed within twice this", NULL},
    {"confirm-timeout-ms", "RMQS_CONFIRM_TIMEOUT_MS", OPT_INT,
     F(confirm_timeout_ms), "10000", 100, 600000,
     "publish confirms not received by then: connection presumed dead", NULL},
    {"batch-size", "RMQS_BATCH_SIZE", OPT_INT, F(batch_size), "500", 1, 10000,
     "most due jobs claimed from the database at a time", NULL},
    {"publish-window", "RMQS_PUBLISH_WINDOW", OPT_INT, F(publish_window),
     "1000", 1, 100000, "most publishes awaiting a broker confirm", NULL},
    {"dispatch-lookahead-ms", "RMQS_DISPATCH_LOOKAHEAD_MS", OPT_INT,
     F(dispatch_lookahead_ms), "500", 0, 60000,
     "jobs are claimed this long before they are due (then 409 to cancel)",
     NULL},
    {"fair-key", "RMQS_FAIR_KEY", OPT_STR, F(fair_key), NULL, 0, 0,
     "jobs due at the same ms go out round-robin across this key's values: "
     "header:NAME, routing_key or exchange; unset: in arrival order",
     NULL},
    {"stats-interval-ms", "RMQS_STATS_INTERVAL_MS", OPT_INT,
     F(stats_interval_ms), "10000", 100, 60000,
     "GET /stats keeps a sample of the job counters this often (2,160 "
     "samples: 6 h at the default)",
     NULL},
    {"bulk-pause-ms", "RMQS_BULK_PAUSE_MS", OPT_INT, F(bulk_pause_ms), "0", 0,
     10000,
     "pause between the 500-job transactions of a bulk action "
     "(POST /jobs/bulk), leaving the database more to the dispatcher",
     NULL},
    {"dispatch-rt-priority", "RMQS_DISPATCH_RT_PRIORITY", OPT_INT,
     F(dispatch_rt_priority), "1", 0, 99,
     "SCHED_FIFO priority of the publisher thread, so a busy CPU does not "
     "delay a due job (needs CAP_SYS_NICE, else normal scheduling); 0: off",
     NULL},
    {"http-threads", "RMQS_HTTP_THREADS", OPT_INT, F(http_threads), "2", 1, 64,
     "HTTP worker threads", NULL},
    {"http-timeout-s", "RMQS_HTTP_TIMEOUT_S", OPT_INT, F(http_timeout_s), "30",
     1, 3600, "idle HTTP connections are closed after this", NULL},
    {"http-max-conns", "RMQS_HTTP_MAX_CONNS", OPT_INT, F(http_max_conns),
     "1000", 1, 100000, "concurrent HTTP connections", NULL},
    {"http-header-timeout-s", "RMQS_HTTP_HEADER_TIMEOUT_S", OPT_INT,
     F(http_header_timeout_s), "10", 1, 3600,
     "a request's headers must be "
     "in within this of its start (the connection, or the previous answer on "
     "a kept-alive one), however they trickle: else the connection is cut",
     NULL},
    {"http-body-timeout-s", "RMQS_HTTP_BODY_TIMEOUT_S", OPT_INT,
     F(http_body_timeout_s), "60", 1, 3600,
     "a request's body must be in "
     "within this of its headers, however it trickles: else the connection "
     "is cut",
     NULL},
    {"http-max-conns-per-ip", "RMQS_HTTP_MAX_CONNS_PER_IP", OPT_INT,
     F(http_max_conns_per_ip), "0", 0, 100000,
     "concurrent HTTP connections "
     "from one IP address; 0: a tenth of --http-max-conns, at least 1 (raise "
     "it behind a proxy, where every client has the proxy's address)",
     NULL},
    {"shutdown-grace-s", "RMQS_SHUTDOWN_GRACE_S", OPT_INT, F(shutdown_grace_s),
     "10", 0, 3600, "on SIGTERM, time allowed to finish work in flight", NULL},
    {"retention-s", "RMQS_RETENTION_S", OPT_INT, F(retention_s), "604800", 0,
     3650LL * 86400,
     "finished jobs (sent, failed, cancelled) are deleted after "
     "this many seconds (604800 = 7 days); 0 keeps them",
     NULL},
    {"purge-interval-s", "RMQS_PURGE_INTERVAL_S", OPT_INT, F(purge_interval_s),
     "60", 1, 86400, "how often to look for finished jobs to delete", NULL},
    {"write-queue-bytes", "RMQS_WRITE_QUEUE_BYTES", OPT_INT,
     F(write_queue_bytes), "4194304", 0, (int64_t)1 << 40,
     "request bytes parsed and waiting for the database at once; more wait "
     "unparsed (bounds memory; 0: no bound)",
     NULL},
    {"page-max-bytes", "RMQS_PAGE_MAX_BYTES", OPT_INT, F(page_max_bytes),
     "4194304", 65536, (int64_t)1 << 30,
     "a page of GET /jobs or GET "
     "/schedules stops at this many bytes of jobs (bodies, headers...) and "
     "gives its next cursor, whatever limit asks; a larger job comes out "
     "alone (bounds each answer's memory)",
     NULL},
    {"min-free-bytes", "RMQS_MIN_FREE_BYTES", OPT_INT, F(min_free_bytes),
     "16777216", 0, INT64_MAX,
     "new jobs get 503 storage_full while less than "
     "this is free on the database's disk; the rest is kept for delivering "
     "stored jobs (0: no reserve)",
     NULL},
    {"lease-ms", "RMQS_LEASE_MS", OPT_INT, F(lease_ms), "10000", 500, 3600000,
     "PostgreSQL: a job claimed by an instance that stops renewing it while "
     "its database session lives (frozen, cut off) is published again by "
     "another after this long; an instance whose session ends (crashed) "
     "loses its claims within a second",
     NULL},
    {"db-timeout-ms", "RMQS_DB_TIMEOUT_MS", OPT_INT, F(db_timeout_ms), "5000",
     100, 600000,
     "PostgreSQL: the longest one database call may take (statement_timeout); "
     "an answer not in a second later gives the connection up, so a frozen "
     "server or network path fails calls (503) instead of hanging them; also "
     "tcp_user_timeout, and connect_timeout when the URL sets none",
     NULL},
    {"max-schedules", "RMQS_MAX_SCHEDULES", OPT_INT, F(max_schedules), "10000",
     1, 10000000,
     "recurring schedules the service keeps; a PUT "
     "that would create one more is 409",
     NULL},
    {"max-limits", "RMQS_MAX_LIMITS", OPT_INT, F(max_limits), "1000", 1, 100000,
     "flow limits the service keeps (PUT /limits/{name}); a PUT that would "
     "create one more is 409",
     NULL},
    {"search-timeout-ms", "RMQS_SEARCH_TIMEOUT_MS", OPT_INT,
     F(search_timeout_ms), "2000", 10, 600000,
     "a job list, count or search "
     "ends after this (503 search_timeout; a count answers what it counted, "
     "capped); it runs on a connection of its own, never holding a write",
     NULL},
    {"schedule-lead-ms", "RMQS_SCHEDULE_LEAD_MS", OPT_INT, F(schedule_lead_ms),
     "2000", 1000, 600000,
     "the run of a recurring schedule is stored this long "
     "before its fire time (so it is published on time like any job)",
     NULL},
    {"sync", "RMQS_SYNC", OPT_BOOL, F(sync_full), "full", 0, 0,
     "full: fsync every accepted job; normal: survive process crashes only",
     sync_choices},
    {"log-level", "RMQS_LOG_LEVEL", OPT_ENUM, F(log_level), "info", 0, 0,
     "least severe level logged", log_level_choices},
    {"log-format", "RMQS_LOG_FORMAT", OPT_ENUM, F(log_format), "text", 0, 0,
     "text (key=value) or json (one object per line)", log_format_choices},
    {NULL, "RMQS_API_TOKEN", OPT_STR, F(api_token), NULL, 0, 0,
     "bearer token every endpoint but /healthz requires (environment only)",
     NULL},
    {"api-token-file", "RMQS_API_TOKEN_FILE", OPT_STR, F(api_token_file), NULL,
     0, 0, "file holding the bearer token (instead of RMQS_API_TOKEN)", NULL},
    {"allow-exchanges", "RMQS_ALLOW_EXCHANGES", OPT_STR, F(allow_exchanges),
     NULL, 0, 0,
     "comma-separated exchanges jobs may target; 'prefix*' "
     "matches a prefix; unset: all",
     NULL},
    {"public-origin", "RMQS_PUBLIC_ORIGIN", OPT_STR, F(public_origin), NULL, 0,
     0,
     "comma-separated origins (https://host[:port]) browsers and proxies "
     "reach the service by, besides its listen address, localhost and IP "
     "literals: other Host headers get 403 host_not_allowed, changes from "
     "other Origins 403 cross_origin; '*': any (a proxy in front checks)",
     NULL},
    {"tls-cert-file", "RMQS_TLS_CERT_FILE", OPT_STR, F(tls_cert_file), NULL, 0,
     0, "serve HTTPS with this certificate (PEM; needs --tls-key-file)", NULL},
    {"tls-key-file", "RMQS_TLS_KEY_FILE", OPT_STR, F(tls_key_file), NULL, 0, 0,
     "private key of the HTTPS certificate (PEM)", NULL},
    {"amqp-ca-file", "RMQS_AMQP_CA_FILE", OPT_STR, F(amqp_ca_file), NULL, 0, 0,
     "amqps://: CA certificates to trust (PEM); unset: the system store", NULL},
    {"amqp-cert-file", "RMQS_AMQP_CERT_FILE", OPT_STR, F(amqp_cert_file), NULL,
     0, 0, "amqps://: client certificate (PEM)", NULL},
    {"amqp-key-file", "RMQS_AMQP_KEY_FILE", OPT_STR, F(amqp_key_file), NULL, 0,
     0, "amqps://: client private key (PEM)", NULL},
    {"ingest", "RMQS_INGEST", OPT_INGEST, F(ingest), NULL, 0, 0,
     "INGEST=TARGET: take x-delay messages published to exchange INGEST and "
     "deliver them to TARGET when due (repeatable; variable: comma list)",
     NULL},
    {"ingest-prefetch", "RMQS_INGEST_PREFETCH", OPT_INT, F(ingest_prefetch),
     "500", 1, 65535, "unacknowledged messages per ingest exchange at most",
     NULL},
    {"ingest-invalid", "RMQS_INGEST_INVALID", OPT_ENUM, F(ingest_invalid),
     "route", 0, 0,
     "messages without a valid x-delay: route (publish at once, "
     "like the plugin) or dead-letter",
     ingest_invalid_choices},
    {"ingest-dead-letter-exchange", "RMQS_INGEST_DEAD_LETTER_EXCHANGE", OPT_STR,
     F(ingest_dlx), NULL, 0, 0, "where --ingest-invalid=dead-letter sends them",
     NULL},
    {"ui", "RMQS_UI", OPT_ENUM, F(ui), "auto", 0, 0,
     "the dashboard at /ui/: auto (on with an API token, read-only without), "
     "off (404), read-only (no actions: changes sent by a browser get 403 "
     "ui_read_only; other API clients are unaffected) or on",
     ui_choices},
};

#define OPT_COUNT (sizeof(opt_table) / sizeof(opt_table[0]))

static rmqs_rc opt_set_str(char **slot, const char *value, const char *name,
                           rmqs_error *err)
{
    char *copy = strdup(value);
    if (copy == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, name, "out of memory");
    free(*slot);
    *slot = copy;
    return RMQS_OK;
}

/* "a, b, c": the allowed names of a choice setting, for errors and --help. */
static void choice_names(const opt_choice *c, char *buf, size_t cap)
{
    size_t n = 0;

    buf[0] = '\0';
    for (; c->name != NULL && n < cap; c++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", c->name);
}

/* Set o from value. append: an OPT_INGEST flag given again adds to the
 * list (the first flag replaces what the environment gave: flags win). */
static rmqs_rc opt_set(config *cfg, const opt_def *o, const char *value,
                       const char *source, bool append, rmqs_error *err)
{
    char *base = (char *)cfg + o->offset;
    const char *name = o->flag ? o->flag : o->env;

    switch (o->type) {
    case OPT_INGEST: {
        config_ingest_list *list = (config_ingest_list *)(void *)base;
        if (!append)
            config_ingest_list_clear(list);
        return config_parse_ingest(value, list, err);
    }
    case OPT_STR: return opt_set_str((char **)(void *)base, value, name, err);
    case OPT_INT: {
        char *end = NULL;
        long long v;
        errno = 0;
        v = strtoll(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0')
            return rmqs_fail(err, RMQS_EINVAL, name, "%s %s: not an integer",
                             source, name);
        if (v < o->min || v > o->max)
            return rmqs_fail(err, RMQS_EINVAL, name,
                             "%s %s: %lld is outside %lld..%lld", source, name,
                             v, (long long)o->min, (long long)o->max);
        *(int64_t *)(void *)base = v;
        return RMQS_OK;
    }
    case OPT_ENUM:
    case OPT_BOOL:
        for (const opt_choice *c = o->choices; c->name != NULL; c++) {
            if (strcmp(value, c->name) != 0)
                continue;
            if (o->type == OPT_BOOL)
                *(bool *)(void *)base = c->value != 0;
            else
                *(int *)(void *)base = c->value;
            return RMQS_OK;
        }
        {
            char names[128];
            choice_names(o->choices, names, sizeof(names));
            return rmqs_fail(err, RMQS_EINVAL, name,
                             "%s %s: '%s' is not one of: %s", source, name,
                             value, names);
        }
    }
    return RMQS_EINVAL;
}

static const char *env_lookup(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

static const opt_def *opt_find(const char *flag, size_t len)
{
    for (size_t i = 0; i < OPT_COUNT; i++) {
        if (opt_table[i].flag != NULL && strlen(opt_table[i].flag) == len &&
            strncmp(opt_table[i].flag, flag, len) == 0)
            return &opt_table[i];
    }
    return NULL;
}

/* Replace api_token with the first line of api_token_file (any length). */
static rmqs_rc read_token_file(config *cfg, rmqs_error *err)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    FILE *f;

    if (cfg->api_token != NULL)
        return rmqs_fail(
            err, RMQS_EINVAL, "api-token-file",
            "give RMQS_API_TOKEN or RMQS_API_TOKEN_FILE, not both");
    f = fopen(cfg->api_token_file, "r");
    if (f == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "api-token-file",
                         "cannot read the token file %s: %s",
                         cfg->api_token_file, strerror(errno));
    n = getline(&line, &cap, f);
    fclose(f);
    if (n < 0) {
        free(line);
        return rmqs_fail(err, RMQS_EINVAL, "api-token-file",
                         "the token file %s is empty", cfg->api_token_file);
    }
    line[strcspn(line, "\r\n")] = '\0';
    cfg->api_token = line; /* owned now; wiped by config_clear */
    return RMQS_OK;
}

void config_usage(FILE *out)
{
    fprintf(out,
            "Usage: rmq-scheduler [options]\n"
            "Schedules messages over HTTP and publishes them to RabbitMQ when "
            "due.\n\nOptions (each also read from its environment variable; "
            "flags win):\n");
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt_def *o = &opt_table[i];
        char flag[40];
        snprintf(flag, sizeof(flag), o->flag ? "--%s" : "(environment)",
                 o->flag ? o->flag : "");
        char names[128] = "";
        if (o->choices != NULL) {
            strcpy(names, " (one of: ");
            choice_names(o->choices, names + strlen(names),
                         sizeof(names) - strlen(names) - 1);
            strcat(names, ")");
        }
        fprintf(out, "  %-29s %-32s %s%s%s%s%s\n", flag, o->env, o->help, names,
                o->def ? " (default: " : "", o->def ? o->def : "",
                o->def ? ")" : "");
    }
    fprintf(out, "  %-29s %-32s %s\n", "--help", "", "print this and exit");
    fprintf(out, "  %-29s %-32s %s\n", "--version", "", "print the version");
    fprintf(out, "  %-29s %-32s %s\n", "--healthcheck", "",
            "ask the service at --listen for /healthz; exit 0 if healthy "
            "(for container health checks)");
}

rmqs_rc config_parse_ingest(const char *text, config_ingest_list *list,
                            rmqs_error *err)
{
    ingest_mapping *grown;
    size_t n = 0, k = list->n;

    for (const char *m = text; *m != '\0';) { /* check, and count */
        size_t len = strcspn(m, ",");
        const char *eq = memchr(m, '=', len);
        if (eq == NULL || eq == m || eq == m + len - 1)
            return rmqs_fail(err, RMQS_EINVAL, "ingest",
                             "ingest '%.*s': expected INGEST_EXCHANGE="
                             "TARGET_EXCHANGE",
                             (int)len, m);
        n++;
        m += len;
        if (*m == ',')
            m++;
    }
    if (n == 0)
        return RMQS_OK;
    grown = realloc(list->maps, (k + n) * sizeof(*grown));
    if (grown == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, "ingest", "out of memory");
    list->maps = grown;
    for (const char *m = text; *m != '\0'; k++) {
        size_t len = strcspn(m, ",");
        size_t il = (size_t)((const char *)memchr(m, '=', len) - m);
        char *in = strndup(m, il), *target = strndup(m + il + 1, len - il - 1);
        if (in == NULL || target == NULL) {
            free(in);
            free(target);
            for (size_t i = list->n; i < k; i++) {
                free((char *)grown[i].ingest_exchange);
                free((char *)grown[i].target_exchange);
            }
            return rmqs_fail(err, RMQS_ENOMEM, "ingest", "out of memory");
        }
        grown[k].ingest_exchange = in;
        grown[k].target_exchange = target;
        m += len;
        if (*m == ',')
            m++;
    }
    list->n = k;
    return RMQS_OK;
}

void config_ingest_list_clear(config_ingest_list *list)
{
    for (size_t i = 0; i < list->n; i++) {
        free((char *)list->maps[i].ingest_exchange);
        free((char *)list->maps[i].target_exchange);
    }
    free(list->maps);
    list->maps = NULL;
    list->n = 0;
}

void config_clear(config *cfg)
{
    config_ingest_list_clear(&cfg->ingest);
    for (size_t i = 0; i < OPT_COUNT; i++) {
        if (opt_table[i].type == OPT_STR) {
            char **slot = (char **)(void *)((char *)cfg + opt_table[i].offset);
            if (*slot != NULL)
                explicit_bzero(*slot, strlen(*slot)); /* may be a secret */
            free(*slot);
            *slot = NULL;
        }
    }
}

rmqs_rc config_load(config *cfg, int argc, char **argv, char **envp, FILE *out,
                    config_action *action, rmqs_error *err)
{
    bool flag_seen[OPT_COUNT] = {false};
    rmqs_rc rc;

    memset(cfg, 0, sizeof(*cfg));
    *action = CONFIG_RUN;
    for (size_t i = 0; i < OPT_COUNT; i++) {
        if (opt_table[i].def == NULL)
            continue;
        rc = opt_set(cfg, &opt_table[i], opt_table[i].def, "default", false,
                     err);
        if (rc != RMQS_OK)
            return rc;
    }
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const char *v = env_lookup(envp, opt_table[i].env);
        if (v != NULL) {
            rc = opt_set(cfg, &opt_table[i], v, opt_table[i].env, false, err);
            if (rc != RMQS_OK)
                return rc;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *name, *eq, *value;
        const opt_def *o;
        size_t len;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            config_usage(out);
            *action = CONFIG_HELP;
            return RMQS_OK;
        }
        if (strcmp(arg, "--healthcheck") == 0) {
            *action = CONFIG_HEALTHCHECK; /* the other settings still apply */
            continue;
        }
        if (strcmp(arg, "--version") == 0) {
            fprintf(out, "rmq-scheduler %s\n", RMQS_VERSION);
            *action = CONFIG_VERSION;
            return RMQS_OK;
        }
        if (strncmp(arg, "--", 2) != 0)
            return rmqs_fail(err, RMQS_EINVAL, arg,
                             "unexpected argument '%s' (see --help)", arg);
        name = arg + 2;
        eq = strchr(name, '=');
        len = eq != NULL ? (size_t)(eq - name) : strlen(name);
        o = opt_find(name, len);
        if (o == NULL)
            return rmqs_fail(err, RMQS_EINVAL, arg,
                             "unknown option '%.*s' (see --help)", (int)len + 2,
                             arg);
        if (eq != NULL) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc)
                return rmqs_fail(err, RMQS_EINVAL, o->flag,
                                 "option --%s needs a value", o->flag);
            value = argv[++i];
        }
        rc = opt_set(cfg, o, value, "option", flag_seen[o - opt_table], err);
        flag_seen[o - opt_table] = true;
        if (rc != RMQS_OK)
            return rc;
    }
    if (cfg->backoff_cap_ms < cfg->backoff_base_ms)
        return rmqs_fail(
            err, RMQS_EINVAL, "backoff-cap-ms",
            "backoff-cap-ms (%lld) is below backoff-base-ms (%lld)",
            (long long)cfg->backoff_cap_ms, (long long)cfg->backoff_base_ms);
    if (cfg->api_token_file != NULL) {
        rc = read_token_file(cfg, err);
        if (rc != RMQS_OK)
            return rc;
    }
    cfg->ui_auto = cfg->ui == UI_MODE_AUTO;
    if (cfg->ui_auto) /* an open dashboard must not cancel jobs */
        cfg->ui = cfg->api_token != NULL ? UI_MODE_ON : UI_MODE_READ_ONLY;
    if (cfg->api_token != NULL && strlen(cfg->api_token) < 16)
        return rmqs_fail(err, RMQS_EINVAL, "RMQS_API_TOKEN",
                         "the API token must be at least 16 characters");
    {
        const char *files[][2] = {{"amqp-ca-file", cfg->amqp_ca_file},
                                  {"amqp-cert-file", cfg->amqp_cert_file},
                                  {"amqp-key-file", cfg->amqp_key_file}};
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
            if (files[i][1] != NULL && access(files[i][1], R_OK) != 0)
                return rmqs_fail(err, RMQS_EINVAL, files[i][0], "--%s %s: %s",
                                 files[i][0], files[i][1], strerror(errno));
    }
    {
        char host[NETADDR_HOST_MAX + 1];
        unsigned port;
        rc = netaddr_split(cfg->listen, "listen", host, &port, err);
        if (rc != RMQS_OK)
            return rc;
    }
    {
        http_origins *o;
        rc = http_origins_new(cfg->public_origin, cfg->listen,
                              cfg->tls_cert_file != NULL, &o, err);
        if (rc != RMQS_OK)
            return rc;
        http_origins_free(o);
    }
    if (cfg->ingest_invalid == INGEST_INVALID_DEAD_LETTER &&
        cfg->ingest_dlx == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "ingest-dead-letter-exchange",
                         "--ingest-invalid=dead-letter needs "
                         "--ingest-dead-letter-exchange");
    if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL))
        return rmqs_fail(err, RMQS_EINVAL, "tls-cert-file",
                         "HTTPS needs both --tls-cert-file and --tls-key-file");
    return RMQS_OK;
}
