/*
 * timeutil.c - clocks, and RFC 3339 timestamps <-> int64 milliseconds.
 *
 * Why it exists: deliver_at arrives from clients as RFC 3339 text and leaves
 * in every API answer as RFC 3339 text, while everything inside the service
 * (the store, the dispatcher) speaks int64 ms since the Unix epoch, UTC.
 *
 * How it works: the parser reads the fixed-position grammar of RFC 3339
 * section 5.6 by hand, with no sscanf/strptime (locale), no timegm (TZ
 * environment) and no NUL terminator assumed (the fuzz target feeds it raw
 * bytes). Calendar arithmetic uses the proleptic-Gregorian "days from civil"
 * and "civil from days" algorithms described by Howard Hinnant
 * (http://howardhinnant.github.io/date_algorithms.html), written out here
 * over int64 so that any ms value, negative ones included, formats exactly.
 */
#include "timeutil.h"

#include <stdbool.h>
#include <sys/random.h>
#include <time.h>

#define MS_PER_SEC 1000LL
#define MS_PER_DAY 86400000LL

/* First and last instants the formatter can express in 4-digit years. */
#define DAYS_0000_01_01 (-719528LL) /* tu_days_from_civil(0, 1, 1) */
#define DAYS_9999_12_31 2932896LL   /* tu_days_from_civil(9999, 12, 31) */

/* The instants the parser accepts: years 0001-9999 in UTC. */
#define MS_0001_01_01 (-62135596800000LL) /* 0001-01-01T00:00:00.000Z */
#define MS_9999_12_31 253402300799999LL   /* 9999-12-31T23:59:59.999Z */

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0; /* cannot happen for the two clocks used here */
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t tu_now_ms(void)
{
    return clock_us(CLOCK_REALTIME) / 1000;
}

int64_t tu_mono_ms(void)
{
    return clock_us(CLOCK_MONOTONIC) / 1000;
}

int64_t tu_mono_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

struct timespec tu_mono_deadline(int64_t ms)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

int64_t tu_jitter_ms(int64_t ms)
{
    unsigned int r = 0;

    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (unsigned int)tu_mono_ms();
    return ms / 2 + (int64_t)(r % (unsigned int)(ms / 2 + 1));
}

bool tu_is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int tu_days_in_month(int64_t y, int m)
{
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && tu_is_leap(y) ? 29 : dim[m - 1];
}

int64_t tu_days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;                         /* [0, 399] */
    int64_t mp = m > 2 ? m - 3 : m + 9;                  /* March = 0 */
    int64_t doy = (153 * mp + 2) / 5 + d - 1;            /* [0, 365] */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; /* [0, 146096] */
    return era * 146097 + doe - 719468;
}

void tu_civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097; /* [0, 146096] */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100); /* [0, 365] */
    int64_t mp = (5 * doy + 2) / 153;                      /* [0, 11] */
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* Read n ASCII digits at s[0..n) into *out; false if any is not a digit. */
static bool read_digits(const char *s, size_t n, int *out)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

rmqs_rc tu_parse_rfc3339(const char *s, size_t len, int64_t *ms_out)
{
    int year, mon, day, hour, min, sec, frac_ms = 0;
    size_t p;

    if (s == NULL || ms_out == NULL || len < 20)
        return RMQS_EINVAL;

    /* full-date "YYYY-MM-DD" */
    if (!read_digits(s, 4, &year) || s[4] != '-' ||
        !read_digits(s + 5, 2, &mon) || s[7] != '-' ||
        !read_digits(s + 8, 2, &day))
        return RMQS_EINVAL;
    /* "T" */
    if (s[10] != 'T' && s[10] != 't')
        return RMQS_EINVAL;
    /* partial-time "HH:MM:SS" */
    if (!read_digits(s + 11, 2, &hour) || s[13] != ':' ||
        !read_digits(s + 14, 2, &min) || s[16] != ':' ||
        !read_digits(s + 17, 2, &sec))
        return RMQS_EINVAL;

    if (year < 1 || mon < 1 || mon > 12 || day < 1 ||
        day > tu_days_in_month(year, mon) || hour > 23 || min > 59 || sec > 60)
        return RMQS_EINVAL;

    /* time-secfrac ".d+": any length, truncated to milliseconds */
    p = 19;
    if (s[p] == '.') {
        size_t start = ++p;
        while (p < len && s[p] >= '0' && s[p] <= '9') {
            if (p - start < 3)
                frac_ms = frac_ms * 10 + (s[p] - '0');
            p++;
        }
        if (p == start)
            return RMQS_EINVAL;
        for (size_t k = p - start; k < 3; k++)
            frac_ms *= 10;
    }

    /* time-offset "Z" / "+HH:MM" / "-HH:MM", then nothing */
    int64_t offset_min = 0;
    if (p >= len)
        return RMQS_EINVAL;
    if (s[p] == 'Z' || s[p] == 'z') {
        p++;
    } else if (s[p] == '+' || s[p] == '-') {
        int oh, om;
        if (len - p < 6 || !read_digits(s + p + 1, 2, &oh) || s[p + 3] != ':' ||
            !read_digits(s + p + 4, 2, &om) || oh > 23 || om > 59)
            return RMQS_EINVAL;
        offset_min = (int64_t)oh * 60 + om;
        if (s[p] == '-')
            offset_min = -offset_min;
        p += 6;
    } else {
        return RMQS_EINVAL;
    }
    if (p != len)
        return RMQS_EINVAL;

    if (sec == 60) { /* leap second: the last representable ms of :59 */
        sec = 59;
        frac_ms = 999;
    }

    int64_t days = tu_days_from_civil(year, mon, day);
    int64_t local_ms =
        days * MS_PER_DAY +
        ((int64_t)hour * 3600 + (int64_t)min * 60 + sec) * MS_PER_SEC + frac_ms;
    /* local time = UTC + offset */
    int64_t utc_ms = local_ms - offset_min * 60 * MS_PER_SEC;
    /* The year range applies to the instant, not only to the local text: an
     * offset moves "0001-01-01T00:00:00+01:00" into year 0000 UTC and
     * "9999-12-31T23:30:00-01:00" into 10000, which the formatter cannot
     * show (it would print year 0000, or clamp to 9999-12-31T23:59:59.999Z),
     * so such a time would not read back as itself (found by fuzzing). */
    if (utc_ms < MS_0001_01_01 || utc_ms > MS_9999_12_31)
        return RMQS_EINVAL;
    *ms_out = utc_ms;
    return RMQS_OK;
}

/* Write v as exactly n decimal digits (zero-padded) at p. */
static void put_digits(char *p, int64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

void tu_format_rfc3339(int64_t ms, char out[TU_RFC3339_LEN + 1])
{
    /* Floor division, so that -1 is 1969-12-31T23:59:59.999Z. */
    int64_t days = ms / MS_PER_DAY;
    int64_t rem = ms % MS_PER_DAY;
    if (rem < 0) {
        rem += MS_PER_DAY;
        days -= 1;
    }
    /* Clamp to what 4-digit years can express (year 0000 to 9999). */
    if (days < DAYS_0000_01_01) {
        days = DAYS_0000_01_01;
        rem = 0;
    } else if (days > DAYS_9999_12_31) {
        days = DAYS_9999_12_31;
        rem = MS_PER_DAY - 1;
    }

    int64_t y;
    int m, d;
    tu_civil_from_days(days, &y, &m, &d);

    put_digits(out, y, 4);
    out[4] = '-';
    put_digits(out + 5, m, 2);
    out[7] = '-';
    put_digits(out + 8, d, 2);
    out[10] = 'T';
    put_digits(out + 11, rem / 3600000, 2);
    out[13] = ':';
    put_digits(out + 14, rem / 60000 % 60, 2);
    out[16] = ':';
    put_digits(out + 17, rem / 1000 % 60, 2);
    out[19] = '.';
    put_digits(out + 20, rem % 1000, 3);
    out[23] = 'Z';
    out[24] = '\0';
}
