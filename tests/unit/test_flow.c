/*
 * test_flow.c - service/flow/flow.c, the limits' token buckets and the
 * verdict on a claimed job, and service/flow/fair.c, a new job's rank
 * among jobs due at the same ms.
 *
 * What flow.h promises, and how a test sees it:
 *   - a job no limit matches goes at max(due, now), untouched;
 *   - a limit of rate r and burst b lets b jobs out at once, then one
 *     every 1/r, never before a job's due time; within the horizon the job
 *     is granted (tokens taken), past it held with its estimated slot, and
 *     the held ones' slots follow each other in claim order;
 *   - a held job that comes back at its slot is granted there and takes
 *     nothing again; new jobs, whatever their priority, take the slots
 *     after those given (first come, first served);
 *   - a keyed limit has a bucket per key value, at most max_buckets live
 *     ones (then an overflow bucket, counted); idle buckets are dropped;
 *   - a job several limits match waits for all, and the one that delays it
 *     most names it;
 *   - setting the limits again keeps a limit's buckets (the slots it gave)
 *     unless its key changed.
 * Times are built from a base picked here; nothing waits on a clock.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "fair.h"
#include "flow.h"
#include "limit.h"
#include "testutil.h"

#define T0 1800000000000LL /* a base time, ms (any value works) */

/* Set f's limits to the given (name, body) pairs. */
static void set(flow_t *f, size_t n, const char *const *names,
                const char *const *bodies)
{
    limit_t ls[8];
    char *specs[8];

    cr_assert(n <= 8);
    for (size_t i = 0; i < n; i++) {
        rmqs_error err = {0};
        cr_assert_eq(limit_from_request(names[i], bodies[i], strlen(bodies[i]),
                                        &ls[i], &specs[i], &err),
                     RMQS_OK, "%s: %s", bodies[i], err.message);
    }
    cr_assert_eq(flow_set_limits(f, ls, (const char *const *)specs, n),
                 RMQS_OK);
    for (size_t i = 0; i < n; i++)
        free(specs[i]);
}

static void set1(flow_t *f, const char *name, const char *body)
{
    set(f, 1, &name, &body);
}

/* A job to exchange/routing_key due at due_ms, with an optional tenant
 * header. Freed with job_clear. */
static job_t mk(const char *exchange, const char *rk, int64_t due_ms,
                const char *tenant)
{
    job_t j = {0};

    j.exchange = strdup(exchange);
    j.routing_key = strdup(rk);
    j.due_at = due_ms;
    j.deliver_at = due_ms;
    if (tenant != NULL)
        j.headers = json_pack("{ss}", "tenant", tenant);
    return j;
}

Test(flow, no_limit_goes_at_due_or_now)
{
    flow_t *f = flow_new();
    job_t j = mk("x", "k", T0 + 100, NULL);
    flow_verdict v;

    flow_admit(f, &j, T0, T0 + 500, &v);
    cr_expect_eq(v.send_at, T0 + 100);
    cr_expect(!v.hold);
    cr_expect_null(v.limit);
    flow_admit(f, &j, T0 + 300, T0 + 800, &v); /* overdue: now */
    cr_expect_eq(v.send_at, T0 + 300);
    job_clear(&j);
    flow_free(f);
}

Test(flow, rate_and_burst_then_hold_in_order)
{
    flow_t *f = flow_new();
    int64_t last = 0;
    size_t granted = 0, held = 0;

    set1(f, "orders", "{\"rate_per_s\":500,\"burst\":50}");
    for (int i = 0; i < 1000; i++) {
        job_t j = mk("x", "k", T0, NULL);
        flow_verdict v;
        flow_admit(f, &j, T0, T0 + 500, &v);
        if (i < 50) {
            cr_expect_eq(v.send_at, T0, "job %d of the burst", i);
            cr_expect_null(v.limit);
        } else {
            /* one every 2 ms after the burst: slot (i - 49) * 2 */
            cr_expect_eq(v.send_at, T0 + (i - 49) * 2, "job %d", i);
            cr_expect_str_eq(v.limit, "orders");
        }
        cr_expect_geq(v.send_at, last, "in order");
        last = v.send_at;
        if (v.hold) {
            held++;
            cr_expect_gt(v.send_at, T0 + 500);
        } else {
            granted++;
            cr_expect_leq(v.send_at, T0 + 500);
        }
        job_clear(&j);
    }
    cr_expect_eq(granted, 50 + 250);
    cr_expect_eq(held, 700);
    flow_free(f);
}

Test(flow, held_job_back_at_its_slot_is_granted_there)
{
    flow_t *f = flow_new();
    job_t a = mk("x", "k", T0, NULL), b = mk("x", "k", T0, NULL);
    flow_verdict v;

    set1(f, "slow", "{\"rate_per_s\":10}"); /* one per 100 ms */
    flow_admit(f, &a, T0, T0 + 50, &v);     /* the burst of 1 */
    cr_expect(!v.hold);
    flow_admit(f, &b, T0, T0 + 50, &v); /* next slot T0 + 100 */
    cr_assert(v.hold);
    cr_expect_eq(v.send_at, T0 + 100);
    /* it comes back due at its slot, claimed 50 ms ahead */
    b.due_at = v.send_at;
    b.held_by = strdup("slow");
    flow_admit(f, &b, T0 + 50, T0 + 100, &v);
    cr_expect(!v.hold);
    cr_expect_eq(v.send_at, T0 + 100);
    /* it took nothing again: the next new job's slot is T0 + 200 */
    job_t c = mk("x", "k", T0, NULL);
    flow_admit(f, &c, T0 + 50, T0 + 100, &v);
    cr_expect_eq(v.send_at, T0 + 200);
    job_clear(&c);
    job_clear(&a);
    job_clear(&b);
    flow_free(f);
}

Test(flow, a_limits_queue_is_first_come_first_served)
{
    flow_t *f = flow_new();
    job_t j;
    flow_verdict v, held;

    set1(f, "slow", "{\"rate_per_s\":10}");
    j = mk("x", "k", T0, NULL);
    flow_admit(f, &j, T0, T0 + 50, &v); /* burst */
    job_clear(&j);
    j = mk("x", "k", T0, NULL);
    flow_admit(f, &j, T0, T0 + 50, &held); /* held for T0 + 100 */
    cr_assert(held.hold);
    job_clear(&j);
    /* a new job of priority 0 due at T0 + 10: behind the held one */
    j = mk("x", "k", T0 + 10, NULL);
    flow_admit(f, &j, T0 + 10, T0 + 60, &v);
    cr_expect(v.hold);
    cr_expect_eq(v.send_at, T0 + 200);
    job_clear(&j);
    /* priority 5 too: a slot given is kept (priority orders the jobs
     * claimed together, which take their slots in that order) */
    j = mk("x", "k", T0 + 10, NULL);
    j.priority = 5;
    flow_admit(f, &j, T0 + 10, T0 + 60, &v);
    cr_expect_eq(v.send_at, T0 + 300);
    job_clear(&j);
    flow_free(f);
}

Test(flow, matching_by_exchange_prefix_and_topic)
{
    flow_t *f = flow_new();
    job_t in = mk("orders.eu", "shop.paid", T0, NULL);
    job_t other_rk = mk("orders.eu", "shop.refund", T0, NULL);
    job_t other_x = mk("billing", "shop.paid", T0, NULL);
    flow_verdict v;

    set1(f, "eu",
         "{\"match\":{\"exchange\":\"orders*\",\"routing_key\":\"*.paid\"},"
         "\"rate_per_s\":1}");
    flow_admit(f, &in, T0, T0 + 10, &v); /* takes the one token */
    flow_admit(f, &in, T0, T0 + 10, &v);
    cr_expect(v.hold, "the limit matches: its second job waits");
    flow_admit(f, &other_rk, T0, T0 + 10, &v);
    cr_expect(!v.hold, "another routing key is not limited");
    flow_admit(f, &other_x, T0, T0 + 10, &v);
    cr_expect(!v.hold, "another exchange is not limited");
    job_clear(&in);
    job_clear(&other_rk);
    job_clear(&other_x);
    flow_free(f);
}

Test(flow, keyed_buckets_are_independent_and_bounded)
{
    flow_t *f = flow_new();
    flow_limit_stats st;
    flow_verdict v;

    set1(f, "tenant",
         "{\"rate_per_s\":1,\"key\":\"header:tenant\",\"max_buckets\":2}");
    const char *tenants[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++) {
        job_t j = mk("x", "k", T0, tenants[i]);
        flow_admit(f, &j, T0, T0 + 10, &v);
        /* a and b get buckets of their own; c takes the overflow's token,
         * d finds it used */
        cr_expect_eq(v.hold, i == 3, "tenant %s", tenants[i]);
        job_clear(&j);
    }
    job_t again = mk("x", "k", T0, "a");
    flow_admit(f, &again, T0, T0 + 10, &v);
    cr_expect(v.hold, "a's bucket is spent");
    job_clear(&again);
    cr_assert_eq(flow_stats(f, T0, &st, 1), 1);
    cr_expect_eq(st.buckets, 2);
    cr_expect_eq(st.overflow, 2);
    /* seconds later the buckets are full again: idle, and dropped for a
     * new key */
    flow_sweep(f, T0 + 5000);
    job_t e = mk("x", "k", T0 + 5000, "e");
    flow_admit(f, &e, T0 + 5000, T0 + 5010, &v);
    cr_expect(!v.hold);
    cr_assert_eq(flow_stats(f, T0 + 5000, &st, 1), 1);
    cr_expect_eq(st.buckets, 1, "a and b were idle and dropped; e is live");
    cr_expect_eq(st.overflow, 2);
    job_clear(&e);
    flow_free(f);
}

Test(flow, several_limits_wait_for_all)
{
    flow_t *f = flow_new();
    const char *names[] = {"fast", "slow"};
    const char *bodies[] = {"{\"rate_per_s\":100}", "{\"rate_per_s\":10}"};
    flow_verdict v;
    job_t j;

    set(f, 2, names, bodies);
    j = mk("x", "k", T0, NULL);
    flow_admit(f, &j, T0, T0 + 1000, &v);
    cr_expect_eq(v.send_at, T0);
    job_clear(&j);
    j = mk("x", "k", T0, NULL);
    flow_admit(f, &j, T0, T0 + 1000, &v);
    cr_expect_eq(v.send_at, T0 + 100, "the slower limit decides");
    cr_expect_str_eq(v.limit, "slow");
    job_clear(&j);
    flow_free(f);
}

Test(flow, limits_set_again_keep_their_slots)
{
    flow_t *f = flow_new();
    flow_verdict v;
    job_t j = mk("x", "k", T0, NULL);

    set1(f, "one", "{\"rate_per_s\":1}");
    flow_admit(f, &j, T0, T0 + 10, &v);
    cr_expect(!v.hold);
    set1(f, "one", "{\"rate_per_s\":1}"); /* read again, unchanged */
    flow_admit(f, &j, T0, T0 + 10, &v);
    cr_expect(v.hold, "the bucket was kept: its token is spent");
    set1(f, "one", "{\"rate_per_s\":2}"); /* a new rate: the slot given stays */
    flow_admit(f, &j, T0, T0 + 10, &v);
    cr_expect(v.hold);
    cr_expect_eq(v.send_at, T0 + 2000, "after the two slots the old rate gave");
    set1(f, "one", "{\"rate_per_s\":2,\"key\":\"exchange\"}"); /* new key */
    flow_admit(f, &j, T0, T0 + 10, &v);
    cr_expect(!v.hold, "a new key makes new buckets");
    job_clear(&j);
    flow_free(f);
}

Test(flow, fair_rank_interleaves_tenants)
{
    flow_key k = {0};
    rmqs_error err = {0};
    fair_t *fr;
    int64_t ra[3], rb[2];

    cr_assert_eq(flow_key_parse("header:tenant", &k, &err), RMQS_OK);
    fr = fair_new(&k, 100);
    flow_key_clear(&k);
    for (int i = 0; i < 3; i++) {
        job_t j = mk("x", "k", T0, "A");
        fair_rank(fr, &j);
        ra[i] = j.claim_rank;
        job_clear(&j);
    }
    for (int i = 0; i < 2; i++) {
        job_t j = mk("x", "k", T0, "B");
        fair_rank(fr, &j);
        rb[i] = j.claim_rank;
        job_clear(&j);
    }
    cr_expect_eq(ra[0], 0);
    cr_expect_eq(ra[2], 2);
    cr_expect_eq(rb[0], 0, "B's first goes with A's first");
    cr_expect_eq(rb[1], 1);
    /* priority before rank; another due time starts again */
    job_t p = mk("x", "k", T0, "A");
    p.priority = 1;
    fair_rank(fr, &p);
    cr_expect_lt(p.claim_rank, ra[0]);
    job_clear(&p);
    job_t later = mk("x", "k", T0 + 1, "A");
    fair_rank(fr, &later);
    cr_expect_eq(later.claim_rank, 0);
    job_clear(&later);
    fair_free(fr);
}

Test(flow, a_held_job_long_past_its_slot_takes_a_new_one)
{
    flow_t *f = flow_new();
    job_t a = mk("x", "k", T0, NULL), b = mk("x", "k", T0, NULL);
    flow_verdict v;

    set1(f, "slow", "{\"rate_per_s\":10}");
    flow_admit(f, &a, T0, T0 + 50, &v);
    flow_admit(f, &b, T0, T0 + 50, &v); /* held for T0 + 100 */
    cr_assert(v.hold);
    /* its claimer died; the lease brought it back 3 s after its slot */
    b.due_at = v.send_at;
    b.held_by = strdup("slow");
    flow_admit(f, &b, T0 + 3100, T0 + 3600, &v);
    cr_expect(!v.hold);
    cr_expect_eq(v.send_at, T0 + 3100, "the bucket is idle by then: now");
    flow_admit(f, &b, T0 + 3100, T0 + 3600, &v);
    cr_expect_eq(v.send_at, T0 + 3200, "and it took a slot: the next is later");
    job_clear(&a);
    job_clear(&b);
    flow_free(f);
}
