/*
 * bench_consumer.c - the one consumer every benchmark scenario reads with:
 * consume one queue with auto-ack and note, for each message, the wall-clock
 * time it was handed over (CLOCK_REALTIME, ns, taken right after
 * amqp_consume_message returns) and the first word of its body (the
 * message's id in the benchmark). A C consumer, because pika's
 * BlockingConnection tops out around 10-20k msg/s and adds its own delay to
 * every receive time.
 *
 *   bench_consumer --port P --queue Q --count N --out FILE
 *                  [--host 127.0.0.1] [--timeout-s 120] [--prefetch 0]
 *
 * Prints "consuming" on stdout once basic.consume is acknowledged, then ends
 * when N messages have arrived, the timeout passes, or on SIGTERM/SIGINT,
 * and writes "RECV_NS ID" lines to FILE. Exit status 0 if N arrived.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -o bench_consumer bench_consumer.c -lrabbitmq
 */
#define _GNU_SOURCE
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define CHANNEL 1
#define ID_MAX 40

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "bench_consumer: %s%s%s\n", what, detail ? ": " : "",
            detail ? detail : "");
    exit(2);
}

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void check_rpc(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        die(what, amqp_error_string2(r.library_error));
    die(what, "server or protocol error");
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *queue = NULL, *out = NULL;
    int port = 0, timeout_s = 120, prefetch = 0;
    long count = 0;
    amqp_connection_state_t conn;
    amqp_socket_t *sock;
    int64_t *recv_ns;
    char(*ids)[ID_MAX];
    long got = 0;
    int64_t deadline;
    FILE *f;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--host") == 0)
            host = argv[i + 1];
        else if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--queue") == 0)
            queue = argv[i + 1];
        else if (strcmp(argv[i], "--count") == 0)
            count = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--out") == 0)
            out = argv[i + 1];
        else if (strcmp(argv[i], "--timeout-s") == 0)
            timeout_s = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--prefetch") == 0)
            prefetch = atoi(argv[i + 1]);
        else
            die("unknown option", argv[i]);
    }
    if (port <= 0 || queue == NULL || out == NULL || count < 1)
        die("usage", "bench_consumer --port P --queue Q --count N --out FILE "
                     "[--host H] [--timeout-s S] [--prefetch N]");
    recv_ns = calloc((size_t)count, sizeof(*recv_ns));
    ids = calloc((size_t)count, sizeof(*ids));
    if (recv_ns == NULL || ids == NULL)
        die("out of memory", NULL);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    conn = amqp_new_connection();
    sock = amqp_tcp_socket_new(conn);
    if (sock == NULL || amqp_socket_open(sock, host, port) != AMQP_STATUS_OK)
        die("cannot connect", host);
    check_rpc(amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN,
                         "guest", "guest"),
              "login");
    amqp_channel_open(conn, CHANNEL);
    check_rpc(amqp_get_rpc_reply(conn), "channel.open");
    if (prefetch > 0) {
        amqp_basic_qos(conn, CHANNEL, 0, (uint16_t)prefetch, 0);
        check_rpc(amqp_get_rpc_reply(conn), "basic.qos");
    }
    amqp_basic_consume(conn, CHANNEL, amqp_cstring_bytes(queue),
                       amqp_empty_bytes, 0, 1 /* no_ack */, 0,
                       amqp_empty_table);
    check_rpc(amqp_get_rpc_reply(conn), "basic.consume");
    printf("consuming\n");
    fflush(stdout);

    deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)timeout_s * 1000000000;
    while (got < count && !stop_flag && now_ns(CLOCK_MONOTONIC) < deadline) {
        amqp_envelope_t env;
        struct timeval tv = {0, 100000};
        amqp_rpc_reply_t r;

        amqp_maybe_release_buffers(conn);
        r = amqp_consume_message(conn, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            size_t len = env.message.body.len, k = 0;
            const char *b = env.message.body.bytes;
            recv_ns[got] = now_ns(CLOCK_REALTIME);
            while (k < len && k < ID_MAX - 1 && b[k] != ' ')
                k++;
            memcpy(ids[got], b, k);
            ids[got][k] = '\0';
            got++;
            amqp_destroy_envelope(&env);
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            amqp_frame_t fr; /* something other than a delivery: skip it */
            if (amqp_simple_wait_frame(conn, &fr) != AMQP_STATUS_OK)
                die("reading a frame", NULL);
            continue;
        }
        die("consuming", r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                             ? amqp_error_string2(r.library_error)
                             : "server closed the channel");
    }

    f = fopen(out, "w");
    if (f == NULL)
        die("cannot write", out);
    for (long i = 0; i < got; i++)
        fprintf(f, "%" PRId64 " %s\n", recv_ns[i], ids[i]);
    if (fclose(f) != 0)
        die("cannot write", out);
    fprintf(stderr, "bench_consumer: %ld of %ld messages from %s\n", got, count,
            queue);
    amqp_channel_close(conn, CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    free(recv_ns);
    free(ids);
    return got == count ? 0 : 1;
}
