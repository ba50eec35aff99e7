"""tests/bench/benchlib.py - what every scenario of bench.py runs on: the
service under test (its start-up, RSS and lateness histogram), the private
RabbitMQ node (management API, the C consumer, bare_publisher), wrk, the CPU
of each process over a window, the disk probe, the percentile and lateness
statistics, and BenchBase: the plumbing of a run (services and consumers it
started and stops, one step per scenario, waiting for a quiet machine).

The scenarios live in a module each (precision, burst, ingest, comparisons,
backlog beside stores, schedules, search, poison); bench.py puts them
together and prints the table. A scenario module reads the window class as
benchlib.CpuWindow at call time: stores.py swaps it for its PostgreSQL
columns (the server's process tree counted as one "postgres" figure).
"""

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
import time
import uuid

import pika

# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
import pylib.service
from pylib.http import exchange
from pylib.procs import rss_kib, stop_proc

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


# --- the run ----------------------------------------------------------------------

class BenchBase:
    """The plumbing of a run; bench.Bench adds the scenarios (a mixin
    class per scenario module) and run()."""

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

