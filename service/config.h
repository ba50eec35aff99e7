/*
 * config.h - the service's settings, from flags and RMQS_* environment
 * variables, driven by one table (config.c) that also prints --help, so the
 * parser, the help text and the README never disagree.
 *
 * Precedence: defaults < environment < command line.
 */
#ifndef RMQS_CONFIG_H
#define RMQS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "rmqs.h"

typedef struct config {
    char *listen;            /* "host:port" (owned) */
    char *db_path;           /* owned */
    char *amqp_url;          /* owned; holds a credential: never log it */
    int64_t max_attempts;    /* default max_attempts of a job */
    int64_t backoff_base_ms;
    int64_t backoff_cap_ms;
    int64_t max_body_bytes;  /* request bodies above this get 413 */
    int64_t max_delay_days;  /* scheduling horizon */
    int64_t heartbeat_s;
    int64_t confirm_timeout_ms;
    int64_t batch_size;
    int64_t publish_window;
    int64_t dispatch_lookahead_ms;
    int64_t dispatch_rt_priority; /* publisher thread SCHED_FIFO; 0 = off */
    int64_t http_threads;
    int64_t http_timeout_s;  /* idle connection timeout */
    int64_t http_max_conns;
    int64_t http_max_conns_per_ip;
    int64_t shutdown_grace_s;
    int64_t retention_s;     /* finished jobs kept this long; 0 = forever */
    int64_t purge_interval_s;
    int64_t write_queue_bytes; /* admission budget of the writer */
    int64_t min_free_bytes;  /* disk reserve kept for delivering stored jobs */
    bool sync_full;          /* synchronous=FULL (true) or NORMAL */
    char *log_level;         /* owned: debug|info|warn|error */
    char *log_format;        /* owned: text|json */
    char *api_token;         /* owned or NULL; a credential: never log it */
    char *api_token_file;    /* owned or NULL; read into api_token at load */
    char *allow_exchanges;   /* owned or NULL: comma list, "prefix*" allowed */
    char *tls_cert_file;     /* owned or NULL: HTTPS certificate (PEM) */
    char *tls_key_file;      /* owned or NULL: its key (PEM) */
    char *amqp_ca_file;      /* owned or NULL */
    char *amqp_cert_file;    /* owned or NULL */
    char *amqp_key_file;     /* owned or NULL */
    char *ingest;            /* owned or NULL: "ingest=target,..." */
    int64_t ingest_prefetch;
    char *ingest_invalid;    /* owned: route|dead-letter */
    char *ingest_dlx;        /* owned or NULL: dead-letter exchange */
} config;

typedef enum config_action {
    CONFIG_RUN,     /* parsed: run the service */
    CONFIG_HELP,    /* --help was asked: usage printed */
    CONFIG_VERSION, /* --version was asked: version printed */
    CONFIG_HEALTHCHECK /* --healthcheck: probe the running service's /healthz */
} config_action;

/*
 * Fill *cfg from defaults, the environment (envp, NULL-terminated) and argv.
 * On RMQS_EINVAL err says which setting and why. *action tells what main
 * should do. The caller owns cfg (config_clear), also on failure.
 */
rmqs_rc config_load(config *cfg, int argc, char **argv, char **envp,
                    FILE *out, config_action *action, rmqs_error *err);
void config_clear(config *cfg);

/* Print usage: one line per setting with flag, variable, default, help. */
void config_usage(FILE *out);

#endif
