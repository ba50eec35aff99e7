/*
 * amqp_conn.c - open, name, close and drop AMQP connections, one way for
 * the publisher and the ingest (see amqp_conn.h).
 *
 * Why: both connect to the same broker with the same URL and TLS files.
 * They used to carry a copy each of the URL parsing, the safe URL, the TLS
 * set-up, the login and the reply texts, and the copies drifted: for an
 * amqps:// URL whose host is an IP literal the publisher checked the
 * certificate's IP address while the ingest asked rabbitmq-c for a DNS
 * name check, which no certificate for an IP passes. Here is the one copy.
 *
 * DESIGN
 * - URL: rabbitmq-c's amqp_parse_url (it decodes user, password and vhost,
 *   and knows the amqps default port 5671); it writes into its input, so
 *   each URL is parsed from a scratch copy that is wiped. "amqp://host/"
 *   strictly names the vhost "", which RabbitMQ cannot have; like most
 *   clients it is read (and no path) as the default "/". Several URLs are
 *   split where a comma is followed by amqp:// or amqps://.
 * - Safe URL: rebuilt from the parsed parts, user and vhost percent-encoded
 *   (RFC 3986 unreserved kept), password "***", so no odd spelling of the
 *   original can leak it.
 * - TLS: peer verified against --amqp-ca-file or the system trust store
 *   (SSL_CTX_set_default_verify_paths: SSL_CERT_FILE / SSL_CERT_DIR apply),
 *   TLS 1.2 at least (libssl comes with the rabbitmq::rabbitmq target).
 *   rabbitmq-c 0.11 matches the host only against DNS names (and the CN),
 *   so an IP literal is verified by OpenSSL instead
 *   (X509_VERIFY_PARAM_set1_ip_asc: the certificate's subjectAltName must
 *   hold that IP address) and a DNS name by rabbitmq-c.
 * - Login: client properties product, version, connection_name (shown by
 *   the broker's management UI and rabbitmqctl) and the capabilities
 *   connection.blocked (so a resource alarm is announced instead of only
 *   stalling sends; LIBRARY-NOTES section 1, #519) and
 *   consumer_cancel_notify. rabbitmq-c merges them with its own; ours win.
 * - TCP_USER_TIMEOUT = 2 x the granted heartbeat: rabbitmq-c 0.11 sends
 *   without a deadline (#519), so the kernel fails a send stuck that long
 *   (dead peer, zero window) and a vanished broker cannot hang a thread.
 */
#include "amqp_conn.h"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

#define MOD "amqp"
#define DEFAULT_TIMEOUT_MS 10000
#define REPLY_TEXT_MAX 200 /* bytes of a broker's reply text kept */

/* One parsed URL. */
typedef struct url {
    char *host, *vhost, *user;
    char *password; /* wiped on free */
    int port;
    bool tls;
    char *safe;
} url;

struct amqpc {
    url *urls; /* immutable after amqpc_new */
    size_t n_urls;
    /* Index of the URL in use: moved only by the owner thread (open), read
     * by others too (the safe URL in logs and /readyz), hence atomic. */
    _Atomic size_t cur;
    char *name;
    char *ca_file, *cert_file, *key_file;
    int heartbeat_s;
    int timeout_ms;

    amqp_connection_state_t conn; /* NULL while closed */
    bool failed;                  /* the last open of urls[cur] failed,
                                     or its connection was lost */
    bool lost;                    /* ...lost: the move is logged */
    char version[32];
};

/* ------------------------------------------------------------------ */
/* URLs                                                                */

/* Append s to out, percent-encoding what is not unreserved (RFC 3986). */
static void pct_append(char *out, size_t cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t len = strlen(out);

    for (; *s && len + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
            ch == '~') {
            out[len++] = (char)ch;
        } else {
            out[len++] = '%';
            out[len++] = hex[ch >> 4];
            out[len++] = hex[ch & 15];
        }
    }
    out[len] = '\0';
}

/* amqp[s]://user:***@host:port/vhost from the parsed parts. */
static char *make_safe_url(const url *u)
{
    size_t cap =
        3 * (strlen(u->user) + strlen(u->vhost)) + strlen(u->host) + 64;
    char *out = malloc(cap);
    bool v6 = strchr(u->host, ':') != NULL;

    if (!out)
        return NULL;
    snprintf(out, cap, "%s://", u->tls ? "amqps" : "amqp");
    pct_append(out, cap, u->user);
    snprintf(out + strlen(out), cap - strlen(out), ":***@%s%s%s:%d/",
             v6 ? "[" : "", u->host, v6 ? "]" : "", u->port);
    pct_append(out, cap, u->vhost);
    return out;
}

static void url_clear(url *u)
{
    if (u->password)
        explicit_bzero(u->password, strlen(u->password));
    free(u->password);
    free(u->host);
    free(u->vhost);
    free(u->user);
    free(u->safe);
    memset(u, 0, sizeof *u);
}

/* Parse text[0..len) as URL number no (1-based, for the message). */
static rmqs_rc parse_one(const char *text, size_t len, size_t no, size_t of,
                         url *u, rmqs_error *err)
{
    struct amqp_connection_info ci;
    char *buf = malloc(len + 1);
    char which[64] = "";
    rmqs_rc rc = RMQS_OK;

    if (!buf)
        return rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (of > 1)
        snprintf(which, sizeof which, " (URL %zu of %zu)", no, of);
    /* Never echo the URL: it holds the password. */
    if (len == 0) {
        rc = rmqs_fail(err, RMQS_EINVAL, "amqp_url", "AMQP URL is empty%s",
                       which);
        goto out;
    }
    if (amqp_parse_url(buf, &ci) != AMQP_STATUS_OK) {
        rc = rmqs_fail(err, RMQS_EINVAL, "amqp_url",
                       "invalid AMQP URL%s (expected "
                       "amqp[s]://user:password@host:port/vhost)",
                       which);
        goto out;
    }
    if (!*ci.host) {
        rc = rmqs_fail(err, RMQS_EINVAL, "amqp_url", "AMQP URL has no host%s",
                       which);
        goto out;
    }
    u->host = strdup(ci.host);
    u->vhost = strdup(*ci.vhost ? ci.vhost : "/");
    u->user = strdup(ci.user);
    u->password = strdup(ci.password);
    u->port = ci.port;
    u->tls = ci.ssl != 0;
    if (!u->host || !u->vhost || !u->user || !u->password ||
        !(u->safe = make_safe_url(u))) {
        rc = rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        goto out;
    }
out:
    explicit_bzero(buf, len);
    free(buf);
    return rc;
}

/* Where the URL that starts at s ends: at a comma followed by a scheme. */
static size_t url_len(const char *s)
{
    const char *p = s;

    while ((p = strchr(p, ',')) != NULL) {
        if (strncmp(p + 1, "amqp://", 7) == 0 ||
            strncmp(p + 1, "amqps://", 8) == 0)
            return (size_t)(p - s);
        p++;
    }
    return strlen(s);
}

static rmqs_rc parse_urls(amqpc_t *c, const char *text, rmqs_error *err)
{
    size_t n = 1, i = 0;
    const char *s;
    rmqs_rc rc;

    if (!text || !*text)
        return rmqs_fail(err, RMQS_EINVAL, "amqp_url", "AMQP URL is empty");
    for (s = text; s[url_len(s)] != '\0'; s += url_len(s) + 1)
        n++;
    c->urls = calloc(n, sizeof *c->urls);
    if (!c->urls)
        return rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
    c->n_urls = n;
    for (s = text; i < n; i++) {
        size_t len = url_len(s);
        rc = parse_one(s, len, i + 1, n, &c->urls[i], err);
        if (rc != RMQS_OK)
            return rc;
        s += len + (s[len] != '\0');
    }
    return RMQS_OK;
}

/* ------------------------------------------------------------------ */
/* Life of an amqpc_t                                                  */

static bool dup_opt(char **dst, const char *src)
{
    return !src || (*dst = strdup(src)) != NULL;
}

amqpc_t *amqpc_new(const amqpc_options *opt, rmqs_error *err)
{
    amqpc_t *c;

    if (!opt) {
        rmqs_fail(err, RMQS_EINVAL, "amqp_url", "no AMQP options");
        return NULL;
    }
    if (opt->heartbeat_s < 0 || opt->heartbeat_s > 65535) {
        rmqs_fail(err, RMQS_EINVAL, "heartbeat_s",
                  "heartbeat must be between 0 and 65535 seconds");
        return NULL;
    }
    if ((opt->cert_file == NULL) != (opt->key_file == NULL)) {
        rmqs_fail(err, RMQS_EINVAL, "amqp-cert-file",
                  "a client certificate needs both a certificate and a key "
                  "file");
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        return NULL;
    }
    c->heartbeat_s = opt->heartbeat_s;
    c->timeout_ms = opt->timeout_ms > 0 ? opt->timeout_ms : DEFAULT_TIMEOUT_MS;
    snprintf(c->version, sizeof c->version, "unknown");
    if (parse_urls(c, opt->url, err) != RMQS_OK)
        goto fail;
    if (!dup_opt(&c->name, opt->name ? opt->name : "rmq-scheduler") ||
        !dup_opt(&c->ca_file, opt->ca_file) ||
        !dup_opt(&c->cert_file, opt->cert_file) ||
        !dup_opt(&c->key_file, opt->key_file)) {
        rmqs_fail(err, RMQS_ENOMEM, "amqp_url", "out of memory");
        goto fail;
    }
    return c;

fail:
    amqpc_free(c);
    return NULL;
}

void amqpc_free(amqpc_t *c)
{
    if (!c)
        return;
    amqpc_drop(c);
    for (size_t i = 0; c->urls && i < c->n_urls; i++)
        url_clear(&c->urls[i]);
    free(c->urls);
    free(c->name);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c);
}

size_t amqpc_url_count(const amqpc_t *c)
{
    return c->n_urls;
}

static size_t cur_index(const amqpc_t *c)
{
    return atomic_load_explicit(&c->cur, memory_order_relaxed);
}

size_t amqpc_url_index(const amqpc_t *c)
{
    return cur_index(c);
}

void amqpc_next_url(amqpc_t *c)
{
    atomic_store_explicit(&c->cur, (cur_index(c) + 1) % c->n_urls,
                          memory_order_relaxed);
    c->failed = false;
    c->lost = false;
}

const char *amqpc_safe_url(const amqpc_t *c)
{
    return c ? c->urls[cur_index(c)].safe : "";
}

void amqpc_current(const amqpc_t *c, amqpc_url_parts *out)
{
    const url *u = &c->urls[cur_index(c)];

    out->host = u->host;
    out->port = u->port;
    out->vhost = u->vhost;
    out->user = u->user;
    out->tls = u->tls;
}

amqp_connection_state_t amqpc_state(const amqpc_t *c)
{
    return c ? c->conn : NULL;
}

int amqpc_heartbeat_s(const amqpc_t *c)
{
    return c->conn ? amqp_get_heartbeat(c->conn) : 0;
}

int amqpc_frame_max(const amqpc_t *c)
{
    return c->conn ? amqp_get_frame_max(c->conn) : 0;
}

const char *amqpc_broker_version(const amqpc_t *c)
{
    return c->version;
}

/* ------------------------------------------------------------------ */
/* Reply texts                                                         */

void amqpc_reply_text(char *out, size_t cap, unsigned code, amqp_bytes_t text)
{
    const unsigned char *t = text.bytes;
    size_t len = text.len > REPLY_TEXT_MAX ? REPLY_TEXT_MAX : text.len;
    int n = snprintf(out, cap, "%u ", code);
    size_t o;

    if (n < 0 || (size_t)n >= cap)
        return;
    o = (size_t)n;
    for (size_t i = 0; t && i < len && o + 1 < cap; i++) {
        unsigned char ch = t[i];
        out[o++] = (ch < 0x20 || ch == 0x7F || ch == '"' || ch == '\\')
                       ? '?'
                       : (char)ch;
    }
    out[o] = '\0';
}

void amqpc_rpc_text(amqp_rpc_reply_t r, char *out, size_t cap)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL: snprintf(out, cap, "ok"); return;
    case AMQP_RESPONSE_NONE: snprintf(out, cap, "no RPC reply"); return;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(out, cap, "%s", amqp_error_string2(r.library_error));
        return;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            const amqp_connection_close_t *m = r.reply.decoded;
            amqpc_reply_text(out, cap, m->reply_code, m->reply_text);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            const amqp_channel_close_t *m = r.reply.decoded;
            amqpc_reply_text(out, cap, m->reply_code, m->reply_text);
        } else {
            snprintf(out, cap, "unexpected %s", amqp_method_name(r.reply.id));
        }
        return;
    }
    snprintf(out, cap, "unknown RPC reply type %d", (int)r.reply_type);
}

rmqs_rc amqpc_rpc_fail(rmqs_error *err, amqp_rpc_reply_t r, const char *fmt,
                       ...)
{
    char what[128], detail[REPLY_TEXT_MAX + 16];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    amqpc_rpc_text(r, detail, sizeof detail);
    return rmqs_fail(err, RMQS_EBROKER, NULL, "%s: %s", what, detail);
}

/* ------------------------------------------------------------------ */
/* Opening                                                             */

static bool is_ip_literal(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, host, buf) == 1 ||
           inet_pton(AF_INET6, host, buf) == 1;
}

/* The socket for the URL's scheme (see DESIGN, TLS). */
static amqp_socket_t *new_socket(const amqpc_t *c, const url *u,
                                 amqp_connection_state_t conn, rmqs_error *err)
{
    amqp_socket_t *s;
    SSL_CTX *ctx;

    if (!u->tls) {
        s = amqp_tcp_socket_new(conn);
        if (!s)
            rmqs_fail(err, RMQS_EBROKER, NULL, "cannot create a TCP socket");
        return s;
    }
    s = amqp_ssl_socket_new(conn);
    if (!s) {
        rmqs_fail(err, RMQS_EBROKER, NULL, "cannot create a TLS socket");
        return NULL;
    }
    amqp_ssl_socket_set_verify_peer(s, 1);
    ctx = amqp_ssl_socket_get_context(s);
    if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
        rmqs_fail(err, RMQS_EBROKER, NULL, "cannot configure TLS");
        return NULL;
    }
    if (is_ip_literal(u->host)) {
        amqp_ssl_socket_set_verify_hostname(s, 0);
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_CTX_get0_param(ctx), u->host) !=
            1) {
            rmqs_fail(err, RMQS_EBROKER, NULL,
                      "cannot set up verification of %s", u->host);
            return NULL;
        }
    } else {
        amqp_ssl_socket_set_verify_hostname(s, 1);
    }
    if (c->ca_file != NULL) {
        if (amqp_ssl_socket_set_cacert(s, c->ca_file) != AMQP_STATUS_OK) {
            rmqs_fail(err, RMQS_EBROKER, NULL, "cannot load the CA file %s",
                      c->ca_file);
            return NULL;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        rmqs_fail(err, RMQS_EBROKER, NULL,
                  "cannot load the system trust store");
        return NULL;
    }
    if (c->cert_file != NULL &&
        amqp_ssl_socket_set_key(s, c->cert_file, c->key_file) !=
            AMQP_STATUS_OK) {
        rmqs_fail(err, RMQS_EBROKER, NULL,
                  "cannot load the client certificate %s / key %s",
                  c->cert_file, c->key_file);
        return NULL;
    }
    return s;
}

static amqp_rpc_reply_t login(const amqpc_t *c, const url *u,
                              amqp_connection_state_t conn)
{
    amqp_table_entry_t caps[2], props[4];
    amqp_table_t props_table;

    caps[0].key = amqp_cstring_bytes("connection.blocked");
    caps[0].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[0].value.value.boolean = 1;
    caps[1].key = amqp_cstring_bytes("consumer_cancel_notify");
    caps[1].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[1].value.value.boolean = 1;
    props[0].key = amqp_cstring_bytes("product");
    props[0].value.kind = AMQP_FIELD_KIND_UTF8;
    props[0].value.value.bytes = amqp_cstring_bytes("rmq-scheduler");
    props[1].key = amqp_cstring_bytes("version");
    props[1].value.kind = AMQP_FIELD_KIND_UTF8;
    props[1].value.value.bytes = amqp_cstring_bytes(RMQS_VERSION);
    props[2].key = amqp_cstring_bytes("connection_name");
    props[2].value.kind = AMQP_FIELD_KIND_UTF8;
    props[2].value.value.bytes = amqp_cstring_bytes(c->name);
    props[3].key = amqp_cstring_bytes("capabilities");
    props[3].value.kind = AMQP_FIELD_KIND_TABLE;
    props[3].value.value.table.num_entries = 2;
    props[3].value.value.table.entries = caps;
    props_table.num_entries = 4;
    props_table.entries = props;
    return amqp_login_with_properties(
        conn, u->vhost, 0, AMQP_DEFAULT_FRAME_SIZE, c->heartbeat_s,
        &props_table, AMQP_SASL_METHOD_PLAIN, u->user, u->password);
}

static void set_user_timeout(amqp_connection_state_t conn)
{
    unsigned int ms = (unsigned int)amqp_get_heartbeat(conn) * 2000u;
    int fd = amqp_get_sockfd(conn);

    if (ms == 0 || fd < 0)
        return;
    if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) != 0)
        log_debug(MOD, "TCP_USER_TIMEOUT not set", "errno=%d", errno);
}

static void read_version(amqpc_t *c)
{
    const amqp_table_t *t = amqp_get_server_properties(c->conn);

    snprintf(c->version, sizeof c->version, "unknown");
    for (int i = 0; t && i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == 7 && memcmp(e->key.bytes, "version", 7) == 0 &&
            (e->value.kind == AMQP_FIELD_KIND_UTF8 ||
             e->value.kind == AMQP_FIELD_KIND_BYTES)) {
            size_t len = e->value.value.bytes.len < sizeof c->version - 1
                             ? e->value.value.bytes.len
                             : sizeof c->version - 1;
            if (len)
                memcpy(c->version, e->value.value.bytes.bytes, len);
            c->version[len] = '\0';
        }
    }
}

rmqs_rc amqpc_open(amqpc_t *c, rmqs_error *err)
{
    const url *u = &c->urls[cur_index(c)];
    amqp_connection_state_t conn;
    amqp_socket_t *sock;
    amqp_rpc_reply_t reply;
    struct timeval tv;
    int res;

    if (c->conn)
        return RMQS_OK;
    if (c->failed) { /* the one that failed stayed current for the logs */
        const char *from = c->urls[cur_index(c)].safe;
        bool lost = c->lost;
        amqpc_next_url(c);
        u = &c->urls[cur_index(c)];
        if (lost)
            log_warn(MOD, "broker lost; moving to the next URL",
                     "connection=\"%s\" lost=%s next=%s", c->name, from,
                     u->safe);
    }
    tv.tv_sec = c->timeout_ms / 1000;
    tv.tv_usec = (c->timeout_ms % 1000) * 1000;
    conn = amqp_new_connection();
    if (!conn) {
        rmqs_fail(err, RMQS_EBROKER, NULL,
                  "cannot create an AMQP connection: out of memory");
        goto fail;
    }
    sock = new_socket(c, u, conn, err);
    if (!sock)
        goto fail;
    res = amqp_socket_open_noblock(sock, u->host, u->port, &tv);
    if (res != AMQP_STATUS_OK) {
        /* errno is not meaningful here (non-blocking connect). */
        rmqs_fail(err, RMQS_EBROKER, NULL, "connect to %s:%d failed: %s",
                  u->host, u->port, amqp_error_string2(res));
        goto fail;
    }
    amqp_set_handshake_timeout(conn, &tv);
    amqp_set_rpc_timeout(conn, &tv);
    reply = login(c, u, conn);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
        amqpc_rpc_fail(err, reply, "login %s on %s:%d",
                       reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION
                           ? "refused"
                           : "failed",
                       u->host, u->port);
        goto fail;
    }
    c->conn = conn;
    c->failed = false;
    set_user_timeout(conn);
    read_version(c);
    return RMQS_OK;

fail:
    if (conn)
        amqp_destroy_connection(conn);
    c->failed = true;
    return RMQS_EBROKER;
}

void amqpc_close(amqpc_t *c, int timeout_ms)
{
    if (!c || !c->conn)
        return;
    if (timeout_ms > 0) {
        struct timeval tv = {.tv_sec = timeout_ms / 1000,
                             .tv_usec = (timeout_ms % 1000) * 1000};
        amqp_set_rpc_timeout(c->conn, &tv);
    }
    /* Bounded by the RPC timeout; the answer does not matter. */
    (void)amqp_connection_close(c->conn, AMQP_REPLY_SUCCESS);
    amqpc_drop(c);
}

void amqpc_lost(amqpc_t *c)
{
    if (!c)
        return;
    amqpc_drop(c);
    if (c->n_urls > 1) {
        c->failed = true;
        c->lost = true;
    }
}

void amqpc_drop(amqpc_t *c)
{
    if (!c || !c->conn)
        return;
    amqp_destroy_connection(c->conn);
    c->conn = NULL;
}
