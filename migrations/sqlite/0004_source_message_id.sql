-- Where a job came from (0 HTTP, 1 AMQP ingest: enum job_source in
-- service/job.h) and its message_id property, so GET /jobs can filter on
-- both; message_id is indexed only where it is set.
ALTER TABLE jobs ADD COLUMN source INTEGER NOT NULL DEFAULT 0
    CHECK (source IN (0, 1));
ALTER TABLE jobs ADD COLUMN message_id TEXT;
CREATE INDEX jobs_message_id ON jobs (message_id) WHERE message_id IS NOT NULL;
