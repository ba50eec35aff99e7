/*
 * job.h - the job: what a client asked to deliver, when, and where it is now.
 *
 * This module is pure: it turns request bodies (JSON bytes) into validated
 * jobs. It touches no database, socket or clock (the caller passes "now"),
 * so every rule here is unit tested in isolation (tests/unit/test_job.c).
 * A job as the JSON the API answers with is job_json.h.
 *
 * Ownership: a job_t owns every pointer inside it. job_clear() releases
 * them and leaves a zeroed job; job_t values are moved between modules by
 * struct copy followed by memset of the source, never shared.
 */
#ifndef RMQS_JOB_H
#define RMQS_JOB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rmqs.h"

#define JOB_ID_LEN 36        /* canonical UUID text, without NUL */
#define JOB_ID_BYTES 16      /* binary UUID as stored */
#define JOB_MAX_SHORTSTR 255 /* AMQP short string limit (routing key, names) */

typedef enum job_status {
    JOB_PENDING = 0,    /* waiting for due_at */
    JOB_PUBLISHING = 1, /* claimed by the dispatcher, in flight to the broker */
    JOB_SENT = 2,       /* the broker confirmed it (terminal) */
    JOB_FAILED = 3,     /* max_attempts exhausted (terminal) */
    JOB_CANCELLED = 4   /* cancelled by a client before publishing (terminal) */
} job_status;

typedef enum job_body_kind {
    JOB_BODY_TEXT = 0,  /* "body" was a JSON string: its UTF-8 bytes are sent */
    JOB_BODY_JSON = 1,  /* "body" was an object/array: sent as compact JSON */
    JOB_BODY_BINARY = 2 /* "body_base64": the decoded bytes are sent */
} job_body_kind;

typedef enum job_source {
    JOB_SOURCE_HTTP = 0,    /* POST /schedule or /schedule/batch */
    JOB_SOURCE_AMQP = 1,    /* a message to an ingest exchange (amqp_ingest) */
    JOB_SOURCE_SCHEDULE = 2 /* a run of a recurring schedule (scheduler) */
} job_source;

typedef struct job {
    char id[JOB_ID_LEN + 1]; /* UUIDv7 text; "" until assigned */
    job_status status;
    job_source source;
    char *exchange;      /* owned; "" is the default exchange */
    char *routing_key;   /* owned; <= 255 bytes */
    int64_t deliver_at;  /* ms since the Unix epoch (UTC): requested time */
    int64_t due_at;      /* ms: when the dispatcher next tries it; the
                                 later of deliver_at and acceptance (or
                                 reschedule) until a failed attempt backs off */
    int64_t delay_ms;    /* requested delay (deliver_at - creation, >= 0),
                                 published negated as x-delay */
    int64_t created_at;  /* ms */
    int64_t updated_at;  /* ms */
    int64_t sent_at;     /* ms; -1 until sent */
    int64_t lease_until; /* ms, database clock: until when this instance's
                                 claim holds (a store shared by instances); 0
                                 if the claim has no lease (SQLite) */
    int attempts;        /* publish attempts that failed or are in flight */
    int max_attempts;    /* >= 1 */
    char *last_error;    /* owned; NULL if none */
    json_t *headers;     /* owned reference; object or NULL */
    json_t *properties;  /* owned reference; object or NULL */
    job_body_kind body_kind;
    unsigned char *body; /* owned; the bytes to publish (may be NULL if
                                 body_len == 0) */
    size_t body_len;
    /* Runs of a recurring schedule (source JOB_SOURCE_SCHEDULE); the
     * stores keep them for every job: */
    char *schedule;     /* owned; the schedule's name, NULL for other
                                 jobs */
    int64_t fire_at;    /* ms: the fire time this run is for (with
                                 schedule, its key); -1 for other jobs */
    int64_t expires_at; /* ms: a job claimed after this is not
                                 published but settled STORE_OUT_EXPIRE
                                 (cancelled); 0: never */
    /* Flow control (issue 23; flow/flow.h): */
    int priority;       /* 0-9 (default 0): of jobs due at the same time,
                                 or held by a limit, the higher goes first */
    int64_t claim_rank; /* the order of jobs due at the same ms, lowest
                                 first: -priority * 2^32 + the job's rank
                                 among its --fair-key's jobs due then
                                 (flow/fair.c); set at insert */
    char *held_by;      /* owned; the limit that last held it back (with
                                 status pending: holds it now), or NULL */
    int64_t held_ms;    /* how long limits have held it back in all: its
                                 due_at moved this much later */
    /* Failed-job triage (issue 25): */
    int64_t failed_at;      /* ms: when its attempts ran out (status
                                 failed); 0 otherwise */
    json_t *attempt_errors; /* owned reference, or NULL: the last
                                 JOB_ATTEMPT_ERRORS_MAX failed attempts,
                                 oldest first, an array of {"attempt": n,
                                 "at": ms, "error": text}; filled by
                                 store_get only (never by lists) */
} job_t;

/* Failed attempts a job keeps the error of, and the most characters of
 * each (the stores cut them: store.h). */
#define JOB_ATTEMPT_ERRORS_MAX 10
#define JOB_ATTEMPT_ERROR_CHARS 512

#define JOB_PRIORITY_MAX 9

/* Limits and defaults the validation applies; from the configuration. */
typedef struct job_limits {
    int default_max_attempts; /* used when the request has no max_attempts */
    int max_max_attempts;     /* upper bound accepted for max_attempts */
    int64_t max_delay_ms;     /* horizon: deliver_at - now beyond this is 400 */
} job_limits;

/* Release everything the job owns and zero it. Safe on a zeroed job. */
void job_clear(job_t *job);

const char *job_status_name(job_status s);
/* Parse "pending" etc. Returns RMQS_OK or RMQS_EINVAL. */
rmqs_rc job_status_parse(const char *s, job_status *out);

/* Generate a fresh UUIDv7 (time-ordered) id from now_ms and the kernel's
 * random source. Returns RMQS_ESYS if no randomness is available. */
rmqs_rc job_id_generate(int64_t now_ms, char out[JOB_ID_LEN + 1]);
/* Text <-> the 16 bytes stored in the database. Parse accepts only the
 * canonical lowercase 8-4-4-4-12 form; returns RMQS_EINVAL otherwise. */
rmqs_rc job_id_parse(const char *text, unsigned char out[JOB_ID_BYTES]);
void job_id_format(const unsigned char in[JOB_ID_BYTES],
                   char out[JOB_ID_LEN + 1]);

/*
 * Validate a POST /schedule body and fill *out (status pending, created_at =
 * updated_at = now_ms, due_at = the later of deliver_at and now_ms, sent_at
 * = -1, attempts = 0; id left empty). On success, if canonical_out is not
 * NULL it receives a malloc'd canonical form of the request (sorted keys,
 * compact) that two equal requests share: the idempotency fingerprint. On
 * failure returns RMQS_EINVAL (or RMQS_ENOMEM), fills err with field and
 * message, and leaves *out zeroed.
 */
rmqs_rc job_from_request(const char *buf, size_t len, const job_limits *lim,
                         int64_t now_ms, job_t *out, char **canonical_out,
                         rmqs_error *err);

/*
 * As job_from_request, for a request already parsed (root borrowed): one
 * element of a POST /schedule/batch array. A non-object gives RMQS_EINVAL.
 */
rmqs_rc job_from_json(json_t *root, const job_limits *lim, int64_t now_ms,
                      job_t *out, char **canonical_out, rmqs_error *err);

/*
 * Validate a PATCH /jobs/{id} body: exactly one of deliver_at / delay_ms.
 * Fills the new deliver_at and the delay it represents (>= 0).
 */
rmqs_rc job_parse_reschedule(const char *buf, size_t len, const job_limits *lim,
                             int64_t now_ms, int64_t *deliver_at_out,
                             int64_t *delay_ms_out, rmqs_error *err);

/*
 * Validate a POST /jobs/{id}/retry body: empty (len 0), {} (due now:
 * deliver_at now_ms, delay 0), or an object as job_parse_reschedule.
 */
rmqs_rc job_parse_retry(const char *buf, size_t len, const job_limits *lim,
                        int64_t now_ms, int64_t *deliver_at_out,
                        int64_t *delay_ms_out, rmqs_error *err);

#endif
