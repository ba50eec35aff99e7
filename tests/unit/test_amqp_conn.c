/*
 * test_amqp_conn.c - the AMQP connection layer without a broker: URL
 * parsing (one URL or a list, defaults, decoding, refusals), the safe URL
 * that logs show, reply texts, and what a failed open does (to a loopback
 * port nothing listens on).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "amqp_conn.h"

static amqpc_t *parse(const char *url)
{
    rmqs_error err = {{0}, {0}};
    amqpc_t *c = amqpc_new(&(amqpc_options){.url = url}, &err);

    cr_assert(c != NULL, "%s refused: %s", url, err.message);
    return c;
}

struct url_case {
    const char *url;
    const char *host;
    int port;
    const char *vhost;
    const char *user;
    bool tls;
    const char *safe;
};

Test(amqp_conn, one_url_parts_and_safe_url)
{
    static const struct url_case cases[] = {
        {"amqp://u:p@h:1234/v", "h", 1234, "v", "u", false,
         "amqp://u:***@h:1234/v"},
        /* amqps: port 5671 by default; no path and "/" both mean "/" */
        {"amqps://u:p@broker.example", "broker.example", 5671, "/", "u", true,
         "amqps://u:***@broker.example:5671/%2F"},
        {"amqp://u:p@h/", "h", 5672, "/", "u", false,
         "amqp://u:***@h:5672/%2F"},
        /* rabbitmq-c's defaults for a bare host: guest, 5672 */
        {"amqp://h", "h", 5672, "/", "guest", false,
         "amqp://guest:***@h:5672/%2F"},
        /* percent-decoded vhost and user, encoded again in the safe URL */
        {"amqp://u:p@h/%2F", "h", 5672, "/", "u", false,
         "amqp://u:***@h:5672/%2F"},
        {"amqp://u:p@h/my%2Fvhost", "h", 5672, "my/vhost", "u", false,
         "amqp://u:***@h:5672/my%2Fvhost"},
        {"amqp://us%40er:p@h/a%20b", "h", 5672, "a b", "us@er", false,
         "amqp://us%40er:***@h:5672/a%20b"},
        /* IPv6 literal: bracketed again in the safe URL */
        {"amqps://u:p@[::1]:5673/v", "::1", 5673, "v", "u", true,
         "amqps://u:***@[::1]:5673/v"},
        {"amqps://u:p@127.0.0.1:5671/v", "127.0.0.1", 5671, "v", "u", true,
         "amqps://u:***@127.0.0.1:5671/v"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct url_case *k = &cases[i];
        amqpc_t *c = parse(k->url);
        amqpc_url_parts u;

        amqpc_current(c, &u);
        cr_expect_eq(amqpc_url_count(c), 1, "%s", k->url);
        cr_expect_str_eq(u.host, k->host, "%s", k->url);
        cr_expect_eq(u.port, k->port, "%s", k->url);
        cr_expect_str_eq(u.vhost, k->vhost, "%s", k->url);
        cr_expect_str_eq(u.user, k->user, "%s", k->url);
        cr_expect_eq(u.tls, k->tls, "%s", k->url);
        cr_expect_str_eq(amqpc_safe_url(c), k->safe, "%s", k->url);
        amqpc_free(c);
    }
}

Test(amqp_conn, the_safe_url_never_holds_the_password)
{
    static const char *const urls[] = {
        "amqp://guest:s3cr3t-PW@h/",
        "amqp://guest:s3cr3t-PW%40x@h/",     /* encoded '@' */
        "amqps://s3cr3t-PW:s3cr3t-PW@h:1/v", /* user == password */
        "amqp://u:s3cr3t-PW@h1/,amqp://u:s3cr3t-PW@h2/",
    };

    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        amqpc_t *c = parse(urls[i]);
        for (size_t k = 0; k < amqpc_url_count(c); k++) {
            const char *safe = amqpc_safe_url(c);
            /* the user may be the same string; the password part is *** */
            cr_expect(strstr(safe, ":***@") != NULL, "%s", safe);
            cr_expect(strstr(strstr(safe, "://") + 3, ":s3cr3t") == NULL, "%s",
                      safe);
            amqpc_next_url(c);
        }
        amqpc_free(c);
    }
}

Test(amqp_conn, a_list_of_urls_is_kept_in_order_and_rotates)
{
    amqpc_t *c = parse("amqp://a:p@h1:1/v1,amqps://b:q@h2/v2,amqp://h3");
    amqpc_url_parts u;

    cr_assert_eq(amqpc_url_count(c), 3);
    cr_expect_eq(amqpc_url_index(c), 0);
    cr_expect_str_eq(amqpc_safe_url(c), "amqp://a:***@h1:1/v1");
    amqpc_next_url(c);
    amqpc_current(c, &u);
    cr_expect_eq(amqpc_url_index(c), 1);
    cr_expect_str_eq(u.host, "h2");
    cr_expect_eq(u.port, 5671);
    cr_expect(u.tls);
    cr_expect_str_eq(amqpc_safe_url(c), "amqps://b:***@h2:5671/v2");
    amqpc_next_url(c);
    cr_expect_str_eq(amqpc_safe_url(c), "amqp://guest:***@h3:5672/%2F");
    amqpc_next_url(c);
    cr_expect_eq(amqpc_url_index(c), 0, "wraps around");
    cr_expect_str_eq(amqpc_safe_url(c), "amqp://a:***@h1:1/v1");
    amqpc_free(c);
}

Test(amqp_conn, a_comma_not_before_a_scheme_belongs_to_the_url)
{
    /* RFC 3986 allows ',' in userinfo: a password with one still works */
    amqpc_t *c = parse("amqp://u:pa,ss@h:5672/v");
    amqpc_url_parts u;

    amqpc_current(c, &u);
    cr_expect_eq(amqpc_url_count(c), 1);
    cr_expect_str_eq(u.host, "h");
    cr_expect_str_eq(u.user, "u");
    cr_expect_str_eq(amqpc_safe_url(c), "amqp://u:***@h:5672/v");
    amqpc_free(c);
}

struct bad_case {
    const char *url;
    const char *says;
};

Test(amqp_conn, bad_urls_are_refused_without_echoing_them)
{
    static const struct bad_case cases[] = {
        {"", "empty"},
        {"http://u:pw-SECRET@h/", "invalid AMQP URL"},
        {"amqp://u:pw-SECRET@h:notaport/", "invalid AMQP URL"},
        {"amqp://u:pw-SECRET@h:5672/a/b", "invalid AMQP URL"},
        {"amqp://h1/,amqp://u:pw-SECRET@h2:x/", "URL 2 of 2"},
        {"amqp://u:pw-SECRET@h1:x/,amqp://h2/", "URL 1 of 2"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rmqs_error err = {{0}, {0}};
        amqpc_t *c = amqpc_new(&(amqpc_options){.url = cases[i].url}, &err);
        cr_expect(c == NULL, "%s was accepted", cases[i].url);
        amqpc_free(c);
        cr_expect_str_eq(err.field, "amqp_url", "%s", cases[i].url);
        cr_expect(strstr(err.message, cases[i].says) != NULL, "%s: %s",
                  cases[i].url, err.message);
        cr_expect(strstr(err.message, "SECRET") == NULL, "%s", err.message);
    }
}

Test(amqp_conn, bad_settings_are_refused)
{
    rmqs_error err = {{0}, {0}};

    cr_expect(amqpc_new(&(amqpc_options){.url = "amqp://h", .heartbeat_s = -1},
                        &err) == NULL);
    cr_expect_str_eq(err.field, "heartbeat_s");
    cr_expect(
        amqpc_new(&(amqpc_options){.url = "amqp://h", .heartbeat_s = 65536},
                  &err) == NULL);
    cr_expect_str_eq(err.field, "heartbeat_s");
    cr_expect(
        amqpc_new(&(amqpc_options){.url = "amqps://h", .cert_file = "/c.pem"},
                  &err) == NULL);
    cr_expect_str_eq(err.field, "amqp-cert-file");
    cr_expect(amqpc_new(NULL, &err) == NULL);
    amqpc_t *c = amqpc_new(
        &(amqpc_options){.url = "amqp://h", .heartbeat_s = 65535}, &err);
    cr_expect(c != NULL, "%s", err.message);
    cr_expect(amqpc_state(c) == NULL, "a new amqpc_t is closed");
    cr_expect_eq(amqpc_heartbeat_s(c), 0);
    amqpc_free(c);
}

Test(amqp_conn, reply_texts_are_safe_to_quote)
{
    char out[64];
    const char raw[] = "NOT_FOUND - no exchange 'x\"y\\z\n\x01' \xc3\xa9";

    amqpc_reply_text(out, sizeof out, 404,
                     (amqp_bytes_t){sizeof raw - 1, (void *)raw});
    /* quotes and control characters become '?', UTF-8 stays */
    cr_expect_str_eq(out, "404 NOT_FOUND - no exchange 'x?y?z?"
                          "?' \xc3\xa9");

    amqpc_reply_text(out, 12, 312, amqp_cstring_bytes("NO_ROUTE and more"));
    cr_expect_str_eq(out, "312 NO_ROUT", "cut to fit");
    amqpc_reply_text(out, sizeof out, 320, (amqp_bytes_t){0, NULL});
    cr_expect_str_eq(out, "320 ");
}

Test(amqp_conn, rpc_failures_go_through_rmqs_error)
{
    rmqs_error err = {{0}, {0}};
    amqp_rpc_reply_t lib = {.reply_type = AMQP_RESPONSE_LIBRARY_EXCEPTION,
                            .library_error = AMQP_STATUS_TIMEOUT};
    amqp_channel_close_t close = {
        .reply_code = 406,
        .reply_text = amqp_cstring_bytes("PRECONDITION_FAILED - inequivalent "
                                         "arg 'type'")};
    amqp_rpc_reply_t server = {.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION,
                               .reply = {AMQP_CHANNEL_CLOSE_METHOD, &close}};

    cr_expect_eq(amqpc_rpc_fail(&err, lib, "queue.declare %s", "q"),
                 RMQS_EBROKER);
    cr_expect_str_eq(err.message, "queue.declare q: request timed out");
    cr_expect_eq(amqpc_rpc_fail(&err, server, "exchange.declare"),
                 RMQS_EBROKER);
    cr_expect_str_eq(err.message, "exchange.declare: 406 PRECONDITION_FAILED "
                                  "- inequivalent arg 'type'");
}

/* A loopback port nothing listens on (bound, then closed). */
static int closed_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert(fd >= 0);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static const char *url_port(int port)
{
    static char buf[4][32];
    static int i;

    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "127.0.0.1:%d failed", port);
    return buf[i];
}

Test(amqp_conn, a_failed_open_says_why_and_the_next_open_tries_the_next_url)
{
    char url[160];
    int p1 = closed_port(), p2 = closed_port();
    rmqs_error err = {{0}, {0}};
    amqpc_t *c;

    snprintf(
        url, sizeof url,
        "amqp://u:pw-SECRET@127.0.0.1:%d/,amqp://u:pw-SECRET@127.0.0.1:%d/", p1,
        p2);
    c = amqpc_new(&(amqpc_options){.url = url, .timeout_ms = 2000}, &err);
    cr_assert(c != NULL, "%s", err.message);
    cr_expect_eq(amqpc_open(c, &err), RMQS_EBROKER);
    cr_expect(strstr(err.message, "connect to 127.0.0.1:") != NULL, "%s",
              err.message);
    cr_expect(strstr(err.message, "SECRET") == NULL, "%s", err.message);
    cr_expect(amqpc_state(c) == NULL);
    cr_expect_eq(amqpc_url_index(c), 0, "the failed URL stays current");
    cr_expect(strstr(err.message, url_port(p1)) != NULL, "%s", err.message);
    cr_expect_eq(amqpc_open(c, &err), RMQS_EBROKER);
    cr_expect_eq(amqpc_url_index(c), 1, "the next open tried the next URL");
    cr_expect(strstr(err.message, url_port(p2)) != NULL, "%s", err.message);
    cr_expect_eq(amqpc_open(c, &err), RMQS_EBROKER);
    cr_expect_eq(amqpc_url_index(c), 0, "and round again");
    amqpc_free(c);
}
