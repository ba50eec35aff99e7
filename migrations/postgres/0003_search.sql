-- 0003_search.sql - search and filtering of jobs at 10 million (issue 14),
-- as migrations/sqlite/0007_search.sql: GET /jobs and GET /jobs/count
-- filter on exchange, routing key, due-time range, id prefix, a header's
-- value and a substring of the body, each from an index
-- (service/store_pg_search.c builds the queries; the plan tests are
-- tests/unit/test_store_pg_search.c).
--
--   - exchange, routing_key and source lead a btree in listing order;
--   - id_prefix is a range of the id's unique index (0001);
--   - deliver_from/deliver_to are ranges of jobs_deliver or
--     jobs_status_deliver (0001);
--   - header=name:value is jsonb containment (headers @> '{"name":
--     "value"}') on a GIN jsonb_path_ops index: top-level string values
--     only, as SQLite's job_headers;
--   - q (a body substring, case-sensitive) is a pg_trgm GIN index of the
--     text and JSON bodies (body_kind 0, 1) in encode(body, 'escape')
--     form: the text as it is, with backslashes doubled and NUL and
--     non-ASCII bytes as \ooo octal, so any body can be indexed (text may
--     hold U+0000, which a PostgreSQL text cannot). The search looks for q
--     escaped the same way with LIKE (the index's candidates), then
--     compares the body's bytes (position(), exact).
--
-- The two GIN indexes are not on jobs but on job_text, a side table
-- filled off the insert path (issue 14: on jobs they cut POST
-- /schedule/batch from 120k to 35k jobs/s, tests/bench/README.md
-- "search"): service/store_pg_indexer.c copies the jobs above
-- search_index.mark, in seq order, in batches, one instance at a time (an
-- advisory lock), and moves the mark. A search reads job_text for seq <=
-- mark and checks the jobs above it directly, so results are exact at any
-- lag. seq is an identity: a transaction may commit a lower seq after a
-- higher one, so the indexer never passes a seq that an insert still in
-- progress may hold: every transaction that inserts jobs takes
-- pg_advisory_xact_lock_shared(hashtext('rmqs-jobs-insert')) first, and
-- the indexer reads max(seq) under the exclusive lock (a moment: it
-- waits for the inserts in progress). Anything inserting jobs behind the
-- store's back must take the same shared lock (or run with no service
-- up). Deleted jobs leave job_text by the foreign key's cascade.

-- pg_trgm ships with the server package (postgresql-15 on Debian) and is
-- a trusted extension: the database's owner may create it.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE INDEX jobs_exchange ON jobs (exchange, deliver_at, seq);
CREATE INDEX jobs_routing_key ON jobs (routing_key, deliver_at, seq);
CREATE INDEX jobs_source ON jobs (source, deliver_at, seq);
CREATE TABLE job_text (
    seq     bigint PRIMARY KEY REFERENCES jobs (seq) ON DELETE CASCADE,
    headers jsonb,  -- jobs.headers, NULL if none
    body    text    -- encode(jobs.body, 'escape') of text and JSON bodies,
                    -- NULL for binary ones
);
CREATE INDEX job_text_headers ON job_text USING gin (headers jsonb_path_ops)
    WHERE headers IS NOT NULL;
CREATE INDEX job_text_body ON job_text USING gin (body gin_trgm_ops)
    WHERE body IS NOT NULL;

-- One row: every job with seq <= mark is in job_text.
CREATE TABLE search_index (
    id   integer PRIMARY KEY CHECK (id = 1),
    mark bigint  NOT NULL
);
INSERT INTO search_index (id, mark) VALUES (1, 0);
