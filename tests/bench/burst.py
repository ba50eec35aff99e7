"""tests/bench/burst.py - the burst scenario of bench.py: 10,000 jobs due at
the same instant (POST /schedule/batch); time from deliver_at until the
consumer has all of them; the dispatcher's publish rate against
bare_publisher's.
"""

import json
import os
import sys
import time


# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.http import KeepAlive
from pylib.times import format_ts_ms, now_ms
import benchlib as B
from benchlib import BenchError, FsyncCounter, log, run_bare


class Burst:
    """bench.Bench's burst scenario (a mixin of bench.Bench)."""

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
        cpu = B.CpuWindow(self.cpu_pids(svc, cons), svc.pid)
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
        cpu = B.CpuWindow(self.cpu_pids(None, cons)).start()
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

