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
--   - header=name:value is jsonb containment (headers::jsonb @>
--     '{"name":"value"}') on a GIN jsonb_path_ops index of the headers
--     (text holding a JSON object, 0001): top-level string values only,
--     as SQLite's job_headers;
--   - q (a body substring, case-sensitive) is a pg_trgm GIN index of the
--     text and JSON bodies (body_kind 0, 1) in encode(body, 'escape')
--     form: the text as it is, with backslashes doubled and NUL and
--     non-ASCII bytes as \ooo octal, so any body can be indexed (text may
--     hold U+0000, which a PostgreSQL text cannot) and an immutable
--     expression is indexed (convert_from is not immutable). The search
--     looks for q escaped the same way with LIKE (the index's candidates),
--     then compares the body's bytes (position(), exact).
--
-- pg_trgm ships with the server package (postgresql-15 on Debian) and is
-- a trusted extension: the database's owner may create it.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE INDEX jobs_exchange ON jobs (exchange, deliver_at, seq);
CREATE INDEX jobs_routing_key ON jobs (routing_key, deliver_at, seq);
CREATE INDEX jobs_source ON jobs (source, deliver_at, seq);
CREATE INDEX jobs_headers ON jobs USING gin ((headers::jsonb) jsonb_path_ops)
    WHERE headers IS NOT NULL;
CREATE INDEX jobs_body_trgm ON jobs USING gin (encode(body, 'escape') gin_trgm_ops)
    WHERE body_kind < 2;
