/*
 * utf8.c - UTF-8 validation (see utf8.h).
 *
 * One decoder of sequence lengths, used by the validity check and by the
 * sanitizer that makes parser messages safe to quote in a JSON answer.
 */
#include "utf8.h"

#include <stdint.h>
#include <string.h>

/* Length of the valid UTF-8 sequence (RFC 3629) at s[0..n), 0 if none. */
size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        len = 2;
        cp = s[0] & 0x1Fu;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        len = 3;
        cp = s[0] & 0x0Fu;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4;
        cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* Replace each byte of s that is not part of valid UTF-8 with '?'. */
void utf8_sanitize(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len((const unsigned char *)s + i, n - i);
        if (k == 0)
            s[i++] = '?';
        else
            i += k;
    }
}

bool utf8_valid(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq_len((const unsigned char *)s + i, len - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}
