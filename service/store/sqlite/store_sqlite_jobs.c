/*
 * store_sqlite_jobs.c - the clients' calls of the SQLite backend: insert (one
 * group commit of requests, each all-or-nothing in a savepoint, with its
 * idempotency key), get, and the one update path of a reschedule or a
 * cancel (store_sqlite_core.h; the contract is store.h and store_backend.h).
 *
 * Why a room of its own: these are the calls an HTTP request or the ingest
 * makes, durable (TX_DURABLE: fsynced on a FULL store) and answered to a
 * client; the dispatcher's relaxed calls are in store_sqlite_dispatch.c.
 */
#include "store_sqlite_core.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define MOD "store"

/* ------------------------------------------------------------------------ */
/* Insert and read                                                          */

/* Inside the caller's transaction: insert the job (store_sqlite_core.h). */
rmqs_rc sq_insert_job(store_backend *st, stmt_id sid, const job_t *job,
                      const unsigned char id[JOB_ID_BYTES], int64_t *seq_out,
                      bool *inserted)
{
    sqlite3_stmt *s = sq_stmt(st, sid);
    char *headers = NULL;
    char *props = NULL;
    rmqs_rc out;
    int rc;

    out = store_json_text(job->headers, &headers);
    if (out == RMQS_OK)
        out = store_json_text(job->properties, &props);
    if (out != RMQS_OK)
        goto done;

    sqlite3_bind_blob(s, 1, id, JOB_ID_BYTES, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, (int)job->status);
    sqlite3_bind_text(s, 3, job->exchange ? job->exchange : "", -1,
                      SQLITE_STATIC);
    sqlite3_bind_text(s, 4, job->routing_key ? job->routing_key : "", -1,
                      SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, job->deliver_at);
    sqlite3_bind_int64(s, 6, job->due_at);
    sqlite3_bind_int64(s, 7, job->delay_ms);
    sqlite3_bind_int64(s, 8, job->created_at);
    sqlite3_bind_int64(s, 9, job->updated_at);
    if (job->sent_at >= 0)
        sqlite3_bind_int64(s, 10, job->sent_at);
    else
        sqlite3_bind_null(s, 10);
    sqlite3_bind_int(s, 11, job->attempts);
    sqlite3_bind_int(s, 12, job->max_attempts);
    sq_bind_text_or_null(s, 13, job->last_error);
    sq_bind_text_or_null(s, 14, headers);
    sq_bind_text_or_null(s, 15, props);
    sqlite3_bind_int(s, 16, (int)job->body_kind);
    if (job->body_len > 0)
        rc =
            sqlite3_bind_blob64(s, 17, job->body, job->body_len, SQLITE_STATIC);
    else
        rc = sqlite3_bind_zeroblob(s, 17, 0);
    if (rc != SQLITE_OK) {
        out = rc == SQLITE_TOOBIG ? RMQS_EINVAL : sq_fail(st, rc, "bind_body");
        sq_stmt_done(s);
        goto done;
    }
    sqlite3_bind_int(s, 18, (int)job->source);
    sq_bind_text_or_null(s, 19, store_job_message_id(job));
    /* a schedule's run: its name and fire time; NULL for other jobs
     * (whatever fire_at a zeroed job carries) */
    sq_bind_text_or_null(s, 20, job->schedule);
    if (job->schedule != NULL)
        sqlite3_bind_int64(s, 21, job->fire_at);
    else
        sqlite3_bind_null(s, 21);
    if (job->expires_at > 0)
        sqlite3_bind_int64(s, 22, job->expires_at);
    else
        sqlite3_bind_null(s, 22);
    sqlite3_bind_int(s, 23, job->priority);
    sqlite3_bind_int64(s, 24, job->claim_rank);

    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        /* a duplicate job id is the caller's conflict, not a broken db */
        if (rc == SQLITE_CONSTRAINT_UNIQUE ||
            rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
            log_warn(MOD, "duplicate job id", "id=%s", job->id);
            out = RMQS_ECONFLICT;
            sq_stmt_done(s);
        } else if (rc == SQLITE_CONSTRAINT_CHECK ||
                   rc == SQLITE_CONSTRAINT_NOTNULL) {
            /* status, body_kind or max_attempts out of range */
            log_warn(MOD, "job rejected by the schema", "id=%s detail=\"%s\"",
                     job->id, sqlite3_errmsg(st->db));
            out = RMQS_EINVAL;
            sq_stmt_done(s);
        } else {
            out = sq_stmt_fail(st, s, rc, sid);
        }
        goto done;
    }
    if (inserted)
        *inserted = sqlite3_changes(st->db) > 0;
    *seq_out = sqlite3_last_insert_rowid(st->db);
    sq_stmt_done(s);
done:
    free(headers);
    free(props);
    return out;
}

/* Inside the caller's transaction: look the key up. RMQS_ENOTFOUND if the
 * key is new; RMQS_OK with *existed (and *existing loaded) if it holds the
 * same request; RMQS_ECONFLICT if it holds another one. */
static rmqs_rc idem_lookup(store_backend *st, const char *key,
                           const char *request, bool *existed, job_t *existing)
{
    sqlite3_stmt *s = sq_stmt(st, S_IDEM_LOOKUP);
    rmqs_rc out = RMQS_OK;
    const char *stored;
    int rc;

    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        sq_stmt_done(s);
        return RMQS_ENOTFOUND;
    }
    if (rc != SQLITE_ROW)
        return sq_stmt_fail(st, s, rc, S_IDEM_LOOKUP);
    stored = (const char *)sqlite3_column_text(s, COL_COUNT);
    if (!stored || strcmp(stored, request) != 0) {
        out = RMQS_ECONFLICT;
    } else {
        if (existing)
            out = sq_row_to_job(s, existing, NULL);
        if (out == RMQS_OK && existed)
            *existed = true;
    }
    sq_stmt_done(s);
    return out;
}

/* Run one of the savepoint statements; RMQS_OK or the mapped failure. */
static rmqs_rc sp_exec(store_backend *st, stmt_id id)
{
    sqlite3_stmt *s = sq_stmt(st, id);
    int rc = sq_stmt_exec(s);

    return rc == SQLITE_OK ? RMQS_OK : sq_stmt_fail(st, s, rc, id);
}

/* Inside the caller's transaction: record key for the job at seq. */
static rmqs_rc idem_insert(store_backend *st, const char *key, int64_t seq,
                           const char *request)
{
    sqlite3_stmt *s = sq_stmt(st, S_IDEM_INSERT);
    int rc;

    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, seq);
    sqlite3_bind_text(s, 3, request, -1, SQLITE_STATIC);
    rc = sq_stmt_exec(s);
    return rc == SQLITE_OK ? RMQS_OK : sq_stmt_fail(st, s, rc, S_IDEM_INSERT);
}

/* Inside the caller's transaction: one all-or-nothing request. Each keyed
 * job is looked up first (store_types.h): known with its request, it is
 * answered from the earlier job and not inserted again. */
static rmqs_rc insert_req(store_backend *st, store_insert_req *r)
{
    unsigned char id[JOB_ID_BYTES];
    /* this request's rows by status: joins st->delta only on RELEASE, so a
     * request undone by ROLLBACK TO leaves the counts alone */
    store_delta added = {{0}};
    int64_t seq = 0;
    rmqs_rc out;

    /* One job without a key is one INSERT, which SQLite already undoes by
     * itself when it fails: no savepoint (two statements fewer per POST). */
    bool sp = r->n > 1 || r->idem_keys != NULL;

    if (!store_insert_req_valid(r))
        return RMQS_EINVAL;
    if (sp && (out = sp_exec(st, S_SAVEPOINT)) != RMQS_OK)
        return out;
    for (size_t i = 0; i < r->n; i++) {
        const char *key = r->idem_keys ? r->idem_keys[i] : NULL;

        r->failed_index = i;
        if (key != NULL) {
            out = idem_lookup(st, key, r->idem_requests[i], &r->existed[i],
                              &r->existing[i]);
            if (out == RMQS_OK) { /* the same job again */
                r->nexisted++;
                continue;
            }
            if (out != RMQS_ENOTFOUND) /* a conflict, or a failure */
                goto undo;
        }
        out = job_id_parse(r->jobs[i].id, id) == RMQS_OK
                  ? sq_insert_job(st, S_INSERT, &r->jobs[i], id, &seq, NULL)
                  : RMQS_EINVAL;
        if (out == RMQS_OK && key != NULL)
            out = idem_insert(st, key, seq, r->idem_requests[i]);
        if (out != RMQS_OK)
            goto undo;
        store_delta_add(&added, (int)r->jobs[i].status, 1); /* CHECK held */
    }
    r->failed_index = 0;
    out = sp ? sp_exec(st, S_RELEASE_SP) : RMQS_OK;
    if (out == RMQS_OK)
        store_delta_merge(&st->delta, &added);
    else
        store_insert_req_undo(r);
    return out;
undo:
    store_insert_req_undo(r);
    /* After FULL/IOERR SQLite may have rolled the whole transaction back;
     * then there is no savepoint left to return to. */
    if (sp && !sqlite3_get_autocommit(st->db)) {
        sp_exec(st, S_ROLLBACK_SP);
        sp_exec(st, S_RELEASE_SP);
    }
    return out;
}

/* A failure that is about the request itself, not the database: the other
 * requests of the transaction go on. */
static bool req_local_failure(rmqs_rc rc)
{
    return rc == RMQS_EINVAL || rc == RMQS_ECONFLICT;
}

rmqs_rc sq_insert_batch(store_backend *st, store_insert_req *reqs, size_t n)
{
    rmqs_rc out;

    store_insert_reqs_reset(reqs, n);
    if (n == 0)
        return RMQS_OK;

    sq_lock(st);
    out = sq_tx_begin(st, TX_DURABLE);
    if (out != RMQS_OK)
        goto fail_all;
    for (size_t i = 0; i < n; i++) {
        reqs[i].rc = insert_req(st, &reqs[i]);
        if (reqs[i].rc != RMQS_OK && !req_local_failure(reqs[i].rc)) {
            out = reqs[i].rc; /* the database failed: nothing is kept */
            sq_tx_abort(st);
            goto fail_all;
        }
    }
    out = sq_tx_commit(st);
    if (out != RMQS_OK)
        goto fail_all;
    pthread_mutex_unlock(&st->mu);
    sq_ix_kick(st); /* the new jobs' headers and bodies */
    return RMQS_OK;

fail_all:
    store_insert_reqs_fail(reqs, n, out);
    pthread_mutex_unlock(&st->mu);
    return out;
}

rmqs_rc sq_get(store_backend *st, const unsigned char id[JOB_ID_BYTES],
               job_t *out)
{
    rmqs_rc rc;

    sq_lock(st);
    rc = sq_get_by_id(st, id, out);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                  */

/* No filter or the status alone, in due order: the prepared statements
 * below; any other filter or order: the query built for it
 * (store_sqlite_search.c). */
rmqs_rc sq_list(store_backend *st, const store_filter *f, size_t limit,
                size_t max_bytes, const store_cursor *after, job_t **jobs_out,
                size_t *n_out, bool *more, store_cursor *last)
{
    int status_filter = f ? f->status : -1;
    sqlite3_stmt *s;
    stmt_id sid;
    rmqs_rc out;

    if (f && (f->order != STORE_ORDER_DUE || f->source >= 0 || f->message_id ||
              f->schedule || f->held_by || store_filter_is_search(f)))
        return sq_search_list(st, f, limit, max_bytes, after, jobs_out, n_out,
                              more, last);
    *jobs_out = NULL;
    *n_out = 0;
    *more = false;
    if (limit > (size_t)INT64_MAX - 1)
        limit = (size_t)INT64_MAX - 1;

    if (status_filter < 0)
        sid = after ? S_LIST_ALL_AFTER : S_LIST_ALL;
    else
        sid = after ? S_LIST_STATUS_AFTER : S_LIST_STATUS;

    sq_lock(st);
    s = sq_stmt(st, sid);
    sqlite3_bind_int64(
        s, 1, (int64_t)limit + 1); /* one more: is there a next page? */
    if (after) {
        sqlite3_bind_int64(s, 2, after->deliver_at);
        sqlite3_bind_int64(s, 3, after->seq);
    }
    if (status_filter >= 0)
        sqlite3_bind_int(s, 4, status_filter);
    out = sq_collect_page(st, s, sq_stmt_defs[sid].name, limit, max_bytes,
                          jobs_out, n_out, more, last);
    sq_stmt_done(s);
    pthread_mutex_unlock(&st->mu);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Client changes: reschedule (and run), cancel, retry                      */

/* Run an "UPDATE ... WHERE id = ? AND status = 0 RETURNING" already bound
 * (inside a transaction). RMQS_OK with *out if it changed the job;
 * otherwise *out holds the job as it is (RMQS_ECONFLICT) or RMQS_ENOTFOUND. */
static rmqs_rc update_pending(store_backend *st, stmt_id sid,
                              const unsigned char id[JOB_ID_BYTES], job_t *out)
{
    sqlite3_stmt *s = sq_stmt(st, sid);
    rmqs_rc rc = sq_step_one_job(st, s, sid, out);

    if (rc == RMQS_OK) {
        /* RETURNING: step to SQLITE_DONE before the change is complete */
        int src = sqlite3_step(s);
        if (src != SQLITE_DONE) {
            job_clear(out);
            return sq_stmt_fail(st, s, src, sid);
        }
    }
    sq_stmt_done(s);
    if (rc != RMQS_ENOTFOUND)
        return rc;
    rc = sq_get_by_id(st, id, out);
    return rc == RMQS_OK ? RMQS_ECONFLICT : rc;
}

/* A RESCHEDULE's or RETRY's parameters: ?1 deliver_at (NULL: kept), ?2
 * delay_ms, ?3 now, ?4 the id. */
static void bind_timing(sqlite3_stmt *s, const store_change *ch, int64_t now_ms,
                        const unsigned char id[JOB_ID_BYTES])
{
    if (ch->kind == STORE_CHANGE_RETRY && ch->keep_deliver_at)
        sqlite3_bind_null(s, 1);
    else
        sqlite3_bind_int64(s, 1, ch->deliver_at);
    sqlite3_bind_int64(s, 2, ch->delay_ms);
    sqlite3_bind_int64(s, 3, now_ms);
    sqlite3_bind_blob(s, 4, id, JOB_ID_BYTES, SQLITE_STATIC);
}

rmqs_rc sq_update_batch(store_backend *st,
                        const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                        const store_change *ch, int64_t now_ms, bool *changed)
{
    bool cancel = ch->kind == STORE_CHANGE_CANCEL;
    stmt_id sid = cancel ? S_CANCEL : S_RETRY;
    sqlite3_stmt *s = sq_stmt(st, sid);
    int64_t moved = 0;
    rmqs_rc rc;

    pthread_mutex_lock(&st->mu);
    rc = sq_tx_begin(st, TX_DURABLE);
    for (size_t i = 0; rc == RMQS_OK && i < n; i++) {
        int src;
        if (cancel) {
            sqlite3_bind_int64(s, 1, now_ms);
            sqlite3_bind_blob(s, 2, ids[i], JOB_ID_BYTES, SQLITE_STATIC);
        } else {
            bind_timing(s, ch, now_ms, ids[i]);
        }
        src = sqlite3_step(s);
        changed[i] = src == SQLITE_ROW;
        while (src == SQLITE_ROW) /* RETURNING: complete the change */
            src = sqlite3_step(s);
        if (src != SQLITE_DONE) {
            rc = sq_stmt_fail(st, s, src, sid);
            break;
        }
        moved += changed[i] ? 1 : 0;
        sq_stmt_done(s);
    }
    if (rc == RMQS_OK && moved > 0)
        store_delta_move(&st->delta, cancel ? JOB_PENDING : JOB_FAILED,
                         cancel ? JOB_CANCELLED : JOB_PENDING, moved);
    if (rc == RMQS_OK)
        rc = sq_tx_commit(st);
    else
        sq_tx_abort(st);
    if (rc != RMQS_OK)
        for (size_t i = 0; i < n; i++)
            changed[i] = false;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

rmqs_rc sq_update(store_backend *st, const unsigned char id[JOB_ID_BYTES],
                  const store_change *ch, int64_t now_ms, job_t *out)
{
    bool cancel = ch->kind == STORE_CHANGE_CANCEL;
    bool retry = ch->kind == STORE_CHANGE_RETRY;
    stmt_id sid = cancel ? S_CANCEL : retry ? S_RETRY : S_RESCHEDULE;
    sqlite3_stmt *s;
    rmqs_rc rc;

    sq_lock(st);
    rc = sq_tx_begin(st, TX_DURABLE);
    if (rc != RMQS_OK)
        goto unlock;
    s = sq_stmt(st, sid);
    if (cancel) {
        sqlite3_bind_int64(s, 1, now_ms);
        sqlite3_bind_blob(s, 2, id, JOB_ID_BYTES, SQLITE_STATIC);
    } else {
        bind_timing(s, ch, now_ms, id);
    }
    rc = update_pending(st, sid, id, out);
    if (rc == RMQS_OK && cancel)
        store_delta_move(&st->delta, JOB_PENDING, JOB_CANCELLED, 1);
    if (rc == RMQS_OK && retry)
        store_delta_move(&st->delta, JOB_FAILED, JOB_PENDING, 1);
    if (rc == RMQS_ECONFLICT && cancel && out->status == JOB_CANCELLED)
        rc = RMQS_OK; /* cancelling a cancelled job changes nothing */
    if (rc == RMQS_OK)
        rc = sq_tx_commit(st);
    else
        sq_tx_abort(st);
    /* on a conflict *out is the job as it is (store_update) */
    if (rc != RMQS_OK && rc != RMQS_ECONFLICT)
        job_clear(out);
unlock:
    pthread_mutex_unlock(&st->mu);
    return rc;
}
