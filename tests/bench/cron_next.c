/*
 * cron_next.c - the cost of one next-fire computation (cron_next), in ns.
 *
 *   cron_next [calls_per_run] [runs]      (defaults 20000 and 7)
 *
 * For each expression and zone, walks calls_per_run successive fire times
 * (each from the one before, starting 2027-01-01, again from there after
 * year 9999) and prints the median
 * over runs of ns per call, plus the cost of tz_open (first open of a zone
 * reads it through GLib; later opens hit the per-process table). Built by
 * tests/bench/run.sh with -O2 against the service's own cron.c and tz.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cron.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int calls = argc > 1 ? atoi(argv[1]) : 20000;
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    static const char *const exprs[] = {"* * * * * *", "*/15 * * * *",
                                        "30 2 * * *",  "0 9 * * 1-5",
                                        "0 0 LW * *",  "0 0 29 2 *"};
    static const char *const zones[] = {"UTC", "Europe/Berlin",
                                        "Australia/Lord_Howe"};
    if (calls < 1 || runs < 1 || runs > 101) {
        fprintf(stderr, "usage: %s [calls_per_run >= 1] [runs 1-101]\n",
                argv[0]);
        return 2;
    }
    for (size_t zi = 0; zi < sizeof zones / sizeof zones[0]; zi++) {
        tz_t *z;
        double t0 = now_ns();
        if (tz_open(zones[zi], &z, NULL) != RMQS_OK)
            return 1;
        double t1 = now_ns();
        tz_free(z);
        double t2 = now_ns();
        if (tz_open(zones[zi], &z, NULL) != RMQS_OK)
            return 1;
        double t3 = now_ns();
        printf("tz_open %-20s first %.2f ms, again %.0f ns\n", zones[zi],
               (t1 - t0) / 1e6, t3 - t2);
        for (size_t ei = 0; ei < sizeof exprs / sizeof exprs[0]; ei++) {
            cron_expr *e;
            if (cron_parse(exprs[ei], &e, NULL) != RMQS_OK)
                return 1;
            cron_dst dst = cron_default_dst(e);
            double per[101];
            for (int r = 0; r < runs; r++) {
                int64_t at = 1798761600000; /* 2027-01-01T00:00:00Z */
                double a = now_ns();
                for (int i = 0; i < calls; i++)
                    if (!cron_next(e, z, dst, at,
                                   &at)) /* past year 9999: again */
                        at = 1798761600000;
                per[r] = (now_ns() - a) / calls;
            }
            qsort(per, (size_t)runs, sizeof per[0], cmp_double);
            printf("cron_next %-14s %-20s median %8.0f ns/call (min %.0f, max "
                   "%.0f; %d runs x %d)\n",
                   exprs[ei], zones[zi], per[runs / 2], per[0], per[runs - 1],
                   runs, calls);
            cron_free(e);
        }
        tz_free(z);
    }
    return 0;
}
