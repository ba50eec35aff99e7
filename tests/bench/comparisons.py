"""tests/bench/comparisons.py - the comparisons scenario of bench.py: the
same precision workload (smaller) and a 10,000 burst through broker-only
delays: one TTL+DLX queue with per-message expiration, per-delay TTL queues,
the 28-level binary TTL topology, and bare_publisher publishing at the due
time.
"""

import os
import random
import sys


# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.times import now_ms
import benchlib as B
from benchlib import (DELAY_MAX_MS, DELAY_MIN_MS, Admin, lateness_stats, log,
                      run_bare)


class Comparisons:
    """bench.Bench's comparisons scenario (a mixin of bench.Bench)."""

    # --- comparisons -----------------------------------------------------------
    def cmp_plan(self, cons, lines, log_name, args=(), timeout=180):
        """bare_publisher in plan mode (each line published at its time,
        window 1000), with the CPU window around it until the consumer has
        its messages. Returns (bare_publisher's result, the consumer's
        result, the CPU usage, {ident: publish time in ms})."""
        plog = os.path.join(self.work, log_name)
        cpu = B.CpuWindow(self.cpu_pids(None, cons)).start()
        bare = run_bare(self.a.tools, self.port,
                        ["--plan", "--publish-log", plog, "--window", "1000", *args],
                        stdin_text="\n".join(lines) + "\n", timeout=timeout)
        got = cons.result()
        usage = cpu.stop()
        pub = {}
        with open(plog) as f:
            for line in f:
                ident, ns = line.split()
                pub[ident] = int(ns) / 1e6
        return bare, got, usage, pub

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
        bare, got, usage, pub = self.cmp_plan(
            cons, lines, f"publog-{kind}-{tag}.txt", ["--timeout-s", "120"],
            timeout=n / rate + 60)
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
        cpu = B.CpuWindow(self.cpu_pids(svc, cons), svc.pid).start()
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
        bare, got, usage, pub = self.cmp_plan(cons, lines,
                                              f"publog-burst-{kind}-{tag}.txt")
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

