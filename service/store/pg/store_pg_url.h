/*
 * store_pg_url.h - the pure helpers of the PostgreSQL backend
 * (store_pg_url.c): URLs, their secrets, and SQLSTATE -> rmqs_rc. Seen by
 * the store's front (through store_pg.h) and by every file of store/pg/.
 */
#ifndef RMQS_STORE_PG_URL_H
#define RMQS_STORE_PG_URL_H

#include <stdbool.h>
#include <stddef.h>

#include "rmqs.h"

/* Whether target is a postgres:// or postgresql:// URL. */
bool store_pg_is_url(const char *target);

/* url without its secrets, into buf of len bytes (truncated, always
 * NUL-terminated): safe to log. The password of user:password@ is dropped,
 * and the value of every parameter that libpq calls a password field
 * (password, sslpassword, however encoded) or does not know is "***". */
void store_pg_safe_url(const char *url, char *buf, size_t len);

/* NULL when libpq reads url's user part as we do; otherwise why not (an
 * unencoded '@' or '/' in the password, which libpq would take for the
 * host and quote in its errors): the store refuses such a URL. */
const char *store_pg_url_problem(const char *url);

/* The first line of msg (a libpq message) into buf (len bytes, truncated,
 * NUL-terminated), with every occurrence of url's passwords replaced by
 * "***": libpq quotes the connection string in some of its errors. */
void store_pg_scrub(const char *url, const char *msg, char *buf, size_t len);

/* The service's code for a PostgreSQL SQLSTATE (five characters; NULL or
 * empty: the connection failed without one): 53100 disk full and 53400
 * (configured limit) -> RMQS_EFULL; 23505 unique violation ->
 * RMQS_ECONFLICT; other class 23 and class 22 (the row itself is invalid)
 * -> RMQS_EINVAL; 53200 out of memory -> RMQS_ENOMEM; everything else
 * (connection lost 08, read-only 25006, shutdown 57P0x, ...) -> RMQS_EDB. */
rmqs_rc store_pg_map_sqlstate(const char *sqlstate);

#endif
