/*
 * test_http_deadline.c - service/http/http_deadline.c: the header and body
 * deadlines, on a socketpair standing for a client's connection.
 *
 * A cut shows on the other end as end of file (the module shuts our end
 * down); the tests time it with poll, and read the cut counters from
 * /metrics (metrics_render) by reason. Deadlines are short (HEADER_MS,
 * BODY_MS) and the sweep looks every 200 ms: a cut must come no earlier
 * than its deadline, and within CUT_BOUND_MS (a loaded sanitized machine).
 * "Not cut" is checked over QUIET_MS, well past every deadline.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_deadline.h"
#include "metrics.h"
#include "timeutil.h"

#define HEADER_MS 300
#define BODY_MS 600
#define CUT_BOUND_MS 3000
#define QUIET_MS 1200

/* Milliseconds until fd sees end of file, or -1 if not within limit_ms. */
static int64_t ms_until_eof(int fd, int64_t limit_ms)
{
    int64_t t0 = tu_mono_ms();
    char buf[16];

    for (;;) {
        int64_t left = limit_ms - (tu_mono_ms() - t0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return -1;
        if (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == 0)
            return tu_mono_ms() - t0;
    }
}

/* The cut counter of reason, as /metrics says. */
static unsigned long long cut_count(const char *reason)
{
    char *text = metrics_render(NULL), key[96], *at;
    unsigned long long n;

    cr_assert_not_null(text);
    snprintf(key, sizeof(key),
             "rmqs_http_connections_cut_total{reason=\"%s\"} ", reason);
    at = strstr(text, key);
    cr_assert_not_null(at, "%s not in /metrics", key);
    n = strtoull(at + strlen(key), NULL, 10);
    free(text);
    return n;
}

typedef struct fixture {
    http_deadline *d;
    int sv[2]; /* sv[0]: the service's end, sv[1]: the client's */
    http_deadline_conn *c;
} fixture;

static void open_conn(fixture *f)
{
    rmqs_error e = {0};

    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, f->sv), 0);
    cr_assert_eq(http_deadline_new(HEADER_MS, BODY_MS, &f->d, &e), RMQS_OK,
                 "%s", e.message);
    f->c = http_deadline_open(f->d, f->sv[0]);
    cr_assert_not_null(f->c);
}

static void close_conn(fixture *f)
{
    http_deadline_close(f->d, f->c);
    http_deadline_free(f->d);
    close(f->sv[0]);
    close(f->sv[1]);
}

Test(http_deadline, headers_not_in_are_cut_at_the_header_deadline)
{
    fixture f;
    unsigned long long before = cut_count("header_timeout");
    int64_t took;

    open_conn(&f);
    took = ms_until_eof(f.sv[1], CUT_BOUND_MS);
    cr_expect_geq(took, HEADER_MS, "cut after %lld ms", (long long)took);
    cr_expect_eq(cut_count("header_timeout"), before + 1);
    close_conn(&f);
}

Test(http_deadline,
     a_body_not_ended_is_cut_at_the_body_deadline_from_its_headers)
{
    fixture f;
    unsigned long long before = cut_count("body_timeout");
    int64_t t_headers, took;

    open_conn(&f);
    cr_expect_eq(ms_until_eof(f.sv[1], HEADER_MS / 2), -1);
    http_deadline_headers(f.d, f.c);
    t_headers = tu_mono_ms();
    took = ms_until_eof(f.sv[1], CUT_BOUND_MS);
    cr_expect_geq(tu_mono_ms() - t_headers, BODY_MS,
                  "cut %lld ms after the headers", (long long)took);
    cr_expect_eq(cut_count("body_timeout"), before + 1);
    close_conn(&f);
}

Test(http_deadline, no_deadline_while_answering_then_the_next_headers_are_due)
{
    fixture f;
    unsigned long long before = cut_count("keepalive_timeout");
    int64_t took;

    open_conn(&f);
    http_deadline_headers(f.d, f.c);
    http_deadline_body_end(f.d, f.c);
    http_deadline_body_end(f.d, f.c); /* again: changes nothing */
    cr_expect_eq(ms_until_eof(f.sv[1], QUIET_MS), -1,
                 "cut while the answer was being made");
    http_deadline_request_end(f.d, f.c);
    took = ms_until_eof(f.sv[1], CUT_BOUND_MS);
    cr_expect_geq(took, HEADER_MS, "cut %lld ms after the answer",
                  (long long)took);
    cr_expect_eq(cut_count("keepalive_timeout"), before + 1);
    close_conn(&f);
}

Test(http_deadline, a_closed_connection_is_never_touched)
{
    fixture f;

    open_conn(&f);
    http_deadline_close(f.d, f.c);
    f.c = NULL; /* close_conn's close of NULL is a no-op */
    cr_expect_eq(ms_until_eof(f.sv[1], QUIET_MS), -1,
                 "a socket no longer tracked was shut down");
    close_conn(&f);
}
