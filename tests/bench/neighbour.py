#!/usr/bin/python3
"""tests/bench/neighbour.py - a noisy neighbour for the benchmark (issue 10).

Why: a production host shares its disk and CPU with other work, and the
service's precision must not depend on a quiet disk. This process makes that
load on purpose, beside the database, so bench.py can measure the precision
workload under it:

  - fsync'd writes: --write-kib KiB (64) then fsync, in a loop, into a file
    in --dir (the database's folder: the same filesystem and disk queue);
  - optionally big writes: --big-mib MiB (8) at --big-per-s a second, each
    fsync'd (the "8 MiB writes" of the issue);
  - optionally CPU: --cpu N child processes spinning.

It stops by itself after --seconds (bounded), or at SIGTERM, removes its
files, reaps its children (by PID) and writes what it did (writes, bytes,
fsync latency p50/p99/max) as JSON to --out.
"""

import argparse
import json
import os
import signal
import sys
import time

STOP = False


def on_term(signum, frame):
    global STOP
    STOP = True


def pct(s, p):
    if not s:
        return None
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def spin(deadline):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    x = 0
    while time.monotonic() < deadline:
        for _ in range(10000):
            x += 1
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--write-kib", type=int, default=64)
    ap.add_argument("--big-mib", type=int, default=0)
    ap.add_argument("--big-per-s", type=float, default=0)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.seconds <= 0 or a.seconds > 3600:
        sys.exit("neighbour: --seconds must be in (0, 3600]")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    t0 = time.monotonic()
    deadline = t0 + a.seconds
    kids = []
    for _ in range(max(0, a.cpu)):
        pid = os.fork()
        if pid == 0:
            spin(deadline)
        kids.append(pid)

    small = os.path.join(a.dir, f"neighbour-{os.getpid()}.small")
    big = os.path.join(a.dir, f"neighbour-{os.getpid()}.big")
    buf = os.urandom(a.write_kib * 1024) if a.write_kib > 0 else b""
    bigbuf = os.urandom(1024 * 1024) if a.big_mib > 0 else b""
    fd = os.open(small, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    bfd = os.open(big, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if a.big_mib else -1
    lat, blat = [], []
    writes = bigs = 0
    next_big = t0
    off = 0
    try:
        while not STOP and time.monotonic() < deadline:
            if buf:
                # a 16 MiB ring: new blocks each time, like a log, without
                # filling the disk
                os.pwrite(fd, buf, off)
                off = (off + len(buf)) % (16 * 1024 * 1024)
                t = time.perf_counter()
                os.fsync(fd)
                lat.append((time.perf_counter() - t) * 1000)
                writes += 1
            if bfd >= 0 and a.big_per_s > 0 and time.monotonic() >= next_big:
                next_big += 1 / a.big_per_s
                for k in range(a.big_mib):
                    os.pwrite(bfd, bigbuf, k * len(bigbuf))
                t = time.perf_counter()
                os.fsync(bfd)
                blat.append((time.perf_counter() - t) * 1000)
                bigs += 1
            if not buf and bfd >= 0:
                time.sleep(max(0.0, min(0.05, next_big - time.monotonic())))
    finally:
        os.close(fd)
        os.unlink(small)
        if bfd >= 0:
            os.close(bfd)
            os.unlink(big)
        for pid in kids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
    wall = time.monotonic() - t0
    lat.sort()
    blat.sort()
    out = {"seconds": round(wall, 2), "write_kib": a.write_kib, "writes": writes,
           "writes_per_s": round(writes / wall, 1),
           "mib_per_s": round((writes * a.write_kib / 1024 + bigs * a.big_mib) / wall, 1),
           "fsync_p50_ms": round(pct(lat, 50), 3) if lat else None,
           "fsync_p99_ms": round(pct(lat, 99), 3) if lat else None,
           "fsync_max_ms": round(lat[-1], 3) if lat else None,
           "cpu_spinners": len(kids)}
    if a.big_mib:
        out.update({"big_mib": a.big_mib, "big_writes": bigs,
                    "big_fsync_p99_ms": round(pct(blat, 99), 3) if blat else None,
                    "big_fsync_max_ms": round(blat[-1], 3) if blat else None})
    with open(a.out, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
