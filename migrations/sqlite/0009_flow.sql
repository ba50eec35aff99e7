-- 0009_flow.sql - flow control at dispatch (issue 23): a job's priority,
-- its place among jobs due at the same ms, and what a limit did to it.
--
--   priority    0-9, default 0: of jobs due at the same time, or held by a
--               limit, the higher goes first (never before its due time);
--   claim_rank  the dispatcher's order among jobs due at the same ms,
--               lowest first: -priority * 2^32 + the job's rank among the
--               --fair-key's jobs due then (service/flow/fair.c), so that
--               with a fair key those jobs go out round-robin across the
--               key's values; 0 for every job written before;
--   held_by     the limit that last held the job back (with status 0, it
--               holds it now: its due_at is when the limit lets it go);
--   held_ms     how long limits have held it back in all (its due_at moved
--               this much later), so lateness splits into the service's
--               own (sent_at - due_at) and the limits' (held_ms).
--
-- The dispatcher's scan (jobs_due, 0001) orders by (due_at, claim_rank) and
-- then insertion (the rowid, seq), so the index is rebuilt with the rank.
-- held_by is indexed for GET /jobs?held_by= and the held-jobs gauge: only
-- the rows that have one.
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0
    CHECK (priority BETWEEN 0 AND 9);
ALTER TABLE jobs ADD COLUMN claim_rank INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN held_by TEXT;
ALTER TABLE jobs ADD COLUMN held_ms INTEGER NOT NULL DEFAULT 0;

DROP INDEX jobs_due;
CREATE INDEX jobs_due ON jobs (due_at, claim_rank) WHERE status = 0;
CREATE INDEX jobs_held_by ON jobs (held_by, deliver_at, seq)
    WHERE held_by IS NOT NULL;
