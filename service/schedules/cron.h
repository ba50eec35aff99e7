/*
 * cron.h - cron expressions and their next fire time in a time zone.
 *
 * The project's own pure code (no C cron library is packaged in Debian):
 * cron_parse reads 5 fields (minute hour day-of-month month day-of-week)
 * or 6 with leading seconds, or a macro; cron_next walks the matching
 * months, days, hours, minutes and seconds of the local calendar and maps
 * each wall time to instants with the zone's offsets (tz.h), following the
 * DST rules below. Only the zone lookups touch anything outside the
 * arguments; a parsed expression is immutable and shareable.
 */
#ifndef RMQS_CRON_H
#define RMQS_CRON_H

#include <stdbool.h>
#include <stdint.h>

#include "rmqs.h"
#include "tz.h"

typedef struct cron_expr cron_expr; /* opaque, immutable after parse */
typedef enum cron_skipped { CRON_SKIPPED_NEXT, CRON_SKIPPED_SKIP } cron_skipped;
typedef enum cron_repeated {
    CRON_REPEATED_FIRST,
    CRON_REPEATED_BOTH
} cron_repeated;
typedef struct cron_dst {
    cron_skipped skipped;
    cron_repeated repeated;
} cron_dst;

/* 5 fields, or 6 with leading seconds; macros @yearly @annually @monthly @weekly @daily
 * @midnight @hourly. Errors: RMQS_EINVAL, err->field "cron", err->message names the
 * 1-based character position and the field ("position 7 (day-of-month): 32 is out of 1-31").
 * *out is the caller's, freed with cron_free. */
rmqs_rc cron_parse(const char *text, cron_expr **out, rmqs_error *err);
void cron_free(cron_expr *e);
/* The default DST rules of this expression (Debian cron): a fixed hour field gives
 * {NEXT, FIRST}; a wildcard or step in the hour field gives {SKIP, BOTH} (real elapsed time). */
cron_dst cron_default_dst(const cron_expr *e);
/* The first fire instant strictly after after_ms (ms since the epoch, UTC; fire instants are
 * whole seconds), in zone z with rules dst. false if none within 400 years (an expression that
 * never fires, e.g. "0 0 30 2 *"), or after_ms outside years 0001-9999. */
bool cron_next(const cron_expr *e, const tz_t *z, cron_dst dst,
               int64_t after_ms, int64_t *next_ms);
/* Whether it ever fires (cron_next from a fixed start over 400 years; for validation). */
bool cron_ever_fires(const cron_expr *e, const tz_t *z, cron_dst dst);

/* Whether the local wall time (seconds since 1970-01-01T00:00 local, as if
 * UTC) matches every field: for tests and the fuzzer. */
bool cron_matches_wall(const cron_expr *e, int64_t wall_s);

#endif
