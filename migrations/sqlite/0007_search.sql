-- 0007_search.sql - search and filtering of jobs at 10 million (issue 14):
-- GET /jobs and GET /jobs/count filter on exchange, routing key, due-time
-- range, id prefix, a header's value and a substring of the body, alone or
-- with the status and the other filters, in (deliver_at, seq) order, each
-- from an index (service/store_sqlite_search.c builds the queries; the plan
-- tests are tests/unit/test_store_search.c).
--
-- Indexes:
--   - exchange, routing_key and source lead an index in listing order, so
--     one of them alone, or with a deliver_at range and/or a status, walks
--     its index from the cursor on (the status is checked on the way);
--   - id_prefix is a range of jobs_id (0006);
--   - deliver_from/deliver_to alone are a range of jobs_deliver or
--     jobs_status_deliver (0001);
--   - headers: job_headers, one row per string header (name, value, job),
--     whose primary key is the index of "header=name:value";
--   - body substrings: jobs_body_fts, an FTS5 table with the trigram
--     tokenizer (case_sensitive 1: q is case-sensitive, as the bytes are
--     compared), holding the text and JSON bodies only (body_kind 0 and 1;
--     binary bodies are never searched). Contentless (content=''): the
--     bodies are not stored twice; a row is removed with the 'delete'
--     command and the body it was indexed with.
--
-- The side tables are filled off the insert path (issue 14: the triggers
-- that kept them inside the insert transaction made POST /schedule up to
-- 7x slower): service/store_sqlite_indexer.c indexes the jobs in seq order,
-- in short transactions of its own, and moves search_index.mark, the seq
-- up to which every job is in job_headers and jobs_body_fts. A search reads
-- the side tables for seq <= mark and checks the jobs with seq > mark (the
-- tail, bounded by the indexer's lag; rmqs_search_index_lag_jobs) directly,
-- so results are exact at any lag. Jobs written behind the store's back
-- (a restore, the benchmark's SQL fill) are simply in the tail until the
-- indexer reaches them; so are the jobs already here when this migration
-- runs (mark 0). Headers and bodies never change after insert (a
-- reschedule or a cancel touches neither), so only deletes (the purge) are
-- kept by a trigger. The insert cost is measured in tests/bench/README.md
-- ("search").

CREATE INDEX jobs_exchange ON jobs (exchange, deliver_at, seq);
CREATE INDEX jobs_routing_key ON jobs (routing_key, deliver_at, seq);
CREATE INDEX jobs_source ON jobs (source, deliver_at, seq);

CREATE TABLE job_headers (
    name    TEXT    NOT NULL,
    value   TEXT    NOT NULL,
    job_seq INTEGER NOT NULL,  -- jobs.seq
    PRIMARY KEY (name, value, job_seq)
) WITHOUT ROWID;
-- The delete trigger finds a job's rows by it.
CREATE INDEX job_headers_job ON job_headers (job_seq);

CREATE VIRTUAL TABLE jobs_body_fts USING fts5(
    body, content = '', tokenize = 'trigram case_sensitive 1');

-- One row: every job with seq <= mark is indexed, none above it is.
CREATE TABLE search_index (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    mark INTEGER NOT NULL
);
INSERT INTO search_index (id, mark) VALUES (1, 0);

-- A deleted job leaves the side tables (the FTS 'delete' needs the body it
-- was indexed with, and must not be given a row never indexed). seq is the
-- rowid, not AUTOINCREMENT: once the highest seqs are deleted, new jobs
-- reuse them, so the mark comes down to the highest seq left, keeping
-- every new job above it. One trigger, so the mark moves after the row's
-- own index entries are gone.
CREATE TRIGGER jobs_search_delete AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_headers WHERE job_seq = OLD.seq;
    INSERT INTO jobs_body_fts (jobs_body_fts, rowid, body)
    SELECT 'delete', OLD.seq, CAST(OLD.body AS TEXT)
    WHERE OLD.body_kind < 2 AND OLD.seq <= (SELECT mark FROM search_index);
    UPDATE search_index SET mark = (SELECT coalesce(max(seq), 0) FROM jobs)
    WHERE mark > (SELECT coalesce(max(seq), 0) FROM jobs);
END;
