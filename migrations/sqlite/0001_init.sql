-- 0001_init.sql - the first schema: jobs, their indexes, idempotency keys.
--
-- Applied by the migration runner in service/store.c inside one
-- BEGIN IMMEDIATE transaction together with its schema_migrations row, so a
-- migration file must not contain BEGIN/COMMIT/ROLLBACK (nor PRAGMAs that
-- cannot run inside a transaction). schema_migrations is created by the
-- runner itself, not here. Never edit a migration that has shipped: add
-- NNNN_next_step.sql instead.
--
-- Times are INTEGER milliseconds since the Unix epoch (UTC).

CREATE TABLE jobs (
    seq          INTEGER PRIMARY KEY,          -- insertion order; list cursor
    id           BLOB    NOT NULL UNIQUE
                         CHECK (length(id) = 16), -- binary UUIDv7
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
    body         BLOB    NOT NULL              -- bytes to publish (may be empty)
);

-- The dispatcher's scan: pending jobs by due time. Partial, so it holds only
-- the pending jobs and stays small however many sent jobs accumulate. The
-- queries that must use it name it (INDEXED BY jobs_due) and write the
-- literal "status = 0": with a bound status the planner cannot prove the
-- index's WHERE clause.
CREATE INDEX jobs_due ON jobs (due_at) WHERE status = 0;

-- Listing (GET /jobs): by status, or all, in (deliver_at, seq) order.
CREATE INDEX jobs_status_deliver ON jobs (status, deliver_at, seq);
CREATE INDEX jobs_deliver ON jobs (deliver_at, seq);

-- Idempotency-Key -> the job it created, with the canonical request it was
-- created from (a different request under the same key is a conflict).
CREATE TABLE idempotency (
    key     TEXT    PRIMARY KEY,
    job_seq INTEGER NOT NULL REFERENCES jobs (seq) ON DELETE CASCADE,
    request TEXT    NOT NULL
);
-- Lets ON DELETE CASCADE find a job's key without a scan (job retention).
CREATE INDEX idempotency_job ON idempotency (job_seq);
