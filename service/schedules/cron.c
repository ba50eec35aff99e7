/*
 * cron.c - cron expression parser and next-fire computation (see cron.h).
 *
 * Parsing: each field becomes a bit set (seconds, minutes, hours, days of
 * the month, months, days of the week with 7 folded onto 0) plus the
 * Quartz day specials (L, L-n, LW, nW in day-of-month; xL, x#n in
 * day-of-week), which depend on the month and are kept apart. A field is
 * "unrestricted" for the day-of-month/day-of-week rule when it starts with
 * '*' or '?' (Vixie cron's rule, so "*" and "*\/2" alike): when both day
 * fields are restricted a day matches if either matches, otherwise both
 * must match.
 *
 * Next fire: the offset of a zone is piecewise constant between
 * transitions. For the interval [t, T) that holds the search start (T the
 * next transition), the wall times it shows are [t + o, T + o); the first
 * matching wall time w there fires at w - o. Walls the previous interval
 * already showed (a fall-back repeat) are left out under REPEATED_FIRST.
 * If nothing matches before T and the clock jumps forward at T, the wall
 * times it skips are [T + o, T + o'): under SKIPPED_NEXT any match there
 * fires once at T, the first valid instant after the gap; under SKIP it
 * does not fire. Then the search goes on from T. The calendar walk skips
 * whole months and days that do not match, so a call costs a few hundred
 * steps at most, not one per second.
 */
#include "cron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"

#define DAY_S 86400LL
#define CYCLE_S (146097LL * DAY_S) /* 400 Gregorian years */
#define MIN_MS (-62135596800000LL) /* 0001-01-01T00:00:00Z */
#define MAX_MS 253402300799999LL   /* 9999-12-31T23:59:59.999Z */
#define EVER_START_S 946684800LL   /* 2000-01-01T00:00:00Z */

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

struct cron_expr {
    uint64_t bits[F_COUNT];  /* F_DOM: bits 1-31, F_MON: 1-12, F_DOW: 0-6 */
    bool dom_star, dow_star; /* field starts with '*' or '?' */
    bool hour_wild;          /* '*' or a step in the hour field */
    uint64_t dom_last;       /* bit n: "L-n" (L is L-0), n 0-30 */
    bool dom_lw;             /* "LW": the last weekday (Mon-Fri) of the month */
    uint32_t dom_w;          /* bit n: "nW", the weekday nearest to day n */
    uint8_t dow_last;        /* bit x: "xL", the last weekday x of the month */
    uint8_t dow_nth[5];      /* [n-1] bit x: "x#n", the n-th weekday x */
};

static const char *const FIELD_NAME[F_COUNT] = {
    "second", "minute", "hour", "day-of-month", "month", "day-of-week"};
static const int FIELD_MIN[F_COUNT] = {0, 0, 0, 1, 1, 0};
static const int FIELD_MAX[F_COUNT] = {59, 59, 23, 31, 12, 7};
static const char *const MONTHS[12] = {"JAN", "FEB", "MAR", "APR",
                                       "MAY", "JUN", "JUL", "AUG",
                                       "SEP", "OCT", "NOV", "DEC"};
static const char *const DAYS[7] = {"SUN", "MON", "TUE", "WED",
                                    "THU", "FRI", "SAT"};

/* ---- parsing ---------------------------------------------------------- */

typedef struct parser {
    const char *text; /* the whole expression, for positions */
    const char *p;    /* cursor in the current field */
    const char *end;  /* end of the current field */
    int field;
    rmqs_error *err;
} parser;

static rmqs_rc perr(parser *ps, const char *at, const char *what)
{
    return rmqs_fail(ps->err, RMQS_EINVAL, "cron", "position %d (%s): %s",
                     (int)(at - ps->text) + 1, FIELD_NAME[ps->field], what);
}

static bool is_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A number or (month, day-of-week) a 3-letter name at the cursor. */
static rmqs_rc parse_value(parser *ps, int *out)
{
    const char *start = ps->p;
    if (ps->p < ps->end && is_digit(*ps->p)) {
        int v = 0;
        while (ps->p < ps->end && is_digit(*ps->p)) {
            if (v > 1000)
                return perr(ps, start, "number too large");
            v = v * 10 + (*ps->p - '0');
            ps->p++;
        }
        int lo = FIELD_MIN[ps->field], hi = FIELD_MAX[ps->field];
        if (v < lo || v > hi) {
            char msg[64];
            snprintf(msg, sizeof msg, "%d is out of %d-%d", v, lo, hi);
            return perr(ps, start, msg);
        }
        *out = v;
        return RMQS_OK;
    }
    if (ps->end - ps->p >= 3 && is_alpha(ps->p[0]) && is_alpha(ps->p[1]) &&
        is_alpha(ps->p[2]) && (ps->field == F_MON || ps->field == F_DOW)) {
        const char *const *names = ps->field == F_MON ? MONTHS : DAYS;
        int n = ps->field == F_MON ? 12 : 7;
        for (int i = 0; i < n; i++) {
            bool alone =
                ps->end - ps->p == 3 || !is_alpha(ps->p[3]) ||
                (ps->field == F_DOW && (ps->p[3] == 'L' || ps->p[3] == 'l') &&
                 (ps->end - ps->p == 4 || !is_alpha(ps->p[4])));
            if (strncasecmp(ps->p, names[i], 3) == 0 && alone) {
                ps->p += 3;
                *out = ps->field == F_MON ? i + 1 : i;
                return RMQS_OK;
            }
        }
    }
    if (ps->p >= ps->end)
        return perr(ps, start, "a value is missing");
    char tok[24];
    size_t len = 0;
    while (ps->p + len < ps->end && len < sizeof tok - 1 && ps->p[len] != ',')
        len++;
    memcpy(tok, ps->p, len);
    tok[len] = '\0';
    char msg[48];
    snprintf(msg, sizeof msg, "unexpected \"%s\"", tok);
    return perr(ps, start, msg);
}

static void set_range(cron_expr *e, int f, int lo, int hi, int step)
{
    for (int v = lo; v <= hi; v += step)
        e->bits[f] |= 1ULL << (f == F_DOW ? v % 7 : v);
}

/* A day-of-month special at the cursor (L, L-n, LW, nW): true if it was one. */
static rmqs_rc parse_dom_special(parser *ps, cron_expr *e, bool *done)
{
    *done = false;
    if (*ps->p == 'L' || *ps->p == 'l') {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == 'W' || *ps->p == 'w')) {
            ps->p++;
            e->dom_lw = true;
        } else if (ps->p < ps->end && *ps->p == '-') {
            ps->p++;
            const char *nstart = ps->p;
            int n = 0;
            while (ps->p < ps->end && is_digit(*ps->p) && n <= 30)
                n = n * 10 + (*ps->p++ - '0');
            if (ps->p == nstart || n > 30)
                return perr(ps, nstart, "L-n needs n in 0-30");
            e->dom_last |= 1ULL << n;
        } else {
            e->dom_last |= 1ULL;
        }
        *done = true;
        return RMQS_OK;
    }
    const char *q = ps->p;
    while (q < ps->end && is_digit(*q))
        q++;
    if (q > ps->p && q < ps->end && (*q == 'W' || *q == 'w')) {
        int v;
        rmqs_rc rc = parse_value(ps, &v);
        if (rc != RMQS_OK)
            return rc;
        ps->p++; /* the W */
        e->dom_w |= 1U << v;
        *done = true;
        return RMQS_OK;
    }
    return RMQS_OK;
}

/* One list item of field ps->field. */
static rmqs_rc parse_item(parser *ps, cron_expr *e)
{
    int f = ps->field;
    const char *start = ps->p;
    int lo = FIELD_MIN[f], hi = FIELD_MAX[f];
    bool star = false;
    rmqs_rc rc;

    if (ps->p >= ps->end || *ps->p == ',')
        return perr(ps, start, "an empty list item");
    if (*ps->p == '?') {
        if (f != F_DOM && f != F_DOW)
            return perr(ps, start,
                        "? is only allowed in day-of-month and day-of-week");
        ps->p++;
        set_range(e, f, lo, f == F_DOW ? 6 : hi, 1);
        return RMQS_OK;
    }
    if (f == F_DOM) {
        bool done;
        rc = parse_dom_special(ps, e, &done);
        if (rc != RMQS_OK || done)
            return rc;
    }
    if (*ps->p == '*') {
        ps->p++;
        star = true;
    } else {
        rc = parse_value(ps, &lo);
        if (rc != RMQS_OK)
            return rc;
        if (f == F_DOW && ps->p < ps->end && (*ps->p == 'L' || *ps->p == 'l')) {
            ps->p++;
            e->dow_last |= (uint8_t)(1U << (lo % 7));
            return RMQS_OK;
        }
        if (f == F_DOW && ps->p < ps->end && *ps->p == '#') {
            ps->p++;
            const char *nstart = ps->p;
            if (ps->p >= ps->end || *ps->p < '1' || *ps->p > '5' ||
                (ps->p + 1 < ps->end && is_digit(ps->p[1])))
                return perr(ps, nstart, "x#n needs n in 1-5");
            e->dow_nth[*ps->p - '1'] |= (uint8_t)(1U << (lo % 7));
            ps->p++;
            return RMQS_OK;
        }
        if (ps->p < ps->end && *ps->p == '-') {
            ps->p++;
            const char *hstart = ps->p;
            rc = parse_value(ps, &hi);
            if (rc != RMQS_OK)
                return rc;
            if (hi < lo) {
                char msg[64];
                snprintf(msg, sizeof msg, "range %d-%d is backwards", lo, hi);
                return perr(ps, hstart, msg);
            }
        } else if (!(ps->p < ps->end && *ps->p == '/')) {
            hi = lo; /* a single value */
        } else if (f == F_DOW) {
            hi = 7; /* "a/n" runs to the max: 7, Sunday again (as croniter) */
        }
    }
    int step = 1;
    if (ps->p < ps->end && *ps->p == '/') {
        ps->p++;
        const char *sstart = ps->p;
        int n = 0;
        while (ps->p < ps->end && is_digit(*ps->p) && n <= 1000)
            n = n * 10 + (*ps->p++ - '0');
        int span = FIELD_MAX[f] - FIELD_MIN[f] + 1;
        if (ps->p == sstart || n < 1 || n > span) {
            char msg[64];
            snprintf(msg, sizeof msg, "a step needs a number in 1-%d", span);
            return perr(ps, sstart, msg);
        }
        step = n;
        if (f == F_HOUR)
            e->hour_wild = true;
    }
    if (star && f == F_HOUR)
        e->hour_wild = true;
    if (star && f == F_DOW)
        hi = 6; /* "*" with a step counts 0-6, 7 is Sunday again */
    set_range(e, f, lo, hi, step);
    return RMQS_OK;
}

static rmqs_rc parse_field(parser *ps, cron_expr *e)
{
    const char *first = ps->p;
    for (;;) {
        rmqs_rc rc = parse_item(ps, e);
        if (rc != RMQS_OK)
            return rc;
        if (ps->p == ps->end)
            break;
        if (*ps->p != ',') {
            char msg[32];
            snprintf(msg, sizeof msg, "unexpected \"%c\"", *ps->p);
            return perr(ps, ps->p, msg);
        }
        ps->p++;
    }
    if (ps->field == F_DOM)
        e->dom_star = *first == '*' || *first == '?';
    if (ps->field == F_DOW)
        e->dow_star = *first == '*' || *first == '?';
    return RMQS_OK;
}

static const struct {
    const char *name, *expr;
} MACROS[] = {
    {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
    {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

rmqs_rc cron_parse(const char *text, cron_expr **out, rmqs_error *err)
{
    *out = NULL;
    if (text == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "cron",
                         "a cron expression is required");
    const char *s = text;
    while (is_space(*s))
        s++;
    if (*s == '@') {
        size_t len = 0;
        while (s[len] != '\0' && !is_space(s[len]))
            len++;
        const char *rest = s + len;
        while (is_space(*rest))
            rest++;
        for (size_t i = 0; i < sizeof MACROS / sizeof MACROS[0]; i++) {
            if (strlen(MACROS[i].name) == len &&
                strncasecmp(s, MACROS[i].name, len) == 0 && *rest == '\0')
                return cron_parse(MACROS[i].expr, out, err);
        }
        return rmqs_fail(err, RMQS_EINVAL, "cron",
                         "position %d: unknown macro (@yearly, @annually, "
                         "@monthly, @weekly, "
                         "@daily, @midnight or @hourly)",
                         (int)(s - text) + 1);
    }

    const char *starts[7], *ends[7];
    int n = 0;
    while (*s != '\0') {
        if (n == 7)
            break;
        starts[n] = s;
        while (*s != '\0' && !is_space(*s))
            s++;
        ends[n++] = s;
        while (is_space(*s))
            s++;
    }
    if (n != 5 && n != 6)
        return rmqs_fail(
            err, RMQS_EINVAL, "cron",
            "position %d: expected 5 fields (minute hour day-of-month month "
            "day-of-week) or 6 (second first), found %s%d",
            n == 7 ? (int)(starts[6] - text) + 1 : (int)(s - text) + 1,
            n == 7 ? "more than " : "", n == 7 ? 6 : n);

    cron_expr *e = calloc(1, sizeof *e);
    if (e == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    parser ps = {.text = text, .err = err};
    int first = 0;
    if (n == 5) {
        e->bits[F_SEC] = 1; /* second 0 */
        first = 1;
    }
    for (int i = 0; i < n; i++) {
        ps.field = first + i;
        ps.p = starts[i];
        ps.end = ends[i];
        rmqs_rc rc = parse_field(&ps, e);
        if (rc != RMQS_OK) {
            free(e);
            return rc;
        }
    }
    *out = e;
    return RMQS_OK;
}

void cron_free(cron_expr *e)
{
    free(e);
}

cron_dst cron_default_dst(const cron_expr *e)
{
    if (e->hour_wild)
        return (cron_dst){CRON_SKIPPED_SKIP, CRON_REPEATED_BOTH};
    return (cron_dst){CRON_SKIPPED_NEXT, CRON_REPEATED_FIRST};
}

/* ---- matching --------------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int weekday(int64_t days) /* 0 = Sunday; 1970-01-01 was a Thursday */
{
    return (int)(((days % 7) + 11) % 7);
}

/* The day of the month of the weekday nearest to day n of y-m, never
 * outside the month; 0 if the month has no day n. */
static int nearest_weekday(int64_t y, int m, int n, int dim)
{
    if (n > dim)
        return 0;
    int wd = weekday(tu_days_from_civil(y, m, n));
    if (wd == 6) /* Saturday: the Friday before, or the Monday after the 1st */
        return n == 1 ? 3 : n - 1;
    if (wd ==
        0) /* Sunday: the Monday after, or the Friday before the last day */
        return n == dim ? n - 2 : n + 1;
    return n;
}

static bool day_matches(const cron_expr *e, int64_t y, int m, int d,
                        int64_t days)
{
    int dim = tu_days_in_month(y, m);
    int wd = weekday(days);
    bool dom = (e->bits[F_DOM] >> d) & 1;
    if (!dom && e->dom_last != 0 && dim - d <= 30)
        dom = (e->dom_last >> (dim - d)) & 1;
    if (!dom && e->dom_lw) {
        int last = dim, lwd = weekday(days + (dim - d));
        if (lwd == 6)
            last -= 1;
        else if (lwd == 0)
            last -= 2;
        dom = d == last;
    }
    for (int n = 1; !dom && n <= 31 && e->dom_w >> n != 0; n++)
        if (((e->dom_w >> n) & 1) && nearest_weekday(y, m, n, dim) == d)
            dom = true;
    bool dow = (e->bits[F_DOW] >> wd) & 1;
    if (!dow && ((e->dow_last >> wd) & 1) && d + 7 > dim)
        dow = true;
    if (!dow && ((e->dow_nth[(d - 1) / 7] >> wd) & 1))
        dow = true;
    if (!e->dom_star && !e->dow_star)
        return dom || dow;
    return dom && dow;
}

/* The lowest bit >= from in bits below limit, or -1. */
static int next_bit(uint64_t bits, int from, int limit)
{
    if (from >= limit)
        return -1;
    uint64_t b = bits >> from;
    if (b == 0)
        return -1;
    int v = from + __builtin_ctzll(b);
    return v < limit ? v : -1;
}

/* The first matching time of day >= sod, in seconds; -1 if none. */
static int64_t next_time_of_day(const cron_expr *e, int64_t sod)
{
    int h0 = (int)(sod / 3600), m0 = (int)(sod / 60 % 60), s0 = (int)(sod % 60);
    for (int h = next_bit(e->bits[F_HOUR], h0, 24); h >= 0;
         h = next_bit(e->bits[F_HOUR], h + 1, 24)) {
        for (int mi = next_bit(e->bits[F_MIN], h == h0 ? m0 : 0, 60); mi >= 0;
             mi = next_bit(e->bits[F_MIN], mi + 1, 60)) {
            int s = next_bit(e->bits[F_SEC], h == h0 && mi == m0 ? s0 : 0, 60);
            if (s >= 0)
                return h * 3600LL + mi * 60LL + s;
        }
    }
    return -1;
}

bool cron_matches_wall(const cron_expr *e, int64_t wall_s)
{
    int64_t days = floor_div(wall_s, DAY_S), sod = wall_s - days * DAY_S;
    int64_t y;
    int m, d;
    tu_civil_from_days(days, &y, &m, &d);
    if (!((e->bits[F_MON] >> m) & 1) || !day_matches(e, y, m, d, days))
        return false;
    return next_time_of_day(e, sod) == sod;
}

/* The first matching wall time in [lo, hi), in *w. */
static bool find_wall(const cron_expr *e, int64_t lo, int64_t hi, int64_t *w)
{
    int64_t days = floor_div(lo, DAY_S), sod = lo - days * DAY_S;
    while (days * DAY_S < hi) {
        int64_t y;
        int m, d;
        tu_civil_from_days(days, &y, &m, &d);
        if (!((e->bits[F_MON] >> m) & 1)) {
            int nm = next_bit(e->bits[F_MON], m + 1, 13);
            if (nm < 0) /* January of the next year, then its first month */
                days = tu_days_from_civil(y + 1, 1, 1);
            else
                days = tu_days_from_civil(y, nm, 1);
            sod = 0;
            continue;
        }
        if (day_matches(e, y, m, d, days)) {
            int64_t tod = next_time_of_day(e, sod);
            if (tod >= 0) {
                int64_t cand = days * DAY_S + tod;
                if (cand >= hi)
                    return false;
                *w = cand;
                return true;
            }
        }
        days++;
        sod = 0;
    }
    return false;
}

bool cron_next(const cron_expr *e, const tz_t *z, cron_dst dst,
               int64_t after_ms, int64_t *next_ms)
{
    if (after_ms < MIN_MS || after_ms > MAX_MS)
        return false;
    int64_t t = floor_div(after_ms, 1000) + 1;
    int64_t limit = t + CYCLE_S;
    while (t < limit) {
        int32_t o = tz_offset_at(z, t), ob, oa, pb, pa;
        int64_t T, P;
        bool has_next = tz_next_transition(z, t, &T, &ob, &oa);
        if (!has_next || T > limit)
            T = limit, oa = o, has_next = false;
        int64_t lo = t + o;
        /* After a fall-back, the walls [P + pa, P + pb) were shown before. */
        if (dst.repeated == CRON_REPEATED_FIRST &&
            tz_prev_transition(z, t, &P, &pb, &pa) && pb > pa && lo < P + pb)
            lo = P + pb;
        int64_t w;
        if (lo < T + o && find_wall(e, lo, T + o, &w)) {
            *next_ms = (w - o) * 1000;
            return true;
        }
        if (!has_next)
            return false;
        if (oa > o && dst.skipped == CRON_SKIPPED_NEXT &&
            find_wall(e, T + o, T + oa, &w)) {
            *next_ms = T * 1000;
            return true;
        }
        t = T;
    }
    return false;
}

bool cron_ever_fires(const cron_expr *e, const tz_t *z, cron_dst dst)
{
    int64_t next;
    return cron_next(e, z, dst, EVER_START_S * 1000, &next);
}
