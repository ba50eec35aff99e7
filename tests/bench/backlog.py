"""tests/bench/backlog.py - the backlog scenario of bench.py: N pending jobs
far in the future (through HTTP or written directly with sqlite3), restart:
start-up time (warm and cold page cache), RSS, precision and ingest again,
database bytes per job.
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
import benchlib as B
from benchlib import BenchError, log


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
        h = KeepAlive(svc.port)
        st, raw = h.post("/schedule", json.dumps({"exchange": "bench-backlog",
                                                  "routing_key": "rk",
                                                  "body": "backlog job with a small body",
                                                  "delay_ms": 86400000}))
        h.close()
        if st != 201:
            raise BenchError(f"template job: {st} {raw[:200]!r}")
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
        out["restart"] = svc.start(timeout=600)
        out["rss_at_ready"] = svc.rss()
        log(f"backlog: ready after {out['restart']['ready_s']} s, RSS "
            f"{out['rss_at_ready']['rss_kib']} KiB")
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

