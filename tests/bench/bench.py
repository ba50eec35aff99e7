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
               precision and ingest again, database bytes per job (on SQLite,
               or with --backlog-store postgres on the run's PostgreSQL).
  retention    (only when asked) PostgreSQL: a steady load with a short
               retention, purge cost and table size every 10 s.
  clients      (only when asked) jobs/s and client CPU through the Node,
               Python and Go libraries against one request per job, and the
               Node library against BullMQ's Queue.add() (tests/bench/clients.py).

Results: a table on stdout and a JSON file (--out).
"""
# The code: benchlib.py holds what every scenario runs on (the service, the
# broker's tools, wrk, CPU windows, statistics, the run's plumbing); each
# scenario of issue 4 is a module (precision, burst, ingest, comparisons,
# backlog: a mixin class of Bench each), beside stores, schedules, search and
# poison; this file is the command line, the order of the run and the table.

import argparse
import datetime
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time


# tests/pylib, shared with the integration and deployment tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
import benchlib
from benchlib import (BenchError, Terminated, disk_probe, log, on_sigterm,
                      renice)
import backlog
from backlog import Backlog
from burst import Burst
from comparisons import Comparisons
from ingest import Ingest
from precision import Precision
import stores  # issue 12: SQLite / PostgreSQL 1 / PostgreSQL 3, side by side
import schedules  # issue 13: N recurring schedules firing at one minute boundary
import search  # issue 14: the search's insert cost and request times at N jobs
import poison  # issue 21: a job the broker refuses for a whole channel, in a burst
import flow  # issue 23: limits' cost, a drain's neighbour, fairness, shared limits
import retention  # issue 24: purge and table size at a steady load on PostgreSQL
import clients  # issue 26: the client libraries against one request per job, and BullMQ


# --- the benchmark ----------------------------------------------------------------------

class Bench(benchlib.BenchBase, Precision, Burst, Ingest, Comparisons, Backlog):
    """The whole run: the plumbing (benchlib.BenchBase) and a mixin per
    scenario module; run() says which scenarios run, in which order."""

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
        if only is not None and "flow" in only:  # issue 23; only when asked
            self.step("flow", flow.scenario, self, svc)
        if only is not None and "retention" in only:  # issue 24; only when asked
            self.step("retention", retention.scenario, self, svc)
        if only is not None and "clients" in only:  # issue 26; only when asked
            self.step("clients", clients.scenario, self, svc)
        if want("backlog") and self.a.backlog_store == "postgres":
            R["empty_stop"] = svc.stop()
            self.step("backlog", self.scenario_backlog_pg)
        elif want("backlog"):
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
    if k and k.get("store") == "postgres":
        backlog.table_rows_pg(k, row)
        noise_row(f"backlog {k['jobs']:,} (PostgreSQL)", k)
        k = None
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
    if R.get("flow"):
        flow.table_rows(R["flow"], row)
    if R.get("retention"):
        retention.table_rows(R["retention"], row)
        noise_row("retention", R["retention"])
    if R.get("clients"):
        clients.table_rows(R["clients"], row)
        noise_row("clients", R["clients"])
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
                    "comparisons,ingest,backlog,stores,schedules,search,poison,flow,retention,clients")
    ap.add_argument("--backlog-store", choices=("sqlite", "postgres"), default="sqlite",
                    help="backlog scenario: the store (postgres: on the run's server, "
                    "empty then --backlog pending jobs)")
    ap.add_argument("--retention-rate", type=int, default=1000,
                    help="retention scenario: jobs/s posted (batches every 100 ms)")
    ap.add_argument("--retention-seconds", type=int, default=0,
                    help="retention scenario: how long (0: 180 s, --full 1,800 s)")
    ap.add_argument("--retention-keep-s", type=int, default=1,
                    help="retention scenario: the service's --retention-s (>= 1)")
    ap.add_argument("--retention-every", type=int, default=10,
                    help="retention scenario: seconds between two rows")
    ap.add_argument("--retention-backlog", type=int, default=0,
                    help="retention scenario: pending jobs (due 1-30 days ahead) "
                    "written before the load")
    ap.add_argument("--retention-reloptions", default="",
                    help="retention scenario: storage parameters set on jobs and "
                    "job_text first, e.g. autovacuum_vacuum_scale_factor=0,"
                    "autovacuum_vacuum_threshold=10000")
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
    ap.add_argument("--clients-libs", default="node,python,go",
                    help="clients scenario: the libraries, a comma list of node,python,go "
                    "(empty: only the BullMQ comparison)")
    ap.add_argument("--clients-callers", default="1,16,256",
                    help="clients scenario: concurrent callers, a comma list")
    ap.add_argument("--clients-jobs", type=int, default=20_000,
                    help="clients scenario: jobs per run at most")
    ap.add_argument("--clients-seconds", type=float, default=10,
                    help="clients scenario: seconds per run at most")
    ap.add_argument("--clients-reps", type=int, default=3,
                    help="clients scenario: runs of each configuration (medians)")
    ap.add_argument("--clients-bullmq-jobs", type=int, default=20_000,
                    help="clients scenario: jobs started at once through the Node library "
                    "and BullMQ's Queue.add() (0: skip the comparison)")
    ap.add_argument("--clients-stores", default="sqlite,postgres",
                    help="clients scenario: the service's stores in the BullMQ comparison")
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
        if isinstance(b.results.get("clients"), dict) and "error" not in b.results["clients"]:
            clients.print_tables(b.results["clients"])
    log(f"results written to {a.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())

