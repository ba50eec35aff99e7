-- 0010_orders_failures.sql - lists newest first, and failed jobs an
-- operator can triage (issue 25).
--
--   failed_at       ms: when the job's attempts ran out (status 3, failed);
--                   NULL for every other status (a client's retry clears
--                   it). Jobs failed before this migration get their
--                   updated_at, the time of the change that failed them.
--   attempt_errors  compact JSON array of the last 10 failed attempts,
--                   oldest first: [{"attempt": n, "at": ms, "error":
--                   text of at most 512 characters}...], or NULL if none.
--                   Appended by the settle of a failed attempt
--                   (store_sqlite_core.c, S_SETTLE_RETRY and S_SETTLE_FAIL),
--                   which drops the oldest beyond 10: bounded per job.
--                   Read by GET /jobs/{id} only, never by a list.
--
-- Indexes:
--   - GET /jobs?order=created|-created walks insertion order: the rowid
--     (seq) alone, jobs_status_seq with a status, jobs_schedule_seq with a
--     schedule (a schedule's runs in the order they were created);
--     order=-due walks jobs_deliver, jobs_status_deliver and jobs_schedule
--     (0001, 0006) backwards, so it needs none;
--   - GET /stats/failures reads the most recent failed jobs by failed_at:
--     jobs_failed_at, partial (failed jobs only), so it stays small however
--     many jobs are sent.
ALTER TABLE jobs ADD COLUMN failed_at INTEGER;
ALTER TABLE jobs ADD COLUMN attempt_errors TEXT;
UPDATE jobs SET failed_at = updated_at WHERE status = 3;

CREATE INDEX jobs_status_seq ON jobs (status, seq);
CREATE INDEX jobs_schedule_seq ON jobs (schedule, seq)
    WHERE schedule IS NOT NULL;
CREATE INDEX jobs_failed_at ON jobs (failed_at) WHERE status = 3;
