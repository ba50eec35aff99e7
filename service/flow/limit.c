/*
 * limit.c - a flow limit's rules (see limit.h): what PUT and PATCH
 * /limits/{name} accept, the canonical spec the store keeps, which jobs a
 * limit matches and which of its buckets a job falls in.
 *
 * Why it exists: the same rules hold whether a limit comes from the API,
 * from the store at start-up or from a test, and the dispatcher checks
 * every job it claims against them, so they live in one pure module
 * (jansson only: no clock, database or socket), unit tested on its own
 * (tests/unit/test_limit.c). The HTTP side only moves rows and maps codes
 * (http_limits.c).
 *
 * How a body is checked: parsed once with jansson (duplicate keys and NUL
 * bytes refused: reqparse.c), then in a fixed order: unknown members,
 * match (exchange, routing_key), rate_per_s, hold_when_queue_ready_over,
 * that one of those two is there, then what needs a rate (burst, key) and
 * what needs a key (max_buckets). The first fault is the answer, with its
 * member as the error's field ("match.routing_key").
 *
 * The canonical spec is built from the parsed limit, not copied from the
 * body: compact JSON with sorted keys, the defaults filled in (burst 1;
 * max_buckets 10000 when keyed), an empty match left out, a whole rate
 * written as an integer (500 and 500.0 are one rate). The same limit
 * written two ways is therefore one text, which the store compares to
 * tell "the same again" (nothing changes) from a change.
 *
 * A PATCH merges top-level members into the stored spec (null removes
 * one; match and hold_when_queue_ready_over are replaced whole) and
 * checks the result as a PUT body. Since the spec carries its defaults,
 * removing rate_per_s also removes a burst at its default (1), and
 * removing key a max_buckets at its default (10000), unless the patch
 * gives them: else {"rate_per_s": null} would fail on a burst the client
 * never wrote. A burst or max_buckets the client chose stays, and then
 * fails as it would in a PUT.
 *
 * Topic patterns are matched as RabbitMQ's topic exchange matches a
 * binding key (rabbit_db_topic_exchange's split_topic_key and trie walk):
 * the empty string has no word, any other is split at every '.' into
 * words that may be empty ("a..b" has an empty middle word, "a." an empty
 * last one); '*' takes exactly one word, '#' zero or more, any other word
 * the same bytes (case matters). The matcher
 * walks both word by word and, on a mismatch, lets the last '#' seen take
 * one more word (as a glob matcher backtracks on its last '*'): no
 * allocation, at most patterns words x key words steps.
 */
#include "limit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqparse.h"

#define HOLD "hold_when_queue_ready_over"
#define HEADER_PREFIX "header:"
#define HEADER_PREFIX_LEN (sizeof HEADER_PREFIX - 1)

static const char *const k_members[] = {"match", "rate_per_s",  "burst",
                                        "key",   "max_buckets", HOLD};
#define N_MEMBERS (sizeof k_members / sizeof k_members[0])

void flow_key_clear(flow_key *k)
{
    if (k == NULL)
        return;
    free(k->header);
    memset(k, 0, sizeof *k);
}

void limit_clear(limit_t *l)
{
    if (l == NULL)
        return;
    free(l->name);
    free(l->match_exchange);
    free(l->match_routing_key);
    flow_key_clear(&l->key);
    free(l->hold_queue);
    memset(l, 0, sizeof *l);
}

bool limit_name_valid(const char *name)
{
    return rp_name_valid(name, LIMIT_NAME_MAX);
}

/* ------------------------------------------------------------------------ */
/* keys                                                                     */

rmqs_rc flow_key_parse(const char *text, flow_key *out, rmqs_error *err)
{
    const char *name;
    size_t n;

    memset(out, 0, sizeof *out);
    if (text != NULL && strcmp(text, "routing_key") == 0) {
        out->kind = FLOW_KEY_ROUTING_KEY;
        return RMQS_OK;
    }
    if (text != NULL && strcmp(text, "exchange") == 0) {
        out->kind = FLOW_KEY_EXCHANGE;
        return RMQS_OK;
    }
    if (text == NULL || strncmp(text, HEADER_PREFIX, HEADER_PREFIX_LEN) != 0)
        return rmqs_fail(err, RMQS_EINVAL, "key",
                         "key: \"header:NAME\", \"routing_key\" or "
                         "\"exchange\"");
    name = text + HEADER_PREFIX_LEN;
    n = strlen(name);
    if (n < 1 || n > RP_SHORTSTR_MAX || rp_has_control(name, n))
        return rmqs_fail(err, RMQS_EINVAL, "key",
                         "key: header:NAME, NAME 1 to %d bytes without "
                         "control characters",
                         RP_SHORTSTR_MAX);
    out->header = strdup(name);
    if (out->header == NULL)
        return rp_fail_nomem(err);
    out->kind = FLOW_KEY_HEADER;
    return RMQS_OK;
}

void flow_key_format(const flow_key *k, char *buf, size_t cap)
{
    if (cap == 0)
        return;
    switch (k != NULL ? k->kind : FLOW_KEY_NONE) {
    case FLOW_KEY_HEADER:
        snprintf(buf, cap, HEADER_PREFIX "%s", k->header ? k->header : "");
        break;
    case FLOW_KEY_ROUTING_KEY: snprintf(buf, cap, "routing_key"); break;
    case FLOW_KEY_EXCHANGE: snprintf(buf, cap, "exchange"); break;
    default: buf[0] = '\0';
    }
}

/* A header's value as key text: a string as is, a number or boolean as
 * its JSON text (in num), anything else "". */
static const char *header_text(json_t *v, char *num, size_t cap, size_t *len)
{
    size_t n;

    *len = 0;
    if (json_is_string(v)) {
        *len = json_string_length(v);
        return json_string_value(v);
    }
    if (json_is_boolean(v)) {
        *len = json_is_true(v) ? 4 : 5;
        return json_is_true(v) ? "true" : "false";
    }
    if (!json_is_number(v))
        return "";
    n = json_dumpb(v, num, cap, JSON_ENCODE_ANY);
    if (n == 0 || n > cap)
        return "";
    *len = n;
    return num;
}

size_t flow_key_value(const flow_key *k, const job_t *j, char *buf, size_t cap)
{
    char num[64];
    const char *s = "";
    size_t n = 0;

    if (cap == 0)
        return 0;
    if (k != NULL && j != NULL) {
        switch (k->kind) {
        case FLOW_KEY_EXCHANGE:
            s = j->exchange != NULL ? j->exchange : "";
            n = strlen(s);
            break;
        case FLOW_KEY_ROUTING_KEY:
            s = j->routing_key != NULL ? j->routing_key : "";
            n = strlen(s);
            break;
        case FLOW_KEY_HEADER:
            s = header_text(json_object_get(j->headers, k->header), num,
                            sizeof num, &n);
            break;
        default: break;
        }
    }
    if (n > LIMIT_KEY_VALUE_MAX)
        n = LIMIT_KEY_VALUE_MAX;
    if (n > cap - 1)
        n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return n;
}

/* ------------------------------------------------------------------------ */
/* matching                                                                 */

/* The end of the word of s (len bytes) that starts at o (<= len): the
 * next '.' or len. */
static size_t word_end(const char *s, size_t len, size_t o)
{
    const char *dot = memchr(s + o, '.', len - o);
    return dot != NULL ? (size_t)(dot - s) : len;
}

static bool is_word(const char *s, size_t from, size_t to, char c)
{
    return to - from == 1 && s[from] == c;
}

/* Word positions are offsets of a word's first byte; len + 1 means no
 * word is left (so "" starts there: it has no word). */
bool topic_match(const char *pattern, const char *routing_key)
{
    const char *p = pattern != NULL ? pattern : "";
    const char *k = routing_key != NULL ? routing_key : "";
    size_t plen = strlen(p), klen = strlen(k);
    size_t pi = plen == 0, kj = klen == 0, hash_p = SIZE_MAX, hash_k = 0;

    while (kj <= klen) {
        if (pi <= plen) {
            size_t pe = word_end(p, plen, pi), ke = word_end(k, klen, kj);
            if (is_word(p, pi, pe, '#')) { /* zero words first */
                hash_p = pi;
                hash_k = kj;
                pi = pe + 1;
                continue;
            }
            if (is_word(p, pi, pe, '*') ||
                (pe - pi == ke - kj && memcmp(p + pi, k + kj, pe - pi) == 0)) {
                pi = pe + 1;
                kj = ke + 1;
                continue;
            }
        }
        if (hash_p == SIZE_MAX)
            return false;
        /* the last '#' takes one more word, and the rest is tried again */
        hash_k = word_end(k, klen, hash_k) + 1;
        kj = hash_k;
        pi = word_end(p, plen, hash_p) + 1;
    }
    while (pi <= plen) { /* what is left of the pattern must be '#'s */
        size_t pe = word_end(p, plen, pi);
        if (!is_word(p, pi, pe, '#'))
            return false;
        pi = pe + 1;
    }
    return true;
}

bool limit_matches(const limit_t *l, const char *exchange,
                   const char *routing_key)
{
    const char *ex = exchange != NULL ? exchange : "";

    if (l->match_exchange != NULL) {
        if (l->match_exchange_prefix
                ? strncmp(ex, l->match_exchange, strlen(l->match_exchange)) != 0
                : strcmp(ex, l->match_exchange) != 0)
            return false;
    }
    return l->match_routing_key == NULL ||
           topic_match(l->match_routing_key, routing_key);
}

/* ------------------------------------------------------------------------ */
/* validation                                                               */

/* Whether every word of the topic pattern p (len bytes) that holds a '*'
 * or '#' is that character alone. */
static bool topic_pattern_valid(const char *p, size_t len)
{
    size_t start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i < len && p[i] != '.')
            continue;
        for (size_t c = start; c < i; c++)
            if ((p[c] == '*' || p[c] == '#') && i - start != 1)
                return false;
        start = i + 1;
    }
    return true;
}

static rmqs_rc parse_match(json_t *v, limit_t *l, rmqs_error *err)
{
    static const char *const allowed[] = {"exchange", "routing_key"};
    const char *ex, *rk, *star;
    json_t *rkv;
    size_t n;
    rmqs_rc rc;

    if (v == NULL)
        return RMQS_OK;
    rc = rp_object(v, "match", "{\"exchange\", \"routing_key\"}", allowed, 2,
                   err);
    if (rc == RMQS_OK)
        rc = rp_short_string(json_object_get(v, "exchange"), "match.exchange",
                             false, true, &ex, err);
    rkv = json_object_get(v, "routing_key");
    if (rc == RMQS_OK)
        rc = rp_short_string(rkv, "match.routing_key", false, false, &rk, err);
    if (rc != RMQS_OK)
        return rc;
    if (ex != NULL) {
        n = strlen(ex);
        star = strchr(ex, '*');
        if (star != NULL && star != ex + n - 1)
            return rmqs_fail(err, RMQS_EINVAL, "match.exchange",
                             "match.exchange: '*' only at the end (a prefix: "
                             "\"orders.*\")");
        l->match_exchange_prefix = star != NULL;
        l->match_exchange = strndup(ex, star != NULL ? n - 1 : n);
        if (l->match_exchange == NULL)
            return rp_fail_nomem(err);
    }
    if (rk != NULL) {
        n = json_string_length(rkv);
        if (memchr(rk, '\0', n) != NULL)
            return rmqs_fail(err, RMQS_EINVAL, "match.routing_key",
                             "match.routing_key: must not contain NUL");
        if (!topic_pattern_valid(rk, n))
            return rmqs_fail(
                err, RMQS_EINVAL, "match.routing_key",
                "match.routing_key: a topic pattern; a word (between "
                "dots) with '*' or '#' must be that character "
                "alone");
        l->match_routing_key = strdup(rk);
        if (l->match_routing_key == NULL)
            return rp_fail_nomem(err);
    }
    return RMQS_OK;
}

/* An integer member v in [lo, hi] into *out. */
static rmqs_rc int_member(json_t *v, const char *field, int64_t lo, int64_t hi,
                          int64_t *out, rmqs_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo ||
        json_integer_value(v) > hi)
        return rmqs_fail(err, RMQS_EINVAL, field,
                         "%s: an integer from %lld to %lld", field,
                         (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return RMQS_OK;
}

static rmqs_rc parse_hold(json_t *v, limit_t *l, rmqs_error *err)
{
    static const char *const allowed[] = {"queue", "messages"};
    const char *q;
    json_t *m;
    rmqs_rc rc;

    if (v == NULL)
        return RMQS_OK;
    rc = rp_object(v, HOLD, "{\"queue\", \"messages\"}", allowed, 2, err);
    if (rc == RMQS_OK)
        rc = rp_short_string(json_object_get(v, "queue"), HOLD ".queue", true,
                             true, &q, err);
    if (rc != RMQS_OK)
        return rc;
    if (q[0] == '\0')
        return rmqs_fail(err, RMQS_EINVAL, HOLD ".queue",
                         HOLD ".queue: must not be empty");
    m = json_object_get(v, "messages");
    if (m == NULL)
        return rmqs_fail(err, RMQS_EINVAL, HOLD ".messages",
                         HOLD ".messages: required");
    rc = int_member(m, HOLD ".messages", 0, LIMIT_HOLD_MESSAGES_MAX,
                    &l->hold_messages, err);
    if (rc != RMQS_OK)
        return rc;
    l->hold_queue = strdup(q);
    return l->hold_queue != NULL ? RMQS_OK : rp_fail_nomem(err);
}

/* burst, key and max_buckets: what needs a rate, and what needs a key. */
static rmqs_rc parse_rate_extras(json_t *root, limit_t *l, rmqs_error *err)
{
    json_t *burst = json_object_get(root, "burst");
    json_t *key = json_object_get(root, "key");
    json_t *buckets = json_object_get(root, "max_buckets");
    rmqs_rc rc;

    if (l->rate_per_s <= 0 && (burst != NULL || key != NULL))
        return rmqs_fail(err, RMQS_EINVAL, burst != NULL ? "burst" : "key",
                         "%s: only with rate_per_s",
                         burst != NULL ? "burst" : "key");
    l->burst = 1;
    if (burst != NULL) {
        rc = int_member(burst, "burst", 1, LIMIT_BURST_MAX, &l->burst, err);
        if (rc != RMQS_OK)
            return rc;
    }
    if (key != NULL) {
        if (!json_is_string(key) ||
            strlen(json_string_value(key)) != json_string_length(key))
            return rmqs_fail(err, RMQS_EINVAL, "key",
                             "key: \"header:NAME\", \"routing_key\" or "
                             "\"exchange\"");
        rc = flow_key_parse(json_string_value(key), &l->key, err);
        if (rc != RMQS_OK)
            return rc;
    }
    if (buckets != NULL && key == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "max_buckets",
                         "max_buckets: only with key");
    if (key != NULL)
        l->max_buckets = LIMIT_BUCKETS_DEFAULT;
    if (buckets != NULL)
        return int_member(buckets, "max_buckets", 1, LIMIT_BUCKETS_MAX,
                          &l->max_buckets, err);
    return RMQS_OK;
}

/* The canonical spec of l as a JSON object (limit.c's file comment), NULL
 * when out of memory. */
static json_t *spec_json(const limit_t *l)
{
    json_t *o = json_object(), *m = NULL;
    bool ok = o != NULL;
    char key[HEADER_PREFIX_LEN + RP_SHORTSTR_MAX + 1];

    if (ok && (l->match_exchange != NULL || l->match_routing_key != NULL)) {
        m = json_object();
        ok = json_object_set_new(o, "match", m) == 0;
        if (ok && l->match_exchange != NULL)
            ok = json_object_set_new(
                     m, "exchange",
                     json_sprintf("%s%s", l->match_exchange,
                                  l->match_exchange_prefix ? "*" : "")) == 0;
        if (ok && l->match_routing_key != NULL)
            ok = json_object_set_new(m, "routing_key",
                                     json_string(l->match_routing_key)) == 0;
    }
    if (ok && l->rate_per_s > 0) {
        ok = json_object_set_new(o, "rate_per_s",
                                 (double)(json_int_t)l->rate_per_s ==
                                         l->rate_per_s
                                     ? json_integer((json_int_t)l->rate_per_s)
                                     : json_real(l->rate_per_s)) == 0 &&
             json_object_set_new(o, "burst", json_integer(l->burst)) == 0;
        if (ok && l->key.kind != FLOW_KEY_NONE) {
            flow_key_format(&l->key, key, sizeof key);
            ok = json_object_set_new(o, "key", json_string(key)) == 0 &&
                 json_object_set_new(o, "max_buckets",
                                     json_integer(l->max_buckets)) == 0;
        }
    }
    if (ok && l->hold_queue != NULL)
        ok = json_object_set_new(o, HOLD,
                                 json_pack("{s:s, s:I}", "queue", l->hold_queue,
                                           "messages",
                                           (json_int_t)l->hold_messages)) == 0;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

rmqs_rc limit_from_json(const char *name, json_t *root, limit_t *out,
                        char **spec_out, rmqs_error *err)
{
    limit_t l = {0};
    json_t *v, *spec;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (spec_out != NULL)
        *spec_out = NULL;
    if (out == NULL)
        return rmqs_fail(err, RMQS_EINVAL, "", "internal: missing argument");
    if (!limit_name_valid(name))
        return rmqs_fail(err, RMQS_EINVAL, "name",
                         "name: 1 to %d characters of A-Z a-z 0-9 . _ : -",
                         LIMIT_NAME_MAX);
    if (!json_is_object(root))
        return rmqs_fail(err, RMQS_EINVAL, "",
                         "request body must be a JSON object");
    rc = rp_known_keys(root, "", k_members, N_MEMBERS, err);
    if (rc != RMQS_OK)
        return rc;

    rc = parse_match(json_object_get(root, "match"), &l, err);
    if (rc != RMQS_OK)
        goto out;
    v = json_object_get(root, "rate_per_s");
    if (v != NULL) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) ||
            json_number_value(v) > LIMIT_RATE_MAX) {
            rc = rmqs_fail(err, RMQS_EINVAL, "rate_per_s",
                           "rate_per_s: a number above 0, at most %.0f",
                           LIMIT_RATE_MAX);
            goto out;
        }
        l.rate_per_s = json_number_value(v);
    }
    rc = parse_hold(json_object_get(root, HOLD), &l, err);
    if (rc != RMQS_OK)
        goto out;
    if (l.rate_per_s <= 0 && l.hold_queue == NULL) {
        rc = rmqs_fail(err, RMQS_EINVAL, "rate_per_s",
                       "one of rate_per_s or " HOLD " is required");
        goto out;
    }
    rc = parse_rate_extras(root, &l, err);
    if (rc != RMQS_OK)
        goto out;

    l.name = strdup(name);
    if (l.name == NULL) {
        rc = rp_fail_nomem(err);
        goto out;
    }
    if (spec_out != NULL) {
        spec = spec_json(&l);
        *spec_out = spec != NULL
                        ? json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT)
                        : NULL;
        json_decref(spec);
        if (*spec_out == NULL) {
            rc = rp_fail_nomem(err);
            goto out;
        }
    }
    *out = l;
    return RMQS_OK;
out:
    limit_clear(&l);
    return rc;
}

rmqs_rc limit_from_request(const char *name, const char *buf, size_t len,
                           limit_t *out, char **spec_out, rmqs_error *err)
{
    json_t *root;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (spec_out != NULL)
        *spec_out = NULL;
    rc = rp_parse_object(buf, len, &root, err);
    if (rc != RMQS_OK)
        return rc;
    rc = limit_from_json(name, root, out, spec_out, err);
    json_decref(root);
    return rc;
}

rmqs_rc limit_from_spec(const char *name, const char *spec, limit_t *out,
                        rmqs_error *err)
{
    return limit_from_request(name, spec, spec != NULL ? strlen(spec) : 0, out,
                              NULL, err);
}

/* In merged: member goes when the patch removed what it depends on
 * (removed, a member the patch set to null), the patch does not give it
 * and it holds its default def (filled in by the canonical spec). */
static void drop_default(json_t *merged, json_t *patch, const char *removed,
                         const char *member, json_int_t def)
{
    json_t *v = json_object_get(merged, member);

    if (json_is_null(json_object_get(patch, removed)) &&
        json_object_get(patch, member) == NULL && json_is_integer(v) &&
        json_integer_value(v) == def)
        json_object_del(merged, member);
}

rmqs_rc limit_patch(const char *name, const char *spec, const char *buf,
                    size_t len, limit_t *out, char **merged_out,
                    rmqs_error *err)
{
    json_t *patch = NULL, *merged = NULL;
    rmqs_rc rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (merged_out != NULL)
        *merged_out = NULL;
    rc = rp_merge_patch(spec, buf, len, &patch, &merged, err);
    /* a member the limit cannot have is refused, also as null */
    if (rc == RMQS_OK)
        rc = rp_known_keys(patch, "", k_members, N_MEMBERS, err);
    if (rc == RMQS_OK) {
        drop_default(merged, patch, "rate_per_s", "burst", 1);
        drop_default(merged, patch, "key", "max_buckets",
                     LIMIT_BUCKETS_DEFAULT);
        rc = limit_from_json(name, merged, out, merged_out, err);
    }
    json_decref(patch);
    json_decref(merged);
    return rc;
}
