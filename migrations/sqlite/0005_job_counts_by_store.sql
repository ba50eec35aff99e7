-- job_counts is kept by service/store.c from now on, not by triggers.
--
-- The three triggers of 0002 ran an UPDATE of job_counts for every row
-- inserted, changed or deleted, and made every INSERT keep a statement
-- journal inside the per-request savepoint of a group commit: measured, they
-- halved the insert rate of 1000-job requests (one-job requests: 5-10% more
-- CPU per row). The store now adds up, per status, what each of its own
-- statements did to jobs (rows inserted, claimed, settled, cancelled,
-- recovered, purged) and applies those sums with one UPDATE per status just
-- before COMMIT, in the same transaction.
--
-- Consequence: anything that writes jobs behind the store's back (the
-- sqlite3 CLI, a restore script) must update job_counts itself in the same
-- transaction (tests/bench/bench.py fill_sql does).
--
-- This file counts once: it drops the triggers and recomputes every row of
-- job_counts exactly from jobs (each count is a range of the
-- jobs_status_deliver index: 2 million jobs took 0.1 s on the test VM).
-- It runs in the migration's transaction, so no change to jobs can slip in
-- between the count and the first delta the store applies.

DROP TRIGGER IF EXISTS job_counts_insert;
DROP TRIGGER IF EXISTS job_counts_update;
DROP TRIGGER IF EXISTS job_counts_delete;

-- OR REPLACE: every status gets its row, even one somebody deleted, so the
-- store's "UPDATE job_counts ... WHERE status = ?" always finds it.
INSERT OR REPLACE INTO job_counts (status, n)
SELECT s.status, (SELECT count(*) FROM jobs WHERE jobs.status = s.status)
FROM (SELECT 0 AS status UNION ALL SELECT 1 UNION ALL SELECT 2
      UNION ALL SELECT 3 UNION ALL SELECT 4) AS s;
