/*
 * base64.h - strict standard base64 (RFC 4648 section 4, with padding).
 *
 * A job's binary body travels in the API as "body_base64": decoded when a
 * request is validated (job.c), encoded when a job is written as JSON
 * (job_json.c). One codec serves both sides, so what one accepts the other
 * writes back unchanged. Pure: no state, no I/O.
 */
#ifndef RMQS_BASE64_H
#define RMQS_BASE64_H

#include <stddef.h>

#include "rmqs.h"

/*
 * Decode in[0..len). Strict: every byte string has exactly one encoding
 * (length a multiple of 4, '=' only at the end, unused bits zero), anything
 * else is RMQS_EINVAL. On RMQS_OK *out is malloc'd (non-NULL even when
 * *out_len == 0) and the caller frees it; otherwise *out is NULL.
 * RMQS_ENOMEM if the allocation fails.
 */
rmqs_rc base64_decode(const char *in, size_t len, unsigned char **out,
                      size_t *out_len);

/* The encoding of in[0..len) as a malloc'd NUL-terminated string the caller
 * frees; NULL on ENOMEM. */
char *base64_encode(const unsigned char *in, size_t len);

#endif
