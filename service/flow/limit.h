/*
 * limit.h - a flow limit: what PUT /limits/{name} accepted, which jobs it
 * matches and which of its buckets a job falls in.
 *
 * Why a module: a limit is checked against every job the dispatcher
 * claims, so its rules (an exchange or `prefix*`, an AMQP topic pattern,
 * a key per tenant) must be exact and cheap, and they are the same rules
 * whether the limit came from the API, the store or a test. Pure like
 * job.c and schedule.c: no database, socket or clock; every rule is unit
 * tested on its own (tests/unit/test_limit.c). The token buckets are
 * flow.c's; the HTTP side is http_limits.c; the store keeps the canonical
 * spec text (store_limit_*).
 *
 * Ownership: a limit_t owns every pointer inside it (limit_clear). It is
 * immutable once parsed and may be read by several threads.
 */
#ifndef RMQS_LIMIT_H
#define RMQS_LIMIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "rmqs.h"

#define LIMIT_NAME_MAX 200
#define LIMIT_RATE_MAX 1000000.0    /* rate_per_s: (0, 1e6] */
#define LIMIT_BURST_MAX 1000000     /* burst: [1, 1e6]; default 1 */
#define LIMIT_BUCKETS_DEFAULT 10000 /* max_buckets when not given */
#define LIMIT_BUCKETS_MAX 1000000   /* max_buckets: [1, 1e6] */
#define LIMIT_HOLD_MESSAGES_MAX 1000000000LL
#define LIMIT_KEY_VALUE_MAX 255 /* a key value longer is cut here */

/* What a key (a limit's "key", the service's --fair-key) is read from. */
typedef enum flow_key_kind {
    FLOW_KEY_NONE = 0,    /* one bucket for every job */
    FLOW_KEY_HEADER,      /* "header:NAME": the job's header NAME */
    FLOW_KEY_ROUTING_KEY, /* "routing_key" */
    FLOW_KEY_EXCHANGE     /* "exchange" */
} flow_key_kind;

typedef struct flow_key {
    flow_key_kind kind;
    char *header; /* owned; FLOW_KEY_HEADER: the header's name (1-255
                     bytes), else NULL */
} flow_key;

typedef struct limit {
    char *name;           /* owned */
    char *match_exchange; /* owned; NULL: any exchange. Exact, or with
                                 match_exchange_prefix the part before a
                                 trailing '*' ("" then matches every
                                 exchange) */
    bool match_exchange_prefix;
    char *match_routing_key; /* owned; NULL: any. An AMQP topic pattern:
                                 words split by '.', '*' one word, '#' zero
                                 or more */
    double rate_per_s;       /* 0: no rate (a queue hold only) */
    int64_t burst;           /* tokens the bucket holds; 1 if not given */
    flow_key key;            /* kind FLOW_KEY_NONE: one bucket */
    int64_t max_buckets;     /* live buckets at most (keyed limits);
                                 beyond, new keys share one bucket */
    char *hold_queue;        /* owned; NULL: no hold. The queue whose
                                 ready messages hold publishing */
    int64_t hold_messages;   /* hold while the queue has more than this */
} limit_t;

/* Release everything l owns and zero it. Safe on a zeroed limit. */
void limit_clear(limit_t *l);

/* Whether name is 1-200 bytes of [A-Za-z0-9._:-] (as a schedule's). */
bool limit_name_valid(const char *name);

/*
 * Validate a PUT body (parsed; root borrowed) for the limit `name` into
 * *out. The body:
 *   {"match": {"exchange": "orders" | "orders.*"-style "prefix*",
 *              "routing_key": "eu.#"},          (optional, each optional)
 *    "rate_per_s": 500, "burst": 50,            (rate optional, burst
 *                                                 needs a rate)
 *    "key": "header:tenant" | "routing_key" | "exchange",  (optional,
 *                                                 needs a rate)
 *    "max_buckets": 10000,                      (optional, needs a key)
 *    "hold_when_queue_ready_over": {"queue": "q", "messages": 1000}}
 * At least one of rate_per_s and hold_when_queue_ready_over. Unknown
 * members are refused. On success, if spec_out is not NULL it receives
 * the malloc'd canonical spec: compact JSON, sorted keys, defaults filled
 * in (burst, max_buckets when keyed), so the same limit gives the same
 * text. On failure RMQS_EINVAL (or RMQS_ENOMEM) with err's field
 * ("rate_per_s", "match.routing_key", ...) and message, *out zeroed.
 */
rmqs_rc limit_from_json(const char *name, json_t *root, limit_t *out,
                        char **spec_out, rmqs_error *err);

/* As limit_from_json from the body's bytes (must be a JSON object). */
rmqs_rc limit_from_request(const char *name, const char *buf, size_t len,
                           limit_t *out, char **spec_out, rmqs_error *err);

/* A stored spec (canonical text) back into a limit; RMQS_EINVAL if it
 * no longer validates (logged by the caller). */
rmqs_rc limit_from_spec(const char *name, const char *spec, limit_t *out,
                        rmqs_error *err);

/*
 * A PATCH: merge the top-level members of the patch body (a JSON object;
 * a member set to null removes it; "match" and
 * "hold_when_queue_ready_over" are replaced whole) into the stored spec
 * and validate the result as a PUT body. *merged_out (may be NULL) gets
 * the merged canonical spec (malloc'd).
 */
rmqs_rc limit_patch(const char *name, const char *spec, const char *buf,
                    size_t len, limit_t *out, char **merged_out,
                    rmqs_error *err);

/* Whether the AMQP topic pattern matches routing_key (as a topic
 * exchange binding would). */
bool topic_match(const char *pattern, const char *routing_key);

/* Whether the limit applies to a job published to exchange with
 * routing_key. */
bool limit_matches(const limit_t *l, const char *exchange,
                   const char *routing_key);

/* Parse a key spec ("header:NAME", "routing_key", "exchange") into *out
 * (FLOW_KEY_NONE is never the result: the caller omits the key). EINVAL
 * with err->message on anything else. */
rmqs_rc flow_key_parse(const char *text, flow_key *out, rmqs_error *err);
/* The key spec's text ("header:NAME", ...); "" for FLOW_KEY_NONE. */
void flow_key_format(const flow_key *k, char *buf, size_t cap);
void flow_key_clear(flow_key *k);

/*
 * The key's value for job j into buf (NUL-terminated, cut at
 * LIMIT_KEY_VALUE_MAX bytes and at cap - 1): the exchange, the routing
 * key, or the header's value (a string as is, a number or boolean as its
 * JSON text; missing, null, an object or array: ""). Returns its length.
 * FLOW_KEY_NONE: "".
 */
size_t flow_key_value(const flow_key *k, const job_t *j, char *buf, size_t cap);

#endif
