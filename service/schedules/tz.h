/*
 * tz.h - IANA time zones for recurring schedules, over the system tzdata.
 *
 * A tz_t is read once from /usr/share/zoneinfo through GLib's GTimeZone
 * (which also applies the TZif footer rule after 2037) and then flattened
 * into a sorted table of the instants where the UTC offset changes, so an
 * offset lookup is a binary search and cron.c can ask for the neighbouring
 * transitions. Immutable after tz_open: share it between threads freely.
 * Transitions are modelled from 1800 to 2500; outside, the offset in force
 * at that end is assumed.
 */
#ifndef RMQS_TZ_H
#define RMQS_TZ_H

#include <stdbool.h>
#include <stdint.h>

#include "rmqs.h"

typedef struct tz tz_t; /* immutable, shareable between threads */

/* Open an IANA zone ("Europe/Berlin", "UTC"). Unknown zone: RMQS_EINVAL,
 * field "timezone". *out is the caller's, freed with tz_free. */
rmqs_rc tz_open(const char *iana, tz_t **out, rmqs_error *err);
void tz_free(tz_t *z);
const char *tz_name(const tz_t *z);
/* Seconds east of UTC at that instant. */
int32_t tz_offset_at(const tz_t *z, int64_t utc_s);
/* RFC 3339 local time with offset, ms precision: "2027-03-28T03:00:00.000+02:00" */
void tz_format_local(const tz_t *z, int64_t utc_ms, char buf[40]);
/* tzdata version from the first line of /usr/share/zoneinfo/tzdata.zi ("2025b"), or "unknown" */
const char *tz_data_version(void);

/* The first instant > utc_s at which the offset changes: true with *at, the
 * offset before it (*before) and from it on (*after); false if none in the
 * modelled range. */
bool tz_next_transition(const tz_t *z, int64_t utc_s, int64_t *at,
                        int32_t *before, int32_t *after);
/* The last instant <= utc_s at which the offset changed, likewise. */
bool tz_prev_transition(const tz_t *z, int64_t utc_s, int64_t *at,
                        int32_t *before, int32_t *after);

#endif
