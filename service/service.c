/*
 * service.c - wires the subsystems together (see service.h).
 *
 *   HTTP (http_api) -> validate (job) -> writer (group commit) -> store
 *   AMQP ingest (amqp_ingest) -> writer
 *   dispatcher (due) -> amqp_publisher (confirm) -> store (sent)
 *   scheduler (recurring schedules) -> store (runs as pending jobs, ahead)
 *
 * Start-up order: each subsystem starts after the ones it hands work to, so
 * nothing is accepted before it can be stored and published. Stop order is
 * the reverse where it matters: stop accepting connections, let the ingest
 * batch in hand be committed and acknowledged, commit the jobs already
 * handed to the writer and answer them, close the HTTP server, let the
 * dispatcher settle the batch in flight, close the database. A watchdog
 * ends the process with status 1 if that takes longer than the configured
 * grace period.
 *
 * The log lines of the lifecycle keep module=main, as operators know them.
 */
#include "service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>

#include "amqp_conn.h"
#include "amqp_ingest.h"
#include "amqp_publisher.h"
#include "dispatcher.h"
#include "http_api.h"
#include "janitor.h"
#include "stats.h"
#include "log.h"
#include "netaddr.h"
#include "pubpol.h"
#include "fair.h"
#include "scheduler.h"
#include "store.h"
#include "worker.h"
#include "tz.h"
#include "writer.h"

#define MOD "main"

/* Rows in one group commit at most: bounds the transaction, not the rate. */
#define WRITER_MAX_ROWS 4096
#define FAIR_MAX_KEYS 100000 /* --fair-key values remembered (fair.h) */

struct service {
    const config *cfg; /* borrowed */
    int lock_fd;       /* the database lock, -1 if not taken */
    store_t *st;
    janitor_t *janitor;
    amqpp_t *pub; /* the AMQP publisher, owned by disp once it exists */
    disp_t *disp;
    writer_t *writer;
    scheduler_t *scheduler; /* the runs of recurring schedules */
    ingest_t *ingest;       /* NULL: no --ingest */
    stats_t *stats;         /* the history of GET /stats */
    bulk_t *bulk;           /* POST /jobs/bulk's runner */
    http_api_t *api;
    pubpol_t *policy;     /* the publish policy: HTTP, ingest and publisher */
    fair_t *fair;         /* --fair-key's ranks (the writer's); NULL: off */
    _Atomic bool serving; /* HTTP is up: "ready" may be logged */
    _Atomic bool ready_logged; /* the "ready" line was written */
};

static bool ingest_up(void *cls)
{
    return ingest_connected(cls);
}

/* PUT, PATCH, DELETE /limits: the dispatcher reads them again before its
 * next claim. */
static void limits_changed(void *cls)
{
    disp_limits_changed(cls);
}

/* Create the folder that will hold path (like mkdir -p of its dirname). */
static rmqs_rc make_parent_dirs(const char *path, rmqs_error *err)
{
    char buf[PATH_MAX];
    char *slash;

    if (strlen(path) >= sizeof(buf))
        return rmqs_fail(err, RMQS_EINVAL, "db", "database path too long");
    strcpy(buf, path);
    slash = strrchr(buf, '/');
    if (slash == NULL || slash == buf)
        return RMQS_OK;
    *slash = '\0';
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0750) != 0 && errno != EEXIST)
            return rmqs_fail(err, RMQS_ESYS, "db", "cannot create %s: %s", buf,
                             strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0750) != 0 && errno != EEXIST)
        return rmqs_fail(err, RMQS_ESYS, "db", "cannot create %s: %s", buf,
                         strerror(errno));
    return RMQS_OK;
}

/*
 * One process per database: take an exclusive lock on "<db>.lock" (held
 * until exit, released by the kernel even on SIGKILL). Returns the fd, or
 * -1 with err filled.
 */
static int lock_database(const char *db_path, rmqs_error *err)
{
    char path[PATH_MAX];
    int fd;

    if ((size_t)snprintf(path, sizeof(path), "%s.lock", db_path) >=
        sizeof(path)) {
        rmqs_fail(err, RMQS_EINVAL, "db", "database path too long");
        return -1;
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        rmqs_fail(err, RMQS_ESYS, "db", "cannot open %s: %s", path,
                  strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        rmqs_fail(err, RMQS_ESYS, "db",
                  errno == EWOULDBLOCK
                      ? "another rmq-scheduler process is using %s"
                      : "cannot lock %s: %s",
                  db_path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* The grace period travels in the pointer itself: svc is freed while this
 * thread may still be waiting, so it has a home of its own that lasts as
 * long as the process, and nobody joins it. */
static worker_thread grace_wd;

static void *grace_watchdog(void *arg)
{
    int64_t secs = (int64_t)(intptr_t)arg;
    sleep((unsigned)secs);
    log_error(MOD, "shutdown grace period exceeded; exiting", "grace_s=%lld",
              (long long)secs);
    _exit(1);
    return NULL;
}

/* A subsystem's thread started (rc), or the failure logged as what. */
static rmqs_rc thread_started(rmqs_rc rc, const char *what)
{
    if (rc == RMQS_OK)
        return RMQS_OK;
    log_error(MOD, what, NULL);
    return RMQS_ESYS;
}

/* The database: its folder, the one-process lock, open (migrations), and
 * jobs a previous run left in flight made due again. */
static rmqs_rc open_database(service_t *svc)
{
    const config *cfg = svc->cfg;
    rmqs_error err = {0};
    size_t recovered = 0;

    /* a file gets its folder and a lock beside it; a URL (refused by the
     * store for now) neither, and is never logged: it may hold a password */
    bool file = store_is_file(cfg->db_path);

    if (file && make_parent_dirs(cfg->db_path, &err) != RMQS_OK) {
        log_error(MOD, "cannot prepare the database folder", "error=\"%s\"",
                  err.message);
        return RMQS_ESYS;
    }
    svc->lock_fd = file ? lock_database(cfg->db_path, &err) : -1;
    if (file && svc->lock_fd < 0) {
        log_error(MOD, "cannot lock the database", "error=\"%s\"", err.message);
        return RMQS_ESYS;
    }
    if (store_open(
            cfg->db_path,
            &(store_options){.synchronous_full = cfg->sync_full,
                             .manual_checkpoint = true,
                             .lease_ms = cfg->lease_ms,
                             .db_timeout_ms = cfg->db_timeout_ms,
                             .wake_horizon_ms = cfg->dispatch_lookahead_ms +
                                                2 * DISP_REPLAN_MS,
                             .search_budget_ms = cfg->search_timeout_ms,
                             .page_max_bytes = (size_t)cfg->page_max_bytes},
            &svc->st, &err) != RMQS_OK) {
        log_error(MOD, "cannot open the database", "db=\"%s\" error=\"%s\"",
                  file ? cfg->db_path : "(a URL)", err.message);
        return RMQS_EDB;
    }
    if (store_recover(svc->st, &recovered) != RMQS_OK) {
        log_error(MOD, "cannot recover jobs left in flight", "db=\"%s\"",
                  file ? cfg->db_path : "(a URL)");
        return RMQS_EDB;
    }
    if (recovered > 0)
        log_warn(MOD,
                 "jobs left publishing by a previous run will be "
                 "published again",
                 "n=%zu", recovered);
    return RMQS_OK;
}

/* --fair-key: the ranks the writer gives new jobs (flow/fair.h). A key
 * that does not parse is a start-up error. */
static rmqs_rc make_fair(service_t *svc)
{
    const config *cfg = svc->cfg;
    rmqs_error err = {0};

    if (cfg->fair_key != NULL && cfg->fair_key[0] != '\0') {
        flow_key k = {0};
        if (flow_key_parse(cfg->fair_key, &k, &err) != RMQS_OK) {
            log_error(MOD, "invalid --fair-key", "fair_key=\"%s\" error=\"%s\"",
                      cfg->fair_key, err.message);
            return RMQS_EINVAL;
        }
        svc->fair = fair_new(&k, FAIR_MAX_KEYS);
        flow_key_clear(&k);
        if (svc->fair == NULL) {
            log_error(MOD, "out of memory", NULL);
            return RMQS_ENOMEM;
        }
    }
    return RMQS_OK;
}

/* The publish policy: --allow-exchanges, and the login the broker URLs
 * share (user_id must equal it). An --ingest target the list refuses is a
 * start-up error: its every message would fail. */
static rmqs_rc make_policy(service_t *svc)
{
    const config *cfg = svc->cfg;
    rmqs_error err = {0};
    amqpc_t *c = amqpc_new(&(amqpc_options){.url = cfg->amqp_url}, &err);
    char *login = NULL;
    bool one_user = true;

    if (c == NULL) {
        log_error(MOD, "bad AMQP settings", "error=\"%s\"", err.message);
        return RMQS_EINVAL;
    }
    for (size_t i = 0, n = amqpc_url_count(c); i < n; i++, amqpc_next_url(c)) {
        amqpc_url_parts u;
        amqpc_current(c, &u);
        if (i == 0)
            login = strdup(u.user);
        else if (login != NULL && strcmp(login, u.user) != 0)
            one_user = false;
    }
    amqpc_free(c);
    svc->policy =
        pubpol_new(cfg->allow_exchanges, one_user ? login : NULL, &err);
    free(login);
    if (svc->policy == NULL) {
        log_error(MOD, "out of memory", NULL);
        return RMQS_ENOMEM;
    }
    for (size_t i = 0; i < cfg->ingest.n; i++) {
        const ingest_mapping *m = &cfg->ingest.maps[i];
        if (!pubpol_exchange_allowed(svc->policy, m->target_exchange)) {
            log_error(MOD, "an --ingest target is not in --allow-exchanges",
                      "ingest=\"%s=%s\" allow_exchanges=\"%s\"",
                      m->ingest_exchange, m->target_exchange,
                      cfg->allow_exchanges);
            return RMQS_EINVAL;
        }
    }
    return RMQS_OK;
}

/* "ready" once, when both HTTP serves and the broker answers, whichever
 * comes last (the dispatcher's thread or the starting one): before, the
 * service accepts jobs but /readyz is 503, and the log says so. */
static void log_ready(service_t *svc)
{
    const config *cfg = svc->cfg;
    char ui[320] = "off";

    if (!atomic_load(&svc->serving) || !disp_broker_connected(svc->disp) ||
        atomic_exchange(&svc->ready_logged, true))
        return;
    if (cfg->ui != UI_MODE_OFF)
        snprintf(ui, sizeof(ui), "%s://%s/ui/",
                 cfg->tls_cert_file != NULL ? "https" : "http", cfg->listen);
    log_info(MOD, "ready", "listen=%s amqp=%s dashboard=%s", cfg->listen,
             amqpp_safe_url(svc->pub), ui);
}

static void on_broker_connected(void *cls)
{
    log_ready(cls);
}

/* The AMQP publisher and the dispatcher that owns it, started. */
static rmqs_rc start_dispatcher(service_t *svc)
{
    const config *cfg = svc->cfg;
    rmqs_error err = {0};
    amqpp_t *pub;

    pub = amqpp_new(&(amqpp_options){.url = cfg->amqp_url,
                                     .heartbeat_s = (int)cfg->heartbeat_s,
                                     .connect_timeout_ms = 5000,
                                     .ca_file = cfg->amqp_ca_file,
                                     .cert_file = cfg->amqp_cert_file,
                                     .key_file = cfg->amqp_key_file,
                                     .policy = svc->policy},
                    &err);
    if (pub == NULL) {
        log_error(MOD, "bad AMQP settings", "error=\"%s\"", err.message);
        return RMQS_EINVAL;
    }
    svc->disp = disp_new(
        svc->st, pub,
        &(disp_options){.batch_size = (int)cfg->batch_size,
                        .window = (int)cfg->publish_window,
                        .lookahead_ms = cfg->dispatch_lookahead_ms,
                        .rt_priority = (int)cfg->dispatch_rt_priority,
                        .backoff_base_ms = cfg->backoff_base_ms,
                        .backoff_cap_ms = cfg->backoff_cap_ms,
                        .confirm_timeout_ms = (int)cfg->confirm_timeout_ms,
                        .heartbeat_s = (int)cfg->heartbeat_s,
                        .on_connected = on_broker_connected,
                        .connected_cls = svc});
    if (svc->disp == NULL) {
        amqpp_free(pub);
        log_error(MOD, "out of memory", NULL);
        return RMQS_ENOMEM;
    }
    svc->pub = pub;
    return thread_started(disp_start(svc->disp),
                          "cannot start the dispatcher thread");
}

/* The --ingest consumers, if any mapping is configured. */
static rmqs_rc start_ingest(service_t *svc, const job_limits *limits)
{
    const config *cfg = svc->cfg;
    rmqs_error err = {0};

    if (cfg->ingest.n == 0)
        return RMQS_OK;
    svc->ingest =
        ingest_new(&(ingest_options){.url = cfg->amqp_url,
                                     .heartbeat_s = (int)cfg->heartbeat_s,
                                     .ca_file = cfg->amqp_ca_file,
                                     .cert_file = cfg->amqp_cert_file,
                                     .key_file = cfg->amqp_key_file,
                                     .mappings = cfg->ingest.maps,
                                     .n_mappings = cfg->ingest.n,
                                     .prefetch = (unsigned)cfg->ingest_prefetch,
                                     .invalid_rule = cfg->ingest_invalid,
                                     .dead_letter_exchange = cfg->ingest_dlx,
                                     .limits = *limits},
                   svc->writer, &err);
    if (svc->ingest == NULL) {
        log_error(MOD, "bad ingest settings", "error=\"%s\"", err.message);
        return RMQS_EINVAL;
    }
    return thread_started(ingest_start(svc->ingest),
                          "cannot start the ingest thread");
}

/* Every --amqp-url with its password replaced, comma-separated, for the
 * dashboard's About page (malloc'd; NULL if out of memory). */
static char *safe_amqp_urls(const config *cfg)
{
    rmqs_error err = {0};
    amqpc_t *c = amqpc_new(&(amqpc_options){.url = cfg->amqp_url}, &err);
    char *out = NULL;
    size_t len = 0;

    if (c == NULL) /* checked by the dispatcher before this runs */
        return strdup("");
    for (size_t i = 0, n = amqpc_url_count(c); i < n; i++, amqpc_next_url(c)) {
        const char *u = amqpc_safe_url(c);
        char *grown = realloc(out, len + strlen(u) + 2);
        if (grown == NULL) {
            free(out);
            out = NULL;
            break;
        }
        out = grown;
        len += (size_t)sprintf(out + len, "%s%s", i ? "," : "", u);
    }
    amqpc_free(c);
    return out;
}

static rmqs_rc start_http(service_t *svc, const job_limits *limits)
{
    const config *cfg = svc->cfg;
    rmqs_error err = {0};
    char *broker_urls = safe_amqp_urls(cfg);
    rmqs_rc rc = RMQS_OK;

    if (http_api_start(
            &(http_api_options){
                .listen = cfg->listen,
                .max_body_bytes = (size_t)cfg->max_body_bytes,
                .threads = (unsigned)cfg->http_threads,
                .conn_timeout_s = (unsigned)cfg->http_timeout_s,
                .max_conns = (unsigned)cfg->http_max_conns,
                .max_conns_per_ip = (unsigned)cfg->http_max_conns_per_ip,
                .header_timeout_s = (unsigned)cfg->http_header_timeout_s,
                .body_timeout_s = (unsigned)cfg->http_body_timeout_s,
                .limits = *limits,
                .api_token = cfg->api_token,
                .policy = svc->policy,
                .max_schedules = cfg->max_schedules,
                .max_limits = cfg->max_limits,
                .limits_changed = limits_changed,
                .limits_cls = svc->disp,
                .public_origins = cfg->public_origin,
                .tls_cert_file = cfg->tls_cert_file,
                .tls_key_file = cfg->tls_key_file,
                .ingest_up = svc->ingest != NULL ? ingest_up : NULL,
                .ingest_cls = svc->ingest,
                .scheduler = svc->scheduler,
                .stats = svc->stats,
                .bulk = svc->bulk,
                .tzdata_version = tz_data_version(),
                .ui = cfg->ui,
                .ui_settings = cfg,
                .ui_broker_urls = broker_urls},
            svc->st, svc->disp, svc->writer, &svc->api, &err) != RMQS_OK) {
        log_error(MOD, "cannot start the HTTP server", "error=\"%s\"",
                  err.message);
        rc = RMQS_ESYS;
    }
    free(broker_urls);
    return rc;
}

/* Stop and free whatever was started, in the order that loses nothing. */
static void teardown(service_t *svc)
{
    http_api_quiesce(svc->api); /* no new connections */
    ingest_stop(svc->ingest);   /* its last batch committed and acknowledged;
                                   freed after HTTP, whose /readyz asks it */
    /* Requests in progress are still committed and answered while the
     * writer runs, also those on connections accepted before the listener
     * closed whose request had not arrived yet; bounded, since keep-alive
     * clients may keep sending. */
    if (!http_api_drain(svc->api, 2000, true))
        log_warn(MOD, "requests still in progress at shutdown", NULL);
    writer_stop(svc->writer); /* commits what was handed over; resumes them */
    http_api_drain(svc->api, 2000, false); /* lets those be answered */
    http_api_stop(svc->api);               /* closes every connection */
    ingest_free(svc->ingest);
    bulk_free(svc->bulk); /* a bulk action ends after its page; wakes disp */
    scheduler_free(svc->scheduler); /* its pass in progress ends; it wakes
                                       the dispatcher, so before it goes */
    if (svc->disp != NULL)
        disp_free(svc->disp); /* records what is in flight; frees pub */
    writer_free(svc->writer);
    stats_free(svc->stats); /* after HTTP, which reads it */
    janitor_free(svc->janitor);
    store_close(svc->st);
    if (svc->lock_fd >= 0)
        close(svc->lock_fd);
    pubpol_free(svc->policy); /* after every thread that reads it */
    fair_free(svc->fair);     /* after the writer */
    free(svc);
}

rmqs_rc service_start(const config *cfg, service_t **out)
{
    /* The one set of job limits, for HTTP and ingest alike. */
    const job_limits limits = {.default_max_attempts = (int)cfg->max_attempts,
                               .max_max_attempts = CONFIG_MAX_ATTEMPTS_MAX,
                               .max_delay_ms =
                                   cfg->max_delay_days * 86400000LL};
    service_t *svc;
    rmqs_rc rc;

    *out = NULL;
    json_object_seed(0); /* before any thread uses jansson */
    log_set_level(cfg->log_level);
    log_set_format(cfg->log_format);
    log_info(MOD, "starting",
             "version=%s tzdata=%s db=\"%s\" listen=%s sync=%s", RMQS_VERSION,
             tz_data_version(),
             store_is_file(cfg->db_path) ? cfg->db_path : "(a URL)",
             cfg->listen, cfg->sync_full ? "full" : "normal");
    svc = calloc(1, sizeof(*svc));
    if (svc == NULL) {
        log_error(MOD, "out of memory", NULL);
        return RMQS_ENOMEM;
    }
    svc->cfg = cfg;
    svc->lock_fd = -1;
    rc = make_policy(svc); /* a setting: refused before the database opens */
    if (rc == RMQS_OK)
        rc = make_fair(svc);
    if (rc == RMQS_OK)
        rc = open_database(svc);
    if (rc != RMQS_OK)
        goto fail;
    svc->janitor = janitor_new(
        svc->st,
        &(janitor_options){.retention_ms = cfg->retention_s * 1000,
                           .purge_interval_ms = cfg->purge_interval_s * 1000,
                           .checkpoint_interval_ms = 1000,
                           .purge_batch = 500});
    rc = thread_started(svc->janitor == NULL ? RMQS_ENOMEM
                                             : janitor_start(svc->janitor),
                        "cannot start the janitor thread");
    if (rc == RMQS_OK) {
        svc->stats = stats_new(svc->st, cfg->stats_interval_ms);
        rc = thread_started(svc->stats == NULL ? RMQS_ENOMEM
                                               : stats_start(svc->stats),
                            "cannot start the stats thread");
    }
    if (rc == RMQS_OK)
        rc = start_dispatcher(svc);
    if (rc != RMQS_OK)
        goto fail;
    svc->writer =
        writer_new(svc->st, svc->disp, WRITER_MAX_ROWS, cfg->min_free_bytes);
    if (svc->writer != NULL) {
        writer_set_admission_budget(svc->writer,
                                    (size_t)cfg->write_queue_bytes);
        writer_set_fair(svc->writer, svc->fair);
    }
    rc = thread_started(svc->writer == NULL ? RMQS_ENOMEM
                                            : writer_start(svc->writer),
                        "cannot start the writer thread");
    if (rc == RMQS_OK) {
        /* After the dispatcher (it wakes it for each run), before HTTP
         * (which tells it of changes). */
        svc->scheduler =
            scheduler_new(svc->st, svc->disp,
                          &(scheduler_options){.lead_ms = cfg->schedule_lead_ms,
                                               .limits = limits});
        rc = thread_started(svc->scheduler == NULL
                                ? RMQS_ENOMEM
                                : scheduler_start(svc->scheduler),
                            "cannot start the scheduler thread");
    }
    if (rc == RMQS_OK) {
        svc->bulk = bulk_new(svc->st, svc->disp, cfg->bulk_pause_ms);
        rc = thread_started(svc->bulk == NULL ? RMQS_ENOMEM
                                              : bulk_start(svc->bulk),
                            "cannot start the bulk action thread");
    }
    if (rc == RMQS_OK)
        rc = start_ingest(svc, &limits);
    if (rc == RMQS_OK)
        rc = start_http(svc, &limits);
    if (rc != RMQS_OK)
        goto fail;
    /* "ready" names the dashboard's address, so that the quick start's
     * reader finds it in the line they wait for. */
    atomic_store(&svc->serving, true);
    log_ready(svc);
    if (!atomic_load(&svc->ready_logged))
        log_warn(MOD,
                 "serving, not ready: the broker does not answer yet; "
                 "jobs are accepted and kept",
                 "listen=%s amqp=%s", cfg->listen, amqpp_safe_url(svc->pub));
    *out = svc;
    return RMQS_OK;
fail:
    teardown(svc);
    return rc;
}

void service_stop(service_t *svc, int sig)
{
    log_info(MOD, "stopping", "signal=%s grace_s=%lld",
             sig == SIGTERM ? "SIGTERM" : "SIGINT",
             (long long)svc->cfg->shutdown_grace_s);
    if (worker_thread_start(&grace_wd, "rmqs-grace", grace_watchdog,
                            (void *)(intptr_t)svc->cfg->shutdown_grace_s) ==
        RMQS_OK)
        worker_thread_detach(&grace_wd);
    else
        log_warn(MOD, "no shutdown watchdog: the stop is not bounded", NULL);
    teardown(svc);
    log_info(MOD, "stopped", NULL);
}

int service_healthcheck(const config *cfg)
{
    char host[NETADDR_HOST_MAX + 1], port[8], req[512], resp[64];
    struct addrinfo hints = {0}, *res = NULL;
    struct timeval tv = {3, 0};
    unsigned port_n;
    ssize_t n;
    int fd = -1, status = 1;

    if (netaddr_split(cfg->listen, "listen", host, &port_n, NULL) != RMQS_OK)
        return 1;
    if (strcmp(host, "0.0.0.0") == 0)
        strcpy(host, "127.0.0.1");
    else if (strcmp(host, "::") == 0)
        strcpy(host, "::1");
    snprintf(port, sizeof(port), "%u", port_n);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return 1;
    fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0)
        goto out;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, res->ai_addr, res->ai_addrlen) != 0)
        goto out;
    if (cfg->tls_cert_file != NULL) {
        status = 0;
        goto out;
    }
    snprintf(req, sizeof(req),
             "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
             host);
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        goto out;
    n = recv(fd, resp, sizeof(resp) - 1, 0);
    if (n > 0) {
        resp[n] = '\0';
        status = strncmp(resp, "HTTP/1.1 200", 12) == 0 ? 0 : 1;
    }
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return status;
}
