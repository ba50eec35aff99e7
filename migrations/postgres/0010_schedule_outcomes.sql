-- 0010_schedule_outcomes.sql - a schedule's failure streak read in a bounded
-- number of index entries (issue 25; store_schedule_recent in
-- service/store/pg/store_pg_schedules.c; as
-- migrations/sqlite/0012_schedule_outcomes.sql).
--
-- GET /schedules shows each schedule's last run and how many of its latest
-- finished runs (sent or failed) failed in a row, counted up to 100. Read
-- through jobs_schedule (0002), the runs still pending, publishing or
-- cancelled would be stepped over one by one; this index holds only the
-- finished runs of schedules, with their status, so the streak is at most
-- 101 entries of it, for a schedule of a million runs as for one of ten.
-- 2 sent, 3 failed (enum job_status in service/job/job.h).
CREATE INDEX jobs_schedule_done ON jobs (schedule, deliver_at, seq)
    INCLUDE (status) WHERE schedule IS NOT NULL AND status IN (2, 3);
