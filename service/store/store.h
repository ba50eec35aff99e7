/*
 * store.h - durable job storage. Every SQL statement of the service lives in
 * the store (store_sqlite*.c for SQLite, store_pg*.c for PostgreSQL);
 * everything above this header speaks in jobs, not rows, so a backend
 * implements store_backend.h without touching HTTP or dispatch code.
 * store_open picks the backend from the database setting: a file path is
 * SQLite; a postgres:// or postgresql:// URL is PostgreSQL (libpq; several
 * instances may share the database, see "Shared stores" below).
 *
 * The SQLite backend keeps one database file in WAL mode with
 * synchronous=FULL (configurable): when a write function returns RMQS_OK the
 * change is on disk. The exceptions are the dispatcher's status changes
 * (store_record, store_settle, store_recover): they commit without fsync
 * (synchronous=NORMAL), survive a process crash, and after a power loss can
 * only be undone back to an earlier state of the job, so it is published
 * again (at least once, never lost); the next fsynced commit or checkpoint
 * makes them durable. The schema comes from migrations/sqlite/ (embedded at
 * build time), applied at open, each once, in order, recorded in
 * schema_migrations.
 *
 * Thread safety: a store_t may be used from several threads; calls are
 * serialised internally, except the dispatcher's reads (store_claim_ahead,
 * store_next_due), which use a read connection of their own and never wait
 * for a write in progress (one dispatcher thread at a time calls them).
 *
 * Errors: RMQS_EDB for an unusable database, RMQS_EFULL when the disk or the
 * database is full, RMQS_ENOTFOUND / RMQS_ECONFLICT as documented per call.
 *
 * Shared stores (PostgreSQL): several instances claim from one database.
 * store_claim_ahead's read is the claim itself (FOR NO KEY UPDATE SKIP
 * LOCKED, owner = this store's instance id, a lease renewed while the
 * process lives; store_record's claims are then a no-op); settles only mark jobs
 * this instance still owns; jobs whose lease expired are reclaimed by any
 * instance (store_recover at start-up does only that). Clocks: the
 * dispatcher's times (due_by_ms, retry_at, and what it gets back: due_at,
 * store_next_due, lease_until) are on the database's clock, its own clock
 * plus store_clock_offset_ms. HTTP times (deliver_at, due_at at insert,
 * updated_at) are stored as given: a host whose clock is ahead makes a
 * job due later, never earlier.
 */
#ifndef RMQS_STORE_H
#define RMQS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "rmqs.h"
#include "store_types.h"

typedef struct store store_t;

/*
 * Open (creating if needed) the database at path, apply the embedded
 * migrations and return the store in *out. A database whose schema is newer
 * than this binary, a corrupt file or an unreadable one, an unreachable
 * PostgreSQL server gives RMQS_EDB and one clear message in err (never the
 * password of a URL). The caller owns *out (store_close).
 */
rmqs_rc store_open(const char *path, const store_options *opt, store_t **out,
                   rmqs_error *err);

/* Whether target (the database setting) names a file, which the caller
 * may prepare (its folder, a lock file beside it) and log; false for a URL
 * such as postgres://user:password@host/db, which may carry a password:
 * log store_safe_target instead. */
bool store_is_file(const char *target);

/* target fit for a log line: a file path as it is, a URL without its
 * password; written into buf (len bytes, truncated, NUL-terminated). */
void store_safe_target(const char *target, char *buf, size_t len);

/* As store_open with an explicit migration list (tests use this). */
rmqs_rc store_open_with(const char *path, const store_options *opt,
                        const store_migration *migrations, size_t n,
                        store_t **out, rmqs_error *err);

void store_close(store_t *st);

/* Highest applied schema version, or -1 on error. */
int store_schema_version(store_t *st);

/* Delete up to limit finished jobs (sent, failed, cancelled) that finished
 * before before_ms, oldest first, in one short transaction; their
 * idempotency keys go with them. *deleted gets how many. */
rmqs_rc store_purge(store_t *st, int64_t before_ms, size_t limit,
                    size_t *deleted);

/* Copy the WAL into the database without blocking writers (PASSIVE), on a
 * connection of its own. Outputs may be NULL: frames in the WAL, frames
 * copied. */
rmqs_rc store_checkpoint(store_t *st, int64_t *wal_frames, int64_t *copied);

/* Jobs by status (indexed by job_status): exact, and cheap (a table the
 * store keeps current in the transaction of every change, not a count). */
rmqs_rc store_counts(store_t *st, int64_t counts[5]);

/* Bytes free for unprivileged writes on the database's filesystem; -1 if
 * unknown. */
int64_t store_free_bytes(store_t *st);

/* Bytes of the database file plus its WAL; -1 if unknown. */
int64_t store_size_bytes(store_t *st);

/* Cheap probe that the database answers (for /readyz). */
rmqs_rc store_ping(store_t *st);

/*
 * What names this database, the same for every instance that shares it
 * (the `store` label of the whole-database gauges, GET /metrics, so a
 * dashboard takes max by store rather than a sum): PostgreSQL "pg-" and
 * the random id migration 0011 wrote once in store_identity; SQLite
 * "sqlite-" and the file's device and inode, in hex. A short
 * [a-z0-9-] string in out (STORE_IDENTITY_MAX: store_types.h); RMQS_EDB
 * if it cannot be read.
 */
rmqs_rc store_identity(store_t *st, char out[STORE_IDENTITY_MAX]);

/*
 * Insert a new job (job->id assigned by the caller). With idem_key non-NULL,
 * the key is recorded with idem_request (the canonical request) in the same
 * transaction; if the key exists already:
 *   - same idem_request: *existed = true, *existing receives the job created
 *     before (caller clears it), RMQS_OK;
 *   - different request: RMQS_ECONFLICT.
 */
rmqs_rc store_insert(store_t *st, const job_t *job, const char *idem_key,
                     const char *idem_request, bool *existed, job_t *existing);

/*
 * Group commit: insert every request in one transaction (one fsync). Each
 * request is all-or-nothing on its own (a savepoint), its keyed jobs as
 * store_types.h says (store_insert is a request of one); a request that
 * fails by itself (RMQS_EINVAL, RMQS_ECONFLICT as in store_insert) leaves
 * the others alone. If the database fails (RMQS_EFULL, RMQS_EDB...) nothing is
 * stored, every reqs[i].rc is that code and it is returned; otherwise
 * RMQS_OK and each request carries its own rc.
 */
rmqs_rc store_insert_batch(store_t *st, store_insert_req *reqs, size_t n);

/* Load one job by id text into *out (caller clears). RMQS_ENOTFOUND. */
rmqs_rc store_get(store_t *st, const char *id, job_t *out);

/*
 * A page of jobs matching f (NULL: all) in f->order (store_types.h:
 * (deliver_at, insertion) by default; ties broken by insertion, in the
 * order's direction):
 * at most limit jobs, and at most store_options.page_max_bytes of them as
 * stored (bodies, a binary one counted as base64, headers, properties,
 * last_error, plus about 512 bytes each), except one job larger than that,
 * which makes a page alone; so a page may hold fewer than limit jobs and
 * still have a next. after: NULL or a cursor from a previous page of the
 * same order (RMQS_EINVAL if malformed or made in another order). *jobs_out is a malloc'd array of *n_out jobs
 * (caller clears each and frees the array); *next_out is a malloc'd cursor
 * or NULL when this is the last page. Lists, counts and searches read on
 * connections of their own, never the writer's, and end with
 * RMQS_ETIMEDOUT past store_options.search_budget_ms.
 */
rmqs_rc store_list(store_t *st, const store_filter *f, size_t limit,
                   const char *after, job_t **jobs_out, size_t *n_out,
                   char **next_out);

/*
 * How many jobs match f (NULL: all), counted from indexes only, stopping at
 * cap (>= 1): *count is exact when *capped is false, else at least that
 * many match: cap (more than cap match), or as many as were counted when
 * the search budget ran out. A filter of status alone (or nothing) reads
 * job_counts. A job the dispatcher holds counts under its stored status
 * (pending).
 */
rmqs_rc store_count(store_t *st, const store_filter *f, int64_t cap,
                    int64_t *count, bool *capped);

/*
 * The query plan of store_list (count false) or store_count (count true)
 * for f, as the backend's planner gives it (SQLite: EXPLAIN QUERY PLAN
 * lines; PostgreSQL: EXPLAIN (FORMAT JSON)), for a page of 50 after a
 * cursor or a count with the default cap, in a malloc'd *plan_out
 * (caller frees). For tests and the benchmark: the SQL stays here.
 */
rmqs_rc store_explain(store_t *st, const store_filter *f, bool count,
                      char **plan_out);

/*
 * The most recent failed jobs (status failed), newest failed_at first: at
 * most limit (>= 1) of them, read from the index of failed jobs by
 * failed_at (jobs_failed_at), so the cost is limit rows however many jobs
 * there are, on a search connection (never the writer's; the search
 * budget applies: RMQS_ETIMEDOUT). *rows is a malloc'd array of *n
 * (store_failures_free; NULL when there is none). For GET
 * /stats/failures.
 */
rmqs_rc store_failures_recent(store_t *st, size_t limit, store_failure **rows,
                              size_t *n);

/*
 * The search's side tables (SQLite: job_headers, jobs_body_fts) are filled
 * off the insert path, by a thread of the store's own (store_options
 * .index_manual: by the owner). Searches are exact at any lag: the jobs
 * not yet indexed are checked directly.
 *
 * store_search_index: index up to limit (>= 1) jobs in one short
 * transaction, oldest first; *indexed (may be NULL) how many (0: none was
 * waiting). RMQS_OK without doing anything on a backend that indexes in
 * the insert's transaction (PostgreSQL).
 * store_search_index_lag: how many jobs wait to be indexed (the seq
 * distance from the last indexed to the newest job), 0 when none or the
 * backend has no lag, -1 if unknown (for rmqs_search_index_lag_jobs).
 */
rmqs_rc store_search_index(store_t *st, size_t limit, size_t *indexed);
int64_t store_search_index_lag(store_t *st);

/*
 * The one update path of a client's change: apply ch to the job id at
 * now_ms, in one durable transaction. Every kind but RETRY applies to a
 * pending job only, RETRY to a failed job only. Outcomes:
 *   - RMQS_OK: *out gets the job as changed (a cancel of a job already
 *     cancelled changes nothing and is RMQS_OK with that job);
 *   - RMQS_ECONFLICT: the job is not in the status the kind applies to
 *     (publishing, held by the dispatcher, sent, failed; or cancelled, for
 *     a reschedule or a run; anything but failed, for a retry): nothing
 *     changed and *out gets the job as it is, so the caller can say why
 *     without reading it again (a held job shows as publishing, like
 *     store_get; if it vanished meanwhile *out stays zeroed: id[0] == 0);
 *   - RMQS_ENOTFOUND (no such job, or id malformed), RMQS_EINVAL (kind out
 *     of range), or a database failure: *out zeroed.
 * The caller clears *out in every case (job_clear on a zeroed job is fine).
 */
rmqs_rc store_update(store_t *st, const char *id, const store_change *ch,
                     int64_t now_ms, job_t *out);

/* Most jobs store_update_batch changes in one transaction. */
#define STORE_BATCH_MAX 500

/*
 * A bulk action's page: apply ch (CANCEL or RETRY) to each of the n (<=
 * STORE_BATCH_MAX) jobs ids[i] (id text, borrowed) that is in the status
 * the kind applies to, at now_ms, all in ONE durable transaction, with the
 * status counts moved in it. changed[i] (out) says whether job i was
 * changed; one held by the dispatcher, gone, malformed, or in another
 * status (a cancelled one, for a cancel, too) is left alone. *n_changed
 * gets how many were. On a database failure nothing changed (every
 * changed[i] false). RMQS_EINVAL for another kind or n too large.
 */
rmqs_rc store_update_batch(store_t *st, const char *const *ids, size_t n,
                           const store_change *ch, int64_t now_ms,
                           bool *changed, size_t *n_changed);

/* store_update with a RESCHEDULE to deliver_at (delay_ms recorded). */
rmqs_rc store_reschedule(store_t *st, const char *id, int64_t deliver_at,
                         int64_t delay_ms, int64_t now_ms, job_t *out);

/* store_update with a CANCEL. */
rmqs_rc store_cancel(store_t *st, const char *id, int64_t now_ms, job_t *out);

/* Earliest due_at among pending jobs not held by store_claim_ahead: *any
 * false if there is none. Never waits for a write in progress. */
rmqs_rc store_next_due(store_t *st, bool *any, int64_t *due_at_out);

/* Whether other instances store jobs in this database (PostgreSQL): they
 * wake this one only for jobs due soon (store_options.wake_horizon_ms), so
 * its dispatcher looks at store_next_due again every DISP_REPLAN_MS. False
 * for SQLite, whose every writer is in this process and wakes it. */
bool store_has_peers(store_t *st);

/*
 * Claim ahead without waiting for any write in progress (the writer's
 * commit, its fsync, a checkpoint): up to limit pending jobs with due_at <=
 * due_by_ms, oldest due first, read from a WAL snapshot, are held for the
 * caller and returned as the claim will make them (publishing, attempts +
 * 1, updated_at = now_ms); *jobs_out is a malloc'd array (the caller
 * clears each job and frees it), in due order. The claim itself is
 * written by a later store_record (claims), which the caller must make for
 * every job returned. From the moment they are held:
 *   - store_update answers RMQS_ECONFLICT for them (as for a publishing
 *     job), store_get and store_list show them publishing;
 *   - no store_claim_ahead returns them again until store_record settles
 *     them (a RETRY or RELEASE makes them claimable again).
 * A job whose cancel or reschedule overlapped the read is left out, so one
 * answered 200 is never returned. After a crash before the claim is
 * written the job is still pending: claimed again (at least once).
 */
rmqs_rc store_claim_ahead(store_t *st, int64_t due_by_ms, int64_t now_ms,
                          size_t limit, job_t **jobs_out, size_t *n_out);

/* Settle claimed (publishing) jobs, all in one transaction. */
rmqs_rc store_settle(store_t *st, const store_outcome *o, size_t n,
                     int64_t now_ms);

/*
 * One transaction (no fsync, like store_settle): first write the claims of
 * jobs held by store_claim_ahead (claims: their ids; each becomes
 * publishing with attempts + 1), then settle the outcomes o as
 * store_settle; once committed, the settled jobs are no longer held. A
 * job's claim must be in this call or an earlier one than its outcome. On
 * failure nothing changed (the caller retries the same call); RMQS_EINVAL
 * (nothing done) for a malformed id or kind.
 */
rmqs_rc store_record(store_t *st, const char *const *claims, size_t n_claims,
                     const store_outcome *o, size_t n, int64_t now_ms);

/* At start-up: jobs left publishing by a crash become pending again
 * (their attempt is not counted). *n_out gets how many. */
rmqs_rc store_recover(store_t *st, size_t *n_out);

/* Set the wake callback (store_wake_fn, store_types.h: called when any
 * instance sharing the database stored or rescheduled a job). */
void store_set_wake(store_t *st, store_wake_fn fn, void *arg);

/* The database's clock minus this host's CLOCK_REALTIME, in ms, estimated
 * so that local time + offset is never ahead of the database clock: due
 * times are compared with the one clock that every instance shares. 0 for
 * SQLite (one host, one clock). */
int64_t store_clock_offset_ms(store_t *st);

/* Database-clock ms until which every claim this instance holds is known
 * to be its own: the end of the lease its last renewal wrote (a backend
 * shared by instances renews its claims' leases in the background), 0 if
 * there is none. A claimed job's claim holds until the later of this and
 * its job_t.lease_until; a publisher checks that before each publish, so
 * an instance that was frozen past its lease does not publish what
 * another instance has taken over. */
int64_t store_lease_renewed_until(store_t *st);

/* Database-clock ms: a claim made before it (its job_t.updated_at, the
 * claim time) may have passed to another instance whatever its lease says,
 * because this instance lost the database session that marked it alive
 * (PostgreSQL: store_pg_presence.c); INT64_MAX while it has none, INT64_MIN
 * for a backend whose claims hold until their lease (SQLite: always). A
 * publisher checks it with the lease before each publish. */
int64_t store_claims_valid_since(store_t *st);

/* ------------------------------------------------------------------------ */
/* Flow control (issue 23; flow/flow.h): the token buckets of the limits.
 * On a store several instances share (PostgreSQL), every bucket is a row:
 * store_buckets_update locks the n buckets (created full if new), reads
 * their state into b[], calls fn(cls, b, n), which decides and updates
 * b[], and stores what it left, in one transaction, so each limit's rate
 * holds for the sum of the instances. Buckets idle for a minute, and those
 * of limits that are gone, are deleted on the way. RMQS_OK; a store
 * error (fn may have run: its decisions were not stored). On a store of
 * one instance (SQLite) the caller's own buckets are the truth:
 * store_buckets_shared is false and store_buckets_update calls fn on b as
 * given. now_ms: the dispatcher's clock (disp_now). */
bool store_buckets_shared(store_t *st);
rmqs_rc store_buckets_update(store_t *st, store_bucket *b, size_t n,
                             int64_t now_ms, store_bucket_fn fn, void *cls);

/* Recurring schedules (issue 13). The store keeps the schedules and makes
 * their runs as jobs (source JOB_SOURCE_SCHEDULE, schedule = the name,
 * fire_at = the fire time, id derived from (name, generation, fire time)
 * by the caller); the spec is opaque text here (the HTTP layer's canonical
 * JSON), the fire times are the caller's (cron.h). Schedules survive their
 * jobs and jobs survive their schedule (a DELETE leaves its runs alone). */

/* Create or replace by name, in one durable transaction. *created: it did
 * not exist (stored with generation 1, whatever s->generation). If it
 * exists with the same spec, nothing changes (*unchanged = true, *out the
 * row). Otherwise the row is replaced with s: spec, updated_at, paused,
 * next_fire_at, last_fire_at, last_job_id as given, generation = old + 1,
 * created_at kept. *out (may be NULL) the row as stored (caller clears).
 * created/unchanged may be NULL. RMQS_EINVAL for a NULL/empty name or a
 * NULL spec. A replace computed from a row read earlier races the
 * scheduler's advances: the store takes s as it is (the caller cancels
 * runs and recomputes next_fire_at). */
rmqs_rc store_schedule_put(store_t *st, const store_schedule *s, bool *created,
                           bool *unchanged, store_schedule *out);

/* Compare-and-set update of spec, paused, next_fire_at and updated_at (from
 * s; s->name names the row) for PATCH: only if the stored generation is
 * expect_generation, else RMQS_ECONFLICT (nothing changed; the caller
 * re-reads and retries); the stored generation becomes
 * expect_generation + 1. RMQS_ENOTFOUND if there is no such schedule.
 * *out (may be NULL) the row as stored. One durable transaction. */
rmqs_rc store_schedule_update(store_t *st, const store_schedule *s,
                              int64_t expect_generation, store_schedule *out);

/* Load one by name into *out (caller clears). RMQS_ENOTFOUND. */
rmqs_rc store_schedule_get(store_t *st, const char *name, store_schedule *out);

/* A page of at most limit (>= 1, else RMQS_EINVAL) schedules in name order
 * (bytewise) after the name `after` (NULL: from the first), within
 * store_options.page_max_bytes as store_list (a schedule's bytes: its name
 * and spec, which holds the job template and its body). *rows a
 * malloc'd array of *n (store_schedules_free); *next_out a malloc'd name
 * cursor (the last name of this page) or NULL on the last page. */
rmqs_rc store_schedule_list(store_t *st, size_t limit, const char *after,
                            store_schedule **rows, size_t *n, char **next_out);

/* Delete one (durable); its jobs stay. RMQS_ENOTFOUND. */
rmqs_rc store_schedule_delete(store_t *st, const char *name);

/* Active (not paused, next_fire_at >= 0) schedules with next_fire_at <=
 * by_ms, earliest first (then by name), at most limit, with
 * last_job_status. A plain read: PostgreSQL instances may read the same
 * rows; store_schedule_advance's compare-and-set decides who wins. */
rmqs_rc store_schedule_due(store_t *st, int64_t by_ms, size_t limit,
                           store_schedule **rows, size_t *n);

/* Earliest next_fire_at of active schedules; *any false if none. */
rmqs_rc store_schedule_next_at(store_t *st, bool *any, int64_t *at);

/*
 * One durable transaction over n advances. Each: UPDATE schedules SET
 * next_fire_at = new_next (-1: ended), and when job != NULL last_fire_at =
 * job->fire_at, last_job_id = job->id, WHERE name AND generation AND
 * next_fire_at = old_next (compare-and-set; no row: a->applied = false and
 * nothing else for it); then, if applied and job != NULL, insert the job
 * unless its id exists already (a->job_existed = true: nothing inserted,
 * the schedule still advanced). The job is inserted as store_insert would
 * (its fields as given: the caller sets status pending, source
 * JOB_SOURCE_SCHEDULE, schedule, fire_at, expires_at). A job refused by the
 * schema (RMQS_EINVAL) or a database failure fails the whole call: nothing
 * of any advance is kept, every applied/job_existed false.
 *
 * Waking the dispatcher: PostgreSQL sends the same NOTIFY as any insert at
 * COMMIT (every instance's dispatcher wakes, this one's too, through
 * store_set_wake). SQLite has no such path (the HTTP layer and the writer
 * call disp_notify themselves after their commits): the caller must call
 * disp_notify(d, earliest due_at of the jobs inserted) after this returns
 * RMQS_OK. Calling it on PostgreSQL too is harmless (and saves the NOTIFY
 * round trip). A pending run is then claimed like any job, with the
 * claimset rules of store.c (a held run answers store_cancel with
 * RMQS_ECONFLICT, as any publishing job).
 *
 * PostgreSQL: each schedule row is locked FOR UPDATE SKIP LOCKED first; a
 * row another instance is advancing right now is skipped (applied =
 * false), so instances never wait for each other. now_ms: unused by the
 * stores today (kept for the contract; the caller's clock).
 */
rmqs_rc store_schedule_advance(store_t *st, store_advance *a, size_t n,
                               int64_t now_ms);

/*
 * The recent runs of the n schedules names[] at now_ms (GET /schedules,
 * issue 25), each into out[i] (caller clears each; zeroed first,
 * last_fire_at/last_status -1; on failure all cleared):
 * the last run whose time has come (the latest by (deliver_at, seq) with
 * deliver_at <= now_ms, whatever its status: runs created ahead of their
 * fire time are not "last" yet), and the failure streak: how many of the
 * latest finished runs (sent or failed; pending, publishing and cancelled
 * ones are skipped) failed in a row, newest first, read up to
 * STORE_STREAK_CAP + 1 (streak_capped when all of those failed). One
 * indexed read over two indexes (jobs_schedule, jobs_schedule_done) per
 * schedule: at most STORE_STREAK_CAP + 2 index entries each, however many
 * runs it has; a page of names is one statement on PostgreSQL (one round
 * trip), one lock hold on SQLite. A name with no runs: has_last false,
 * streak 0. Runs outlive their schedule, so a schedule made again under an
 * old name sees the old runs.
 */
rmqs_rc store_schedule_recent(store_t *st, const char *const *names, size_t n,
                              int64_t now_ms, store_run_outcome *out);

/* Schedules by state (indexed by store_schedule_state), for
 * rmqs_schedules{state}: a count over the schedules table. */
rmqs_rc store_schedule_counts(store_t *st, int64_t counts[3]);

/* ------------------------------------------------------------------------ */
/* Flow limits (issue 23). The store keeps each limit by name with its spec,
 * opaque text here (limit.h's canonical JSON, which the caller validates),
 * and a generation that counts its effective changes. Every write is one
 * durable transaction. A limit holds no job and no job refers to one. */

/*
 * Create or replace by name at now_ms. If it exists with the same spec,
 * nothing changes (*unchanged = true: generation and times as they were);
 * another spec replaces it (generation + 1, updated_at = now_ms,
 * created_at kept); a new name is stored with generation 1 and both times
 * now_ms (*created = true), unless the store already keeps max_limits
 * limits (>= 1; 0 or less: no cap): then RMQS_ECONFLICT and nothing
 * changes. The cap is counted in the transaction of the insert (on
 * PostgreSQL under a lock that creations by any instance take), so
 * creations racing at the cap never pass it. Replacing is never capped.
 * *out (may be NULL) the row as stored (caller clears); created/unchanged
 * may be NULL. RMQS_EINVAL for a NULL or empty name or a NULL spec.
 */
rmqs_rc store_limit_put(store_t *st, const char *name, const char *spec,
                        int64_t now_ms, int64_t max_limits, bool *created,
                        bool *unchanged, store_limit *out);

/* Compare-and-set replace of spec (PATCH): only if the stored generation
 * is expect_generation, else RMQS_ECONFLICT (nothing changed; the caller
 * re-reads and retries); generation becomes expect_generation + 1,
 * updated_at now_ms. RMQS_ENOTFOUND if there is no such limit. *out (may
 * be NULL) the row as stored. */
rmqs_rc store_limit_update(store_t *st, const char *name, const char *spec,
                           int64_t expect_generation, int64_t now_ms,
                           store_limit *out);

/* Load one by name into *out (caller clears). RMQS_ENOTFOUND. */
rmqs_rc store_limit_get(store_t *st, const char *name, store_limit *out);

/* Every limit in name order (bytewise): a malloc'd array of *n in *rows
 * (store_limits_free; NULL when there is none). No paging: there are at
 * most the cap of store_limit_put. */
rmqs_rc store_limit_list(store_t *st, store_limit **rows, size_t *n);

/* Delete one (durable). RMQS_ENOTFOUND. */
rmqs_rc store_limit_delete(store_t *st, const char *name);

/* Embedded migrations generated from migrations/sqlite/ at build time. */
extern const store_migration store_builtin_migrations[];
extern const size_t store_builtin_migrations_count;
/* And from migrations/postgres/ (store_open picks the list for the
 * backend the target names). */
extern const store_migration store_pg_migrations[];
extern const size_t store_pg_migrations_count;

#endif
