#!/usr/bin/python3
"""tests/bench/clients/python/driver.py - the Python driver of the clients
scenario (issue 26; tests/bench/clients.py runs it). Why it exists: the
jobs/s and client CPU of scheduling through the rmq_scheduler package
(clients/python) have to be measured in a Python process of their own,
against the same jobs sent one request each with http.client.

    driver.py --mode lib|plain --url http://127.0.0.1:P --callers C
              --jobs N --seconds S --delay-ms D

mode lib:   Client.schedule() from C threads (batched into POST
            /schedule/batch by the client's sender threads), the client's
            defaults (linger 0, 4 senders, a pool of 8 connections);
mode plain: POST /schedule per job, one http.client.HTTPConnection per
            thread (keep-alive), no extra headers.

Each of the C threads schedules one job at a time until N jobs were
started or S seconds passed. Before the clock each thread schedules one
job (connections open), then "READY" on stdout; the clock starts at a line
on stdin; at the end one line "RESULT {json}": jobs, seconds, cpu_us
(resource.getrusage of this process, user + system, over the measured
window only), errors. Debian's python3, standard library only.
"""

import argparse
import http.client
import itertools
import json
import os
import resource
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "..", "clients", "python"))
# pylint: disable=wrong-import-position
from rmq_scheduler import Client  # noqa: E402


def job(i, delay_ms):
    """The same job for every way: a small JSON body."""
    return {"exchange": "bench-clients", "routing_key": "order.reminder",
            "body": {"order": i, "customer": f"c-{i % 1000}"}, "delay_ms": delay_ms}


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("lib", "plain"), required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--callers", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--delay-ms", type=int, default=3_600_000)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)

    client = Client(a.url) if a.mode == "lib" else None
    counter = itertools.count()  # next(counter) is atomic under the GIL
    lock = threading.Lock()
    stats = {"done": 0, "errors": 0, "first_error": None}
    go = threading.Event()
    ready = threading.Barrier(a.callers + 1)
    deadline = [0.0]
    warm_failures = []

    def caller():
        conn = None
        if a.mode == "lib":
            def one(i):
                client.schedule(job(i, a.delay_ms))
        else:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)

            def one(i):
                body = json.dumps(job(i, a.delay_ms))
                conn.request("POST", "/schedule", body=body,
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                raw = r.read()
                if r.status != 201:
                    raise RuntimeError(f"POST /schedule: {r.status} {raw[:200]!r}")
                json.loads(raw)
        done = errors = 0
        first = None
        try:
            one(-1)  # warm-up: a connection open
        except Exception as e:  # pylint: disable=broad-except
            warm_failures.append(repr(e)[:300])
        ready.wait()
        go.wait()
        while True:
            i = next(counter)
            if i >= a.jobs or time.monotonic() >= deadline[0]:
                break
            try:
                one(i)
                done += 1
            except Exception as e:  # pylint: disable=broad-except
                errors += 1
                first = first or repr(e)[:300]
        with lock:
            stats["done"] += done
            stats["errors"] += errors
            stats["first_error"] = stats["first_error"] or first
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(a.callers)]
    for t in threads:
        t.start()
    ready.wait()
    if warm_failures:
        sys.exit(f"driver.py: warm-up failed: {warm_failures[0]}")
    print("READY", flush=True)
    sys.stdin.readline()
    c0, t0 = cpu_s(), time.monotonic()
    deadline[0] = t0 + a.seconds
    go.set()
    for t in threads:
        t.join()
    secs, cpu = time.monotonic() - t0, cpu_s() - c0
    print("RESULT " + json.dumps({"jobs": stats["done"], "seconds": secs,
                                  "cpu_us": round(cpu * 1e6), "errors": stats["errors"],
                                  "first_error": stats["first_error"]}), flush=True)
    if client is not None:
        client.close()


if __name__ == "__main__":
    main()
