/*
 * test_utf8.c - the UTF-8 rules of the API (utf8.c): what jansson accepts
 * is valid, nothing else; the sanitizer keeps valid text and replaces each
 * stray byte with '?'.
 */
#include <criterion/criterion.h>

#include <string.h>

#include "utf8.h"

struct utf8_case {
    const char *s;
    size_t len;
    bool valid;
};
#define S(x) x, sizeof(x) - 1

Test(utf8, valid_is_what_jansson_accepts)
{
    static const struct utf8_case cases[] = {
        {S(""), true},
        {S("plain ascii"), true},
        {S("\x00"), true},                 /* NUL is a character */
        {S("caf\xc3\xa9"), true},          /* U+00E9 */
        {S("\xe2\x82\xac"), true},         /* U+20AC */
        {S("\xf0\x9f\x98\x80"), true},     /* U+1F600 */
        {S("\xf4\x8f\xbf\xbf"), true},     /* U+10FFFF, the last */
        {S("\xed\x9f\xbf"), true},         /* U+D7FF, before the surrogates */
        {S("\xc3"), false},                /* truncated */
        {S("\xe2\x82"), false},
        {S("\xf0\x9f\x98"), false},
        {S("\x80"), false},                /* a continuation byte alone */
        {S("\xc0\xaf"), false},            /* overlong '/' */
        {S("\xc1\xbf"), false},
        {S("\xe0\x80\xaf"), false},        /* overlong, 3 bytes */
        {S("\xf0\x80\x80\xaf"), false},    /* overlong, 4 bytes */
        {S("\xed\xa0\x80"), false},        /* U+D800, a surrogate */
        {S("\xed\xbf\xbf"), false},        /* U+DFFF */
        {S("\xf4\x90\x80\x80"), false},    /* U+110000 */
        {S("\xf5\x80\x80\x80"), false},
        {S("\xff"), false},
        {S("ok\xc3("), false},             /* a lead byte, then ASCII */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(utf8_valid(cases[i].s, cases[i].len), cases[i].valid,
                     "case %zu", i);
}

Test(utf8, sequence_lengths)
{
    cr_expect_eq(utf8_seq_len((const unsigned char *)"a", 1), 1);
    cr_expect_eq(utf8_seq_len((const unsigned char *)"\xc3\xa9x", 3), 2);
    cr_expect_eq(utf8_seq_len((const unsigned char *)"\xe2\x82\xac", 3), 3);
    cr_expect_eq(utf8_seq_len((const unsigned char *)"\xf0\x9f\x98\x80", 4), 4);
    /* a sequence longer than what is left is not one */
    cr_expect_eq(utf8_seq_len((const unsigned char *)"\xf0\x9f\x98\x80", 3), 0);
    cr_expect_eq(utf8_seq_len((const unsigned char *)"\xbf", 1), 0);
}

Test(utf8, sanitize_replaces_each_stray_byte)
{
    char s[] = "ok \xc3\xa9 \xff\xfe end \xe2\x82";
    utf8_sanitize(s);
    cr_expect_str_eq(s, "ok \xc3\xa9 ?? end ??");
    cr_expect(utf8_valid(s, strlen(s)));
}
