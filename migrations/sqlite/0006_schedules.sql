-- 0006_schedules.sql - recurring schedules (issue 13): the schedules table,
-- and jobs that know which schedule run they are.
--
-- jobs gains schedule (the schedule's name, NULL for other jobs), fire_at
-- (the fire time the run is for, NULL for other jobs) and expires_at (a job
-- claimed after it is cancelled instead of published; NULL: never), and
-- source may now be 2 (enum job_source JOB_SOURCE_SCHEDULE in
-- service/job.h). SQLite cannot change a CHECK constraint in place, so jobs
-- is rebuilt: a new table with every column of 0001-0004 plus the three new
-- ones, the rows copied with their seq (the insertion order, the list
-- cursor and idempotency's reference all stay valid), the old table
-- dropped, the new one renamed, and every index of 0001, 0003 and 0004
-- made again. No trigger is on jobs (0005 dropped the counting triggers;
-- the store counts), and job_counts does not change: the same rows with
-- the same statuses.
--
-- idempotency references jobs (seq) ON DELETE CASCADE and the store opens
-- with foreign_keys = ON, which a migration (inside the runner's
-- transaction) cannot turn off: dropping jobs while idempotency refers to it
-- would delete every key by cascade, one row at a time. So the keys are set
-- aside, idempotency is dropped first (then jobs has no child and drops at
-- once) and made again exactly as 0001 made it, with its keys.
--
-- Speed: the copy goes into a table without the UNIQUE on id, whose index
-- (jobs_id: the same constraint) is then built in one sorted pass. Measured
-- on the test VM with 1M jobs (240 MB, 100-byte bodies, random ids, 100k
-- keys): inserting the ids into a unique index row by row took 9.7 s and
-- dropping jobs while idempotency referred to it 12.1 s, 25.8 s in all;
-- this way 6.9 s (copy 2.6 s, the id index 1.1 s, the other indexes 1.9 s,
-- COMMIT 1.0 s). The store is not open meanwhile (migrations run at open).

CREATE TABLE idempotency_0006 AS SELECT key, job_seq, request FROM idempotency;
DROP TABLE idempotency;

CREATE TABLE jobs_0006 (
    seq          INTEGER PRIMARY KEY,          -- insertion order; list cursor
    id           BLOB    NOT NULL
                         CHECK (length(id) = 16), -- binary UUID (unique:
                                                  -- jobs_id below)
    status       INTEGER NOT NULL
                         CHECK (status BETWEEN 0 AND 4),
                         -- 0 pending, 1 publishing, 2 sent, 3 failed,
                         -- 4 cancelled (enum job_status in service/job.h)
    exchange     TEXT    NOT NULL,             -- '' is the default exchange
    routing_key  TEXT    NOT NULL,
    deliver_at   INTEGER NOT NULL,             -- requested delivery time
    due_at       INTEGER NOT NULL,             -- next attempt (after back-off)
    delay_ms     INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    sent_at      INTEGER,                      -- NULL until sent
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
    last_error   TEXT,                         -- NULL if none
    headers      TEXT,                         -- compact JSON object or NULL
    properties   TEXT,                         -- compact JSON object or NULL
    body_kind    INTEGER NOT NULL
                         CHECK (body_kind BETWEEN 0 AND 2), -- job_body_kind
    body         BLOB    NOT NULL,             -- bytes to publish (may be empty)
    source       INTEGER NOT NULL DEFAULT 0
                         CHECK (source IN (0, 1, 2)),
                         -- 0 HTTP, 1 AMQP ingest, 2 schedule (job_source)
    message_id   TEXT,                         -- the message_id property
    schedule     TEXT,                         -- the schedule's name, or NULL
    fire_at      INTEGER,                      -- the run's fire time, or NULL
    expires_at   INTEGER                       -- not published after it
                                               -- (NULL: never)
);

INSERT INTO jobs_0006 (seq, id, status, exchange, routing_key, deliver_at,
                       due_at, delay_ms, created_at, updated_at, sent_at,
                       attempts, max_attempts, last_error, headers,
                       properties, body_kind, body, source, message_id)
SELECT seq, id, status, exchange, routing_key, deliver_at, due_at, delay_ms,
       created_at, updated_at, sent_at, attempts, max_attempts, last_error,
       headers, properties, body_kind, body, source, message_id
FROM jobs;

DROP TABLE jobs;
ALTER TABLE jobs_0006 RENAME TO jobs;
CREATE UNIQUE INDEX jobs_id ON jobs (id);

-- idempotency as 0001 made it, with its keys.
CREATE TABLE idempotency (
    key     TEXT    PRIMARY KEY,
    job_seq INTEGER NOT NULL REFERENCES jobs (seq) ON DELETE CASCADE,
    request TEXT    NOT NULL
);
INSERT INTO idempotency (key, job_seq, request)
SELECT key, job_seq, request FROM idempotency_0006;
DROP TABLE idempotency_0006;
CREATE INDEX idempotency_job ON idempotency (job_seq);

-- The indexes of 0001, 0003 and 0004, as they were (see there).
CREATE INDEX jobs_due ON jobs (due_at) WHERE status = 0;
CREATE INDEX jobs_status_deliver ON jobs (status, deliver_at, seq);
CREATE INDEX jobs_deliver ON jobs (deliver_at, seq);
CREATE INDEX jobs_finished ON jobs (updated_at) WHERE status >= 2;
CREATE INDEX jobs_message_id ON jobs (message_id) WHERE message_id IS NOT NULL;
-- GET /jobs?schedule=<name>: a schedule's runs in listing order.
CREATE INDEX jobs_schedule ON jobs (schedule, deliver_at, seq)
    WHERE schedule IS NOT NULL;

-- One row per schedule (service/store_sqlite_schedules.c). spec is the
-- canonical JSON of the accepted PUT body; generation counts its effective
-- changes (run ids are derived from it). next_fire_at is the next fire time
-- whose run is not created yet (NULL: ended); last_fire_at / last_job_id
-- the last run created (NULL: none). paused 0/1.
CREATE TABLE schedules (
    name         TEXT    PRIMARY KEY,
    spec         TEXT    NOT NULL,
    generation   INTEGER NOT NULL CHECK (generation >= 1),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    paused       INTEGER NOT NULL CHECK (paused IN (0, 1)),
    next_fire_at INTEGER,
    last_fire_at INTEGER,
    last_job_id  BLOB    CHECK (last_job_id IS NULL OR length(last_job_id) = 16)
) WITHOUT ROWID;

-- The scheduler's scan: active schedules by next fire time. The queries
-- that must use it write the literal "paused = 0 AND next_fire_at IS NOT
-- NULL" (as jobs_due's "status = 0").
CREATE INDEX schedules_due ON schedules (next_fire_at, name)
    WHERE paused = 0 AND next_fire_at IS NOT NULL;
