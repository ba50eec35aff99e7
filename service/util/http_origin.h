/*
 * http_origin.h - which sites may talk to the service: the Host a request
 * names, the Origin a browser sends, and the content types an HTML form can
 * send without asking (pure; http_api.c applies it to every request).
 *
 * Why: a page on another site can reach a service on 127.0.0.1 through DNS
 * rebinding (its own name resolving to 127.0.0.1: the browser then sends
 * that name as Host) or with a plain HTML form (no preflight, and Chromium
 * sends no Sec-Fetch-Site to a non-trustworthy origin). So:
 *   - Host must be the listen address's host, localhost, an IP literal (a
 *     rebinding page never has one: its Host is its own name), or the host
 *     of a configured public origin (--public-origin); a request without
 *     Host (HTTP/1.0) passes;
 *   - a change (not GET, HEAD, OPTIONS) that carries Origin must come from
 *     the service's own origin (scheme, Host) or a configured one;
 *   - a change may not carry a form content type
 *     (application/x-www-form-urlencoded, multipart/form-data, text/plain).
 */
#ifndef RMQS_HTTP_ORIGIN_H
#define RMQS_HTTP_ORIGIN_H

#include <stdbool.h>

#include "rmqs.h"

typedef struct http_origins http_origins;

/* The configured public origins, "scheme://host[:port]" separated by
 * commas (NULL or "": none); "*" alone accepts any Host and any Origin (for
 * a proxy in front that checks them). listen is the "host:port" served.
 * RMQS_OK with *out set; RMQS_EINVAL (field "public_origin") when an item
 * is not an http or https origin (no path, query or user); RMQS_ENOMEM. */
rmqs_rc http_origins_new(const char *public_origins, const char *listen,
                         bool tls, http_origins **out, rmqs_error *err);
void http_origins_free(http_origins *o);

/* Whether a request naming host (the Host header, NULL when absent) is for
 * this service. */
bool http_origins_host_ok(const http_origins *o, const char *host);

/* Whether a change that carries origin (the Origin header; NULL: none,
 * which passes) and host (its Host header) comes from an allowed site. */
bool http_origins_origin_ok(const http_origins *o, const char *origin,
                            const char *host);

/* Whether content_type (NULL: none) is one an HTML form sends. */
bool http_origins_form_type(const char *content_type);

#endif
