/*
 * claimset.h - the jobs the dispatcher holds before their claim is durable,
 * and the rules that keep a cancel or reschedule answered 200 from ever
 * being published (used by the store only: store.c and the backends' due
 * reads).
 *
 * Why: the dispatcher reads due jobs from a WAL snapshot on a connection of
 * its own, so publishing never waits for the writer's commit or its fsync;
 * the claim (pending -> publishing) is written later. Between the two the
 * database still says "pending", so the store must remember which jobs are
 * held, and a snapshot taken before a cancel or reschedule committed must not
 * hand the old job to the publisher. The rules:
 *
 *   1. A held job cannot be cancelled or rescheduled: claimset_change_begin
 *      answers RMQS_ECONFLICT (as for a job already publishing).
 *   2. A cancel/reschedule marks its job busy from before its transaction
 *      until after its commit (change_begin .. change_end); a busy job is
 *      never taken.
 *   3. Every change_end and every release (a settled job, which the snapshot
 *      may still show as pending) bumps a generation and is remembered in a
 *      ring. A feeder notes the generation before its snapshot
 *      (claimset_begin) and claimset_take drops every candidate that ended a
 *      change or was released since then; if the ring has wrapped since,
 *      it drops them all (the caller reads again).
 *
 * Rule 1 and the check of rules 2-3 happen under one mutex, so a change
 * either sees the job held, or the feeder sees the change. All calls are
 * thread-safe and O(1) but take (rare, O(changes since begin)).
 */
#ifndef RMQS_CLAIMSET_H
#define RMQS_CLAIMSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "rmqs.h"

typedef struct claimset claimset_t;

/* NULL on ENOMEM. The caller owns it (claimset_free). */
claimset_t *claimset_new(void);
void claimset_free(claimset_t *cs);

/* Feeder, before its snapshot: the generation to pass to claimset_take. */
uint64_t claimset_begin(claimset_t *cs);

/* Whether id is held just now (to skip it while reading candidates). */
bool claimset_held(claimset_t *cs, const unsigned char id[JOB_ID_BYTES]);

/*
 * Feeder, after reading n candidates from a snapshot taken after
 * claimset_begin returned gen: keep[i] says whether candidate i is now held
 * (the caller hands those to the publisher and must release each later);
 * the others were changed, released or held meanwhile (read them again
 * later). Returns how many were kept, or -1 if out of memory (none kept).
 */
long claimset_take(claimset_t *cs, uint64_t gen,
                   const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                   bool *keep);

/* Cancel/reschedule of id, before its transaction: RMQS_ECONFLICT if held
 * (nothing marked), RMQS_ENOMEM, or RMQS_OK and id is busy until
 * claimset_change_end (call it whatever the transaction did). */
rmqs_rc claimset_change_begin(claimset_t *cs,
                              const unsigned char id[JOB_ID_BYTES]);
void claimset_change_end(claimset_t *cs, const unsigned char id[JOB_ID_BYTES]);

/* A held job is settled (its outcome committed): no longer held. A no-op
 * for a job that is not held. */
void claimset_release(claimset_t *cs, const unsigned char id[JOB_ID_BYTES]);

/* How many jobs are held. */
size_t claimset_count(claimset_t *cs);

#endif
