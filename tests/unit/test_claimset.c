/*
 * test_claimset.c - service/store/claimset.c: the jobs the dispatcher holds before
 * their claim is durable, and the rules against a concurrent cancel or
 * reschedule (see claimset.h). The interleavings are driven step by step
 * here, as the store's threads would run them; test_store.c checks the same
 * rules through the store with a real SQLite file.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "claimset.h"

static void id_of(unsigned n, unsigned char out[JOB_ID_BYTES])
{
    memset(out, 0, JOB_ID_BYTES);
    /* UUIDv7-like: a shared timestamp prefix, the number at the end */
    out[0] = 0x01;
    out[1] = 0x89;
    memcpy(out + 12, &n, sizeof(n));
}

/* Take the single id: whether it was kept (now held). */
static bool take1(claimset_t *cs, uint64_t gen, unsigned n)
{
    unsigned char id[1][JOB_ID_BYTES];
    bool keep = false;

    id_of(n, id[0]);
    cr_assert_geq(claimset_take(cs, gen,
                                (const unsigned char(*)[JOB_ID_BYTES])id, 1,
                                &keep),
                  0);
    return keep;
}

Test(claimset, a_held_job_cannot_be_changed_until_released)
{
    claimset_t *cs = claimset_new();
    unsigned char id[JOB_ID_BYTES];

    id_of(1, id);
    cr_assert(take1(cs, claimset_begin(cs), 1));
    cr_assert(claimset_held(cs, id));
    cr_expect_eq(claimset_change_begin(cs, id), RMQS_ECONFLICT);
    claimset_release(cs, id);
    cr_assert_not(claimset_held(cs, id));
    cr_expect_eq(claimset_change_begin(cs, id), RMQS_OK);
    claimset_change_end(cs, id);
    claimset_free(cs);
}

Test(claimset, a_held_job_is_not_taken_twice)
{
    claimset_t *cs = claimset_new();

    cr_assert(take1(cs, claimset_begin(cs), 7));
    cr_expect_not(take1(cs, claimset_begin(cs), 7));
    cr_expect_eq(claimset_count(cs), 1);
    claimset_free(cs);
}

Test(claimset, a_change_that_ended_during_the_read_drops_the_job)
{
    claimset_t *cs = claimset_new();
    unsigned char id[JOB_ID_BYTES];
    uint64_t gen;

    id_of(2, id);
    gen = claimset_begin(cs); /* feeder: before its snapshot */
    cr_assert_eq(claimset_change_begin(cs, id), RMQS_OK); /* cancel */
    claimset_change_end(cs, id);                          /* ... committed */
    cr_expect_not(take1(cs, gen, 2), "a snapshot older than the cancel");
    cr_expect_not(claimset_held(cs, id));
    /* a read that starts after the change is trusted again */
    cr_expect(take1(cs, claimset_begin(cs), 2));
    claimset_free(cs);
}

Test(claimset, a_change_in_flight_drops_the_job)
{
    claimset_t *cs = claimset_new();
    unsigned char id[JOB_ID_BYTES];

    id_of(3, id);
    cr_assert_eq(claimset_change_begin(cs, id), RMQS_OK);
    /* the feeder's whole read happens inside the cancel's transaction */
    cr_expect_not(take1(cs, claimset_begin(cs), 3));
    claimset_change_end(cs, id);
    cr_expect(take1(cs, claimset_begin(cs), 3));
    claimset_free(cs);
}

Test(claimset, a_change_before_the_read_does_not_drop_the_job)
{
    claimset_t *cs = claimset_new();
    unsigned char id[JOB_ID_BYTES];

    id_of(4, id);
    cr_assert_eq(claimset_change_begin(cs, id),
                 RMQS_OK); /* e.g. a reschedule */
    claimset_change_end(cs, id);
    /* the snapshot is younger than the commit: it shows the new state */
    cr_expect(take1(cs, claimset_begin(cs), 4));
    claimset_free(cs);
}

Test(claimset, only_the_changed_jobs_are_dropped)
{
    claimset_t *cs = claimset_new();
    unsigned char ids[3][JOB_ID_BYTES];
    bool keep[3];
    uint64_t gen;

    for (unsigned i = 0; i < 3; i++)
        id_of(10 + i, ids[i]);
    gen = claimset_begin(cs);
    cr_assert_eq(claimset_change_begin(cs, ids[1]), RMQS_OK);
    claimset_change_end(cs, ids[1]);
    cr_assert_eq(claimset_take(cs, gen,
                               (const unsigned char(*)[JOB_ID_BYTES])ids, 3,
                               keep),
                 2);
    cr_expect(keep[0]);
    cr_expect_not(keep[1]);
    cr_expect(keep[2]);
    claimset_free(cs);
}

Test(claimset, a_release_during_the_read_drops_the_job)
{
    /* The recorder settled a held job (e.g. a retry, pending again) after
     * the feeder's snapshot, which still shows its claim unwritten. */
    claimset_t *cs = claimset_new();
    unsigned char id[JOB_ID_BYTES];
    uint64_t gen;

    id_of(5, id);
    cr_assert(take1(cs, claimset_begin(cs), 5));
    gen = claimset_begin(cs);
    claimset_release(cs, id);
    cr_expect_not(take1(cs, gen, 5));
    cr_expect(take1(cs, claimset_begin(cs), 5));
    claimset_free(cs);
}

Test(claimset, more_changes_than_the_ring_remembers_drop_everything)
{
    claimset_t *cs = claimset_new();
    unsigned char id[JOB_ID_BYTES];
    uint64_t gen = claimset_begin(cs);

    for (unsigned i = 0; i < 5000; i++) { /* other jobs */
        id_of(100000 + i, id);
        cr_assert_eq(claimset_change_begin(cs, id), RMQS_OK);
        claimset_change_end(cs, id);
    }
    cr_expect_not(take1(cs, gen, 6), "the ring wrapped: nothing is trusted");
    cr_expect(take1(cs, claimset_begin(cs), 6));
    claimset_free(cs);
}

Test(claimset, the_held_set_matches_a_reference_over_many_changes)
{
    enum { N = 3000 };
    claimset_t *cs = claimset_new();
    static bool ref[N];
    unsigned char id[JOB_ID_BYTES];
    unsigned seed = 12345;
    size_t count = 0;

    for (int step = 0; step < 60000; step++) {
        unsigned k;
        seed = seed * 1103515245u + 12345u;
        k = (seed >> 8) % N;
        id_of(k, id);
        if (ref[k]) {
            claimset_release(cs, id);
            ref[k] = false;
            count--;
        } else {
            cr_assert(take1(cs, claimset_begin(cs), k));
            ref[k] = true;
            count++;
        }
        if (step % 997 == 0) {
            for (unsigned i = 0; i < N; i++) {
                id_of(i, id);
                cr_assert_eq(claimset_held(cs, id), ref[i], "id %u", i);
            }
        }
    }
    cr_expect_eq(claimset_count(cs), count);
    claimset_free(cs);
}
