/* Unit tests for service/util/metrics.c: route labels and the text exposition. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

Test(metrics, routes_are_classified_without_ids_in_labels)
{
    cr_expect_eq(metrics_route_of("/schedule"), MR_SCHEDULE);
    cr_expect_eq(metrics_route_of("/schedule/batch"), MR_SCHEDULE_BATCH);
    cr_expect_eq(metrics_route_of("/jobs"), MR_JOBS);
    cr_expect_eq(metrics_route_of("/jobs/count"), MR_JOBS_COUNT);
    cr_expect_eq(metrics_route_of("/jobs/0190a1b2-0000-7000-8000-000000000000"),
                 MR_JOB);
    cr_expect_eq(metrics_route_of("/healthz"), MR_HEALTHZ);
    cr_expect_eq(metrics_route_of("/metrics"), MR_METRICS);
    cr_expect_eq(
        metrics_route_of("/jobs/0190a1b2-0000-7000-8000-000000000000/run"),
        MR_JOB_RUN);
    cr_expect_eq(
        metrics_route_of("/jobs/0190a1b2-0000-7000-8000-000000000000/retry"),
        MR_JOB_RETRY);
    cr_expect_eq(metrics_route_of("/jobs/x/nope"), MR_OTHER);
    cr_expect_eq(metrics_route_of("/stats"), MR_STATS);
    cr_expect_eq(metrics_route_of("/stats/failures"), MR_STATS_FAILURES);
    cr_expect_eq(metrics_route_of("/jobs/bulk"), MR_JOBS_BULK);
    cr_expect_eq(
        metrics_route_of("/jobs/bulk/0190a1b2-0000-7000-8000-000000000000"),
        MR_JOBS_BULK_ONE);
    cr_expect_eq(metrics_route_of("/limits"), MR_LIMITS);
    cr_expect_eq(metrics_route_of("/limits/"), MR_LIMITS);
    cr_expect_eq(metrics_route_of("/limits/orders.eu"), MR_LIMIT_ONE);
    cr_expect_eq(metrics_route_of("/nope"), MR_OTHER);
}

Test(metrics, counters_and_histograms_move_and_render)
{
    metrics_sources src = {.have_counts = true,
                           .jobs_by_status = {7, 1, 2, 3, 4},
                           .db_bytes = 4096,
                           .search_index_lag = 12,
                           .broker_connected = true};
    char *text;

    metrics_jobs_scheduled(5);
    metrics_publish_attempts(2);
    metrics_publish_failure(MF_RETURNED);
    metrics_job_sent(3);     /* 3 ms late: in the 0.005 bucket */
    metrics_job_sent(70000); /* 70 s: only in +Inf */
    metrics_http(MR_SCHEDULE, MM_POST, 201, 1500);
    metrics_http(MR_SCHEDULE, MM_POST, 599, 10);

    text = metrics_render(&src);
    cr_assert_not_null(text);
    cr_expect_not_null(strstr(text, "rmqs_jobs_scheduled_total 5\n"));
    cr_expect_not_null(strstr(text, "rmqs_publish_attempts_total 2\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_publish_failures_total{reason=\"returned\"} 1\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_jobs_published_total{result=\"sent\"} 2\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_jobs{status=\"pending\",store=\"unknown\"} 7\n"));
    cr_expect_not_null(strstr(
        text, "rmqs_dispatch_lateness_seconds_bucket{le=\"0.0025\"} 0\n"));
    cr_expect_not_null(strstr(
        text, "rmqs_dispatch_lateness_seconds_bucket{le=\"0.005\"} 1\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_dispatch_lateness_seconds_bucket{le=\"60\"} 1\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_dispatch_lateness_seconds_bucket{le=\"+Inf\"} 2\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_dispatch_lateness_seconds_count 2\n"));
    cr_expect_not_null(strstr(
        text, "rmqs_http_requests_total{route=\"/schedule\",method=\"POST\","
              "status=\"201\"} 1\n"));
    cr_expect_not_null(strstr(
        text, "rmqs_http_requests_total{route=\"/schedule\",method=\"POST\","
              "status=\"other\"} 1\n"));
    cr_expect_not_null(strstr(text, "rmqs_broker_connected 1\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_database_size_bytes{store=\"unknown\"} 4096\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_search_index_lag_jobs{store=\"unknown\"} 12\n"));
    free(text);
}

Test(metrics, gauges_left_out_when_sources_unknown)
{
    metrics_sources src = {
        .have_counts = false, .db_bytes = -1, .search_index_lag = -1};
    char *text = metrics_render(&src);

    cr_assert_not_null(text);
    cr_expect_null(strstr(text, "rmqs_jobs{"));
    cr_expect_null(strstr(text, "rmqs_database_size_bytes"));
    cr_expect_null(strstr(text, "rmqs_search_index_lag_jobs"));
    cr_expect_not_null(strstr(text, "rmqs_broker_connected 0\n"));
    free(text);
}

Test(metrics, schedules_routes_runs_states_and_build_info)
{
    metrics_sources src = {.have_schedule_counts = true,
                           .schedules_by_state = {3, 2, 1},
                           .tzdata_version = "2025b",
                           .db_bytes = -1};
    char *text;

    cr_expect_eq(metrics_route_of("/schedules"), MR_SCHEDULES);
    cr_expect_eq(metrics_route_of("/schedules/"), MR_SCHEDULES);
    cr_expect_eq(metrics_route_of("/schedules/daily-digest"), MR_SCHEDULE_ONE);
    cr_expect_eq(metrics_route_of("/schedule"), MR_SCHEDULE);
    metrics_schedule_runs(MRR_FIRED, 4);
    metrics_schedule_runs(MRR_MISFIRED_FIRED, 1);
    metrics_schedule_runs(MRR_SKIPPED, 9);
    metrics_http(MR_SCHEDULE_ONE, MM_DELETE, 204, 100);
    text = metrics_render(&src);
    cr_assert_not_null(text);
    cr_expect_not_null(
        strstr(text, "rmqs_schedule_runs_total{result=\"fired\"} 4\n"));
    cr_expect_not_null(strstr(
        text, "rmqs_schedule_runs_total{result=\"misfired_fired\"} 1\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_schedule_runs_total{result=\"skipped\"} 9\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_schedules{state=\"active\",store=\"unknown\"} 3\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_schedules{state=\"paused\",store=\"unknown\"} 2\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_schedules{state=\"ended\",store=\"unknown\"} 1\n"));
    cr_expect_not_null(strstr(
        text, "rmqs_http_requests_total{route=\"/"
              "schedules/{name}\",method=\"DELETE\",status=\"204\"} 1\n"));
    cr_expect_not_null(strstr(text, "rmqs_build_info{version=\"" RMQS_VERSION
                                    "\",tzdata=\"2025b\"} 1\n"));
    free(text);
    src.have_schedule_counts = false;
    src.tzdata_version = NULL;
    text = metrics_render(&src);
    cr_expect_null(strstr(text, "rmqs_schedules{"));
    cr_expect_not_null(strstr(text, "tzdata=\"unknown\"} 1\n"));
    free(text);
}

Test(metrics, methods_and_exchanges_are_bounded_labels)
{
    metrics_sources src = {.db_bytes = 1,
                           .search_index_lag = -1,
                           .store_id = "pg-ab\"c",
                           .have_overdue = true,
                           .overdue_jobs = 3,
                           .oldest_overdue_age_s = 2.5};
    char name[32], *text;

    cr_expect_eq(metrics_method_of("GET"), MM_GET);
    cr_expect_eq(metrics_method_of("DELETE"), MM_DELETE);
    cr_expect_eq(metrics_method_of("BREW"), MM_OTHER);
    metrics_http(MR_JOB, MM_DELETE, 204, 10);
    metrics_http(MR_JOB, MM_GET, 200, 10);
    /* 25 exchanges fail: the first 20 by name, the other 5 as "other" */
    for (int i = 0; i < METRICS_EXCHANGES_MAX + 5; i++) {
        snprintf(name, sizeof(name), "ex%d", i);
        metrics_job_failed(name);
    }
    metrics_job_failed("ex0");
    metrics_job_failed("ex24");
    text = metrics_render(&src);
    cr_assert_not_null(text);
    cr_expect_not_null(strstr(text, "{route=\"/jobs/{id}\",method=\"DELETE\","
                                    "status=\"204\"} 1\n"));
    cr_expect_not_null(strstr(text, "{route=\"/jobs/{id}\",method=\"GET\","
                                    "status=\"200\"} 1\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_jobs_failed_total{exchange=\"ex0\"} 2\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_jobs_failed_total{exchange=\"ex19\"} 1\n"));
    cr_expect_null(strstr(text, "exchange=\"ex20\""));
    cr_expect_not_null(
        strstr(text, "rmqs_jobs_failed_total{exchange=\"other\"} 6\n"));
    cr_expect_not_null(
        strstr(text, "rmqs_overdue_jobs{store=\"pg-ab\\\"c\"} 3\n"));
    cr_expect_not_null(strstr(text, "rmqs_oldest_overdue_job_age_seconds{"
                                    "store=\"pg-ab\\\"c\"} 2.500\n"));
    cr_expect_not_null(strstr(text, "\nprocess_open_fds "));
    cr_expect_not_null(strstr(text, "\nprocess_start_time_seconds "));
    free(text);
}
