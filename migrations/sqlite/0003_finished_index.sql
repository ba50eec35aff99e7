-- Finished jobs (sent 2, failed 3, cancelled 4) by the time they finished,
-- so the retention purge finds the oldest ones without scanning pending
-- jobs. Pending and publishing jobs are not in this index at all.
CREATE INDEX jobs_finished ON jobs (updated_at) WHERE status >= 2;
