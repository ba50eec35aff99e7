/*
 * fair.h - fair dispatch (--fair-key): a new job's place among the jobs
 * due at the same ms, so that those go out round-robin across the key's
 * values (tenants) instead of in arrival order.
 *
 * Why at insert: the dispatcher claims due jobs in the store's order
 * (due_at, claim_rank, seq: one index, no sort), so a tenant's 100 jobs
 * behind another's 100,000 due the same second are only reached in time
 * if the order itself interleaves them. A job's rank is how many jobs of
 * its key were given the same due time before it (the writer sees every
 * new job, in order); claim_rank = -priority * 2^32 + rank, so A0 B0 A1 B1
 * ... and a higher priority first. The count is kept per key for the last
 * due time only (a tenant's burst is written together); a key seen with
 * another due time starts again at 0, which can only put it earlier.
 * Without --fair-key the rank is 0 and jobs due together go in arrival
 * order, as before.
 *
 * Not thread-safe: the writer thread alone calls fair_rank.
 */
#ifndef RMQS_FAIR_H
#define RMQS_FAIR_H

#include <stddef.h>

#include "job.h"
#include "limit.h"

typedef struct fair fair_t;

/* Ranks by key (copied); at most max_keys keys are remembered (more: all
 * are forgotten and counting starts again). NULL on ENOMEM. */
fair_t *fair_new(const flow_key *key, size_t max_keys);
void fair_free(fair_t *f);

/* Set j->claim_rank from j->priority and j's rank among its key's jobs due
 * at j->due_at. */
void fair_rank(fair_t *f, job_t *j);

#endif
