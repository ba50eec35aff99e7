/*
 * http_api.c - the HTTP contract (api/openapi.yaml) on libmicrohttpd: the
 * router, the libmicrohttpd callbacks, the server's start and stop.
 *
 * Why a module of its own: it is the top of the HTTP layer. Every request
 * passes its checks here in one place (the site check, the bearer token,
 * the body limit), then the route table hands it to an endpoint; /healthz,
 * /readyz and /metrics are answered here.
 *
 * libmicrohttpd calls the access handler several times per request: first
 * with no body (we allocate a request context), then with body chunks
 * (appended, or counted and dropped past the limit), then once more with no
 * data, when the request is routed and answered. The context is freed in
 * the request-completed callback.
 *
 * A body over --max-body-bytes is answered 413 only once it has been read
 * (and dropped, never buffered). libmicrohttpd 0.9.75 closes the connection
 * after an answer queued before the body, with the unread body still in
 * the socket, and the kernel then resets the connection: a client still
 * writing its body got EPIPE or a reset instead of the 413. Reading is
 * bounded: at most DISCARD_MAX bytes past the limit, and for at most the
 * connection timeout after the refusal; past either the connection is
 * closed without an answer. Two cases are answered at once, without
 * reading: an announced Content-Length past that bound, and "Expect:
 * 100-continue" (the client waits for our word before it sends the body,
 * and the 413 is that word).
 *
 * A request's headers and its body each have a deadline however slowly
 * they trickle in (--http-header-timeout-s, --http-body-timeout-s): the
 * callbacks below tell http_deadline.c where each connection is, and it
 * cuts the late ones. The idle timeout alone never fires on a client that
 * sends a byte every few seconds.
 *
 * Below this file: the endpoints (http_handlers.h), and under them the
 * reply layer (http_reply.c), through which every answer goes out, this
 * file's too. The layer's files from the top down: http_internal.h.
 */
#include "http_api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <strings.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flow.h"
#include "hexdigit.h"
#include "http_handlers.h"
#include "limit.h"
#include "log.h"
#include "netaddr.h"
#include "schedule.h"
#include "metrics.h"
#include "timeutil.h"
#include "writer.h"

#define MOD "http"


/* Searches waiting for the search pool beyond those running. */
#define SEARCH_QUEUE_MAX 64
/* Past the body limit, bytes are read and dropped so the client gets its
 * 413; past this many more, the connection is closed instead. */
#define DISCARD_MAX ((size_t)64 << 20)

/* ---- the router's own answers: 401, /readyz, /metrics ------------------ */

static enum MHD_Result reply_unauthorized(struct MHD_Connection *c)
{
    return http_reply_error_h(c, MHD_HTTP_UNAUTHORIZED, "unauthorized", NULL,
                              "missing or wrong bearer token (Authorization: "
                              "Bearer <token>)",
                              MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                              "Bearer realm=\"rmq-scheduler\"");
}

static enum MHD_Result h_readyz(http_api_t *api, struct MHD_Connection *c)
{
    http_db_state ds = http_db_check(api);
    bool db = ds != HTTP_DB_DOWN;
    bool full = ds == HTTP_DB_FULL;
    bool broker = disp_broker_connected(api->disp);
    bool blocked = broker && disp_broker_blocked(api->disp);
    bool has_ingest = api->opt.ingest_up != NULL;
    bool ingest = has_ingest && api->opt.ingest_up(api->opt.ingest_cls);
    char msg[128] = "";
    json_t *j;

    j = json_pack("{s:s, s:s, s:s}", "status", "ready", "database",
                  !db    ? "down"
                  : full ? "full"
                         : "up",
                  "broker",
                  blocked  ? "blocked"
                  : broker ? "up"
                           : "down");
    if (j == NULL)
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    if (has_ingest)
        json_object_set_new(j, "ingest", json_string(ingest ? "up" : "down"));
    if (db && !full && broker && (!has_ingest || ingest))
        return http_reply_json(c, MHD_HTTP_OK, j, NULL, NULL);
    snprintf(msg, sizeof(msg), "down:%s%s%s%s", db ? "" : " database",
             full ? " disk full (new jobs refused; stored jobs still delivered)"
                  : "",
             broker ? "" : " broker",
             !has_ingest || ingest ? "" : " ingest consumer");
    json_object_set_new(j, "status", json_string("unavailable"));
    json_object_set_new(
        j, "error",
        json_pack("{s:s, s:s}", "code", "unavailable", "message", msg));
    return http_reply_json(c, MHD_HTTP_SERVICE_UNAVAILABLE, j, NULL, NULL);
}

/* The limits' families: the dispatcher's (flow_metrics_text), then
 * rmqs_limit_held_jobs, counted in the store (every instance's held jobs).
 * malloc'd; NULL on ENOMEM. */
static char *limits_metrics(http_api_t *api, const char *store_id)
{
    flow_t *f = disp_flow(api->disp);
    char *text = flow_metrics_text(f, tu_now_ms());
    flow_limit_stats *st = NULL;
    size_t n = flow_stats(f, tu_now_ms(), NULL, 0), len, cap;
    static const char head[] =
        "# HELP rmqs_limit_held_jobs Pending jobs a limit holds back now "
        "(the whole database)\n"
        "# TYPE rmqs_limit_held_jobs gauge\n";

    if (text == NULL)
        return NULL;
    st = n ? calloc(n, sizeof(*st)) : NULL;
    n = st ? flow_stats(f, tu_now_ms(), st, n) : 0;
    len = strlen(text);
    cap = len + sizeof head + n * (LIMIT_NAME_MAX + STORE_IDENTITY_MAX + 72);
    char *all = realloc(text, cap);
    if (all == NULL) {
        free(text);
        free(st);
        return NULL;
    }
    len += (size_t)snprintf(all + len, cap - len, "%s", head);
    for (size_t i = 0; i < n; i++) {
        bool capped;
        int64_t held = http_limit_held_now(api, st[i].name, &capped);
        if (held >= 0)
            len += (size_t)snprintf(all + len, cap - len,
                                    "rmqs_limit_held_jobs{limit=\"%s\","
                                    "store=\"%s\"} %lld\n",
                                    st[i].name, store_id, (long long)held);
    }
    free(st);
    return all;
}

static enum MHD_Result h_metrics(http_api_t *api, struct MHD_Connection *c)
{
    metrics_sources src = {0};
    char *text, *limits, store_id[STORE_IDENTITY_MAX];

    src.database_up = http_db_check(api) != HTTP_DB_DOWN;
    src.have_counts = store_counts(api->st, src.jobs_by_status) == RMQS_OK;
    src.db_bytes = store_size_bytes(api->st);
    src.search_index_lag = store_search_index_lag(api->st);
    src.broker_connected = disp_broker_connected(api->disp);
    src.broker_blocked = disp_broker_blocked(api->disp);
    src.requests_waiting = (int64_t)writer_waiting(api->writer);
    src.have_schedule_counts =
        store_schedule_counts(api->st, src.schedules_by_state) == RMQS_OK;
    src.tzdata_version = api->opt.tzdata_version;
    if (store_identity(api->st, store_id) == RMQS_OK)
        src.store_id = store_id;
    {
        int64_t now = tu_now_ms(), oldest;
        bool capped;
        src.have_overdue = http_overdue(api, now, &src.overdue_jobs, &capped,
                                        &oldest) == RMQS_OK;
        src.oldest_overdue_age_s =
            oldest >= 0 ? (double)(now - oldest) / 1000.0 : 0;
    }
    text = metrics_render(&src);
    limits = limits_metrics(api, src.store_id ? src.store_id : "unknown");
    if (text != NULL && limits != NULL) { /* the limits' families after */
        size_t a = strlen(text), n = strlen(limits);
        char *all = realloc(text, a + n + 1);
        if (all != NULL)
            memcpy(all + a, limits, n + 1);
        text = all;
    }
    free(limits);
    if (text == NULL)
        return http_reply_rc(c, RMQS_ENOMEM, NULL, "out of memory");
    return http_reply_raw(c, MHD_HTTP_OK,
                          "text/plain; version=0.0.4; charset=utf-8", text,
                          strlen(text), NULL);
}

/* ---- routing ------------------------------------------------------------ */

static enum MHD_Result method_not_allowed(struct MHD_Connection *c,
                                          const char *allow)
{
    return http_reply_error_h(c, MHD_HTTP_METHOD_NOT_ALLOWED,
                              "method_not_allowed", NULL, "method not allowed",
                              MHD_HTTP_HEADER_ALLOW, allow);
}

static enum MHD_Result route(http_api_t *api, struct MHD_Connection *c,
                             const char *url, const char *method, http_req *rq)
{
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

    if (rq->too_large) /* the connection is not worth keeping */
        return http_reply_error_h(c, MHD_HTTP_CONTENT_TOO_LARGE,
                                  "payload_too_large", NULL,
                                  "request body is over the configured limit",
                                  MHD_HTTP_HEADER_CONNECTION, "close");
    if (http_ui_handles(api, c, url))
        return http_ui_serve(api, c, url, method);
    {
        enum MHD_Result refused;
        if (http_ui_refused(api, c, method, &refused))
            return refused;
    }
    if (strcmp(url, "/healthz") == 0) {
        if (!get)
            return method_not_allowed(c, "GET");
        return http_reply_json(c, MHD_HTTP_OK,
                               json_pack("{s:s}", "status", "ok"), NULL, NULL);
    }
    if (strcmp(url, "/readyz") == 0)
        return get ? h_readyz(api, c) : method_not_allowed(c, "GET");
    if (strcmp(url, "/metrics") == 0)
        return get ? h_metrics(api, c) : method_not_allowed(c, "GET");
    if (strcmp(url, "/stats") == 0)
        return get ? http_stats_get(api, c) : method_not_allowed(c, "GET");
    if (strcmp(url, "/stats/failures") == 0)
        return get ? http_stats_failures(api, c) : method_not_allowed(c, "GET");
    if (strcmp(url, "/status") == 0)
        return get ? http_status_get(api, c) : method_not_allowed(c, "GET");
    if (strcmp(url, "/schedule") == 0 || strcmp(url, "/schedule/batch") == 0) {
        if (strcmp(method, "POST") != 0)
            return method_not_allowed(c, "POST");
        return http_jobs_schedule(api, c, rq, url[9] != '\0');
    }
    if (strcmp(url, "/jobs") == 0 || strcmp(url, "/jobs/") == 0)
        return get ? http_jobs_list(api, c, rq) : method_not_allowed(c, "GET");
    if (strcmp(url, "/jobs/count") == 0)
        return get ? http_jobs_count(api, c, rq) : method_not_allowed(c, "GET");
    if (strcmp(url, "/jobs/bulk") == 0)
        return http_bulk(api, c, method, NULL, rq);
    if (strncmp(url, "/jobs/bulk/", 11) == 0 && strchr(url + 11, '/') == NULL)
        return http_bulk(api, c, method, url + 11, rq);
    if (strncmp(url, "/jobs/", 6) == 0 && strchr(url + 6, '/') == NULL)
        return http_jobs_one(api, c, method, url + 6, rq);
    if (strncmp(url, "/jobs/", 6) == 0) { /* /jobs/{id}/run, /jobs/{id}/retry */
        const char *slash = strchr(url + 6, '/');
        char id[JOB_ID_LEN + 1];
        size_t n = (size_t)(slash - (url + 6));
        if ((strcmp(slash, "/run") == 0 || strcmp(slash, "/retry") == 0) &&
            n <= JOB_ID_LEN) {
            memcpy(id, url + 6, n);
            id[n] = '\0';
            return http_jobs_action(api, c, method, id, slash + 1, rq);
        }
    }
    if (strcmp(url, "/schedules") == 0 || strcmp(url, "/schedules/") == 0)
        return get ? http_schedules_list(api, c) : method_not_allowed(c, "GET");
    if (strncmp(url, "/schedules/", 11) == 0 && strchr(url + 11, '/') == NULL)
        return http_schedules_one(api, c, method, url + 11, rq);
    if (strncmp(url, "/schedules/", 11) == 0) { /* /schedules/{name}/run */
        const char *slash = strchr(url + 11, '/');
        char name[SCHEDULE_NAME_MAX + 2];
        size_t n = (size_t)(slash - (url + 11));
        if (strcmp(slash, "/run") == 0 && n < sizeof name) {
            memcpy(name, url + 11, n);
            name[n] = '\0'; /* longer than a name: refused as one */
            return http_schedules_run(api, c, method, name, rq);
        }
    }
    if (strcmp(url, "/limits") == 0 || strcmp(url, "/limits/") == 0)
        return get ? http_limits_list(api, c) : method_not_allowed(c, "GET");
    if (strncmp(url, "/limits/", 8) == 0 && strchr(url + 8, '/') == NULL)
        return http_limits_one(api, c, method, url + 8, rq);
    return http_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                            "no such route");
}

/* The body is over the limit: what was kept of it goes, the rest will be
 * dropped as it arrives, and the answer is 413. */
static void refuse_body(http_req *rq)
{
    rq->too_large = true;
    rq->refused_us = tu_mono_us();
    free(rq->body);
    rq->body = NULL;
    rq->len = rq->cap = 0;
}

/* A chunk of a refused body (413 or 401): dropped, never kept. Past bound
 * bytes, or longer than the connection timeout since the refusal, the
 * sender is endless or slow and the connection is closed instead. */
static enum MHD_Result drop_chunk(const http_api_t *api, http_req *rq, size_t n,
                                  size_t bound)
{
    rq->dropped += n;
    if (rq->dropped > bound || tu_mono_us() - rq->refused_us >
                                   (int64_t)api->opt.conn_timeout_s * 1000000)
        return MHD_NO;
    return MHD_YES;
}

/*
 * Before anything else, headers only: a request for another Host (DNS
 * rebinding), a change from another Origin, or a change with a form content
 * type (which a page of any site can send without asking) is refused
 * (http_origin.h says why). Its body is read and dropped as a 401's is, and
 * the answer closes the connection. 0: let in; else a SITE_ reason.
 */
enum { SITE_OK, SITE_HOST, SITE_ORIGIN, SITE_FORM };

static int site_check(http_api_t *api, struct MHD_Connection *c,
                      const char *method)
{
    const char *host =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    const char *origin, *ct;

    if (!http_origins_host_ok(api->origins, host)) {
        log_warn(MOD, "request for another host refused", "host=%.128s", host);
        return SITE_HOST;
    }
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ||
        strcmp(method, "OPTIONS") == 0)
        return SITE_OK;
    origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!http_origins_origin_ok(api->origins, origin, host)) {
        log_warn(MOD, "change from another origin refused",
                 "method=%s origin=%.128s", method, origin);
        return SITE_ORIGIN;
    }
    ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_CONTENT_TYPE);
    if (http_origins_form_type(ct)) {
        log_warn(MOD, "change with a form content type refused",
                 "method=%s content_type=%.128s", method, ct);
        return SITE_FORM;
    }
    return SITE_OK;
}

static enum MHD_Result reply_site_refused(struct MHD_Connection *c, int why)
{
    if (why == SITE_HOST)
        return http_reply_error_h(c, MHD_HTTP_FORBIDDEN, "host_not_allowed",
                                  NULL,
                                  "this Host is not served here: use "
                                  "the listen address, localhost, an IP "
                                  "address or a --public-origin",
                                  MHD_HTTP_HEADER_CONNECTION, "close");
    if (why == SITE_ORIGIN)
        return http_reply_error_h(c, MHD_HTTP_FORBIDDEN, "cross_origin", NULL,
                                  "changes from pages of another origin are "
                                  "refused",
                                  MHD_HTTP_HEADER_CONNECTION, "close");
    return http_reply_error_h(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                              "unsupported_media_type", NULL,
                              "a change takes application/json or no body, "
                              "never a form content type",
                              MHD_HTTP_HEADER_CONNECTION, "close");
}

/* "Expect: 100-continue" on HTTP/1.1: the client sends the body only after
 * a 100 (libmicrohttpd sends it unless an answer is queued first). */
static bool expects_continue(struct MHD_Connection *c, const char *version)
{
    const char *e =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    return e != NULL && strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
           strcasecmp(e, "100-continue") == 0;
}

static enum MHD_Result on_request_inner(void *cls, struct MHD_Connection *c,
                                        const char *url, const char *method,
                                        const char *version,
                                        const char *upload_data,
                                        size_t *upload_data_size,
                                        void **con_cls)
{
    http_api_t *api = cls;
    http_req *rq = *con_cls;

    if (rq == NULL) { /* first call: headers only */
        const char *cl = MHD_lookup_connection_value(
            c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        rq = calloc(1, sizeof(*rq));
        if (rq == NULL)
            return MHD_NO;
        rq->conn = c;
        rq->route = metrics_route_of(url);
        rq->method = metrics_method_of(method);
        rq->start_us = tu_mono_us();
        *con_cls = rq;
        atomic_fetch_add(&api->inflight, 1);
        char *end = NULL;
        unsigned long long v = cl != NULL ? strtoull(cl, &end, 10) : 0;
        rq->site_refused = site_check(api, c, method);
        if (rq->site_refused != SITE_OK) {
            /* as for a 401 below: the body is read and dropped first */
            rq->refused_us = rq->start_us;
            if ((cl != NULL && v > api->opt.max_body_bytes) ||
                expects_continue(c, version))
                return reply_site_refused(c, rq->site_refused);
            return MHD_YES;
        }
        /* the dashboard's files, and a browser opening "/" (redirected
         * to them), need no token: the page asks for it */
        if (strcmp(url, "/healthz") != 0 && !http_ui_handles(api, c, url) &&
            !http_authorized(api, c)) {
            /* As for a 413: a client that writes its whole body before it
             * reads gets the 401 only if the body was read, so it is read and
             * dropped - but no more of it than an authorized request may
             * send, and a body announced bigger is answered at once. */
            rq->unauthorized = true;
            rq->refused_us = rq->start_us;
            if ((cl != NULL && v > api->opt.max_body_bytes) ||
                expects_continue(c, version))
                return reply_unauthorized(c);
            return MHD_YES; /* the 401 at the end of the body */
        }
        if (cl != NULL) {
            if (end != cl && v > api->opt.max_body_bytes) {
                refuse_body(rq);
                /* Answered now, and libmicrohttpd closes the connection. */
                if (v - api->opt.max_body_bytes > DISCARD_MAX ||
                    expects_continue(c, version))
                    return route(api, c, url, method, rq);
                return MHD_YES; /* read and drop it, answer at the end */
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) { /* a body chunk */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->unauthorized || rq->site_refused != SITE_OK)
            /* no more than it could send if it were let in */
            return drop_chunk(api, rq, n, api->opt.max_body_bytes);
        if (rq->too_large || rq->len + n > api->opt.max_body_bytes) {
            if (!rq->too_large)
                refuse_body(rq);
            /* the whole body counts: the first call admitted bodies up
             * to DISCARD_MAX past the limit */
            return drop_chunk(api, rq, n,
                              api->opt.max_body_bytes + DISCARD_MAX);
        }
        if (rq->len + n + 1 > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 1024;
            char *nb;
            while (cap < rq->len + n + 1)
                cap *= 2;
            nb = realloc(rq->body, cap);
            if (nb == NULL)
                return MHD_NO;
            rq->body = nb;
            rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload_data, n);
        rq->len += n;
        rq->body[rq->len] = '\0';
        return MHD_YES;
    }
    if (rq->site_refused != SITE_OK)
        return reply_site_refused(c, rq->site_refused);
    if (rq->unauthorized)
        return reply_unauthorized(c);
    if (rq->state == RQ_WRITTEN)
        return http_jobs_written(api, c, rq);
    if (rq->state == RQ_SEARCHED)
        return http_jobs_searched(api, c, rq);
    return route(api, c, url, method, rq);
}

/* The deadline entry of c's connection (on_connection put it there), or
 * NULL if it has none. */
static http_deadline_conn *conn_deadline(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* Wraps the handler to note which status it answered with, and where the
 * request is for its deadlines: the first call means the headers are in,
 * a later call without data that the body has ended. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_api_t *api = cls;
    enum MHD_Result ret;
    http_req *rq;

    if (*con_cls == NULL)
        http_deadline_headers(api->deadline, conn_deadline(c));
    else if (*upload_data_size == 0)
        http_deadline_body_end(api->deadline, conn_deadline(c));
    http_reply_begin(api);
    ret = on_request_inner(cls, c, url, method, version, upload_data,
                           upload_data_size, con_cls);
    rq = *con_cls;
    if (rq != NULL && http_reply_status() != 0)
        rq->status = http_reply_status();
    return ret;
}

/* Counts open connections: the drain at shutdown waits for those accepted
 * before the listener closed, whose requests may not have arrived yet.
 * Each gets its deadline entry in *socket_ctx, from its socket; the
 * library tells of the close before it closes the socket (0.9.75's
 * MHD_connection_close_), so the entry goes first. */
/* Once stopping, a new connection is closed as soon as it is accepted: the
 * client sees it end at once and tries another instance, where a quiesced
 * listener would leave it hanging in the kernel's backlog. This is also why
 * MHD_quiesce_daemon is not used: in 0.9.75 with epoll and a thread pool it
 * races a worker that removes the listening socket from its epoll set too,
 * and the loser aborts the process ("Failed to remove listen FD from epoll
 * set", seen once in a clean-clone run of graceful_stop). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr,
                                 socklen_t addrlen)
{
    const http_api_t *api = cls;

    (void)addr;
    (void)addrlen;
    return atomic_load(&api->stopping) ? MHD_NO : MHD_YES;
}

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code)
{
    http_api_t *api = cls;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        atomic_fetch_add(&api->conns, 1);
        *socket_ctx = ci != NULL
                          ? http_deadline_open(api->deadline, ci->connect_fd)
                          : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        atomic_fetch_sub(&api->conns, 1);
        http_deadline_close(api->deadline, *socket_ctx);
        *socket_ctx = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_api_t *api = cls;
    http_req *rq = *con_cls;
    if (rq != NULL) {
        if (rq->admitted > 0)
            writer_release(api->writer, rq->admitted);
        atomic_fetch_sub(&api->inflight, 1);
        if (rq->status != 0)
            metrics_http(rq->route, rq->method, rq->status,
                         tu_mono_us() - rq->start_us);
        /* A suspended request is never completed before its resume. */
        http_jobs_release(rq);
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
    /* kept alive: the next request's headers are due from now */
    http_deadline_request_end(api->deadline, conn_deadline(c));
}

/* The %-escapes of the URL and its query arguments decoded in place, as
 * libmicrohttpd's own MHD_http_unescape does, but for "%00": a NUL would
 * end the C string every handler gets, so "/limits/a%00b" acted on the
 * limit "a" and "/schedules/a%00b" on the schedule "a". It stays "%00",
 * which no name, id or route takes (400 or 404). */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    char *out = s;
    const char *in = s;
    int hi, lo;

    (void)cls;
    (void)c;
    while (*in != '\0') {
        if (in[0] == '%' && (hi = hex_digit(in[1])) >= 0 &&
            (lo = hex_digit(in[2])) >= 0 && (hi | lo) != 0) {
            *out++ = (char)(hi << 4 | lo);
            in += 3;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
    return (size_t)(out - s);
}

/* libmicrohttpd's own messages (e.g. "connection limit reached"), at most
 * MHD_LOG_PER_S lines a second: an attack must not flood the log. */
#define MHD_LOG_PER_S 5

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int64_t window; /* second of the current window */
    static unsigned in_window, suppressed;
    unsigned dropped = 0;
    int64_t now = tu_mono_ms() / 1000;
    char buf[512];
    size_t n;
    bool emit;

    pthread_mutex_lock(&mu);
    if (now != window) {
        window = now;
        in_window = 0;
    }
    emit = in_window < MHD_LOG_PER_S;
    if (emit) {
        in_window++;
        dropped = suppressed;
        suppressed = 0;
    } else {
        suppressed++;
    }
    pthread_mutex_unlock(&mu);
    if (!emit)
        return;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    for (char *p = buf; *p; p++)
        if (*p == '"')
            *p = '\'';
    log_warn(MOD, "libmicrohttpd", "detail=\"%s\" suppressed_before=%u", buf,
             dropped);
}

/* Split "host:port" / "[v6]:port" (netaddr) and resolve it (numeric hosts
 * or names). */
static rmqs_rc parse_listen(const char *listen, struct sockaddr_storage *ss,
                            socklen_t *sslen, bool *v6, rmqs_error *err)
{
    char host[NETADDR_HOST_MAX + 1], port[8];
    struct addrinfo hints = {0}, *res = NULL;
    unsigned port_n;
    rmqs_rc rc;
    int gai;

    rc = netaddr_split(listen, "listen", host, &port_n, err);
    if (rc != RMQS_OK)
        return rc;
    snprintf(port, sizeof(port), "%u", port_n);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return rmqs_fail(err, RMQS_EINVAL, "listen", "listen %s: %s", listen,
                         gai_strerror(gai));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = res->ai_addrlen;
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return RMQS_OK;
}

/* Read a whole (small) file into a malloc'd NUL-terminated string. */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 &&
        len < (1L << 20) && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)len + 1)) != NULL) {
        if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        } else {
            buf[len] = '\0';
        }
    }
    fclose(f);
    return buf;
}

static void api_free(http_api_t *api)
{
    if (api == NULL)
        return;
    if (api->token != NULL) {
        explicit_bzero(api->token, strlen(api->token));
        free(api->token);
    }
    pthread_mutex_destroy(&api->db_mu);
    http_origins_free(api->origins);
    http_deadline_free(api->deadline); /* after the daemon: it has closed
                                          every connection */
    taskpool_free(api->searches);      /* NULL after http_api_stop */
    free(api->tls_cert);
    free(api->ui_broker_urls);
    if (api->tls_key != NULL) {
        explicit_bzero(api->tls_key, strlen(api->tls_key));
        free(api->tls_key);
    }
    free(api);
}

rmqs_rc http_api_start(const http_api_options *opt, store_t *st, disp_t *d,
                       writer_t *w, http_api_t **out, rmqs_error *err)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    bool v6 = false;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls[4] = {{MHD_OPTION_END, 0, NULL}};
    http_api_t *api;
    const union MHD_DaemonInfo *info;
    unsigned per_ip;
    rmqs_rc rc;

    *out = NULL;
    rc = parse_listen(opt->listen, &ss, &sslen, &v6, err);
    if (rc != RMQS_OK)
        return rc;
    api = calloc(1, sizeof(*api));
    if (api == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&api->db_mu, NULL);
    api->db_state = HTTP_DB_UP; /* the store opened */
    api->db_since_ms = tu_now_ms();
    api->st = st;
    api->disp = d;
    api->writer = w;
    api->opt = *opt;
    api->policy = opt->policy;
    if ((opt->api_token && !(api->token = strdup(opt->api_token))) ||
        (opt->ui_broker_urls &&
         !(api->ui_broker_urls = strdup(opt->ui_broker_urls)))) {
        rc = rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    rc = http_origins_new(opt->public_origins, opt->listen,
                          opt->tls_cert_file != NULL, &api->origins, err);
    if (rc != RMQS_OK)
        goto fail;
    api->opt.public_origins = NULL;
    api->opt.api_token = NULL; /* only the owned copies are used */
    api->opt.ui_broker_urls = NULL;
    if (opt->tls_cert_file != NULL) {
        if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
            rc = rmqs_fail(err, RMQS_EINVAL, "tls-cert-file",
                           "this libmicrohttpd has no TLS support");
            goto fail;
        }
        api->tls_cert = read_file(opt->tls_cert_file);
        if (api->tls_cert == NULL) {
            rc = rmqs_fail(err, RMQS_EINVAL, "tls-cert-file",
                           "cannot read the HTTPS certificate %s: %s",
                           opt->tls_cert_file, strerror(errno));
            goto fail;
        }
        api->tls_key = read_file(opt->tls_key_file);
        if (api->tls_key == NULL) {
            rc = rmqs_fail(err, RMQS_EINVAL, "tls-key-file",
                           "cannot read the HTTPS key %s: %s",
                           opt->tls_key_file, strerror(errno));
            goto fail;
        }
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0,
                                         api->tls_cert};
        tls[1] =
            (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, api->tls_key};
        /* TLS 1.2 at least, as on the AMQP side. */
        tls[2] = (struct MHD_OptionItem){
            MHD_OPTION_HTTPS_PRIORITIES, 0,
            (void *)"NORMAL:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1"};
    }
    if (v6)
        flags |= MHD_USE_IPv6;
    /* A few clients (IPs) cannot take every connection (slowloris): by
     * default nine at their limit leave a tenth for the others. */
    per_ip = opt->max_conns_per_ip > 0 ? opt->max_conns_per_ip
             : opt->max_conns / 10 > 0 ? opt->max_conns / 10
                                       : 1U;
    rc = http_deadline_new((int64_t)opt->header_timeout_s * 1000,
                           (int64_t)opt->body_timeout_s * 1000, &api->deadline,
                           err);
    if (rc != RMQS_OK)
        goto fail;
    /* As many searches run as the store has search connections (2); a few
     * dozen more wait, and beyond those a search is refused at once. */
    api->searches = taskpool_new("rmqs-srch", 2, SEARCH_QUEUE_MAX, err);
    if (api->searches == NULL) {
        rc = err != NULL && err->message[0] ? RMQS_ESYS : RMQS_ENOMEM;
        goto fail;
    }
    api->daemon = MHD_start_daemon(
        flags, 0, on_accept, api, on_request, api, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, api, /* first, to catch all */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, opt->threads,
        MHD_OPTION_CONNECTION_TIMEOUT, opt->conn_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, opt->max_conns,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, api,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, api, MHD_OPTION_ARRAY, tls,
        MHD_OPTION_END);
    if (api->daemon == NULL) {
        rc = rmqs_fail(err, RMQS_ESYS, "listen",
                       "cannot listen on %s (address in use or not available, "
                       "or a bad TLS certificate/key?)",
                       opt->listen);
        goto fail;
    }
    info = MHD_get_daemon_info(api->daemon, MHD_DAEMON_INFO_BIND_PORT);
    log_info(MOD, "listening",
             "listen=%s port=%u threads=%u tls=%s auth=%s allow_exchanges=%s "
             "ui=%s max_conns=%u max_conns_per_ip=%u header_timeout_s=%u "
             "body_timeout_s=%u",
             opt->listen, info ? (unsigned)info->port : 0U, opt->threads,
             api->tls_cert ? "on" : "off", api->token ? "bearer" : "off",
             pubpol_has_list(api->policy) ? "list" : "any",
             opt->ui == UI_MODE_ON          ? "on"
             : opt->ui == UI_MODE_READ_ONLY ? "read-only"
                                            : "off",
             opt->max_conns, per_ip, opt->header_timeout_s,
             opt->body_timeout_s);
    *out = api;
    return RMQS_OK;
fail:
    api_free(api);
    return rc;
}

void http_api_quiesce(http_api_t *api)
{
    if (api != NULL)
        atomic_store(&api->stopping, true);
}

bool http_api_drain(http_api_t *api, int64_t timeout_ms, bool conns_too)
{
    struct timespec tick = {0, 10 * 1000000};

    if (api == NULL)
        return true;
    for (int64_t waited = 0; atomic_load(&api->inflight) > 0 ||
                             (conns_too && atomic_load(&api->conns) > 0);
         waited += 10) {
        if (waited >= timeout_ms)
            return false;
        nanosleep(&tick, NULL);
    }
    return true;
}

void http_api_stop(http_api_t *api)
{
    if (api == NULL)
        return;
    /* Every queued search runs and resumes its connection before the
     * daemon, which requires no connection to be suspended, stops. */
    taskpool_free(api->searches);
    api->searches = NULL;
    MHD_stop_daemon(api->daemon);
    api_free(api);
}
