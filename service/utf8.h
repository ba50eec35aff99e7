/*
 * utf8.h - the UTF-8 rules of the API (RFC 3629), as jansson applies them.
 *
 * Request strings are checked with them (job.c) and job strings are
 * written with them (job_json.c): a string is valid exactly when jansson
 * would accept it, so what the service writes always parses back. No
 * overlong forms, no surrogates, nothing above U+10FFFF. Pure.
 */
#ifndef RMQS_UTF8_H
#define RMQS_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length (1 to 4) of the valid UTF-8 sequence at s[0..n), 0 if there is
 * none there. n must be at least 1. */
size_t utf8_seq_len(const unsigned char *s, size_t n);

/* Whether s[0..len) is valid UTF-8 (as jansson's utf8_check_string). */
bool utf8_valid(const char *s, size_t len);

/* Replace, in place, each byte of the NUL-terminated s that is not part of
 * a valid sequence with '?'. */
void utf8_sanitize(char *s);

#endif
