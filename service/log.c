/*
 * log.c - structured lines on stderr, as text or as one JSON object each.
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

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>

#include "timeutil.h"

#define LOG_LINE_MAX 2048

static volatile log_level log_min = LOG_INFO;
static volatile bool log_json = false;

static const char *const log_names[] = {"debug", "info", "warn", "error"};

void log_set_level(log_level min)
{
    log_min = min;
}

void log_set_format(log_format format)
{
    log_json = format == LOG_FORMAT_JSON;
}

/*
 * Turn the key=value fields callers write (value bare up to a space, or
 * "quoted" up to the next quote) into members of obj. Values that look
 * like integers become JSON integers.
 */
static void fields_to_json(json_t *obj, char *f)
{
    while (*f) {
        char *key, *val, *end;
        while (*f == ' ')
            f++;
        key = f;
        while (*f && *f != '=' && *f != ' ')
            f++;
        if (*f != '=') { /* not a field: keep the text */
            json_object_set_new(obj, "extra", json_string(key));
            return;
        }
        *f++ = '\0';
        if (*f == '"') {
            val = ++f;
            end = strchr(f, '"');
            if (end == NULL)
                end = f + strlen(f);
            f = *end ? end + 1 : end;
            *end = '\0';
        } else {
            val = f;
            while (*f && *f != ' ')
                f++;
            if (*f)
                *f++ = '\0';
        }
        char *num_end = NULL;
        long long v = strtoll(val, &num_end, 10);
        if (*val && num_end && *num_end == '\0' && (val[0] != '0' || val[1] == '\0'))
            json_object_set_new(obj, key, json_integer(v));
        else
            json_object_set_new(obj, key, json_string(val));
    }
}

static size_t json_line(char *line, size_t cap, const char *ts, log_level lv,
                        const char *module, const char *msg, char *fields)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "time", ts, "level",
                          log_names[lv], "module", module, "message", msg);
    size_t n = 0;

    if (o == NULL)
        return 0;
    if (fields != NULL)
        fields_to_json(o, fields);
    n = json_dumpb(o, line, cap - 1, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    return n < cap - 1 ? n : 0;
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
    if (log_json) {
        char fields[LOG_LINE_MAX];
        fields[0] = '\0';
        if (fmt != NULL && *fmt != '\0') {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(fields, sizeof(fields), fmt, ap);
            va_end(ap);
        }
        len = json_line(line, sizeof(line), ts, lv, module, msg, fields);
        if (len > 0) {
            line[len++] = '\n';
            ssize_t w = write(STDERR_FILENO, line, len);
            (void)w;
            return;
        }
        /* could not build JSON: fall back to text */
    }
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
