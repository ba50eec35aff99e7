/*
 * cron_dump.c - fire times of cron expressions, for the differential test.
 *
 * Reads lines "expr<TAB>zone<TAB>start_ms<TAB>count[<TAB>dst]" on stdin,
 * where dst is "next,first" style (default: the expression's own rules,
 * cron_default_dst). For each line prints one line: "OK" followed by up to
 * count fire instants in ms (fewer if the expression stops firing within
 * the 400-year horizon), or "ERR <message>" when the expression or the
 * zone is rejected. Output is flushed per line, so a driver may talk to it
 * through a pipe. test_cron_differential.py drives it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron.h"

static void answer(char *line)
{
    char *fields[5] = {0};
    int n = 0;
    for (char *p = line; n < 5;) {
        fields[n++] = p;
        char *tab = strchr(p, '\t');
        if (tab == NULL)
            break;
        *tab = '\0';
        p = tab + 1;
    }
    if (n < 4) {
        printf("ERR want expr, zone, start_ms and count separated by tabs\n");
        return;
    }
    rmqs_error err = {0};
    cron_expr *e = NULL;
    tz_t *z = NULL;
    if (cron_parse(fields[0], &e, &err) != RMQS_OK ||
        tz_open(fields[1], &z, &err) != RMQS_OK) {
        printf("ERR %s: %s\n", err.field, err.message);
        cron_free(e);
        return;
    }
    cron_dst dst = cron_default_dst(e);
    if (n == 5) {
        dst.skipped = strncmp(fields[4], "skip", 4) == 0 ? CRON_SKIPPED_SKIP
                                                         : CRON_SKIPPED_NEXT;
        dst.repeated = strstr(fields[4], "both") != NULL ? CRON_REPEATED_BOTH
                                                         : CRON_REPEATED_FIRST;
    }
    long long at = strtoll(fields[2], NULL, 10);
    int count = atoi(fields[3]);
    fputs("OK", stdout);
    for (int i = 0; i < count; i++) {
        int64_t next;
        if (!cron_next(e, z, dst, at, &next))
            break;
        printf(" %lld", (long long)next);
        at = next;
    }
    putchar('\n');
    cron_free(e);
    tz_free(z);
}

int main(void)
{
    char line[4096];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        answer(line);
        fflush(stdout);
    }
    return 0;
}
