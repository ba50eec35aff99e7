-- 0008_limits.sql - flow limits (issue 23): one row per limit, created and
-- changed at run time through PUT/PATCH/DELETE /limits/{name}
-- (service/store/sqlite/store_sqlite_limits.c).
--
-- spec is the limit's canonical JSON (service/flow/limit.h: compact,
-- sorted keys, defaults filled in), the text a PUT compares to tell "the
-- same again" from a change; generation counts its effective changes
-- (1 at creation) and is what a PATCH compares and sets; times are ms
-- since the epoch. Names are ASCII ([A-Za-z0-9._:-]), so the primary
-- key's BINARY order is the listing's bytewise order. No job refers to a
-- limit: nothing else changes.
CREATE TABLE limits (
    name       TEXT    PRIMARY KEY,
    spec       TEXT    NOT NULL,
    generation INTEGER NOT NULL CHECK (generation >= 1),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
