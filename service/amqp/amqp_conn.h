/*
 * amqp_conn.h - one AMQP connection layer for the publisher and the ingest.
 *
 * An amqpc_t holds the parsed broker URL(s), the TLS files and the login
 * settings, and at most one live rabbitmq-c connection. It opens that
 * connection the same way for every user: TCP or TLS (peer verified, the
 * host checked as an IP address or a DNS name, TLS 1.2 at least), login
 * with a connection name and the connection.blocked capability, the
 * handshake and RPC timeouts, TCP_USER_TIMEOUT. Channels, consuming and
 * publishing stay with the user, which reads the connection through
 * amqpc_state().
 *
 * Like the connection it wraps, an amqpc_t belongs to one thread.
 *
 * The URL option may name several brokers, separated by commas (a comma
 * followed by amqp:// or amqps://; any other comma belongs to the URL, as
 * in a password). One is current; after a failed amqpc_open() it stays
 * current (so the caller's log names it) and the next amqpc_open() moves
 * on to the next URL: reconnecting tries them in turn. A connection lost
 * after it was open (amqpc_lost) moves on the same way, so the publisher
 * and the ingest leave a node that went away at once instead of trying it
 * again first.
 *
 * Passwords are copied once, used only for the login and wiped on free;
 * amqpc_safe_url() is what logs and error messages show.
 */
#ifndef RMQS_AMQP_CONN_H
#define RMQS_AMQP_CONN_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>

#include "rmqs.h"

typedef struct amqpc amqpc_t;

typedef struct amqpc_options {
    const char *url;       /* amqp[s]://user:pass@host:port/vhost, or several
                              separated by commas (copied) */
    const char *name;      /* connection_name the broker shows (copied) */
    int heartbeat_s;       /* requested heartbeat, 0 (off) to 65535 */
    int timeout_ms;        /* connect, handshake and RPC bound; <= 0: 10 s */
    const char *ca_file;   /* amqps: trusted CAs (PEM); NULL = system store */
    const char *cert_file; /* amqps: client certificate (PEM) or NULL */
    const char *key_file;  /* amqps: its private key (PEM), with cert_file */
} amqpc_options;

/* One URL's parts, for logs and tests; never the password (borrowed). */
typedef struct amqpc_url_parts {
    const char *host; /* without brackets for IPv6 */
    int port;
    const char *vhost; /* decoded; "/" when the URL names none or "" */
    const char *user;
    bool tls; /* amqps:// */
} amqpc_url_parts;

/* Parse the options into a closed connection, or NULL with err:
 * RMQS_EINVAL (field "amqp_url", "heartbeat_s" or "amqp-cert-file") for a
 * bad URL or setting, RMQS_ENOMEM. Never echoes a URL or a password. */
amqpc_t *amqpc_new(const amqpc_options *opt, rmqs_error *err);

/* Drop any connection, wipe the passwords, free. NULL is fine. */
void amqpc_free(amqpc_t *c);

/*
 * Connect and log in (no channel is opened): to the current URL, or to the
 * next one if the last attempt failed. RMQS_OK, or RMQS_EBROKER with err
 * saying why (host and port, never a password); the connection stays
 * closed. A no-op if already open.
 */
rmqs_rc amqpc_open(amqpc_t *c, rmqs_error *err);

/* The live connection (borrowed), or NULL when closed. */
amqp_connection_state_t amqpc_state(const amqpc_t *c);

/* The heartbeat and frame_max the broker granted (0 when closed), and the
 * version it announced ("unknown" if none). */
int amqpc_heartbeat_s(const amqpc_t *c);
int amqpc_frame_max(const amqpc_t *c);
const char *amqpc_broker_version(const amqpc_t *c);

/* Close politely (connection.close, its answer awaited at most timeout_ms,
 * <= 0: the RPC timeout), then free the connection. No-op when closed. */
void amqpc_close(amqpc_t *c, int timeout_ms);

/* Free the connection without a handshake: it is broken or not trusted. */
void amqpc_drop(amqpc_t *c);

/* The connection was lost (socket error, broker's close, heartbeat or
 * confirm timeout, a nack) or the broker could not serve it: drop it like
 * amqpc_drop(), and with several URLs make the next amqpc_open() start
 * with the next one (the lost node is likely down: a cluster moves on),
 * logging which URL was lost and which comes next. */
void amqpc_lost(amqpc_t *c);

/* The URLs: how many, which is current (0-based), move to the next. */
size_t amqpc_url_count(const amqpc_t *c);
size_t amqpc_url_index(const amqpc_t *c);
void amqpc_next_url(amqpc_t *c);

/* The current URL with the password replaced by "***" (borrowed, valid
 * until amqpc_free), and its parts. */
const char *amqpc_safe_url(const amqpc_t *c);
void amqpc_current(const amqpc_t *c, amqpc_url_parts *out);

/* "<code> <text>" of a broker's close or return: text is pool memory,
 * not NUL-terminated; control characters, '"' and '\' become '?' so the
 * result can be quoted in a log line. Cut to fit out. */
void amqpc_reply_text(char *out, size_t cap, unsigned code, amqp_bytes_t text);

/* Why an RPC failed, in words: a library error, or the broker's close
 * ("<code> <text>" as above). */
void amqpc_rpc_text(amqp_rpc_reply_t r, char *out, size_t cap);

/* Fill err with "<what>: <why the RPC failed>" (what is printf-formatted)
 * and return RMQS_EBROKER. */
rmqs_rc amqpc_rpc_fail(rmqs_error *err, amqp_rpc_reply_t r, const char *fmt,
                       ...) __attribute__((format(printf, 3, 4)));

#endif
