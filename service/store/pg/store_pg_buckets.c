/*
 * store_pg_buckets.c - the limits' token buckets shared by every instance
 * on one database (store.h's store_buckets_update; the arithmetic is
 * flow/flow.c's).
 *
 * Why rows: a limit's rate must hold for the sum of the instances, and an
 * instance that dies must not take its share with it. Each bucket is a row
 * of limit_buckets (0005_flow.sql) with GCRA's time (tat_us), whose
 * arithmetic gives every job its slot. A claim's buckets are locked in
 * one transaction on the feeder's connection (after its claim committed):
 * created if new, locked in (limit, key) order so that two instances
 * never wait for each other in a circle, read, decided on by the caller's
 * callback, written back. Two instances deciding on the same bucket take
 * turns: the second sees the first's slots. A held job keeps its slot in
 * the store (its due time); what a dead instance had granted but not
 * published comes back with its lease and takes a new slot; nothing of the
 * bucket is lost with it.
 *
 * Rows idle for a minute (their state is that of a new bucket by then) and
 * rows of limits that no longer exist are deleted, at most once a minute,
 * in the same transaction.
 */
#include "store_pg_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define MOD "store"

#define IDLE_US 60000000LL /* a bucket idle this long is deleted */
#define CLEAN_EVERY_US IDLE_US

/* Make the missing rows (full buckets), then lock them all in order and
 * read them. $1 limits, $2 keys, $3 the new bucket's value. */
static const char lock_sql[] =
    "WITH want AS (SELECT l, k FROM unnest($1::text[], $2::text[]) AS "
    "w(l, k)), made AS (INSERT INTO limit_buckets (limit_name, key, tat_us) "
    "SELECT l, k, $3::bigint FROM want ORDER BY l, k "
    "ON CONFLICT DO NOTHING) "
    "SELECT 1";
static const char read_sql[] =
    "SELECT limit_name, key, tat_us FROM limit_buckets WHERE "
    "(limit_name, key) IN (SELECT l, k FROM unnest($1::text[], $2::text[]) "
    "AS w(l, k)) ORDER BY limit_name, key FOR UPDATE";
static const char write_sql[] =
    "UPDATE limit_buckets b SET tat_us = w.t FROM "
    "unnest($1::text[], $2::text[], $3::bigint[]) AS "
    "w(l, k, t) WHERE b.limit_name = w.l AND b.key = w.k";
static const char clean_sql[] =
    "DELETE FROM limit_buckets WHERE tat_us < $1::bigint "
    "OR limit_name NOT IN (SELECT name FROM limits)";

/* The text[] literal of b[0..n)'s limits (key false) or keys. */
static char *names(const store_bucket *b, size_t n, bool key)
{
    const char **v = malloc((n ? n : 1) * sizeof(*v));
    char *s;

    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = key ? b[i].key : b[i].limit;
    s = pg_text_array(v, n);
    free(v);
    return s;
}

/* The bigint[] literal of b[0..n)'s tat_us. */
static char *tats_of(const store_bucket *b, size_t n)
{
    int64_t *v = malloc((n ? n : 1) * sizeof(*v));
    char *s;

    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = b[i].tat_us;
    s = pg_int_array(v, n);
    free(v);
    return s;
}

/* The row for (limit, key) among b[0..n), or n. */
static size_t find(const store_bucket *b, size_t n, const char *limit,
                   const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(b[i].limit, limit) == 0 && strcmp(b[i].key, key) == 0)
            return i;
    return n;
}

rmqs_rc pg_buckets_update(store_backend *b, store_bucket *bk, size_t n,
                          int64_t now_us, store_bucket_fn fn, void *cls)
{
    pg_conn *pc = &b->feed;
    char *limits = names(bk, n, false), *keys = names(bk, n, true);
    char *tats = NULL, fresh[24], idle[24];
    const char *vals[3] = {limits, keys, pg_i64(fresh, STORE_BUCKET_NEW)};
    PGresult *res = NULL;
    rmqs_rc rc;

    for (size_t i = 0; i < n; i++)
        bk[i].tat_us = STORE_BUCKET_NEW;
    if (limits == NULL || keys == NULL) {
        free(limits);
        free(keys);
        return RMQS_ENOMEM;
    }
    rc = pg_use(pc);
    if (rc == RMQS_OK)
        rc = pg_tx_begin(b, pc);
    if (rc != RMQS_OK)
        goto done;
    PQclear(pg_exec(pc, "buckets_make", lock_sql, 3, vals, NULL, NULL, &rc));
    if (rc == RMQS_OK)
        res = pg_exec(pc, "buckets_lock", read_sql, 2, vals, NULL, NULL, &rc);
    for (int r = 0; rc == RMQS_OK && r < PQntuples(res); r++) {
        size_t i = find(bk, n, PQgetvalue(res, r, 0), PQgetvalue(res, r, 1));
        if (i < n) {
            bk[i].tat_us = pg_int(res, r, 2);
        }
    }
    PQclear(res);
    if (rc != RMQS_OK) {
        pg_tx_abort(pc);
        goto done;
    }
    fn(cls, bk, n);
    tats = tats_of(bk, n);
    if (tats == NULL) {
        pg_tx_abort(pc);
        rc = RMQS_ENOMEM;
        goto done;
    }
    vals[2] = tats;
    PQclear(pg_exec(pc, "buckets_write", write_sql, 3, vals, NULL, NULL, &rc));
    if (rc == RMQS_OK && now_us - b->buckets_cleaned_us >= CLEAN_EVERY_US) {
        const char *cv[1] = {pg_i64(idle, now_us - IDLE_US)};
        PQclear(
            pg_exec(pc, "buckets_clean", clean_sql, 1, cv, NULL, NULL, &rc));
        b->buckets_cleaned_us = now_us;
    }
    if (rc == RMQS_OK)
        rc = pg_tx_commit(b, pc);
    else
        pg_tx_abort(pc);
done:
    pg_done(pc);
    free(limits);
    free(keys);
    free(tats);
    return rc;
}
