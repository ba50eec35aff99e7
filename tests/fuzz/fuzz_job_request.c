/*
 * fuzz_job_request.c - libFuzzer target for request validation (job.c).
 *
 * The input bytes are an HTTP request body, fed as they are to:
 * - job_from_request() (POST /schedule), at several values of "now"
 *   including the extremes of int64, so the time arithmetic is exercised
 *   where it could overflow; on success job_write_json() (job_json.c);
 * - job_from_json() on each element when the bytes are a JSON array
 *   (POST /schedule/batch);
 * - job_parse_reschedule() (PATCH /jobs/{id});
 * - base64_decode()/base64_encode() (strict: one encoding per byte
 *   string, so decode then encode must give the input back).
 *
 * What must hold, or abort() (a crash for libFuzzer): no sanitizer report
 * and no leak; no body with a raw NUL byte accepted (jansson alone skips
 * one after a number); on failure an error field and message that are
 * valid UTF-8 (they go into the JSON answer), a zeroed job and no
 * canonical text; on success a job within every documented limit, whose
 * API JSON parses back and is exactly what jansson dumps for what it
 * parsed (the compact form the API has always answered in), whether the
 * body is copied (JOB_WRITE_OWN_BODY) or parsed again.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "job.h"
#include "job_json.h"

#define MS_PER_DAY 86400000LL
#define BATCH_ITEMS_MAX 64 /* elements of an array input validated per run */
#define BODY_DEPTH_MAX 32  /* documented nesting limit of a JSON "body" */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const job_limits LIM = {
    .default_max_attempts = 10,
    .max_max_attempts = 1000,
    .max_delay_ms = 36500 * MS_PER_DAY, /* the largest --max-delay-days */
};

static const int64_t NOWS[] = {
    1767225600000LL, /* 2026-01-01T00:00:00Z */
    INT64_MAX - 1,   /* overflow of now + delay */
    INT64_MIN + 1,   /* overflow of deliver_at - now */
};

#define CHECK(cond, what)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "fuzz_job_request: %s:%d: %s (%s)\n", __FILE__, \
                    __LINE__, what, #cond);                                 \
            abort();                                                        \
        }                                                                   \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_object_seed(1); /* the same hash order on every run */
    return 0;
}

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

/* Nesting depth of v (a scalar is 0, [] is 1), counted up to limit + 1. */
static int depth_of(json_t *v, int limit)
{
    int best = 0, d;
    size_t i;
    const char *key;
    json_t *x;

    if (limit < 0)
        return 1;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x) {
            d = depth_of(x, limit - 1);
            if (d > best)
                best = d;
        }
        return best + 1;
    }
    if (json_is_object(v)) {
        json_object_foreach(v, key, x) {
            d = depth_of(x, limit - 1);
            if (d > best)
                best = d;
        }
        return best + 1;
    }
    return 0;
}

/* deliver_at is in the past (however far), or at most the horizon ahead. */
static bool within_horizon(int64_t deliver_at, int64_t now)
{
    int64_t ahead;
    if (deliver_at <= now)
        return true;
    return !__builtin_sub_overflow(deliver_at, now, &ahead) &&
           ahead <= LIM.max_delay_ms;
}

/* job_write_json(job, flags) as a malloc'd string, in jansson's form. */
static char *api_json(const job_t *job, unsigned flags)
{
    job_buf b = {0};
    CHECK(job_write_json(&b, job, flags) == RMQS_OK && b.data != NULL,
          "job_write_json failed on an accepted job");
    json_t *back = json_loads(b.data, 0, NULL);
    CHECK(back != NULL, "the API JSON of a job does not parse back");
    CHECK(json_is_object(back), "the API JSON of a job is not an object");
    char *again = json_dumps(back, JSON_COMPACT);
    CHECK(again != NULL && strcmp(again, b.data) == 0,
          "the API JSON of a job is not jansson's compact form");
    free(again);
    json_decref(back);
    return b.data;
}

/* The API JSON of an accepted job parses back, in jansson's form, the same
 * with the body copied or parsed again; the minimal form too. */
static void check_api_json(job_t *job)
{
    strcpy(job->id, "01890a5d-ac96-774b-bcce-b302099a8057");
    char *full = api_json(job, 0);
    char *own = api_json(job, JOB_WRITE_OWN_BODY);
    CHECK(strcmp(full, own) == 0,
          "a copied JSON body reads unlike one parsed again");
    free(own);
    free(full);
    free(api_json(job, JOB_WRITE_MINIMAL));
}

/* Everything an accepted job promises (job.h, README "Request fields"). */
static void check_accepted(job_t *job, int64_t now)
{
    CHECK(job->id[0] == '\0', "id assigned by validation");
    CHECK(job->status == JOB_PENDING, "status not pending");
    CHECK(job->exchange != NULL && strlen(job->exchange) <= JOB_MAX_SHORTSTR,
          "exchange missing or too long");
    for (const char *p = job->exchange; *p; p++)
        CHECK((unsigned char)*p >= 0x20 && *p != 0x7f,
              "control character in exchange");
    CHECK(job->routing_key != NULL &&
              strlen(job->routing_key) <= JOB_MAX_SHORTSTR,
          "routing_key missing or too long");
    CHECK(job->delay_ms >= 0 && job->delay_ms <= LIM.max_delay_ms,
          "delay_ms out of [0, horizon]");
    CHECK(job->due_at == (job->deliver_at > now ? job->deliver_at : now),
          "due_at is not the later of deliver_at and now");
    CHECK(within_horizon(job->deliver_at, now),
          "deliver_at beyond the horizon");
    CHECK(job->created_at == now && job->updated_at == now, "timestamps");
    CHECK(job->sent_at == -1 && job->attempts == 0 && job->last_error == NULL,
          "fresh job state");
    CHECK(job->max_attempts >= 1 && job->max_attempts <= LIM.max_max_attempts,
          "max_attempts out of range");
    CHECK(job->headers == NULL || (json_is_object(job->headers) &&
                                   json_object_size(job->headers) > 0 &&
                                   json_object_size(job->headers) <= 128),
          "headers not a non-empty object of at most 128");
    CHECK(job->properties == NULL || json_is_object(job->properties),
          "properties not an object");
    CHECK(job->body != NULL || job->body_len == 0, "body length without bytes");
    CHECK(job->body_kind == JOB_BODY_TEXT || job->body_kind == JOB_BODY_JSON ||
              job->body_kind == JOB_BODY_BINARY,
          "body kind");
    if (job->body_kind == JOB_BODY_JSON) {
        json_t *b = json_loadb((const char *)job->body, job->body_len, 0, NULL);
        CHECK(b != NULL, "a JSON body does not parse back");
        CHECK(depth_of(b, BODY_DEPTH_MAX) <= BODY_DEPTH_MAX,
              "a JSON body nested deeper than the limit was accepted");
        json_decref(b);
    }
    check_api_json(job);
}

/* The error goes into a JSON answer: field and message must be UTF-8. */
static void check_utf8(const rmqs_error *err)
{
    json_t *f = json_string(err->field), *m = json_string(err->message);
    CHECK(f != NULL, "error field is not valid UTF-8");
    CHECK(m != NULL, "error message is not valid UTF-8");
    json_decref(f);
    json_decref(m);
}

static void check_rejected(rmqs_rc rc, const rmqs_error *err, const job_t *job,
                           const char *canonical)
{
    CHECK(rc == RMQS_EINVAL || rc == RMQS_ENOMEM, "unexpected error code");
    CHECK(err->message[0] != '\0', "rejected without a message");
    CHECK(memchr(err->field, '\0', sizeof err->field) != NULL,
          "field not terminated");
    check_utf8(err);
    CHECK(all_zero(job, sizeof *job), "rejected but the job is not zeroed");
    CHECK(canonical == NULL, "rejected but canonical text returned");
}

static void fuzz_schedule(const char *buf, size_t len)
{
    for (size_t i = 0; i < sizeof NOWS / sizeof NOWS[0]; i++) {
        job_t job;
        char *canonical = (char *)1;
        rmqs_error err = {{0}, {0}};
        rmqs_rc rc =
            job_from_request(buf, len, &LIM, NOWS[i], &job, &canonical, &err);
        if (rc == RMQS_OK) {
            CHECK(memchr(buf, '\0', len) == NULL,
                  "accepted a body with a NUL byte");
            CHECK(canonical != NULL, "accepted without canonical text");
            json_t *c = json_loads(canonical, 0, NULL);
            CHECK(c != NULL, "canonical text does not parse");
            json_decref(c);
            check_accepted(&job, NOWS[i]);
        } else {
            check_rejected(rc, &err, &job, canonical);
        }
        free(canonical);
        job_clear(&job);
        CHECK(all_zero(&job, sizeof job), "job_clear left something");
    }
}

static void fuzz_batch(const char *buf, size_t len)
{
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
    size_t i;
    json_t *item;

    if (root == NULL)
        return;
    if (json_is_array(root)) {
        json_array_foreach(root, i, item) {
            if (i >= BATCH_ITEMS_MAX)
                break;
            job_t job;
            rmqs_error err = {{0}, {0}};
            rmqs_rc rc = job_from_json(item, &LIM, NOWS[0], &job, NULL, &err);
            if (rc == RMQS_OK)
                check_accepted(&job, NOWS[0]);
            else
                check_rejected(rc, &err, &job, NULL);
            job_clear(&job);
        }
    }
    json_decref(root);
}

static void fuzz_reschedule(const char *buf, size_t len)
{
    for (size_t i = 0; i < sizeof NOWS / sizeof NOWS[0]; i++) {
        int64_t at = 0, delay = 0;
        rmqs_error err = {{0}, {0}};
        rmqs_rc rc =
            job_parse_reschedule(buf, len, &LIM, NOWS[i], &at, &delay, &err);
        if (rc == RMQS_OK) {
            CHECK(memchr(buf, '\0', len) == NULL,
                  "reschedule accepted a NUL byte");
            CHECK(delay >= 0 && delay <= LIM.max_delay_ms, "reschedule delay");
            CHECK(within_horizon(at, NOWS[i]), "reschedule beyond the horizon");
        } else {
            CHECK(err.message[0] != '\0',
                  "reschedule rejected without a message");
            check_utf8(&err);
        }
    }
}

static void fuzz_base64(const char *buf, size_t len)
{
    unsigned char *dec = NULL;
    size_t dlen = 0;

    if (base64_decode(buf, len, &dec, &dlen) == RMQS_OK) {
        CHECK(dec != NULL, "decode gave NULL");
        char *enc = base64_encode(dec, dlen);
        CHECK(enc != NULL && strlen(enc) == len && memcmp(enc, buf, len) == 0,
              "base64 decode then encode does not give the input back");
        free(enc);
    } else {
        CHECK(dec == NULL && dlen == 0, "failed decode left output");
    }
    free(dec);

    char *enc = base64_encode((const unsigned char *)buf, len);
    CHECK(enc != NULL, "encode failed");
    CHECK(base64_decode(enc, strlen(enc), &dec, &dlen) == RMQS_OK,
          "encoded text does not decode");
    CHECK(dlen == len && (len == 0 || memcmp(dec, buf, len) == 0),
          "base64 encode then decode does not give the input back");
    free(dec);
    free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy of exactly size bytes (no NUL after them): ASan flags
     * any read past the length the API was given. */
    char *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL)
        return 0;
    if (size > 0)
        memcpy(buf, data, size);
    fuzz_schedule(buf, size);
    fuzz_batch(buf, size);
    fuzz_reschedule(buf, size);
    fuzz_base64(buf, size);
    free(buf);
    return 0;
}
