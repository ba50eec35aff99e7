/*
 * http_prefer.c - the "return" preference of a Prefer header (RFC 7240).
 *
 * How it works: the header is a comma-separated list of preferences, each
 * a token, optionally "=" and a token or quoted string, then ";"
 * parameters. The list is walked element by element; an element that is
 * not a preference is skipped up to the next comma outside quotes, so one
 * odd element does not hide a return=minimal after it.
 */
#include "http_prefer.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

/* tchar of RFC 9110 section 5.6.2 */
static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/*
 * Read a word (token or quoted-string) at p into out (at most cap - 1
 * bytes, unescaped; longer words are cut, which no known value is).
 * Returns the position after it, or NULL if p holds no word.
 */
static const char *read_word(const char *p, char *out, size_t cap)
{
    size_t n = 0;

    if (*p == '"') {
        for (p++; *p != '"'; p++) {
            if (*p == '\0')
                return NULL;
            if (*p == '\\' && *++p == '\0')
                return NULL;
            if (n + 1 < cap)
                out[n++] = *p;
        }
        p++;
    } else {
        if (!is_tchar(*p))
            return NULL;
        for (; is_tchar(*p); p++)
            if (n + 1 < cap)
                out[n++] = *p;
    }
    out[n] = '\0';
    return p;
}

/* Past the rest of a list element: up to the next ',' outside quotes. */
static const char *skip_element(const char *p)
{
    while (*p != '\0' && *p != ',') {
        if (*p == '"') {
            for (p++; *p != '\0' && *p != '"'; p++)
                if (*p == '\\' && p[1] != '\0')
                    p++;
            if (*p == '\0')
                break;
        }
        p++;
    }
    return p;
}

http_prefer_return http_prefer_return_of(const char *prefer)
{
    const char *p = prefer;

    if (p == NULL)
        return HTTP_RETURN_UNSET;
    while (*p != '\0') {
        char name[16], value[32] = "";
        const char *q;

        p = skip_ows(p);
        if (*p == ',') { /* empty list elements are allowed */
            p++;
            continue;
        }
        q = *p != '"' ? read_word(p, name, sizeof name) : NULL;
        if (q != NULL) {
            q = skip_ows(q);
            if (*q == '=')
                q = read_word(skip_ows(q + 1), value, sizeof value);
        }
        if (q == NULL) { /* not a preference: ignored */
            p = skip_element(p);
            continue;
        }
        if (strcasecmp(name, "return") == 0) {
            if (strcasecmp(value, "minimal") == 0)
                return HTTP_RETURN_MINIMAL;
            if (strcasecmp(value, "representation") == 0)
                return HTTP_RETURN_REPRESENTATION;
            return HTTP_RETURN_OTHER;
        }
        p = skip_element(q); /* parameters (";...") are not used */
    }
    return HTTP_RETURN_UNSET;
}
