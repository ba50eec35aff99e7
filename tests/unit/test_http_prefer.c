/*
 * test_http_prefer.c - the "return" preference of a Prefer header (RFC
 * 7240), as POST /schedule reads it (http_prefer.c): list elements,
 * parameters, quoting, case, only the first return= counting, and what
 * cannot be parsed being skipped.
 */
#include <criterion/criterion.h>

#include <stddef.h>

#include "http_prefer.h"

struct prefer_case {
    const char *header;
    http_prefer_return want;
};

Test(http_prefer, return_preference)
{
    static const struct prefer_case cases[] = {
        {NULL, HTTP_RETURN_UNSET},
        {"", HTTP_RETURN_UNSET},
        {"return=minimal", HTTP_RETURN_MINIMAL},
        {"return=representation", HTTP_RETURN_REPRESENTATION},
        {"RETURN=Minimal", HTTP_RETURN_MINIMAL},
        {"return = minimal", HTTP_RETURN_MINIMAL},
        {"return=\"minimal\"", HTTP_RETURN_MINIMAL},
        {"return=\"mini\\mal\"", HTTP_RETURN_MINIMAL},
        {"return=minimal; foo=bar", HTTP_RETURN_MINIMAL},
        {"respond-async, return=minimal", HTTP_RETURN_MINIMAL},
        {"respond-async,return=minimal", HTTP_RETURN_MINIMAL},
        {" , ,return=minimal", HTTP_RETURN_MINIMAL},
        {"wait=10, respond-async; x=\"a,b\", return=minimal",
         HTTP_RETURN_MINIMAL},
        {"handling=lenient; return=minimal",
         HTTP_RETURN_UNSET}, /* a parameter */
        /* only the first return= counts (RFC 7240 section 2) */
        {"return=representation, return=minimal", HTTP_RETURN_REPRESENTATION},
        {"return=minimal, return=representation", HTTP_RETURN_MINIMAL},
        {"return=whatever, return=minimal", HTTP_RETURN_OTHER},
        {"return, return=minimal", HTTP_RETURN_OTHER},
        {"return=minimalist", HTTP_RETURN_OTHER},
        {"returns=minimal", HTTP_RETURN_UNSET},
        {"xreturn=minimal", HTTP_RETURN_UNSET},
        {"return=minimal-ish", HTTP_RETURN_OTHER},
        /* what cannot be parsed is skipped */
        {"\"return=minimal\"", HTTP_RETURN_UNSET},
        {"@@, return=minimal", HTTP_RETURN_MINIMAL},
        {"foo=\"unterminated, return=minimal", HTTP_RETURN_UNSET},
        {"foo=, return=minimal", HTTP_RETURN_MINIMAL},
        {"return=, return=minimal", HTTP_RETURN_MINIMAL},
        {"return=\"minimal", HTTP_RETURN_UNSET},
        {"foo=\"a\\\"b, c\", return=minimal", HTTP_RETURN_MINIMAL},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1, return=minimal",
         HTTP_RETURN_MINIMAL},
        {"return=minimalaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         HTTP_RETURN_OTHER},
        {"returnaaaaaaaaaaaaaaaaaaaaaaaa=minimal", HTTP_RETURN_UNSET},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(http_prefer_return_of(cases[i].header), cases[i].want,
                     "Prefer: %s",
                     cases[i].header ? cases[i].header : "(none)");
}
