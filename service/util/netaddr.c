/*
 * netaddr.c - "host:port" / "[v6]:port" splitting (see netaddr.h).
 *
 * Strict and pure: a port of decimal digits only, at most 65535; a
 * non-empty host; brackets only around the whole host. Nothing is resolved
 * here.
 */
#include "netaddr.h"

#include <string.h>

rmqs_rc netaddr_split(const char *text, const char *field,
                      char host[NETADDR_HOST_MAX + 1], unsigned *port,
                      rmqs_error *err)
{
    const char *h, *p;
    size_t hl, pl;
    unsigned v = 0;

    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            goto bad;
        h = text + 1;
        hl = (size_t)(close - h);
        p = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon == NULL)
            goto bad;
        h = text;
        hl = (size_t)(colon - text);
        p = colon + 1;
    }
    pl = strlen(p);
    if (hl == 0 || hl > NETADDR_HOST_MAX || pl == 0 ||
        strspn(p, "0123456789") != pl)
        goto bad;
    for (size_t i = 0; i < pl; i++) {
        v = v * 10 + (unsigned)(p[i] - '0');
        if (v > 65535)
            goto bad;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = v;
    return RMQS_OK;
bad:
    return rmqs_fail(err, RMQS_EINVAL, field,
                     "%s '%s': expected host:port or [ipv6]:port with a port "
                     "from 0 to 65535",
                     field, text);
}
