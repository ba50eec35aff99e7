/*
 * log.c - structured lines on stderr, as text or as one JSON object each.
 *
 * Why a module of its own: every subsystem logs the same way (time, level,
 * module, message, key=value fields), so operators can grep and ship one
 * format. Each line is built in a stack buffer and written with a single
 * write(2), which keeps lines from different threads from interleaving.
 *
 * Values come from clients (a routing key, a header, a filter), so no value
 * may end its field, start another or end the line: fields_format writes
 * fmt's text as it is and every %s argument escaped (fields_format's
 * comment), and the JSON form is parsed back from that text honouring the
 * escapes. A line is one event, whatever its values hold.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "hexdigit.h"
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

/* The fields text being built: out[0..len), never past cap - 1 bytes. */
typedef struct fieldbuf {
    char *out;
    size_t cap, len;
    bool cut; /* something did not fit */
} fieldbuf;

static void fb_put(fieldbuf *b, const char *s, size_t n)
{
    size_t room = b->cap - 1 - b->len;

    if (n > room) {
        n = room;
        b->cut = true;
    }
    memcpy(b->out + b->len, s, n);
    b->len += n;
    b->out[b->len] = '\0';
}

/* Would a bare value need quotes to stay one field? */
static bool needs_quotes(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return true;
    }
    return false;
}

/* s[0..n) with quote, backslash and control characters escaped. */
static void fb_escaped(fieldbuf *b, const char *s, size_t n)
{
    char e[5];

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *rep = NULL;
        switch (c) {
        case '"': rep = "\\\""; break;
        case '\\': rep = "\\\\"; break;
        case '\n': rep = "\\n"; break;
        case '\r': rep = "\\r"; break;
        case '\t': rep = "\\t"; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                snprintf(e, sizeof(e), "\\x%02x", c);
                rep = e;
            }
        }
        if (rep != NULL)
            fb_put(b, rep, strlen(rep));
        else
            fb_put(b, (const char *)&s[i], 1);
    }
}

/*
 * fmt with its arguments into b, like vsnprintf, but every %s argument is
 * written so that it stays the one value it is:
 *   - inside quotes of fmt ("%s", "%s: %s"): quote, backslash and control
 *     characters escaped (\" \\ \n \r \t \xNN);
 *   - bare (key=%s): as it is when it holds no space, quote, '=',
 *     backslash or control character; otherwise quoted and escaped.
 * Every other conversion (integers, floating point, %c, %p) cannot carry
 * such characters and is formatted by snprintf on its own. Supports the
 * flags, width and precision (with *) and length modifiers C99 has; %n is
 * ignored.
 */
/* spec is a conversion parsed from fmt, which the compiler has checked
 * against the arguments (log_write's format attribute), and each is passed
 * the argument type its conversion takes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void fields_format(fieldbuf *b, const char *fmt, va_list ap)
{
    const char *p = fmt;
    bool in_quotes = false; /* inside a "..." of fmt's own text */

    while (*p != '\0') {
        char spec[32], tmp[512];
        size_t sl = 0;
        const char *start, *lit = strchr(p, '%');
        int width = -1, prec = -1, n = 0;
        char len[3] = "", conv;
        bool quoted;

        if (lit == NULL)
            lit = p + strlen(p);
        for (const char *q = p; q < lit; q++)
            if (*q == '"' && (q == fmt || q[-1] != '\\'))
                in_quotes = !in_quotes;
        fb_put(b, p, (size_t)(lit - p));
        if (*lit == '\0')
            return;
        start = lit;
        p = lit + 1;
        if (*p == '%') {
            fb_put(b, "%", 1);
            p++;
            continue;
        }
        spec[sl++] = '%';
        while (*p != '\0' && strchr("-+ #0", *p) != NULL && sl < 8)
            spec[sl++] = *p++;
        if (*p == '*') {
            width = va_arg(ap, int);
            p++;
        } else {
            while (*p >= '0' && *p <= '9')
                width = (width < 0 ? 0 : width * 10) + (*p++ - '0');
        }
        if (*p == '.') {
            p++;
            prec = 0;
            if (*p == '*') {
                prec = va_arg(ap, int);
                p++;
            } else {
                while (*p >= '0' && *p <= '9')
                    prec = prec * 10 + (*p++ - '0');
            }
        }
        for (int i = 0; i < 2 && *p != '\0' && strchr("hlLzjt", *p); i++)
            len[i] = *p++;
        conv = *p;
        if (conv == '\0')
            return;
        p++;
        if (width >= 0)
            sl += (size_t)snprintf(spec + sl, sizeof(spec) - sl, "%d", width);
        if (prec >= 0)
            sl += (size_t)snprintf(spec + sl, sizeof(spec) - sl, ".%d", prec);
        sl += (size_t)snprintf(spec + sl, sizeof(spec) - sl, "%s%c", len, conv);
        switch (conv) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            size_t sn;
            if (s == NULL)
                s = "(null)";
            sn = prec >= 0 ? strnlen(s, (size_t)prec) : strlen(s);
            quoted = in_quotes;
            if (width > (int)sn && strchr(spec, '-') == NULL)
                for (int i = (int)sn; i < width; i++)
                    fb_put(b, " ", 1);
            if (quoted) {
                fb_escaped(b, s, sn);
            } else if (needs_quotes(s, sn)) {
                fb_put(b, "\"", 1);
                fb_escaped(b, s, sn);
                fb_put(b, "\"", 1);
            } else {
                fb_put(b, s, sn);
            }
            if (width > (int)sn && strchr(spec, '-') != NULL)
                for (int i = (int)sn; i < width; i++)
                    fb_put(b, " ", 1);
            continue;
        }
        case 'd':
        case 'i':
            if (strcmp(len, "ll") == 0)
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, long long));
            else if (strcmp(len, "l") == 0)
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, long));
            else if (len[0] == 'z')
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, ssize_t));
            else if (len[0] == 'j')
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, intmax_t));
            else if (len[0] == 't')
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, ptrdiff_t));
            else
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, int));
            break;
        case 'o':
        case 'u':
        case 'x':
        case 'X':
            if (strcmp(len, "ll") == 0)
                n = snprintf(tmp, sizeof(tmp), spec,
                             va_arg(ap, unsigned long long));
            else if (strcmp(len, "l") == 0)
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, unsigned long));
            else if (len[0] == 'z')
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, size_t));
            else if (len[0] == 'j')
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, uintmax_t));
            else if (len[0] == 't')
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, ptrdiff_t));
            else
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, unsigned));
            break;
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G':
        case 'a':
        case 'A':
            if (len[0] == 'L')
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, long double));
            else
                n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, double));
            break;
        case 'c': {
            char c = (char)va_arg(ap, int);
            n = 0;
            fb_escaped(b, &c, 1);
            continue;
        }
        case 'p':
            n = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, void *));
            break;
        case 'n': (void)va_arg(ap, int *); continue;
        default: /* not a conversion: keep the text */
            fb_put(b, start, (size_t)(p - start));
            continue;
        }
        if (n > 0)
            fb_put(b, tmp,
                   (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
    }
}
#pragma GCC diagnostic pop

/* The keys every JSON line has: a field may not replace one. */
static bool reserved_key(const char *k)
{
    static const char *const keys[] = {"time",    "level",     "module",
                                       "message", "truncated", "extra"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(k, keys[i]) == 0)
            return true;
    return false;
}

/*
 * Turn the fields text fields_format wrote (value bare up to a space, or
 * "quoted" up to the next unescaped quote, its escapes undone) into members
 * of obj. Values that look like integers (and fit in 64 bits) become JSON
 * integers. A key that is one of the line's own ("level", ...) gets a "_"
 * in front.
 */
static void fields_to_json(json_t *obj, char *f)
{
    while (*f) {
        char *key, *val, *w;
        char rkey[64];
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
            val = w = ++f; /* undone in place: w never passes f */
            while (*f && *f != '"') {
                int hi, lo;
                if (*f != '\\' || f[1] == '\0') {
                    *w++ = *f++;
                    continue;
                }
                f++;
                switch (*f) {
                case 'n':
                    *w++ = '\n';
                    f++;
                    break;
                case 'r':
                    *w++ = '\r';
                    f++;
                    break;
                case 't':
                    *w++ = '\t';
                    f++;
                    break;
                case 'x':
                    hi = hex_digit(f[1]);
                    lo = hi < 0 ? -1 : hex_digit(f[2]);
                    if (lo >= 0) {
                        *w++ = (char)(hi * 16 + lo);
                        f += 3;
                    } else {
                        *w++ = *f++;
                    }
                    break;
                default: *w++ = *f++;
                }
            }
            if (*f == '"')
                f++;
            *w = '\0';
        } else {
            val = f;
            while (*f && *f != ' ')
                f++;
            if (*f)
                *f++ = '\0';
        }
        if (reserved_key(key)) { /* short names: they fit */
            size_t kl = strlen(key);
            rkey[0] = '_';
            memcpy(rkey + 1, key,
                   kl + 1 < sizeof(rkey) - 1 ? kl + 1 : sizeof(rkey) - 1);
            rkey[sizeof(rkey) - 1] = '\0';
            key = rkey;
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
                        const char *module, const char *msg, const char *fields,
                        bool truncated)
{
    char part[LOG_LINE_MAX]; /* fields_to_json cuts its input up */
    size_t all = strlen(fields),
           keep = all < sizeof(part) ? all : sizeof(part) - 1;

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
            fieldbuf b = {fields, sizeof(fields), 0, false};
            va_list ap;
            va_start(ap, fmt);
            fields_format(&b, fmt, ap);
            va_end(ap);
            cut = b.cut;
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
        fieldbuf b = {line + len + 1, sizeof(line) - len - 1, 0, false};
        va_list ap;
        line[len++] = ' ';
        va_start(ap, fmt);
        fields_format(&b, fmt, ap);
        va_end(ap);
        len += b.len;
    }
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2; /* truncated: keep room for the newline */
    line[len++] = '\n';
    /* One write per line; a failed log write has nowhere to be reported. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
