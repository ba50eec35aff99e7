-- 0001_init.sql - the PostgreSQL schema of the store (service/store_pg*.c):
-- the same jobs as migrations/sqlite/ (0001-0005 folded into one), plus what
-- several instances sharing one database need: the owner and lease of a
-- claimed job, and job counts kept per slot instead of in one hot row.
--
-- Applied at open by the runner in service/store_pg.c, under an advisory
-- lock (N instances starting at once migrate once), in one transaction with
-- its schema_migrations row: no BEGIN/COMMIT here. Never edit a migration
-- that has shipped: add NNNN_next_step.sql instead.
--
-- Times are bigint milliseconds since the Unix epoch (UTC). due_at and
-- lease_until are compared with the database's clock (store_pg_dispatch.c).

CREATE TABLE jobs (
    seq          bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                          -- insertion order; list cursor, due tie-break
    id           bytea    NOT NULL UNIQUE CHECK (length(id) = 16),
                          -- binary UUIDv7
    status       smallint NOT NULL CHECK (status BETWEEN 0 AND 4),
                          -- 0 pending, 1 publishing, 2 sent, 3 failed,
                          -- 4 cancelled (enum job_status in service/job.h)
    exchange     text     NOT NULL,           -- '' is the default exchange
    routing_key  text     NOT NULL,
    deliver_at   bigint   NOT NULL,           -- requested delivery time
    due_at       bigint   NOT NULL,           -- next attempt (after back-off)
    delay_ms     bigint   NOT NULL,
    created_at   bigint   NOT NULL,
    updated_at   bigint   NOT NULL,
    sent_at      bigint,                      -- NULL until sent
    attempts     integer  NOT NULL DEFAULT 0,
    max_attempts integer  NOT NULL CHECK (max_attempts >= 1),
    last_error   text,                        -- NULL if none
    headers      text,                        -- compact JSON object or NULL
    properties   text,                        -- compact JSON object or NULL
    body_kind    smallint NOT NULL CHECK (body_kind BETWEEN 0 AND 2),
    body         bytea    NOT NULL,           -- bytes to publish (may be empty)
    source       smallint NOT NULL DEFAULT 0 CHECK (source IN (0, 1)),
    message_id   text,                        -- the message_id property
    owner        text,                        -- publishing: the instance id
    lease_until  bigint                       -- publishing: database-clock ms
);

-- The claim (FOR UPDATE SKIP LOCKED): pending jobs in due order. Partial, so
-- it holds only pending jobs however many finished ones accumulate.
CREATE INDEX jobs_due ON jobs (due_at, seq) WHERE status = 0;
-- Lease renewal and reclaim: the few publishing jobs, by lease.
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE status = 1;
-- Listing (GET /jobs): by status, or all, in (deliver_at, seq) order.
CREATE INDEX jobs_status_deliver ON jobs (status, deliver_at, seq);
CREATE INDEX jobs_deliver ON jobs (deliver_at, seq);
-- Retention purge: finished jobs (sent 2, failed 3, cancelled 4) by age.
CREATE INDEX jobs_finished ON jobs (updated_at) WHERE status >= 2;
-- GET /jobs?message_id=
CREATE INDEX jobs_message_id ON jobs (message_id) WHERE message_id IS NOT NULL;

-- Idempotency-Key -> the job it created, with the canonical request (a
-- different request under the same key is a conflict). The primary key makes
-- a key unique across instances: INSERT ... ON CONFLICT DO NOTHING waits for
-- a racing transaction holding the same key. The reference is checked at
-- COMMIT, so the key is inserted before its job in the same transaction.
CREATE TABLE idempotency (
    key     text  PRIMARY KEY,
    job_id  bytea NOT NULL REFERENCES jobs (id) ON DELETE CASCADE
                  DEFERRABLE INITIALLY DEFERRED,
    request text  NOT NULL
);
CREATE INDEX idempotency_job ON idempotency (job_id);

-- Jobs by status without one hot row: each connection of each instance adds
-- its transaction's deltas to its own slot (0..63) in the transaction of the
-- change; GET /metrics sums the slots. Slots may be negative on their own.
CREATE TABLE job_counts (
    slot   smallint NOT NULL CHECK (slot BETWEEN 0 AND 63),
    status smallint NOT NULL CHECK (status BETWEEN 0 AND 4),
    n      bigint   NOT NULL,
    PRIMARY KEY (slot, status)
);
