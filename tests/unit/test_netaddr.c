/* Unit tests for service/util/netaddr.c: the one host:port parser. */
#include <criterion/criterion.h>
#include <string.h>

#include "netaddr.h"

Test(netaddr, splits_names_ipv4_and_ipv6)
{
    static const struct {
        const char *text, *host;
        unsigned port;
    } ok[] = {
        {"127.0.0.1:8080", "127.0.0.1", 8080},
        {"localhost:0", "localhost", 0},
        {"0.0.0.0:65535", "0.0.0.0", 65535},
        {"[::1]:9000", "::1", 9000},
        {"[::]:80", "::", 80},
        {"::1:8080", "::1", 8080}, /* unbracketed: the last colon */
        {"h:00080", "h", 80},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char host[NETADDR_HOST_MAX + 1];
        unsigned port = 1;
        rmqs_error e = {0};
        cr_expect_eq(netaddr_split(ok[i].text, "listen", host, &port, &e),
                     RMQS_OK, "%s: %s", ok[i].text, e.message);
        cr_expect_str_eq(host, ok[i].host, "%s", ok[i].text);
        cr_expect_eq(port, ok[i].port, "%s", ok[i].text);
    }
}

Test(netaddr, refuses_what_is_not_host_colon_port)
{
    char long_host[NETADDR_HOST_MAX + 8];
    memset(long_host, 'a', NETADDR_HOST_MAX + 1);
    strcpy(long_host + NETADDR_HOST_MAX + 1, ":80");
    const char *bad[] = {
        "h:65536", "h:99999999999", ":80", "[]:80", "[::1]8080", "[::1]",
        "h:",      "h:8a",          "h",   "",      "h:-1",      "h:+1",
        "h: 80",   long_host};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char host[NETADDR_HOST_MAX + 1];
        unsigned port = 0;
        rmqs_error e = {0};
        cr_expect_eq(netaddr_split(bad[i], "listen", host, &port, &e),
                     RMQS_EINVAL, "'%s' accepted", bad[i]);
        cr_expect_str_eq(e.field, "listen");
        if (strlen(bad[i]) < 100) /* a long one truncates the message */
            cr_expect_not_null(strstr(e.message, "host:port"), "%s", e.message);
    }
}
