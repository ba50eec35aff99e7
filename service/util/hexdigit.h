/*
 * hexdigit.h - the one reader of a hexadecimal digit.
 *
 * Why a header of its own: job ids (job.c), the escapes of log lines
 * (log.c), id prefixes (store_common.c) and percent-escapes in a
 * PostgreSQL URL (store_pg_url.c) each read hex digits, and each carried its
 * own copy of the same three comparisons. One static inline function, not a
 * .c beside utf8.c and base64.c: it is called per character inside parsing
 * loops, and a header adds no object file to the service, fuzz and bench
 * builds that list their sources.
 *
 * Pure: no state. Callers that accept only the canonical lower case (job
 * ids) check for 'A'..'F' themselves.
 */
#ifndef RMQS_HEXDIGIT_H
#define RMQS_HEXDIGIT_H

/* The value (0 to 15) of the hex digit c, either case; -1 if c is not one. */
static inline int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

#endif
