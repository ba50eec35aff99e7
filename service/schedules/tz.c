/*
 * tz.c - time zones from the system tzdata through GLib (see tz.h).
 *
 * Why GLib and not ICU: ICU 72 carries its own frozen copy of the zone
 * rules (2022e), while a schedule must follow the rules the operator
 * installs with the tzdata package. GLib reads the system TZif files and
 * extends them with their footer rule, so offsets after 2037 are right too
 * (checked for Europe/Berlin and America/New_York in test_tz.c).
 *
 * GLib's own lookup is a linear scan over its intervals, so tz_open asks
 * it once for every offset change between 1800 and 2500 (the interval
 * index it returns grows with time: bisecting between two instants with
 * different indices finds each boundary to the second) and keeps a sorted
 * table; every later lookup is a binary search in that table. Tables are
 * kept for the life of the process, one per zone name (a few hundred zones
 * exist, each table a few kB), so opening a zone again costs a lookup, not
 * the 10 ms of asking GLib.
 */
#include "tz.h"

#include <glib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeutil.h"

#define TZ_FIRST_S (-5364662400LL) /* 1800-01-01T00:00:00Z */
#define TZ_LAST_S 16725225600LL    /* 2500-01-01T00:00:00Z */

typedef struct tz_table {
    char *name;
    size_t n;     /* transitions */
    int64_t *at;  /* at[i]: the instant the offset becomes off[i + 1] */
    int32_t *off; /* n + 1 offsets; off[0] before at[0] */
    struct tz_table *next;
} tz_table;

struct tz {
    const tz_table *t; /* shared, never freed */
};

static pthread_mutex_t tables_mu = PTHREAD_MUTEX_INITIALIZER;
static tz_table *tables; /* every zone opened so far */

typedef struct tz_builder {
    GTimeZone *gz;
    int64_t *at;
    int32_t *off;
    size_t n, cap;
    bool failed;
} tz_builder;

static int interval_at(GTimeZone *gz, int64_t t)
{
    return g_time_zone_find_interval(gz, G_TIME_TYPE_UNIVERSAL, t);
}

static void builder_add(tz_builder *b, int64_t at, int32_t off)
{
    if (b->failed || off == b->off[b->n])
        return; /* another abbreviation or isdst flag only: no change of offset */
    if (b->n + 1 >= b->cap) {
        size_t cap = b->cap * 2;
        int64_t *a = realloc(b->at, cap * sizeof *a);
        if (a != NULL)
            b->at = a;
        int32_t *o = realloc(b->off, (cap + 1) * sizeof *o);
        if (o != NULL)
            b->off = o;
        if (a == NULL || o == NULL) {
            b->failed = true;
            return;
        }
        b->cap = cap;
    }
    b->at[b->n] = at;
    b->off[b->n + 1] = off;
    b->n++;
}

/* Every interval boundary in (lo, hi], given the interval indices at both
 * ends, in increasing order. */
static void bisect(tz_builder *b, int64_t lo, int ilo, int64_t hi, int ihi)
{
    if (ilo == ihi || b->failed)
        return;
    if (hi - lo == 1) {
        builder_add(b, hi, g_time_zone_get_offset(b->gz, ihi));
        return;
    }
    int64_t mid = lo + (hi - lo) / 2;
    int imid = interval_at(b->gz, mid);
    bisect(b, lo, ilo, mid, imid);
    bisect(b, mid, imid, hi, ihi);
}

/* Read zone iana from GLib into a new table (NULL: unknown zone or no memory). */
static tz_table *table_load(const char *iana, rmqs_rc *rc)
{
    *rc = RMQS_EINVAL;
    GTimeZone *gz = g_time_zone_new_identifier(iana);
    if (gz == NULL)
        return NULL;
    *rc = RMQS_ENOMEM;
    tz_builder b = {.gz = gz, .cap = 64};
    b.at = malloc(b.cap * sizeof *b.at);
    b.off = malloc((b.cap + 1) * sizeof *b.off);
    tz_table *t = calloc(1, sizeof *t);
    char *name = strdup(iana);
    if (b.at == NULL || b.off == NULL || t == NULL || name == NULL)
        goto out;
    int ilo = interval_at(gz, TZ_FIRST_S), ihi = interval_at(gz, TZ_LAST_S);
    b.off[0] = g_time_zone_get_offset(gz, ilo);
    bisect(&b, TZ_FIRST_S, ilo, TZ_LAST_S, ihi);
    if (b.failed)
        goto out;
    t->name = name;
    t->n = b.n;
    t->at = b.at;
    t->off = b.off;
    *rc = RMQS_OK;
    g_time_zone_unref(gz);
    return t;
out:
    free(name);
    free(t);
    free(b.at);
    free(b.off);
    g_time_zone_unref(gz);
    return NULL;
}

/* Whether path is a TZif file (RFC 8536: it starts with "TZif"). tzdata
 * ships other files beside the zones (leapseconds, SECURITY, zone.tab...);
 * GLib 2.74 leaks a little memory each time it is handed one of them, so
 * they never reach it. */
static bool tzif_file(const char *path)
{
    char magic[4];
    FILE *f = fopen(path, "rb");
    bool ok = f != NULL && fread(magic, 1, sizeof magic, f) == sizeof magic &&
              memcmp(magic, "TZif", 4) == 0;

    if (f != NULL)
        fclose(f);
    return ok;
}

/* Only IANA names: each part letters, digits, '_', '-', '+', the parts
 * joined by single '/' (GLib also takes POSIX TZ strings such as
 * "EST5EDT,M3.2.0,M11.1.0" and offsets such as "+01:00"), naming a TZif
 * file under /usr/share/zoneinfo. */
static bool iana_name_ok(const char *iana)
{
    if (iana == NULL || iana[0] == '\0' || strlen(iana) > 200)
        return false;
    if (iana[0] == '+' || iana[0] == '-' || (iana[0] >= '0' && iana[0] <= '9'))
        return false;
    for (const char *p = iana; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '+' ||
                  (c == '/' && p != iana && p[1] != '\0' && p[1] != '/');
        if (!ok)
            return false;
    }
    char path[256];
    snprintf(path, sizeof path, "/usr/share/zoneinfo/%s", iana);
    return strcmp(iana, "UTC") == 0 ||
           (g_file_test(path, G_FILE_TEST_IS_REGULAR) && tzif_file(path));
}

rmqs_rc tz_open(const char *iana, tz_t **out, rmqs_error *err)
{
    *out = NULL;
    if (!iana_name_ok(iana))
        return rmqs_fail(err, RMQS_EINVAL, "timezone",
                         "unknown time zone \"%.64s\"",
                         iana != NULL ? iana : "");
    tz_t *z = malloc(sizeof *z);
    if (z == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    rmqs_rc rc = RMQS_OK;
    pthread_mutex_lock(&tables_mu);
    tz_table *t = tables;
    while (t != NULL && strcmp(t->name, iana) != 0)
        t = t->next;
    if (t == NULL) {
        t = table_load(iana, &rc);
        if (t != NULL) {
            t->next = tables;
            tables = t;
        }
    }
    pthread_mutex_unlock(&tables_mu);
    if (t == NULL) {
        free(z);
        if (rc == RMQS_ENOMEM)
            return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        return rmqs_fail(err, RMQS_EINVAL, "timezone",
                         "unknown time zone \"%.64s\"", iana);
    }
    z->t = t;
    *out = z;
    return RMQS_OK;
}

void tz_free(tz_t *z)
{
    free(z);
}

const char *tz_name(const tz_t *z)
{
    return z->t->name;
}

/* The number of transitions at or before t. */
static size_t count_upto(const tz_table *z, int64_t t)
{
    size_t lo = 0, hi = z->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->at[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int32_t tz_offset_at(const tz_t *z, int64_t utc_s)
{
    return z->t->off[count_upto(z->t, utc_s)];
}

bool tz_next_transition(const tz_t *z, int64_t utc_s, int64_t *at,
                        int32_t *before, int32_t *after)
{
    const tz_table *t = z->t;
    size_t i = count_upto(t, utc_s);
    if (i >= t->n)
        return false;
    *at = t->at[i];
    *before = t->off[i];
    *after = t->off[i + 1];
    return true;
}

bool tz_prev_transition(const tz_t *z, int64_t utc_s, int64_t *at,
                        int32_t *before, int32_t *after)
{
    const tz_table *t = z->t;
    size_t i = count_upto(t, utc_s);
    if (i == 0)
        return false;
    *at = t->at[i - 1];
    *before = t->off[i - 1];
    *after = t->off[i];
    return true;
}

void tz_format_local(const tz_t *z, int64_t utc_ms, char buf[40])
{
    int64_t s = utc_ms >= 0 ? utc_ms / 1000 : -((-utc_ms + 999) / 1000);
    int ms = (int)(utc_ms - s * 1000);
    int32_t off = tz_offset_at(z, s);
    int64_t local = s + off;
    int64_t days = local >= 0 ? local / 86400 : -((-local + 86399) / 86400);
    int64_t sod = local - days * 86400;
    int64_t y;
    int m, d;
    tu_civil_from_days(days, &y, &m, &d);
    int32_t a = off < 0 ? -off : off;
    /* Offsets with seconds (LMT before 1900) are shown to the minute. */
    snprintf(buf, 40, "%04lld-%02d-%02dT%02d:%02d:%02d.%03d%c%02d:%02d",
             (long long)y, m, d, (int)(sod / 3600), (int)(sod / 60 % 60),
             (int)(sod % 60), ms, off < 0 ? '-' : '+', (int)(a / 3600),
             (int)(a / 60 % 60));
}

const char *tz_data_version(void)
{
    static char version[32];
    static gsize done = 0;
    if (g_once_init_enter(&done)) {
        snprintf(version, sizeof version, "unknown");
        FILE *f = fopen("/usr/share/zoneinfo/tzdata.zi", "r");
        if (f != NULL) {
            char line[128];
            char v[32];
            if (fgets(line, sizeof line, f) != NULL &&
                sscanf(line, "# version %31s", v) == 1)
                snprintf(version, sizeof version, "%s", v);
            fclose(f);
        }
        g_once_init_leave(&done, 1);
    }
    return version;
}
