/*
 * config.h - the service's settings, from flags and RMQS_* environment
 * variables, driven by one table (config.c) that also prints --help, so the
 * parser, the help text and the README never disagree.
 *
 * Precedence: defaults < environment < command line.
 *
 * Settings with a fixed set of values (--sync, --log-level, --log-format,
 * --ingest-invalid, --ui) are typed here: the table lists the allowed names and
 * what each maps to, so consumers get an enum, never a string to compare.
 * --ingest arrives parsed, as a list of mappings.
 */
#ifndef RMQS_CONFIG_H
#define RMQS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"
#include "rmqs.h"

/* The largest max_attempts a job may ask for (the --max-attempts bound). */
#define CONFIG_MAX_ATTEMPTS_MAX 1000

/* One --ingest mapping: INGEST=TARGET. */
typedef struct ingest_mapping {
    const char *ingest_exchange; /* where publishers send */
    const char *target_exchange; /* where due messages go */
} ingest_mapping;

/* The parsed --ingest / RMQS_INGEST mappings; config owns the strings. */
typedef struct config_ingest_list {
    ingest_mapping *maps; /* owned array of n */
    size_t n;
} config_ingest_list;

/* --ingest-invalid: what becomes of a message without a valid x-delay. */
typedef enum ingest_invalid_rule {
    INGEST_INVALID_ROUTE,      /* like the plugin: publish at once (delay 0) */
    INGEST_INVALID_DEAD_LETTER /* reject to dead_letter_exchange */
} ingest_invalid_rule;

/* --ui: the dashboard at /ui/ (http_ui.c). config_load resolves
 * UI_MODE_AUTO: on when an API token is set, read-only when none is. */
typedef enum ui_mode {
    UI_MODE_AUTO,      /* only before config_load has resolved it */
    UI_MODE_OFF,       /* /ui/ is 404 */
    UI_MODE_READ_ONLY, /* the page hides actions; browsers' changes get 403 */
    UI_MODE_ON         /* the page offers every action the API has */
} ui_mode;

typedef struct config {
    char *listen;         /* "host:port" (owned) */
    char *db_path;        /* owned */
    char *amqp_url;       /* owned; holds a credential: never log it */
    int64_t max_attempts; /* default max_attempts of a job */
    int64_t backoff_base_ms;
    int64_t backoff_cap_ms;
    int64_t max_body_bytes; /* request bodies above this get 413 */
    int64_t max_delay_days; /* scheduling horizon */
    int64_t heartbeat_s;
    int64_t confirm_timeout_ms;
    int64_t batch_size;
    int64_t publish_window;
    int64_t dispatch_lookahead_ms;
    char *fair_key; /* owned; NULL: no fair dispatch (flow/fair.h) */
    int64_t dispatch_rt_priority; /* publisher thread SCHED_FIFO; 0 = off */
    int64_t http_threads;
    int64_t http_timeout_s; /* idle connection timeout */
    int64_t http_max_conns;
    int64_t http_max_conns_per_ip; /* 0: a tenth of http_max_conns */
    int64_t http_header_timeout_s; /* headers in by then, however slow */
    int64_t http_body_timeout_s;   /* body in by then after the headers */
    int64_t shutdown_grace_s;
    int64_t retention_s; /* finished jobs kept this long; 0 = forever */
    int64_t purge_interval_s;
    int64_t write_queue_bytes; /* admission budget of the writer */
    int64_t page_max_bytes;    /* a list page stops at this many bytes */
    int64_t min_free_bytes; /* disk reserve kept for delivering stored jobs */
    int64_t lease_ms;       /* PostgreSQL: a claim's lease (renewed) */
    int64_t db_timeout_ms;  /* PostgreSQL: the longest one call may take */
    int64_t search_timeout_ms; /* a list, count or search's budget */
    int64_t max_schedules;     /* PUT refuses to create more */
    int64_t max_limits;        /* PUT /limits refuses to create more */
    int64_t schedule_lead_ms;  /* runs of schedules are created this early */
    int64_t stats_interval_ms; /* GET /stats samples this often */
    int64_t bulk_pause_ms;     /* pause between the pages of a bulk action */
    bool sync_full;            /* --sync full (true) or normal */
    log_level log_level;       /* least severe level written */
    log_format log_format;     /* text or json lines */
    char *api_token;           /* owned or NULL; a credential: never log it */
    char *api_token_file;      /* owned or NULL; read into api_token at load */
    char *allow_exchanges; /* owned or NULL: comma list, "prefix*" allowed */
    char *public_origin;   /* owned or NULL: origins besides the listen
                                address (http_origin.h) */
    char *tls_cert_file;   /* owned or NULL: HTTPS certificate (PEM) */
    char *tls_key_file;    /* owned or NULL: its key (PEM) */
    char *amqp_ca_file;    /* owned or NULL */
    char *amqp_cert_file;  /* owned or NULL */
    char *amqp_key_file;   /* owned or NULL */
    config_ingest_list ingest; /* owned; n == 0: no ingest */
    int64_t ingest_prefetch;
    ingest_invalid_rule ingest_invalid;
    char *ingest_dlx; /* owned or NULL: dead-letter exchange */
    ui_mode ui;       /* resolved: never UI_MODE_AUTO after load */
    bool ui_auto;     /* --ui auto chose it */
} config;

typedef enum config_action {
    CONFIG_RUN,        /* parsed: run the service */
    CONFIG_HELP,       /* --help was asked: usage printed */
    CONFIG_VERSION,    /* --version was asked: version printed */
    CONFIG_HEALTHCHECK /* --healthcheck: probe the running service's /healthz */
} config_action;

/*
 * Fill *cfg from defaults, the environment (envp, NULL-terminated) and argv.
 * On RMQS_EINVAL err says which setting and why. *action tells what main
 * should do. The caller owns cfg (config_clear), also on failure.
 */
rmqs_rc config_load(config *cfg, int argc, char **argv, char **envp, FILE *out,
                    config_action *action, rmqs_error *err);
void config_clear(config *cfg);

/* Print usage: one line per setting with flag, variable, help (with the
 * allowed values of a choice), default. */
void config_usage(FILE *out);

/*
 * Parse "INGEST=TARGET[,INGEST=TARGET...]" (one --ingest value or
 * RMQS_INGEST) and append the mappings to *list. Each item splits at its
 * first '='; both sides must be non-empty (the exchange names themselves
 * are checked by ingest_map_check). An empty text adds nothing. RMQS_EINVAL
 * (field "ingest") or RMQS_ENOMEM with err; *list is unchanged then.
 */
rmqs_rc config_parse_ingest(const char *text, config_ingest_list *list,
                            rmqs_error *err);

/* Free the mappings and empty the list. */
void config_ingest_list_clear(config_ingest_list *list);

#endif
