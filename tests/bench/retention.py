"""tests/bench/retention.py - retention at a steady load on PostgreSQL
(issue 24; bench.py --only retention): does the jobs table stay flat when
every job is inserted, claimed, settled and purged, and what does purging
cost?

One instance on a fresh database of the run's PostgreSQL, with a short
retention (--retention-keep-s, the service's --retention-s, default 1: its
least, 0 keeps jobs forever) and --purge-interval-s 1. A client posts
POST /schedule/batch at a fixed rate (--retention-rate jobs/s, default
1,000, as a batch every 100 ms) for --retention-seconds (180; run.sh --full
1,800), each job due 1 s after its batch is sent, the due times spread
evenly over the batch's 100 ms; the C consumer takes them off the queue.
Each job row is so written four times (insert, claim, settle, purge's
delete), leaving three dead versions in jobs and one in job_text (the
foreign key's cascade) for autovacuum to reclaim.

Every --retention-every seconds (10) a row is printed:
  stored      jobs the client got a 201 for, so far
  sent        rmqs_jobs_published_total{result="sent"} (GET /metrics)
  live, dead  pg_stat_user_tables n_live_tup / n_dead_tup of jobs
  heap, idx   pg_table_size('jobs') / pg_indexes_size('jobs'), MB
  text        pg_total_relation_size('job_text'), MB
  db          pg_database_size, MB
  av          autovacuum_count of jobs / job_text, so far
  purge       in this window: calls, rows, mean / max ms of the purge's
              DELETE (pg_stat_statements; its entry is reset after each row,
              so the max is the window's)
  claim       the claim's mean / max ms in this window, likewise
  p99         the service's own lateness histogram (GET /metrics,
              publish - deliver_at) in this window: the bucket holding its
              p99, so an upper bound
  vac s       seconds of the autovacuums of jobs and job_text that ended in
              this window (the server's log: log_autovacuum_min_duration
              is set to 0 on both; the JSON has each run's index scans,
              tuples removed, pages and CPU)
  pg%, svc%   CPU of the whole postgres server (autovacuum workers
              included) and of the service, % of one core
  oth%        CPU of the processes the benchmark did not start (other
              work on a shared machine), % of one core
After the run the consumer's lateness (receive - deliver_at) per window
of due time is added to the rows (JSON) and summed up in bench.py's table,
with whether the table stayed flat: the growth of jobs' total size over
the second half of the run, when autovacuum has run at least once.

--retention-reloptions "k=v,..." sets storage parameters on jobs and
job_text before the load (e.g. autovacuum_vacuum_scale_factor=0,
autovacuum_vacuum_threshold=10000), to compare autovacuum settings.
--retention-backlog N first writes N pending jobs due 1-30 days ahead
(stores.fill_backlog, then VACUUM (ANALYZE)): the load then runs beside a
large table, whose every index each autovacuum of jobs reads in full.

Nothing here asserts a time or a size: it is a benchmark.
"""

import array
import http.client
import json
import os
import re
import sys
import threading
import time

# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib import pg
from pylib.http import KeepAlive, exchange
from pylib.times import format_ts_ms, now_ms
import benchlib as B
from benchlib import BenchError, log
from backlog import post_template
import stores

TICK_S = 0.1  # one batch every TICK_S
LEAD_MS = 1000  # a job is due this long after its batch is sent
PURGE_LIKE = "DELETE FROM jobs WHERE seq IN%"
AUTOVACUUM_SETTINGS = ("autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor",
                       "autovacuum_vacuum_threshold", "autovacuum_vacuum_insert_scale_factor",
                       "autovacuum_vacuum_cost_limit", "autovacuum_vacuum_cost_delay",
                       "maintenance_work_mem", "shared_buffers", "server_version")
MB = 1e6


def _metrics(port):
    """(sent total, lateness histogram {le: cumulative}) from GET /metrics."""
    try:
        status, _, raw = exchange(port, "GET", "/metrics", timeout=10, host=B.HOST)
    except (OSError, http.client.HTTPException):
        return None, None
    if status != 200:
        return None, None
    text = raw.decode()
    m = re.search(r'^rmqs_jobs_published_total\{result="sent"\} (\d+)', text, re.M)
    hist = {le: int(v) for le, v in re.findall(
        r'^rmqs_dispatch_lateness_seconds_bucket\{le="([^"]+)"\} (\d+)', text, re.M)}
    return (int(m.group(1)) if m else None), (hist or None)


def _p99_bound_ms(h0, h1):
    """The upper bound (ms) of the histogram bucket holding the window's
    p99, from two cumulative scrapes; None without publishes."""
    if not h0 or not h1:
        return None
    total = h1.get("+Inf", 0) - h0.get("+Inf", 0)
    if total <= 0:
        return None
    for le, v in h1.items():
        if v - h0.get(le, 0) >= 0.99 * total:
            return None if le == "+Inf" else round(float(le) * 1000, 1)
    return None


def _stmt(dbid, like):
    """calls, rows, mean and max ms of one statement in one database since
    its entry was last reset, and its queryid (pg_stat_statements)."""
    rows = pg.sql("postgres",
                  "SELECT calls, rows, mean_exec_time, max_exec_time, queryid "
                  f"FROM pg_stat_statements WHERE dbid = {dbid} AND query LIKE '{like}'")
    if not rows:
        return {"calls": 0, "rows": 0, "mean_ms": None, "max_ms": None}, None
    calls, nrows, mean, mx, qid = rows[0]
    return ({"calls": int(calls), "rows": int(nrows), "mean_ms": round(float(mean), 3),
             "max_ms": round(float(mx), 3)}, qid)


def _table_stats(database):
    """pg_stat_user_tables of jobs and job_text, and the sizes."""
    rows = pg.sql(database,
                  "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, "
                  "n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, "
                  "coalesce(extract(epoch FROM last_autovacuum)::bigint, 0) "
                  "FROM pg_stat_user_tables WHERE relname IN ('jobs', 'job_text')")
    keys = ("live", "dead", "autovacuum_count", "ins", "upd", "hot_upd", "del",
            "last_autovacuum_epoch")
    out = {r[0]: dict(zip(keys, (int(v) for v in r[1:]))) for r in rows}
    (heap, idx, text, db), = pg.sql(database,
                                    "SELECT pg_table_size('jobs'), pg_indexes_size('jobs'), "
                                    "pg_total_relation_size('job_text'), "
                                    "pg_database_size(current_database())")
    out["bytes"] = {"jobs_heap": int(heap), "jobs_indexes": int(idx),
                    "jobs_total": int(heap) + int(idx), "job_text_total": int(text),
                    "database": int(db)}
    return out


AV_HEAD = re.compile(r'automatic vacuum of table "([^"]+)\.public\.(jobs|job_text)": '
                     r'index scans: (\d+)')


def autovacuums(log_path, database, offset=0):
    """The autovacuums of jobs and job_text in database that the server's
    log (log_autovacuum_min_duration = 0 on both tables) reports from
    byte offset on: [{table, index_scans, tuples_removed, pages_remain,
    elapsed_s, cpu_s}], and the offset to read from next time."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return [], offset
    end = text.rfind("\n") + 1  # a message still being written: next time
    out = []
    parts = AV_HEAD.split(text[:end])
    # split() gives [before, db, table, scans, body, db, table, scans, body...]
    for k in range(1, len(parts) - 3, 4):
        db, table, scans, body = parts[k:k + 4]
        if db != database:
            continue
        m = {key: re.search(rx, body) for key, rx in (
            ("removed", r"tuples: (\d+) removed"), ("remain", r"pages: \d+ removed, (\d+) remain"),
            ("elapsed", r"elapsed: ([0-9.]+) s"), ("user", r"CPU: user: ([0-9.]+) s"),
            ("system", r"system: ([0-9.]+) s"))}
        if not m["elapsed"]:
            continue
        out.append({"table": table, "index_scans": int(scans),
                    "tuples_removed": int(m["removed"].group(1)) if m["removed"] else None,
                    "pages_remain": int(m["remain"].group(1)) if m["remain"] else None,
                    "elapsed_s": float(m["elapsed"].group(1)),
                    "cpu_s": round(float(m["user"].group(1)) + float(m["system"].group(1)), 2)
                    if m["user"] and m["system"] else None})
    return out, offset + len(text[:end].encode())


class Load:
    """The client: a batch of rate * TICK_S jobs every TICK_S on one
    keep-alive connection, job i due at t0 + LEAD_MS + i / rate; catches up
    when a POST took longer than a tick. due[i] is job i's due time (ms)."""

    def __init__(self, port, ex, rk, rate, seconds):
        self.port, self.ex, self.rk = port, ex, rk
        self.rate, self.n = rate, int(rate * seconds)
        self.per = max(1, int(round(rate * TICK_S)))
        self.due = array.array("q", bytes(8 * self.n))
        self.stored = 0
        self.t0_ms = None
        self.max_lag_ms = 0.0
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        h = KeepAlive(self.port, timeout=60)
        t0 = time.monotonic()
        t0_ms = self.t0_ms = now_ms()
        try:
            for k in range(0, self.n, self.per):
                target = t0 + k / self.rate
                d = target - time.monotonic()
                if d > 0 and self.stop.wait(d):
                    return
                if self.stop.is_set():
                    return
                self.max_lag_ms = max(self.max_lag_ms, -d * 1000)
                jobs = []
                for i in range(k, min(self.n, k + self.per)):
                    # due on the run's own clock: a late batch keeps its
                    # due times if they are still ahead, else due at once
                    self.due[i] = max(t0_ms + LEAD_MS + i * 1000 // self.rate, now_ms())
                    jobs.append({"exchange": self.ex, "routing_key": self.rk,
                                 "body": f"r{i}", "deliver_at": format_ts_ms(self.due[i])})
                st, raw = h.post("/schedule/batch", json.dumps(jobs))
                if st != 201:
                    self.errors.append(f"{st} {raw[:200]!r}")
                    return
                self.stored += len(jobs)
        except Exception as e:  # reported by the scenario
            self.errors.append(repr(e))
        finally:
            h.close()


class RetentionBench:
    def __init__(self, b):
        self.b = b
        self.a = b.a
        pidfile = os.environ["RMQS_BENCH_PG_PIDFILE"]
        self.postmaster = int(open(pidfile).readline())
        # run.sh's server logs here (tests/lib/common.sh rmqs_pg_start)
        self.pg_log = os.path.join(os.path.dirname(os.path.dirname(pidfile)), "postgres.log")
        self.pg_log_at = 0
        self.PgService = stores.pg_service_class(B.Service)

    def run(self):
        a = self.a
        seconds = a.retention_seconds or (1800 if a.mode == "full" else 180)
        rate, every = a.retention_rate, a.retention_every
        svc = self.PgService(a.bin, self.b.work, "retention", self.b.url,
                             args=["--retention-s", str(a.retention_keep_s),
                                   "--purge-interval-s", "1"])
        self.b.services.append(svc)
        res = {"rate_per_s": rate, "seconds": seconds, "retention_s": a.retention_keep_s,
               "purge_interval_s": 1, "start": svc.start()}
        db = svc.pg_database
        res["settings"] = dict(pg.sql("postgres", "SELECT name, setting || coalesce(unit, '') "
                                      "FROM pg_settings WHERE name IN ("
                                      + ", ".join(f"'{s}'" for s in AUTOVACUUM_SETTINGS)
                                      + ") ORDER BY name"))
        # every autovacuum of the two tables in the server's log, read back
        opts = ",".join(filter(None, ["log_autovacuum_min_duration=0", a.retention_reloptions]))
        for table in ("jobs", "job_text"):
            pg.sql(db, f"ALTER TABLE {table} SET ({opts})")
        try:
            self.pg_log_at = os.path.getsize(self.pg_log)
        except OSError:
            self.pg_log_at = 0
        res["reloptions"] = {r[0]: r[1] for r in pg.sql(
            db, "SELECT relname, array_to_string(reloptions, ',') FROM pg_class "
                "WHERE relname IN ('jobs', 'job_text')")}
        (dbid,), = pg.sql("postgres", f"SELECT oid FROM pg_database WHERE datname = '{db}'")
        if a.retention_backlog:
            # pending jobs far ahead beside the load: what the claim, the
            # purge and every autovacuum of jobs then work beside
            log(f"retention: writing a backlog of {a.retention_backlog} pending jobs "
                "due 1-30 days ahead")
            post_template(svc)
            res["backlog"] = stores.fill_backlog(svc, a.retention_backlog, "bench-backlog")
            res["backlog_sizes"] = stores.relation_sizes(db)
        ex, q, rk = self.b.admin.target(self.b.tag())
        n = int(rate * seconds)
        cons = self.b.consumer(q, n, seconds + 120)
        log(f"retention: {rate} jobs/s for {seconds} s (batches every {TICK_S * 1000:.0f} ms, "
            f"due {LEAD_MS} ms after), --retention-s {a.retention_keep_s} "
            f"--purge-interval-s 1, reloptions {res['reloptions']}; {res['settings']}")
        load = Load(svc.port, ex, rk, rate, seconds)
        rows, totals = [], {"purge_calls": 0, "purge_rows": 0, "purge_ms": 0.0,
                            "purge_max_ms": 0.0}
        self._header()
        t0 = time.monotonic()
        # CPU per window: the postgres server's whole tree, the service, the
        # broker, the consumer, and the processes the bench did not start
        window = stores.window_class(B.CpuWindow, {"postgres": self.postmaster}, {})
        pids = self.b.cpu_pids(svc, cons)

        def new_window():
            return window(pids, svc.pid).start()
        cpu0 = new_window()
        h0 = h_start = _metrics(svc.port)[1]
        load.thread.start()
        try:
            k = 1
            while load.thread.is_alive():
                load.thread.join(timeout=max(0.0, t0 + k * every - time.monotonic()))
                if load.errors:
                    raise BenchError(f"retention: the client failed: {load.errors[:2]}")
                row, cpu0, h0 = self._sample(svc, db, dbid, load, t0, cpu0, h0, new_window)
                rows.append(row)
                self._print(row)
                k += 1
        finally:
            load.stop.set()
            load.thread.join(timeout=60)
        got = cons.result()
        # the last jobs sent and purged: one more row
        time.sleep(max(2.0, a.retention_keep_s + 2.0))
        row, cpu0, h0 = self._sample(svc, db, dbid, load, t0, cpu0, h0, new_window)
        rows.append(row)
        self._print(row)
        for row in rows:
            pu = row["purge"]
            totals["purge_calls"] += pu["calls"]
            totals["purge_rows"] += pu["rows"]
            totals["purge_ms"] += pu["calls"] * (pu["mean_ms"] or 0)
            totals["purge_max_ms"] = max(totals["purge_max_ms"], pu["max_ms"] or 0)
        res["stored"] = load.stored
        res["client_max_lag_ms"] = round(load.max_lag_ms, 1)
        res["rows"] = rows
        res["purge_totals"] = totals
        res["final"] = _table_stats(db)
        res["service_lateness_histogram"] = B.hist_delta(h_start, h0)
        self._lateness(res, load, got, every)
        self._verdict(res)
        res["stop"] = svc.stop(timeout=60)
        return res

    def _sample(self, svc, db, dbid, load, t0, cpu0, h0, new_window):
        st = _table_stats(db)
        purge, purge_id = _stmt(dbid, PURGE_LIKE)
        claim, claim_id = _stmt(dbid, stores.CLAIM_LIKE)
        for qid in (purge_id, claim_id):
            if qid is not None:
                pg.sql("postgres", f"SELECT pg_stat_statements_reset(0, {dbid}, {qid})")
        sent, h1 = _metrics(svc.port)
        vacs, self.pg_log_at = autovacuums(self.pg_log, db, self.pg_log_at)
        usage = cpu0.stop()
        cpu0 = new_window()
        now = time.monotonic()
        cpu = {"postgres_pct": usage["cpu_pct"].get("postgres"),
               "service_pct": usage["cpu_pct"].get("service"),
               "machine_busy_pct": usage.get("machine_busy_pct"),
               "other_processes_cpu_pct": usage.get("other_processes_cpu_pct")}
        row = {"elapsed_s": round(now - t0, 1), "stored": load.stored, "sent": sent,
               "jobs": st.get("jobs"), "job_text": st.get("job_text"), "bytes": st["bytes"],
               "purge": purge, "claim": claim, "service_p99_bound_ms": _p99_bound_ms(h0, h1),
               "autovacuums": vacs,
               "cpu": cpu}
        return row, cpu0, h1

    @staticmethod
    def _header():
        print("\nretention: every row is one window (see tests/bench/retention.py)", flush=True)
        print(f"{'t s':>6} {'stored':>8} {'sent':>8} {'live':>8} {'dead':>8} {'heap MB':>8} "
              f"{'idx MB':>7} {'text MB':>7} {'db MB':>7} {'av j/t':>6} {'purge n':>7} "
              f"{'rows':>7} {'ms mean/max':>13} {'claim mean/max':>15} {'p99<=':>6} "
              f"{'vac s':>5} {'pg%':>5} {'svc%':>5} {'oth%':>5}", flush=True)

    @staticmethod
    def _print(r):
        j, t, by, pu, cl = r["jobs"] or {}, r["job_text"] or {}, r["bytes"], r["purge"], r["claim"]

        def mm(s):
            return "-" if s["mean_ms"] is None else f"{s['mean_ms']:.2f}/{s['max_ms']:.1f}"
        print(f"{r['elapsed_s']:>6.0f} {r['stored']:>8} {r['sent'] or 0:>8} "
              f"{j.get('live', 0):>8} {j.get('dead', 0):>8} {by['jobs_heap'] / MB:>8.1f} "
              f"{by['jobs_indexes'] / MB:>7.1f} {by['job_text_total'] / MB:>7.1f} "
              f"{by['database'] / MB:>7.1f} "
              f"{str(j.get('autovacuum_count', 0)) + '/' + str(t.get('autovacuum_count', 0)):>6} "
              f"{pu['calls']:>7} {pu['rows']:>7} {mm(pu):>13} {mm(cl):>15} "
              f"{r['service_p99_bound_ms'] if r['service_p99_bound_ms'] is not None else '-':>6} "
              f"{sum(v['elapsed_s'] for v in r['autovacuums']):>5.1f} "
              f"{r['cpu']['postgres_pct']:>5} {r['cpu']['service_pct']:>5} "
              f"{r['cpu']['other_processes_cpu_pct']:>5}", flush=True)

    @staticmethod
    def _lateness(res, load, got, every):
        """The consumer's lateness overall and per window of due time."""
        t0_ms = load.t0_ms
        late, per, seen, dup = [], {}, set(), 0
        for ns, ident in got:
            if not ident.startswith("r") or not ident[1:].isdigit():
                continue
            i = int(ident[1:])
            if i >= load.stored:
                continue
            if i in seen:
                dup += 1
                continue
            seen.add(i)
            v = ns / 1e6 - load.due[i]
            late.append(v)
            per.setdefault(int((load.due[i] - t0_ms) // (every * 1000)), []).append(v)
        res["received"] = len(seen)
        res["missing"] = load.stored - len(seen)
        res["duplicates"] = dup
        res["lateness"] = B.lateness_stats(late)
        res["lateness_per_window"] = {str((w + 1) * every): B.lateness_stats(v)
                                      for w, v in sorted(per.items())}
        log(f"retention: received {len(seen)}/{load.stored}, lateness {res['lateness']}")

    @staticmethod
    def _verdict(res):
        """Flat or not: the largest total size of jobs (heap + indexes) and
        of job_text over the second half of the run against the first
        half's, once autovacuum ran (rows before its first run are warm-up)."""
        rows = res["rows"]
        first_av = next((k for k, r in enumerate(rows)
                         if (r["jobs"] or {}).get("autovacuum_count", 0) > 0), None)
        out = {"first_autovacuum_row_s": None if first_av is None else rows[first_av]["elapsed_s"]}
        if first_av is not None and len(rows) - first_av >= 4:
            steady = rows[first_av:]
            half = len(steady) // 2
            for key in ("jobs_total", "job_text_total", "database"):
                a = max(r["bytes"][key] for r in steady[:half])
                b = max(r["bytes"][key] for r in steady[half:])
                out[key] = {"first_half_max_mb": round(a / MB, 1),
                            "second_half_max_mb": round(b / MB, 1),
                            "growth_pct": round(100 * (b - a) / a, 1) if a else None}
        mb = [r["bytes"]["jobs_total"] / MB for r in rows]
        out["jobs_total_mb_min_max"] = [round(min(mb), 1), round(max(mb), 1)] if mb else None
        res["flat"] = out


def scenario(b, _svc):
    """bench.py's entry (PostgreSQL only: run.sh starts the server)."""
    return RetentionBench(b).run()


def table_rows(R, row):
    scn = (f"retention (PostgreSQL, {R['rate_per_s']:,}/s x {R['seconds']} s, "
           f"--retention-s {R['retention_s']}"
           + (f", backlog {R['backlog']['jobs']:,}" if R.get("backlog") else "") + ")")
    row(scn, "received / stored, missing, duplicates",
        f"{R['received']:,}/{R['stored']:,}, {R['missing']}, {R['duplicates']}", "all, 0, 0",
        R["missing"] == 0 and R["duplicates"] == 0)
    st = R.get("lateness") or {}
    row(scn, "lateness at the consumer: early / p50 / p99 / max",
        f"{st.get('early')} / {st.get('p50_ms')} / {st.get('p99_ms')} / {st.get('max_ms')} ms",
        "0 early, p99 <= 5, max <= 50",
        st.get("early") == 0 and (st.get("p99_ms") or 1e9) <= 5 and (st.get("max_ms") or 1e9) <= 50)
    f = R.get("flat") or {}
    for key, label in (("jobs_total", "jobs (heap + indexes)"), ("job_text_total", "job_text"),
                       ("database", "database")):
        if key in f:
            v = f[key]
            row(scn, f"{label}: max MB, steady state first half -> second half",
                f"{v['first_half_max_mb']} -> {v['second_half_max_mb']} ({v['growth_pct']} %)",
                "flat (< 10 %)", v["growth_pct"] is not None and v["growth_pct"] < 10)
    row(scn, "first autovacuum of jobs after (s)", f.get("first_autovacuum_row_s"))
    fin = R.get("final") or {}
    j = fin.get("jobs") or {}
    row(scn, "jobs at the end: live / dead tuples, autovacuum runs, HOT updates",
        f"{j.get('live')} / {j.get('dead')}, {j.get('autovacuum_count')}, "
        f"{j.get('hot_upd')} of {j.get('upd')}")
    t = R["purge_totals"]
    row(scn, "purge: DELETE statements, rows, mean / max ms",
        f"{t['purge_calls']:,}, {t['purge_rows']:,}, "
        f"{t['purge_ms'] / t['purge_calls'] if t['purge_calls'] else 0:.2f} / "
        f"{t['purge_max_ms']:.1f}")
    for table in ("jobs", "job_text"):
        vs = [v for r in R["rows"] for v in r["autovacuums"] if v["table"] == table]
        if vs:
            el = [v["elapsed_s"] for v in vs]
            row(scn, f"autovacuum of {table}: runs, elapsed mean / max s, tuples removed "
                "mean, index scans max",
                f"{len(vs)}, {sum(el) / len(el):.2f} / {max(el):.2f}, "
                f"{sum(v['tuples_removed'] or 0 for v in vs) / len(vs):,.0f}, "
                f"{max(v['index_scans'] for v in vs)}")
    pgc = [r["cpu"]["postgres_pct"] for r in R["rows"] if r["cpu"]["postgres_pct"] is not None]
    if pgc:
        row(scn, "CPU of postgres (mean / max window, % of a core)",
            f"{sum(pgc) / len(pgc):.0f} / {max(pgc):.0f}")


if __name__ == "__main__":
    sys.exit("run through tests/bench/run.sh --only retention")
