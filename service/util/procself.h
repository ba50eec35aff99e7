/*
 * procself.h - this process as the kernel counts it (/proc/self), for the
 * standard process_* metrics of GET /metrics (the names Prometheus's own
 * process collector uses) and the start time GET /status reports.
 */
#ifndef RMQS_PROCSELF_H
#define RMQS_PROCSELF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct procself {
    double cpu_seconds;  /* user + system CPU time */
    int64_t rss_bytes;   /* resident memory */
    int64_t vsize_bytes; /* virtual memory */
    int64_t open_fds;    /* entries of /proc/self/fd */
    int64_t max_fds;     /* RLIMIT_NOFILE's soft limit */
    double start_time_s; /* Unix time the process started */
} procself;

/* Read them all; false (and *out unchanged in part) if /proc/self/stat or
 * /proc/stat cannot be read. Any thread; a few small file reads. */
bool procself_read(procself *out);

#endif
