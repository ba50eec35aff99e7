/*
 * store_sqlite_dispatch.c - the dispatcher's calls of the SQLite backend:
 * the next due time and the due reads on the read connection (never behind
 * the writer), the claims and outcomes of a bunch (store_record), and
 * recovery at start-up (store_sqlite_core.h; the contract is store.h and
 * store_backend.h).
 *
 * Why a room of its own: these commit relaxed (TX_RELAXED, the sync policy
 * of store_sqlite_schema.c), and the reads run on a connection of their own
 * so a claim never waits for the writer's commit or its fsync; store.c
 * holds what they read in the claimset.
 */
#include "store_sqlite_core.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define MOD "store"

rmqs_rc sq_next_due(store_backend *st, claimset_t *held, bool *any,
                    int64_t *due_at_out)
{
    sqlite3_stmt *s;
    rmqs_rc out = RMQS_OK;
    int rc;

    *any = false;
    /* On the read connection: never behind the writer. Held jobs still
     * look pending there; they are skipped (a few thousand at most). */
    pthread_mutex_lock(&st->rd_mu);
    s = st->rd_next;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const void *id = sqlite3_column_blob(s, 0);
        if (id && sqlite3_column_bytes(s, 0) == JOB_ID_BYTES &&
            claimset_held(held, id))
            continue;
        *any = true;
        *due_at_out = sqlite3_column_int64(s, 1);
        break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        out = sq_fail_on(st->rd_db, rc, "next_due");
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->rd_mu);
    return out;
}

/* Read up to limit candidates (pending, due by due_by_ms, not held) from
 * one snapshot of the read connection into c[] (grown as needed). */
rmqs_rc sq_read_due(store_backend *st, claimset_t *held, int64_t due_by_ms,
                    size_t limit, store_claimed **c, size_t *cap, size_t *n_out)
{
    sqlite3_stmt *s = st->rd_due;
    rmqs_rc out = RMQS_OK;
    size_t n = 0;
    int rc;

    pthread_mutex_lock(&st->rd_mu);
    sqlite3_bind_int64(s, 1, due_by_ms);
    while (n < limit && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const void *id = sqlite3_column_blob(s, COL_ID);
        if (id && sqlite3_column_bytes(s, COL_ID) == JOB_ID_BYTES &&
            claimset_held(held, id))
            continue; /* ours already; the claim is not committed yet */
        if (n == *cap) {
            store_claimed *nc = store_grow(*c, cap, sizeof(**c));
            if (!nc) {
                out = RMQS_ENOMEM;
                break;
            }
            *c = nc;
        }
        out = sq_row_to_job(s, &(*c)[n].job, &(*c)[n].seq);
        if (out != RMQS_OK)
            break;
        n++;
    }
    if (out == RMQS_OK && n < limit && rc != SQLITE_DONE)
        out = sq_fail_on(st->rd_db, rc, "claim_ahead");
    sq_stmt_done(s); /* ends the read transaction: the snapshot goes */
    pthread_mutex_unlock(&st->rd_mu);
    if (out != RMQS_OK) {
        for (size_t i = 0; i < n; i++)
            job_clear(&(*c)[i].job);
        n = 0;
    }
    *n_out = n;
    return out;
}

/* Step one bound settle statement and count what it did: SENT, RELEASE
 * and EXPIRE by sqlite3_changes() (0 or 1), RETRY by its RETURNING status
 * (pending again, or failed at max_attempts; no row if not publishing).
 * SQLITE_OK with s reset, or the failing code with s left for sq_stmt_fail. */
static int settle_one(store_backend *st, sqlite3_stmt *s, stmt_id sid)
{
    int rc;

    if (sid != S_SETTLE_RETRY) {
        int to = sid == S_SETTLE_SENT     ? JOB_SENT
                 : sid == S_SETTLE_EXPIRE ? JOB_CANCELLED
                 : sid == S_SETTLE_FAIL   ? JOB_FAILED
                                          : JOB_PENDING;
        rc = sq_stmt_exec(s);
        if (rc == SQLITE_OK && sqlite3_changes(st->db) > 0)
            store_delta_move(&st->delta, JOB_PUBLISHING, to, 1);
        return rc;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        int status = sqlite3_column_int(s, 0);
        /* RETURNING: the change is complete only at SQLITE_DONE */
        rc = sqlite3_step(s);
        if (rc != SQLITE_DONE)
            return rc;
        if (status >= 0 && status < STORE_N_STATUS)
            store_delta_move(&st->delta, JOB_PUBLISHING, status, 1);
    }
    if (rc != SQLITE_DONE)
        return rc;
    sq_stmt_done(s);
    return SQLITE_OK;
}

rmqs_rc sq_record(store_backend *st,
                  const unsigned char (*claims)[JOB_ID_BYTES], size_t n_claims,
                  const store_outcome *o,
                  const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                  int64_t now_ms)
{
    rmqs_rc out;

    sq_lock(st);
    out = sq_tx_begin(st, TX_RELAXED);
    if (out != RMQS_OK)
        goto unlock;
    for (size_t i = 0; i < n_claims; i++) {
        sqlite3_stmt *s = sq_stmt(st, S_CLAIM_HELD);
        int rc;

        sqlite3_bind_int64(s, 1, now_ms);
        sqlite3_bind_blob(s, 2, claims[i], JOB_ID_BYTES, SQLITE_STATIC);
        rc = sq_stmt_exec(s);
        if (rc != SQLITE_OK) {
            out = sq_stmt_fail(st, s, rc, S_CLAIM_HELD);
            sq_tx_abort(st);
            goto unlock;
        }
        if (sqlite3_changes(st->db) > 0) {
            store_delta_move(&st->delta, JOB_PENDING, JOB_PUBLISHING, 1);
        } else {
            /* only a write behind the store's back can do this: cancel
             * and reschedule refuse a held job */
            char text[JOB_ID_LEN + 1];
            job_id_format(claims[i], text);
            log_warn(MOD, "a job claimed ahead was no longer pending", "id=%s",
                     text);
        }
    }
    for (size_t i = 0; i < n; i++) {
        stmt_id sid = o[i].kind == STORE_OUT_SENT     ? S_SETTLE_SENT
                      : o[i].kind == STORE_OUT_RETRY  ? S_SETTLE_RETRY
                      : o[i].kind == STORE_OUT_EXPIRE ? S_SETTLE_EXPIRE
                      : o[i].kind == STORE_OUT_FAIL   ? S_SETTLE_FAIL
                      : o[i].kind == STORE_OUT_HOLD   ? S_SETTLE_HOLD
                                                      : S_SETTLE_RELEASE;
        sqlite3_stmt *s = sq_stmt(st, sid);
        int rc;

        sqlite3_bind_int64(s, 1, now_ms);
        sqlite3_bind_blob(s, 2, ids[i], JOB_ID_BYTES, SQLITE_STATIC);
        if (sid == S_SETTLE_RETRY) {
            sq_bind_text_or_null(s, 3, o[i].error);
            sqlite3_bind_int64(s, 4, o[i].retry_at);
        } else if (sid == S_SETTLE_EXPIRE || sid == S_SETTLE_FAIL) {
            sq_bind_text_or_null(s, 3, o[i].error);
        } else if (sid == S_SETTLE_SENT) {
            sq_bind_text_or_null(s, 3, o[i].held_by);
            sqlite3_bind_int64(s, 4, o[i].held_ms);
        } else if (sid == S_SETTLE_HOLD) {
            sq_bind_text_or_null(s, 3, o[i].held_by);
            sqlite3_bind_int64(s, 4, o[i].retry_at);
            sqlite3_bind_int64(s, 5, o[i].held_ms);
        }
        /* a job no longer publishing (e.g. recovered meanwhile) is left
         * alone: the UPDATE simply matches no row, and counts nothing */
        rc = settle_one(st, s, sid);
        if (rc != SQLITE_OK) {
            out = sq_stmt_fail(st, s, rc, sid);
            sq_tx_abort(st);
            goto unlock;
        }
    }
    out = sq_tx_commit(st);
unlock:
    pthread_mutex_unlock(&st->mu);
    return out;
}

rmqs_rc sq_recover(store_backend *st, size_t *n_out)
{
    sqlite3_stmt *s;
    rmqs_rc out;
    int rc;

    *n_out = 0;
    sq_lock(st);
    out = sq_tx_begin(st, TX_RELAXED);
    if (out != RMQS_OK)
        goto unlock;
    s = sq_stmt(st, S_RECOVER);
    rc = sq_stmt_exec(s);
    if (rc != SQLITE_OK) {
        out = sq_stmt_fail(st, s, rc, S_RECOVER);
        sq_tx_abort(st);
        goto unlock;
    }
    *n_out = (size_t)sqlite3_changes64(st->db);
    store_delta_move(&st->delta, JOB_PUBLISHING, JOB_PENDING, (int64_t)*n_out);
    out = sq_tx_commit(st);
    if (out != RMQS_OK)
        *n_out = 0;
unlock:
    pthread_mutex_unlock(&st->mu);
    return out;
}
