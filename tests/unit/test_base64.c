/*
 * test_base64.c - the strict base64 codec of body_base64 (base64.c): RFC
 * 4648 vectors, every length round trip, and the non-canonical forms the
 * decoder must refuse.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "base64.h"

struct b64_case {
    const char *raw;
    size_t raw_len;
    const char *enc;
};
#define RAW(s) s, sizeof(s) - 1

Test(base64, vectors)
{
    static const struct b64_case cases[] = {
        /* RFC 4648 section 10 */
        {RAW(""), ""},
        {RAW("f"), "Zg=="},
        {RAW("fo"), "Zm8="},
        {RAW("foo"), "Zm9v"},
        {RAW("foob"), "Zm9vYg=="},
        {RAW("fooba"), "Zm9vYmE="},
        {RAW("foobar"), "Zm9vYmFy"},
        /* both non-letter characters and binary bytes */
        {RAW("\x00\x01\x02\xff"), "AAEC/w=="},
        {RAW("\xfb\xff\xbf"), "+/+/"},
        {RAW("\x00"), "AA=="},
        {RAW("\x00\x00\x00"), "AAAA"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *enc = base64_encode((const unsigned char *)cases[i].raw,
                                  cases[i].raw_len);
        cr_assert_not_null(enc);
        cr_expect_str_eq(enc, cases[i].enc, "case %zu", i);
        free(enc);

        unsigned char *dec = NULL;
        size_t dec_len = 99;
        cr_assert_eq(
            base64_decode(cases[i].enc, strlen(cases[i].enc), &dec, &dec_len),
            RMQS_OK, "%s", cases[i].enc);
        cr_assert_not_null(dec, "%s: non-NULL even when empty", cases[i].enc);
        cr_expect_eq(dec_len, cases[i].raw_len, "%s", cases[i].enc);
        cr_expect_eq(memcmp(dec, cases[i].raw, dec_len), 0, "%s", cases[i].enc);
        free(dec);
    }
}

Test(base64, round_trip_all_lengths)
{
    unsigned char raw[300];
    for (size_t i = 0; i < sizeof raw; i++)
        raw[i] = (unsigned char)(i * 151 + 7);
    for (size_t n = 0; n <= sizeof raw; n++) {
        char *enc = base64_encode(raw, n);
        cr_assert_not_null(enc);
        cr_assert_eq(strlen(enc), (n + 2) / 3 * 4);
        unsigned char *dec;
        size_t dec_len;
        cr_assert_eq(base64_decode(enc, strlen(enc), &dec, &dec_len), RMQS_OK);
        cr_assert_eq(dec_len, n);
        cr_assert_eq(memcmp(dec, raw, n), 0);
        free(dec);
        free(enc);
    }
}

Test(base64, invalid)
{
    static const char *const bad[] = {
        "Zg",    /* unpadded */
        "Zg=",   /* length 3 */
        "Zm9vY", /* length 5 */
        "Z===",  /* too much padding */
        "====",       "=Zg=",
        "Zg=a",                   /* data after padding */
        "Zg==Zg==",               /* padding in the middle */
        "Zm=v",       "Zm9 Yg==", /* whitespace */
        "Zm9vYg==\n", "Zm9vYg=\n",
        "Zm9-", /* base64url alphabet */
        "Zm9_",       "Zm9v\x80YmE",
        "Zh==", /* non-zero bits under the padding (non-canonical) */
        "Zm9=",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char *dec = (unsigned char *)"sentinel";
        size_t dec_len = 99;
        cr_expect_eq(base64_decode(bad[i], strlen(bad[i]), &dec, &dec_len),
                     RMQS_EINVAL, "\"%s\" accepted", bad[i]);
        cr_expect_null(dec, "\"%s\": *out must be NULL on failure", bad[i]);
    }
    /* a NUL inside the given length is just another invalid character */
    unsigned char *dec;
    size_t dec_len;
    cr_expect_eq(base64_decode("Zm9v\0\0\0\0", 8, &dec, &dec_len), RMQS_EINVAL);
}
