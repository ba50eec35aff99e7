/*
 * base64.c - strict standard base64 (see base64.h).
 *
 * Why its own code: the decoder must refuse every non-canonical form (RFC
 * 4648 section 3.5: non-zero bits before the padding, '=' inside, missing
 * padding), so that a body has one encoding and a request one idempotency
 * fingerprint; OpenSSL's EVP_DecodeBlock, the codec already linked, skips
 * whitespace and counts padding as zero bytes. tests/unit/test_base64.c
 * and tests/fuzz/fuzz_job_request.c hold it to decode(encode(x)) == x and
 * encode(decode(s)) == s.
 */
#include "base64.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

char *base64_encode(const unsigned char *in, size_t len)
{
    if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
        return NULL;
    size_t olen = (len + 2) / 3 * 4;
    char *out = malloc(olen + 1);
    if (out == NULL)
        return NULL;
    size_t i = 0, o = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v =
            (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

/*
 * Strict: length a multiple of 4, only alphabet characters, '=' only as the
 * last one or two characters, and the unused bits before the padding zero
 * (RFC 4648 section 3.5), so every byte string has exactly one encoding.
 */
rmqs_rc base64_decode(const char *in, size_t len, unsigned char **out,
                      size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (len % 4 != 0 || (in == NULL && len > 0))
        return RMQS_EINVAL;

    size_t pad = 0;
    if (len > 0 && in[len - 1] == '=')
        pad = (len > 1 && in[len - 2] == '=') ? 2 : 1;

    size_t olen = len / 4 * 3 - pad;
    unsigned char *buf = malloc(olen > 0 ? olen : 1);
    if (buf == NULL)
        return RMQS_ENOMEM;

    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        size_t nchars = last ? 4 - pad : 4; /* significant characters */
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            int d = 0;
            if (k < nchars) {
                d = b64_value((unsigned char)in[i + k]);
                if (d < 0)
                    goto invalid; /* includes a '=' in the wrong place */
            }
            v = v << 6 | (uint32_t)d;
        }
        if (nchars == 2 && (v & 0xFFFF) != 0)
            goto invalid;
        if (nchars == 3 && (v & 0xFF) != 0)
            goto invalid;
        buf[o++] = (unsigned char)(v >> 16);
        if (nchars >= 3)
            buf[o++] = (unsigned char)(v >> 8);
        if (nchars == 4)
            buf[o++] = (unsigned char)v;
    }
    *out = buf;
    *out_len = o;
    return RMQS_OK;

invalid:
    free(buf);
    return RMQS_EINVAL;
}
