/*
 * main.c - wires the subsystems together and owns the process lifecycle.
 *
 *   HTTP (http_api) -> validate (job) -> writer (group commit) -> store
 *   dispatcher (due) -> amqp_publisher (confirm) -> store (sent)
 *
 * Signals are blocked in every thread and taken synchronously here with
 * sigwait(), so shutdown work runs in ordinary code, not in a handler:
 * stop accepting connections, commit the jobs already handed to the writer
 * and answer them, close the HTTP server, let the
 * dispatcher settle the batch in flight, close the database, exit 0. A
 * watchdog ends the process with status 1 if that takes longer than the
 * configured grace period.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "amqp_ingest.h"
#include "amqp_publisher.h"
#include "config.h"
#include "dispatcher.h"
#include "http_api.h"
#include "janitor.h"
#include "log.h"
#include "store.h"
#include "writer.h"

extern char **environ;

/* Rows in one group commit at most: bounds the transaction, not the rate. */
#define WRITER_MAX_ROWS 4096

/*
 * Split cfg->ingest ("a=b,c=d", checked by config_load) into mappings
 * pointing into *buf_out (caller frees both). Returns the count, -1 on
 * ENOMEM.
 */
static long ingest_mappings(const config *cfg, ingest_mapping **maps_out,
                            char **buf_out)
{
    ingest_mapping *maps;
    char *buf, *save = NULL, *item;
    long n = 0;

    *maps_out = NULL;
    *buf_out = NULL;
    if (cfg->ingest == NULL || *cfg->ingest == '\0')
        return 0;
    buf = strdup(cfg->ingest);
    maps = calloc(strlen(cfg->ingest) / 2 + 1, sizeof(*maps));
    if (buf == NULL || maps == NULL) {
        free(buf);
        free(maps);
        return -1;
    }
    for (item = strtok_r(buf, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        *eq = '\0';
        maps[n].ingest_exchange = item;
        maps[n].target_exchange = eq + 1;
        n++;
    }
    *maps_out = maps;
    *buf_out = buf;
    return n;
}

static bool ingest_up(void *cls)
{
    return ingest_connected(cls);
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
 * --healthcheck: GET /healthz from the service listening at cfg->listen
 * (a wildcard address is reached through loopback). With HTTPS configured
 * only the TCP connection is checked. Returns the process exit status.
 */
static int healthcheck(const config *cfg)
{
    char host[256], port[16], req[512], resp[64];
    const char *colon = strrchr(cfg->listen, ':');
    struct addrinfo hints = {0}, *res = NULL;
    struct timeval tv = {3, 0};
    size_t hl;
    ssize_t n;
    int fd = -1, status = 1;

    if (colon == NULL || (hl = (size_t)(colon - cfg->listen)) >= sizeof(host))
        return 1;
    memcpy(host, cfg->listen, hl);
    host[hl] = '\0';
    if (host[0] == '[') { /* [v6] */
        memmove(host, host + 1, hl);
        host[strcspn(host, "]")] = '\0';
    }
    if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
        strcpy(host, "127.0.0.1");
    else if (strcmp(host, "::") == 0)
        strcpy(host, "::1");
    snprintf(port, sizeof(port), "%s", colon + 1);
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

/*
 * One process per database: take an exclusive lock on "<db>.lock" (held
 * until exit, released by the kernel even on SIGKILL). Returns the fd, or
 * -1 with err filled.
 */
static int lock_database(const char *db_path, rmqs_error *err)
{
    char path[PATH_MAX];
    int fd;

    if ((size_t)snprintf(path, sizeof(path), "%s.lock", db_path) >= sizeof(path)) {
        rmqs_fail(err, RMQS_EINVAL, "db", "database path too long");
        return -1;
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        rmqs_fail(err, RMQS_ESYS, "db", "cannot open %s: %s", path, strerror(errno));
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

static void *grace_watchdog(void *arg)
{
    int64_t secs = *(int64_t *)arg;
    sleep((unsigned)secs);
    log_error("main", "shutdown grace period exceeded; exiting", "grace_s=%lld",
              (long long)secs);
    _exit(1);
    return NULL;
}

int main(int argc, char **argv)
{
    config cfg;
    config_action action;
    rmqs_error err = {0};
    store_t *st = NULL;
    amqpp_t *pub = NULL;
    disp_t *disp = NULL;
    http_api_t *api = NULL;
    writer_t *writer = NULL;
    janitor_t *janitor = NULL;
    ingest_t *ingest = NULL;
    ingest_mapping *maps = NULL;
    char *maps_buf = NULL;
    long n_maps = 0;
    sigset_t sigs;
    int lock_fd = -1;
    size_t recovered = 0;
    int sig = 0, status = 1;
    rmqs_rc rc;

    /* Block before any thread starts so every thread inherits the mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    json_object_seed(0);

    rc = config_load(&cfg, argc, argv, environ, stdout, &action, &err);
    if (rc != RMQS_OK) {
        fprintf(stderr, "rmq-scheduler: %s\n", err.message);
        status = 2;
        goto out;
    }
    if (action == CONFIG_HEALTHCHECK) {
        status = healthcheck(&cfg);
        goto out;
    }
    if (action != CONFIG_RUN) {
        status = 0;
        goto out;
    }
    log_set_level(cfg.log_level);
    log_set_format(cfg.log_format);
    log_info("main", "starting", "version=%s db=\"%s\" listen=%s sync=%s",
             RMQS_VERSION, cfg.db_path, cfg.listen, cfg.sync_full ? "full" : "normal");

    if (make_parent_dirs(cfg.db_path, &err) != RMQS_OK) {
        log_error("main", "cannot prepare the database folder", "error=\"%s\"",
                  err.message);
        goto out;
    }
    lock_fd = lock_database(cfg.db_path, &err);
    if (lock_fd < 0) {
        log_error("main", "cannot lock the database", "error=\"%s\"", err.message);
        goto out;
    }
    rc = store_open(cfg.db_path, &(store_options){.synchronous_full = cfg.sync_full,
                                     .manual_checkpoint = true},
                    &st, &err);
    if (rc != RMQS_OK) {
        log_error("main", "cannot open the database", "db=\"%s\" error=\"%s\"",
                  cfg.db_path, err.message);
        goto out;
    }
    if (store_recover(st, &recovered) != RMQS_OK) {
        log_error("main", "cannot recover jobs left in flight", "db=\"%s\"",
                  cfg.db_path);
        goto out;
    }
    if (recovered > 0)
        log_warn("main", "jobs left publishing by a previous run will be "
                 "published again", "n=%zu", recovered);

    janitor = janitor_new(st, &(janitor_options){
                                  .retention_ms = cfg.retention_s * 1000,
                                  .purge_interval_ms = cfg.purge_interval_s * 1000,
                                  .checkpoint_interval_ms = 1000,
                                  .purge_batch = 500});
    if (janitor == NULL || janitor_start(janitor) != RMQS_OK) {
        log_error("main", "cannot start the janitor thread", NULL);
        goto out;
    }
    pub = amqpp_new(&(amqpp_options){.url = cfg.amqp_url,
                                     .heartbeat_s = (int)cfg.heartbeat_s,
                                     .connect_timeout_ms = 5000,
                                     .ca_file = cfg.amqp_ca_file,
                                     .cert_file = cfg.amqp_cert_file,
                                     .key_file = cfg.amqp_key_file},
                    &err);
    if (pub == NULL) {
        log_error("main", "bad AMQP settings", "error=\"%s\"", err.message);
        status = 2;
        goto out;
    }
    disp = disp_new(st, pub, &(disp_options){
                                 .batch_size = (int)cfg.batch_size,
                                 .window = (int)cfg.publish_window,
                                 .lookahead_ms = cfg.dispatch_lookahead_ms,
                                 .rt_priority = (int)cfg.dispatch_rt_priority,
                                 .backoff_base_ms = cfg.backoff_base_ms,
                                 .backoff_cap_ms = cfg.backoff_cap_ms,
                                 .confirm_timeout_ms = (int)cfg.confirm_timeout_ms,
                                 .heartbeat_s = (int)cfg.heartbeat_s});
    if (disp == NULL) {
        amqpp_free(pub);
        log_error("main", "out of memory", NULL);
        goto out;
    }
    if (disp_start(disp) != RMQS_OK) {
        log_error("main", "cannot start the dispatcher thread", NULL);
        goto out;
    }
    writer = writer_new(st, disp, WRITER_MAX_ROWS, cfg.min_free_bytes);
    if (writer != NULL)
        writer_set_admission_budget(writer, (size_t)cfg.write_queue_bytes);
    if (writer == NULL || writer_start(writer) != RMQS_OK) {
        log_error("main", "cannot start the writer thread", NULL);
        goto out;
    }
    n_maps = ingest_mappings(&cfg, &maps, &maps_buf);
    if (n_maps < 0) {
        log_error("main", "out of memory", NULL);
        goto out;
    }
    if (n_maps > 0) {
        ingest = ingest_new(
            &(ingest_options){
                .url = cfg.amqp_url,
                .heartbeat_s = (int)cfg.heartbeat_s,
                .ca_file = cfg.amqp_ca_file,
                .cert_file = cfg.amqp_cert_file,
                .key_file = cfg.amqp_key_file,
                .mappings = maps,
                .n_mappings = (size_t)n_maps,
                .prefetch = (unsigned)cfg.ingest_prefetch,
                .invalid_rule = strcmp(cfg.ingest_invalid, "dead-letter") == 0
                                    ? INGEST_INVALID_DEAD_LETTER
                                    : INGEST_INVALID_ROUTE,
                .dead_letter_exchange = cfg.ingest_dlx,
                .limits = {.default_max_attempts = (int)cfg.max_attempts,
                           .max_max_attempts = 1000,
                           .max_delay_ms = cfg.max_delay_days * 86400000LL}},
            writer, disp, &err);
        if (ingest == NULL) {
            log_error("main", "bad ingest settings", "error=\"%s\"", err.message);
            status = 2;
            goto out;
        }
        if (ingest_start(ingest) != RMQS_OK) {
            log_error("main", "cannot start the ingest thread", NULL);
            goto out;
        }
    }
    rc = http_api_start(
        &(http_api_options){
            .listen = cfg.listen,
            .max_body_bytes = (size_t)cfg.max_body_bytes,
            .threads = (unsigned)cfg.http_threads,
            .conn_timeout_s = (unsigned)cfg.http_timeout_s,
            .max_conns = (unsigned)cfg.http_max_conns,
            .max_conns_per_ip = (unsigned)cfg.http_max_conns_per_ip,
            .limits = {.default_max_attempts = (int)cfg.max_attempts,
                       .max_max_attempts = 1000,
                       .max_delay_ms = cfg.max_delay_days * 86400000LL},
            .api_token = cfg.api_token,
            .allow_exchanges = cfg.allow_exchanges,
            .tls_cert_file = cfg.tls_cert_file,
            .tls_key_file = cfg.tls_key_file,
            .ingest_up = ingest != NULL ? ingest_up : NULL,
            .ingest_cls = ingest},
        st, disp, writer, &api, &err);
    if (rc != RMQS_OK) {
        log_error("main", "cannot start the HTTP server", "error=\"%s\"",
                  err.message);
        goto out;
    }
    log_info("main", "ready", "listen=%s amqp=%s", cfg.listen, amqpp_safe_url(pub));

    while (sigwait(&sigs, &sig) != 0 || (sig != SIGTERM && sig != SIGINT))
        ;
    log_info("main", "stopping", "signal=%s grace_s=%lld",
             sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)cfg.shutdown_grace_s);
    {
        pthread_t wd;
        if (pthread_create(&wd, NULL, grace_watchdog, &cfg.shutdown_grace_s) == 0)
            pthread_detach(wd);
    }
    status = 0;
out:
    http_api_quiesce(api); /* no new connections */
    ingest_free(ingest);   /* its last batch committed and acknowledged */
    /* Requests in progress are still committed and answered while the
     * writer runs; bounded, since keep-alive clients may keep sending. */
    if (!http_api_drain(api, 2000))
        log_warn("main", "requests still in progress at shutdown", NULL);
    writer_stop(writer);   /* commits what was handed over; resumes them */
    http_api_drain(api, 500); /* lets those be answered */
    http_api_stop(api);    /* closes every connection */
    if (disp != NULL)
        disp_free(disp);   /* records what is in flight; frees pub */
    writer_free(writer);
    janitor_free(janitor);
    store_close(st);
    if (lock_fd >= 0)
        close(lock_fd);
    if (status == 0 && action == CONFIG_RUN)
        log_info("main", "stopped", NULL);
    free(maps);
    free(maps_buf);
    config_clear(&cfg);
    return status;
}
