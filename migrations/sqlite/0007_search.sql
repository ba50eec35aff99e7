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
-- The side tables are kept by triggers, so every path that inserts or
-- deletes jobs (the store's inserts, a schedule's runs, the purge, a
-- restore or the benchmark's SQL fill behind the store's back) keeps them
-- right. Headers and bodies never change after insert (a reschedule or a
-- cancel touches neither), so no UPDATE trigger is needed. The insert cost
-- of these is measured in tests/bench/README.md ("search").

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

-- Existing jobs, then the triggers for new ones.
INSERT INTO job_headers (name, value, job_seq)
SELECT h.key, h.value, jobs.seq FROM jobs, json_each(jobs.headers) AS h
WHERE jobs.headers IS NOT NULL AND h.type = 'text';
INSERT INTO jobs_body_fts (rowid, body)
SELECT seq, CAST(body AS TEXT) FROM jobs WHERE body_kind < 2;

CREATE TRIGGER jobs_search_insert AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_headers (name, value, job_seq)
    SELECT h.key, h.value, NEW.seq FROM json_each(NEW.headers) AS h
    WHERE NEW.headers IS NOT NULL AND h.type = 'text';
    INSERT INTO jobs_body_fts (rowid, body)
    SELECT NEW.seq, CAST(NEW.body AS TEXT) WHERE NEW.body_kind < 2;
END;

CREATE TRIGGER jobs_search_delete AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_headers WHERE job_seq = OLD.seq;
    INSERT INTO jobs_body_fts (jobs_body_fts, rowid, body)
    SELECT 'delete', OLD.seq, CAST(OLD.body AS TEXT) WHERE OLD.body_kind < 2;
END;
