/*
 * amqp_fields.c - a rabbitmq-c client for the x-delay tests
 * (test_amqp_ingest.py): it publishes messages whose x-delay header has any
 * AMQP 0-9-1 field type, including those pika cannot encode (signed and
 * unsigned 8/16/32-bit, unsigned 64-bit, float, double, decimal, void), and
 * reads back the x-delay a message arrived with, as rabbitmq-c decodes it.
 *
 *   amqp_fields publish PORT EXCHANGE ROUTING_KEY [MESSAGE_ID KIND VALUE]...
 *     KIND is the field type's letter as rabbitmq-c encodes it: b B s u I i
 *     l L (integers), f d (float, double: VALUE as strtod reads it, so also
 *     nan, inf), D (decimal: DECIMALS:VALUE), S x (long string, byte array:
 *     VALUE as it is), t (boolean 0/1), T (timestamp, seconds), V F A (void,
 *     empty table, empty array; VALUE ignored). With confirms: prints
 *     "acked N" once all are confirmed (exit 0), or "closed CODE TEXT" if
 *     the broker closed the channel or connection (exit 3).
 *   amqp_fields read PORT QUEUE COUNT TIMEOUT_MS
 *     basic.get until COUNT messages came or the time is up; prints one line
 *     per message: "MESSAGE_ID KIND VALUE" for its x-delay (KIND "-" when
 *     it has none). Exit 0 if COUNT arrived.
 *
 * guest/guest on 127.0.0.1, vhost "/", channel 1. Test tool, not the
 * service: each step either works or the tool says why and exits.
 */
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define CH 1
#define MAX_MSGS 256

static void die(const char *what, amqp_rpc_reply_t r)
{
    uint16_t code = 0;
    amqp_bytes_t text = {0, NULL};

    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *c = r.reply.decoded;
        code = c->reply_code;
        text = c->reply_text;
    } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
               r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const amqp_connection_close_t *c = r.reply.decoded;
        code = c->reply_code;
        text = c->reply_text;
    }
    if (code) {
        printf("closed %u %.*s\n", code, (int)text.len,
               (const char *)text.bytes);
        exit(3);
    }
    fprintf(stderr,
            "amqp_fields: %s failed (reply type %d, library error %d: "
            "%s)\n",
            what, r.reply_type, r.library_error,
            amqp_error_string2(r.library_error));
    exit(1);
}

static amqp_connection_state_t open_conn(const char *port)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    struct timeval tv = {5, 0};

    if (!s || amqp_socket_open_noblock(s, "127.0.0.1", atoi(port), &tv) !=
                  AMQP_STATUS_OK) {
        fprintf(stderr, "amqp_fields: cannot connect to 127.0.0.1:%s\n", port);
        exit(1);
    }
    amqp_set_rpc_timeout(c, &tv);
    amqp_rpc_reply_t r = amqp_login(c, "/", 0, 131072, 0,
                                    AMQP_SASL_METHOD_PLAIN, "guest", "guest");
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        die("login", r);
    }
    amqp_channel_open(c, CH);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        die("channel.open", r);
    }
    return c;
}

static void set_value(amqp_field_value_t *v, char kind, const char *text)
{
    memset(v, 0, sizeof *v);
    v->kind = (uint8_t)kind;
    switch (kind) {
    case 'b': v->value.i8 = (int8_t)strtoll(text, NULL, 10); break;
    case 'B': v->value.u8 = (uint8_t)strtoull(text, NULL, 10); break;
    case 's': v->value.i16 = (int16_t)strtoll(text, NULL, 10); break;
    case 'u': v->value.u16 = (uint16_t)strtoull(text, NULL, 10); break;
    case 'I': v->value.i32 = (int32_t)strtoll(text, NULL, 10); break;
    case 'i': v->value.u32 = (uint32_t)strtoull(text, NULL, 10); break;
    case 'l': v->value.i64 = strtoll(text, NULL, 10); break;
    case 'L':
    case 'T': v->value.u64 = strtoull(text, NULL, 10); break;
    case 'f': v->value.f32 = strtof(text, NULL); break;
    case 'd': v->value.f64 = strtod(text, NULL); break;
    case 't': v->value.boolean = atoi(text) != 0; break;
    case 'D': {
        unsigned dec = 0;
        unsigned long val = 0;
        if (sscanf(text, "%u:%lu", &dec, &val) != 2) {
            fprintf(stderr, "amqp_fields: decimal wants DECIMALS:VALUE\n");
            exit(2);
        }
        v->value.decimal.decimals = (uint8_t)dec;
        v->value.decimal.value = (uint32_t)val;
        break;
    }
    case 'S':
    case 'x': v->value.bytes = amqp_cstring_bytes(text); break;
    case 'V': break;
    case 'F': v->value.table.num_entries = 0; break;
    case 'A': v->value.array.num_entries = 0; break;
    default: fprintf(stderr, "amqp_fields: unknown kind %c\n", kind); exit(2);
    }
}

static int publish(int argc, char **argv)
{
    amqp_connection_state_t c = open_conn(argv[2]);
    int n = (argc - 5) / 3;
    uint64_t acked = 0;
    struct timespec deadline;

    if (n < 1 || n > MAX_MSGS || (argc - 5) % 3 != 0) {
        fprintf(stderr,
                "amqp_fields: publish wants MESSAGE_ID KIND VALUE "
                "triples (1-%d)\n",
                MAX_MSGS);
        return 2;
    }
    amqp_confirm_select(c, CH);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) {
        die("confirm.select", amqp_get_rpc_reply(c));
    }
    for (int i = 0; i < n; i++) {
        char **t = argv + 5 + 3 * i;
        amqp_table_entry_t e;
        amqp_basic_properties_t p;

        e.key = amqp_cstring_bytes("x-delay");
        set_value(&e.value, t[1][0], t[2]);
        memset(&p, 0, sizeof p);
        p._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                   AMQP_BASIC_DELIVERY_MODE_FLAG;
        p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
        p.message_id = amqp_cstring_bytes(t[0]);
        p.headers.num_entries = 1;
        p.headers.entries = &e;
        if (amqp_basic_publish(c, CH, amqp_cstring_bytes(argv[3]),
                               amqp_cstring_bytes(argv[4]), 0, 0, &p,
                               amqp_cstring_bytes(t[0])) != AMQP_STATUS_OK) {
            fprintf(stderr, "amqp_fields: publish %d failed\n", i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += 10;
    while (acked < (uint64_t)n) {
        amqp_frame_t f;
        struct timeval tv = {0, 200000};
        struct timespec now;
        int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);

        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > deadline.tv_sec) {
            fprintf(stderr,
                    "amqp_fields: %" PRIu64 " of %d confirmed in 10 s\n", acked,
                    n);
            return 1;
        }
        if (rc == AMQP_STATUS_TIMEOUT) {
            continue;
        }
        if (rc != AMQP_STATUS_OK) {
            fprintf(stderr, "amqp_fields: connection lost: %s\n",
                    amqp_error_string2(rc));
            return 1;
        }
        if (f.frame_type != AMQP_FRAME_METHOD) {
            continue;
        }
        if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = f.payload.method.decoded;
            acked = a->multiple ? a->delivery_tag : acked + 1;
        } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            fprintf(stderr, "amqp_fields: nacked\n");
            return 1;
        } else if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                   f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_rpc_reply_t r = {AMQP_RESPONSE_SERVER_EXCEPTION,
                                  f.payload.method, 0};
            die("publish", r);
        }
    }
    printf("acked %d\n", n);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    return 0;
}

static void print_delay(const amqp_basic_properties_t *p)
{
    const amqp_field_value_t *v = NULL;

    for (int i = 0;
         (p->_flags & AMQP_BASIC_HEADERS_FLAG) && i < p->headers.num_entries;
         i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len == 7 && memcmp(e->key.bytes, "x-delay", 7) == 0) {
            v = &e->value;
        }
    }
    printf("%.*s ", (int)p->message_id.len, (const char *)p->message_id.bytes);
    if (!v) {
        printf("- -\n");
        return;
    }
    switch (v->kind) {
    case 'b': printf("b %d\n", v->value.i8); break;
    case 'B': printf("B %u\n", v->value.u8); break;
    case 's': printf("s %d\n", v->value.i16); break;
    case 'u': printf("u %u\n", v->value.u16); break;
    case 'I': printf("I %" PRId32 "\n", v->value.i32); break;
    case 'i': printf("i %" PRIu32 "\n", v->value.u32); break;
    case 'l': printf("l %" PRId64 "\n", v->value.i64); break;
    case 'L': printf("L %" PRIu64 "\n", v->value.u64); break;
    default: printf("%c ?\n", v->kind); break;
    }
}

static int read_messages(char **argv)
{
    amqp_connection_state_t c = open_conn(argv[2]);
    int want = atoi(argv[4]), got = 0;
    struct timespec now, end;

    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += atoi(argv[5]) / 1000;
    end.tv_nsec += (long)(atoi(argv[5]) % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    while (got < want) {
        amqp_rpc_reply_t r =
            amqp_basic_get(c, CH, amqp_cstring_bytes(argv[3]), 1);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            die("basic.get", r);
        }
        if (r.reply.id == AMQP_BASIC_GET_OK_METHOD) {
            amqp_message_t m;
            r = amqp_read_message(c, CH, &m, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL) {
                die("read message", r);
            }
            print_delay(&m.properties);
            amqp_destroy_message(&m);
            got++;
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > end.tv_sec ||
            (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec)) {
            break;
        }
        nanosleep(&(struct timespec){0, 20000000L}, NULL); /* queue empty */
    }
    fflush(stdout);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    return got == want ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 5 && strcmp(argv[1], "publish") == 0) {
        return publish(argc, argv);
    }
    if (argc == 6 && strcmp(argv[1], "read") == 0) {
        return read_messages(argv);
    }
    fprintf(stderr, "usage: amqp_fields publish PORT EXCHANGE ROUTING_KEY "
                    "[MESSAGE_ID KIND VALUE]...\n"
                    "       amqp_fields read PORT QUEUE COUNT TIMEOUT_MS\n");
    return 2;
}
