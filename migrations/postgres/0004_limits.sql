-- 0004_limits.sql - flow limits (issue 23), as
-- migrations/sqlite/0008_limits.sql: one row per limit, shared by every
-- instance on the database (service/store/pg/store_pg_limits.c).
--
-- spec is the limit's canonical JSON (service/flow/limit.h), generation
-- counts its effective changes (1 at creation; a PATCH compares and sets
-- it), times are ms since the epoch. name sorts bytewise (COLLATE "C"), the
-- listing's order. No job refers to a limit: nothing else changes.
CREATE TABLE limits (
    name       text   COLLATE "C" PRIMARY KEY,
    spec       text   NOT NULL,
    generation bigint NOT NULL CHECK (generation >= 1),
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
