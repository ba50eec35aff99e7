/*
 * failgroup.h - the top reasons failed jobs failed (GET /stats/failures,
 * issue 25): failed jobs grouped by exchange and error, the error
 * normalised so that the same broker answer groups whatever ids or
 * numbers it carries.
 *
 * Pure: no I/O, no clock; the caller reads the failed jobs (store.h's
 * store_failures_recent) and writes the answer. Tested alone
 * (tests/unit/test_failgroup.c).
 *
 * Ownership: failgroup_build's groups own their texts (failgroup_free);
 * the inputs are borrowed.
 */
#ifndef RMQS_FAILGROUP_H
#define RMQS_FAILGROUP_H

#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "rmqs.h"

/* One failed job, as read (borrowed texts). */
typedef struct failgroup_in {
    const char *id;       /* job id text */
    const char *exchange; /* "" is the default exchange */
    const char *error;    /* last_error, or NULL */
    int64_t failed_at;    /* ms */
} failgroup_in;

/* One group: the failed jobs of one exchange with one normalised error. */
typedef struct failgroup {
    char *exchange;                      /* owned */
    char *error;                         /* owned: normalised */
    int64_t count;                       /* jobs in the group */
    int64_t last_failed_at;              /* the latest of them, ms */
    char example_job_id[JOB_ID_LEN + 1]; /* the job that failed then */
} failgroup;

/*
 * error as it groups (a malloc'd text; NULL error: ""; NULL when out of
 * memory): each word (a run of letters, digits, '_' and '-') of 4 or more
 * characters with a digit in it (an id, a tag, a size, a name made
 * unique) becomes "#"; the rest is kept, so "404 NOT_FOUND - no exchange
 * 'x' in vhost '/'" and "312 NO_ROUTE" keep their codes and words.
 */
char *failgroup_normalise(const char *error);

/*
 * Group in[0..n) by (exchange, normalised error): at most max groups, the
 * largest first (ties: the most recent failure first, then exchange and
 * error bytewise), in a malloc'd *out of *n_out (failgroup_free; NULL
 * when n is 0). RMQS_OK or RMQS_ENOMEM (nothing out).
 */
rmqs_rc failgroup_build(const failgroup_in *in, size_t n, size_t max,
                        failgroup **out, size_t *n_out);

/* Free n groups and the array (NULL is fine). */
void failgroup_free(failgroup *g, size_t n);

#endif
