/*
 * store_pg.h - what the store's front (store.c) and the unit tests see of
 * the PostgreSQL backend: its ops table (store_pg.c) and, through
 * store_pg_url.h, how a target is recognised as PostgreSQL, the
 * password-free form of a URL for logs, and the error mapping. Its
 * insides are store_pg_core.h.
 *
 * Why apart from store_pg_core.h: each backend defines its own struct
 * store_backend, so the front includes neither backend's insides.
 */
#ifndef RMQS_STORE_PG_H
#define RMQS_STORE_PG_H

#include <stdbool.h>
#include <stddef.h>

#include "store_backend.h"
#include "store_pg_url.h"

extern const store_ops store_pg_ops;

/* Test hook behind store.c's store__claimers (see there). */
int64_t store_pg__claimers(store_backend *b, int64_t *rank);

#endif
