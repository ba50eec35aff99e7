/*
 * log.h - one line per event on stderr:
 *   2026-11-30T14:00:00.123Z level=info module=dispatcher msg="published" n=12
 * or, with log_set_format(LOG_FORMAT_JSON), one JSON object per line:
 *   {"time":"...","level":"info","module":"dispatcher","message":"published","n":12}
 * Callers write the key=value fields in fmt (quote values that may hold
 * spaces). A file that logs names its module once, after its #includes:
 *   #define MOD "dispatcher"
 * and passes MOD to every call (the files of one subsystem share a name;
 * tests/style/check.sh refuses a module written as a string at a call). Thread-safe (one write(2) per
 * line). Never pass a credential: log the safe URL from amqpp_safe_url().
 */
#ifndef RMQS_LOG_H
#define RMQS_LOG_H

#include "rmqs.h"

typedef enum log_level {
    LOG_DEBUG = 0,
    LOG_INFO,
    LOG_WARN,
    LOG_ERROR
} log_level;

typedef enum log_format {
    LOG_FORMAT_TEXT = 0, /* time level=... module=... msg="..." fields */
    LOG_FORMAT_JSON      /* one object per line with time, level, module,
                            message and the fields */
} log_format;

/* Lines below min are dropped (default LOG_INFO). The names
 * (--log-level debug|info|warn|error) are config's. */
void log_set_level(log_level min);

/* LOG_FORMAT_TEXT (default) or LOG_FORMAT_JSON (--log-format). In JSON every
 * line is one valid object (integers as JSON numbers): control characters
 * are escaped, a string that is not UTF-8 has each byte above 0x7f written
 * as \xNN, and an event too long for a line keeps the start of its fields
 * with "truncated": true. */
void log_set_format(log_format format);

/* msg is a short constant description; fmt (may be NULL) adds key=value
 * fields. */
void log_write(log_level lv, const char *module, const char *msg,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define log_debug(m, msg, ...) log_write(LOG_DEBUG, m, msg, __VA_ARGS__)
#define log_info(m, msg, ...) log_write(LOG_INFO, m, msg, __VA_ARGS__)
#define log_warn(m, msg, ...) log_write(LOG_WARN, m, msg, __VA_ARGS__)
#define log_error(m, msg, ...) log_write(LOG_ERROR, m, msg, __VA_ARGS__)

#endif
