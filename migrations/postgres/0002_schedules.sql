-- 0002_schedules.sql - recurring schedules (issue 13): the schedules table,
-- and jobs that know which schedule run they are (as
-- migrations/sqlite/0006_schedules.sql, which has to rebuild jobs for its
-- CHECK; here the constraint is replaced in place).
--
-- jobs gains schedule (the schedule's name, NULL for other jobs), fire_at
-- (the fire time the run is for, NULL for other jobs) and expires_at (a job
-- claimed after it is cancelled instead of published; NULL: never); source
-- may now be 2 (JOB_SOURCE_SCHEDULE in service/job.h). Adding nullable
-- columns without a default rewrites nothing.

ALTER TABLE jobs DROP CONSTRAINT jobs_source_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_source_check CHECK (source IN (0, 1, 2));
ALTER TABLE jobs ADD COLUMN schedule text;
ALTER TABLE jobs ADD COLUMN fire_at bigint;
ALTER TABLE jobs ADD COLUMN expires_at bigint;
-- GET /jobs?schedule=<name>: a schedule's runs in listing order.
CREATE INDEX jobs_schedule ON jobs (schedule, deliver_at, seq)
    WHERE schedule IS NOT NULL;

-- One row per schedule (service/store_pg_schedules.c), shared by every
-- instance: store_schedule_advance locks a row FOR UPDATE SKIP LOCKED and
-- compares (generation, next_fire_at) before moving it on, so each fire
-- time's run is created once. spec is the canonical JSON of the accepted
-- PUT body; next_fire_at NULL: ended; last_fire_at / last_job_id NULL:
-- no run yet.
CREATE TABLE schedules (
    name         text     COLLATE "C" PRIMARY KEY, -- bytewise order (paging)
    spec         text     NOT NULL,
    generation   bigint   NOT NULL CHECK (generation >= 1),
    created_at   bigint   NOT NULL,
    updated_at   bigint   NOT NULL,
    paused       boolean  NOT NULL,
    next_fire_at bigint,
    last_fire_at bigint,
    last_job_id  bytea    CHECK (last_job_id IS NULL OR length(last_job_id) = 16)
);
-- The scheduler's scan: active schedules by next fire time.
CREATE INDEX schedules_due ON schedules (next_fire_at, name)
    WHERE NOT paused AND next_fire_at IS NOT NULL;
