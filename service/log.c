/*
 * log.c - structured lines on stderr, as text or as one JSON object each.
 *
 * Why a module of its own: every subsystem logs the same way (time, level,
 * module, message, key=value fields), so operators can grep and ship one
 * format. Each line is built in a stack buffer and written with a single
 * write(2), which keeps lines from different threads from interleaving.
 */
#include "log.h"

#include <errno.h>
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
 * s as a JSON string. jansson refuses text that is not UTF-8 (a file name,
 * a broker's reply text); then every byte above 0x7f is written as the four
 * characters \xNN instead, so the line stays JSON and nothing is lost.
 * NULL only on ENOMEM.
 */
static json_t *json_text(const char *s)
{
    json_t *v = json_string(s);
    char *esc, *p;

    if (v != NULL)
        return v;
    esc = malloc(4 * strlen(s) + 1);
    if (esc == NULL)
        return NULL;
    p = esc;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c < 0x80)
            *p++ = (char)*c;
        else
            p += sprintf(p, "\\x%02x", *c);
    }
    *p = '\0';
    v = json_string(esc);
    free(esc);
    return v;
}

/*
 * Turn the key=value fields callers write (value bare up to a space, or
 * "quoted" up to the next quote) into members of obj. Values that look
 * like integers (and fit in 64 bits) become JSON integers.
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
            json_object_set_new(obj, "extra", json_text(key));
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
        errno = 0;
        long long v = strtoll(val, &num_end, 10);
        if (*val && num_end && *num_end == '\0' && errno != ERANGE &&
            (val[0] != '0' || val[1] == '\0'))
            json_object_set_new(obj, key, json_integer(v));
        else
            json_object_set_new(obj, key, json_text(val));
    }
}

/*
 * One JSON object into line (without the newline); its length, or 0 if it
 * cannot be built. An object that does not fit (long fields, or escaping
 * that multiplies control bytes by six) is built again from the first
 * half of the fields text, and so on, with "truncated": true, so even an
 * over-long event is one JSON line.
 */
static size_t json_line(char *line, size_t cap, const char *ts, log_level lv,
                        const char *module, const char *msg,
                        const char *fields, bool truncated)
{
    char part[LOG_LINE_MAX]; /* fields_to_json cuts its input up */
    size_t all = strlen(fields), keep = all < sizeof(part) ? all
                                                         : sizeof(part) - 1;

    for (;;) {
        json_t *o = json_object();
        size_t n;

        if (o == NULL)
            return 0;
        json_object_set_new(o, "time", json_text(ts));
        json_object_set_new(o, "level", json_text(log_names[lv]));
        json_object_set_new(o, "module", json_text(module));
        json_object_set_new(o, "message", json_text(msg));
        memcpy(part, fields, keep);
        part[keep] = '\0';
        fields_to_json(o, part);
        if (truncated || keep < all)
            json_object_set_new(o, "truncated", json_true());
        n = json_dumpb(o, line, cap - 1, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(o);
        if (n > 0 && n < cap - 1)
            return n;
        if (keep == 0)
            return 0;
        keep /= 2;
    }
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
        bool cut = false;
        fields[0] = '\0';
        if (fmt != NULL && *fmt != '\0') {
            va_list ap;
            va_start(ap, fmt);
            n = vsnprintf(fields, sizeof(fields), fmt, ap);
            va_end(ap);
            cut = n >= (int)sizeof(fields);
        }
        len = json_line(line, sizeof(line), ts, lv, module, msg, fields, cut);
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
