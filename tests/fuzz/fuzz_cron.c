/*
 * fuzz_cron.c - libFuzzer target for cron_parse() and cron_next().
 *
 * The input bytes are the expression text. What must hold for every input:
 * - no sanitizer report (out-of-bounds read, overflow, UB, leak);
 * - a rejected expression leaves *out NULL and says where: the message
 *   starts with "position ";
 * - for an accepted one, from a few starts (around DST transitions and
 *   not) in a few zones, with its default DST rules and with the rules the
 *   last input byte picks: up to 20 successive cron_next results strictly
 *   increase, are whole seconds, and each one's local wall time matches
 *   every field (cron_matches_wall) unless it is the first instant after a
 *   skipped interval under SKIPPED_NEXT (an offset change at exactly that
 *   instant, forward).
 * Any violation calls abort(), which libFuzzer reports as a crash.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const ZONES[] = {"UTC", "Europe/Berlin",
                                    "Australia/Lord_Howe", "Pacific/Apia",
                                    "America/Havana"};
static const int64_t STARTS[] = {
    1806019200000, /* 2027-03-27T00:00:00Z, before Berlin's spring forward */
    1824854400500, /* 2027-10-30T00:00:00.5Z, before Berlin's fall back */
    1325116800000, /* 2011-12-29T00:00:00Z, before Apia's skipped day */
    1806969600000, /* 2027-04-03T00:00:00Z, before Lord Howe's fall back */
};

static void fail(const char *what, const uint8_t *data, size_t size,
                 const char *zone, int64_t at, int64_t next)
{
    fprintf(stderr, "fuzz_cron: %s: \"%.*s\" zone %s after %lld: %lld\n", what,
            (int)size, (const char *)data, zone, (long long)at,
            (long long)next);
    abort();
}

static bool is_gap_end(const tz_t *z, int64_t s)
{
    int64_t at;
    int32_t before, after;
    return tz_prev_transition(z, s, &at, &before, &after) && at == s &&
           after > before;
}

static void walk(const cron_expr *e, const tz_t *z, cron_dst dst, int64_t at,
                 const uint8_t *data, size_t size)
{
    for (int i = 0; i < 20; i++) {
        int64_t next;
        if (!cron_next(e, z, dst, at, &next))
            return;
        if (next <= at)
            fail("not strictly increasing", data, size, tz_name(z), at, next);
        if (next % 1000 != 0)
            fail("not a whole second", data, size, tz_name(z), at, next);
        int64_t s = next / 1000;
        if (!cron_matches_wall(e, s + tz_offset_at(z, s)) &&
            !(dst.skipped == CRON_SKIPPED_NEXT && is_gap_end(z, s)))
            fail("wall time does not match the fields", data, size, tz_name(z),
                 at, next);
        at = next;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 256)
        return 0;
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    cron_expr *e = (cron_expr *)1;
    rmqs_error err = {0};
    rmqs_rc rc = cron_parse(text, &e, &err);
    free(text);
    if (rc != RMQS_OK) {
        if (e != NULL)
            fail("*out not NULL on error", data, size, "-", 0, 0);
        if (strncmp(err.message, "position ", 9) != 0)
            fail("error without a position", data, size, "-", 0, 0);
        return 0;
    }
    cron_dst pick = {size > 0 && (data[size - 1] & 1) ? CRON_SKIPPED_SKIP
                                                      : CRON_SKIPPED_NEXT,
                     size > 0 && (data[size - 1] & 2) ? CRON_REPEATED_BOTH
                                                      : CRON_REPEATED_FIRST};
    for (size_t zi = 0; zi < sizeof ZONES / sizeof ZONES[0]; zi++) {
        tz_t *z = NULL;
        if (tz_open(ZONES[zi], &z, NULL) != RMQS_OK)
            abort();
        for (size_t si = 0; si < sizeof STARTS / sizeof STARTS[0]; si++) {
            walk(e, z, cron_default_dst(e), STARTS[si], data, size);
            walk(e, z, pick, STARTS[si], data, size);
        }
        tz_free(z);
    }
    cron_free(e);
    return 0;
}
