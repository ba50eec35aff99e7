/*
 * bare_publisher.c - the limit rmq-scheduler's dispatcher is compared with:
 * publish persistent messages with mandatory=1 on a confirm channel, as fast
 * as the broker confirms them, with nothing else in the way (no database,
 * no HTTP). rabbitmq-c 0.11 (Debian 12) has no confirm-wait helper, so the
 * acks are read here with amqp_simple_wait_frame_noblock(), pipelined with a
 * window of outstanding (unconfirmed) publishes.
 *
 * Two modes:
 *
 *   count mode (default): publish --count N messages to --exchange/--routing-key
 *     at once (after --at MS, a wall-clock time in ms, if given) and report
 *     msgs/s from the first publish to the last confirm.
 *
 *   plan mode (--plan): read lines "AT_MS EXCHANGE ROUTING_KEY EXPIRATION BODY"
 *     from stdin ("-" for the default exchange ""), sort them by AT_MS and
 *     publish each one when the wall clock reaches AT_MS (0: at once).
 *     EXPIRATION is "-" (none), "N" (the AMQP expiration property, ms) or
 *     "@T" (expire at wall-clock ms T: T - now at the moment of publishing).
 *     With --publish-log FILE, each message's "BODY PUBLISH_NS" is written
 *     there (CLOCK_REALTIME at the publish call).
 *
 * --stop-and-wait: instead of a sliding window, publish --window messages,
 * wait until every one is confirmed, then the next --window (what the
 * service's dispatcher does per round, minus its database work).
 *
 * Output: one JSON object on stdout, e.g.
 *   {"published":10000,"acked":10000,"nacked":0,"returned":0,
 *    "first_publish_ms":...,"last_ack_ms":...,"seconds":0.081,"msgs_per_s":123456}
 * Exit status 0 if every message was acked and none returned or nacked.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -o bare_publisher bare_publisher.c -lrabbitmq
 */
#define _GNU_SOURCE
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define CHANNEL 1
#define MAX_FIELD 256

typedef struct plan_item {
    int64_t at_ms;
    char *exchange;
    char *routing_key;
    char *expiration; /* NULL, "N" or "@T" */
    char *body;
    size_t seq; /* input order, for a stable sort */
} plan_item;

typedef struct opts {
    const char *host;
    int port;
    const char *user, *password, *vhost;
    const char *exchange, *routing_key;
    long count;
    long window;
    long body_size;
    int64_t at_ms;
    bool plan;
    bool stop_and_wait;
    const char *publish_log;
    int timeout_s;
} opts;

typedef struct state {
    amqp_connection_state_t conn;
    unsigned char *settled; /* [1..published]: 1 once acked/nacked */
    uint64_t low;           /* every tag < low is settled */
    uint64_t published;
    uint64_t acked, nacked, returned, settled_n;
    int64_t last_ack_ms;
} state;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "bare_publisher: %s%s%s\n", what, detail ? ": " : "",
            detail ? detail : "");
    exit(2);
}

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ms(void)
{
    return now_ns(CLOCK_REALTIME) / 1000000;
}

static void check_rpc(amqp_rpc_reply_t r, const char *what)
{
    char buf[160];

    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL: return;
    case AMQP_RESPONSE_NONE: die(what, "missing RPC reply"); break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        die(what, amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            snprintf(buf, sizeof(buf), "server closed the connection: %u %.*s",
                     m->reply_code, (int)m->reply_text.len,
                     (char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            snprintf(buf, sizeof(buf), "server closed the channel: %u %.*s",
                     m->reply_code, (int)m->reply_text.len,
                     (char *)m->reply_text.bytes);
        } else {
            snprintf(buf, sizeof(buf), "server exception, method 0x%08x",
                     r.reply.id);
        }
        die(what, buf);
        break;
    }
}

static void settle(state *s, uint64_t tag, bool multiple, bool ack)
{
    uint64_t from = multiple ? s->low : tag;

    if (tag > s->published || tag == 0)
        return;
    for (uint64_t t = from; t <= tag; t++) {
        if (!s->settled[t]) {
            s->settled[t] = 1;
            s->settled_n++;
            if (ack)
                s->acked++;
            else
                s->nacked++;
        }
    }
    while (s->low <= s->published && s->settled[s->low])
        s->low++;
    s->last_ack_ms = wall_ms();
}

/* Read one frame if one comes within timeout_us (0: poll). Returns false on
 * timeout. Dies on a closed connection or channel. */
static bool read_frame(state *s, long timeout_us)
{
    amqp_frame_t f;
    struct timeval tv = {timeout_us / 1000000, timeout_us % 1000000};
    int rc = amqp_simple_wait_frame_noblock(s->conn, &f, &tv);

    if (rc == AMQP_STATUS_TIMEOUT)
        return false;
    if (rc != AMQP_STATUS_OK)
        die("reading frames", amqp_error_string2(rc));
    if (f.frame_type != AMQP_FRAME_METHOD)
        return true; /* content header/body of a basic.return: skipped */
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = f.payload.method.decoded;
        settle(s, a->delivery_tag, a->multiple, true);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *n = f.payload.method.decoded;
        settle(s, n->delivery_tag, n->multiple, false);
        break;
    }
    case AMQP_BASIC_RETURN_METHOD: s->returned++; break;
    case AMQP_CHANNEL_CLOSE_METHOD: {
        amqp_channel_close_t *m = f.payload.method.decoded;
        char buf[300];
        snprintf(buf, sizeof(buf), "%u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
        die("channel closed by the broker", buf);
        break;
    }
    case AMQP_CONNECTION_CLOSE_METHOD:
        die("connection closed by the broker", NULL);
        break;
    default: break;
    }
    amqp_maybe_release_buffers(s->conn);
    return true;
}

static void publish(state *s, const char *exchange, const char *routing_key,
                    const char *expiration, const char *body, size_t body_len,
                    uint64_t n)
{
    amqp_basic_properties_t p;
    amqp_table_entry_t h[3];
    char id[48], exp[32], sched[32];
    int rc;

    memset(&p, 0, sizeof(p));
    /* Like the service's messages: persistent, a message id, three headers. */
    snprintf(id, sizeof(id), "bare-%020" PRIu64 "-0000-000000", n);
    snprintf(sched, sizeof(sched), "%" PRId64, wall_ms());
    h[0].key = amqp_cstring_bytes("x-scheduler-job-id");
    h[0].value.kind = AMQP_FIELD_KIND_UTF8;
    h[0].value.value.bytes = amqp_cstring_bytes(id);
    h[1].key = amqp_cstring_bytes("x-scheduled-at");
    h[1].value.kind = AMQP_FIELD_KIND_UTF8;
    h[1].value.value.bytes = amqp_cstring_bytes(sched);
    h[2].key = amqp_cstring_bytes("x-delay");
    h[2].value.kind = AMQP_FIELD_KIND_I64;
    h[2].value.value.i64 = 0;
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
               AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.content_type = amqp_cstring_bytes("text/plain");
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.message_id = amqp_cstring_bytes(id);
    p.headers.num_entries = 3;
    p.headers.entries = h;
    if (expiration != NULL) {
        if (expiration[0] == '@') {
            int64_t left = strtoll(expiration + 1, NULL, 10) - wall_ms();
            snprintf(exp, sizeof(exp), "%" PRId64, left > 0 ? left : 0);
        } else {
            snprintf(exp, sizeof(exp), "%s", expiration);
        }
        p._flags |= AMQP_BASIC_EXPIRATION_FLAG;
        p.expiration = amqp_cstring_bytes(exp);
    }
    rc = amqp_basic_publish(s->conn, CHANNEL, amqp_cstring_bytes(exchange),
                            amqp_cstring_bytes(routing_key), 1, 0, &p,
                            (amqp_bytes_t){body_len, (void *)body});
    if (rc != AMQP_STATUS_OK)
        die("basic.publish", amqp_error_string2(rc));
    s->published++;
}

/* Block until fewer than window publishes are unconfirmed (stop_and_wait:
 * at a multiple of window, until none is). */
static void wait_window(state *s, long window, bool stop_and_wait,
                        int64_t deadline_mono)
{
    uint64_t limit = (uint64_t)window;

    if (stop_and_wait)
        limit = s->published > 0 && s->published % (uint64_t)window == 0
                    ? 1
                    : UINT64_MAX;
    while (s->published - s->settled_n >= limit) {
        if (now_ns(CLOCK_MONOTONIC) > deadline_mono)
            die("timed out waiting for confirms", NULL);
        read_frame(s, 100000);
    }
}

static int cmp_plan(const void *a, const void *b)
{
    const plan_item *x = a, *y = b;
    if (x->at_ms != y->at_ms)
        return x->at_ms < y->at_ms ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

static plan_item *read_plan(size_t *n_out)
{
    size_t n = 0, cap = 1024;
    plan_item *items = malloc(cap * sizeof(*items));
    char line[4 * MAX_FIELD + 64];

    if (items == NULL)
        die("out of memory", NULL);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char ex[MAX_FIELD], rk[MAX_FIELD], exp[MAX_FIELD], body[MAX_FIELD];
        long long at;

        if (line[0] == '\n' || line[0] == '#')
            continue;
        if (sscanf(line, "%lld %255s %255s %255s %255s", &at, ex, rk, exp,
                   body) != 5)
            die("bad plan line", line);
        if (n == cap) {
            cap *= 2;
            items = realloc(items, cap * sizeof(*items));
            if (items == NULL)
                die("out of memory", NULL);
        }
        items[n] = (plan_item){
            .at_ms = at,
            .exchange = strdup(strcmp(ex, "-") == 0 ? "" : ex),
            .routing_key = strdup(strcmp(rk, "-") == 0 ? "" : rk),
            .expiration = strcmp(exp, "-") == 0 ? NULL : strdup(exp),
            .body = strdup(body),
            .seq = n};
        n++;
    }
    qsort(items, n, sizeof(*items), cmp_plan);
    *n_out = n;
    return items;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bare_publisher --port P [--host 127.0.0.1] [--user guest]\n"
            "         [--password guest] [--vhost /] [--window 1000]\n"
            "         [--timeout-s 120]\n"
            "       count mode: --exchange X --routing-key K [--count 10000]\n"
            "         [--body-size 64] [--at WALL_MS]\n"
            "       plan mode:  --plan [--publish-log FILE] < lines "
            "\"AT_MS EXCHANGE ROUTING_KEY EXPIRATION BODY\"\n");
    exit(2);
}

static void parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.host = "127.0.0.1",
                .port = 0,
                .user = "guest",
                .password = "guest",
                .vhost = "/",
                .exchange = NULL,
                .routing_key = NULL,
                .count = 10000,
                .window = 1000,
                .body_size = 64,
                .at_ms = 0,
                .timeout_s = 120};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--plan") == 0) {
            o->plan = true;
            continue;
        }
        if (strcmp(a, "--stop-and-wait") == 0) {
            o->stop_and_wait = true;
            continue;
        }
        if (v == NULL)
            usage();
        i++;
        if (strcmp(a, "--host") == 0)
            o->host = v;
        else if (strcmp(a, "--port") == 0)
            o->port = atoi(v);
        else if (strcmp(a, "--user") == 0)
            o->user = v;
        else if (strcmp(a, "--password") == 0)
            o->password = v;
        else if (strcmp(a, "--vhost") == 0)
            o->vhost = v;
        else if (strcmp(a, "--exchange") == 0)
            o->exchange = v;
        else if (strcmp(a, "--routing-key") == 0)
            o->routing_key = v;
        else if (strcmp(a, "--count") == 0)
            o->count = atol(v);
        else if (strcmp(a, "--window") == 0)
            o->window = atol(v);
        else if (strcmp(a, "--body-size") == 0)
            o->body_size = atol(v);
        else if (strcmp(a, "--at") == 0)
            o->at_ms = strtoll(v, NULL, 10);
        else if (strcmp(a, "--publish-log") == 0)
            o->publish_log = v;
        else if (strcmp(a, "--timeout-s") == 0)
            o->timeout_s = atoi(v);
        else
            usage();
    }
    if (o->port <= 0 || o->window < 1 || o->count < 1 || o->body_size < 1 ||
        o->body_size > 1 << 20 ||
        (!o->plan && (!o->exchange || !o->routing_key)))
        usage();
}

/* Sleep until wall-clock ms at, reading confirms meanwhile if any are due. */
static void wait_until_wall(state *s, int64_t at)
{
    for (;;) {
        int64_t left_ns = at * 1000000 - now_ns(CLOCK_REALTIME);
        if (left_ns <= 0)
            return;
        if (s->published > s->settled_n && left_ns > 2000000) {
            /* confirms outstanding: read them while waiting, but wake up
             * 1 ms early to finish with a precise sleep */
            read_frame(s, (long)((left_ns - 1000000) / 1000));
        } else {
            struct timespec ts = {at / 1000, (at % 1000) * 1000000};
            clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL);
        }
    }
}

int main(int argc, char **argv)
{
    opts o;
    state s = {0};
    amqp_socket_t *sock;
    plan_item *plan = NULL;
    size_t n = 0;
    FILE *plog = NULL;
    char *body = NULL;
    int64_t t0_mono = 0, t0_wall = 0, t1_mono, deadline;
    int64_t *pub_ns = NULL;
    double secs;

    parse_args(argc, argv, &o);
    if (o.plan) {
        plan = read_plan(&n);
        if (n == 0)
            die("empty plan", NULL);
        if (o.publish_log != NULL && (plog = fopen(o.publish_log, "w")) == NULL)
            die("cannot open the publish log", strerror(errno));
        pub_ns = calloc(n, sizeof(*pub_ns));
        if (pub_ns == NULL)
            die("out of memory", NULL);
    } else {
        n = (size_t)o.count;
        body = malloc((size_t)o.body_size + 1);
        if (body == NULL)
            die("out of memory", NULL);
    }
    s.settled = calloc(n + 2, 1);
    if (s.settled == NULL)
        die("out of memory", NULL);
    s.low = 1;

    s.conn = amqp_new_connection();
    sock = amqp_tcp_socket_new(s.conn);
    if (sock == NULL)
        die("amqp_tcp_socket_new", NULL);
    if (amqp_socket_open(sock, o.host, o.port) != AMQP_STATUS_OK)
        die("cannot connect", o.host);
    check_rpc(amqp_login(s.conn, o.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN,
                         o.user, o.password),
              "login");
    amqp_channel_open(s.conn, CHANNEL);
    check_rpc(amqp_get_rpc_reply(s.conn), "channel.open");
    if (amqp_confirm_select(s.conn, CHANNEL) == NULL)
        check_rpc(amqp_get_rpc_reply(s.conn), "confirm.select");

    if (!o.plan && o.at_ms > 0)
        wait_until_wall(&s, o.at_ms);
    deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)o.timeout_s * 1000000000;
    for (size_t i = 0; i < n; i++) {
        if (o.plan) {
            if (plan[i].at_ms > 0)
                wait_until_wall(&s, plan[i].at_ms);
            wait_window(&s, o.window, o.stop_and_wait, deadline);
            pub_ns[i] = now_ns(CLOCK_REALTIME);
            if (i == 0) {
                t0_mono = now_ns(CLOCK_MONOTONIC);
                t0_wall = pub_ns[0] / 1000000;
            }
            publish(&s, plan[i].exchange, plan[i].routing_key,
                    plan[i].expiration, plan[i].body, strlen(plan[i].body),
                    i + 1);
        } else {
            int len;
            wait_window(&s, o.window, o.stop_and_wait, deadline);
            if (i == 0) {
                t0_mono = now_ns(CLOCK_MONOTONIC);
                t0_wall = wall_ms();
            }
            /* body: "b<i>" then padding to body_size */
            len = snprintf(body, (size_t)o.body_size + 1, "b%zu ", i);
            if (len < o.body_size)
                memset(body + len, 'x', (size_t)(o.body_size - len));
            publish(&s, o.exchange, o.routing_key, NULL, body,
                    (size_t)o.body_size, i + 1);
        }
        /* Keep acks flowing without a syscall per publish. */
        if ((i & 63) == 63)
            while (read_frame(&s, 0))
                ;
    }
    while (s.settled_n < s.published) {
        if (now_ns(CLOCK_MONOTONIC) > deadline)
            die("timed out waiting for the last confirms", NULL);
        read_frame(&s, 100000);
    }
    t1_mono = now_ns(CLOCK_MONOTONIC);
    secs = (double)(t1_mono - t0_mono) / 1e9;

    if (plog != NULL) {
        for (size_t i = 0; i < n; i++)
            fprintf(plog, "%s %" PRId64 "\n", plan[i].body, pub_ns[i]);
        fclose(plog);
    }
    printf("{\"published\":%" PRIu64 ",\"acked\":%" PRIu64
           ",\"nacked\":%" PRIu64 ",\"returned\":%" PRIu64
           ",\"first_publish_ms\":%" PRId64 ",\"last_ack_ms\":%" PRId64
           ",\"seconds\":%.6f,\"msgs_per_s\":%.1f,"
           "\"window\":%ld,\"stop_and_wait\":%s}\n",
           s.published, s.acked, s.nacked, s.returned, t0_wall, s.last_ack_ms,
           secs, secs > 0 ? (double)s.published / secs : 0.0, o.window,
           o.stop_and_wait ? "true" : "false");
    fflush(stdout);

    check_rpc(amqp_channel_close(s.conn, CHANNEL, AMQP_REPLY_SUCCESS),
              "channel.close");
    check_rpc(amqp_connection_close(s.conn, AMQP_REPLY_SUCCESS),
              "connection.close");
    amqp_destroy_connection(s.conn);
    for (size_t i = 0; plan != NULL && i < n; i++) {
        free(plan[i].exchange);
        free(plan[i].routing_key);
        free(plan[i].expiration);
        free(plan[i].body);
    }
    free(plan);
    free(pub_ns);
    free(body);
    free(s.settled);
    return s.acked == s.published && s.returned == 0 && s.nacked == 0 ? 0 : 1;
}
