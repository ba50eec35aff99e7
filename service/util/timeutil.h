/*
 * timeutil.h - wall-clock milliseconds, RFC 3339 parsing and formatting.
 *
 * Times that are stored or shown are int64 milliseconds since the Unix epoch
 * (UTC, CLOCK_REALTIME): they mean the same thing across restarts. Waiting
 * and timeouts use CLOCK_MONOTONIC (tu_mono_ms), which NTP steps never move.
 * The parser is strict and pure, and a fuzz target exercises it.
 */
#ifndef RMQS_TIMEUTIL_H
#define RMQS_TIMEUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <time.h>

#include "rmqs.h"

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" */
#define TU_RFC3339_LEN 24

int64_t tu_now_ms(void);  /* CLOCK_REALTIME in ms */
int64_t tu_mono_ms(void); /* CLOCK_MONOTONIC in ms */
int64_t tu_mono_us(void); /* CLOCK_MONOTONIC in us (latency histograms) */

/* The CLOCK_MONOTONIC instant ms from now, for pthread_cond_timedwait on a
 * condition variable set to that clock. ms >= 0. */
struct timespec tu_mono_deadline(int64_t ms);

/* A random delay in [ms/2, ms] (reconnect backoff that does not make a
 * fleet of clients retry in step). ms >= 0. */
int64_t tu_jitter_ms(int64_t ms);

/*
 * Parse an RFC 3339 date-time (section 5.6): "2026-11-30T14:00:00Z",
 * "2026-11-30T22:00:00.5+08:00"; 't'/'z' accepted in lower case; fractions
 * of any length are truncated to milliseconds; a leap second (:60) is read as
 * :59.999. s need not be NUL-terminated. Returns RMQS_OK and *ms_out, or
 * RMQS_EINVAL for anything else (including years outside 0001-9999).
 */
rmqs_rc tu_parse_rfc3339(const char *s, size_t len, int64_t *ms_out);

/* Format ms as "YYYY-MM-DDTHH:MM:SS.mmmZ" into out (TU_RFC3339_LEN + 1). */
void tu_format_rfc3339(int64_t ms, char out[TU_RFC3339_LEN + 1]);

/* Proleptic Gregorian calendar arithmetic (shared with cron.c and tz.c). */
bool tu_is_leap(int64_t y);
int tu_days_in_month(int64_t y, int m);              /* m 1-12 */
int64_t tu_days_from_civil(int64_t y, int m, int d); /* days since 1970-01-01 */
void tu_civil_from_days(int64_t days, int64_t *y, int *m,
                        int *d); /* its inverse */

#endif
