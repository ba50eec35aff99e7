/*
 * test_due_queue.c - service/dispatch/due_queue.c, the claimed jobs between the
 * dispatcher's feeder, publisher and recorder.
 *
 * What due_queue.h promises, and how a test sees it:
 *   - `ahead` hands jobs out in due order, whatever order the claims came
 *     in: a later claim's short-notice job overtakes the later jobs of an
 *     earlier claim; of equal due times the earlier claim goes first;
 *   - take-due at a given time never returns a job due after it, and says
 *     when the first job is due;
 *   - a merge never takes more than the room, and then takes nothing;
 *   - releasing `ahead` (stop, connection loss, a blocked broker) moves
 *     every job to `done` as STORE_OUT_RELEASE, in due order, and leaves
 *     `ahead` empty and usable;
 *   - `done` keeps arrival order, counts, remembers when its oldest
 *     arrived, and is taken whole;
 *   - dueq_free frees what is still in it (ASan's leak check sees it).
 * Due times are built from now (tu_now_ms); nothing here waits.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "due_queue.h"
#include "testutil.h"
#include "timeutil.h"

/* A claimed job number n due at due_at, as the feeder makes it. */
static dueq_item *item(int n, int64_t due_at)
{
    job_t j;
    dueq_item *it;

    ut_job_make(&j, n, due_at);
    it = dueq_item_new(&j);
    cr_assert_not_null(it);
    cr_assert(ut_is_zero(&j, sizeof j), "the job moved into the item");
    return it;
}

/* Merge items numbered first.. with the given due times (in due order). */
static void merge(due_queue_t *q, int first, const int64_t *due, size_t n)
{
    dueq_item *in[16];

    cr_assert_leq(n, 16);
    for (size_t i = 0; i < n; i++)
        in[i] = item(first + (int)i, due[i]);
    cr_assert_eq(dueq_merge(q, in, n), RMQS_OK);
}

/* The job number an item holds (ids from ut_job_id). */
static int num(const dueq_item *it)
{
    unsigned n = 0;

    cr_assert_eq(sscanf(it->job.id + 24, "%x", &n), 1);
    return (int)n;
}

/* Take every job due by `at`: each must be due, and they must be the n
 * jobs numbered in want[], in that order. */
static void expect_taken(due_queue_t *q, int64_t at, const int *want, size_t n)
{
    size_t k = 0;
    int64_t next;
    dueq_item *it;

    while ((it = dueq_take_due(q, at, &next)) != NULL) {
        cr_assert_lt(k, n, "more than %zu jobs due", n);
        cr_expect_leq(it->job.due_at, at, "job %d taken early", num(it));
        cr_expect_eq(num(it), want[k], "position %zu: job %d, want %d", k,
                     num(it), want[k]);
        k++;
        dueq_items_free(it);
    }
    cr_expect_eq(k, n, "%zu jobs due, want %zu", k, n);
}

Test(due_queue, new_queue_is_empty)
{
    due_queue_t *q = dueq_new(8);
    int64_t next = 0;
    size_t n = 99;

    cr_assert_not_null(q);
    cr_expect_eq(dueq_cap(q), 8);
    cr_expect_eq(dueq_ahead(q), 0);
    cr_expect_eq(dueq_room(q), 8);
    cr_expect_null(dueq_take_due(q, INT64_MAX, &next));
    cr_expect_eq(next, INT64_MAX, "nothing ahead: no next due time");
    cr_expect_eq(dueq_done_count(q), 0);
    cr_expect_null(dueq_done_take(q, &n));
    cr_expect_eq(n, 0);
    dueq_free(q);
}

Test(due_queue, hands_out_one_claim_in_due_order)
{
    int64_t now = tu_now_ms();
    const int64_t due[] = {now + 10, now + 20, now + 30};
    const int want[] = {1, 2, 3};
    due_queue_t *q = dueq_new(8);

    merge(q, 1, due, 3);
    cr_expect_eq(dueq_ahead(q), 3);
    cr_expect_eq(dueq_room(q), 5);
    expect_taken(q, now + 30, want, 3);
    dueq_free(q);
}

Test(due_queue, short_notice_jobs_of_a_later_claim_overtake_later_ones)
{
    int64_t now = tu_now_ms();
    /* First claim: 1..4 due in 100..400 ms. Second claim, after a job was
     * scheduled at short notice: 5 due in 50 ms, 6 in 250 ms, 7 in 500. */
    const int64_t first[] = {now + 100, now + 200, now + 300, now + 400};
    const int64_t second[] = {now + 50, now + 250, now + 500};
    const int want[] = {5, 1, 2, 6, 3, 4, 7};
    due_queue_t *q = dueq_new(8);

    merge(q, 1, first, 4);
    merge(q, 5, second, 3);
    cr_expect_eq(dueq_ahead(q), 7);
    expect_taken(q, now + 500, want, 7);
    dueq_free(q);
}

Test(due_queue, merge_after_takes_keeps_due_order)
{
    int64_t now = tu_now_ms();
    const int64_t first[] = {now + 10, now + 20, now + 300, now + 400};
    const int64_t second[] = {now + 30, now + 350};
    const int gone[] = {1, 2}, want[] = {5, 3, 6, 4};
    due_queue_t *q = dueq_new(6);

    merge(q, 1, first, 4);
    expect_taken(q, now + 20, gone, 2);
    merge(q, 5, second, 2); /* the front has moved: room 6 - 2 */
    cr_expect_eq(dueq_ahead(q), 4);
    expect_taken(q, now + 400, want, 4);
    dueq_free(q);
}

Test(due_queue, equal_due_times_keep_claim_order)
{
    int64_t now = tu_now_ms();
    const int64_t first[] = {now + 100, now + 100};
    const int64_t second[] = {now + 100};
    const int want[] = {1, 2, 3};
    due_queue_t *q = dueq_new(4);

    merge(q, 1, first, 2);
    merge(q, 3, second, 1);
    expect_taken(q, now + 100, want, 3);
    dueq_free(q);
}

Test(due_queue, take_due_never_returns_a_job_early)
{
    int64_t now = tu_now_ms();
    const int64_t due[] = {now + 1000, now + 2000};
    due_queue_t *q = dueq_new(4);
    int64_t next = 0;
    dueq_item *it;

    merge(q, 1, due, 2);
    cr_expect_null(dueq_take_due(q, now, &next), "due in a second");
    cr_expect_eq(next, now + 1000);
    cr_expect_null(dueq_take_due(q, now + 999, &next), "1 ms early");
    cr_expect_eq(next, now + 1000);
    cr_expect_eq(dueq_ahead(q), 2, "nothing taken");

    it = dueq_take_due(q, now + 1000, &next); /* exactly due */
    cr_assert_not_null(it);
    cr_expect_eq(num(it), 1);
    cr_expect_eq(next, INT64_MAX, "a job was returned");
    dueq_items_free(it);
    cr_expect_null(dueq_take_due(q, now + 1999, &next));
    cr_expect_eq(next, now + 2000);

    it = dueq_take_due(q, now + 5000, &next); /* overdue: at once */
    cr_assert_not_null(it);
    cr_expect_eq(num(it), 2);
    dueq_items_free(it);
    cr_expect_eq(dueq_ahead(q), 0);
    dueq_free(q);
}

Test(due_queue, merge_beyond_the_room_takes_nothing)
{
    int64_t now = tu_now_ms();
    const int64_t due[] = {now + 10, now + 20, now + 30};
    due_queue_t *q = dueq_new(4);
    dueq_item *in[2] = {item(4, now + 5), item(5, now + 6)};
    const int want[] = {1, 2, 3}; /* not the refused 4 and 5 */

    merge(q, 1, due, 3);
    cr_expect_eq(dueq_room(q), 1);
    cr_expect_eq(dueq_merge(q, in, 2), RMQS_EINVAL);
    cr_expect_eq(dueq_ahead(q), 3, "nothing taken");
    expect_taken(q, now + 30, want, 3);
    in[0]->next = in[1];
    dueq_items_free(in[0]); /* still the caller's */
    dueq_free(q);
}

Test(due_queue, fills_to_capacity_and_refills_as_jobs_leave)
{
    int64_t now = tu_now_ms();
    const int64_t due[] = {now + 1, now + 2, now + 3, now + 4};
    const int64_t more[] = {now + 5, now + 6};
    const int gone[] = {1, 2}, want[] = {3, 4, 5, 6};
    due_queue_t *q = dueq_new(4);

    merge(q, 1, due, 4);
    cr_expect_eq(dueq_room(q), 0);
    expect_taken(q, now + 2, gone, 2);
    cr_expect_eq(dueq_room(q), 2);
    merge(q, 5, more, 2);
    cr_expect_eq(dueq_room(q), 0);
    expect_taken(q, now + 6, want, 4);
    dueq_free(q);
}

Test(due_queue, release_ahead_hands_everything_to_done_as_released)
{
    int64_t now = tu_now_ms();
    const int64_t first[] = {now + 300, now + 400};
    const int64_t second[] = {now + 100, now + 350};
    const int want[] = {3, 1, 4, 2};
    due_queue_t *q = dueq_new(8);
    dueq_item *list, *it;
    size_t n = 0, i = 0;

    merge(q, 1, first, 2);
    merge(q, 3, second, 2);
    /* the connection goes (or the dispatcher stops) before any is due */
    cr_expect_eq(dueq_release_ahead(q, now), 4);
    cr_expect_eq(dueq_ahead(q), 0);
    cr_expect_eq(dueq_room(q), 8);
    cr_expect_eq(dueq_done_count(q), 4);
    cr_expect_eq(dueq_done_since(q), now);
    list = dueq_done_take(q, &n);
    cr_expect_eq(n, 4);
    for (it = list; it != NULL; it = it->next, i++) {
        cr_assert_lt(i, 4);
        cr_expect_eq(num(it), want[i], "position %zu", i);
        cr_expect_eq(it->out.kind, STORE_OUT_RELEASE);
        cr_expect_str_eq(it->out.id, it->job.id);
        cr_expect_null(it->out.error);
        cr_expect_eq(it->sent_ms, -1, "never published");
    }
    cr_expect_eq(i, 4);
    cr_expect_eq(dueq_done_count(q), 0, "taken whole");
    dueq_items_free(list);
    /* empty and usable again */
    cr_expect_eq(dueq_release_ahead(q, now), 0);
    merge(q, 9, first, 1);
    cr_expect_eq(dueq_ahead(q), 1);
    dueq_free(q);
}

Test(due_queue, done_keeps_arrival_order_and_its_oldest_time)
{
    int64_t now = tu_now_ms();
    due_queue_t *q = dueq_new(2);
    dueq_item *a = item(1, now), *b = item(2, now), *c = item(3, now);
    dueq_item *list;
    size_t n;

    a->out = (store_outcome){.id = a->job.id, .kind = STORE_OUT_SENT};
    snprintf(b->reason, sizeof b->reason, "NO_ROUTE");
    b->out = (store_outcome){.id = b->job.id,
                             .kind = STORE_OUT_RETRY,
                             .error = b->reason,
                             .retry_at = now + 1000};
    cr_expect_eq(dueq_done_push(q, a, now + 5), 1);
    cr_expect_eq(dueq_done_push(q, b, now + 7), 2);
    cr_expect_eq(dueq_release(q, c, now + 9), 3);
    cr_expect_eq(dueq_done_count(q), 3);
    cr_expect_eq(dueq_done_since(q), now + 5, "when the oldest arrived");

    list = dueq_done_take(q, &n);
    cr_assert_eq(n, 3);
    cr_expect_eq(list, a);
    cr_expect_eq(list->out.kind, STORE_OUT_SENT);
    cr_expect_eq(list->next, b);
    cr_expect_str_eq(list->next->out.error, "NO_ROUTE");
    cr_expect_eq(list->next->next, c);
    cr_expect_eq(c->out.kind, STORE_OUT_RELEASE);
    cr_expect_null(c->next);
    dueq_items_free(list);

    /* a new list starts its own clock */
    a = item(4, now);
    cr_expect_eq(dueq_release(q, a, now + 50), 1);
    cr_expect_eq(dueq_done_since(q), now + 50);
    dueq_free(q); /* frees what is still on done */
}

Test(due_queue, free_releases_what_is_still_queued)
{
    int64_t now = tu_now_ms();
    const int64_t due[] = {now + 10, now + 20, now + 30};
    const int gone[] = {1};
    due_queue_t *q = dueq_new(4);

    merge(q, 1, due, 3);
    expect_taken(q, now + 10, gone, 1);
    (void)dueq_release(q, item(7, now), now);
    dueq_free(q); /* two ahead (off the front), one done: ASan checks */
    dueq_free(NULL);
}
