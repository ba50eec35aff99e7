/*
 * netaddr.h - the one parser of "host:port" addresses.
 *
 * --listen is checked by config, bound by http_api and probed by
 * --healthcheck; the three once had their own splitters with slightly
 * different rules. This is the single definition of the syntax. The host is
 * not resolved here (that needs the network); callers hand it to
 * getaddrinfo.
 */
#ifndef RMQS_NETADDR_H
#define RMQS_NETADDR_H

#include <stddef.h>

#include "rmqs.h"

/* Longest host part accepted, without the brackets of an IPv6 literal. */
#define NETADDR_HOST_MAX 255

/*
 * Split "host:port", "[v6]:port" (or an unbracketed "v6:port", split at the
 * last colon) into host (NUL-terminated, brackets removed, at most
 * NETADDR_HOST_MAX bytes) and a decimal port from 0 to 65535. The host must
 * not be empty. RMQS_OK, or RMQS_EINVAL with err naming field.
 */
rmqs_rc netaddr_split(const char *text, const char *field,
                      char host[NETADDR_HOST_MAX + 1], unsigned *port,
                      rmqs_error *err);

#endif
