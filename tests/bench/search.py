"""tests/bench/search.py - the search benchmark of issue 14 (bench.py --only
search; run.sh starts RabbitMQ and the PostgreSQL server).

Two parts, each printed as a table and kept in bench-results.json:

  - insert cost: POST /schedule (one job a request, 64 connections) and
    POST /schedule/batch (1,000 jobs a request, 32 connections), wrk for
    --ingest-seconds each, jobs with 2 string headers and a text body, on a
    fresh database per round, for this binary (--bin) and every binary of
    --search-compare (name=path,...: main's schema, the search branch with
    its triggers...), both stores, rounds interleaved, medians of
    --search-rounds.
  - searches at --search-jobs jobs (1,000,000; run.sh --full: 10,000,000):
    the jobs written directly (SQLite: the sqlite3 CLI into the database the
    service created, service stopped; PostgreSQL: one INSERT ... SELECT
    generate_series through psql), then the service opens the database
    normally; its indexer fills the header and body indexes: the time until
    rmqs_search_index_lag_jobs is 0 is reported (PostgreSQL: then VACUUM
    (ANALYZE), as autovacuum would leave the tables). Then each
    request kind the dashboard makes, GET /jobs (limit 50) and GET
    /jobs/count, --search-requests times (25) one after another on one
    keep-alive connection: client-side time on loopback (send to last byte
    of the answer), median and p99 (with 25 samples p99 is the maximum).
    Target of the issue: each <= 100 ms at 10,000,000 jobs. The count is
    timed as the jobs page sends it (max=PAGE_COUNT, ui/jobs.js) and at the
    API's default max (100,000), which a bulk confirmation exceeds.

The seeded jobs (i = 1..N): deliver_at spread evenly over 1-30 days ahead;
status sent for i % 10 == 0, else pending; exchange ex(i % 10); routing key
rk(i % 100); headers {"tenant": "t(i % 1000)", "region": "r(i % 7)"};
message_id m(i); schedule s(i / 100 % 50) for i % 100 == 0 (source schedule); text bodies
"order i for customer c(i % 100000) common words", with " rare-needle" in
the one of i = 7 and every 1,000,000th after it.

Then writes beside searches (issue 21): POST /schedule, 1,000 one after
another, alone and while two broad searches (GET /jobs/count?q=common
words, walked to the default max) run side by side in a loop: medians and
p99, their ratio, and each search's time; a write that waited for the
searches would take about their time.

Nothing here asserts a time: it is a benchmark.
"""

import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from urllib.parse import urlencode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.times import format_ts, now_ms
import benchlib  # tests/bench: the runner's shared code

import stores

DAY = 86400000


# --- insert cost ---------------------------------------------------------------

def _job(i):
    return {"exchange": "bench-search", "routing_key": f"rk{i % 100}",
            "delay_ms": 3600000, "headers": {"tenant": f"t{i % 1000}", "region": f"r{i % 7}"},
            "body": f"order {i} for customer c{i % 100000} common words"}


def insert_round(b, B, store, name, binary):
    """One fresh database: wrk POST /schedule, then POST /schedule/batch."""
    cls = B.Service if store == "sqlite" else stores.pg_service_class(B.Service)
    svc = cls(binary, b.work, f"search-insert-{store}-{name}-{b.tag()}", b.url)
    b.services.append(svc)
    svc.start()
    try:
        base = f"http://{B.HOST}:{svc.port}"
        s_1 = B.wrk_script(b.work, "search-one", "POST", json.dumps(_job(1)))
        s_b = B.wrk_script(b.work, "search-batch", "POST",
                           json.dumps([_job(i) for i in range(1000)]),
                           headers={"Prefer": "return=minimal"})
        pids = b.cpu_pids(svc)
        one = B.run_wrk(base + "/schedule", s_1, 2, 64, b.ingest_s, pids, svc.pid)
        batch = B.run_wrk(base + "/schedule/batch", s_b, 2, 32, b.ingest_s, pids, svc.pid)
        return {"schedule_jobs_per_s": one["ok_requests_per_s"],
                "batch_jobs_per_s": round(batch["ok_requests_per_s"] * 1000, 1),
                "other_cpu": [one.get("cpu", {}).get("other_pct"),
                              batch.get("cpu", {}).get("other_pct")]}
    finally:
        svc.stop()


def insert_cost(b, B):
    bins = [("this", b.a.bin)]
    for item in [x for x in (b.a.search_compare or "").split(",") if x]:
        name, path = item.split("=", 1)
        bins.append((name, path))
    out = {"binaries": dict(bins), "rounds": b.a.search_rounds}
    for store in b.a.search_stores.split(","):
        rounds = {name: [] for name, _ in bins}
        for r in range(b.a.search_rounds):
            for name, path in bins:
                B.log(f"search insert cost: {store} {name} round {r + 1}")
                rounds[name].append(insert_round(b, B, store, name, path))
        res = {}
        for name, rs in rounds.items():
            res[name] = {
                "schedule_jobs_per_s": statistics.median(x["schedule_jobs_per_s"] for x in rs),
                "batch_jobs_per_s": statistics.median(x["batch_jobs_per_s"] for x in rs),
                "raw": rs}
            B.log(f"search insert cost: {store} {name}: POST /schedule "
                  f"{res[name]['schedule_jobs_per_s']} jobs/s, batch "
                  f"{res[name]['batch_jobs_per_s']} jobs/s (medians)")
        out[store] = res
    return out


# --- seeding -------------------------------------------------------------------

def _columns(n, base, idexpr, hdr, txt):
    """The seeded jobs' column expressions over the counter i (SQL shared by
    both stores; idexpr, hdr(json text) and txt(body) differ)."""
    span = 29 * DAY
    due = f"{base} + {DAY} + i * {span} / {n}"
    return (f"{idexpr}, CASE WHEN i % 10 = 0 THEN 2 ELSE 0 END, 'ex' || (i % 10), "
            f"'rk' || (i % 100), {due}, {due}, {DAY}, {base}, {base}, "
            f"CASE WHEN i % 10 = 0 THEN {base} END, 0, 5, NULL, "
            f"{hdr}, NULL, 0, {txt}, CASE WHEN i % 100 = 0 THEN 2 ELSE 0 END, 'm' || i, "
            f"CASE WHEN i % 100 = 0 THEN 's' || (i / 100 % 50) END, NULL, NULL")


COLS = ("id, status, exchange, routing_key, deliver_at, due_at, delay_ms, created_at, "
        "updated_at, sent_at, attempts, max_attempts, last_error, headers, properties, "
        "body_kind, body, source, message_id, schedule, fire_at, expires_at")


def _body():
    return (f"'order ' || i || ' for customer c' || (i % 100000) || ' common words' || "
            f"CASE WHEN i % 1000000 = 7 THEN ' rare-needle' ELSE '' END")


def seed_sqlite(svc, n):
    svc.stop()
    base = now_ms()
    hdr = "'{\"tenant\":\"t' || (i % 1000) || '\",\"region\":\"r' || (i % 7) || '\"}'"
    cols = _columns(n, base, "randomblob(16)", hdr, f"CAST({_body()} AS BLOB)")
    sent = n // 10
    sql = f"""
PRAGMA journal_mode=WAL;
PRAGMA synchronous=OFF;
PRAGMA cache_size=-524288;
BEGIN;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n})
INSERT INTO jobs ({COLS}) SELECT {cols} FROM c;
UPDATE job_counts SET n = n + {n - sent} WHERE status = 0;
UPDATE job_counts SET n = n + {sent} WHERE status = 2;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
"""
    t0 = time.monotonic()
    r = subprocess.run(["sqlite3", svc.db], input=sql, capture_output=True, text=True,
                       timeout=4 * 3600)
    if r.returncode != 0:
        raise RuntimeError(f"sqlite3 fill failed: {r.stderr}")
    return {"jobs": n, "seconds": round(time.monotonic() - t0, 1), "base": base}


def seed_pg(svc, n):
    base = now_ms()
    hdr = "'{\"tenant\":\"t' || (i % 1000) || '\",\"region\":\"r' || (i % 7) || '\"}'"
    cols = _columns(n, base, "decode(md5(i::text || random()::text), 'hex')", hdr,
                    f"convert_to({_body()}, 'UTF8')")
    sent = n // 10
    # the shared side of the lock every insert of the store holds: the
    # indexer's bound never passes a seq of this transaction (0003_search.sql)
    script = (f"BEGIN; SELECT pg_advisory_xact_lock_shared(hashtext('rmqs-jobs-insert')); "
              f"INSERT INTO jobs ({COLS}) SELECT {cols} FROM generate_series(1, {n}) i; "
              # slot 0's rows may not exist yet (PostgreSQL: a row per slot)
              f"INSERT INTO job_counts (slot, status, n) VALUES (0, 0, {n - sent}), "
              f"(0, 2, {sent}) ON CONFLICT (slot, status) DO UPDATE SET "
              "n = job_counts.n + EXCLUDED.n; COMMIT; "
              "CHECKPOINT;")
    t0 = time.monotonic()
    stores.psql(svc.pg_database, script, 4 * 3600)
    # as autovacuum leaves a table: statistics and the visibility map (index-only scans)
    stores.psql(svc.pg_database, "VACUUM (ANALYZE) jobs", 4 * 3600)
    return {"jobs": n, "seconds": round(time.monotonic() - t0, 1), "base": base}


class Getter:
    """GETs on one keep-alive connection: (status, raw body)."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def get(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        return r.status, r.read()

    def close(self):
        self.conn.close()


def index_lag(svc):
    h = Getter(svc.port)
    try:
        _, raw = h.get("/metrics")
    finally:
        h.close()
    for line in raw.decode().splitlines():
        # "rmqs_search_index_lag_jobs{store=...} N" (the store label since
        # issue 25), or without labels from an older binary (--rev)
        if line.startswith(("rmqs_search_index_lag_jobs ", "rmqs_search_index_lag_jobs{")):
            return int(line.rsplit(" ", 1)[1])
    return None


# --- the requests --------------------------------------------------------------

def kinds(base, one_id):
    lo = base + 10 * DAY
    return [
        ("unfiltered", {}),
        ("status=pending", {"status": "pending"}),
        ("exchange", {"exchange": "ex3"}),
        ("exchange+pending", {"exchange": "ex3", "status": "pending"}),
        ("routing_key", {"routing_key": "rk42"}),
        ("deliver range (1 h)", {"deliver_from": format_ts(lo / 1000),
                                 "deliver_to": format_ts((lo + 3600000) / 1000)}),
        ("id_prefix (4 digits)", {"id_prefix": one_id[:4]}),
        ("id_prefix (8 digits)", {"id_prefix": one_id[:8]}),
        ("header", {"header": "tenant:t123"}),
        ("header+pending", {"header": "tenant:t123", "status": "pending"}),
        ("q rare", {"q": "rare-needle"}),
        ("q common", {"q": "common words"}),
        ("q common+routing_key", {"q": "common words", "routing_key": "rk42"}),
        ("message_id", {"message_id": "m4242"}),
        ("schedule", {"schedule": "s7"}),
    ]


# The jobs page's count stops here (ui/jobs.js PAGE_COUNT).
PAGE_COUNT = 10000


def time_requests(svc, path, params, n):
    h = Getter(svc.port)
    times, status, raw = [], None, b""
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            status, raw = h.get(f"{path}?{urlencode(params)}" if params else path)
            times.append((time.perf_counter() - t0) * 1000)
            if status != 200:
                break
    finally:
        h.close()
    times.sort()
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    return {"status": status, "n": len(times), "median_ms": round(statistics.median(times), 2),
            "p99_ms": round(p99, 2), "max_ms": round(times[-1], 2),
            "answer": raw[:120].decode("utf-8", "replace")}


# The broad search of issue 21: a count of a term in every body, walked to
# the API's default max (100,000), two at a time in a loop.
BROAD = "/jobs/count?" + urlencode({"q": "common words"})
N_WRITES = 1000


def _post_times(port, n):
    """n POST /schedule one after another on one keep-alive connection:
    each one's client-side time in ms."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"exchange": "bench-search", "routing_key": "w",
                       "body": "beside a search", "delay_ms": 3600000})
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("POST", "/schedule", body,
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            times.append((time.perf_counter() - t0) * 1000)
            if r.status != 201:
                raise RuntimeError(f"POST /schedule answered {r.status}")
    finally:
        conn.close()
    return times


def _summary(times):
    times = sorted(times)
    return {"n": len(times), "median_ms": round(statistics.median(times), 2),
            "p99_ms": round(times[min(len(times) - 1,
                                      int(round(0.99 * (len(times) - 1))))], 2)}


def writes_beside_searches(b, B, svc, store):
    """POST /schedule latency alone, then while two broad searches run side
    by side in a loop (issue 21: a search must never hold a write): medians
    and p99 of each, their ratio, and what the searches answered."""
    import threading  # pylint: disable=import-outside-toplevel
    alone = _summary(_post_times(svc.port, N_WRITES))
    stop = threading.Event()
    searched = []

    def loop():
        h = Getter(svc.port)
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                st, raw = h.get(BROAD)
                searched.append(((time.perf_counter() - t0) * 1000, st,
                                 raw[:60].decode("utf-8", "replace")))
        finally:
            h.close()
    threads = [threading.Thread(target=loop) for _ in range(2)]
    for t in threads:
        t.start()
    while len(searched) < 2 and all(t.is_alive() for t in threads):
        time.sleep(0.01)  # both searching before the writes start
    try:
        beside = _summary(_post_times(svc.port, N_WRITES))
    finally:
        stop.set()
        for t in threads:
            t.join()
    search_ms = sorted(x[0] for x in searched)
    out = {"alone": alone, "beside": beside,
           "ratio_median": round(beside["median_ms"] / alone["median_ms"], 2),
           "searches": len(searched),
           "search_median_ms": round(statistics.median(search_ms), 1),
           "search_answers": sorted({f"{x[1]} {x[2]}" for x in searched})[:3]}
    B.log(f"search {store}: POST /schedule alone {alone['median_ms']}/"
          f"{alone['p99_ms']} ms, beside two broad searches "
          f"({out['search_median_ms']} ms each, {out['searches']} of them) "
          f"{beside['median_ms']}/{beside['p99_ms']} ms (median/p99): "
          f"x{out['ratio_median']}")
    return out


def searches(b, B, store):
    n = b.a.search_jobs
    cls = B.Service if store == "sqlite" else stores.pg_service_class(B.Service)
    svc = cls(b.a.bin, b.work, f"search-{store}-{b.tag()}", b.url)
    b.services.append(svc)
    svc.start()
    out = {"jobs": n}
    try:
        B.log(f"search: seeding {n:,} jobs on {store}")
        out["seed"] = seed_sqlite(svc, n) if store == "sqlite" else seed_pg(svc, n)
        B.log(f"search: seeded in {out['seed']['seconds']} s")
        if store == "sqlite":
            out["start"] = svc.start()
        # both stores index headers and bodies in the background
        t0 = time.monotonic()
        lag0 = index_lag(svc)
        while True:
            lag = index_lag(svc)
            if lag == 0:
                break
            if time.monotonic() - t0 > 6 * 3600:
                raise RuntimeError(f"indexer still {lag} jobs behind")
            time.sleep(1)
        out["index_catch_up"] = {"lag_at_start": lag0,
                                 "seconds": round(time.monotonic() - t0, 1)}
        B.log(f"search: the indexer caught up {lag0:,} jobs in "
              f"{out['index_catch_up']['seconds']} s")
        if store == "postgres":
            stores.psql(svc.pg_database, "VACUUM (ANALYZE) job_text", 4 * 3600)
        h = Getter(svc.port)
        _, raw = h.get("/jobs?limit=1&exchange=ex5")
        h.close()
        one_id = json.loads(raw)["jobs"][0]["id"].replace("-", "")
        res = {}
        for name, params in kinds(out["seed"]["base"], one_id):
            lst = time_requests(svc, "/jobs", dict(params, limit=50), b.a.search_requests)
            cnt = time_requests(svc, "/jobs/count", dict(params, max=PAGE_COUNT),
                                b.a.search_requests)
            cnt_api = time_requests(svc, "/jobs/count", params, b.a.search_requests)
            res[name] = {"params": params, "list": lst, "count": cnt,
                         "count_default_max": cnt_api}
            B.log(f"search {store} {name}: list {lst['median_ms']}/{lst['p99_ms']} ms, "
                  f"count {cnt['median_ms']}/{cnt['p99_ms']} ms, at the API's "
                  f"default max {cnt_api['median_ms']}/{cnt_api['p99_ms']} ms "
                  f"(median/p99) {cnt_api['answer'][:60]}")
        out["requests"] = res
        out["writes_beside_searches"] = writes_beside_searches(b, B, svc, store)
        out["db_bytes"] = svc.db_bytes()
    finally:
        svc.stop()
    return out


def scenario(b, _empty_svc):
    """bench.py's entry."""
    B = benchlib
    out = {}
    if not b.a.search_skip_insert:
        out["insert"] = insert_cost(b, B)
    for store in b.a.search_stores.split(","):
        n_store = b.a.search_jobs if store == "sqlite" else b.a.search_pg_jobs
        saved = b.a.search_jobs
        b.a.search_jobs = n_store
        try:
            out[store] = searches(b, B, store)
        except Exception as e:  # pylint: disable=broad-except
            out[store] = {"error": str(e)}
            B.log(f"search {store}: FAILED {e}")
        finally:
            b.a.search_jobs = saved
    return out


def table_rows(R, row):
    ins = R.get("insert") or {}
    for store in ("sqlite", "postgres"):
        for name, r in (ins.get(store) or {}).items():
            row(f"search insert ({store})", f"{name}: POST /schedule jobs/s",
                r["schedule_jobs_per_s"])
            row(f"search insert ({store})", f"{name}: POST /schedule/batch jobs/s",
                r["batch_jobs_per_s"])
    for store in ("sqlite", "postgres"):
        r = R.get(store)
        if not r:
            continue
        scn = f"search ({store}, {r.get('jobs', 0):,} jobs)"
        if "error" in r:
            row(scn, "FAILED", r["error"][:80])
            continue
        if "index_catch_up" in r:
            row(scn, "indexer catch-up s", r["index_catch_up"]["seconds"])
        for name, q in r["requests"].items():
            for k in ("list", "count"):
                row(scn, f"{name} {k} median/p99 ms",
                    f"{q[k]['median_ms']}/{q[k]['p99_ms']}", "<= 100",
                    q[k]["p99_ms"] <= 100)
            if "count_default_max" in q:
                c = q["count_default_max"]
                row(scn, f"{name} count (max 100,000) median/p99 ms",
                    f"{c['median_ms']}/{c['p99_ms']}")
        w = r.get("writes_beside_searches")
        if w:
            row(scn, "POST /schedule alone median/p99 ms",
                f"{w['alone']['median_ms']}/{w['alone']['p99_ms']}")
            row(scn, "POST /schedule beside 2 broad searches median/p99 ms",
                f"{w['beside']['median_ms']}/{w['beside']['p99_ms']}",
                "not their sum", w["beside"]["p99_ms"] < w["search_median_ms"])
