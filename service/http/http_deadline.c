/*
 * http_deadline.c - the header and body deadlines of HTTP requests (see
 * http_deadline.h for why they exist).
 *
 * The entries of the open connections form one list under one mutex. Each
 * is in one phase: waiting for headers, reading the body (each with the
 * time it began), answering (no deadline: the answer may wait for the
 * database, and the idle timeout still covers a client that stops
 * reading), or cut. The sweeper walks the list every DEADLINE_TICK_MS, so
 * a connection is cut at most a tick after its deadline; it shuts the
 * socket down with the mutex held, and an entry leaves the list (under the
 * mutex) before the HTTP library closes its socket, so a socket number
 * reused by a later connection is never shut by mistake.
 */
#include "http_deadline.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "log.h"
#include "metrics.h"
#include "timeutil.h"
#include "worker.h"

#define MOD "http"

/* How often the sweeper looks: the most a cut comes after its deadline. */
#define DEADLINE_TICK_MS 200
/* At most one log line per this many ms, however many connections go. */
#define DEADLINE_LOG_EVERY_MS 1000

typedef enum conn_phase {
    PH_HEADERS, /* since the request began */
    PH_BODY,    /* since the headers arrived */
    PH_ANSWER,  /* body ended: no deadline until the request is done */
    PH_CUT      /* shut down: waiting for the library to close it */
} conn_phase;

struct http_deadline_conn {
    http_deadline_conn *prev, *next;
    int fd;
    conn_phase phase;
    bool kept_alive;  /* a request before this one was done */
    int64_t since_ms; /* monotonic: when the phase began */
};

struct http_deadline {
    worker_t w; /* w.mu guards everything below */
    int64_t header_ms, body_ms;
    http_deadline_conn *head;
    /* cuts not yet logged, by reason (metrics_cut), and the address of
     * the last one */
    uint64_t unlogged[MC_COUNT];
    char last_peer[INET6_ADDRSTRLEN];
    int64_t logged_ms; /* when the last line was written */
};

static void peer_text(int fd, char *out, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    const void *a = NULL;

    snprintf(out, n, "unknown");
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET)
        a = &((struct sockaddr_in *)&ss)->sin_addr;
    else if (ss.ss_family == AF_INET6)
        a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    if (a != NULL)
        (void)inet_ntop(ss.ss_family, a, out, (socklen_t)n);
}

/* With w.mu held: shut c's socket down for reason. */
static void cut(http_deadline *d, http_deadline_conn *c, metrics_cut reason)
{
    peer_text(c->fd, d->last_peer, sizeof(d->last_peer));
    /* counted before the peer can see the end of its connection */
    d->unlogged[reason]++;
    metrics_http_cut(reason);
    c->phase = PH_CUT;
    (void)shutdown(c->fd, SHUT_RDWR);
}

/* With w.mu held: one line for the cuts since the last, if a line is due.
 * Kept-alive connections closed between requests are mostly idle clients
 * (a connection pool), not worth a warning on their own. */
static void log_cuts(http_deadline *d, int64_t now)
{
    uint64_t *n = d->unlogged;

    if (n[MC_HEADER_TIMEOUT] + n[MC_BODY_TIMEOUT] + n[MC_KEEPALIVE_TIMEOUT] ==
            0 ||
        now - d->logged_ms < DEADLINE_LOG_EVERY_MS)
        return;
    log_write(n[MC_HEADER_TIMEOUT] + n[MC_BODY_TIMEOUT] > 0 ? LOG_WARN
                                                            : LOG_DEBUG,
              MOD, "slow connections cut",
              "header_timeout=%llu body_timeout=%llu keepalive_timeout=%llu "
              "last_peer=%s header_timeout_ms=%lld body_timeout_ms=%lld",
              (unsigned long long)n[MC_HEADER_TIMEOUT],
              (unsigned long long)n[MC_BODY_TIMEOUT],
              (unsigned long long)n[MC_KEEPALIVE_TIMEOUT], d->last_peer,
              (long long)d->header_ms, (long long)d->body_ms);
    for (int i = 0; i < MC_COUNT; i++)
        n[i] = 0;
    d->logged_ms = now;
}

static void *sweeper_main(void *arg)
{
    http_deadline *d = arg;

    pthread_mutex_lock(&d->w.mu);
    while (!d->w.stop) {
        int64_t now = tu_mono_ms();
        for (http_deadline_conn *c = d->head; c != NULL; c = c->next) {
            if (c->phase == PH_HEADERS && now - c->since_ms >= d->header_ms)
                cut(d, c,
                    c->kept_alive ? MC_KEEPALIVE_TIMEOUT : MC_HEADER_TIMEOUT);
            else if (c->phase == PH_BODY && now - c->since_ms >= d->body_ms)
                cut(d, c, MC_BODY_TIMEOUT);
        }
        log_cuts(d, now);
        worker_cond_wait_ms(&d->w.cv, &d->w.mu, DEADLINE_TICK_MS);
    }
    d->logged_ms = 0; /* what is left is said at once */
    log_cuts(d, tu_mono_ms());
    pthread_mutex_unlock(&d->w.mu);
    return NULL;
}

rmqs_rc http_deadline_new(int64_t header_ms, int64_t body_ms,
                          http_deadline **out, rmqs_error *err)
{
    http_deadline *d;

    *out = NULL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    if (worker_init(&d->w, false) != RMQS_OK) {
        free(d);
        return rmqs_fail(err, RMQS_ESYS, NULL,
                         "cannot make the HTTP deadline thread's mutex");
    }
    d->header_ms = header_ms;
    d->body_ms = body_ms;
    d->logged_ms = tu_mono_ms() - DEADLINE_LOG_EVERY_MS;
    if (worker_start(&d->w, "rmqs-http-dl", sweeper_main, d) != RMQS_OK) {
        worker_destroy(&d->w);
        free(d);
        return rmqs_fail(err, RMQS_ESYS, NULL,
                         "cannot start the HTTP deadline thread");
    }
    *out = d;
    return RMQS_OK;
}

void http_deadline_free(http_deadline *d)
{
    if (d == NULL)
        return;
    worker_stop(&d->w);
    while (d->head != NULL) {
        http_deadline_conn *c = d->head;
        d->head = c->next;
        free(c);
    }
    worker_destroy(&d->w);
    free(d);
}

http_deadline_conn *http_deadline_open(http_deadline *d, int fd)
{
    http_deadline_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->fd = fd;
    c->phase = PH_HEADERS;
    c->since_ms = tu_mono_ms();
    pthread_mutex_lock(&d->w.mu);
    c->next = d->head;
    if (d->head != NULL)
        d->head->prev = c;
    d->head = c;
    pthread_mutex_unlock(&d->w.mu);
    return c;
}

void http_deadline_close(http_deadline *d, http_deadline_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&d->w.mu);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        d->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&d->w.mu);
    free(c);
}

/* Move c from phase from1 or from2 to `to`, from now; a cut stays cut. */
static void enter(http_deadline *d, http_deadline_conn *c, conn_phase from1,
                  conn_phase from2, conn_phase to)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&d->w.mu);
    if (c->phase == from1 || c->phase == from2) {
        if (to == PH_HEADERS)
            c->kept_alive = true;
        c->phase = to;
        c->since_ms = tu_mono_ms();
    }
    pthread_mutex_unlock(&d->w.mu);
}

void http_deadline_headers(http_deadline *d, http_deadline_conn *c)
{
    enter(d, c, PH_HEADERS, PH_HEADERS, PH_BODY);
}

void http_deadline_body_end(http_deadline *d, http_deadline_conn *c)
{
    enter(d, c, PH_HEADERS, PH_BODY, PH_ANSWER);
}

void http_deadline_request_end(http_deadline *d, http_deadline_conn *c)
{
    enter(d, c, PH_BODY, PH_ANSWER, PH_HEADERS);
}
