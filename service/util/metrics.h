/*
 * metrics.h - counters, gauges and histograms for GET /metrics, rendered in
 * the Prometheus text format (version 0.0.4).
 *
 * Process-wide and lock-free: every update is an atomic add, so any thread
 * records without coordination. Values that live elsewhere (jobs by status,
 * database size, broker connection) are read at render time through the
 * metrics_sources the HTTP layer passes in.
 */
#ifndef RMQS_METRICS_H
#define RMQS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum metrics_route {
    MR_SCHEDULE,
    MR_SCHEDULE_BATCH,
    MR_JOBS,
    MR_JOBS_COUNT,
    MR_JOB,
    MR_SCHEDULES,
    MR_SCHEDULE_ONE,
    MR_HEALTHZ,
    MR_READYZ,
    MR_METRICS,
    MR_JOB_RUN,
    MR_JOB_RETRY,
    MR_STATS,
    MR_JOBS_BULK,
    MR_JOBS_BULK_ONE,
    MR_LIMITS,
    MR_LIMIT_ONE,
    MR_STATS_FAILURES,
    MR_STATUS,
    MR_SCHEDULE_RUN,
    MR_OTHER,
    MR_COUNT
} metrics_route;

typedef enum metrics_failure {
    MF_RETURNED,        /* basic.return, e.g. NO_ROUTE */
    MF_NACKED,          /* basic.nack or not publishable */
    MF_CHANNEL_CLOSED,  /* e.g. 404 exchange not found */
    MF_CONNECTION_LOST, /* connection died or confirm timed out */
    MF_COUNT
} metrics_failure;

/* The request's method, for the method label of rmqs_http_requests_total. */
typedef enum metrics_method {
    MM_GET,
    MM_HEAD,
    MM_POST,
    MM_PUT,
    MM_PATCH,
    MM_DELETE,
    MM_OPTIONS,
    MM_OTHER,
    MM_COUNT
} metrics_method;

/* Exchanges that get a label value of their own on
 * rmqs_jobs_failed_total, the first to fail first; the rest count as
 * "other", so the series stay bounded whatever clients send. */
#define METRICS_EXCHANGES_MAX 20

/* What became of a recurring schedule's fire time (scheduler.c). */
typedef enum metrics_run_result {
    MRR_FIRED,          /* its run was created ahead, due at the fire time */
    MRR_MISFIRED_FIRED, /* missed (downtime), within the grace: fired late */
    MRR_SKIPPED,        /* missed and not fired */
    MRR_COUNT
} metrics_run_result;

/* Why a slow connection was cut (http_deadline.c). */
typedef enum metrics_cut {
    MC_HEADER_TIMEOUT,    /* headers not in by --http-header-timeout-s */
    MC_BODY_TIMEOUT,      /* body not ended by --http-body-timeout-s */
    MC_KEEPALIVE_TIMEOUT, /* kept alive: the next request's headers not in
                             by --http-header-timeout-s (idle or slow) */
    MC_COUNT
} metrics_cut;

void metrics_jobs_scheduled(uint64_t n);
void metrics_schedule_runs(metrics_run_result r, uint64_t n);
void metrics_publish_attempts(uint64_t n);
void metrics_publish_failure(metrics_failure reason);
/* publish time - when this attempt was due: max(deliver_at, accepted or
 * rescheduled) for a first attempt, the backoff's time for a retry */
void metrics_job_sent(int64_t lateness_ms);
/* a job failed for good (max_attempts exhausted, or refused): counted in
 * rmqs_jobs_published_total{result="failed"} and, by its exchange ("" the
 * default one), in rmqs_jobs_failed_total */
void metrics_job_failed(const char *exchange);
/* pending jobs cancelled (DELETE, bulk cancel, expired unpublished) */
void metrics_jobs_cancelled(uint64_t n);
void metrics_broker_reconnect(void);
/* a claimed job released unpublished: its lease was ending (dispatcher.c) */
void metrics_lease_lapsed(void);
void metrics_http(metrics_route route, metrics_method method, unsigned status,
                  int64_t duration_us);
void metrics_http_cut(metrics_cut reason);

/* Which route a URL belongs to (for labels). */
metrics_route metrics_route_of(const char *url);
/* Which method label a request method gets. */
metrics_method metrics_method_of(const char *method);

/* Values read at render time. */
typedef struct metrics_sources {
    bool have_counts;
    int64_t jobs_by_status[5]; /* indexed by job_status */
    int64_t db_bytes;          /* database file + WAL, -1 if unknown */
    bool broker_connected;
    bool database_up;         /* it answers (store_ping), full or not */
    bool broker_blocked;      /* connection.blocked: publishing waits */
    int64_t requests_waiting; /* POSTs waiting for write-queue room */
    bool have_schedule_counts;
    int64_t schedules_by_state[3]; /* active, paused, ended */
    const char *tzdata_version;    /* for rmqs_build_info; NULL: "unknown" */
    int64_t search_index_lag;      /* jobs not yet in the search indexes
                                      (store_search_index_lag), -1: unknown */
    /* the database's store_identity: the store label of the
     * whole-database gauges (jobs, schedules, database size, search lag,
     * overdue); NULL or "": "unknown" */
    const char *store_id;
    /* pending jobs overdue (GET /status's definition and cap): their
     * count and the oldest one's age in seconds (0 when none) */
    bool have_overdue;
    int64_t overdue_jobs;
    double oldest_overdue_age_s;
} metrics_sources;

/* The publish lateness histogram's buckets: METRICS_LATE_BUCKETS counts,
 * the last for lateness above every bound (+Inf). */
#define METRICS_LATE_BUCKETS 16

/* The counters the stats ring samples (stats.h), read without a lock. */
typedef struct metrics_snapshot {
    uint64_t scheduled, sent, failed, cancelled;
    uint64_t late[METRICS_LATE_BUCKETS]; /* per bucket, not cumulative */
} metrics_snapshot;

void metrics_read(metrics_snapshot *out);

/* The upper bounds of the lateness buckets but the last, in ms (n of them:
 * METRICS_LATE_BUCKETS - 1), ascending. */
const double *metrics_late_bounds_ms(size_t *n);

/* The whole exposition, malloc'd (caller frees); NULL on ENOMEM. */
char *metrics_render(const metrics_sources *src);

#endif
