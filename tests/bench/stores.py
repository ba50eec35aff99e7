"""tests/bench/stores.py - the store benchmark of issue 12: SQLite with one
instance, PostgreSQL with one instance and PostgreSQL with three instances
on one database, side by side in one run (bench.py --only stores; run.sh
starts the PostgreSQL server: fsync on, synchronous_commit on,
pg_stat_statements preloaded).

Why a module of its own: bench.py holds the scenarios of one instance on
SQLite; this one reuses them unchanged (precision, ingest, burst are
bench.py's methods, given a target) and adds what several instances on a
shared database need:
  - Instances: N services on one database as one target. Its .port hands
    out the instances' ports in turn, so the paced client's 16 keep-alive
    connections (each reads .port once) post round robin to all of them;
    .query reads the shared database (psql), .rss sums the instances.
  - CPU of the postgres server: every backend is its own process, so the
    CPU windows of bench.py get the server's whole process tree (postmaster,
    its backends, and what exited in the window) as one "postgres" figure,
    taken out of "other processes" (the window class is swapped for the
    duration of this scenario only).
  - pg_stat_statements: the top statements of each PostgreSQL column.
  - backlog on PostgreSQL: N pending jobs written with one INSERT ... SELECT
    through psql (the service running: it counts nothing it did not write,
    so the slot counts are added in the same transaction), then a restart:
    start-up time, RSS, and the cost of the exact claim statement (its text
    from pg_stat_statements, as the service ran it) under EXPLAIN (ANALYZE,
    BUFFERS), empty against N, inside a transaction that is rolled back.

Nothing here asserts a time: it is a benchmark; the table says which target
was met and what limited each figure (the CPU of each process over the
window).
"""

import json
import os
import re
import statistics
import sys
import threading
import time

# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
import pylib.service
from pylib import pg
from pylib.http import KeepAlive
from pylib.procs import rss_kib
from pylib.times import now_ms
import benchlib  # tests/bench: the runner's shared code

CLK_TCK = os.sysconf("SC_CLK_TCK")
COLUMNS = ("sqlite-1", "pg-1", "pg-3")


# --- the postgres server's CPU ---------------------------------------------------

def _stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree_ticks(root):
    """CPU ticks of root, of its live children, and of its children that
    exited (root's cutime + cstime): the whole postgres server."""
    f = _stat(root)
    if f is None:
        return None
    total = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    for d in os.listdir("/proc"):
        if d.isdigit():
            c = _stat(d)
            if c is not None and c[1] == str(root):
                total += int(c[11]) + int(c[12])
    return total


def window_class(base, trees, singles):
    """bench.py's CpuWindow, plus trees {label: root pid} (whole process
    trees) and singles {label: pid} (more service instances), counted out of
    "other processes"."""

    class StoreCpuWindow(base):
        def start(self):
            self.t0_extra = {k: tree_ticks(p) for k, p in trees.items()}
            self.t0_extra.update({k: _ticks(p) for k, p in singles.items()})
            return super().start()

        def stop(self, wall_override=None):
            out = super().stop(wall_override)
            wall = out["wall_s"]
            for k, p in list(trees.items()) + list(singles.items()):
                t1 = tree_ticks(p) if k in trees else _ticks(p)
                t0 = self.t0_extra.get(k)
                if t1 is None or t0 is None:
                    continue
                v = round((t1 - t0) / CLK_TCK / wall * 100, 1)
                out["cpu_pct"][k] = v
                if "other_processes_cpu_pct" in out:
                    out["other_processes_cpu_pct"] = round(
                        max(0.0, out["other_processes_cpu_pct"] - v), 1)
            return out

    return StoreCpuWindow


def _ticks(pid):
    f = _stat(pid)
    return None if f is None else int(f[11]) + int(f[12])


SHORT = {"rabbitmq": "mq", "postgres": "pg", "bench.py": "client", "consumer": "consumer",
         "exited children": "wrk"}


def limited_by(cpu):
    """What limited a window, in percent of one core: the machine's busy
    share, then the processes by CPU, largest first (svc: the instances
    together, wrk: exited children such as wrk, other: processes the
    benchmark did not start)."""
    if not cpu:
        return "n/a"
    agg, n_svc = {}, 0
    for k, v in cpu.get("cpu_pct", {}).items():
        k = k.split(" (")[0]
        if k.startswith("service"):
            n_svc += 1
            k = "svc"
        k = SHORT.get(k, k)
        agg[k] = agg.get(k, 0) + v
    if n_svc > 1:
        agg[f"svc x{n_svc}"] = agg.pop("svc")
    procs = sorted(((v, k) for k, v in agg.items() if v >= 3), reverse=True)
    s = " ".join(f"{k} {v:.0f}" for v, k in procs[:5])
    other = cpu.get("other_processes_cpu_pct")
    return (f"busy {cpu.get('machine_busy_pct', '?'):.0f}%: {s}"
            + (f" other {other:.0f}" if other is not None else ""))


# --- the services ----------------------------------------------------------------

def _value(text):
    if text is None:
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _literal(v):
    if isinstance(v, (int, float)):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def pg_service_class(base):
    """bench.py's Service on PostgreSQL: a new database on the bench's
    server (pylib.pg), or the database of another instance (share)."""

    class PgService(base):
        def __init__(self, binary, workdir, name, amqp_url, args=(), share=None):
            # pylint: disable=non-parent-init-called,super-init-not-called
            pylib.service.Service.__init__(
                self, os.path.join(workdir, name), amqp_url, args, binary=binary,
                log_path=os.path.join(workdir, f"service-{name}.log"),
                store="postgres", share_db_with=share)
            self.env = None

        def db_bytes(self):
            (size,), = self.sql(f"SELECT pg_database_size('{self.pg_database}')")
            return {"database": int(size)}

        def query(self, sql, params=()):
            """bench.py's queries (sqlite3 style, ? placeholders) in this
            instance's database, numbers as numbers."""
            parts = sql.split("?")
            assert len(parts) == len(params) + 1, sql
            text = parts[0] + "".join(_literal(p) + s for p, s in zip(params, parts[1:]))
            return [tuple(_value(f) for f in row) for row in self.sql(text)]

    return PgService


class Instances:
    """N instances on one database, as one target for bench.py's scenarios
    (see the file comment)."""

    def __init__(self, svcs):
        self.svcs = svcs
        self.turn = 0
        self.lock = threading.Lock()

    @property
    def port(self):
        with self.lock:
            self.turn += 1
            return self.svcs[(self.turn - 1) % len(self.svcs)].port

    @property
    def pid(self):
        return self.svcs[0].pid

    @property
    def dir(self):
        return self.svcs[0].dir

    def rss(self):
        each = [rss_kib(s.pid) for s in self.svcs]
        return {"rss_kib": sum(r.get("rss_kib") or 0 for r in each),
                "hwm_kib": sum(r.get("hwm_kib") or 0 for r in each),
                "per_instance_rss_kib": [r.get("rss_kib") for r in each]}

    def query(self, sql, params=()):
        return self.svcs[0].query(sql, params)


# --- pg_stat_statements and the claim statement ------------------------------------

def stat_reset():
    pg.sql("postgres", "SELECT pg_stat_statements_reset()")


def stat_top(database, n=6):
    rows = pg.sql("postgres",
                  "SELECT calls, round(total_exec_time::numeric, 1), "
                  "round(mean_exec_time::numeric, 3), rows, "
                  "regexp_replace(left(query, 90), '\\s+', ' ', 'g') "
                  "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
                  f"WHERE datname = '{database}') ORDER BY total_exec_time DESC LIMIT {n}")
    return [{"calls": int(r[0]), "total_ms": float(r[1]), "mean_ms": float(r[2]),
             "rows": int(r[3]), "query": r[4]} for r in rows]


def claim_text(binary):
    """The claim statement exactly as the service runs it: store_pg_dispatch.c's
    pg_claim_sql, one string literal in the binary's read-only data (read
    from the binary under test, so it cannot drift from what runs).
    pg_stat_statements cannot give it: it replaces the literals of a
    statement's text by $n."""
    with open(binary, "rb") as f:
        m = re.search(rb"WITH moved AS \(UPDATE jobs SET status = 1, owner = \$1[^\x00]*",
                      f.read())
    return m.group(0).decode() if m else None


# The claim in pg_stat_statements: its text normalized (literals as $n) when
# the entry was made at the statement's PREPARE, as written (status = 1)
# when made at an EXECUTE after the entry was reset.
CLAIM_LIKE = "WITH moved AS (UPDATE jobs SET status = %, owner = $1,%"


def claim_stats(database):
    """pg_stat_statements of the claim."""
    rows = pg.sql("postgres", "SELECT calls, round(mean_exec_time::numeric, 3), "
                  "round(max_exec_time::numeric, 3), rows FROM pg_stat_statements "
                  "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = "
                  f"'{database}') AND query LIKE '{CLAIM_LIKE}'")
    return [{"calls": int(r[0]), "mean_ms": float(r[1]), "max_ms": float(r[2]),
             "rows": int(r[3])} for r in rows]


def psql(database, script, timeout):
    """A long script (a fill) as the admin: pylib.pg's runner with a longer
    timeout than its sql() allows."""
    # pylint: disable=protected-access
    return pg._run(pg._admin(database), script, timeout)


def explain_claim(svc, text, due_rows=100, limit=100, repeats=5):
    """EXPLAIN (ANALYZE, BUFFERS) of the claim, `repeats` times, each in a
    transaction that first adds `due_rows` jobs due now (seen by nobody
    else) and is rolled back: the cost of claiming `limit` of them beside
    whatever the database holds. Returns the execution times and the last
    plan."""
    t = now_ms()
    one = (f"BEGIN; INSERT INTO jobs (id, status, exchange, routing_key, deliver_at, due_at, "
           "delay_ms, created_at, updated_at, attempts, max_attempts, body_kind, body) "
           f"SELECT decode(md5(random()::text || i), 'hex'), 0, 'bench-explain', 'rk', "
           f"{t - 1000}, {t - 1000}, 0, {t}, {t}, 0, 5, 0, '\\x'::bytea "
           f"FROM generate_series(1, {due_rows}) i; "
           "EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_claim('bench-explain', 10000, "
           f"{t}, {t}, {limit}, 1, 0, -9223372036854775808, 0); ROLLBACK;")
    # the claim's parameters (store_pg_dispatch.c): owner, lease, now, due
    # by, limit, then one claimer alone (rank 0, nobody else's jobs) and
    # the count slot
    script = ("PREPARE bench_claim(text, bigint, bigint, bigint, bigint, bigint, "
              f"bigint, bigint, smallint) AS {text};" + one * repeats)
    out = pg.sql(svc.pg_database, script)
    # psql ends each statement's result with a newline: rows hold lines
    lines = "\n".join(r[0] for r in out).splitlines()
    times = [float(m.group(1)) for m in
             (re.search(r"Execution Time: ([0-9.]+) ms", x) for x in lines) if m]
    plan_start = max(i for i, x in enumerate(lines) if x.startswith("CTE Scan on moved"))
    return {"execution_ms": times,
            "median_ms": round(statistics.median(times), 3) if times else None,
            "plan": lines[plan_start:]}


# --- a backlog written behind the service's back, and where its bytes go ------------

def fill_backlog(svc, n, template_exchange):
    """n pending jobs due 1-30 days ahead (random, as clients would send
    them) written by one INSERT ... SELECT generate_series through psql into
    svc's database, copying the content of a job of template_exchange made
    through the API; ids grow with seq (as UUIDv7s do with time). In the
    same transaction, as the service would have it: the store's insert lock
    (shared, see migrations/postgres/0003_search.sql), the search side table
    job_text and its mark (store_pg_indexer.c's copy), the count of pending
    jobs (job_counts slot 0). Then VACUUM (ANALYZE) and CHECKPOINT. The
    service may be running."""
    base, span = now_ms(), 29 * 86400000
    fill = (
        "BEGIN; SELECT pg_advisory_xact_lock_shared(hashtext('rmqs-jobs-insert')); "
        "INSERT INTO jobs (id, status, exchange, routing_key, deliver_at, due_at, "
        "delay_ms, created_at, updated_at, attempts, max_attempts, headers, properties, "
        "body_kind, body, source) "
        f"SELECT decode(lpad(to_hex(i), 32, '0'), 'hex'), 0, 'bench-backlog', j.routing_key, "
        f"d, d, d - {base}, {base}, {base}, 0, j.max_attempts, j.headers, j.properties, "
        f"j.body_kind, j.body, 0 FROM generate_series(1, {n}) i, "
        f"LATERAL (SELECT {base} + 86400000 + (random() * {span})::bigint + i * 0 AS d) t, "
        f"(SELECT * FROM jobs WHERE exchange = '{template_exchange}' LIMIT 1) j; "
        "INSERT INTO job_text (seq, headers, body) SELECT seq, headers::jsonb, "
        "CASE WHEN body_kind < 2 THEN encode(body, 'escape') END FROM jobs "
        "WHERE seq > (SELECT mark FROM search_index) ORDER BY seq "
        "ON CONFLICT (seq) DO NOTHING; "
        "UPDATE search_index SET mark = greatest(mark, (SELECT max(seq) FROM jobs)); "
        "INSERT INTO job_counts (slot, status, n) VALUES (0, 0, "
        f"{n}) ON CONFLICT (slot, status) DO UPDATE SET n = job_counts.n + EXCLUDED.n; "
        "COMMIT;")
    t0 = time.monotonic()
    psql(svc.pg_database, fill, timeout=4 * 3600)
    secs = time.monotonic() - t0
    # what autovacuum would have done long before a backlog this size is
    # measured in production (one statement a call: VACUUM refuses a
    # transaction block)
    for stmt in ("VACUUM (ANALYZE) jobs", "VACUUM (ANALYZE) job_text", "CHECKPOINT"):
        psql(svc.pg_database, stmt, timeout=4 * 3600)
    return {"method": "one INSERT ... SELECT generate_series through psql, due times "
                      "random over 1-30 days, the template job's content, job_text "
                      "and its mark in the same transaction; then VACUUM (ANALYZE)",
            "jobs": n, "seconds": round(secs, 2), "jobs_per_s": round(n / secs, 1),
            "vacuum_analyze_checkpoint_s": round(time.monotonic() - t0 - secs, 2)}


def relation_sizes(database):
    """Bytes of the jobs table and of each of its indexes, of job_text
    (with its indexes) and of the database, from the server's own
    functions: {"jobs_heap": .., "jobs_indexes": .., "index": {name: ..},
    "job_text_total": .., "database": ..}."""
    rows = pg.sql(database,
                  "SELECT 'i', c.relname, pg_relation_size(c.oid) FROM pg_index x "
                  "JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = 'jobs'::regclass "
                  "UNION ALL SELECT 't', 'jobs_heap', pg_table_size('jobs') "
                  "UNION ALL SELECT 't', 'jobs_indexes', pg_indexes_size('jobs') "
                  "UNION ALL SELECT 't', 'job_text_total', pg_total_relation_size('job_text') "
                  "UNION ALL SELECT 't', 'database', pg_database_size(current_database())")
    out = {"index": {}}
    for kind, name, size in rows:
        if kind == "i":
            out["index"][name] = int(size)
        else:
            out[name] = int(size)
    return out


# --- the scenario -------------------------------------------------------------------

class StoreBench:
    def __init__(self, b, sqlite_svc):
        self.b = b
        self.B = benchlib  # the runner's shared code (CpuWindow, Service, log...)
        self.sqlite = sqlite_svc
        self.PgService = pg_service_class(self.B.Service)
        self.postmaster = int(open(os.environ["RMQS_BENCH_PG_PIDFILE"]).readline())
        self.base_window = self.B.CpuWindow
        self.a = b.a

    def pg_instances(self, name, n):
        first = self.PgService(self.a.bin, self.b.work, f"{name}-1", self.b.url)
        svcs = [first] + [self.PgService(self.a.bin, self.b.work, f"{name}-{k}", self.b.url,
                                         share=first) for k in range(2, n + 1)]
        self.b.services += svcs
        starts = [s.start() for s in svcs]
        return svcs, starts

    def windows_for(self, svcs):
        singles = {f"service-{k + 1}": s.pid for k, s in enumerate(svcs) if k > 0}
        self.B.CpuWindow = window_class(self.base_window, {"postgres": self.postmaster},
                                        singles)

    def ingest_many(self, svcs, label):
        """bench.py's ingest on every instance at once (one wrk per instance,
        1 thread, the connections split): the sum of the jobs/s."""
        B, secs = self.B, self.b.ingest_s
        one = json.dumps({"exchange": "bench-ingest", "routing_key": "rk",
                          "body": "x", "delay_ms": 3600000})
        batch = json.dumps([{"exchange": "bench-ingest", "routing_key": "rk",
                             "body": f"x{i}", "delay_ms": 3600000} for i in range(1000)])
        scripts = {"schedule": B.wrk_script(self.b.work, "schedule", "POST", one),
                   "batch": B.wrk_script(self.b.work, "batch", "POST", batch,
                                         headers={"Prefer": "return=minimal"})}
        conns = {"schedule": 64, "batch": 32}
        path = {"schedule": "/schedule", "batch": "/schedule/batch"}
        pids = self.b.cpu_pids(svcs[0])
        out = {"label": label, "seconds": secs}
        for kind in ("schedule", "batch"):
            B.log(f"{label}: {len(svcs)} x wrk POST {path[kind]}, {secs} s")
            res = [None] * len(svcs)

            def one_wrk(k, kind=kind, res=res):
                res[k] = B.run_wrk(f"http://{B.HOST}:{svcs[k].port}{path[kind]}",
                                   scripts[kind], 1, conns[kind] // len(svcs), secs,
                                   pids, svcs[k].pid)
            ts = [threading.Thread(target=one_wrk, args=(k,)) for k in range(len(svcs))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            per = [r["ok_requests_per_s"] * (1000 if kind == "batch" else 1) for r in res]
            out[kind] = {"per_instance_jobs_per_s": per, "runs": res, "cpu": res[0]["cpu"]}
            out[f"{kind}_jobs_per_s"] = round(sum(per), 1)
        B.log(f"{label}: schedule {out['schedule_jobs_per_s']} jobs/s, batch "
              f"{out['batch_jobs_per_s']} jobs/s")
        return out

    def column(self, name, target, svcs, database):
        """precision, ingest and burst on one target; pg_stat_statements of
        the whole column when on PostgreSQL."""
        b, col = self.b, {}
        if database:
            stat_reset()
        col["precision"] = b.precision(target, f"{name}: precision", self.a.rate,
                                       self.a.precision_seconds)
        if len(svcs) > 1:
            col["ingest"] = self.ingest_many(svcs, f"{name}: ingest")
        else:
            col["ingest"] = b.ingest(target, f"{name}: ingest")
        col["burst"] = b.scenario_burst(target, self.a.burst_repeats)
        col["rss_end"] = target.rss()
        if database:
            col["pg_stat_statements_top"] = stat_top(database)
        return col

    def backlog(self, n):
        """N pending jobs on PostgreSQL (one instance): start-up, RSS and the
        claim's cost, empty against N."""
        B, out = self.B, {"jobs": n}
        (svc,), (start,) = self.pg_instances("pg-backlog", 1)
        self.windows_for([svc])
        out["empty_start"] = start
        out["empty_rss_at_ready"] = svc.rss()
        # one job through the dispatcher, so the claim has run (its text in
        # pg_stat_statements), and the template of the backlog's rows
        ex, _, rk = self.b.admin.target(self.b.tag())
        h = KeepAlive(svc.port)
        st, raw = h.post("/schedule", json.dumps({"exchange": ex, "routing_key": rk,
                                                  "body": "backlog job with a small body",
                                                  "delay_ms": 100}))
        h.close()
        if st != 201:
            raise B.BenchError(f"template job: {st} {raw[:200]!r}")
        deadline = time.monotonic() + 30
        while not svc.query("SELECT 1 FROM jobs WHERE status = 2 AND exchange = ?", (ex,)):
            if time.monotonic() > deadline:
                raise B.BenchError("backlog: the template job was not sent within 30 s")
            time.sleep(0.05)
        text = claim_text(self.a.bin)
        if text is None:
            raise B.BenchError(f"backlog: no claim statement found in {self.a.bin}")
        out["claim_statement"] = text
        out["claim_empty"] = explain_claim(svc, text)
        out["claim_empty_10k_due"] = explain_claim(svc, text, 10000, 1000, repeats=3)
        B.log(f"backlog: claim of 100 due jobs on an empty database "
              f"{out['claim_empty']['median_ms']} ms (median)")
        B.log(f"backlog: filling {n} pending jobs (INSERT ... SELECT through psql)")
        cpu = self.B.CpuWindow(self.b.cpu_pids(svc), svc.pid).start()
        out["fill"] = fill_backlog(svc, n, ex)
        out["fill"]["cpu"] = cpu.stop()
        (pending,), = svc.query("SELECT count(*) FROM jobs WHERE status = 0")
        out["pending_in_db"] = pending
        out["db_bytes"] = svc.db_bytes()
        out["db_bytes_per_pending_job"] = round(out["db_bytes"]["database"] / n, 1)
        out["stop_after_fill"] = svc.stop(timeout=120)
        out["restart"] = svc.start(timeout=600)
        out["rss_at_ready"] = svc.rss()
        B.log(f"backlog: {pending} pending, ready after {out['restart']['ready_s']} s, RSS "
              f"{out['rss_at_ready']['rss_kib']} KiB")
        cpu = self.B.CpuWindow(self.b.cpu_pids(svc), svc.pid).start()
        time.sleep(5)
        out["idle_5s_after_restart"] = {"cpu": cpu.stop(), "rss": svc.rss()}
        out["claim_backlog"] = explain_claim(svc, text)
        # a burst beside the backlog: 10,000 due, the first 1,000 claimed
        out["claim_backlog_10k_due"] = explain_claim(svc, text, 10000, 1000, repeats=3)
        B.log(f"backlog: claim of 100 due jobs beside {n} pending "
              f"{out['claim_backlog']['median_ms']} ms (median)")
        out["rss_after_claims"] = svc.rss()
        out["claim_pg_stat_statements"] = claim_stats(svc.pg_database)
        out["stop"] = svc.stop(timeout=120)
        return out

    def run(self):
        out = {"settings": pg.sql("postgres", "SELECT string_agg(name || '=' || setting, ' ' "
                                  "ORDER BY name) FROM pg_settings WHERE name IN "
                                  "('fsync', 'synchronous_commit', 'shared_buffers', "
                                  "'wal_level', 'shared_preload_libraries', "
                                  "'server_version')")[0][0]}
        try:
            self.windows_for([])
            out["sqlite-1"] = self.column("sqlite-1", self.sqlite, [self.sqlite], None)
            self.sqlite.stop()
            for name, n in (("pg-1", 1), ("pg-3", 3)):
                svcs, starts = self.pg_instances(name, n)
                self.windows_for(svcs)
                target = svcs[0] if n == 1 else Instances(svcs)
                col = self.column(name, target, svcs, svcs[0].pg_database)
                col["starts"] = starts
                out[name] = col
                for s in svcs:
                    s.stop()
            out["backlog"] = self.backlog(self.a.backlog)
        finally:
            self.B.CpuWindow = self.base_window
        out["table"] = side_by_side(out)
        print_side_by_side(out["table"], out)
        return out


def scenario(b, sqlite_svc):
    """bench.py's entry: the three columns, then the backlog on PostgreSQL."""
    return StoreBench(b, sqlite_svc).run()


# --- the table ---------------------------------------------------------------------

def _get(d, *path):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def side_by_side(R):
    """Rows [figure, sqlite-1, pg-1, pg-3, target, met] from the results."""
    rows = []

    def row(fig, fn, target="", ok=None):
        vals = []
        for c in COLUMNS:
            try:
                vals.append(fn(R[c]))
            except (KeyError, TypeError, IndexError, ZeroDivisionError):
                vals.append(None)
        met = ""
        if ok is not None:
            met = " ".join(("yes" if ok(v) else "NO") if v is not None else "-" for v in vals)
        rows.append([fig] + [("n/a" if v is None else str(v)) for v in vals] + [target, met])

    def lat(k):
        return lambda c: c["precision"]["lateness"][k]
    row("precision: received / accepted",
        lambda c: f"{c['precision']['received']}/{c['precision']['accepted']}")
    row("precision: early", lat("early"), "0", lambda v: v == 0)
    row("precision: lateness p50 ms", lat("p50_ms"))
    row("precision: lateness p99 ms", lat("p99_ms"), "<= 5", lambda v: v <= 5)
    row("precision: lateness max ms", lat("max_ms"), "<= 50", lambda v: v <= 50)
    row("precision: rate achieved /s", lambda c: c["precision"]["rate_achieved"])
    row("precision: limited by", lambda c: limited_by(c["precision"]["cpu"]))
    row("ingest: POST /schedule jobs/s", lambda c: round(c["ingest"]["schedule_jobs_per_s"]),
        ">= 15000 (pg-1)")
    row("ingest: POST /schedule limited by", lambda c: limited_by(c["ingest"]["schedule"]["cpu"]))
    row("ingest: batch of 1,000 jobs/s", lambda c: round(c["ingest"]["batch_jobs_per_s"]),
        ">= 100000 (pg-1)")
    row("ingest: batch limited by", lambda c: limited_by(c["ingest"]["batch"]["cpu"]))
    row("burst 10k: drain ms (median of runs)", lambda c: c["burst"]["median_drain_ms"])
    row("burst 10k: dispatcher jobs/s", lambda c: c["burst"]["median_dispatcher_rate_per_s"])
    row("burst 10k: bare_publisher acks/s", lambda c: c["burst"]["median_bare_ack_rate_per_s"])
    row("burst 10k: dispatcher / bare", lambda c: c["burst"]["median_ratio"])
    row("burst 10k: limited by",
        lambda c: limited_by(c["burst"]["runs"][len(c["burst"]["runs"]) // 2]["service"]["cpu"]))
    bl = R.get("backlog") or {}
    n = bl.get("jobs")
    if bl.get("restart"):
        def pg1(fig, value, target="", met=""):
            rows.append([f"backlog {n:,} (pg-1): {fig}", "", value, "", target, met])

        def claims(key):
            return f"{bl[key]['median_ms']} -> {bl[key.replace('empty', 'backlog')]['median_ms']}"
        pg1("start-up s, empty -> N",
            f"{bl['empty_start']['ready_s']} -> {bl['restart']['ready_s']}", "<= 2",
            "yes" if bl["restart"]["ready_s"] <= 2 else "NO")
        pg1("RSS KiB at ready, empty -> N",
            f"{bl['empty_rss_at_ready']['rss_kib']} -> {bl['rss_at_ready']['rss_kib']}"
            f" (after claims {bl['rss_after_claims']['rss_kib']})", "flat")
        pg1("claim of 100 due, median ms, empty -> N", claims("claim_empty"), "flat")
        pg1("claim 1,000 of 10,000 due, ms, empty -> N", claims("claim_empty_10k_due"), "flat")
        pg1("fill jobs/s, database bytes/job",
            f"{bl['fill']['jobs_per_s']:,.0f}, {bl['db_bytes_per_pending_job']}")
    return rows


def print_side_by_side(rows, R):
    hdr = ["figure", *COLUMNS, "target", "met?"]
    w = [max(len(r[i]) for r in rows + [hdr]) for i in range(len(hdr))]
    print()
    print("stores (issue 12): SQLite 1 instance | PostgreSQL 1 | PostgreSQL 3 on one "
          f"database; {R.get('settings')}")
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    print("-" * (sum(w) + 2 * (len(w) - 1)))
    for r in rows:
        print("  ".join(v.ljust(w[i]) for i, v in enumerate(r)))
    for c in ("pg-1", "pg-3"):
        top = _get(R, c, "pg_stat_statements_top") or []
        if top:
            print(f"\n{c}: pg_stat_statements, top by total time over the column")
            for s in top:
                print(f"  {s['total_ms']:>10.1f} ms {s['calls']:>8} calls "
                      f"{s['mean_ms']:>8.3f} ms/call  {s['query']}")
    plan = _get(R, "backlog", "claim_backlog", "plan")
    if plan:
        print(f"\nbacklog: EXPLAIN (ANALYZE, BUFFERS) of the claim beside "
              f"{R['backlog']['jobs']:,} pending jobs:")
        for line in plan:
            print("  " + line)
    print(flush=True)
