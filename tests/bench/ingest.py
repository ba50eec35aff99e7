"""tests/bench/ingest.py - the ingest scenario of bench.py: wrk against GET
/healthz, POST /schedule (delay 1 h) and POST /schedule/batch (1,000 jobs per
request); and the memory flood (many clients posting batches: peak RSS).
"""

import json
import os
import re
import subprocess
import sys
import time


# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.procs import stop_proc
from benchlib import HOST, log, run_wrk, wrk_script


class Ingest:
    """bench.Bench's ingest scenario (a mixin of bench.Bench)."""

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

