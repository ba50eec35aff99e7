/*
 * store.c - the front of the store (the contract is store.h): picks the
 * backend, and keeps what every backend shares about the dispatcher's held
 * jobs, ids and cursors; everything that touches the database goes through
 * the backend's table (store_backend.h): SQLite (store_sqlite*.c) or
 * PostgreSQL (store_pg*.c).
 *
 * Why a front: a second backend (PostgreSQL, issue 12) is a new table of
 * ops, not a fork of the store. What is not about rows lives here once:
 *   - the backend is chosen from the database setting: a postgres:// or
 *     postgresql:// URL is PostgreSQL (with migrations/postgres/), anything
 *     else is a SQLite file path (migrations/sqlite/);
 *   - job ids are parsed here (a malformed id is RMQS_ENOTFOUND, as an
 *     unknown one), the listing cursor text too (store_common.h);
 *   - the claimset of jobs held by the dispatcher, and its rules.
 *
 * Claiming ahead without the write lock (store_claim_ahead, store_record):
 * the writer holds the database through its commit and fsync (and any
 * checkpoint in it), and a neighbour on the same disk can stall an fsync
 * for a second; a claim behind it would land late however early it was
 * planned. So the dispatcher reads due jobs from a snapshot that never
 * waits for the writer (SQLite: a read connection of its own, WAL) and
 * holds them in memory (st->held, claimset.h) before the claim is written;
 * store_record writes the claims later, with the outcomes, and may wait as
 * long as the disk likes. Until then the database says pending, so:
 * store_update refuses a held job (409, as for publishing, answering with
 * the job shown as publishing), store_get/store_list show it as publishing,
 * reads skip it, and claimset's generation rules drop a job whose cancel,
 * reschedule or settle overlapped the snapshot that read it. A crash before
 * the claim is written leaves the job pending: published again at the next
 * start (a lost claim is redone, at least once). store_counts counts such a
 * job as pending until then.
 *
 * A backend whose read is the claim (ops->claims_in_read, PostgreSQL: the
 * database arbitrates between instances) uses the same claimset: a job it
 * read is publishing in the database already, and one the claimset does not
 * keep (a change overlapped the read) is given back at once with a RELEASE,
 * so it never stays claimed by nobody until its lease expires.
 */
#include "store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "claimset.h"
#include "log.h"
#include "store_backend.h"
#include "store_pg.h"
#include "store_sqlite.h"

#define MOD "store"

#define CLAIM_READS 3 /* snapshots one store_claim_ahead call may read */

/* struct store is in store_backend.h (store_schedules.c shares it). */

bool store_is_file(const char *target)
{
    return target && !store_pg_is_url(target);
}

void store_safe_target(const char *target, char *buf, size_t len)
{
    if (len == 0)
        return;
    if (store_pg_is_url(target))
        store_pg_safe_url(target, buf, len);
    else
        snprintf(buf, len, "%s", target ? target : "");
}

rmqs_rc store_open_with(const char *path, const store_options *opt,
                        const store_migration *migrations, size_t n,
                        store_t **out, rmqs_error *err)
{
    store_t *st;
    rmqs_rc rc;

    if (!out)
        return rmqs_fail(err, RMQS_EINVAL, NULL, "store_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return rmqs_fail(err, RMQS_EINVAL, NULL, "database path is empty");
    st = calloc(1, sizeof(*st));
    if (!st)
        return rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    st->ops = store_pg_is_url(path) ? &store_pg_ops : &store_sqlite_ops;
    if (pthread_mutex_init(&st->feed_mu, NULL) != 0) {
        free(st);
        return rmqs_fail(err, RMQS_ESYS, NULL, "pthread_mutex_init failed");
    }
    st->held = claimset_new();
    if (!st->held) {
        rc = rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    rc = st->ops->open(path, opt, migrations, n, &st->b, err);
    if (rc != RMQS_OK)
        goto fail;
    st->page_max_bytes = opt && opt->page_max_bytes
                             ? opt->page_max_bytes
                             : STORE_PAGE_MAX_BYTES_DEFAULT;
    *out = st;
    return RMQS_OK;

fail:
    claimset_free(st->held);
    pthread_mutex_destroy(&st->feed_mu);
    free(st);
    return rc;
}

rmqs_rc store_open(const char *path, const store_options *opt, store_t **out,
                   rmqs_error *err)
{
    if (path && store_pg_is_url(path))
        return store_open_with(path, opt, store_pg_migrations,
                               store_pg_migrations_count, out, err);
    return store_open_with(path, opt, store_builtin_migrations,
                           store_builtin_migrations_count, out, err);
}

void store_close(store_t *st)
{
    if (!st)
        return;
    st->ops->close(st->b);
    claimset_free(st->held);
    pthread_mutex_destroy(&st->feed_mu);
    free(st);
}

int store_schema_version(store_t *st)
{
    return st->ops->schema_version(st->b);
}

rmqs_rc store_purge(store_t *st, int64_t before_ms, size_t limit,
                    size_t *deleted)
{
    return st->ops->purge(st->b, before_ms, limit, deleted);
}

rmqs_rc store_checkpoint(store_t *st, int64_t *wal_frames, int64_t *copied)
{
    return st->ops->checkpoint(st->b, wal_frames, copied);
}

rmqs_rc store_counts(store_t *st, int64_t counts[5])
{
    return st->ops->counts(st->b, counts);
}

int64_t store_free_bytes(store_t *st)
{
    return st->ops->free_bytes(st->b);
}

int64_t store_size_bytes(store_t *st)
{
    return st->ops->size_bytes(st->b);
}

rmqs_rc store_ping(store_t *st)
{
    return st->ops->ping(st->b);
}

rmqs_rc store_identity(store_t *st, char out[STORE_IDENTITY_MAX])
{
    out[0] = '\0';
    return st->ops->identity(st->b, out);
}

/* ------------------------------------------------------------------------ */
/* Insert and read                                                          */

rmqs_rc store_insert_batch(store_t *st, store_insert_req *reqs, size_t n)
{
    return st->ops->insert_batch(st->b, reqs, n);
}

rmqs_rc store_insert(store_t *st, const job_t *job, const char *idem_key,
                     const char *idem_request, bool *existed, job_t *existing)
{
    const char *keys[1] = {idem_key}, *reqs[1] = {idem_request};
    bool ex[1] = {false};
    job_t got[1];
    /* one job: the group commit's request with an array of one */
    store_insert_req r = {.jobs = job,
                          .n = 1,
                          .idem_keys = idem_key ? keys : NULL,
                          .idem_requests = reqs,
                          .existed = ex,
                          .existing = got};
    rmqs_rc out;

    memset(got, 0, sizeof(got));
    if (existed)
        *existed = false;
    if (existing)
        memset(existing, 0, sizeof(*existing));
    if (!job)
        return RMQS_EINVAL;
    out = store_insert_batch(st, &r, 1);
    if (out == RMQS_OK)
        out = r.rc;
    if (out == RMQS_OK && ex[0]) {
        if (existed)
            *existed = true;
        if (existing)
            *existing = got[0];
        else
            job_clear(&got[0]);
    } else {
        job_clear(&got[0]);
    }
    return out;
}

/* A job claimed ahead whose claim is not committed yet reads as pending in
 * the database: show it as the claim will make it (publishing, attempt
 * counted), as store_update treats it. */
static void held_overlay(store_t *st, job_t *job)
{
    unsigned char id[JOB_ID_BYTES];

    if (job->status == JOB_PENDING && job_id_parse(job->id, id) == RMQS_OK &&
        claimset_held(st->held, id)) {
        job->status = JOB_PUBLISHING;
        job->attempts++;
    }
}

rmqs_rc store_get(store_t *st, const char *id_text, job_t *out)
{
    unsigned char id[JOB_ID_BYTES];
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (!id_text || job_id_parse(id_text, id) != RMQS_OK)
        return RMQS_ENOTFOUND;
    rc = st->ops->get(st->b, id, out);
    if (rc == RMQS_OK)
        held_overlay(st, out);
    return rc;
}

rmqs_rc store_list(store_t *st, const store_filter *f, size_t limit,
                   const char *after, job_t **jobs_out, size_t *n_out,
                   char **next_out)
{
    int status_filter = f ? f->status : -1;
    int source_filter = f ? f->source : -1;
    store_order order = f ? f->order : STORE_ORDER_DUE;
    store_cursor cur, last = {0, 0, order};
    job_t *jobs = NULL;
    size_t n = 0;
    bool more = false;
    rmqs_rc out;

    *jobs_out = NULL;
    *n_out = 0;
    *next_out = NULL;
    if (limit == 0 || status_filter > JOB_CANCELLED ||
        source_filter > JOB_SOURCE_SCHEDULE ||
        (unsigned)order > STORE_ORDER_CREATED_DESC)
        return RMQS_EINVAL;
    /* a cursor is tied to the order it was made in */
    if (after && (!store_cursor_parse(after, &cur) || cur.order != order))
        return RMQS_EINVAL;
    out = st->ops->list(st->b, f, limit, st->page_max_bytes,
                        after ? &cur : NULL, &jobs, &n, &more, &last);
    if (out != RMQS_OK)
        return out;
    if (more && n > 0) {
        last.order = order;
        *next_out = store_cursor_format(&last);
        if (!*next_out) {
            store_jobs_free(jobs, n);
            return RMQS_ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++)
        held_overlay(st, &jobs[i]);
    *jobs_out = jobs;
    *n_out = n;
    return RMQS_OK;
}

rmqs_rc store_failures_recent(store_t *st, size_t limit, store_failure **rows,
                              size_t *n)
{
    *rows = NULL;
    *n = 0;
    if (limit == 0)
        return RMQS_EINVAL;
    return st->ops->failures(st->b, limit, rows, n);
}

/* Whether f selects on nothing but (at most) the status. */
static bool status_only(const store_filter *f)
{
    return f == NULL ||
           (f->source < 0 && f->message_id == NULL && f->schedule == NULL &&
            f->held_by == NULL && f->exchange == NULL &&
            f->routing_key == NULL && !f->has_deliver_from &&
            !f->has_deliver_to && f->id_prefix[0] == '\0' &&
            f->header_name == NULL && f->q == NULL);
}

rmqs_rc store_count(store_t *st, const store_filter *f, int64_t cap,
                    int64_t *count, bool *capped)
{
    int64_t counts[STORE_N_STATUS], n = 0;
    rmqs_rc rc;

    *count = 0;
    *capped = false;
    if (cap < 1 ||
        (f && (f->status > JOB_CANCELLED || f->source > JOB_SOURCE_SCHEDULE)))
        return RMQS_EINVAL;
    if (!status_only(f))
        return st->ops->count(st->b, f, cap, count, capped);
    rc = st->ops->counts(st->b, counts);
    if (rc != RMQS_OK)
        return rc;
    for (int s = 0; s < STORE_N_STATUS; s++)
        if (f == NULL || f->status < 0 || f->status == s)
            n += counts[s];
    *capped = n > cap;
    *count = *capped ? cap : n;
    return RMQS_OK;
}

rmqs_rc store_explain(store_t *st, const store_filter *f, bool count,
                      char **plan_out)
{
    *plan_out = NULL;
    return st->ops->explain(st->b, f, count, plan_out);
}

/* ------------------------------------------------------------------------ */
/* Client changes: the one update path                                      */

rmqs_rc store_update(store_t *st, const char *id_text, const store_change *ch,
                     int64_t now_ms, job_t *out)
{
    unsigned char id[JOB_ID_BYTES];
    store_change now_ch;
    rmqs_rc rc;

    memset(out, 0, sizeof(*out));
    if (!id_text || job_id_parse(id_text, id) != RMQS_OK)
        return RMQS_ENOTFOUND;
    if (!ch || (ch->kind != STORE_CHANGE_RESCHEDULE &&
                ch->kind != STORE_CHANGE_CANCEL &&
                ch->kind != STORE_CHANGE_RUN && ch->kind != STORE_CHANGE_RETRY))
        return RMQS_EINVAL;
    if (ch->kind == STORE_CHANGE_RUN) { /* a reschedule to now, for backends */
        now_ch = (store_change){.kind = STORE_CHANGE_RESCHEDULE,
                                .deliver_at = now_ms,
                                .delay_ms = 0};
        ch = &now_ch;
    }

    /* held by the dispatcher (claimed ahead): as good as publishing, and
     * answered with the job as store_get shows it */
    rc = claimset_change_begin(st->held, id);
    if (rc == RMQS_ECONFLICT) {
        if (st->ops->get(st->b, id, out) == RMQS_OK)
            held_overlay(st, out);
        else
            job_clear(out); /* gone meanwhile: id[0] == 0 says so */
        return RMQS_ECONFLICT;
    }
    if (rc != RMQS_OK)
        return rc;
    rc = st->ops->update(st->b, id, ch, now_ms, out);
    claimset_change_end(st->held, id); /* after the commit, whatever it did */
    return rc;
}

rmqs_rc store_update_batch(store_t *st, const char *const *ids, size_t n,
                           const store_change *ch, int64_t now_ms,
                           bool *changed, size_t *n_changed)
{
    unsigned char(*bin)[JOB_ID_BYTES] = NULL;
    size_t *slot = NULL, m = 0;
    rmqs_rc rc = RMQS_OK;

    *n_changed = 0;
    for (size_t i = 0; i < n; i++)
        changed[i] = false;
    if (!ch ||
        (ch->kind != STORE_CHANGE_CANCEL && ch->kind != STORE_CHANGE_RETRY) ||
        n > STORE_BATCH_MAX)
        return RMQS_EINVAL;
    if (n == 0)
        return RMQS_OK;
    bin = malloc(n * sizeof(*bin));
    slot = malloc(n * sizeof(*slot));
    if (bin == NULL || slot == NULL) {
        rc = RMQS_ENOMEM;
        goto out;
    }
    /* held by the dispatcher: left alone, as store_update answers 409 */
    for (size_t i = 0; i < n; i++) {
        if (!ids[i] || job_id_parse(ids[i], bin[m]) != RMQS_OK)
            continue;
        rc = claimset_change_begin(st->held, bin[m]);
        if (rc == RMQS_ECONFLICT)
            continue;
        if (rc != RMQS_OK)
            break;
        slot[m++] = i;
    }
    if (rc == RMQS_OK || rc == RMQS_ECONFLICT) {
        bool *ch_m = calloc(m > 0 ? m : 1, sizeof(*ch_m));
        rc = ch_m == NULL
                 ? RMQS_ENOMEM
                 : st->ops->update_batch(st->b, bin, m, ch, now_ms, ch_m);
        for (size_t k = 0; ch_m != NULL && rc == RMQS_OK && k < m; k++) {
            changed[slot[k]] = ch_m[k];
            *n_changed += ch_m[k] ? 1 : 0;
        }
        free(ch_m);
    }
    for (size_t k = 0; k < m; k++) /* after the commit, whatever it did */
        claimset_change_end(st->held, bin[k]);
out:
    free(bin);
    free(slot);
    return rc;
}

rmqs_rc store_reschedule(store_t *st, const char *id_text, int64_t deliver_at,
                         int64_t delay_ms, int64_t now_ms, job_t *out)
{
    store_change ch = {.kind = STORE_CHANGE_RESCHEDULE,
                       .deliver_at = deliver_at,
                       .delay_ms = delay_ms};

    return store_update(st, id_text, &ch, now_ms, out);
}

rmqs_rc store_cancel(store_t *st, const char *id_text, int64_t now_ms,
                     job_t *out)
{
    store_change ch = {.kind = STORE_CHANGE_CANCEL};

    return store_update(st, id_text, &ch, now_ms, out);
}

/* ------------------------------------------------------------------------ */
/* Dispatcher: next due, claim ahead, record, recover                       */

rmqs_rc store_next_due(store_t *st, bool *any, int64_t *due_at_out)
{
    rmqs_rc rc;

    *any = false;
    pthread_mutex_lock(&st->feed_mu);
    rc = st->ops->next_due(st->b, st->held, any, due_at_out);
    pthread_mutex_unlock(&st->feed_mu);
    return rc;
}

/* claims_in_read: the candidates read (claimed) but not kept go back to
 * pending at once (file comment). A failure is logged; their lease brings
 * them back later. */
static void give_back(store_t *st, const store_claimed *c, size_t n,
                      const bool *keep, int64_t now_ms)
{
    unsigned char(*ids)[JOB_ID_BYTES] = malloc(n * sizeof(*ids));
    store_outcome *o = calloc(n, sizeof(*o));
    size_t m = 0;

    if (ids != NULL && o != NULL) {
        for (size_t i = 0; i < n; i++) {
            if (keep[i] || job_id_parse(c[i].job.id, ids[m]) != RMQS_OK)
                continue;
            o[m].id = c[i].job.id;
            o[m].kind = STORE_OUT_RELEASE;
            m++;
        }
        if (m > 0 && st->ops->record(st->b, NULL, 0, o,
                                     (const unsigned char(*)[JOB_ID_BYTES])ids,
                                     m, now_ms) == RMQS_OK) {
            m = 0;
        }
    }
    if (ids == NULL || o == NULL || m > 0)
        log_warn(MOD,
                 "claimed jobs not kept could not be given back; "
                 "their lease brings them back",
                 "n=%zu", n);
    free(ids);
    free(o);
}

rmqs_rc store_claim_ahead(store_t *st, int64_t due_by_ms, int64_t now_ms,
                          size_t limit, job_t **jobs_out, size_t *n_out)
{
    unsigned char(*ids)[JOB_ID_BYTES] = NULL;
    store_claimed *c = NULL;
    bool *keep = NULL;
    job_t *jobs = NULL;
    size_t n = 0, cap = 0, got = 0, idcap = 0, read;
    rmqs_rc out = RMQS_OK;

    *jobs_out = NULL;
    *n_out = 0;
    if (limit == 0)
        return RMQS_OK;
    pthread_mutex_lock(&st->feed_mu);
    /* A read overlapped by a cancel, reschedule or settle drops those jobs
     * (claimset.h); read again for them, a few times at most: the next
     * claim finds whatever is still due. */
    for (int round = 0; round < CLAIM_READS && got < limit; round++) {
        uint64_t gen = claimset_begin(st->held); /* before the snapshot */
        long kept;

        out = st->ops->read_due(st->b, st->held, due_by_ms, limit - got, &c,
                                &cap, &n);
        if (out != RMQS_OK || n == 0)
            break;
        if (n > idcap) {
            void *ni = realloc(ids, n * sizeof(*ids));
            void *nk = ni ? realloc(keep, n * sizeof(*keep)) : NULL;
            if (ni)
                ids = ni;
            if (!nk) {
                out = RMQS_ENOMEM;
                goto drop;
            }
            keep = nk;
            idcap = n;
        }
        for (size_t i = 0; i < n; i++)
            (void)job_id_parse(c[i].job.id, ids[i]);
        kept = claimset_take(
            st->held, gen, (const unsigned char(*)[JOB_ID_BYTES])ids, n, keep);
        if (kept < 0) {
            out = RMQS_ENOMEM;
            goto drop;
        }
        if (kept > 0) {
            job_t *nj = realloc(jobs, (got + (size_t)kept) * sizeof(*jobs));
            if (!nj) {
                for (size_t i = 0; i < n; i++)
                    if (keep[i])
                        claimset_release(st->held, ids[i]);
                out = RMQS_ENOMEM;
                goto drop;
            }
            jobs = nj;
        }
        if (st->ops->claims_in_read && (size_t)kept < n)
            give_back(st, c, n, keep, now_ms);
        for (size_t i = 0; i < n; i++) {
            if (!keep[i]) {
                job_clear(&c[i].job);
                continue;
            }
            /* as the claim will write it (store_record) */
            c[i].job.status = JOB_PUBLISHING;
            c[i].job.attempts++;
            c[i].job.updated_at = now_ms;
            jobs[got++] = c[i].job;
        }
        read = n;
        n = 0;
        if ((size_t)kept == read)
            break; /* none dropped: this read found all there was */
    }
    goto done;
drop:
    for (size_t i = 0; i < n; i++)
        job_clear(&c[i].job);
done:
    pthread_mutex_unlock(&st->feed_mu);
    free(c);
    free(ids);
    free(keep);
    if (out != RMQS_OK && got == 0) {
        free(jobs);
        return out;
    }
    /* the read is in (due_at, seq) order per round; a later round may hold
     * earlier jobs */
    store_jobs_sort_due(jobs, got);
    *jobs_out = jobs;
    *n_out = got;
    return RMQS_OK;
}

rmqs_rc store_record(store_t *st, const char *const *claims, size_t n_claims,
                     const store_outcome *o, size_t n, int64_t now_ms)
{
    unsigned char(*ids)[JOB_ID_BYTES];
    size_t total = n_claims + n;
    rmqs_rc out;

    if (total == 0)
        return RMQS_OK;
    if ((n && !o) || (n_claims && !claims))
        return RMQS_EINVAL;
    ids = malloc(total * sizeof(*ids));
    if (!ids)
        return RMQS_ENOMEM;
    /* validate everything before touching anything: claims first, then
     * outcomes, in ids[] */
    for (size_t i = 0; i < n_claims; i++) {
        if (!claims[i] || job_id_parse(claims[i], ids[i]) != RMQS_OK) {
            free(ids);
            return RMQS_EINVAL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!o[i].id || job_id_parse(o[i].id, ids[n_claims + i]) != RMQS_OK ||
            o[i].kind < STORE_OUT_SENT || o[i].kind > STORE_OUT_HOLD) {
            free(ids);
            return RMQS_EINVAL;
        }
    }
    out = st->ops->record(
        st->b, (const unsigned char(*)[JOB_ID_BYTES])ids, n_claims, o,
        (const unsigned char(*)[JOB_ID_BYTES])ids + n_claims, n, now_ms);
    /* Settled and committed: the dispatcher no longer holds them. (A read
     * snapshot older than this commit may still show them pending: the
     * release is what tells store_claim_ahead to drop them.) */
    if (out == RMQS_OK)
        for (size_t i = 0; i < n; i++)
            claimset_release(st->held, ids[n_claims + i]);
    free(ids);
    return out;
}

rmqs_rc store_settle(store_t *st, const store_outcome *o, size_t n,
                     int64_t now_ms)
{
    return store_record(st, NULL, 0, o, n, now_ms);
}

rmqs_rc store_recover(store_t *st, size_t *n_out)
{
    *n_out = 0;
    return st->ops->recover(st->b, n_out);
}

bool store_has_peers(store_t *st)
{
    /* the claim is in the read because others claim from this database,
     * and they store jobs in it too */
    return st->ops->claims_in_read;
}

bool store_buckets_shared(store_t *st)
{
    return st->ops->buckets_update != NULL;
}

rmqs_rc store_buckets_update(store_t *st, store_bucket *b, size_t n,
                             int64_t now_ms, store_bucket_fn fn, void *cls)
{
    rmqs_rc rc;

    if (st->ops->buckets_update == NULL) {
        fn(cls, b, n);
        return RMQS_OK;
    }
    pthread_mutex_lock(&st->feed_mu); /* the feeder's connection */
    rc = st->ops->buckets_update(st->b, b, n, now_ms * 1000, fn, cls);
    pthread_mutex_unlock(&st->feed_mu);
    return rc;
}

void store_set_wake(store_t *st, store_wake_fn fn, void *arg)
{
    if (st->ops->set_wake != NULL)
        st->ops->set_wake(st->b, fn, arg);
}

int64_t store_clock_offset_ms(store_t *st)
{
    return st->ops->clock_offset_ms != NULL ? st->ops->clock_offset_ms(st->b)
                                            : 0;
}

rmqs_rc store_search_index(store_t *st, size_t limit, size_t *indexed)
{
    if (indexed != NULL)
        *indexed = 0;
    if (limit < 1)
        return RMQS_EINVAL;
    return st->ops->search_index != NULL
               ? st->ops->search_index(st->b, limit, indexed)
               : RMQS_OK;
}

int64_t store_search_index_lag(store_t *st)
{
    return st->ops->search_index_lag != NULL ? st->ops->search_index_lag(st->b)
                                             : 0;
}

int64_t store_lease_renewed_until(store_t *st)
{
    return st->ops->lease_renewed_until != NULL
               ? st->ops->lease_renewed_until(st->b)
               : 0;
}

int64_t store_claims_valid_since(store_t *st)
{
    return st->ops->claims_valid_since != NULL
               ? st->ops->claims_valid_since(st->b)
               : INT64_MIN;
}

/* ------------------------------------------------------------------------ */
/* Test hooks: deliberately not in store.h (like curl's UNITTEST). Declared
 * here for -Wmissing-prototypes; tests/unit/test_store.c declares them too.
 * They are about the SQLite backend, but for store__claimers. */

/* The SQL text of the statement called name ("read_due", "claim_held",
 * "list_all", ...), or NULL: lets the test EXPLAIN QUERY PLAN the exact
 * text the store runs. */
const char *store__sql(const char *name);
const char *store__sql(const char *name)
{
    return store_sqlite__sql(name);
}

/* PRAGMA synchronous of this store's connection just now (0 OFF,
 * 1 NORMAL, 2 FULL), or -1: proves the dispatcher's calls put FULL back. */
int store__synchronous(store_t *st);
int store__synchronous(store_t *st)
{
    return st->ops == &store_sqlite_ops ? store_sqlite__synchronous(st->b) : -1;
}

/* PRAGMA max_page_count on this store's connection (the limit is per
 * connection): simulates a full disk. SQLite never sets it below the
 * current size; *applied gets the value in force. */
rmqs_rc store__set_max_pages(store_t *st, int64_t pages, int64_t *applied);
rmqs_rc store__set_max_pages(store_t *st, int64_t pages, int64_t *applied)
{
    if (st->ops != &store_sqlite_ops)
        return RMQS_EINVAL;
    return store_sqlite__set_max_pages(st->b, pages, applied);
}

/* How many instances share the due jobs as this store sees them (itself
 * included), and its rank among them in *rank: PostgreSQL's claim shares
 * (store_pg_dispatch.c); 1 and 0 on SQLite, whose one process claims all.
 * test_store_pg_dispatch.c waits for them. */
int64_t store__claimers(store_t *st, int64_t *rank);
int64_t store__claimers(store_t *st, int64_t *rank)
{
    if (st->ops != &store_pg_ops) {
        *rank = 0;
        return 1;
    }
    return store_pg__claimers(st->b, rank);
}
