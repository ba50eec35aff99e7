/*
 * utf8.c - RFC 3629 UTF-8 validation (see utf8.h).
 *
 * A character is decoded from its lead byte: 0x00-0x7F stands alone,
 * 0xC2-0xDF opens two bytes (0xC0/0xC1 could only start overlong forms),
 * 0xE0-0xEF three, 0xF0-0xF4 four (0xF5 and up would pass U+10FFFF); every
 * following byte must be a continuation (10xxxxxx). The decoded value then
 * rules out the overlong three- and four-byte forms, the surrogates and
 * anything above U+10FFFF.
 */
#include "utf8.h"

#include <stdint.h>
#include <string.h>

size_t utf8_char_len(const void *p, size_t n)
{
    const unsigned char *s = p;
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

bool utf8_valid(const void *p, size_t n)
{
    const unsigned char *s = p;

    for (size_t i = 0; i < n;) {
        size_t k = utf8_char_len(s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

bool utf8_text(const void *s, size_t n)
{
    return (n == 0 || memchr(s, '\0', n) == NULL) && utf8_valid(s, n);
}

void utf8_sanitize(char *s)
{
    size_t n = strlen(s);

    for (size_t i = 0; i < n;) {
        size_t k = utf8_char_len(s + i, n - i);
        if (k == 0)
            s[i++] = '?';
        else
            i += k;
    }
}
