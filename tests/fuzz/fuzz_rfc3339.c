/*
 * fuzz_rfc3339.c - libFuzzer target for tu_parse_rfc3339().
 *
 * The input bytes are the timestamp text (not NUL-terminated: the parser
 * must use len). What must hold for every input:
 * - no sanitizer report (out-of-bounds read, overflow, UB);
 * - an accepted instant is in 0001-01-01T00:00:00.000Z ..
 *   9999-12-31T23:59:59.999Z, the range the contract promises;
 * - it round-trips: formatting it gives the 24-character canonical form,
 *   which parses back to the same milliseconds and formats identically.
 * Any violation calls abort(), which libFuzzer reports as a crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"

#define MIN_MS (-62135596800000LL) /* 0001-01-01T00:00:00.000Z */
#define MAX_MS 253402300799999LL   /* 9999-12-31T23:59:59.999Z */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const uint8_t *data, size_t size, int64_t ms,
                 const char *text)
{
    fprintf(stderr, "fuzz_rfc3339: %s: input \"%.*s\" ms=%lld formatted=%s\n",
            what, (int)size, (const char *)data, (long long)ms,
            text != NULL ? text : "-");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy of exactly size bytes: ASan flags any read past len. */
    char *s = malloc(size > 0 ? size : 1);
    int64_t ms = 0, back = 0;
    char text[TU_RFC3339_LEN + 1], again[TU_RFC3339_LEN + 1];

    if (s == NULL)
        return 0;
    if (size > 0)
        memcpy(s, data, size);
    if (tu_parse_rfc3339(s, size, &ms) != RMQS_OK) {
        free(s);
        return 0;
    }
    free(s);

    if (ms < MIN_MS || ms > MAX_MS)
        fail("accepted an instant outside years 0001-9999", data, size, ms,
             NULL);
    memset(text, 'x', sizeof text);
    tu_format_rfc3339(ms, text);
    if (strlen(text) != TU_RFC3339_LEN)
        fail("formatted text is not 24 characters", data, size, ms, text);
    if (tu_parse_rfc3339(text, TU_RFC3339_LEN, &back) != RMQS_OK)
        fail("formatted text does not parse", data, size, ms, text);
    if (back != ms)
        fail("round trip changed the instant", data, size, back, text);
    tu_format_rfc3339(back, again);
    if (strcmp(text, again) != 0)
        fail("formatting is not stable", data, size, back, again);
    return 0;
}
