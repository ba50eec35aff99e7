/*
 * store_sqlite.h - what the store's front (store.c) sees of the SQLite
 * backend: its ops table (store_sqlite.c) and the test hooks behind
 * store.c's store__sql, store__synchronous and store__set_max_pages. Its
 * insides are store_sqlite_core.h.
 */
#ifndef RMQS_STORE_SQLITE_H
#define RMQS_STORE_SQLITE_H

#include <stdint.h>

#include "store_backend.h"

/* The backend's table for store.c. */
extern const store_ops store_sqlite_ops;

/* Test hooks behind store.c's store__sql, store__synchronous and
 * store__set_max_pages (see there). */
const char *store_sqlite__sql(const char *name);
int store_sqlite__synchronous(store_backend *st);
rmqs_rc store_sqlite__set_max_pages(store_backend *st, int64_t pages,
                                    int64_t *applied);

#endif
