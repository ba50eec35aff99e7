-- 0009_store_identity.sql - a random id written once, naming this database
-- for every instance that shares it (issue 25): GET /metrics labels the
-- whole-database gauges (jobs by status, schedules, database size) with
-- store="pg-<id>", so a dashboard over several instances takes
-- max by (store) instead of adding the same numbers up. Read by
-- store_identity (service/store/pg/store_pg.c).
CREATE TABLE store_identity (
    id text PRIMARY KEY
);
INSERT INTO store_identity (id)
SELECT md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text);
