/*
 * http_origin.c - the Host, Origin and form content-type rules of
 * http_origin.h. Pure: strings in, a verdict out.
 *
 * Origins are compared in one normal form, "scheme://host:port" in lower
 * case with the scheme's default port written out, so that
 * "http://Sched.example" and "http://sched.example:80" are one origin.
 */
#include "http_origin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netaddr.h"

#define ORIGIN_MAX (NETADDR_HOST_MAX + 32)

struct http_origins {
    bool any; /* "*": a proxy in front checks */
    bool tls; /* the service's own scheme is https */
    char listen_host[NETADDR_HOST_MAX + 1];
    size_t n;
    char (*origin)[ORIGIN_MAX];         /* normal form */
    char (*host)[NETADDR_HOST_MAX + 1]; /* their hosts, lower case */
};

/* A Host header value (host, host:port, [v6], [v6]:port) split; false when
 * it is not one. */
static bool split_host(const char *text, char host[NETADDR_HOST_MAX + 1],
                       unsigned *port)
{
    rmqs_error err;
    size_t n = strlen(text);

    *port = 0;
    if (n == 0 || n > NETADDR_HOST_MAX + 8)
        return false;
    if (text[0] == '[' && text[n - 1] == ']') { /* [v6] without a port */
        if (n - 2 > NETADDR_HOST_MAX)
            return false;
        memcpy(host, text + 1, n - 2);
        host[n - 2] = '\0';
        return n > 2;
    }
    if (text[0] != '[' && strchr(text, ':') == NULL) {
        if (n > NETADDR_HOST_MAX)
            return false;
        memcpy(host, text, n + 1);
        return true;
    }
    return netaddr_split(text, "host", host, port, &err) == RMQS_OK;
}

static void lower(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* A host name with one trailing dot is the same name. */
static void drop_final_dot(char *h)
{
    size_t n = strlen(h);

    if (n > 1 && h[n - 1] == '.')
        h[n - 1] = '\0';
}

static bool ip_literal(const char *h)
{
    unsigned char buf[16];

    return inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
}

/* "scheme://hostport" in normal form into out; its host into host. false
 * when text is not an http(s) origin. */
static bool normal_origin(const char *text, char out[ORIGIN_MAX],
                          char host[NETADDR_HOST_MAX + 1])
{
    const char *rest;
    bool https;
    unsigned port;
    char hp[NETADDR_HOST_MAX + 16];
    size_t n;

    if (strncasecmp(text, "http://", 7) == 0) {
        https = false;
        rest = text + 7;
    } else if (strncasecmp(text, "https://", 8) == 0) {
        https = true;
        rest = text + 8;
    } else {
        return false;
    }
    n = strlen(rest);
    if (n > 0 && rest[n - 1] == '/') /* "https://h/" as people write it */
        n--;
    if (n == 0 || n >= sizeof(hp) || memchr(rest, '/', n) != NULL ||
        memchr(rest, '?', n) != NULL || memchr(rest, '#', n) != NULL ||
        memchr(rest, '@', n) != NULL)
        return false;
    memcpy(hp, rest, n);
    hp[n] = '\0';
    if (!split_host(hp, host, &port))
        return false;
    lower(host);
    drop_final_dot(host);
    if (port == 0)
        port = https ? 443 : 80;
    snprintf(out, ORIGIN_MAX, "%s://%s%s%s:%u", https ? "https" : "http",
             strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
             port);
    return true;
}

rmqs_rc http_origins_new(const char *public_origins, const char *listen,
                         bool tls, http_origins **out, rmqs_error *err)
{
    http_origins *o = calloc(1, sizeof(*o));
    unsigned port;
    size_t cap = 1;
    const char *p;

    *out = NULL;
    if (o == NULL)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    o->tls = tls;
    if (listen == NULL || !split_host(listen, o->listen_host, &port))
        o->listen_host[0] = '\0';
    lower(o->listen_host);
    if (public_origins != NULL && strcmp(public_origins, "*") == 0) {
        o->any = true;
        *out = o;
        return RMQS_OK;
    }
    for (p = public_origins; p != NULL && *p; p++)
        cap += *p == ',';
    o->origin = calloc(cap, sizeof(*o->origin));
    o->host = calloc(cap, sizeof(*o->host));
    if (o->origin == NULL || o->host == NULL) {
        http_origins_free(o);
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    }
    for (p = public_origins; p != NULL && *p;) {
        size_t n = strcspn(p, ",");
        char item[ORIGIN_MAX];
        const char *s = p, *e = p + n;
        while (s < e && isspace((unsigned char)*s))
            s++;
        while (e > s && isspace((unsigned char)e[-1]))
            e--;
        if (e > s) {
            if ((size_t)(e - s) >= sizeof(item) ||
                (memcpy(item, s, (size_t)(e - s)), item[e - s] = '\0',
                 !normal_origin(item, o->origin[o->n], o->host[o->n]))) {
                http_origins_free(o);
                return rmqs_fail(
                    err, RMQS_EINVAL, "public_origin",
                    "--public-origin: %.*s is not "
                    "scheme://host[:port] with scheme http or https",
                    (int)(e - s > 80 ? 80 : e - s), s);
            }
            o->n++;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    *out = o;
    return RMQS_OK;
}

void http_origins_free(http_origins *o)
{
    if (o == NULL)
        return;
    free(o->origin);
    free(o->host);
    free(o);
}

bool http_origins_host_ok(const http_origins *o, const char *hosthdr)
{
    char host[NETADDR_HOST_MAX + 1];
    unsigned port;

    if (hosthdr == NULL || o->any)
        return true;
    if (!split_host(hosthdr, host, &port))
        return false;
    lower(host);
    drop_final_dot(host);
    if (ip_literal(host) || strcmp(host, "localhost") == 0 ||
        strcmp(host, o->listen_host) == 0)
        return true;
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(host, o->host[i]) == 0)
            return true;
    return false;
}

bool http_origins_origin_ok(const http_origins *o, const char *origin,
                            const char *hosthdr)
{
    char want[ORIGIN_MAX], got[ORIGIN_MAX], h[NETADDR_HOST_MAX + 1];
    char own[NETADDR_HOST_MAX + 16];

    if (origin == NULL || o->any)
        return true;
    if (!normal_origin(origin, got, h)) /* "null", a file: page, garbage */
        return false;
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(got, o->origin[i]) == 0)
            return true;
    if (hosthdr == NULL || strlen(hosthdr) + 9 > sizeof(own))
        return false;
    snprintf(own, sizeof(own), "%s://%s", o->tls ? "https" : "http", hosthdr);
    return normal_origin(own, want, h) && strcmp(got, want) == 0;
}

bool http_origins_form_type(const char *ct)
{
    static const char *const forms[] = {"application/x-www-form-urlencoded",
                                        "multipart/form-data", "text/plain"};
    if (ct == NULL)
        return false;
    while (isspace((unsigned char)*ct))
        ct++;
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        size_t n = strlen(forms[i]);
        if (strncasecmp(ct, forms[i], n) == 0 &&
            (ct[n] == '\0' || ct[n] == ';' || isspace((unsigned char)ct[n])))
            return true;
    }
    return false;
}
