/*
 * store_pg_url.c - the pure helpers of the PostgreSQL backend, beneath
 * everything else of it (store_pg_url.h): whether a target is a PostgreSQL
 * URL, its password-free form for logs, the check that libpq reads its
 * user part as we do, scrubbing passwords out of libpq's messages, and
 * SQLSTATE -> rmqs_rc. No connection (libpq only for its list of
 * connection keywords).
 */
#include "store_pg_url.h"

#include <ctype.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hexdigit.h"

/* ------------------------------------------------------------------------ */
/* URLs and error codes (pure)                                              */

bool store_pg_is_url(const char *target)
{
    return target != NULL && (strncasecmp(target, "postgres://", 11) == 0 ||
                              strncasecmp(target, "postgresql://", 13) == 0);
}

/* Append s[0..n) to buf (len bytes, *at used), truncating. */
static void put(char *buf, size_t len, size_t *at, const char *s, size_t n)
{
    while (n-- > 0 && *at + 1 < len)
        buf[(*at)++] = *s++;
    buf[*at] = '\0';
}

/*
 * Secrets are found the way libpq finds them, not by pattern: the query
 * keywords whose libpq option is a password field (PQconndefaults' dispchar
 * "*": password, sslpassword, and any later one) are masked, whatever their
 * case or percent-encoding (%70assword); so is every keyword libpq does not
 * know (libpq refuses it anyway, and it may be a misspelt secret).
 */
/* s[0..n) percent-decoded into out (cap bytes, NUL-terminated). */
static void url_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        if (s[i] == '%' && i + 2 < n && hex_digit(s[i + 1]) >= 0 &&
            hex_digit(s[i + 2]) >= 0) {
            out[o++] = (char)(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
}

/* Whether a query keyword (percent-encoded as written) must be masked. */
static bool secret_keyword(const char *k, size_t n)
{
    char key[64];
    PQconninfoOption *opts;
    bool known = false, secret = false;

    url_decode(k, n, key, sizeof(key));
    opts = PQconndefaults();
    if (opts == NULL)
        return true; /* out of memory: mask rather than guess */
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (strcasecmp(o->keyword, key) == 0) {
            known = true;
            secret = o->dispchar != NULL && strchr(o->dispchar, '*') != NULL;
            break;
        }
    }
    PQconninfoFree(opts);
    return secret || !known;
}

/* The user part of url: [*user, *at) is "user[:password]", *at the '@'
 * that ends it (the last '@' of the URL, so an unescaped '@' in a password
 * stays in the password), or *at NULL when there is none. *rest: after the
 * scheme's "://". */
static void url_userinfo(const char *url, const char **rest, const char **at)
{
    const char *p = strstr(url, "://");

    *rest = NULL;
    *at = NULL;
    if (p == NULL)
        return;
    *rest = p + 3;
    *at = strrchr(*rest, '@');
}

const char *store_pg_url_problem(const char *url)
{
    const char *rest, *at, *first;

    url_userinfo(url, &rest, &at);
    if (rest == NULL)
        return "not a URL";
    if (at == NULL)
        return NULL;
    /* libpq ends the user part at the first '@' or '/': where that is not
     * the '@' the password ends at, libpq would read part of the password
     * as the host, port or database, and quote it in its errors */
    first = rest + strcspn(rest, "@/");
    if (first != at)
        return "the user or password in the PostgreSQL URL holds an "
               "unencoded '@' or '/': percent-encode them (%40, %2F)";
    return NULL;
}

void store_pg_safe_url(const char *url, char *buf, size_t len)
{
    const char *rest, *at, *host, *q, *p;
    size_t out = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    if (url == NULL)
        return;
    url_userinfo(url, &rest, &at);
    if (rest == NULL) {
        put(buf, len, &out, "(not a URL)", 11);
        return;
    }
    put(buf, len, &out, url, (size_t)(rest - url));
    host = rest;
    if (at != NULL) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        size_t user = (size_t)((colon ? colon : at) - rest);
        /* a user part libpq would read otherwise (store_pg_url_problem)
         * shows nothing of itself */
        if (store_pg_url_problem(url) != NULL)
            put(buf, len, &out, "***", 3);
        else
            put(buf, len, &out, rest, user);
        put(buf, len, &out, "@", 1);
        host = at + 1;
    }
    q = strchr(host, '?');
    if (q == NULL) {
        put(buf, len, &out, host, strlen(host));
        return;
    }
    put(buf, len, &out, host, (size_t)(q - host));
    /* parameters: secrets masked, the rest kept */
    p = q;
    while (*p) {
        size_t n = strcspn(p + 1, "&") + 1; /* the separator and the pair */
        const char *eq = memchr(p + 1, '=', n - 1);
        size_t klen = eq ? (size_t)(eq - p - 1) : n - 1;
        put(buf, len, &out, p, 1);
        if (eq != NULL && secret_keyword(p + 1, klen)) {
            char key[64];
            url_decode(p + 1, klen, key, sizeof(key));
            put(buf, len, &out, key, strlen(key));
            put(buf, len, &out, "=***", 4);
        } else {
            put(buf, len, &out, p + 1, n - 1);
        }
        p += n;
    }
}

#define URL_SECRETS 16

/* The secrets of url, each as written and percent-decoded: the password of
 * the user part and the value of every masked parameter. Each one malloc'd
 * into sec (n returned); the caller frees them. */
static size_t url_secrets(const char *url, char *sec[URL_SECRETS])
{
    const char *rest, *at, *p;
    size_t n = 0;

    if (url == NULL)
        return 0;
    url_userinfo(url, &rest, &at);
    if (rest == NULL)
        return 0;
    if (at != NULL) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        if (colon != NULL && at > colon + 1) {
            sec[n++] = strndup(colon + 1, (size_t)(at - colon - 1));
            sec[n] = malloc((size_t)(at - colon));
            if (sec[n] != NULL)
                url_decode(colon + 1, (size_t)(at - colon - 1), sec[n],
                           (size_t)(at - colon));
            n++;
        }
    }
    for (p = strchr(at ? at : rest, '?');
         p != NULL && *p && n + 2 <= URL_SECRETS; p = strchr(p + 1, '&')) {
        size_t pair = strcspn(p + 1, "&");
        const char *eq = memchr(p + 1, '=', pair);
        if (eq == NULL || !secret_keyword(p + 1, (size_t)(eq - p - 1)))
            continue;
        size_t vlen = pair - (size_t)(eq + 1 - (p + 1));
        if (vlen == 0)
            continue;
        sec[n++] = strndup(eq + 1, vlen);
        sec[n] = malloc(vlen + 1);
        if (sec[n] != NULL)
            url_decode(eq + 1, vlen, sec[n], vlen + 1);
        n++;
    }
    return n;
}

void store_pg_scrub(const char *url, const char *msg, char *buf, size_t len)
{
    char *sec[URL_SECRETS];
    size_t n, at = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    n = url_secrets(url, sec);
    for (const char *m = msg; m != NULL && *m && *m != '\n';) {
        bool hit = false;
        for (size_t i = 0; i < n && !hit; i++) {
            size_t sl = sec[i] ? strlen(sec[i]) : 0;
            if (sl > 0 && strncmp(m, sec[i], sl) == 0) {
                put(buf, len, &at, "***", 3);
                m += sl;
                hit = true;
            }
        }
        if (!hit)
            put(buf, len, &at, m++, 1);
    }
    for (size_t i = 0; i < n; i++)
        free(sec[i]);
}

rmqs_rc store_pg_map_sqlstate(const char *st)
{
    if (st == NULL || strlen(st) != 5)
        return RMQS_EDB; /* no answer from the server: connection lost */
    if (strcmp(st, "53100") == 0 || strcmp(st, "53400") == 0)
        return RMQS_EFULL;
    if (strcmp(st, "53200") == 0)
        return RMQS_ENOMEM;
    if (strcmp(st, "23505") == 0)
        return RMQS_ECONFLICT;
    if (strncmp(st, "23", 2) == 0 || strncmp(st, "22", 2) == 0)
        return RMQS_EINVAL;
    return RMQS_EDB;
}
