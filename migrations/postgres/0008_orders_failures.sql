-- 0008_orders_failures.sql - lists newest first, and failed jobs an
-- operator can triage (issue 25), as migrations/sqlite/0010_orders_failures.sql:
--
--   failed_at       ms: when the job's attempts ran out (status 3); NULL
--                   otherwise (a client's retry clears it); updated_at for
--                   the jobs failed before this migration;
--   attempt_errors  jsonb array of the last 10 failed attempts, oldest
--                   first: [{"attempt", "at" (ms), "error" (at most 512
--                   characters)}...], or NULL; appended by the settle of a
--                   failed attempt (store_pg_dispatch.c), which drops the
--                   oldest beyond 10. Read by GET /jobs/{id} only.
--
-- Indexes: GET /jobs?order=created|-created walks the primary key (seq)
-- alone, jobs_status_seq with a status, jobs_schedule_seq with a schedule;
-- order=-due walks the (deliver_at, seq) btrees of 0001-0003 backwards.
-- GET /stats/failures reads the newest failed jobs by jobs_failed_at
-- (partial: failed jobs only).
ALTER TABLE jobs ADD COLUMN failed_at bigint;
ALTER TABLE jobs ADD COLUMN attempt_errors jsonb;
UPDATE jobs SET failed_at = updated_at WHERE status = 3;

CREATE INDEX jobs_status_seq ON jobs (status, seq);
CREATE INDEX jobs_schedule_seq ON jobs (schedule, seq)
    WHERE schedule IS NOT NULL;
CREATE INDEX jobs_failed_at ON jobs (failed_at) WHERE status = 3;
