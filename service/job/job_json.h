/*
 * job_json.h - a job as the API answers it: the one serializer.
 *
 * Every answer that carries jobs is written by these functions, as compact
 * JSON text in jansson's exact form (api/openapi.yaml, schema Job): the
 * full representation, the minimal one of "Prefer: return=minimal", the
 * POST /schedule/batch answer and the GET /jobs page. Pure: no I/O, no
 * clock; the request side (validation) is job.h.
 *
 * Ownership: a job_buf owns its text; the functions borrow the jobs.
 */
#ifndef RMQS_JOB_JSON_H
#define RMQS_JOB_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "job.h"
#include "rmqs.h"

/*
 * A growing text buffer. Zero-initialise it. data is malloc'd and
 * NUL-terminated (NULL while nothing was appended); the owner frees it
 * (job_buf_free) or takes it over. After a failed allocation oom stays set,
 * appends do nothing and the text is incomplete: do not use it.
 */
typedef struct job_buf {
    char *data;
    size_t len;
    size_t cap;
    bool oom;
} job_buf;

/* Make room for len + extra bytes; RMQS_ENOMEM (and oom) if that fails.
 * Appending grows the buffer anyway: this only saves reallocations. */
rmqs_rc job_buf_reserve(job_buf *b, size_t extra);
rmqs_rc job_buf_append(job_buf *b, const char *s, size_t n);
void job_buf_free(job_buf *b);

/* Flags of the job_write_* functions. */
#define JOB_WRITE_MINIMAL 0x1u /* only "id", "status" and "deliver_at" */
#define JOB_WRITE_OWN_BODY \
    0x2u /* the job was made by job_from_json in this
                                   process, so a JSON body is the compact
                                   text jansson wrote: copied as it is
                                   rather than parsed and written again */
#define JOB_WRITE_ATTEMPTS \
    0x4u /* also "attempt_errors" (when the job has them: store_get's),    \
            each {"attempt","at","error"} with "at" in RFC 3339: GET       \
            /jobs/{id} */

/*
 * Append the API representation of job to b:
 * {"id","status","source" (then "schedule","fire_at","expires_at" for a
 * run of a recurring schedule),"exchange","routing_key","deliver_at",
 * "next_attempt_at","created_at","updated_at","sent_at","failed_at",
 * "attempts","max_attempts","priority","held_by","held_ms","last_error",
 * ("attempt_errors" with JOB_WRITE_ATTEMPTS), "headers","properties", then
 * "body" (a string or the JSON value) or "body_base64"}, in that order.
 * Times are RFC 3339 UTC with milliseconds; next_attempt_at is null unless
 * pending, sent_at null until sent, failed_at null unless failed. With JOB_WRITE_MINIMAL only
 * {"id":...,"status":...,"deliver_at":...} (the answer to
 * "Prefer: return=minimal"). RMQS_OK or RMQS_ENOMEM.
 */
rmqs_rc job_write_json(job_buf *b, const job_t *job, unsigned flags);

/* Append {"jobs":[job,...]}, each job as job_write_json with flags: the
 * answer to POST /schedule/batch. RMQS_OK or RMQS_ENOMEM. */
rmqs_rc job_write_batch(job_buf *b, const job_t *jobs, size_t n,
                        unsigned flags);

/* Append {"jobs":[job,...],"next":next}, the full form of each job and
 * next as a string (null when NULL): a GET /jobs page. */
rmqs_rc job_write_page(job_buf *b, const job_t *jobs, size_t n,
                       const char *next);

#endif
