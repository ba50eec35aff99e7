/*
 * test_utf8.c - service/util/utf8.c, the one UTF-8 validator (job.c and the
 * ingest use it): RFC 3629's boundaries one by one (overlongs, surrogates,
 * beyond U+10FFFF, truncated sequences, stray continuation bytes), NUL as
 * each caller needs it, and the '?' replacement job.c applies to parser
 * messages. Where it applies, the verdict is checked against jansson's own
 * (json_stringn), which refuses to encode what is not valid UTF-8: the
 * service's answers go through jansson, so the two must agree.
 */
#include <criterion/criterion.h>

#include <jansson.h>
#include <string.h>

#include "utf8.h"

typedef struct sample {
    const char *what;
    const char *s;
    size_t n;
    bool valid;
} sample;

#define S(what, lit, valid)               \
    {                                     \
        what, lit, sizeof(lit) - 1, valid \
    }

static const sample samples[] = {
    S("empty", "", true),
    S("ASCII", "order.created", true),
    S("2 bytes: U+0080, the first", "\xc2\x80", true),
    S("2 bytes: U+07FF, the last", "\xdf\xbf", true),
    S("3 bytes: U+0800, the first", "\xe0\xa0\x80", true),
    S("3 bytes: U+D7FF, below the surrogates", "\xed\x9f\xbf", true),
    S("3 bytes: U+E000, above the surrogates", "\xee\x80\x80", true),
    S("3 bytes: U+FFFF", "\xef\xbf\xbf", true),
    S("4 bytes: U+10000, the first", "\xf0\x90\x80\x80", true),
    S("4 bytes: U+10FFFF, the last", "\xf4\x8f\xbf\xbf", true),
    S("mixed text", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", true),

    S("overlong '/' in 2 bytes (C0)", "\xc0\xaf", false),
    S("overlong U+007F in 2 bytes (C1)", "\xc1\xbf", false),
    S("overlong U+07FF in 3 bytes", "\xe0\x9f\xbf", false),
    S("overlong NUL in 3 bytes", "\xe0\x80\x80", false),
    S("overlong U+FFFF in 4 bytes", "\xf0\x8f\xbf\xbf", false),
    S("surrogate U+D800, the first", "\xed\xa0\x80", false),
    S("surrogate U+DFFF, the last", "\xed\xbf\xbf", false),
    S("surrogate pair as CESU-8", "\xed\xa0\xbd\xed\xb8\x80", false),
    S("U+110000, past the last", "\xf4\x90\x80\x80", false),
    S("lead F5 (would be past U+10FFFF)", "\xf5\x80\x80\x80", false),
    S("lead FF", "\xff", false),
    S("lone continuation byte", "\x80", false),
    S("continuation after ASCII", "a\xbf", false),
    S("2-byte sequence cut short", "\xc3", false),
    S("3-byte sequence cut short", "\xe2\x82", false),
    S("4-byte sequence cut short", "\xf0\x9f\x98", false),
    S("cut short before ASCII", "\xe2\x82z", false),
    S("valid text then a cut sequence", "ok \xc3", false),
    S("5-byte form (F8)", "\xf8\x88\x80\x80\x80", false),
};

Test(utf8, rfc3629_boundaries_as_jansson_sees_them)
{
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        const sample *c = &samples[i];
        json_t *j = json_stringn(c->s, c->n);

        cr_expect_eq(utf8_valid(c->s, c->n), c->valid, "%s", c->what);
        cr_expect_eq(utf8_text(c->s, c->n), c->valid, "%s (text)", c->what);
        cr_expect_eq(j != NULL, c->valid, "%s: jansson disagrees", c->what);
        json_decref(j);
    }
}

Test(utf8, char_len_of_each_form)
{
    cr_expect_eq(utf8_char_len("a", 1), 1);
    cr_expect_eq(utf8_char_len("\0", 1), 1);
    cr_expect_eq(utf8_char_len("\xc3\xa9x", 3), 2);
    cr_expect_eq(utf8_char_len("\xe2\x82\xac", 3), 3);
    cr_expect_eq(utf8_char_len("\xf0\x9f\x98\x80", 4), 4);
    /* n bounds the read: a character that does not fit is none */
    cr_expect_eq(utf8_char_len("\xe2\x82\xac", 2), 0);
    cr_expect_eq(utf8_char_len("\xed\xa0\x80", 3), 0);
    cr_expect_eq(utf8_char_len("\xc0\x80", 2), 0);
    cr_expect_eq(utf8_char_len("\x80", 1), 0);
}

Test(utf8, nul_is_a_character_but_not_text)
{
    /* JSON strings ("\u0000") and AMQP header values may hold NUL ... */
    cr_expect(utf8_valid("a\0b", 3));
    cr_expect(utf8_valid("\0", 1));
    cr_expect(utf8_valid("caf\xc3\xa9\0", 6));
    /* ... names and the AMQP short strings a job keeps as text may not */
    cr_expect_not(utf8_text("a\0b", 3));
    cr_expect_not(utf8_text("\0", 1));
    cr_expect_not(utf8_text("caf\xc3\xa9\0", 6));
    cr_expect(utf8_text("caf\xc3\xa9", 5));
    /* a NUL does not hide what follows it */
    cr_expect_not(utf8_valid("a\0\xff", 3));
    /* NULL is fine when there is nothing to read */
    cr_expect(utf8_valid(NULL, 0));
    cr_expect(utf8_text(NULL, 0));
}

Test(utf8, sanitize_replaces_each_bad_byte)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"caf\xc3\xa9", "caf\xc3\xa9"},              /* valid: kept */
        {"near '\"\\u00e\xc3'", "near '\"\\u00e?'"}, /* cut by jansson */
        {"\xff\xfe", "??"},
        {"\xe2\x82", "??"},          /* lead and continuation */
        {"a\xed\xa0\x80z", "a???z"}, /* a surrogate, byte by byte */
        {"\xc0\xaf/", "?"
                      "?/"}, /* (split: "??/" is a trigraph) */
        {"\xf0\x9f\x98\x80\x80", "\xf0\x9f\x98\x80?"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[64];

        snprintf(buf, sizeof buf, "%s", cases[i].in);
        utf8_sanitize(buf);
        cr_expect_str_eq(buf, cases[i].out, "case %zu", i);
        cr_expect(utf8_valid(buf, strlen(buf)), "case %zu", i);
    }
}
