"""tests/bench/backlog.py - the backlog scenario of bench.py: N pending jobs
far in the future (through HTTP or written directly with sqlite3), restart:
start-up time (warm and cold page cache), RSS, precision and ingest again,
database bytes per job.

On PostgreSQL (--backlog-store postgres, issue 24): one instance on a fresh
database of the run's server, measured empty, then N pending jobs written
with one INSERT ... SELECT (stores.fill_backlog, the service stopped), and
measured again after a restart: start-up, RSS, precision (with and without
POSTs meanwhile) with the claim's mean and max from pg_stat_statements over
each precision run, the claim of 100 due under EXPLAIN ANALYZE, ingest,
and the bytes per pending job of the table, of each index, of job_text and
of the database. Not measured there: the cold-cache start (PostgreSQL's
own buffers would need a server restart).
"""

import json
import os
import random
import subprocess
import sys
import threading
import time


# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.http import KeepAlive
from pylib.times import format_ts_ms, now_ms
from pylib import pg
import benchlib as B
from benchlib import BenchError, log
import stores


def post_template(svc):
    """The job a direct fill copies (exchange bench-backlog), a day ahead,
    made through the API."""
    h = KeepAlive(svc.port)
    st, raw = h.post("/schedule", json.dumps({"exchange": "bench-backlog", "routing_key": "rk",
                                              "body": "backlog job with a small body",
                                              "delay_ms": 86400000}))
    h.close()
    if st != 201:
        raise BenchError(f"template job: {st} {raw[:200]!r}")


class Backlog:
    """bench.Bench's backlog scenario (a mixin of bench.Bench)."""

    # --- backlog -----------------------------------------------------------------
    def fill_http(self, svc, n, workers=4):
        """n pending jobs due 1-30 days ahead (spread), via POST
        /schedule/batch from several keep-alive clients."""
        base = now_ms()
        rng = random.Random(7)
        variants = []
        for v in range(16):
            jobs = [{"exchange": "bench-backlog", "routing_key": "rk",
                     "body": "backlog job with a small body",
                     "deliver_at": format_ts_ms(base + 86400000 + rng.randrange(29 * 86400000))}
                    for _ in range(1000)]
            variants.append(json.dumps(jobs))
        small = lambda k: json.dumps(json.loads(variants[0])[:k])  # noqa: E731
        batches = [1000] * (n // 1000) + ([n % 1000] if n % 1000 else [])
        lock = threading.Lock()
        state = {"next": 0, "done": 0, "errors": []}

        def worker():
            h = KeepAlive(svc.port, timeout=120)
            try:
                while True:
                    with lock:
                        i = state["next"]
                        if i >= len(batches) or state["errors"]:
                            return
                        state["next"] += 1
                    body = variants[i % 16] if batches[i] == 1000 else small(batches[i])
                    st, raw = h.post("/schedule/batch", body)
                    if st != 201:
                        with lock:
                            state["errors"].append(f"{st} {raw[:200]!r}")
                        return
                    with lock:
                        state["done"] += batches[i]
            except Exception as e:
                with lock:
                    state["errors"].append(repr(e))
            finally:
                h.close()

        t0 = time.monotonic()
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
        for t in threads:
            t.start()
        last = t0
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            if time.monotonic() - last > 15:
                last = time.monotonic()
                log(f"  filled {state['done']}/{n} ({state['done'] / (last - t0):.0f} jobs/s)")
        if state["errors"]:
            raise BenchError(f"backlog fill failed: {state['errors'][:3]}")
        secs = time.monotonic() - t0
        return {"method": f"HTTP POST /schedule/batch, 1,000 jobs per request, "
                          f"{workers} keep-alive clients, deliver_at spread over "
                          f"1-30 days", "jobs": state["done"], "seconds": round(secs, 2),
                "jobs_per_s": round(state["done"] / secs, 1)}

    def fill_sql(self, svc, n):
        """n pending jobs written directly with the sqlite3 CLI into the
        database the service created (service stopped), copying one real job
        made through the API. Ids are random 16-byte blobs (not UUIDv7)."""
        post_template(svc)
        svc.stop()
        base = now_ms()
        span = 29 * 86400000
        # Rows in key order: deliver_at ascending (spread evenly over 1-30
        # days) and ids that grow with it (16 bytes: the ASCII hex of a
        # counter, as SQLite 3.40 has no unhex()), so every index insert is
        # an append. B-trees built like this are denser than the service's
        # own (random deliver_at), so bytes per job come out lower than via
        # HTTP.
        sql = f"""
PRAGMA journal_mode=WAL;
PRAGMA synchronous=OFF;
PRAGMA cache_size=-262144;
BEGIN;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n - 1})
INSERT INTO jobs (id, status, exchange, routing_key, deliver_at, due_at, delay_ms,
                  created_at, updated_at, sent_at, attempts, max_attempts, last_error,
                  headers, properties, body_kind, body)
SELECT CAST(printf('%016x', i) AS BLOB), 0, j.exchange, j.routing_key,
       {base} + 86400000 + i * {span} / {n}, {base} + 86400000 + i * {span} / {n},
       86400000 + i * {span} / {n}, {base}, {base}, NULL, 0, j.max_attempts, NULL,
       j.headers, j.properties, j.body_kind, j.body
FROM c, (SELECT * FROM jobs WHERE exchange = 'bench-backlog' LIMIT 1) AS j;
-- no trigger keeps job_counts (migration 0005): the store does, so a write
-- behind its back adds its rows itself; changes() = the INSERT's rows
UPDATE job_counts SET n = n + changes() WHERE status = 0;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
"""
        t0 = time.monotonic()
        r = subprocess.run(["sqlite3", svc.db], input=sql, capture_output=True,
                           text=True, timeout=3600)
        if r.returncode != 0:
            raise BenchError(f"sqlite3 fill failed: {r.stderr}")
        secs = time.monotonic() - t0
        return {"method": "direct: sqlite3 CLI INSERT ... SELECT into the database "
                          "the service created (service stopped), copying a job made "
                          "through the API; rows in key order (deliver_at spread "
                          "evenly over 1-30 days, ids growing), so B-trees are denser "
                          "than the service's own",
                "jobs": n, "seconds": round(secs, 2), "jobs_per_s": round(n / secs, 1)}

    def scenario_backlog(self, empty):
        n = self.a.backlog
        fill = self.a.fill
        if fill == "auto":
            fill = "http" if n <= 2_000_000 else "sql"
        svc = self.service("backlog")
        out = {"jobs": n}
        reused = None
        if self.a.keep_backlog:
            # a filled database kept across runs (outside the run's work
            # folder): filling 10M rows takes minutes
            os.makedirs(self.a.keep_backlog, exist_ok=True)
            svc.dir = self.a.keep_backlog
            svc.db = os.path.join(svc.dir, "rmqs.db")
            if os.path.exists(svc.db):
                try:
                    (reused,), = svc.query("SELECT count(*) FROM jobs INDEXED BY jobs_due "
                                           "WHERE status = 0")
                except Exception:
                    reused = None
                if reused is None or reused < n:
                    log(f"backlog: {svc.db} holds {reused} pending jobs, not {n}: refilling")
                    for suffix in ("", "-wal", "-shm"):
                        if os.path.exists(svc.db + suffix):
                            os.unlink(svc.db + suffix)
                    reused = None
        out["fresh_start"] = svc.start()
        if reused is not None:
            log(f"backlog: reusing {svc.db} ({reused} pending jobs)")
            out["fill"] = {"method": f"reused a database filled by an earlier run "
                                     f"({self.a.keep_backlog})", "jobs": reused,
                           "seconds": 0, "jobs_per_s": 0}
        else:
            log(f"backlog: filling {n} pending jobs ({fill})")
            cpu = B.CpuWindow(self.cpu_pids(svc), svc.pid).start()
            out["fill"] = self.fill_http(svc, n) if fill == "http" else self.fill_sql(svc, n)
            out["fill"]["cpu"] = cpu.stop()
            log(f"backlog: filled in {out['fill']['seconds']} s ({out['fill']['jobs_per_s']} jobs/s)")
        if svc.proc.poll() is None:
            out["rss_after_fill"] = svc.rss()
            out["stop_after_fill"] = svc.stop(timeout=120)
        out["db_bytes"] = svc.db_bytes()
        total = sum(out["db_bytes"].values())
        out["db_bytes_per_pending_job"] = round(total / n, 1)
        try:
            (pending,), = svc.query("SELECT count(*) FROM jobs INDEXED BY jobs_due WHERE status = 0")
            out["pending_in_db"] = pending
        except Exception as e:
            out["pending_in_db_error"] = repr(e)
        log(f"backlog: database {total / 1e6:.1f} MB, {out['db_bytes_per_pending_job']} "
            f"bytes per job; restarting")
        # drop the database from the page cache? No: a restart on a running
        # machine finds it cached; a cold-cache start is measured separately.
        self.restart_measured(svc, out)
        out["restart_cold_cache"] = self.cold_restart(svc)
        out["rss_at_ready_cold"] = svc.rss()
        out["precision"] = self.precision(svc, f"backlog {n}: precision",
                                          self.a.rate, self.a.precision_seconds)
        if "precision_no_ingest" in self.results:
            out["precision_no_ingest"] = self.precision_preloaded(
                svc, f"backlog {n}: precision without concurrent POSTs", self.a.rate,
                self.a.precision_seconds)
        if self.a.neighbour:
            out["precision_noisy"] = self.precision_noisy(
                svc, f"backlog {n}: precision beside a noisy neighbour", self.a.rate,
                self.a.precision_seconds)
        out["rss_after_precision"] = svc.rss()
        if not self.a.backlog_precision_only:
            out["ingest"] = self.ingest(svc, f"backlog {n}: ingest")
        out["rss_after_ingest"] = svc.rss()
        out["stop"] = svc.stop(timeout=120)
        return out

    @staticmethod
    def restart_measured(svc, out):
        """Start on the filled database: time to /readyz, RSS at ready."""
        out["restart"] = svc.start(timeout=600)
        out["rss_at_ready"] = svc.rss()
        log(f"backlog: ready after {out['restart']['ready_s']} s, RSS "
            f"{out['rss_at_ready']['rss_kib']} KiB")

    def cold_restart(self, svc):
        """Stop, evict the database files (only those) from the page cache
        with posix_fadvise(DONTNEED), start again: a start-up after a reboot
        as far as the database is concerned."""
        svc.stop(timeout=120)
        try:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(svc.db + suffix):
                    fd = os.open(svc.db + suffix, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
        except OSError as e:
            return {"error": f"cannot evict the database from the page cache: {e}"}
        r = svc.start(timeout=600)
        log(f"backlog: cold-cache restart ready after {r['ready_s']} s")
        return r


    # --- backlog on PostgreSQL (issue 24) ------------------------------------------
    def _pg_phase(self, svc, dbid, label, out):
        """precision (POSTs meanwhile, then stored beforehand), each with the
        claim's pg_stat_statements over the run, and ingest unless
        --backlog-precision-only; into out."""
        for key, fn, what in (("precision", self.precision, "precision"),
                              ("precision_no_ingest", self.precision_preloaded,
                               "precision without concurrent POSTs")):
            pg.sql("postgres", f"SELECT pg_stat_statements_reset(0, {dbid}, 0)")
            out[key] = fn(svc, f"{label}: {what}", self.a.rate, self.a.precision_seconds)
            out[key]["claim_pg_stat_statements"] = stores.claim_stats(svc.pg_database)
        out["rss_after_precision"] = svc.rss()
        if not self.a.backlog_precision_only:
            out["ingest"] = self.ingest(svc, f"{label}: ingest")
        out["rss_after_ingest"] = svc.rss()

    def scenario_backlog_pg(self):
        """N pending jobs on PostgreSQL against an empty database, one
        instance (see the file comment)."""
        base_window = B.CpuWindow
        postmaster = int(open(os.environ["RMQS_BENCH_PG_PIDFILE"]).readline())
        # the postgres server's CPU (its whole process tree) in every window
        B.CpuWindow = stores.window_class(base_window, {"postgres": postmaster}, {})
        try:
            return self._backlog_pg(self.a.backlog)
        finally:
            B.CpuWindow = base_window

    def _pg_service(self, name):
        svc = stores.pg_service_class(B.Service)(self.a.bin, self.work, name, self.url)
        self.services.append(svc)
        return svc

    @staticmethod
    def _dbid(svc):
        (dbid,), = pg.sql("postgres", "SELECT oid FROM pg_database WHERE datname = "
                                      f"'{svc.pg_database}'")
        return dbid

    def _backlog_pg(self, n):
        out = {"store": "postgres", "jobs": n, "empty": {}}
        text = stores.claim_text(self.a.bin)
        if text is None:
            raise BenchError(f"backlog: no claim statement found in {self.a.bin}")
        # empty: a database of its own, dropped after (the ingest leaves
        # hundreds of thousands of jobs behind)
        svc = self._pg_service("backlog-pg-empty")
        out["empty"]["start"] = svc.start()
        out["empty"]["rss_at_ready"] = svc.rss()
        # the claim on the empty table first: ingest leaves jobs behind
        out["empty"]["claim_explain"] = stores.explain_claim(svc, text)
        self._pg_phase(svc, self._dbid(svc), "backlog-pg empty", out["empty"])
        out["empty"]["stop"] = svc.stop(timeout=120)
        svc.drop_database()
        # N: a fresh database, its schema made by the service, a template
        svc = self._pg_service("backlog-pg")
        svc.start()
        dbid = self._dbid(svc)
        post_template(svc)
        out["stop_before_fill"] = svc.stop(timeout=120)
        out["sizes_before_fill"] = stores.relation_sizes(svc.pg_database)
        log(f"backlog: filling {n} pending jobs on PostgreSQL (INSERT ... SELECT, "
            "service stopped)")
        cpu = B.CpuWindow(self.cpu_pids(None)).start()
        out["fill"] = stores.fill_backlog(svc, n, "bench-backlog")
        out["fill"]["cpu"] = cpu.stop()
        log(f"backlog: filled in {out['fill']['seconds']} s ({out['fill']['jobs_per_s']} jobs/s)")
        (pending,), = svc.query("SELECT sum(n) FROM job_counts WHERE status = 0")
        out["pending_in_db"] = pending
        # per job: what the fill added (the empty schema is a few MB)
        sizes = out["sizes"] = stores.relation_sizes(svc.pg_database)
        s0 = out["sizes_before_fill"]

        def per_job(key):
            return round((sizes[key] - s0[key]) / n, 1)
        out["db_bytes_per_pending_job"] = per_job("database")
        out["bytes_per_pending_job"] = {
            "jobs_heap": per_job("jobs_heap"), "jobs_indexes": per_job("jobs_indexes"),
            "job_text_total": per_job("job_text_total"),
            "index": {k: round((v - s0["index"][k]) / n, 1)
                      for k, v in sorted(sizes["index"].items())}}
        log(f"backlog: database {sizes['database'] / 1e6:.1f} MB, "
            f"{out['db_bytes_per_pending_job']} bytes per pending job; restarting")
        self.restart_measured(svc, out)
        self._pg_phase(svc, dbid, f"backlog-pg {n}", out)
        out["claim_explain"] = stores.explain_claim(svc, text)
        log(f"backlog: claim of 100 due (EXPLAIN ANALYZE, median) empty "
            f"{out['empty']['claim_explain']['median_ms']} ms, beside {n} "
            f"{out['claim_explain']['median_ms']} ms")
        out["stop"] = svc.stop(timeout=120)
        return out


def table_rows_pg(k, row):
    """bench.py's table rows of the backlog on PostgreSQL: empty -> N."""
    e, n = k["empty"], k["jobs"]
    scn = f"backlog {n:,} (PostgreSQL)"
    row(scn, "fill (direct INSERT ... SELECT)", k["fill"]["jobs_per_s"], "", None, " jobs/s")
    row(scn, "start-up to /readyz 200, empty -> N",
        f"{e['start']['ready_s']} -> {k['restart']['ready_s']} s", "<= 2 s",
        k["restart"]["ready_s"] <= 2)

    def rss_max(d):
        return max(filter(None, [d["rss_at_ready"]["rss_kib"], d["rss_after_precision"]["rss_kib"],
                                 d["rss_after_ingest"]["rss_kib"]]))
    rb, re_ = rss_max(k), rss_max(e)
    row(scn, "RSS max (ready / after precision / after ingest), empty -> N",
        f"{re_ / 1024:.1f} -> {rb / 1024:.1f} MiB", "<= 64 MiB, <= 1.2x empty",
        rb <= 64 * 1024 and rb <= 1.2 * re_)
    for key, label in (("precision", "precision (POSTs meanwhile)"),
                       ("precision_no_ingest", "precision (stored beforehand)")):
        a, b = e[key]["lateness"], k[key]["lateness"]
        row(scn, f"{label} early / p50 / p99 / max, empty -> N",
            f"{a.get('early')}/{a.get('p50_ms')}/{a.get('p99_ms')}/{a.get('max_ms')} -> "
            f"{b.get('early')}/{b.get('p50_ms')}/{b.get('p99_ms')}/{b.get('max_ms')} ms",
            "0 early, p99 <= 5, max <= 50",
            b.get("early") == 0 and (b.get("p99_ms") or 1e9) <= 5 and (b.get("max_ms") or 1e9) <= 50)
        ca, cb = (e[key].get("claim_pg_stat_statements") or [{}])[0], \
            (k[key].get("claim_pg_stat_statements") or [{}])[0]
        row(scn, f"claim during {label}: calls, mean / max ms, empty -> N",
            f"{ca.get('calls')}, {ca.get('mean_ms')} / {ca.get('max_ms')} -> "
            f"{cb.get('calls')}, {cb.get('mean_ms')} / {cb.get('max_ms')}")
    row(scn, "claim of 100 due (EXPLAIN ANALYZE, median), empty -> N",
        f"{e['claim_explain']['median_ms']} -> {k['claim_explain']['median_ms']} ms")
    if e.get("ingest") and k.get("ingest"):
        for kind in ("schedule", "batch"):
            a, b = e["ingest"][f"{kind}_jobs_per_s"], k["ingest"][f"{kind}_jobs_per_s"]
            row(scn, f"{'POST /schedule' if kind == 'schedule' else 'batch'} jobs/s, empty -> N",
                f"{a:,.0f} -> {b:,.0f} ({b / a:.2f}x)", ">= 0.8x", b >= 0.8 * a)
    bp = k["bytes_per_pending_job"]
    row(scn, "bytes per pending job: database / heap / indexes / job_text",
        f"{k['db_bytes_per_pending_job']} / {bp['jobs_heap']} / {bp['jobs_indexes']} / "
        f"{bp['job_text_total']} B")
    row(scn, "bytes per pending job, each index",
        ", ".join(f"{name.replace('jobs_', '')} {v:.0f}" for name, v in
                  sorted(bp["index"].items(), key=lambda x: -x[1])))
