/*
 * test_store_triage.c - what the store keeps of a failed job for triage
 * (issue 25), on both stores (BOTH, testutil.h): failed_at when the
 * attempts run out (or a FAIL outcome) and only then, cleared by a retry;
 * the errors of the last JOB_ATTEMPT_ERRORS_MAX failed attempts, oldest
 * first, each cut to JOB_ATTEMPT_ERROR_CHARS characters at a character
 * boundary, read by store_get and never by a list; and the most recent
 * failed jobs by failed_at (store_failures_recent, GET /stats/failures).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "testutil.h"
#include "utf8.h"

static ut_both g_b;
static store_t *g_st;

static void setup(void)
{
    ut_both_init(&g_b, "triage");
    g_st = NULL;
}

static void teardown(void)
{
    ut_both_fini(&g_b);
    g_st = NULL;
}

TestSuite(store_triage, .init = setup, .fini = teardown, .timeout = 60);

static void open_store(bool pg)
{
    g_st = ut_both_open(&g_b, pg, &(store_options){.synchronous_full = false});
}

#define BOTH(name) UT_BOTH(store_triage, name, open_store)

/* Far enough ahead that every job is due on either store's clock. */
#define DUE_BY 4000000000000LL

static void insert(int n, int max_attempts)
{
    job_t j;

    ut_job_make(&j, n, 100);
    j.max_attempts = max_attempts;
    cr_assert_eq(store_insert(g_st, &j, NULL, NULL, NULL, NULL), RMQS_OK);
    job_clear(&j);
}

static job_t get(int n)
{
    char id[JOB_ID_LEN + 1];
    job_t j;

    ut_job_id(n, id);
    cr_assert_eq(store_get(g_st, id, &j), RMQS_OK);
    return j;
}

/* Claim job n (the only one due) and settle it with kind and error at
 * now. */
static void attempt(int n, store_outcome_kind kind, const char *error,
                    int64_t now)
{
    char id[JOB_ID_LEN + 1];
    job_t *jobs = NULL;
    size_t got = 0;

    ut_job_id(n, id);
    cr_assert_eq(ut_claim(g_st, DUE_BY, now, 10, &jobs, &got), RMQS_OK);
    cr_assert_eq(got, 1);
    cr_assert_str_eq(jobs[0].id, id);
    ut_jobs_free(jobs, got);
    store_outcome o = {.id = id, .kind = kind, .error = error, .retry_at = 100};
    cr_assert_eq(store_settle(g_st, &o, 1, now), RMQS_OK);
}

/* Element i of j's attempt_errors: attempt, at, error. */
static void expect_error(const job_t *j, size_t i, int attempt, int64_t at,
                         const char *error)
{
    json_t *e = json_array_get(j->attempt_errors, i);

    cr_assert_not_null(e, "attempt_errors[%zu] missing", i);
    cr_expect_eq(json_integer_value(json_object_get(e, "attempt")), attempt,
                 "attempt_errors[%zu].attempt", i);
    cr_expect_eq(json_integer_value(json_object_get(e, "at")), at,
                 "attempt_errors[%zu].at", i);
    cr_expect_str_eq(json_string_value(json_object_get(e, "error")), error,
                     "attempt_errors[%zu].error", i);
}

BOTH(failed_at_when_the_attempts_run_out_and_each_error_kept)
{
    char err[32];
    job_t j;

    insert(1, 3);
    j = get(1);
    cr_expect_null(j.attempt_errors);
    cr_expect_eq(j.failed_at, 0);
    job_clear(&j);
    for (int k = 1; k <= 3; k++) {
        snprintf(err, sizeof err, "312 NO_ROUTE %d", k);
        attempt(1, STORE_OUT_RETRY, err, 1000 * k);
        j = get(1);
        cr_assert_eq(j.status, k < 3 ? JOB_PENDING : JOB_FAILED);
        cr_expect_eq(j.failed_at, k < 3 ? 0 : 3000, "attempt %d", k);
        cr_assert_eq(json_array_size(j.attempt_errors), (size_t)k);
        for (int i = 1; i <= k; i++) {
            snprintf(err, sizeof err, "312 NO_ROUTE %d", i);
            expect_error(&j, (size_t)i - 1, i, 1000 * i, err);
        }
        job_clear(&j);
    }

    /* a list shows failed_at, never the attempts */
    store_filter f = {.status = JOB_FAILED, .source = -1};
    job_t *jobs = NULL;
    size_t n = 0;
    char *next = NULL;
    cr_assert_eq(store_list(g_st, &f, 10, NULL, &jobs, &n, &next), RMQS_OK);
    cr_assert_eq(n, 1);
    cr_expect_eq(jobs[0].failed_at, 3000);
    cr_expect_null(jobs[0].attempt_errors);
    ut_jobs_free(jobs, n);

    /* a retry clears failed_at and keeps the errors (history) */
    char id[JOB_ID_LEN + 1];
    store_change retry = {.kind = STORE_CHANGE_RETRY, .deliver_at = 100};
    ut_job_id(1, id);
    cr_assert_eq(store_update(g_st, id, &retry, 5000, &j), RMQS_OK);
    job_clear(&j);
    j = get(1);
    cr_expect_eq(j.status, JOB_PENDING);
    cr_expect_eq(j.failed_at, 0);
    cr_expect_eq(json_array_size(j.attempt_errors), 3);
    job_clear(&j);
    /* and its next failed attempt is numbered from 1 again */
    attempt(1, STORE_OUT_RETRY, "again", 6000);
    j = get(1);
    cr_assert_eq(json_array_size(j.attempt_errors), 4);
    expect_error(&j, 3, 1, 6000, "again");
    job_clear(&j);
}

BOTH(only_the_last_ten_attempts_are_kept)
{
    char err[32];
    job_t j;

    insert(2, 20);
    for (int k = 1; k <= 13; k++) {
        snprintf(err, sizeof err, "error %d", k);
        attempt(2, STORE_OUT_RETRY, err, 1000 * k);
    }
    j = get(2);
    cr_assert_eq(j.attempts, 13);
    cr_assert_eq(json_array_size(j.attempt_errors), JOB_ATTEMPT_ERRORS_MAX);
    for (int i = 0; i < JOB_ATTEMPT_ERRORS_MAX; i++) {
        snprintf(err, sizeof err, "error %d", i + 4);
        expect_error(&j, (size_t)i, i + 4, 1000 * (i + 4), err);
    }
    cr_expect_str_eq(j.last_error, "error 13");
    job_clear(&j);
}

BOTH(an_error_is_cut_at_512_characters_not_bytes)
{
    /* 600 two-byte characters, then the whole error as last_error */
    char *err = malloc(1201);
    job_t j;

    cr_assert_not_null(err);
    for (int i = 0; i < 600; i++)
        memcpy(err + 2 * i, "\xc3\xa9", 2); /* U+00E9 */
    err[1200] = '\0';
    insert(3, 5);
    attempt(3, STORE_OUT_RETRY, err, 1000);
    j = get(3);
    const char *kept = json_string_value(
        json_object_get(json_array_get(j.attempt_errors, 0), "error"));
    cr_assert_not_null(kept);
    cr_expect_eq(strlen(kept), 2 * JOB_ATTEMPT_ERROR_CHARS);
    cr_expect(utf8_valid(kept, strlen(kept)));
    cr_expect_eq(strncmp(kept, err, strlen(kept)), 0);
    cr_expect_str_eq(j.last_error, err); /* last_error as it was */
    job_clear(&j);
    free(err);
}

BOTH(a_refused_job_fails_at_once_with_failed_at)
{
    job_t j;

    insert(4, 5);
    attempt(4, STORE_OUT_FAIL, "exchange 'x' is not in the allowed list", 7000);
    j = get(4);
    cr_expect_eq(j.status, JOB_FAILED);
    cr_expect_eq(j.failed_at, 7000);
    cr_assert_eq(json_array_size(j.attempt_errors), 1);
    expect_error(&j, 0, 1, 7000, "exchange 'x' is not in the allowed list");
    job_clear(&j);
}

BOTH(the_most_recent_failures_first)
{
    store_failure *rows = NULL;
    size_t n = 0;

    cr_assert_eq(store_failures_recent(g_st, 10, &rows, &n), RMQS_OK);
    cr_expect_eq(n, 0);
    store_failures_free(rows, n);
    /* jobs 10..14 fail at 1000 * (20 - n): job 10 the most recent; job 15
     * stays pending after its failed attempt, so it is not among them */
    for (int k = 10; k <= 15; k++) {
        char err[32];
        insert(k, k == 15 ? 3 : 1);
        snprintf(err, sizeof err, "err %d", k);
        attempt(k, STORE_OUT_RETRY, err, 1000 * (20 - (k % 15 == 0 ? 1 : k)));
    }
    cr_assert_eq(store_failures_recent(g_st, 3, &rows, &n), RMQS_OK);
    cr_assert_eq(n, 3);
    for (size_t i = 0; i < n; i++) {
        char id[JOB_ID_LEN + 1], err[32];
        int k = 10 + (int)i;
        ut_job_id(k, id);
        snprintf(err, sizeof err, "err %d", k);
        cr_expect_str_eq(rows[i].id, id);
        cr_expect_str_eq(rows[i].exchange, "ex");
        cr_expect_str_eq(rows[i].error, err);
        cr_expect_eq(rows[i].failed_at, 1000 * (20 - k));
    }
    store_failures_free(rows, n);
    cr_assert_eq(store_failures_recent(g_st, 100, &rows, &n), RMQS_OK);
    cr_expect_eq(n, 5);
    store_failures_free(rows, n);
    cr_expect_eq(store_failures_recent(g_st, 0, &rows, &n), RMQS_EINVAL);
}
