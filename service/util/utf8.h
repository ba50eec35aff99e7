/*
 * utf8.h - the one UTF-8 validator of rmq-scheduler.
 *
 * Why a module of its own: request validation (job.c) and the AMQP ingest
 * (ingest_map.c: delivery text and the --ingest exchange names) both have
 * to tell valid UTF-8 from bytes that are not, and each once carried its own
 * copy of the same decoder. One definition keeps them agreeing with each
 * other and with jansson, which refuses to encode anything this rejects.
 *
 * The rules are RFC 3629's: no overlong forms, no UTF-16 surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence. NUL
 * (U+0000) is a valid character: utf8_valid() takes it, as a JSON string
 * ("\u0000") and an AMQP header value may hold it; utf8_text() is for text
 * that must not (names, AMQP short strings a job carries as strings).
 *
 * Pure: no allocation, no state; s may be NULL only when n is 0.
 */
#ifndef RMQS_UTF8_H
#define RMQS_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length (1 to 4) of the valid character that s[0..n) starts with, 0 if
 * it starts with none (invalid, or cut short by n). n must be > 0. */
size_t utf8_char_len(const void *s, size_t n);

/* Whether s[0..n) is valid UTF-8 (NUL allowed). */
bool utf8_valid(const void *s, size_t n);

/* Whether s[0..n) is valid UTF-8 without any NUL. */
bool utf8_text(const void *s, size_t n);

/* In the NUL-terminated s, replace every byte that is not part of a valid
 * character with '?' (in place; the length does not change). */
void utf8_sanitize(char *s);

#endif
