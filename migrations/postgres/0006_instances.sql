-- 0006_instances.sql - the instances alive on this database (issue 24):
-- takeover in a second (service/store/pg/store_pg_dispatch.c).
--
-- Each instance holds, for as long as its listening session lasts, the
-- session-level advisory lock (1380799827, hashtext(id)) and a row here
-- with that id; every claim it makes carries the id as jobs.owner. When
-- the session ends (process killed, host reset: PostgreSQL ends the
-- backend and drops the lock), any other instance finds a row whose lock
-- is free, puts that id's publishing jobs back to pending and deletes the
-- row: within a fraction of a second, not a whole lease. An instance that
-- lives but is silent (frozen, cut off) keeps its session and its lock:
-- the lease stays the rule for it. A new session takes a new id, so the
-- claims of an earlier one are never mistaken for live ones.
--
-- An instance of an earlier version has no row: its claims are left to
-- the lease, as before.
CREATE TABLE instances (
    id text PRIMARY KEY,
    started_at bigint NOT NULL, -- ms, database clock
    host text NOT NULL,
    pid integer NOT NULL
);
