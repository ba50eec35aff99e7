"""tests/bench/precision.py - the precision scenario of bench.py: POST
/schedule at a steady rate (paced client, one job per request, keep-alive
connections), mixed delays 1-10 s; the C consumer notes receive times;
lateness = receive - deliver_at of the 201 answer. Also the same due stream
with the jobs stored beforehand (no POSTs meanwhile), and beside a noisy
neighbour (tests/bench/neighbour.py).
"""

import json
import os
import re
import subprocess
import sys
import threading
import time


# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.http import KeepAlive
from pylib.procs import stop_proc
from pylib.times import format_ts_ms, now_ms, ts_ms
import benchlib as B
from benchlib import (DELAY_MAX_MS, DELAY_MIN_MS, BenchError, FsyncCounter,
                      hist_delta, lateness_stats, log, pct, scrape_lateness)


class Precision:
    """bench.Bench's precision scenario (a mixin of bench.Bench)."""

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
        cpu = B.CpuWindow(self.cpu_pids(svc, cons), svc.pid).start()
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
        cpu = B.CpuWindow(self.cpu_pids(svc, cons), svc.pid).start()
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

