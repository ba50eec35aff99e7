-- 0011_schedule_outcomes.sql - a schedule's failure streak read in a bounded
-- number of index entries (issue 25; store_schedule_recent in
-- service/store/sqlite/store_sqlite_schedules.c).
--
-- GET /schedules shows each schedule's last run and how many of its latest
-- finished runs (sent or failed) failed in a row, counted up to 100. Read
-- through jobs_schedule (0006), the runs still pending, publishing or
-- cancelled would be stepped over one by one, with a row read for each
-- status; this index holds only the finished runs of schedules, with their
-- status, so the streak is at most 101 entries of it and no row, for a
-- schedule of a million runs as for one of ten. Queries that must use it
-- write its literal "status IN (2, 3)" (2 sent, 3 failed: enum job_status
-- in service/job/job.h). seq is the rowid: the ties of one deliver_at in
-- insertion order, as the listing orders them.
CREATE INDEX jobs_schedule_done ON jobs (schedule, deliver_at, seq, status)
    WHERE schedule IS NOT NULL AND status IN (2, 3);
