/*
 * metrics.c - the numbers behind GET /metrics (see metrics.h).
 *
 * Histograms keep cumulative-ready per-bucket counts plus a sum and a count,
 * all atomics; rendering reads them without stopping writers, so one scrape
 * may see a count one update ahead of its sum, which Prometheus tolerates.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "procself.h"

/* Dispatch lateness buckets, seconds: 1 ms to 60 s. */
static const double late_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05,  0.1,    0.25,  0.5,  1,
                                     2.5,   5,      10,    30,   60};
#define LATE_N (sizeof(late_bounds) / sizeof(late_bounds[0]))
_Static_assert(LATE_N + 1 == METRICS_LATE_BUCKETS, "the +Inf bucket last");

/* HTTP duration buckets, seconds. */
static const double http_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05,   0.1,   0.25,   0.5,   1,    2.5};
#define HTTP_N (sizeof(http_bounds) / sizeof(http_bounds[0]))

/* Status codes the API answers with; anything else counts as "other". */
static const unsigned http_codes[] = {200, 201, 204, 400, 401, 403, 404,
                                      405, 409, 413, 415, 500, 503};
#define CODES_N (sizeof(http_codes) / sizeof(http_codes[0]))

static const char *const route_names[MR_COUNT] = {"/schedule",
                                                  "/schedule/batch",
                                                  "/jobs",
                                                  "/jobs/count",
                                                  "/jobs/{id}",
                                                  "/schedules",
                                                  "/schedules/{name}",
                                                  "/healthz",
                                                  "/readyz",
                                                  "/metrics",
                                                  "/jobs/{id}/run",
                                                  "/jobs/{id}/retry",
                                                  "/stats",
                                                  "/jobs/bulk",
                                                  "/jobs/bulk/{id}",
                                                  "/limits",
                                                  "/limits/{name}",
                                                  "/stats/failures",
                                                  "/status",
                                                  "/schedules/{name}/run",
                                                  "other"};
static const char *const method_names[MM_COUNT] = {
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"};
static const char *const run_result_names[MRR_COUNT] = {
    "fired", "misfired_fired", "skipped"};
static const char *const schedule_state_names[3] = {"active", "paused",
                                                    "ended"};
static const char *const failure_names[MF_COUNT] = {
    "returned", "nacked", "channel_closed", "connection_lost"};
static const char *const cut_names[MC_COUNT] = {
    "header_timeout", "body_timeout", "keepalive_timeout"};
static const char *const status_names[5] = {"pending", "publishing", "sent",
                                            "failed", "cancelled"};

typedef struct histogram {
    atomic_uint_fast64_t
        buckets[16]; /* per bucket, not cumulative; last: +Inf */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_us; /* microseconds, to stay integral */
} histogram;

static struct {
    atomic_uint_fast64_t scheduled;
    atomic_uint_fast64_t attempts;
    atomic_uint_fast64_t failures[MF_COUNT];
    atomic_uint_fast64_t sent;
    atomic_uint_fast64_t failed;
    atomic_uint_fast64_t cancelled;
    atomic_uint_fast64_t reconnects;
    atomic_uint_fast64_t leases_lapsed;
    atomic_uint_fast64_t schedule_runs[MRR_COUNT];
    atomic_uint_fast64_t http_cut[MC_COUNT];
    histogram lateness;
    atomic_uint_fast64_t http_count[MR_COUNT][MM_COUNT][CODES_N + 1];
    histogram http_duration[MR_COUNT];
    /* failed jobs by exchange: the first METRICS_EXCHANGES_MAX names seen
     * (exchange_mu guards the names and n_exchanges; the counts are
     * atomics), then the last slot for every other */
    pthread_mutex_t exchange_mu;
    size_t n_exchanges;
    char exchanges[METRICS_EXCHANGES_MAX][256];
    atomic_uint_fast64_t failed_by_exchange[METRICS_EXCHANGES_MAX + 1];
} m = {.exchange_mu = PTHREAD_MUTEX_INITIALIZER};

static void hist_observe(histogram *h, const double *bounds, size_t n,
                         int64_t us)
{
    double s = (double)us / 1e6;
    size_t i = 0;

    if (us < 0)
        us = 0;
    while (i < n && s > bounds[i])
        i++;
    atomic_fetch_add(&h->buckets[i], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_us, (uint_fast64_t)us);
}

void metrics_jobs_scheduled(uint64_t n)
{
    atomic_fetch_add(&m.scheduled, n);
}
void metrics_publish_attempts(uint64_t n)
{
    atomic_fetch_add(&m.attempts, n);
}
void metrics_job_failed(const char *exchange)
{
    size_t i;

    atomic_fetch_add(&m.failed, 1);
    if (exchange == NULL)
        exchange = "";
    pthread_mutex_lock(&m.exchange_mu);
    for (i = 0; i < m.n_exchanges; i++)
        if (strncmp(m.exchanges[i], exchange, sizeof(m.exchanges[i])) == 0)
            break;
    if (i == m.n_exchanges && i < METRICS_EXCHANGES_MAX) {
        snprintf(m.exchanges[i], sizeof(m.exchanges[i]), "%s", exchange);
        m.n_exchanges++;
    }
    pthread_mutex_unlock(&m.exchange_mu);
    atomic_fetch_add(&m.failed_by_exchange[i], 1);
}
void metrics_jobs_cancelled(uint64_t n)
{
    atomic_fetch_add(&m.cancelled, n);
}

void metrics_read(metrics_snapshot *out)
{
    out->scheduled = atomic_load(&m.scheduled);
    out->sent = atomic_load(&m.sent);
    out->failed = atomic_load(&m.failed);
    out->cancelled = atomic_load(&m.cancelled);
    for (size_t i = 0; i < METRICS_LATE_BUCKETS; i++)
        out->late[i] = atomic_load(&m.lateness.buckets[i]);
}

const double *metrics_late_bounds_ms(size_t *n)
{
    static const double ms[] = {1,   2.5,  5,    10,   25,    50,    100,  250,
                                500, 1000, 2500, 5000, 10000, 30000, 60000};
    _Static_assert(sizeof(ms) / sizeof(ms[0]) == LATE_N, "as late_bounds");
    *n = LATE_N;
    return ms;
}
void metrics_broker_reconnect(void)
{
    atomic_fetch_add(&m.reconnects, 1);
}
void metrics_lease_lapsed(void)
{
    atomic_fetch_add(&m.leases_lapsed, 1);
}

void metrics_schedule_runs(metrics_run_result r, uint64_t n)
{
    if (r < MRR_COUNT)
        atomic_fetch_add(&m.schedule_runs[r], n);
}

void metrics_http_cut(metrics_cut reason)
{
    if (reason < MC_COUNT)
        atomic_fetch_add(&m.http_cut[reason], 1);
}

void metrics_publish_failure(metrics_failure reason)
{
    if (reason < MF_COUNT)
        atomic_fetch_add(&m.failures[reason], 1);
}

void metrics_job_sent(int64_t lateness_ms)
{
    atomic_fetch_add(&m.sent, 1);
    hist_observe(&m.lateness, late_bounds, LATE_N,
                 lateness_ms > 0 ? lateness_ms * 1000 : 0);
}

void metrics_http(metrics_route route, metrics_method method, unsigned status,
                  int64_t duration_us)
{
    size_t c = CODES_N;

    if (route >= MR_COUNT)
        route = MR_OTHER;
    if (method >= MM_COUNT)
        method = MM_OTHER;
    for (size_t i = 0; i < CODES_N; i++) {
        if (http_codes[i] == status) {
            c = i;
            break;
        }
    }
    atomic_fetch_add(&m.http_count[route][method][c], 1);
    hist_observe(&m.http_duration[route], http_bounds, HTTP_N, duration_us);
}

metrics_route metrics_route_of(const char *url)
{
    if (strcmp(url, "/schedule") == 0)
        return MR_SCHEDULE;
    if (strcmp(url, "/schedule/batch") == 0)
        return MR_SCHEDULE_BATCH;
    if (strcmp(url, "/jobs") == 0 || strcmp(url, "/jobs/") == 0)
        return MR_JOBS;
    if (strcmp(url, "/jobs/count") == 0)
        return MR_JOBS_COUNT;
    if (strcmp(url, "/jobs/bulk") == 0)
        return MR_JOBS_BULK;
    if (strncmp(url, "/jobs/bulk/", 11) == 0)
        return MR_JOBS_BULK_ONE;
    if (strncmp(url, "/jobs/", 6) == 0) {
        const char *action = strchr(url + 6, '/');
        if (action == NULL)
            return MR_JOB;
        if (strcmp(action, "/run") == 0)
            return MR_JOB_RUN;
        if (strcmp(action, "/retry") == 0)
            return MR_JOB_RETRY;
        return MR_OTHER;
    }
    if (strcmp(url, "/stats") == 0)
        return MR_STATS;
    if (strcmp(url, "/stats/failures") == 0)
        return MR_STATS_FAILURES;
    if (strcmp(url, "/status") == 0)
        return MR_STATUS;
    if (strcmp(url, "/schedules") == 0 || strcmp(url, "/schedules/") == 0)
        return MR_SCHEDULES;
    if (strncmp(url, "/schedules/", 11) == 0) {
        const char *action = strchr(url + 11, '/');
        if (action == NULL)
            return MR_SCHEDULE_ONE;
        return strcmp(action, "/run") == 0 ? MR_SCHEDULE_RUN : MR_OTHER;
    }
    if (strcmp(url, "/limits") == 0 || strcmp(url, "/limits/") == 0)
        return MR_LIMITS;
    if (strncmp(url, "/limits/", 8) == 0)
        return MR_LIMIT_ONE;
    if (strcmp(url, "/healthz") == 0)
        return MR_HEALTHZ;
    if (strcmp(url, "/readyz") == 0)
        return MR_READYZ;
    if (strcmp(url, "/metrics") == 0)
        return MR_METRICS;
    return MR_OTHER;
}

metrics_method metrics_method_of(const char *method)
{
    for (int i = 0; i < MM_OTHER; i++)
        if (strcmp(method, method_names[i]) == 0)
            return (metrics_method)i;
    return MM_OTHER;
}

/* A growing string; on allocation failure it stays failed (buf NULL). */
typedef struct sbuf {
    char *buf;
    size_t len, cap;
    bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->buf ? b->buf + b->len : NULL,
                      b->buf ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->buf != NULL && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (nb == NULL) {
            b->failed = true;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
}

static void sb_hist(sbuf *b, const char *name, const char *labels, histogram *h,
                    const double *bounds, size_t n)
{
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";

    for (size_t i = 0; i < n; i++) {
        cum += atomic_load(&h->buckets[i]);
        sb_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
                  bounds[i], (unsigned long long)cum);
    }
    cum += atomic_load(&h->buckets[n]);
    sb_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
              (unsigned long long)cum);
    sb_printf(b, "%s_sum%s%s%s %.6f\n", name, labels[0] ? "{" : "", labels,
              labels[0] ? "}" : "", (double)atomic_load(&h->sum_us) / 1e6);
    sb_printf(b, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
              labels[0] ? "}" : "", (unsigned long long)cum);
}

#define U(x) ((unsigned long long)atomic_load(&(x)))

/* A counter with one label: its HELP and TYPE, then one series per value
 * of the label (names[i] counted in v[i]), zeros included. */
static void sb_counters(sbuf *b, const char *name, const char *help,
                        const char *label, const char *const *names,
                        const atomic_uint_fast64_t *v, size_t n)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < n; i++)
        sb_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, names[i],
                  (unsigned long long)atomic_load(&v[i]));
}

/* A label value as the text format writes it: \\, \" and \n escaped. */
static void sb_label(sbuf *b, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            sb_printf(b, "\\%c", *v);
        else if (*v == '\n')
            sb_printf(b, "\\n");
        else
            sb_printf(b, "%c", *v);
    }
}

/* Failed jobs by exchange, the bounded label (metrics_job_failed). */
static void sb_failed_by_exchange(sbuf *b)
{
    static char names[METRICS_EXCHANGES_MAX][256]; /* under render_mu */
    static pthread_mutex_t render_mu = PTHREAD_MUTEX_INITIALIZER;
    size_t n;

    sb_printf(b,
              "# HELP rmqs_jobs_failed_total Jobs failed for good, by "
              "exchange (the first %d exchanges to fail get their own "
              "label value, later ones count as \"other\").\n"
              "# TYPE rmqs_jobs_failed_total counter\n",
              METRICS_EXCHANGES_MAX);
    /* The publisher thread (real-time priority) takes exchange_mu when a
     * job fails: held here only to copy the names, never to format. */
    pthread_mutex_lock(&render_mu);
    pthread_mutex_lock(&m.exchange_mu);
    n = m.n_exchanges;
    memcpy(names, m.exchanges, n * sizeof(names[0]));
    pthread_mutex_unlock(&m.exchange_mu);
    for (size_t i = 0; i < n; i++) {
        sb_printf(b, "rmqs_jobs_failed_total{exchange=\"");
        sb_label(b, names[i]);
        sb_printf(b, "\"} %llu\n", U(m.failed_by_exchange[i]));
    }
    pthread_mutex_unlock(&render_mu);
    if (n == METRICS_EXCHANGES_MAX)
        sb_printf(b, "rmqs_jobs_failed_total{exchange=\"other\"} %llu\n",
                  U(m.failed_by_exchange[METRICS_EXCHANGES_MAX]));
}

/* Prometheus's standard process collector's families, from /proc/self. */
static void sb_process(sbuf *b)
{
    procself p;

    if (!procself_read(&p))
        return;
    sb_printf(b,
              "# HELP process_cpu_seconds_total Total user and system CPU "
              "time spent in seconds.\n"
              "# TYPE process_cpu_seconds_total counter\n"
              "process_cpu_seconds_total %.2f\n"
              "# HELP process_resident_memory_bytes Resident memory size in "
              "bytes.\n"
              "# TYPE process_resident_memory_bytes gauge\n"
              "process_resident_memory_bytes %lld\n"
              "# HELP process_virtual_memory_bytes Virtual memory size in "
              "bytes.\n"
              "# TYPE process_virtual_memory_bytes gauge\n"
              "process_virtual_memory_bytes %lld\n"
              "# HELP process_start_time_seconds Start time of the process "
              "since unix epoch in seconds.\n"
              "# TYPE process_start_time_seconds gauge\n"
              "process_start_time_seconds %.2f\n",
              p.cpu_seconds, (long long)p.rss_bytes, (long long)p.vsize_bytes,
              p.start_time_s);
    if (p.open_fds >= 0)
        sb_printf(b,
                  "# HELP process_open_fds Number of open file descriptors.\n"
                  "# TYPE process_open_fds gauge\n"
                  "process_open_fds %lld\n",
                  (long long)p.open_fds);
    if (p.max_fds >= 0)
        sb_printf(b,
                  "# HELP process_max_fds Maximum number of open file "
                  "descriptors.\n"
                  "# TYPE process_max_fds gauge\n"
                  "process_max_fds %lld\n",
                  (long long)p.max_fds);
}

char *metrics_render(const metrics_sources *src)
{
    sbuf b = {0};
    char store[160] = "unknown"; /* the store label's value, escaped */

    if (src != NULL && src->store_id != NULL && src->store_id[0] != '\0') {
        sbuf s = {0};
        sb_label(&s, src->store_id);
        if (!s.failed && s.buf != NULL)
            snprintf(store, sizeof(store), "%s", s.buf);
        free(s.buf);
    }

    sb_printf(&b,
              "# HELP rmqs_jobs_scheduled_total Jobs accepted and stored.\n"
              "# TYPE rmqs_jobs_scheduled_total counter\n"
              "rmqs_jobs_scheduled_total %llu\n",
              U(m.scheduled));
    sb_printf(&b,
              "# HELP rmqs_jobs_published_total Jobs that reached a final "
              "publish result.\n"
              "# TYPE rmqs_jobs_published_total counter\n"
              "rmqs_jobs_published_total{result=\"sent\"} %llu\n"
              "rmqs_jobs_published_total{result=\"failed\"} %llu\n",
              U(m.sent), U(m.failed));
    sb_printf(&b,
              "# HELP rmqs_jobs_cancelled_total Pending jobs cancelled "
              "(DELETE, bulk cancel, or expired before publishing).\n"
              "# TYPE rmqs_jobs_cancelled_total counter\n"
              "rmqs_jobs_cancelled_total %llu\n",
              U(m.cancelled));
    sb_printf(&b,
              "# HELP rmqs_publish_attempts_total Messages published to "
              "the broker (each try of each job).\n"
              "# TYPE rmqs_publish_attempts_total counter\n"
              "rmqs_publish_attempts_total %llu\n",
              U(m.attempts));
    sb_counters(&b, "rmqs_publish_failures_total",
                "Publish attempts that failed, by reason.", "reason",
                failure_names, m.failures, MF_COUNT);
    sb_failed_by_exchange(&b);
    if (src != NULL && src->have_counts) {
        sb_printf(&b, "# HELP rmqs_jobs Jobs in the database by status (the "
                      "whole database: every instance on it reports the same; "
                      "take max by store).\n"
                      "# TYPE rmqs_jobs gauge\n");
        for (int i = 0; i < 5; i++)
            sb_printf(&b, "rmqs_jobs{status=\"%s\",store=\"%s\"} %lld\n",
                      status_names[i], store,
                      (long long)src->jobs_by_status[i]);
    }
    if (src != NULL && src->have_overdue)
        sb_printf(&b,
                  "# HELP rmqs_overdue_jobs Pending jobs whose deliver_at "
                  "is over 1 s past, counted up to 10000 (as GET /status).\n"
                  "# TYPE rmqs_overdue_jobs gauge\n"
                  "rmqs_overdue_jobs{store=\"%s\"} %lld\n"
                  "# HELP rmqs_oldest_overdue_job_age_seconds How long past "
                  "its deliver_at the oldest overdue pending job is; 0 when "
                  "none is.\n"
                  "# TYPE rmqs_oldest_overdue_job_age_seconds gauge\n"
                  "rmqs_oldest_overdue_job_age_seconds{store=\"%s\"} %.3f\n",
                  store, (long long)src->overdue_jobs, store,
                  src->oldest_overdue_age_s);
    sb_printf(&b,
              "# HELP rmqs_dispatch_lateness_seconds Publish time of sent "
              "jobs minus when the attempt was due: the later of deliver_at "
              "and the job's acceptance or reschedule, or the retry time.\n"
              "# TYPE rmqs_dispatch_lateness_seconds histogram\n");
    sb_hist(&b, "rmqs_dispatch_lateness_seconds", "", &m.lateness, late_bounds,
            LATE_N);
    sb_printf(&b, "# HELP rmqs_http_requests_total HTTP requests by route, "
                  "method and status.\n"
                  "# TYPE rmqs_http_requests_total counter\n");
    for (int r = 0; r < MR_COUNT; r++) {
        for (int k = 0; k < MM_COUNT; k++) {
            for (size_t c = 0; c <= CODES_N; c++) {
                uint64_t v = atomic_load(&m.http_count[r][k][c]);
                char code[16] = "other";
                if (v == 0)
                    continue;
                if (c < CODES_N)
                    snprintf(code, sizeof(code), "%u", http_codes[c]);
                sb_printf(&b,
                          "rmqs_http_requests_total{route=\"%s\",method="
                          "\"%s\",status=\"%s\"} %llu\n",
                          route_names[r], method_names[k], code,
                          (unsigned long long)v);
            }
        }
    }
    sb_printf(&b, "# HELP rmqs_http_request_duration_seconds Time from request "
                  "headers to response, by route.\n"
                  "# TYPE rmqs_http_request_duration_seconds histogram\n");
    for (int r = 0; r < MR_COUNT; r++) {
        char labels[64];
        if (atomic_load(&m.http_duration[r].count) == 0)
            continue;
        snprintf(labels, sizeof(labels), "route=\"%s\"", route_names[r]);
        sb_hist(&b, "rmqs_http_request_duration_seconds", labels,
                &m.http_duration[r], http_bounds, HTTP_N);
    }
    sb_counters(&b, "rmqs_http_connections_cut_total",
                "HTTP connections shut down because a request's headers or "
                "body came too slowly, or a kept-alive one's next request "
                "did.",
                "reason", cut_names, m.http_cut, MC_COUNT);
    sb_printf(&b,
              "# HELP rmqs_broker_connected Whether the AMQP connection is "
              "up.\n# TYPE rmqs_broker_connected gauge\n"
              "rmqs_broker_connected %d\n",
              src != NULL && src->broker_connected ? 1 : 0);
    sb_printf(&b,
              "# HELP rmqs_database_up Whether the database answers "
              "(as /readyz checks it; a full disk still answers).\n"
              "# TYPE rmqs_database_up gauge\n"
              "rmqs_database_up %d\n",
              src != NULL && src->database_up ? 1 : 0);
    sb_printf(&b,
              "# HELP rmqs_broker_blocked Whether the broker blocks "
              "publishing (connection.blocked); jobs wait meanwhile.\n"
              "# TYPE rmqs_broker_blocked gauge\n"
              "rmqs_broker_blocked %d\n",
              src != NULL && src->broker_blocked ? 1 : 0);
    sb_printf(&b,
              "# HELP rmqs_http_requests_waiting POST requests waiting, "
              "unparsed, for room in the write queue "
              "(--write-queue-bytes).\n"
              "# TYPE rmqs_http_requests_waiting gauge\n"
              "rmqs_http_requests_waiting %lld\n",
              (long long)(src != NULL ? src->requests_waiting : 0));
    sb_printf(&b,
              "# HELP rmqs_broker_reconnects_total AMQP connections made "
              "after the first.\n# TYPE rmqs_broker_reconnects_total counter\n"
              "rmqs_broker_reconnects_total %llu\n",
              U(m.reconnects));
    sb_printf(&b,
              "# HELP rmqs_claims_lapsed_total Claimed jobs released "
              "unpublished because their lease was ending (another "
              "instance may take them over).\n"
              "# TYPE rmqs_claims_lapsed_total counter\n"
              "rmqs_claims_lapsed_total %llu\n",
              U(m.leases_lapsed));
    sb_counters(&b, "rmqs_schedule_runs_total",
                "Fire times of recurring schedules, by what became of them.",
                "result", run_result_names, m.schedule_runs, MRR_COUNT);
    if (src != NULL && src->have_schedule_counts) {
        sb_printf(&b, "# HELP rmqs_schedules Recurring schedules by state "
                      "(the whole database).\n"
                      "# TYPE rmqs_schedules gauge\n");
        for (int i = 0; i < 3; i++)
            sb_printf(&b, "rmqs_schedules{state=\"%s\",store=\"%s\"} %lld\n",
                      schedule_state_names[i], store,
                      (long long)src->schedules_by_state[i]);
    }
    sb_printf(&b,
              "# HELP rmqs_build_info The running build: version, and "
              "the tzdata release the time zones come from.\n"
              "# TYPE rmqs_build_info gauge\n"
              "rmqs_build_info{version=\"%s\",tzdata=\"%s\"} 1\n",
              RMQS_VERSION,
              src != NULL && src->tzdata_version != NULL ? src->tzdata_version
                                                         : "unknown");
    if (src != NULL && src->db_bytes >= 0)
        sb_printf(&b,
                  "# HELP rmqs_database_size_bytes Database file plus "
                  "write-ahead log (the whole database).\n"
                  "# TYPE rmqs_database_size_bytes gauge\n"
                  "rmqs_database_size_bytes{store=\"%s\"} %lld\n",
                  store, (long long)src->db_bytes);
    if (src != NULL && src->search_index_lag >= 0)
        sb_printf(&b,
                  "# HELP rmqs_search_index_lag_jobs Jobs stored but not "
                  "yet in the search indexes (searched directly until "
                  "they are).\n# TYPE rmqs_search_index_lag_jobs gauge\n"
                  "rmqs_search_index_lag_jobs{store=\"%s\"} %lld\n",
                  store, (long long)src->search_index_lag);
    sb_process(&b);
    if (b.failed) {
        free(b.buf);
        return NULL;
    }
    return b.buf;
}
