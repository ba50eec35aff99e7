"""tests/bench/schedules.py - the recurring-schedules benchmark of issue 13
(bench.py --only schedules; run.sh --only schedules): N schedules (100,000
by default, --schedules) that all fire at the same minute boundary, on
SQLite and on PostgreSQL (--schedules-stores).

Per store, on a fresh database:
  1. 1,000 schedules that never fire during the run (`0 0 1 1 *`) through
     PUT /schedules/{name} from 16 keep-alive connections: their PUT rate,
     and the service's RSS with 1,000 schedules once its scheduler has
     looked at them;
  2. from that rate, a minute boundary T far enough ahead for N more, and N
     schedules `0 <m> <h> * * *` (UTC) that fire at T, each publishing to
     one queue: the PUT rate of N (the headline "PUT /schedules rate"), RSS
     with N + 1,000 schedules a few seconds before T (memory flat in the
     number of schedules: the scheduler walks the due ones in batches, it
     keeps none in memory);
  3. at T: when the N runs were created (jobs.created_at against T: runs
     are made --schedule-lead-ms ahead, in batches of 1,000 per
     transaction), when they were confirmed (sent_at), and when the last
     reached the consumer (the drain), against bare_publisher publishing N
     messages at one instant to the same broker (window 1,000, like the
     dispatcher). rmqs_schedule_runs_total says how many fired on time and
     how many were created after T (misfired_fired: created late, still
     within the grace).
Nothing here asserts: the table says what was measured and which target was
met; each step is bounded in time.
"""

import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.procs import rss_kib
from pylib.times import now_ms
import benchlib  # tests/bench: the runner's shared code

CONNECTIONS = 16
CALIBRATION = 1000
FAR_CRON = "0 0 1 1 *"


def put_many(port, specs, connections=CONNECTIONS, timeout_s=1800):
    """PUT /schedules/{name} of every (name, spec) from `connections`
    keep-alive connections. Returns (seconds, answers per status)."""
    todo = list(specs)
    lock = threading.Lock()
    statuses = {}
    errors = []
    deadline = time.monotonic() + timeout_s

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while time.monotonic() < deadline:
                with lock:
                    if not todo:
                        return
                    name, spec = todo.pop()
                body = json.dumps(spec)
                for attempt in (0, 1):
                    try:
                        conn.request("PUT", f"/schedules/{name}", body=body,
                                     headers={"Content-Type": "application/json"})
                        r = conn.getresponse()
                        r.read()
                        break
                    except (OSError, http.client.HTTPException) as e:
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                        if attempt:
                            errors.append(repr(e))
                            return
                with lock:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
        finally:
            conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors or todo:
        raise benchlib.BenchError(f"PUT /schedules: {len(todo)} not sent, errors {errors[:3]}")
    return time.monotonic() - t0, statuses


def metric(port, series):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[1])
    return None


def rss_after_scan(svc, settle_s=3.0):
    """RSS once the scheduler has had a few passes over what was stored."""
    time.sleep(settle_s)
    return rss_kib(svc.pid)


class ScheduleBench:
    def __init__(self, b, store):
        self.b = b
        self.B = benchlib  # the runner's shared code (CpuWindow, Service, log...)
        self.a = b.a
        self.store = store
        self.n = self.a.schedules

    def service(self):
        if self.store == "sqlite":
            return self.b.service("schedules-sqlite")
        import stores  # pylint: disable=import-outside-toplevel
        svc = stores.pg_service_class(self.B.Service)(self.a.bin, self.b.work,
                                                      "schedules-pg", self.b.url)
        self.b.services.append(svc)
        return svc

    def run(self):
        svc = self.service()
        res = {"store": self.store, "schedules": self.n, "start": svc.start()}
        res["rss_0"] = rss_kib(svc.pid)
        tag = self.b.tag()
        ex, q, rk = self.b.admin.target(tag)

        # 1. calibration: 1,000 that do not fire during the run
        calib = [(f"calib-{tag}-{i}", {"cron": FAR_CRON, "job": {
            "exchange": ex, "routing_key": rk, "body": "never"}}) for i in range(CALIBRATION)]
        secs, st = put_many(svc.port, calib)
        res["calibration"] = {"put_s": round(secs, 2), "statuses": st,
                              "put_per_s": round(CALIBRATION / secs, 1)}
        res["rss_1k"] = rss_after_scan(svc)

        # 2. N firing at the minute boundary T
        est_s = self.n / max(1.0, CALIBRATION / secs)
        T = ((now_ms() + int(est_s * 2500) + 20000) // 60000 + 1) * 60000
        tm = time.gmtime(T / 1000)
        cron = f"0 {tm.tm_min} {tm.tm_hour} * * *"
        res.update(fire_at_ms=T, cron=cron, estimated_put_s=round(est_s, 1))
        self.B.log(f"schedules ({self.store}): {self.n:,} schedules '{cron}' UTC, "
                   f"firing in {(T - now_ms()) / 1000:.0f} s "
                   f"(calibration {res['calibration']['put_per_s']}/s)")
        cons = self.b.consumer(q, self.n, (T - now_ms()) / 1000 + 600)
        specs = [(f"fire-{tag}-{i:06d}", {"cron": cron, "job": {
            "exchange": ex, "routing_key": rk, "body": f"s{i}"}}) for i in range(self.n)]
        secs, st = put_many(svc.port, specs)
        res["put"] = {"put_s": round(secs, 2), "statuses": st,
                      "put_per_s": round(self.n / secs, 1),
                      "done_before_fire_s": round((T - now_ms()) / 1000, 1)}
        self.B.log(f"schedules ({self.store}): PUT {self.n:,} in {secs:.1f} s "
                   f"({self.n / secs:,.0f}/s), {res['put']['done_before_fire_s']} s before T")
        if now_ms() < T - 8000:
            time.sleep((T - 8000 - now_ms()) / 1000)
        res["rss_n"] = rss_kib(svc.pid)

        # 3. the fire time
        cpu = self.B.CpuWindow(self.b.cpu_pids(svc, cons), svc.pid).start()
        got = cons.result()
        usage = cpu.stop()
        recv = sorted(ns / 1e6 for ns, _ in got)
        res["cpu"] = usage
        res["received"] = len({i for _, i in got})
        if recv:
            res.update(first_receive_after_fire_ms=round(recv[0] - T, 1),
                       last_receive_after_fire_ms=round(recv[-1] - T, 1),
                       early=sum(1 for v in recv if v < T))
        try:
            (cnt, c0, c1, s0, s1, sent), = svc.query(
                "SELECT count(*), min(created_at), max(created_at), min(sent_at), "
                "max(sent_at), sum(CASE WHEN status = 2 THEN 1 ELSE 0 END) FROM jobs "
                "WHERE fire_at = ?", (T,))
            res.update(runs_created=cnt, runs_sent=sent,
                       first_created_after_fire_ms=None if c0 is None else c0 - T,
                       last_created_after_fire_ms=None if c1 is None else c1 - T,
                       first_sent_after_fire_ms=None if s0 is None else s0 - T,
                       last_sent_after_fire_ms=None if s1 is None else s1 - T)
            if s1 is not None and s1 > T:
                res["dispatch_rate_per_s"] = round(cnt / ((s1 - T) / 1000), 1)
        except Exception as e:  # noqa: BLE001 (reported, the run goes on)
            res["query_error"] = repr(e)
        for r in ("fired", "misfired_fired", "skipped"):
            res[f"runs_{r}"] = metric(svc.port, f'rmqs_schedule_runs_total{{result="{r}"}}')
        res["rss_after"] = rss_kib(svc.pid)
        res["stop"] = svc.stop()
        return res


def scenario(b, _empty_svc):
    """bench.py's entry: each store, then bare_publisher with the same count."""
    B = benchlib
    out = {}
    for store in [s for s in b.a.schedules_stores.split(",") if s]:
        B.log(f"schedules: {b.a.schedules:,} firing at one minute boundary on {store}")
        try:
            out[store] = ScheduleBench(b, store).run()
        except (B.BenchError, OSError) as e:
            out[store] = {"error": str(e)}
        finally:
            for c in b.consumers:
                c.stop()
            b.consumers = []
    out["bare"] = b.burst_bare(n=b.a.schedules, lead_ms=1500)
    return out


def table_rows(R, row):
    """bench.py's table rows of the schedules scenario."""
    bare = R.get("bare") or {}
    bare_ms = bare.get("last_receive_after_due_ms")
    for store in ("sqlite", "postgres"):
        r = R.get(store)
        if not r:
            continue
        scn = f"schedules ({store})"
        if "error" in r:
            row(scn, "FAILED", r["error"][:80])
            continue
        n = r["schedules"]
        row(scn, f"PUT /schedules rate (16 connections, {n:,} schedules)",
            r["put"]["put_per_s"], "", None, "/s")
        row(scn, f"runs created / published of {n:,} due at one minute boundary",
            f"{r.get('runs_created')} / {r.get('received')}", "all",
            r.get("runs_created") == n and r.get("received") == n)
        row(scn, "runs fired on time / created late (misfired_fired) / skipped",
            f"{r.get('runs_fired')} / {r.get('runs_misfired_fired')} / {r.get('runs_skipped')}")
        row(scn, "last run created, after the fire time", r.get("last_created_after_fire_ms"),
            "", None, " ms")
        row(scn, "drain: last message received, after the fire time",
            r.get("last_receive_after_fire_ms"), "", None, " ms")
        if bare_ms and r.get("last_receive_after_fire_ms"):
            row(scn, f"drain against bare_publisher ({bare_ms:,.0f} ms for {n:,})",
                round(r["last_receive_after_fire_ms"] / bare_ms, 2), "", None, "x")
        row(scn, "early messages", r.get("early"), "0", r.get("early") == 0)
        k1, kn = (r.get("rss_1k") or {}).get("rss_kib"), (r.get("rss_n") or {}).get("rss_kib")
        if k1 and kn:
            row(scn, f"RSS with 1,000 / {n + CALIBRATION:,} schedules",
                f"{k1:,} / {kn:,} KiB", "flat (< 2x)", kn < 2 * k1)
