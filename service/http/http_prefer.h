/*
 * http_prefer.h - the Prefer request header (RFC 7240), as far as the API
 * uses it: "return=minimal" on POST /schedule and /schedule/batch.
 *
 * A parser of header text only, pure (tests/unit/test_http_prefer.c); the
 * HTTP layer reads the header lines and writes Preference-Applied.
 */
#ifndef RMQS_HTTP_PREFER_H
#define RMQS_HTTP_PREFER_H

/* The "return" preference of a Prefer header. */
typedef enum http_prefer_return {
    HTTP_RETURN_UNSET = 0,          /* no return preference */
    HTTP_RETURN_MINIMAL = 1,        /* return=minimal */
    HTTP_RETURN_REPRESENTATION = 2, /* return=representation */
    HTTP_RETURN_OTHER = 3           /* return= a value we do not know */
} http_prefer_return;

/*
 * Read the first "return" preference of one Prefer header value (NULL:
 * none), e.g. "respond-async, return=minimal; x=1". Names and values are
 * compared without regard to case; a value may be quoted. As RFC 7240
 * section 2 says, only the first return= counts, and what cannot be parsed
 * is ignored.
 */
http_prefer_return http_prefer_return_of(const char *prefer);

#endif
