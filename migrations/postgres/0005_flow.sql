-- 0005_flow.sql - flow control at dispatch (issue 23): a job's priority,
-- its place among jobs due at the same ms, and what a limit did to it.
-- The same columns as SQLite's 0009_flow.sql, which says what each means.
--
-- The dispatcher's claim orders by (due_at, claim_rank, seq), so jobs_due
-- (0001) is rebuilt with the rank.
--
-- limit_buckets: the limits' token buckets, shared by every instance
-- (service/store/pg/store_pg_buckets.c): GCRA's theoretical arrival time,
-- in microseconds on the database's clock; "" is the key of an unkeyed
-- limit (and of a keyed limit's overflow bucket).
ALTER TABLE jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0
    CHECK (priority BETWEEN 0 AND 9);
ALTER TABLE jobs ADD COLUMN claim_rank bigint NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN held_by text;
ALTER TABLE jobs ADD COLUMN held_ms bigint NOT NULL DEFAULT 0;

DROP INDEX jobs_due;
CREATE INDEX jobs_due ON jobs (due_at, claim_rank, seq) WHERE status = 0;
CREATE INDEX jobs_held_by ON jobs (held_by, deliver_at, seq)
    WHERE held_by IS NOT NULL;

CREATE TABLE limit_buckets (
    limit_name text   NOT NULL,
    key        text   NOT NULL,
    tat_us     bigint NOT NULL,
    PRIMARY KEY (limit_name, key)
);
