/*
 * procself.c - the process's CPU, memory, descriptors and start time, read
 * from /proc (see procself.h), as Prometheus's process collector reads
 * them: /proc/self/stat's utime, stime (clock ticks), vsize (bytes), rss
 * (pages) and starttime (ticks after boot, plus /proc/stat's btime), the
 * entries of /proc/self/fd, and the soft RLIMIT_NOFILE.
 */
#include "procself.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* /proc/stat's btime: the boot time, Unix seconds; -1 if unknown. */
static long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    long long bt = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "btime %lld", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

/* Entries of /proc/self/fd but the one reading it; -1 if unreadable. */
static int64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int64_t n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
            n++;
    closedir(d);
    return n;
}

bool procself_read(procself *out)
{
    char buf[1024], *p;
    unsigned long long utime, stime, start, vsize;
    long long rss, bt;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    struct rlimit rl;
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n;

    if (f == NULL)
        return false;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* after the command name, which may hold spaces and ')' itself */
    p = strrchr(buf, ')');
    if (p == NULL || tick <= 0 || page <= 0 ||
        sscanf(p + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d "
               "%*d %*d %*d %*d %*d %llu %llu %lld",
               &utime, &stime, &start, &vsize, &rss) != 5)
        return false;
    bt = boot_time();
    if (bt < 0)
        return false;
    out->cpu_seconds = (double)(utime + stime) / (double)tick;
    out->vsize_bytes = (int64_t)vsize;
    out->rss_bytes = (int64_t)rss * (int64_t)page;
    out->start_time_s = (double)bt + (double)start / (double)tick;
    out->open_fds = count_fds();
    out->max_fds =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
            ? (int64_t)rl.rlim_cur
            : -1;
    return true;
}
