/*
 * log.c - structured lines on stderr.
 *
 * Why a module of its own: every subsystem logs the same way (time, level,
 * module, message, key=value fields), so operators can grep and ship one
 * format. Each line is built in a stack buffer and written with a single
 * write(2), which keeps lines from different threads from interleaving.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "timeutil.h"

#define LOG_LINE_MAX 2048

static volatile log_level log_min = LOG_INFO;

static const char *const log_names[] = {"debug", "info", "warn", "error"};

rmqs_rc log_set_level(const char *name)
{
    for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++) {
        if (strcmp(name, log_names[i]) == 0) {
            log_min = (log_level)i;
            return RMQS_OK;
        }
    }
    return RMQS_EINVAL;
}

void log_write(log_level lv, const char *module, const char *msg,
               const char *fmt, ...)
{
    char line[LOG_LINE_MAX];
    char ts[TU_RFC3339_LEN + 1];
    size_t len;
    int n;

    if (lv < log_min)
        return;
    tu_format_rfc3339(tu_now_ms(), ts);
    n = snprintf(line, sizeof(line), "%s level=%s module=%s msg=\"%s\"", ts,
                 log_names[lv], module, msg);
    if (n < 0)
        return;
    len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if (fmt != NULL && *fmt != '\0' && len + 2 < sizeof(line)) {
        va_list ap;
        line[len++] = ' ';
        va_start(ap, fmt);
        n = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
        va_end(ap);
        if (n > 0)
            len += (size_t)n < sizeof(line) - len ? (size_t)n
                                                  : sizeof(line) - len - 1;
    }
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2; /* truncated: keep room for the newline */
    line[len++] = '\n';
    /* One write per line; a failed log write has nowhere to be reported. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
