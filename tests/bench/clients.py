"""tests/bench/clients.py - the client libraries' cost and gain (issue 26;
bench.py --only clients; run.sh --only clients).

Why it exists: the three client libraries (clients/node, clients/python,
clients/go) batch schedule() calls into POST /schedule/batch. This measures
what that buys an application: jobs/s into the service through each
library against the same jobs sent one request each (plain POST /schedule
on keep-alive connections: node:http with a keep-alive Agent, Python's
http.client per thread, Go's net/http), and the client process's own CPU
per job. And, through the Node library, N (20,000) jobs scheduled from one
process at once against BullMQ's Queue.add() of N delayed jobs on a private
Redis, in the same run.

The drivers are programs of their own in tests/bench/clients/ (node/
driver.mjs, python/driver.py, go/ built by run.sh into build-bench/
clients_go_driver), one process per measurement, so that the CPU they report
(process.cpuUsage, resource.getrusage, syscall.Getrusage of themselves) is
the client's only. The protocol: a driver warms up (one job per caller:
connections open), prints READY, starts the clock at a line on stdin, and
prints RESULT {jobs, seconds, cpu_us, errors}. Around that window this
module also counts the CPU of the service (and of Redis or PostgreSQL) and
of processes the bench did not start (benchlib.CpuWindow).

  library vs one request per job: for each library and 1, 16, 256 callers
  (threads, goroutines or async loops, each awaiting one job at a time), a
  fresh service (SQLite, defaults, --http-max-conns-per-ip 1000 so 256
  plain connections are not refused), then --clients-reps times (3) the
  library and the plain way, alternating which goes first; each run ends
  after --clients-jobs (20,000) jobs or --clients-seconds (10), whichever
  comes first. Jobs are due in 1 h: nothing is published meanwhile.
  Medians of the repetitions.

  Node library vs BullMQ: all --clients-bullmq-jobs (20,000) calls started
  at once in one Node process, each awaited (Promise.all): the library's
  schedule() on a fresh service per store (--clients-stores: sqlite, and
  postgres on the run's server), BullMQ's Queue.add(name, data, {delay})
  on two private redis-server processes (loopback, a free port, stopped by
  PID): no persistence (appendonly no, save ''), and appendonly yes with
  appendfsync everysec (closer to a durable store; the service commits
  with fsync, sync=full, before it answers). Interleaved per repetition,
  a new BullMQ queue name each time. Medians.

Nothing here asserts: it is a benchmark; each step is bounded in time.
"""

import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.procs import stop_proc
from pylib.wait import free_port
import benchlib  # tests/bench: the runner's shared code
from benchlib import BenchError, log
import stores  # the PostgreSQL service class and the server's CPU

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.join(HERE, "clients")
LIBS = ("node", "python", "go")
CALLERS = (1, 16, 256)
DELAY_MS = 3_600_000  # nothing falls due during the run
SERVICE_ARGS = ("--http-max-conns-per-ip", "1000")
REDIS_MODES = {  # label: redis-server persistence options
    "appendonly no": ("--save", "", "--appendonly", "no"),
    "appendonly everysec": ("--save", "", "--appendonly", "yes", "--appendfsync", "everysec"),
}


# --- one driver run -------------------------------------------------------------------

def driver_cmd(b, lib, mode, url, callers, jobs, seconds, extra=()):
    if lib == "node":
        base = [shutil.which("node") or "node", os.path.join(DRIVERS, "node", "driver.mjs")]
    elif lib == "python":
        base = [sys.executable, os.path.join(DRIVERS, "python", "driver.py")]
    else:
        base = [os.path.join(b.a.tools, "clients_go_driver")]
    return base + ["--mode", mode, "--url", url, "--callers", str(callers),
                   "--jobs", str(jobs), "--seconds", str(seconds),
                   "--delay-ms", str(DELAY_MS), *extra]


def _line(proc, timeout):
    """The next line of the driver's stdout, or None after timeout."""
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().strip() if r else None


def run_driver(b, cmd, cpu_pids, window_cls, seconds_cap, name):
    """One measurement: start the driver, wait for READY, open a CPU window
    on cpu_pids (+ the driver), say go, read RESULT. Returns the figures."""
    log_path = os.path.join(b.work, "clients-drivers.log")
    with open(log_path, "a") as err:
        err.write(f"--- {name}: {' '.join(cmd)}\n")
        err.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True, cwd=b.work)
    try:
        line = _line(proc, 120)
        if line != "READY":
            raise BenchError(f"clients: {name}: the driver did not get ready ({line!r}; "
                             f"exit {proc.poll()}; see clients-drivers.log)")
        win = window_cls(dict(cpu_pids, driver=proc.pid)).start()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = _line(proc, seconds_cap + 300)
        usage = win.stop()
        if not line or not line.startswith("RESULT "):
            raise BenchError(f"clients: {name}: no result ({line!r}; exit {proc.poll()})")
        res = json.loads(line[len("RESULT "):])
        proc.wait(timeout=60)
    finally:
        stop_proc(proc)
    n, secs = res["jobs"], res["seconds"]
    wall = usage["wall_s"]
    out = {"jobs": n, "seconds": round(secs, 3),
           "jobs_per_s": round(n / secs, 1) if secs > 0 else None,
           "client_cpu_us_per_job": round(res["cpu_us"] / n, 1) if n else None,
           "errors": res["errors"], "cpu": usage}
    if res.get("first_error"):
        out["first_error"] = res["first_error"]
    for k in ("service", "redis", "postgres"):
        pct = usage["cpu_pct"].get(k)
        if pct is not None and n:
            out[f"{k}_cpu_us_per_job"] = round(pct / 100 * wall * 1e6 / n, 1)
    log(f"clients: {name}: {n:,} jobs in {secs:.2f} s = {out['jobs_per_s']:,.0f}/s, "
        f"client {out['client_cpu_us_per_job']} us/job"
        + (f", service {out.get('service_cpu_us_per_job')} us/job" if "service" in cpu_pids else "")
        + (f", {res['errors']} errors: {res.get('first_error')}" if res["errors"] else ""))
    return out


def median_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(vals), 1) if vals else None


def summary(runs):
    return {k: median_of(runs, k) for k in
            ("jobs_per_s", "client_cpu_us_per_job", "service_cpu_us_per_job",
             "redis_cpu_us_per_job", "postgres_cpu_us_per_job")
            if any(r.get(k) is not None for r in runs)} | {
        "errors": sum(r["errors"] for r in runs),
        "other_cpu_pct_max": max((r["cpu"].get("other_processes_cpu_pct", 0) for r in runs), default=None),
        "runs": runs}


# --- Redis ----------------------------------------------------------------------------

def start_redis(b, label, opts):
    """A private redis-server on a free loopback port, not daemonized (its
    PID is ours); returns (proc, port) once it answers PING."""
    port = free_port()
    d = os.path.join(b.work, f"redis-{label.replace(' ', '-')}")
    os.makedirs(d, exist_ok=True)
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", *opts,
           "--daemonize", "no", "--dir", d, "--logfile", os.path.join(b.work, f"redis-{port}.log")]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_proc(proc)
            raise BenchError(f"clients: redis-server ({label}) did not answer PING")
        time.sleep(0.05)


def _version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


# --- the scenario ---------------------------------------------------------------------

def _service(b, store, name):
    if store == "postgres":
        svc = stores.pg_service_class(benchlib.Service)(b.a.bin, b.work, name, b.url, SERVICE_ARGS)
        b.services.append(svc)
    else:
        svc = b.service(name, SERVICE_ARGS)
    svc.start()
    return svc


def _window(store):
    if store == "postgres":
        postmaster = int(open(os.environ["RMQS_BENCH_PG_PIDFILE"]).readline())
        return stores.window_class(benchlib.CpuWindow, {"postgres": postmaster}, {})
    return benchlib.CpuWindow


def _stop(svc):
    svc.stop(timeout=60)
    if getattr(svc, "pg_database", None):
        svc.drop_database()


def libraries(b):
    a = b.a
    libs = [x for x in a.clients_libs.split(",") if x]
    callers = [int(x) for x in a.clients_callers.split(",") if x]
    out = {}
    for lib in libs:
        for c in callers:
            svc = _service(b, "sqlite", f"clients-{lib}-{c}-{b.tag()}")
            url = f"http://127.0.0.1:{svc.port}"
            runs = {"library": [], "plain": []}
            try:
                for rep in range(a.clients_reps):
                    order = ("lib", "plain") if rep % 2 == 0 else ("plain", "lib")
                    for mode in order:
                        cmd = driver_cmd(b, lib, mode, url, c, a.clients_jobs, a.clients_seconds)
                        r = run_driver(b, cmd, {"service": svc.pid, "rabbitmq": b.beam},
                                       benchlib.CpuWindow, a.clients_seconds,
                                       f"{lib} {mode} x{c} rep {rep + 1}")
                        runs["library" if mode == "lib" else "plain"].append(r)
            finally:
                _stop(svc)
            row = {"library": summary(runs["library"]), "plain": summary(runs["plain"])}
            lj, pj = row["library"].get("jobs_per_s"), row["plain"].get("jobs_per_s")
            row["ratio"] = round(lj / pj, 2) if lj and pj else None
            out[f"{lib} x{c}"] = dict(row, lib=lib, callers=c)
    return out


def bullmq(b):
    a = b.a
    n = a.clients_bullmq_jobs
    store_list = [s for s in a.clients_stores.split(",") if s]
    if "postgres" in store_list and not os.environ.get("RMQS_TEST_PG_ADMIN"):
        log("clients: no PostgreSQL server (run through run.sh): SQLite only")
        store_list = [s for s in store_list if s != "postgres"]
    rv = _version(["redis-server", "--version"]) or ""
    out = {"jobs": n, "delay_ms": DELAY_MS,
           "redis": rv.split(" v=")[1].split()[0] if " v=" in rv else rv,
           "bullmq": None, "library": {}, "bullmq_runs": {}}
    try:
        with open(os.path.join(DRIVERS, "node", "node_modules", "bullmq", "package.json")) as f:
            out["bullmq"] = json.load(f)["version"]
    except (OSError, ValueError) as e:
        raise BenchError(f"clients: BullMQ is not installed ({e}): "
                         "npm ci in tests/bench/clients/node (run.sh does)") from None
    svcs, redis = {}, {}
    lib_runs = {s: [] for s in store_list}
    mq_runs = {m: [] for m in REDIS_MODES}
    try:
        for s in store_list:
            svcs[s] = _service(b, s, f"clients-bullmq-cmp-{s}-{b.tag()}")
        for m, opts in REDIS_MODES.items():
            redis[m] = start_redis(b, m, opts)
        for rep in range(a.clients_reps):
            for s, svc in svcs.items():
                cmd = driver_cmd(b, "node", "lib", f"http://127.0.0.1:{svc.port}", 1, n, 600,
                                 ["--all-at-once"])
                lib_runs[s].append(run_driver(
                    b, cmd, {"service": svc.pid, "rabbitmq": b.beam}, _window(s), 600,
                    f"node library, {n:,} at once ({s}) rep {rep + 1}"))
            for m, (proc, port) in redis.items():
                cmd = driver_cmd(b, "node", "bullmq", "http://127.0.0.1:1", 1, n, 600,
                                 ["--all-at-once", "--redis-port", str(port),
                                  "--queue", f"bench-{rep}"])
                mq_runs[m].append(run_driver(
                    b, cmd, {"redis": proc.pid}, benchlib.CpuWindow, 600,
                    f"BullMQ add(), {n:,} at once (redis {m}) rep {rep + 1}"))
    finally:
        for proc, _ in redis.values():
            stop_proc(proc, timeout=30)
        for svc in svcs.values():
            _stop(svc)
    out["library"] = {s: summary(r) for s, r in lib_runs.items()}
    out["bullmq_runs"] = {m: summary(r) for m, r in mq_runs.items()}
    return out


def scenario(b, _empty_svc):
    """bench.py's entry."""
    out = {"reps": b.a.clients_reps, "jobs": b.a.clients_jobs, "seconds_cap": b.a.clients_seconds,
           "delay_ms": DELAY_MS, "service_args": " ".join(SERVICE_ARGS),
           "node": _version(["node", "--version"]), "go": _version(["go", "version"]),
           "python": sys.version.split()[0]}
    if b.a.clients_libs:
        out["libraries"] = libraries(b)
    if b.a.clients_bullmq_jobs > 0:
        out["bullmq"] = bullmq(b)
    return out


# --- the table ------------------------------------------------------------------------

def table_rows(R, row):
    """Rows of bench.py's table (scenario, figure, value)."""
    for key, r in (R.get("libraries") or {}).items():
        lib, pl = r["library"], r["plain"]
        row(f"clients {key} callers", "jobs/s library / one request per job (ratio)",
            f"{lib.get('jobs_per_s') or 0:,.0f} / {pl.get('jobs_per_s') or 0:,.0f} ({r['ratio']}x)")
        row(f"clients {key} callers", "client CPU us/job library / one request per job",
            f"{lib.get('client_cpu_us_per_job')} / {pl.get('client_cpu_us_per_job')}")
        if lib["errors"] or pl["errors"]:
            row(f"clients {key} callers", "errors library / plain",
                f"{lib['errors']} / {pl['errors']}", "0", False)
    m = R.get("bullmq")
    if m:
        for s, lib in m["library"].items():
            for mode, q in m["bullmq_runs"].items():
                lj, qj = lib.get("jobs_per_s"), q.get("jobs_per_s")
                row(f"clients vs BullMQ ({m['jobs']:,} at once)",
                    f"Node library ({s}) / BullMQ {m['bullmq']} add() (redis {mode}) jobs/s",
                    f"{lj or 0:,.0f} / {qj or 0:,.0f} ({round(lj / qj, 2) if lj and qj else None}x)")


def print_tables(R, out=sys.stdout):
    """The scenario's own tables, printed after bench.py's."""
    libs = R.get("libraries") or {}
    if libs:
        print(f"clients: medians of {R['reps']} runs, each {R['jobs']:,} jobs or "
              f"{R['seconds_cap']} s; jobs due in 1 h; service on SQLite, "
              f"{R['service_args']}", file=out)
        hdr = ("library", "callers", "jobs/s via library", "jobs/s one-request-per-job",
               "ratio", "client CPU us/job lib", "client CPU us/job plain",
               "svc CPU us/job lib", "svc CPU us/job plain", "errors",
               "other procs % core (max)")
        rows = []
        for r in libs.values():
            lib, pl = r["library"], r["plain"]
            rows.append((r["lib"], str(r["callers"]), f"{lib.get('jobs_per_s') or 0:,.0f}",
                         f"{pl.get('jobs_per_s') or 0:,.0f}", f"{r['ratio']}x",
                         str(lib.get("client_cpu_us_per_job")), str(pl.get("client_cpu_us_per_job")),
                         str(lib.get("service_cpu_us_per_job")), str(pl.get("service_cpu_us_per_job")),
                         f"{lib['errors']}/{pl['errors']}",
                         str(max(lib["other_cpu_pct_max"] or 0, pl["other_cpu_pct_max"] or 0))))
        _print_rows(hdr, rows, out)
    m = R.get("bullmq")
    if m:
        print(f"\nclients vs BullMQ {m['bullmq']} (redis-server {m['redis']}, node {R['node']}): "
              f"{m['jobs']:,} calls started at once in one Node process, each awaited; "
              f"medians of {R['reps']} runs", file=out)
        hdr = ("way", "store", "jobs/s", "client CPU us/job", "server CPU us/job", "errors",
               "other procs % core (max)")
        rows = []
        for s, lib in m["library"].items():
            how = "sync=full" if s == "sqlite" else "synchronous_commit on"
            rows.append(("Node library schedule()", f"service on {s} ({how})",
                         f"{lib.get('jobs_per_s') or 0:,.0f}", str(lib.get("client_cpu_us_per_job")),
                         f"{lib.get('service_cpu_us_per_job')}"
                         + (f" + pg {lib.get('postgres_cpu_us_per_job')}" if s == "postgres" else ""),
                         str(lib["errors"]), str(lib["other_cpu_pct_max"])))
        for mode, q in m["bullmq_runs"].items():
            rows.append(("BullMQ Queue.add() delayed", f"redis {mode}",
                         f"{q.get('jobs_per_s') or 0:,.0f}", str(q.get("client_cpu_us_per_job")),
                         str(q.get("redis_cpu_us_per_job")), str(q["errors"]),
                         str(q["other_cpu_pct_max"])))
        _print_rows(hdr, rows, out)
        for s, lib in m["library"].items():
            for mode, q in m["bullmq_runs"].items():
                lj, qj = lib.get("jobs_per_s"), q.get("jobs_per_s")
                if lj and qj:
                    print(f"  Node library ({s}) / BullMQ (redis {mode}): {lj / qj:.2f}x", file=out)
    print(file=out)


def _print_rows(hdr, rows, out):
    w = [max(len(x[i]) for x in [hdr] + rows) for i in range(len(hdr))]
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)), file=out)
    print("  ".join("-" * w[i] for i in range(len(hdr))), file=out)
    for r in rows:
        print("  ".join(v.ljust(w[i]) for i, v in enumerate(r)), file=out)


if __name__ == "__main__":
    sys.exit("run through tests/bench/run.sh --only clients")
