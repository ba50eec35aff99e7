/*
 * store_pg.h - what the store's front (store.c) and the unit tests see of
 * the PostgreSQL backend: its ops table, how a target is recognised as
 * PostgreSQL, the password-free form of a URL for logs, and the error
 * mapping. Its insides are store_pg_impl.h.
 *
 * Why apart from store_pg_impl.h: each backend defines its own struct
 * store_backend, so the front includes neither backend's insides.
 */
#ifndef RMQS_STORE_PG_H
#define RMQS_STORE_PG_H

#include <stdbool.h>
#include <stddef.h>

#include "store_backend.h"

extern const store_ops store_pg_ops;

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

/* The SQL text of the claim, the statement of read_due (store_pg_dispatch.c):
 * test_store_pg_dispatch.c checks its plan. */
extern const char pg_claim_sql[];

#endif
