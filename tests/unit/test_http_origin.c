/*
 * test_http_origin.c - service/util/http_origin.c: which Host headers, Origins
 * and content types the service lets in (issue 21: DNS rebinding and
 * cross-site forms). Pure: no server.
 *
 * Suite "http_origin".
 */
#include <criterion/criterion.h>

#include "http_origin.h"

static http_origins *make(const char *pub, const char *listen, bool tls)
{
    http_origins *o = NULL;
    rmqs_error err = {0};

    cr_assert_eq(http_origins_new(pub, listen, tls, &o, &err), RMQS_OK, "%s",
                 err.message);
    return o;
}

Test(http_origin, host_is_the_listen_host_localhost_or_an_ip_literal)
{
    http_origins *o = make(NULL, "sched.internal:8080", false);

    cr_expect(http_origins_host_ok(o, "sched.internal:8080"));
    cr_expect(http_origins_host_ok(o, "SCHED.internal."));
    cr_expect(http_origins_host_ok(o, "localhost:1234"));
    cr_expect(http_origins_host_ok(o, "LocalHost"));
    cr_expect(http_origins_host_ok(o, "127.0.0.1:8080"));
    cr_expect(http_origins_host_ok(o, "10.1.2.3"));
    cr_expect(http_origins_host_ok(o, "[::1]:8080"));
    cr_expect(http_origins_host_ok(o, "[::1]"));
    cr_expect(http_origins_host_ok(o, NULL), "HTTP/1.0 without Host");
    /* a rebinding page's own name, and things that are not a Host */
    cr_expect_not(http_origins_host_ok(o, "evil.test:8080"));
    cr_expect_not(http_origins_host_ok(o, "localhost.evil.test"));
    cr_expect_not(http_origins_host_ok(o, "127.0.0.1.evil.test"));
    cr_expect_not(http_origins_host_ok(o, ""));
    cr_expect_not(http_origins_host_ok(o, "a b"));
    cr_expect_not(http_origins_host_ok(o, "sched.internal:8080\r\nX: y"));
    http_origins_free(o);
}

Test(http_origin, public_origins_add_their_hosts_and_origins)
{
    http_origins *o =
        make(" https://Sched.Example.com , http://ops.example:8443/",
             "0.0.0.0:8080", false);

    cr_expect(http_origins_host_ok(o, "sched.example.com"));
    cr_expect(http_origins_host_ok(o, "ops.example:8443"));
    cr_expect_not(http_origins_host_ok(o, "other.example.com"));
    cr_expect(http_origins_origin_ok(o, "https://sched.example.com:443",
                                     "127.0.0.1:8080"));
    cr_expect(http_origins_origin_ok(o, "http://OPS.example:8443", "x"));
    cr_expect_not(
        http_origins_origin_ok(o, "http://sched.example.com", "127.0.0.1:8080"),
        "another scheme");
    http_origins_free(o);
}

Test(http_origin, a_change_comes_from_its_own_origin_or_none)
{
    http_origins *o = make(NULL, "127.0.0.1:8080", false);
    http_origins *t = make(NULL, "127.0.0.1:8443", true);

    cr_expect(http_origins_origin_ok(o, NULL, "127.0.0.1:8080"));
    cr_expect(
        http_origins_origin_ok(o, "http://127.0.0.1:8080", "127.0.0.1:8080"));
    cr_expect(http_origins_origin_ok(o, "http://localhost", "localhost:80"));
    cr_expect_not(
        http_origins_origin_ok(o, "http://evil.test", "127.0.0.1:8080"));
    cr_expect_not(
        http_origins_origin_ok(o, "http://127.0.0.1:9999", "127.0.0.1:8080"));
    cr_expect_not(http_origins_origin_ok(o, "null", "127.0.0.1:8080"));
    cr_expect_not(http_origins_origin_ok(o, "http://127.0.0.1:8080", NULL));
    cr_expect(
        http_origins_origin_ok(t, "https://127.0.0.1:8443", "127.0.0.1:8443"));
    cr_expect_not(
        http_origins_origin_ok(t, "http://127.0.0.1:8443", "127.0.0.1:8443"));
    http_origins_free(o);
    http_origins_free(t);
}

Test(http_origin, star_lets_a_proxy_in_front_decide)
{
    http_origins *o = make("*", "127.0.0.1:8080", false);

    cr_expect(http_origins_host_ok(o, "anything.example"));
    cr_expect(http_origins_origin_ok(o, "https://anything.example", "x"));
    http_origins_free(o);
}

Test(http_origin, a_public_origin_that_is_not_one_is_refused)
{
    static const char *const bad[] = {
        "sched.example.com", "ftp://h",  "https://h/path", "https://u@h",
        "https://h?x",       "https://", "*,https://h"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        http_origins *o = (http_origins *)1;
        rmqs_error err = {0};
        cr_expect_eq(http_origins_new(bad[i], "127.0.0.1:1", false, &o, &err),
                     RMQS_EINVAL, "%s", bad[i]);
        cr_expect_null(o, "%s", bad[i]);
        cr_expect_str_eq(err.field, "public_origin");
    }
}

Test(http_origin, form_content_types_are_known_whatever_their_case)
{
    cr_expect(http_origins_form_type("application/x-www-form-urlencoded"));
    cr_expect(http_origins_form_type("Multipart/Form-Data; boundary=x"));
    cr_expect(http_origins_form_type(" text/plain;charset=UTF-8"));
    cr_expect_not(http_origins_form_type("application/json"));
    cr_expect_not(http_origins_form_type("text/plainer"));
    cr_expect_not(http_origins_form_type(NULL));
}
