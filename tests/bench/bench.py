#!/usr/bin/python3
"""tests/bench/bench.py - the scenarios of issue 4, driven by tests/bench/run.sh.

run.sh builds the service and the C tools, starts a private RabbitMQ node and
calls this with its port. Everything here talks to 127.0.0.1 only, is bounded
in time, and stops what it started (by PID) also on failure or SIGTERM.

Scenarios (see the README of issue 4 for the targets):
  precision    POST /schedule at a steady rate (paced client, one job per
               request, keep-alive connections), mixed delays 1-10 s; the C
               consumer notes receive times; lateness = receive - deliver_at
               of the 201 answer.
  burst        10,000 jobs due at the same instant (POST /schedule/batch);
               time from deliver_at until the consumer has all of them; the
               dispatcher's publish rate against bare_publisher's.
  ingest       wrk: GET /healthz, POST /schedule (delay 1 h), POST
               /schedule/batch (1,000 jobs per request).
  comparisons  the same precision workload (smaller) and a 10,000 burst through
               broker-only delays: one TTL+DLX queue with per-message
               expiration, per-delay TTL queues, the 28-level binary TTL
               topology, and bare_publisher publishing at the due time.
  backlog      N pending jobs far in the future, restart: start-up time, RSS,
               precision and ingest again, database bytes per job.

Results: a table on stdout and a JSON file (--out).
"""

import argparse
import datetime
import http.client
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid

import pika

# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
import pylib.service
from pylib.http import KeepAlive, exchange
from pylib.procs import rss_kib, stop_proc
from pylib.times import format_ts_ms, now_ms, ts_ms
import stores  # issue 12: SQLite / PostgreSQL 1 / PostgreSQL 3, side by side
import schedules  # issue 13: N recurring schedules firing at one minute boundary
import search  # issue 14: the search's insert cost and request times at N jobs
import poison  # issue 21: a job the broker refuses for a whole channel, in a burst

HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
DELAY_MIN_MS, DELAY_MAX_MS = 1000, 10000

# Labels of the service's threads. A thread's own name wins (the service
# names its own: rmqs-janitor, rmqs-feeder, rmqs-publisher, rmqs-writer,
# rmqs-ingest); threads blocked in epoll_wait are libmicrohttpd's pool
# ("http"); any other is numbered. Only labels.
THREAD_ROLES = ["main"]
EPOLL_SYSCALLS = {"232", "281", "441"}  # epoll_wait, epoll_pwait, epoll_pwait2


class BenchError(Exception):
    pass


class Terminated(BaseException):
    pass


def on_sigterm(signum, frame):
    raise Terminated()


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, max(0, round(p / 100 * (len(sorted_vals) - 1))))
    return sorted_vals[k]


def lateness_stats(vals):
    """vals: lateness in ms (float). Summary with early count."""
    s = sorted(vals)
    if not s:
        return {"n": 0}
    return {"n": len(s), "early": sum(1 for v in s if v < 0),
            "min_ms": round(s[0], 3), "p50_ms": round(pct(s, 50), 3),
            "p90_ms": round(pct(s, 90), 3), "p99_ms": round(pct(s, 99), 3),
            "p999_ms": round(pct(s, 99.9), 3), "max_ms": round(s[-1], 3),
            "mean_ms": round(sum(s) / len(s), 3)}


# --- processes and CPU ----------------------------------------------------------

def proc_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError):
        return None


def thread_ticks(pid):
    out = {}
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return out
    for tid in tids:
        t = proc_ticks(f"{pid}/task/{tid}")
        if t is not None:
            out[tid] = t
    return out


def thread_labels(pid):
    """{tid: label} for the service's threads (see THREAD_ROLES)."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return {}
    main_comm, labels, others, http = None, {}, [], 0
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            comm = open(f"{base}/comm").read().strip()
            sc = open(f"{base}/syscall").read().split()[0]
        except (OSError, IndexError):
            comm, sc = "", ""
        if main_comm is None:
            main_comm = comm
            labels[tid] = "main"
        elif comm and comm != main_comm:
            labels[tid] = comm
        elif sc in EPOLL_SYSCALLS:
            http += 1
            labels[tid] = f"http-{http}"
        else:
            others.append(tid)
    roles = THREAD_ROLES[1:]
    for k, tid in enumerate(others):
        labels[tid] = roles[k] if len(others) == len(roles) else f"thread-{k + 1}"
    seen = {}
    for tid in sorted(labels):
        name = labels[tid]
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1 or list(labels.values()).count(name) > 1:
            labels[tid] = f"{name}-{seen[name]}"
    return labels


def sys_cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle, iowait = v[3], v[4]
    return sum(v), idle, iowait


class CpuWindow:
    """CPU used between start() and stop(): per named process (percent of
    one core), per service thread, and the whole machine (busy %, iowait %
    of all cores)."""

    def __init__(self, pids, service_pid=None):
        self.pids = {k: v for k, v in pids.items() if v}
        self.service_pid = service_pid

    def start(self):
        self.t0 = time.monotonic()
        self.p0 = {k: proc_ticks(p) for k, p in self.pids.items()}
        self.th0 = thread_ticks(self.service_pid) if self.service_pid else {}
        self.labels = thread_labels(self.service_pid) if self.service_pid else {}
        self.s0 = sys_cpu()
        self.self0 = resource.getrusage(resource.RUSAGE_SELF)
        self.ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return self

    def stop(self, wall_override=None):
        wall = wall_override or (time.monotonic() - self.t0)
        out = {"wall_s": round(wall, 3), "cpu_pct": {}}
        for k, p in self.pids.items():
            t1 = proc_ticks(p)
            if t1 is not None and self.p0.get(k) is not None:
                out["cpu_pct"][k] = round((t1 - self.p0[k]) / CLK_TCK / wall * 100, 1)
        s1 = sys_cpu()
        total = s1[0] - self.s0[0]
        busy_core_pct = None
        if total > 0:
            busy = 1 - (s1[1] - self.s0[1] + s1[2] - self.s0[2]) / total
            out["machine_busy_pct"] = round(100 * busy, 1)
            out["machine_iowait_pct"] = round(100 * (s1[2] - self.s0[2]) / total, 1)
            busy_core_pct = busy * 100 * (os.cpu_count() or 1)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        out["cpu_pct"]["bench.py (client)"] = round(
            (r1.ru_utime + r1.ru_stime - self.self0.ru_utime - self.self0.ru_stime) / wall * 100, 1)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        ch = c1.ru_utime + c1.ru_stime - self.ch0.ru_utime - self.ch0.ru_stime
        if ch > 0.01:
            out["cpu_pct"]["exited children (consumer/wrk/tools)"] = round(ch / wall * 100, 1)
        if busy_core_pct is not None:
            # CPU of processes this benchmark did not start (other work on
            # the machine), in percent of one core: it disturbs the figures
            out["other_processes_cpu_pct"] = round(
                max(0.0, busy_core_pct - sum(out["cpu_pct"].values())), 1)
        if self.service_pid:
            th1 = thread_ticks(self.service_pid)
            threads = []
            for tid, t in sorted(th1.items()):
                role = self.labels.get(tid, f"new-{tid}")
                d = t - self.th0.get(tid, 0)
                threads.append(f"{role}:{round(d / CLK_TCK / wall * 100, 1)}")
            out["service_threads_pct"] = " ".join(threads)
        return out


class FsyncCounter:
    """fdatasync/fsync calls of one process while it runs (perf stat on two
    syscall tracepoints; nothing if perf is missing or not allowed)."""

    EVENTS = "syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync"

    def __init__(self, pid):
        self.pid = pid
        self.proc = None

    def start(self):
        if self.pid and shutil.which("perf"):
            self.t0 = time.monotonic()
            self.proc = subprocess.Popen(
                ["perf", "stat", "-x,", "-e", self.EVENTS, "-p", str(self.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return self

    def stop(self):
        if self.proc is None:
            return None
        wall = time.monotonic() - self.t0
        try:
            self.proc.send_signal(signal.SIGINT)
            _, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            stop_proc(self.proc)
            return None
        counts = {}
        for line in err.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].isdigit() and "sys_enter_f" in f[2]:
                counts[f[2].split("sys_enter_")[-1]] = int(f[0])
        if not counts:
            return None
        total = sum(counts.values())
        return {"calls": counts, "per_s": round(total / wall, 1)}


def disk_probe(workdir, n=300):
    """What one fdatasync costs on this disk right now: n times, rewrite 4 KiB
    and fdatasync (like a one-page WAL commit)."""
    path = os.path.join(workdir, "fsync-probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    lat = []
    try:
        buf = os.urandom(4096)
        for i in range(n):
            os.pwrite(fd, buf, (i % 64) * 4096)
            t = time.perf_counter()
            os.fdatasync(fd)
            lat.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return {"fdatasync_p50_ms": round(pct(lat, 50), 3), "fdatasync_p99_ms": round(pct(lat, 99), 3),
            "fdatasync_max_ms": round(lat[-1], 3),
            "serial_fdatasyncs_per_s": round(1000 * len(lat) / sum(lat), 1)}


def renice(pid, nice):
    """Set the nice value of every thread of pid (a process the benchmark
    started: the broker or the consumer). Returns how many threads."""
    n = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
                n += 1
            except OSError:
                pass
    except OSError:
        pass
    return n


def beam_pid(pid_file):
    try:
        with open(pid_file) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


# --- the service ------------------------------------------------------------------

class Service(pylib.service.Service):
    """The service as the bench runs it (pylib.service.Service): its folder
    in the work folder, its log beside the others (run.sh keeps them), the
    bench's environment (self.env, e.g. with LD_PRELOAD; None: this
    process's), start-up timed to 2 ms, and read-only looks at its
    database."""

    def __init__(self, binary, workdir, name, amqp_url, args=()):
        super().__init__(os.path.join(workdir, name), amqp_url, args,
                         binary=binary,
                         log_path=os.path.join(workdir, f"service-{name}.log"))
        self.env = None  # None: this process's environment

    def environment(self):
        return dict(os.environ) if self.env is None else self.env

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self, timeout=120):  # pylint: disable=arguments-differ
        """Start and wait for /readyz 200. Returns seconds to healthz and to
        ready (polling every 2 ms from just before exec)."""
        try:
            super().start("ready", timeout, interval=0.002)
        except AssertionError as e:
            raise BenchError(f"{e} (log {self.log_path})") from None
        return {"healthz_s": self.start_times["healthz_s"],
                "ready_s": self.start_times["readyz_s"]}

    def stop(self, timeout=60):
        if self.proc is None or self.proc.poll() is not None:
            return None
        t0 = time.monotonic()
        code = stop_proc(self.proc, timeout)
        return {"exit_code": code, "stop_s": round(time.monotonic() - t0, 3)}

    def rss(self):
        return rss_kib(self.pid)

    def db_bytes(self):
        out = {}
        for suffix in ("", "-wal", "-shm"):
            try:
                out["db" + suffix] = os.path.getsize(self.db + suffix)
            except OSError:
                out["db" + suffix] = 0
        return out

    def query(self, sql, params=()):
        """Read-only query of the service's database (WAL: does not block it)."""
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()


def scrape_lateness(port):
    """The service's own rmqs_dispatch_lateness_seconds histogram from GET
    /metrics: {le: cumulative count}, or None."""
    try:
        status, _, raw = exchange(port, "GET", "/metrics", timeout=10, host=HOST)
    except (OSError, http.client.HTTPException):
        return None
    text = raw.decode()
    if status != 200:
        return None
    out = {}
    for m in re.finditer(r'^rmqs_dispatch_lateness_seconds_bucket\{le="([^"]+)"\} (\d+)',
                         text, re.M):
        out[m.group(1)] = int(m.group(2))
    return out or None


def hist_delta(h0, h1):
    """Per-bucket (non-cumulative) counts between two scrapes, in ms labels."""
    if not h0 or not h1:
        return None
    out, prev = {}, 0
    for le, v in h1.items():
        cum = v - h0.get(le, 0)
        key = "+Inf" if le == "+Inf" else f"<={float(le) * 1000:g}ms"
        if cum - prev:
            out[key] = cum - prev
        prev = cum
    return out


# --- RabbitMQ ---------------------------------------------------------------------

class Admin:
    """Declarations through pika (not timed). Remembers what it declared."""

    def __init__(self, port):
        self.params = pika.ConnectionParameters(HOST, port, connection_attempts=3,
                                                retry_delay=1, socket_timeout=10)
        self.queues, self.exchanges = [], []

    def _ch(self):
        conn = pika.BlockingConnection(self.params)
        return conn, conn.channel()

    def target(self, tag):
        """A durable direct exchange and durable queue bound by a key: what a
        real consumer of scheduled messages would have."""
        ex, q, rk = f"bench-x-{tag}", f"bench-q-{tag}", f"rk-{tag}"
        conn, ch = self._ch()
        try:
            ch.exchange_declare(ex, exchange_type="direct", durable=True)
            ch.queue_declare(q, durable=True)
            ch.queue_bind(q, ex, routing_key=rk)
        finally:
            conn.close()
        self.exchanges.append(ex)
        self.queues.append(q)
        return ex, q, rk

    def ttl_single(self, tag, ex, rk):
        """One queue, per-message expiration, dead-lettering to the target."""
        q = f"bench-ttl1-{tag}"
        conn, ch = self._ch()
        try:
            ch.queue_declare(q, durable=True, arguments={
                "x-dead-letter-exchange": ex, "x-dead-letter-routing-key": rk})
        finally:
            conn.close()
        self.queues.append(q)
        return q

    def ttl_per_delay(self, tag, ex, rk, seconds):
        """One queue per delay in whole seconds (queue TTL)."""
        names = {}
        conn, ch = self._ch()
        try:
            for s in seconds:
                q = f"bench-ttl-{s}s-{tag}"
                ch.queue_declare(q, durable=True, arguments={
                    "x-message-ttl": s * 1000, "x-dead-letter-exchange": ex,
                    "x-dead-letter-routing-key": rk})
                names[s] = q
                self.queues.append(q)
        finally:
            conn.close()
        return names

    def binary_levels(self, tag, queue, levels=28):
        """The NServiceBus-style delay topology: topic exchanges and queues
        per level L (TTL 2^L s) dead-lettering down to level L-1; a message's
        routing key is its delay's bits "bN..b0.destination". Level L's
        exchange routes bit L = 1 into its queue, 0 on to level L-1; level 0
        and the queues' dead letters end in the delivery exchange, which
        routes "#.destination" to the destination queue. Like NServiceBus, a
        message is published to the exchange of its delay's highest set bit
        (entry_exchange), not through all 28. Queues are classic, default
        mode, like the other TTL ways here (NServiceBus v1 makes them lazy).
        Returns the name of level L's exchange as a function."""
        conn, ch = self._ch()
        lvl = lambda L: f"bench-delay-{tag}-level-{L:02d}"  # noqa: E731
        delivery = f"bench-delay-{tag}-delivery"
        try:
            ch.exchange_declare(delivery, exchange_type="topic", durable=True)
            self.exchanges.append(delivery)
            for L in range(levels):
                ch.exchange_declare(lvl(L), exchange_type="topic", durable=True)
                self.exchanges.append(lvl(L))
            for L in range(levels - 1, -1, -1):
                nxt = lvl(L - 1) if L > 0 else delivery
                ch.queue_declare(lvl(L), durable=True, arguments={
                    "x-message-ttl": (1 << L) * 1000,
                    "x-dead-letter-exchange": nxt})
                self.queues.append(lvl(L))
                prefix = "*." * (levels - 1 - L)
                ch.queue_bind(lvl(L), lvl(L), routing_key=prefix + "1.#")
                ch.exchange_bind(destination=nxt, source=lvl(L),
                                 routing_key=prefix + "0.#")
            ch.queue_bind(queue, delivery, routing_key=f"#.{queue}")
        finally:
            conn.close()
        return lvl

    @staticmethod
    def binary_entry(lvl, seconds):
        return lvl(max(0, seconds.bit_length() - 1))

    @staticmethod
    def binary_key(seconds, dest, levels=28):
        bits = ".".join(str((seconds >> L) & 1) for L in range(levels - 1, -1, -1))
        return f"{bits}.{dest}"

    def cleanup(self):
        if not self.queues and not self.exchanges:
            return
        try:
            conn, ch = self._ch()
            for q in self.queues:
                ch.queue_delete(q)
            for e in self.exchanges:
                ch.exchange_delete(e)
            conn.close()
        except Exception as e:  # the node is private and stopped anyway
            log(f"cleanup of queues failed: {e!r}")
        self.queues, self.exchanges = [], []


class Consumer:
    """bench_consumer on one queue: start() returns once it consumes;
    result() waits for it and returns [(recv_ns, id)]."""

    def __init__(self, tools, port, queue, count, timeout_s, workdir):
        self.out = os.path.join(workdir, f"recv-{queue}.txt")
        self.cmd = [os.path.join(tools, "bench_consumer"), "--port", str(port),
                    "--queue", queue, "--count", str(count), "--out", self.out,
                    "--timeout-s", str(int(timeout_s))]
        self.timeout_s = timeout_s
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
        r, _, _ = select.select([self.proc.stdout], [], [], 30)
        if not r or self.proc.stdout.readline().strip() != "consuming":
            stop_proc(self.proc)
            raise BenchError("bench_consumer did not start consuming")
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def result(self):
        try:
            self.proc.wait(timeout=self.timeout_s + 30)
        except subprocess.TimeoutExpired:
            stop_proc(self.proc)
        got = []
        try:
            with open(self.out) as f:
                for line in f:
                    ns, _, ident = line.rstrip("\n").partition(" ")
                    got.append((int(ns), ident))
        except OSError:
            pass
        return got

    def stop(self):
        stop_proc(self.proc)


def tool(tools, name):
    return os.path.join(tools, name)


def run_bare(tools, port, args, stdin_text=None, timeout=180):
    r = subprocess.run([tool(tools, "bare_publisher"), "--port", str(port), *args],
                       input=stdin_text, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode not in (0, 1) or not r.stdout.strip():
        raise BenchError(f"bare_publisher failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --- wrk ----------------------------------------------------------------------------

WRK_DONE = r'''
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"lat_p50_us":%d,"lat_p99_us":%d,"lat_max_us":%d,"lat_mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(99),
    latency.max, latency.mean))
end
'''


def wrk_script(workdir, name, method=None, body=None, headers=None):
    """A wrk Lua script: method and JSON body, extra request headers (a
    dict), and the WRKJSON summary line."""
    path = os.path.join(workdir, f"wrk-{name}.lua")
    with open(path, "w") as f:
        if method:
            f.write(f'wrk.method = "{method}"\n')
            f.write('wrk.headers["Content-Type"] = "application/json"\n')
        for k, v in (headers or {}).items():
            f.write(f'wrk.headers["{k}"] = "{v}"\n')
        if body is not None:
            f.write(f"wrk.body = [==[{body}]==]\n")
        f.write(WRK_DONE)
    return path


def run_wrk(url, script, threads, conns, seconds, cpu_pids, service_pid,
            perf=False):
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "10s",
           "-s", script, url]
    fs = FsyncCounter(service_pid if perf else None).start()
    cpu = CpuWindow(cpu_pids, service_pid).start()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    usage = cpu.stop()
    fsyncs = fs.stop()
    m = re.search(r"^WRKJSON (.*)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise BenchError(f"wrk failed ({r.returncode}): {r.stderr.strip()} {r.stdout[-500:]}")
    w = json.loads(m.group(1))
    secs = w["duration_us"] / 1e6
    errors = w["err_connect"] + w["err_read"] + w["err_write"] + w["err_status"] + w["err_timeout"]
    res = {"requests": w["requests"], "seconds": round(secs, 3),
           "requests_per_s": round(w["requests"] / secs, 1),
           "ok_requests_per_s": round((w["requests"] - w["err_status"]) / secs, 1),
           "errors": errors, "non_2xx": w["err_status"],
           "latency_p50_ms": w["lat_p50_us"] / 1000, "latency_p99_ms": w["lat_p99_us"] / 1000,
           "latency_max_ms": w["lat_max_us"] / 1000, "threads": threads,
           "connections": conns, "cpu": usage}
    if fsyncs is not None:
        res["service_fsyncs"] = fsyncs
    return res


# --- the benchmark ----------------------------------------------------------------------

class Bench:
    def __init__(self, a):
        self.a = a
        self.port = a.amqp_port
        self.url = f"amqp://guest:guest@{HOST}:{a.amqp_port}/"
        self.admin = Admin(a.amqp_port)
        self.work = a.work
        self.beam = beam_pid(a.rabbit_pid_file)
        self.results = {}
        self.services = []
        self.consumers = []
        self.neighbours = []
        self.failed = []
        self.rng = random.Random(4)
        self.ingest_s = a.ingest_seconds

    # plumbing
    def service(self, name, args=()):
        svc = Service(self.a.bin, self.work, name, self.url, args)
        if self.a.stall_fsync_ms > 0:
            # every Nth fsync/fdatasync of the service sleeps first: an exact,
            # repeatable disk stall (tests/bench/stall_fsync.c)
            svc.env = dict(os.environ, LD_PRELOAD=os.path.join(self.a.tools, "stall_fsync.so"),
                           RMQS_STALL_MS=str(self.a.stall_fsync_ms),
                           RMQS_STALL_EVERY=str(self.a.stall_every))
        self.services.append(svc)
        return svc

    def consumer(self, queue, count, timeout_s):
        c = Consumer(self.a.tools, self.port, queue, count, timeout_s, self.work)
        self.consumers.append(c)
        c = c.start()
        if self.a.broker_nice:
            renice(c.pid, self.a.broker_nice)
        return c

    def cpu_pids(self, svc=None, consumer=None):
        nb = [p for p in self.neighbours if p.poll() is None]
        return {"service": svc.pid if svc else None, "rabbitmq": self.beam,
                "consumer": consumer.pid if consumer else None,
                "neighbour (bench's noise)": nb[-1].pid if nb else None}

    def cleanup(self):
        for p in self.neighbours:
            stop_proc(p, timeout=30)
        for c in self.consumers:
            c.stop()
        for s in self.services:
            s.stop(timeout=20)
        self.admin.cleanup()

    def tag(self):
        return uuid.uuid4().hex[:8]

    # --- precision: paced POST /schedule ------------------------------------
    def paced_schedule(self, svc, ex, rk, delays, rate, prefix, workers=16):
        """POST /schedule job i at t0 + i/rate (one job per request, keep-alive
        connections). Returns per job (status, deliver_at text, send lag s,
        answer time s) and the achieved rate."""
        n = len(delays)
        out = [None] * n
        t0 = time.monotonic() + 0.2
        errors = []

        def worker(k):
            h = KeepAlive(svc.port, timeout=30)
            try:
                for i in range(k, n, workers):
                    target = t0 + i / rate
                    d = target - time.monotonic()
                    if d > 0:
                        time.sleep(d)
                    body = ('{"exchange":"%s","routing_key":"%s","body":"%s%d",'
                            '"delay_ms":%d}' % (ex, rk, prefix, i, delays[i]))
                    ts = time.monotonic()
                    st, raw = h.post("/schedule", body)
                    te = time.monotonic()
                    da = None
                    if st == 201:
                        m = re.search(rb'"deliver_at":\s*"([^"]+)"', raw)
                        da = m.group(1).decode() if m else None
                    out[i] = (st, da, ts - target, te - ts)
            except Exception as e:
                errors.append(repr(e))
            finally:
                h.close()

        threads = [threading.Thread(target=worker, args=(k,), daemon=True)
                   for k in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=n / rate + 120)
        if errors:
            raise BenchError(f"paced client failed: {errors[:3]}")
        wall = time.monotonic() - t0
        return out, n / wall

    def precision(self, svc, label, rate, seconds):
        """Mixed delays 1-10 s at a steady rate; lateness at the consumer."""
        ex, q, rk = self.admin.target(self.tag())
        n = int(rate * seconds)
        delays = [self.rng.randint(DELAY_MIN_MS, DELAY_MAX_MS) for _ in range(n)]
        cons = self.consumer(q, n, seconds + DELAY_MAX_MS / 1000 + 60)
        log(f"{label}: {n} jobs at {rate}/s over {seconds} s, delays "
            f"{DELAY_MIN_MS}-{DELAY_MAX_MS} ms (POST /schedule, paced)")
        rss0 = svc.rss()
        h0 = scrape_lateness(svc.port)
        fs = FsyncCounter(svc.pid).start()
        cpu = CpuWindow(self.cpu_pids(svc, cons), svc.pid).start()
        sched, achieved = self.paced_schedule(svc, ex, rk, delays, rate, "p")
        got = cons.result()
        usage = cpu.stop()
        res = self._precision_result(svc, label, sched, got, achieved, usage,
                                     rate, seconds, rss0, ex)
        res["service_fsyncs"] = fs.stop()
        res["service_metrics_lateness_histogram"] = hist_delta(h0, scrape_lateness(svc.port))
        return res

    def precision_preloaded(self, svc, label, rate, seconds):
        """The same stream of due times (rate per second) with no HTTP load
        while they fall due: the jobs are stored beforehand through POST
        /schedule/batch (batch k holds the jobs due in second k, sent in
        order, each stored before its first job is due). Lateness then shows
        the dispatcher alone, without the writer's commits beside it."""
        ex, q, rk = self.admin.target(self.tag())
        n = int(rate * seconds)
        cons = self.consumer(q, n, seconds + 60)
        log(f"{label}: {n} jobs due at {rate}/s over {seconds} s, stored beforehand "
            "(POST /schedule/batch), no HTTP load while they fall due")
        T0 = now_ms() + 2000
        due = [T0 + i * 1000 // rate for i in range(n)]
        h = KeepAlive(svc.port)
        sched, stored_late = [], 0
        rss0 = svc.rss()
        h0 = scrape_lateness(svc.port)
        for k in range(0, n, 1000):
            jobs = [{"exchange": ex, "routing_key": rk, "body": f"p{i}",
                     "deliver_at": format_ts_ms(due[i])} for i in range(k, min(n, k + 1000))]
            st, raw = h.post("/schedule/batch", json.dumps(jobs))
            if st != 201:
                raise BenchError(f"POST /schedule/batch -> {st} {raw[:300]!r}")
            t = now_ms()
            stored_late += sum(1 for i in range(k, min(n, k + 1000)) if due[i] < t)
            sched += [(201, format_ts_ms(due[i]), 0.0, 0.0) for i in range(k, min(n, k + 1000))]
        h.close()
        fs = FsyncCounter(svc.pid).start()
        cpu = CpuWindow(self.cpu_pids(svc, cons), svc.pid).start()
        got = cons.result()
        usage = cpu.stop()
        res = self._precision_result(svc, label, sched, got, rate, usage, rate,
                                     seconds, rss0, ex)
        res["client"] = ("POST /schedule/batch before the jobs fall due, due times "
                         f"{1000 // rate} ms apart")
        res["jobs_stored_after_their_due_time"] = stored_late
        res["service_fsyncs"] = fs.stop()
        res["service_metrics_lateness_histogram"] = hist_delta(h0, scrape_lateness(svc.port))
        return res

    def _precision_result(self, svc, label, sched, got, achieved, usage, rate,
                          seconds, rss0, ex):
        due = {}
        bad = 0
        lags, answers = [], []
        for i, r in enumerate(sched):
            if r is None or r[0] != 201 or r[1] is None:
                bad += 1
                continue
            due[f"p{i}"] = ts_ms(r[1])
            lags.append(r[2] * 1000)
            answers.append(r[3] * 1000)
        late, seen, dup, per_s = [], set(), 0, {}
        t_first = min(due.values()) if due else 0
        for ns, ident in got:
            if ident in seen:
                dup += 1
                continue
            seen.add(ident)
            if ident in due:
                v = ns / 1e6 - due[ident]
                late.append(v)
                b = int((due[ident] - t_first) // 1000)
                per_s[b] = max(per_s.get(b, v), v)
        st = lateness_stats(late)
        lags.sort()
        answers.sort()
        res = {"label": label, "jobs": len(sched), "accepted": len(due),
               "rejected_or_failed": bad, "received": len(seen),
               "missing": len(set(due) - seen), "duplicates": dup,
               "rate_target": rate, "rate_achieved": round(achieved, 1),
               "seconds": seconds, "client": "POST /schedule, one job per request, "
               "16 keep-alive connections, paced",
               "post_answer_p50_ms": round(pct(answers, 50), 2) if answers else None,
               "post_answer_p99_ms": round(pct(answers, 99), 2) if answers else None,
               "post_answer_max_ms": round(answers[-1], 2) if answers else None,
               "client_send_lag_p99_ms": round(pct(lags, 99), 2) if lags else None,
               "lateness": st,
               "lateness_max_per_second_of_due_time_ms":
                   [round(per_s[k], 1) for k in sorted(per_s)],
               "cpu": usage, "rss_before": rss0, "rss_after": svc.rss()}
        # the service's own view: sent_at (settled after the confirm) - deliver_at
        try:
            lo, hi = min(due.values()), max(due.values())
            rows = svc.query("SELECT sent_at - deliver_at FROM jobs "
                             "WHERE deliver_at BETWEEN ? AND ? AND status = 2 "
                             "AND exchange = ?", (lo, hi, ex))
            if rows:
                res["service_sent_at_minus_deliver_at"] = lateness_stats([r[0] for r in rows])
            (rounds,), = svc.query("SELECT count(DISTINCT sent_at) FROM jobs WHERE "
                                   "deliver_at BETWEEN ? AND ? AND status = 2 AND "
                                   "exchange = ?", (lo, hi, ex))
            res["dispatcher_rounds_approx"] = rounds
            res["jobs_per_round_approx"] = round(len(rows) / max(1, rounds), 2)
        except Exception as e:
            res["service_sent_at_error"] = repr(e)
        log(f"{label}: received {len(seen)}/{len(due)}, lateness {st}")
        return res

    # --- precision beside a noisy neighbour ------------------------------------
    def neighbour_start(self, svc, seconds):
        """Start tests/bench/neighbour.py (a separate process) doing steady
        fsync'd writes (and, per --neighbour, big writes and CPU spinners) in
        the database's folder for at most `seconds`. None if off."""
        kinds = set(filter(None, self.a.neighbour.split(",")))
        if not kinds:
            return None
        out = os.path.join(self.work, f"neighbour-{self.tag()}.json")
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            "neighbour.py"),
               "--dir", svc.dir, "--seconds", str(seconds), "--out", out,
               "--write-kib", str(self.a.neighbour_write_kib if "fsync" in kinds else 0)]
        if "big" in kinds:
            cmd += ["--big-mib", str(self.a.neighbour_big_mib),
                    "--big-per-s", str(self.a.neighbour_big_per_s)]
        if "cpu" in kinds:
            cmd += ["--cpu", str(self.a.neighbour_cpu)]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        self.neighbours.append(proc)
        return proc, out, " ".join(cmd[2:])

    def neighbour_stop(self, nb):
        if nb is None:
            return None
        proc, out, cmd = nb
        stop_proc(proc, timeout=30)  # SIGTERM: it stops, cleans up, reports
        try:
            with open(out) as f:
                r = json.load(f)
            os.unlink(out)
        except (OSError, ValueError) as e:
            r = {"error": f"no report from the neighbour: {e!r}"}
        r["command"] = cmd
        return r

    def precision_noisy(self, svc, label, rate, seconds):
        """The precision workload (POSTs meanwhile) while another process
        writes and fsyncs on the same filesystem as the database."""
        nb = self.neighbour_start(svc, seconds + DELAY_MAX_MS / 1000 + 30)
        time.sleep(1.0)  # let its writes reach a steady state first
        try:
            res = self.precision(svc, label, rate, seconds)
        finally:
            rep = self.neighbour_stop(nb)
        res["neighbour"] = rep
        log(f"{label}: neighbour {rep}")
        return res

    # --- burst ---------------------------------------------------------------
    def burst_service(self, svc, n=10000, lead_ms=3000):
        """n jobs with the same deliver_at T, stored through POST
        /schedule/batch before T. If storing them takes longer than the lead
        (a loaded machine), try again with a lead four times what it took."""
        for attempt in range(3):
            ex, q, rk = self.admin.target(self.tag())
            cons = self.consumer(q, n, lead_ms / 1000 + 120)
            T = now_ms() + lead_ms
            bodies = []
            for b in range(0, n, 1000):
                jobs = [{"exchange": ex, "routing_key": rk, "body": f"b{i}",
                         "deliver_at": format_ts_ms(T)} for i in range(b, min(n, b + 1000))]
                bodies.append(json.dumps(jobs))
            h = KeepAlive(svc.port)
            t0 = time.monotonic()
            for body in bodies:
                st, raw = h.post("/schedule/batch", body)
                if st != 201:
                    raise BenchError(f"POST /schedule/batch -> {st} {raw[:300]!r}")
            h.close()
            post_s = time.monotonic() - t0
            if now_ms() < T - 100:
                break
            log(f"burst: storing {n} jobs took {post_s:.2f} s, more than the "
                f"{lead_ms} ms lead; again with a longer lead")
            cons.result()  # they are published anyway: let them drain
            lead_ms = int(post_s * 4000) + 2000
        else:
            raise BenchError("burst: could not store the jobs before their due time")
        cpu = CpuWindow(self.cpu_pids(svc, cons), svc.pid)
        time.sleep(max(0, (T - now_ms()) / 1000 - 0.05))
        fs = FsyncCounter(svc.pid).start()
        cpu.start()
        got = cons.result()
        usage = cpu.stop()
        fsyncs = fs.stop()
        recv = sorted(ns / 1e6 for ns, _ in got)
        res = {"jobs": n, "deliver_at_ms": T, "schedule_post_s": round(post_s, 3),
               "lead_ms": lead_ms,
               "received": len({i for _, i in got}), "cpu": usage,
               "service_fsyncs": fsyncs}
        if recv:
            res.update({"first_receive_after_due_ms": round(recv[0] - T, 1),
                        "last_receive_after_due_ms": round(recv[-1] - T, 1),
                        "early": sum(1 for v in recv if v < T),
                        "consumer_rate_per_s": round(len(recv) / max(1e-3, (recv[-1] - T) / 1000), 1)})
        try:
            (mn, mx, cnt), = svc.query(
                "SELECT min(sent_at), max(sent_at), count(*) FROM jobs "
                "WHERE deliver_at = ? AND status = 2 AND exchange = ?", (T, ex))
            if cnt:
                res.update({"sent_at_first_after_due_ms": mn - T,
                            "sent_at_last_after_due_ms": mx - T,
                            "sent_count": cnt,
                            "dispatcher_rate_per_s": round(cnt / max(1e-3, (mx - T) / 1000), 1)})
        except Exception as e:
            res["sent_at_error"] = repr(e)
        return res

    def burst_bare(self, n=10000, lead_ms=1500, window=1000, stop_and_wait=False):
        ex, q, rk = self.admin.target(self.tag())
        cons = self.consumer(q, n, lead_ms / 1000 + 120)
        T = now_ms() + lead_ms
        cpu = CpuWindow(self.cpu_pids(None, cons)).start()
        bare = run_bare(self.a.tools, self.port,
                        ["--exchange", ex, "--routing-key", rk, "--count", str(n),
                         "--window", str(window), "--body-size", "16", "--at", str(T)]
                        + (["--stop-and-wait"] if stop_and_wait else []))
        got = cons.result()
        usage = cpu.stop()
        recv = sorted(ns / 1e6 for ns, _ in got)
        res = {"messages": n, "window": window, "bare_publisher": bare,
               "received": len(got), "cpu": usage,
               "ack_rate_per_s": bare["msgs_per_s"],
               "first_publish_after_due_ms": bare["first_publish_ms"] - T}
        if recv:
            res.update({"last_receive_after_due_ms": round(recv[-1] - T, 1),
                        "consumer_rate_per_s": round(len(recv) / max(1e-3, (recv[-1] - T) / 1000), 1),
                        "last_ack_after_due_ms": bare["last_ack_ms"] - T})
        return res

    def scenario_burst(self, svc, repeats):
        runs = []
        for k in range(repeats):
            log(f"burst {k + 1}/{repeats}: 10,000 jobs due at once via the service, "
                "then 10,000 via bare_publisher")
            s = self.burst_service(svc)
            b = self.burst_bare()
            ratio_ack = (s.get("dispatcher_rate_per_s", 0) / b["ack_rate_per_s"]) if b["ack_rate_per_s"] else None
            ratio_recv = (s.get("consumer_rate_per_s", 0) / b["consumer_rate_per_s"]) if b.get("consumer_rate_per_s") else None
            runs.append({"service": s, "bare": b,
                         "ratio_dispatcher_to_bare_ack_rate": round(ratio_ack, 3) if ratio_ack else None,
                         "ratio_consumer_side": round(ratio_recv, 3) if ratio_recv else None})
            log(f"burst {k + 1}: service drain {s.get('last_receive_after_due_ms')} ms "
                f"(dispatcher {s.get('dispatcher_rate_per_s')}/s), bare "
                f"{b['ack_rate_per_s']}/s, ratio {runs[-1]['ratio_dispatcher_to_bare_ack_rate']}")
        med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
        return {"runs": runs,
                "median_drain_ms": med([r["service"].get("last_receive_after_due_ms") for r in runs
                                        if r["service"].get("last_receive_after_due_ms") is not None]),
                "median_dispatcher_rate_per_s": med([r["service"].get("dispatcher_rate_per_s") for r in runs
                                                     if r["service"].get("dispatcher_rate_per_s")]),
                "median_bare_ack_rate_per_s": med([r["bare"]["ack_rate_per_s"] for r in runs]),
                "median_ratio": med([r["ratio_dispatcher_to_bare_ack_rate"] for r in runs
                                     if r["ratio_dispatcher_to_bare_ack_rate"]]),
                "median_ratio_consumer_side": med([r["ratio_consumer_side"] for r in runs
                                                   if r["ratio_consumer_side"]])}

    # --- ingest --------------------------------------------------------------
    def ingest(self, svc, label):
        secs = self.ingest_s
        base = f"http://{HOST}:{svc.port}"
        one = json.dumps({"exchange": "bench-ingest", "routing_key": "rk",
                          "body": "x", "delay_ms": 3600000})
        batch = json.dumps([{"exchange": "bench-ingest", "routing_key": "rk",
                             "body": f"x{i}", "delay_ms": 3600000} for i in range(1000)])
        s_h = wrk_script(self.work, "healthz")
        s_1 = wrk_script(self.work, "schedule", "POST", one)
        # The answer a client that sends 1,000 jobs needs is their ids: with
        # Prefer: return=minimal it is ~100 bytes per job instead of ~400.
        s_b = wrk_script(self.work, "batch", "POST", batch,
                         headers={"Prefer": "return=minimal"})
        pids = self.cpu_pids(svc)
        out = {"label": label, "seconds": secs}
        log(f"{label}: wrk GET /healthz, {secs} s")
        out["healthz"] = run_wrk(base + "/healthz", s_h, 2, 64, secs, pids, svc.pid)
        log(f"{label}: wrk POST /schedule (delay 1 h), {secs} s")
        out["schedule"] = run_wrk(base + "/schedule", s_1, 2, 64, secs, pids, svc.pid, perf=True)
        log(f"{label}: wrk POST /schedule/batch (1,000 jobs per request, "
            f"Prefer: return=minimal), {secs} s")
        out["batch"] = run_wrk(base + "/schedule/batch", s_b, 2, 32, secs, pids, svc.pid, perf=True)
        out["batch"]["prefer"] = "return=minimal"
        for k, jobs in (("schedule", 1), ("batch", 1000)):
            fsy = out[k].get("service_fsyncs")
            if fsy:
                total = sum(fsy["calls"].values())
                out[k]["jobs_per_fsync"] = round(out[k]["requests"] * jobs / max(1, total), 1)
        out["schedule_jobs_per_s"] = out["schedule"]["ok_requests_per_s"]
        out["batch_jobs_per_s"] = round(out["batch"]["ok_requests_per_s"] * 1000, 1)
        out["healthz_requests_per_s"] = out["healthz"]["requests_per_s"]
        hz = out["healthz_requests_per_s"] or 1
        out["schedule_to_healthz"] = round(out["schedule_jobs_per_s"] / hz, 3)
        out["batch_jobs_to_healthz_requests"] = round(out["batch_jobs_per_s"] / hz, 3)
        out["batch_requests_to_healthz"] = round(out["batch"]["ok_requests_per_s"] / hz, 4)
        out["rss_after"] = svc.rss()
        log(f"{label}: healthz {out['healthz_requests_per_s']}/s, schedule "
            f"{out['schedule_jobs_per_s']} jobs/s, batch {out['batch_jobs_per_s']} jobs/s")
        return out

    def memory_flood(self, svc, conns=240, seconds=6):
        """RSS while many clients POST /schedule/batch at once (wrk, conns
        connections, 1,000 jobs per request), sampled every 0.2 s, and after.
        240: under the service's default per-IP limit (max_conns / 4 = 250),
        as every connection here comes from 127.0.0.1."""
        body = json.dumps([{"exchange": "bench-ingest", "routing_key": "rk",
                            "body": f"x{i}", "delay_ms": 3600000} for i in range(1000)])
        script = wrk_script(self.work, "flood", "POST", body)
        r0 = svc.rss()
        log(f"memory: {conns} connections POSTing /schedule/batch for {seconds} s")
        p = subprocess.Popen(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--timeout", "30s",
                              "-s", script, f"http://{HOST}:{svc.port}/schedule/batch"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        peak, deadline = 0, time.monotonic() + seconds + 60
        while p.poll() is None and time.monotonic() < deadline:
            peak = max(peak, svc.rss()["rss_kib"] or 0)
            time.sleep(0.2)
        stop_proc(p)
        out = p.stdout.read() if p.stdout else ""
        m = re.search(r"^WRKJSON (.*)$", out, re.M)
        w = json.loads(m.group(1)) if m else {}
        time.sleep(1)
        return {"connections": conns, "seconds": seconds, "rss_before": r0,
                "rss_peak_kib": peak, "rss_after": svc.rss(),
                "requests": w.get("requests"),
                "request_body_bytes": len(body),
                "response_bytes_each": (w["bytes"] // w["requests"]) if w.get("requests") else None}

    # --- comparisons -----------------------------------------------------------
    def cmp_precision(self, kind, n, rate, delays):
        """The precision workload through a broker-only way of delaying (or
        bare_publisher publishing at the due time). due = publish time +
        requested delay; 'effective' = the time the topology was asked for
        (delays rounded to whole seconds where the way needs that)."""
        tag = self.tag()
        ex, q, rk = self.admin.target(tag)
        cons = self.consumer(q, n, n / rate + DELAY_MAX_MS / 1000 + 60)
        t0 = now_ms() + 500
        lines, rounded, planned = [], {}, {}
        if kind == "ttl_single":
            qd = self.admin.ttl_single(tag, ex, rk)
        elif kind == "ttl_per_delay":
            qs = self.admin.ttl_per_delay(tag, ex, rk, range(1, DELAY_MAX_MS // 1000 + 1))
        elif kind == "binary_28":
            top = self.admin.binary_levels(tag, q)
        for i, d in enumerate(delays):
            at = t0 + int(i * 1000 / rate)
            ident = f"c{i}"
            if kind == "bare":
                lines.append(f"{at + d} {ex} {rk} - {ident}")
                rounded[ident] = d
                planned[ident] = at + d
            elif kind == "ttl_single":
                lines.append(f"{at} - {qd} {d} {ident}")
                rounded[ident] = d
            elif kind == "ttl_per_delay":
                s = max(1, round(d / 1000))
                lines.append(f"{at} - {qs[s]} - {ident}")
                rounded[ident] = s * 1000
            elif kind == "binary_28":
                s = max(1, round(d / 1000))
                lines.append(f"{at} {Admin.binary_entry(top, s)} "
                             f"{Admin.binary_key(s, q)} - {ident}")
                rounded[ident] = s * 1000
        plog = os.path.join(self.work, f"publog-{kind}-{tag}.txt")
        cpu = CpuWindow(self.cpu_pids(None, cons)).start()
        bare = run_bare(self.a.tools, self.port, ["--plan", "--publish-log", plog,
                                                  "--window", "1000", "--timeout-s", "120"],
                        stdin_text="\n".join(lines) + "\n", timeout=n / rate + 60)
        got = cons.result()
        usage = cpu.stop()
        pub = {}
        with open(plog) as f:
            for line in f:
                ident, ns = line.split()
                pub[ident] = int(ns) / 1e6
        req = {f"c{i}": d for i, d in enumerate(delays)}
        late_req, late_eff, seen = [], [], set()
        for ns, ident in got:
            if ident in seen or ident not in pub:
                continue
            seen.add(ident)
            r = ns / 1e6
            if kind == "bare":  # meant to be published at its due time
                due_req = due_eff = planned[ident]
            else:
                due_req = pub[ident] + req[ident]
                due_eff = pub[ident] + rounded[ident]
            late_req.append(r - due_req)
            late_eff.append(r - due_eff)
        return {"kind": kind, "messages": n, "rate": rate, "received": len(seen),
                "missing": n - len(seen), "lateness": lateness_stats(late_req),
                "lateness_vs_rounded_delay": lateness_stats(late_eff),
                "publisher": bare, "cpu": usage}

    def cmp_precision_service(self, svc, n, rate, delays):
        ex, q, rk = self.admin.target(self.tag())
        cons = self.consumer(q, n, n / rate + DELAY_MAX_MS / 1000 + 60)
        cpu = CpuWindow(self.cpu_pids(svc, cons), svc.pid).start()
        sched, achieved = self.paced_schedule(svc, ex, rk, delays, rate, "p")
        got = cons.result()
        usage = cpu.stop()
        r = self._precision_result(svc, "comparison service", sched, got, achieved,
                                   usage, rate, n / rate, svc.rss(), ex)
        return {"kind": "service", "messages": n, "rate": rate,
                "received": r["received"], "missing": r["missing"],
                "lateness": r["lateness"], "lateness_vs_rounded_delay": r["lateness"],
                "cpu": usage}

    def cmp_burst(self, kind, n=10000, lead_ms=3000):
        """n messages meant to be due at the same instant T. ttl_single:
        per-message expiration = T - publish time (exact). Per-delay and
        binary: whole seconds from the publish time (3 s), so each one's due
        time is its publish time + 3 s, spread by the publishing itself."""
        tag = self.tag()
        ex, q, rk = self.admin.target(tag)
        cons = self.consumer(q, n, lead_ms / 1000 + 120)
        T = now_ms() + lead_ms
        s = lead_ms // 1000
        if kind == "ttl_single":
            qd = self.admin.ttl_single(tag, ex, rk)
            lines = [f"0 - {qd} @{T} c{i}" for i in range(n)]
        elif kind == "ttl_per_delay":
            qs = self.admin.ttl_per_delay(tag, ex, rk, [s])
            lines = [f"0 - {qs[s]} - c{i}" for i in range(n)]
        else:
            top = self.admin.binary_levels(tag, q)
            key = Admin.binary_key(s, q)
            lines = [f"0 {Admin.binary_entry(top, s)} {key} - c{i}" for i in range(n)]
        plog = os.path.join(self.work, f"publog-burst-{kind}-{tag}.txt")
        cpu = CpuWindow(self.cpu_pids(None, cons)).start()
        bare = run_bare(self.a.tools, self.port, ["--plan", "--publish-log", plog,
                                                  "--window", "1000"],
                        stdin_text="\n".join(lines) + "\n")
        got = cons.result()
        usage = cpu.stop()
        pub = {}
        with open(plog) as f:
            for line in f:
                ident, ns = line.split()
                pub[ident] = int(ns) / 1e6
        if kind == "ttl_single":
            due = {k: T for k in pub}
        else:
            due = {k: v + s * 1000 for k, v in pub.items()}
        first_due, last_due = min(due.values()), max(due.values())
        recv = sorted(ns / 1e6 for ns, _ in got)
        res = {"kind": kind, "messages": n, "received": len(got),
               "publish_seconds": bare["seconds"], "due_spread_ms": round(last_due - first_due, 1),
               "early": sum(1 for ns, i in got if i in due and ns / 1e6 < due[i]),
               "cpu": usage}
        if recv:
            res.update({"first_receive_after_first_due_ms": round(recv[0] - first_due, 1),
                        "last_receive_after_first_due_ms": round(recv[-1] - first_due, 1),
                        "last_receive_after_last_due_ms": round(recv[-1] - last_due, 1),
                        "consumer_rate_per_s": round(len(recv) / max(1e-3, (recv[-1] - recv[0]) / 1000), 1)})
        return res

    def scenario_comparisons(self, svc, burst):
        n, rate = self.a.cmp_jobs, self.a.cmp_rate
        rng = random.Random(28)
        delays = [rng.randint(DELAY_MIN_MS, DELAY_MAX_MS) for _ in range(n)]
        out = {"precision_workload": f"{n} messages at {rate}/s, delays uniform "
               f"{DELAY_MIN_MS}-{DELAY_MAX_MS} ms (same list for every way)",
               "precision": {}, "burst": {}}
        log(f"comparisons: precision workload via the service ({n} at {rate}/s)")
        out["precision"]["service"] = self.cmp_precision_service(svc, n, rate, delays)
        for kind in ("bare", "ttl_single", "ttl_per_delay", "binary_28"):
            log(f"comparisons: precision workload via {kind}")
            out["precision"][kind] = self.cmp_precision(kind, n, rate, delays)
            st = out["precision"][kind]["lateness"]
            log(f"  {kind}: p50 {st.get('p50_ms')} p99 {st.get('p99_ms')} max "
                f"{st.get('max_ms')} early {st.get('early')}")
        if burst:
            r0 = burst["runs"][0]
            out["burst"]["service"] = {"last_receive_after_due_ms": burst["median_drain_ms"],
                                       "note": "median of the burst scenario runs"}
            out["burst"]["bare"] = {"last_receive_after_due_ms":
                                    sorted(r["bare"].get("last_receive_after_due_ms", 0)
                                           for r in burst["runs"])[len(burst["runs"]) // 2],
                                    "note": "median of the burst scenario runs",
                                    "example": r0["bare"]}
        for kind in ("ttl_single", "ttl_per_delay", "binary_28"):
            log(f"comparisons: 10,000 due at once via {kind}")
            out["burst"][kind] = self.cmp_burst(kind)
            b = out["burst"][kind]
            log(f"  {kind}: last receive {b.get('last_receive_after_first_due_ms')} ms "
                f"after the first due time (due spread {b['due_spread_ms']} ms)")
        return out

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
            cpu = CpuWindow(self.cpu_pids(svc), svc.pid).start()
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

    # --- the whole run -------------------------------------------------------------
    def wait_quiet(self, limit_s, threshold=25.0):
        """Wait (at most limit_s) until processes this benchmark did not start
        use less than threshold % of a core over 5 s. Returns what was seen."""
        t0 = time.monotonic()
        while True:
            w = CpuWindow({"rabbitmq": self.beam}).start()
            time.sleep(5)
            other = w.stop().get("other_processes_cpu_pct", 0)
            waited = time.monotonic() - t0
            if other < threshold or waited >= limit_s:
                return {"waited_s": round(waited, 1), "other_processes_cpu_pct": other}
            log(f"machine busy (other processes {other} % of a core); waiting "
                f"({waited:.0f}/{limit_s} s)")

    def step(self, name, fn, *args):
        """Run one scenario; a failure is recorded and the run goes on."""
        try:
            self.results[name] = fn(*args)
        except BenchError as e:
            log(f"{name} FAILED: {e}")
            self.results[name] = {"error": str(e)}
            self.failed.append(name)
        finally:
            for c in self.consumers:  # none of a scenario outlives it
                c.stop()
            self.consumers = []
            self.admin.cleanup()

    def run(self):
        only = set(self.a.only.split(",")) if self.a.only else None
        want = lambda s: only is None or s in only  # noqa: E731
        R = self.results
        t_start = time.monotonic()
        R["machine_at_start"] = {"loadavg": open("/proc/loadavg").read().split()[:3]}
        if self.a.wait_quiet > 0:
            R["machine_at_start"].update(self.wait_quiet(self.a.wait_quiet))
        R["machine_at_start"]["disk"] = disk_probe(self.work)
        if self.a.broker_nice and self.beam:
            # the broker and the consumer (not the service) ahead of other
            # work on the machine: what is then late is the service's doing
            R["machine_at_start"]["broker_and_consumer_nice"] = {
                "nice": self.a.broker_nice, "broker_threads": renice(self.beam, self.a.broker_nice)}
        svc = self.service("empty")
        R["empty_start"] = svc.start()
        R["empty_rss_at_ready"] = svc.rss()
        log(f"service (empty database) ready after {R['empty_start']['ready_s']} s, "
            f"RSS {R['empty_rss_at_ready']['rss_kib']} KiB")
        if want("precision"):
            self.step("precision", self.precision, svc, "precision (empty)",
                      self.a.rate, self.a.precision_seconds)
            self.step("precision_no_ingest", self.precision_preloaded, svc,
                      "precision without concurrent POSTs (empty)", self.a.rate,
                      self.a.precision_seconds)
            if self.a.neighbour:
                self.step("precision_noisy", self.precision_noisy, svc,
                          "precision beside a noisy neighbour (empty)", self.a.rate,
                          self.a.precision_seconds)
        if want("burst"):
            self.step("burst", self.scenario_burst, svc, self.a.burst_repeats)
        if want("comparisons"):
            self.step("comparisons", self.scenario_comparisons, svc, R.get("burst"))
        if want("ingest"):
            self.step("ingest", self.ingest, svc, "ingest (empty)")
        R["empty_rss_end"] = svc.rss()
        if want("ingest"):
            self.step("memory", self.memory_flood, svc)
        if want("stores"):
            self.step("stores", stores.scenario, self, svc)
        if want("schedules"):
            self.step("schedules", schedules.scenario, self, svc)
        if only is not None and "search" in only:  # long: only when asked
            self.step("search", search.scenario, self, svc)
        if only is not None and "poison" in only:  # only when asked
            self.step("poison", poison.scenario, self, svc)
        if want("backlog"):
            try:
                (pending,), = svc.query("SELECT count(*) FROM jobs INDEXED BY jobs_due WHERE status = 0")
            except Exception:
                pending = None
            svc.stop()
            r = svc.start(timeout=300)
            R["empty_restart_after_ingest"] = dict(r, pending_jobs=pending)
            R["empty_restart_rss"] = svc.rss()
            svc.stop()
            self.step("backlog", self.scenario_backlog, R)
        else:
            R["empty_stop"] = svc.stop()
        R["machine_at_end"] = {"loadavg": open("/proc/loadavg").read().split()[:3],
                               "disk": disk_probe(self.work)}
        R["elapsed_s"] = round(time.monotonic() - t_start, 1)


# --- the table ---------------------------------------------------------------------------

def table(R, a):
    rows = []
    R = dict(R)
    for name in list(R):
        if isinstance(R[name], dict) and set(R[name]) == {"error"}:
            rows.append({"scenario": name, "figure": "FAILED", "value": R[name]["error"][:80],
                         "target": "", "met": "NO"})
            R[name] = None

    def noise_row(scn, obj):
        nz = noise(obj)
        if nz:
            row(scn, "CPU of other processes on the machine (mean / max window)",
                f"{nz[0]} / {nz[1]} % of a core", "< 25 % (quiet)", nz[1] < 25)

    def row(scn, fig, val, target="", met=None, unit=""):
        if isinstance(val, float):
            val = f"{val:,.1f}" if abs(val) >= 100 else f"{val:,.3g}" if abs(val) < 10 else f"{val:,.1f}"
        elif isinstance(val, int):
            val = f"{val:,}"
        rows.append({"scenario": scn, "figure": fig,
                     "value": f"{val}{unit}" if val is not None else "n/a",
                     "target": target,
                     "met": "" if met is None else ("yes" if met else "NO")})

    for when in ("machine_at_start", "machine_at_end"):
        d = (R.get(when) or {}).get("disk")
        if d:
            row("machine", f"disk: 4 KiB write + fdatasync, p50 / p99 ({when[11:]})",
                f"{d['fdatasync_p50_ms']} / {d['fdatasync_p99_ms']} ms "
                f"(~{d['serial_fdatasyncs_per_s']:,.0f}/s serial)")
    p = R.get("precision")
    if p:
        st = p["lateness"]
        row("precision", f"jobs received / accepted ({p['rate_target']}/s x {p['seconds']} s)",
            f"{p['received']}/{p['accepted']}", "all", p["missing"] == 0)
        row("precision", "early deliveries", st.get("early"), "0", st.get("early") == 0)
        row("precision", "lateness p50", st.get("p50_ms"), "", None, " ms")
        row("precision", "lateness p99", st.get("p99_ms"), "<= 5 ms",
            st.get("p99_ms") is not None and st["p99_ms"] <= 5, " ms")
        row("precision", "lateness max", st.get("max_ms"), "<= 50 ms",
            st.get("max_ms") is not None and st["max_ms"] <= 50, " ms")
        row("precision", "client rate achieved", p["rate_achieved"], f"{p['rate_target']}/s", None, "/s")
        q = R.get("precision_no_ingest")
        if q:
            sq = q["lateness"]
            row("precision", "diagnostic: same due stream, jobs stored beforehand "
                "(no POSTs meanwhile): p50 / p99 / max",
                f"{sq.get('p50_ms')} / {sq.get('p99_ms')} / {sq.get('max_ms')} ms, "
                f"{sq.get('early')} early, {q['received']}/{q['accepted']} received")
        noise_row("precision", p)
    def noisy_rows(scn, q):
        if not q:
            return
        sq, nb = q["lateness"], q.get("neighbour") or {}
        row(scn, "beside a noisy neighbour: early / p50 / p90 / p99 / max",
            f"{sq.get('early')} / {sq.get('p50_ms')} / {sq.get('p90_ms')} / "
            f"{sq.get('p99_ms')} / {sq.get('max_ms')} ms, {q['received']}/{q['accepted']} received",
            "0 early, p99 <= 5, max <= 50",
            sq.get("early") == 0 and (sq.get("p99_ms") or 1e9) <= 5 and (sq.get("max_ms") or 1e9) <= 50)
        row(scn, "the neighbour: writes/s, MiB/s, its fsync p50 / p99 / max",
            f"{nb.get('writes_per_s')}/s of {nb.get('write_kib')} KiB, {nb.get('mib_per_s')} MiB/s, "
            f"{nb.get('fsync_p50_ms')} / {nb.get('fsync_p99_ms')} / {nb.get('fsync_max_ms')} ms")
        noise_row(scn + " (noisy)", q)
    noisy_rows("precision", R.get("precision_noisy"))
    b = R.get("burst")
    if b:
        row("burst", "10,000 due at once: last received after deliver_at (median)",
            b["median_drain_ms"], "<= 500 ms",
            b["median_drain_ms"] is not None and b["median_drain_ms"] <= 500, " ms")
        row("burst", "dispatcher publish rate (sent_at, median)", b["median_dispatcher_rate_per_s"], "", None, "/s")
        row("burst", "bare_publisher rate (acks, window 1000, median)", b["median_bare_ack_rate_per_s"], "", None, "/s")
        row("burst", "dispatcher / bare_publisher", b["median_ratio"], ">= 0.8",
            b["median_ratio"] is not None and b["median_ratio"] >= 0.8)
        row("burst", "same ratio, consumer side", b["median_ratio_consumer_side"], ">= 0.8",
            b["median_ratio_consumer_side"] is not None and b["median_ratio_consumer_side"] >= 0.8)
        noise_row("burst", b)
    i = R.get("ingest")
    if i:
        row("ingest", "POST /schedule jobs/s (sync=FULL)", i["schedule_jobs_per_s"], ">= 25,000",
            i["schedule_jobs_per_s"] >= 25000, "/s")
        row("ingest", "POST /schedule/batch jobs/s (1,000/request, Prefer: return=minimal)",
            i["batch_jobs_per_s"], ">= 150,000",
            i["batch_jobs_per_s"] >= 150000, "/s")
        row("ingest", "GET /healthz requests/s (HTTP layer limit)", i["healthz_requests_per_s"], "", None, "/s")
        row("ingest", "POST /schedule / healthz", i["schedule_to_healthz"])
        row("ingest", "batch jobs/s / healthz requests/s", i["batch_jobs_to_healthz_requests"])
        errs = i["schedule"]["errors"] + i["batch"]["errors"]
        row("ingest", "HTTP errors / non-2xx during ingest", errs, "0", errs == 0)
        noise_row("ingest", i)
    mf = R.get("memory")
    if mf:
        row("memory", f"RSS peak, {mf['connections']} clients POSTing batches of 1,000",
            round(mf["rss_peak_kib"] / 1024, 1), "<= 64 MiB", mf["rss_peak_kib"] <= 64 * 1024, " MiB")
        row("memory", "RSS 1 s after that load (kept?)",
            round((mf["rss_after"]["rss_kib"] or 0) / 1024, 1), "", None, " MiB")
        if mf.get("response_bytes_each"):
            row("memory", "batch request / response bytes (1,000 jobs)",
                f"{mf['request_body_bytes']:,} / {mf['response_bytes_each']:,}")
    c = R.get("comparisons")
    if c:
        for kind, v in c["precision"].items():
            st, sr = v["lateness"], v["lateness_vs_rounded_delay"]
            row("compare precision", f"{kind}: p50 / p99 / max ms, early",
                f"{st.get('p50_ms')} / {st.get('p99_ms')} / {st.get('max_ms')}, {st.get('early')} early"
                + (f", {v['missing']} missing" if v.get("missing") else ""))
            if sr is not st and sr != st:
                row("compare precision", f"{kind}: same vs the delay rounded to whole s",
                    f"{sr.get('p50_ms')} / {sr.get('p99_ms')} / {sr.get('max_ms')}, {sr.get('early')} early")
        for kind, v in c["burst"].items():
            val = v.get("last_receive_after_due_ms", v.get("last_receive_after_first_due_ms"))
            extra = f" (due spread {v['due_spread_ms']} ms)" if v.get("due_spread_ms") else ""
            row("compare burst", f"{kind}: 10,000 due at once, all received after", f"{val} ms{extra}")
        noise_row("comparisons", c)
    k = R.get("backlog")
    if k:
        n = k["jobs"]
        scn = f"backlog {n:,}"
        row(scn, f"fill ({'HTTP batch' if k['fill']['method'].startswith('HTTP') else 'direct sqlite3'})",
            k["fill"]["jobs_per_s"], "", None, " jobs/s")
        row(scn, "start-up to /readyz 200 (warm page cache)", k["restart"]["ready_s"], "<= 2 s",
            k["restart"]["ready_s"] <= 2, " s")
        cold = k.get("restart_cold_cache", {})
        if "ready_s" in cold:
            row(scn, "start-up to /readyz 200 (cold page cache)", cold["ready_s"], "<= 2 s",
                cold["ready_s"] <= 2, " s")
        rss_b = max(filter(None, [k["rss_at_ready"]["rss_kib"], k["rss_after_precision"]["rss_kib"],
                                  k["rss_after_ingest"]["rss_kib"]]))
        row(scn, "RSS max (ready / after precision / after ingest)", round(rss_b / 1024, 1),
            "<= 64 MiB", rss_b <= 64 * 1024, " MiB")
        rss_e = max(filter(None, [R.get("empty_rss_at_ready", {}).get("rss_kib"),
                                  (R.get("precision") or {}).get("rss_after", {}).get("rss_kib"),
                                  (R.get("ingest") or {}).get("rss_after", {}).get("rss_kib")]))
        row(scn, "RSS max with the empty database, same phases", round(rss_e / 1024, 1),
            "backlog <= 1.2x", rss_b <= 1.2 * rss_e, " MiB")
        row(scn, "VmHWM (peak RSS) backlog / empty",
            f"{k['rss_after_ingest']['hwm_kib'] / 1024:.1f} / "
            f"{(R.get('empty_rss_end') or {}).get('hwm_kib', 0) / 1024:.1f} MiB")
        row(scn, "database bytes per pending job", k["db_bytes_per_pending_job"], "", None, " B")
        if i and k.get("ingest"):
            r1 = k["ingest"]["schedule_jobs_per_s"] / i["schedule_jobs_per_s"]
            r2 = k["ingest"]["batch_jobs_per_s"] / i["batch_jobs_per_s"]
            row(scn, "POST /schedule jobs/s (vs empty)",
                f"{k['ingest']['schedule_jobs_per_s']:,.0f} ({r1:.2f}x)", ">= 0.8x", r1 >= 0.8)
            row(scn, "batch jobs/s (vs empty)",
                f"{k['ingest']['batch_jobs_per_s']:,.0f} ({r2:.2f}x)", ">= 0.8x", r2 >= 0.8)
        noise_row(scn, k)
        pe, pb = (p or {}).get("lateness", {}), k["precision"]["lateness"]
        row(scn, "precision early", pb.get("early"), "0", pb.get("early") == 0)
        if pe.get("p99_ms") is not None and pb.get("p99_ms") is not None:
            row(scn, "precision p99 (vs empty)", f"{pb['p99_ms']} ms (empty {pe['p99_ms']} ms)",
                "<= 1.2x empty", pb["p99_ms"] <= 1.2 * pe["p99_ms"])
            row(scn, "precision max (vs empty)", f"{pb['max_ms']} ms (empty {pe['max_ms']} ms)",
                "<= 1.2x empty", pb["max_ms"] <= 1.2 * pe["max_ms"])
        row(scn, "precision early / p50 / p90 / p99 / max",
            f"{pb.get('early')} / {pb.get('p50_ms')} / {pb.get('p90_ms')} / {pb.get('p99_ms')} / "
            f"{pb.get('max_ms')} ms", "p99 <= 5, max <= 50",
            (pb.get("p99_ms") or 1e9) <= 5 and (pb.get("max_ms") or 1e9) <= 50)
        noisy_rows(scn, k.get("precision_noisy"))
        qe = (R.get("precision_no_ingest") or {}).get("lateness", {})
        qb = (k.get("precision_no_ingest") or {}).get("lateness", {})
        if qe.get("p99_ms") is not None and qb.get("p99_ms") is not None:
            row(scn, "diagnostic: preloaded precision p99 (vs empty)",
                f"{qb['p99_ms']} ms (empty {qe['p99_ms']} ms)", "<= 1.2x empty",
                qb["p99_ms"] <= 1.2 * qe["p99_ms"])
    if R.get("schedules"):
        schedules.table_rows(R["schedules"], row)
        noise_row("schedules", R["schedules"])
    if R.get("search"):
        search.table_rows(R["search"], row)
    if R.get("poison"):
        poison.table_rows(R["poison"], row)
    return rows


def noise(obj):
    """other_processes_cpu_pct of every CPU window inside obj: (mean, max)."""
    vals = []

    def walk(o):
        if isinstance(o, dict):
            if "other_processes_cpu_pct" in o:
                vals.append(o["other_processes_cpu_pct"])
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(obj)
    if not vals:
        return None
    return round(sum(vals) / len(vals), 1), round(max(vals), 1)


def print_table(rows):
    w = [max(len(r[k]) for r in rows + [{"scenario": "scenario", "figure": "figure",
                                         "value": "value", "target": "target", "met": "met?"}])
         for k in ("scenario", "figure", "value", "target", "met")]
    hdr = ("scenario", "figure", "value", "target", "met?")
    line = "  ".join(h.ljust(w[i]) for i, h in enumerate(hdr))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(r[k]).ljust(w[i]) for i, k in
                        enumerate(("scenario", "figure", "value", "target", "met"))))


def meta(a):
    def cmd(*c):
        try:
            return subprocess.run(c, capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:
            return None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(), "kernel": os.uname().release,
            "git_commit": cmd("git", "-C", root, "rev-parse", "--short", "HEAD"),
            "git_dirty_files": cmd("git", "-C", root, "status", "--porcelain", "--untracked-files=no"),
            "rabbitmq": cmd("dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"),
            "sqlite": sqlite3.sqlite_version, "wrk": cmd("dpkg-query", "-W", "-f=${Version}", "wrk"),
            "mode": a.mode, "backlog": a.backlog,
            "service_built_from": f"commit {a.rev}" if a.rev else "work tree (see git_dirty_files)",
            "service_settings": "defaults (sync=full, batch-size 500, http-threads 2)",
            "fsync_stall": (f"every {a.stall_every}th fsync of the service sleeps "
                            f"{a.stall_fsync_ms} ms first") if a.stall_fsync_ms else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tools", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--amqp-port", type=int, required=True)
    ap.add_argument("--rabbit-pid-file", required=True)
    ap.add_argument("--backlog", type=int, default=1_000_000)
    ap.add_argument("--fill", choices=("auto", "http", "sql"), default="auto")
    ap.add_argument("--mode", default="quick")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma list of precision,burst,"
                    "comparisons,ingest,backlog,stores,schedules,search,poison")
    ap.add_argument("--search-jobs", type=int, default=1_000_000,
                    help="search scenario: jobs on SQLite (--full: 10,000,000)")
    ap.add_argument("--search-pg-jobs", type=int, default=1_000_000,
                    help="search scenario: jobs on PostgreSQL")
    ap.add_argument("--search-requests", type=int, default=25,
                    help="search scenario: requests per kind (list and count)")
    ap.add_argument("--search-stores", default="sqlite,postgres",
                    help="search scenario: the stores, a comma list of sqlite,postgres")
    ap.add_argument("--search-compare", default="",
                    help="search scenario: name=binary,... also measured for the "
                         "insert cost (e.g. main's build)")
    ap.add_argument("--search-rounds", type=int, default=3,
                    help="search scenario: insert-cost rounds per binary (medians)")
    ap.add_argument("--search-skip-insert", action="store_true",
                    help="search scenario: only the searches")
    ap.add_argument("--poison-jobs", type=int, default=20_000,
                    help="poison scenario: jobs in each burst")
    ap.add_argument("--schedules", type=int, default=100_000,
                    help="schedules scenario: how many fire at one minute boundary")
    ap.add_argument("--schedules-stores", default="sqlite,postgres",
                    help="schedules scenario: the stores, a comma list of sqlite,postgres")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--precision-seconds", type=int, default=20)
    ap.add_argument("--ingest-seconds", type=int, default=10)
    ap.add_argument("--burst-repeats", type=int, default=3)
    ap.add_argument("--cmp-jobs", type=int, default=2000)
    ap.add_argument("--cmp-rate", type=int, default=500)
    ap.add_argument("--rev", default="", help="the commit benchmarked (set by run.sh --rev)")
    ap.add_argument("--neighbour", default="",
                    help="also run the precision workload beside a noisy neighbour "
                    "(tests/bench/neighbour.py), a comma list of fsync (steady "
                    "--neighbour-write-kib writes + fsync in a loop, in the "
                    "database's folder), big (--neighbour-big-mib writes + fsync "
                    "--neighbour-big-per-s a second), cpu (--neighbour-cpu spinning "
                    "processes; their CPU counts as other processes)")
    ap.add_argument("--neighbour-write-kib", type=int, default=64)
    ap.add_argument("--neighbour-big-mib", type=int, default=8)
    ap.add_argument("--neighbour-big-per-s", type=float, default=5)
    ap.add_argument("--neighbour-cpu", type=int, default=1)
    ap.add_argument("--keep-backlog", default="",
                    help="folder for the backlog database, kept after the run and "
                    "reused by the next if it holds --backlog pending jobs")
    ap.add_argument("--backlog-precision-only", action="store_true",
                    help="in the backlog scenario, skip the ingest figures")
    ap.add_argument("--broker-nice", type=int, default=0,
                    help="run the RabbitMQ node and the consumer at this nice value "
                    "(e.g. -10), so other work on a shared machine delays them less; "
                    "the service keeps its own scheduling")
    ap.add_argument("--stall-fsync-ms", type=int, default=0,
                    help="make every --stall-every-th fsync/fdatasync of the service "
                    "sleep this long first (LD_PRELOAD tests/bench/stall_fsync.c)")
    ap.add_argument("--stall-every", type=int, default=100)
    ap.add_argument("--wait-quiet", type=int, default=0,
                    help="wait up to this many seconds for other processes "
                    "to calm down (< 25%% of a core) before starting")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    b = Bench(a)
    status = 0
    # the commit and dirty files as built (run.sh builds just before this);
    # read at the end they could name a later commit
    at_start = meta(a)
    try:
        b.run()
        if b.failed:
            status = 1
    except (BenchError, subprocess.SubprocessError, OSError) as e:
        log(f"FAILED: {e}")
        b.results["error"] = str(e)
        status = 1
    except (Terminated, KeyboardInterrupt):
        log("interrupted: stopping what was started")
        b.results["error"] = "interrupted"
        status = 130
    finally:
        b.cleanup()
    rows = table(b.results, a) if status != 130 else []
    doc = {"meta": at_start, "table": rows, "results": b.results}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    if rows:
        print()
        print_table(rows)
        print()
    log(f"results written to {a.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
