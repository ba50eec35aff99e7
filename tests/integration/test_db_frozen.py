"""A PostgreSQL that stops answering does not hang the service: a frozen
server (SIGSTOP of every process of a private server) and a frozen network
path (a proxy on loopback that stops forwarding: no answer, no reset),
each while clients post and jobs come due. With --db-timeout-ms 1000:

  - every POST gets an answer during the freeze, 503 within the bound
    (a call waits the timeout and a second more, then the connection is
    given up; the next connect waits connect_timeout, 2 s, and calls in the
    half second after a failed connect fail at once; a request queued
    behind one such call waits for it too);
  - /readyz says 503 (the database) within the same bound;
  - nothing acknowledged (201) is lost: every such job arrives, none early;
  - when the server thaws, POSTs answer 201 again and the jobs due meanwhile
    go out.

Both apply to PostgreSQL only: a SQLite file has no server or network path
(its own faults, a full or slow disk, are test_disk_full.py's).
"""

import os
import time

import pytest

from helpers import format_ts, parse_ts, wait_until
from pylib.load import Load
from pylib.pgserver import PgServers, SilentProxy

pytestmark = pytest.mark.skipif(
    os.environ.get("RMQS_TEST_STORE", "sqlite") != "postgres",
    reason="freezes a PostgreSQL server or the path to it")

DB_TIMEOUT_S = 1.0
CONNECT_S = 2.0  # the URL's connect_timeout (libpq waits 2 s at least)
# The longest a POST may wait during the freeze: its own call (the timeout
# and the margin), behind one more (a group commit in flight), then a
# connect attempt; plus scheduling slack for a loaded 2-core machine.
BOUND_S = 2 * (DB_TIMEOUT_S + 1.0) + CONNECT_S + 2.0
FREEZE_S = BOUND_S + 4.0  # long enough to see requests that met only the freeze


@pytest.fixture
def pg():
    servers = PgServers().start()
    yield servers
    servers.stop()


def posters(svc, amqp):
    """Threads posting one job a request (pylib.load), due 0.3-1.3 s later."""
    def make(_n, rng):
        return {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                "body": "frozen db",
                "deliver_at": format_ts(time.time() + rng.uniform(0.3, 1.3))}
    return Load([svc.port], make, threads=4, pause_s=0.01, error_pause_s=0.05,
                seed=3)


def acked(load):
    """job id -> deliver_at (epoch s) of every 201."""
    return {r["body"]["id"]: parse_ts(r["body"]["deliver_at"])
            for r in load.acked()}


def answered(load, t0, t1):
    """(status, seconds) of the requests sent in [t0, t1)."""
    with load.lock:
        return [(r["status"] if r["error"] is None else r["error"],
                 (r["end"] or time.time()) - r["start"])
                for r in load.records if t0 <= r["start"] < t1]


def freeze_and_thaw(svc, amqp, freeze, thaw, report, what):
    load = posters(svc, amqp).start()
    try:
        wait_until(lambda: load.n_acked() >= 100, 60,
                   "100 jobs acknowledged before the freeze")
        n_before = load.n_acked()
        freeze()
        t_freeze = time.time()  # frozen from here on
        try:
            t0 = time.time()
            r = svc.get("/readyz", timeout=BOUND_S + 5)
            readyz = (r.status, time.time() - t0)
            wait_until(lambda: time.time() >= t_freeze + FREEZE_S,
                       FREEZE_S + 1, "the end of the freeze", interval=0.1)
        finally:
            thaw()
        t_thaw = time.time()
        wait_until(lambda: any(r["status"] == 201 and r["start"] > t_thaw
                               for r in load.acked()), 30,
                   "a 201 after the thaw")
        first_201 = min(r["end"] for r in load.acked() if r["start"] > t_thaw)
        wait_until(lambda: load.n_acked() >= n_before + 200, 60,
                   "200 more jobs acknowledged after the thaw")
    finally:
        load.join()
    # Requests sent during the freeze, long enough before the thaw that
    # only the bound can have answered them: what each got, how long it took.
    during = answered(load, t_freeze, t_thaw - BOUND_S)
    refused = [a for a in during if a[0] == 503]
    slowest = max(a[1] for a in during)
    jobs = acked(load)
    by_job = amqp.wait_for_jobs(jobs, timeout=60)
    early = [j for j, msgs in by_job.items() if j in jobs and
             any(m.received_at < jobs[j] - 0.001 for m in msgs)]
    report(f"{what} frozen {FREEZE_S:.0f} s (db-timeout {DB_TIMEOUT_S:.0f} s): "
           f"{len(during)} POSTs sent during it, {len(refused)} answered 503, "
           f"slowest answer {slowest:.2f} s (bound {BOUND_S:.0f} s); /readyz "
           f"{readyz[0]} in {readyz[1]:.2f} s; first 201 "
           f"{first_201 - t_thaw:.2f} s after the thaw; {len(jobs)} "
           f"acknowledged, all arrived, {len(early)} early")
    assert during, "no request was made during the freeze"
    assert {a[0] for a in during} <= {201, 503}, \
        f"answers during the freeze: {sorted({str(a[0]) for a in during})}"
    assert refused, "no 503 during the freeze: nothing was frozen"
    assert slowest <= BOUND_S, f"a POST took {slowest:.2f} s"
    assert readyz[0] == 503 and readyz[1] <= BOUND_S, readyz
    assert not early, early[:5]


def test_frozen_server_fails_calls_within_the_bound_and_loses_nothing(
        service, amqp, pg, report):
    svc = service("--db-timeout-ms", str(int(DB_TIMEOUT_S * 1000)),
                  db=pg.url())
    freeze_and_thaw(svc, amqp, pg.freeze_primary, pg.thaw_primary, report,
                    "PostgreSQL server (SIGSTOP)")


def test_frozen_network_path_fails_calls_within_the_bound_and_loses_nothing(
        service, amqp, pg, report):
    proxy = SilentProxy(pg.p1_port)
    try:
        svc = service("--db-timeout-ms", str(int(DB_TIMEOUT_S * 1000)),
                      db=pg.url(proxy.port))
        freeze_and_thaw(svc, amqp, proxy.freeze, proxy.thaw, report,
                        "network path to PostgreSQL (a silent proxy)")
    finally:
        proxy.close()
