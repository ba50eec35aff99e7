"""PostgreSQL failover under load: a primary with a synchronous hot standby
(both private, on loopback), the service on a libpq multi-host URL with
target_session_attrs=read-write. The primary is killed with SIGKILL while
clients post; /readyz answers 503 while no primary answers; the standby is
promoted; the service follows it. Every job acknowledged (201) before,
during or after arrives: with synchronous replication a 201 means the job
was on both servers. Measured: time from the kill to the first 201 and to
the first delivery of a job acknowledged after the promotion.

This test runs its own two servers (the run-wide one cannot fail over), so
it applies to PostgreSQL only.
"""

import http.client
import os
import threading
import time

import pytest

from helpers import format_ts, http_request, parse_ts, wait_until
from pylib.pgserver import PgServers

pytestmark = pytest.mark.skipif(
    os.environ.get("RMQS_TEST_STORE", "sqlite") != "postgres",
    reason="fails over a PostgreSQL primary to its standby: no such thing "
           "for a SQLite file")

@pytest.fixture
def pg_pair():
    pair = PgServers(standby=True).start()
    yield pair
    pair.stop()


def test_primary_killed_and_standby_promoted_loses_no_acknowledged_job(
        service, amqp, pg_pair, report):
    svc = service("--lease-ms", "3000", db=pg_pair.url())
    lock = threading.Lock()
    acked = {}  # id -> (deliver_at, answered at)
    stop = threading.Event()

    def post():
        while not stop.is_set():
            job = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                   "body": "failover",
                   "deliver_at": format_ts(time.time() + 0.5)}
            try:
                r = http_request(svc.port, "POST", "/schedule", job, timeout=30)
            except (OSError, http.client.HTTPException):
                stop.wait(0.05)
                continue
            if r.status == 201:
                with lock:
                    acked[r.body["id"]] = (parse_ts(r.body["deliver_at"]),
                                           time.time())
            else:
                assert r.status == 503, r
                stop.wait(0.02)
    threads = [threading.Thread(target=post, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(acked) >= 300, 60, "300 jobs acknowledged")
        t_kill = time.time()
        pg_pair.kill9_primary()
        wait_until(lambda: svc.get("/readyz", timeout=10).status == 503, 20,
                   "/readyz to say 503 with no primary")
        t_unready = time.time()
        pg_pair.promote_standby()
        t_promoted = time.time()
        wait_until(lambda: any(t > t_promoted for _, t in list(acked.values())),
                   60, "a 201 after the promotion")
        first_201 = min(t for _, t in acked.values() if t > t_unready)
        wait_until(lambda: svc.get("/readyz", timeout=10).status == 200, 30,
                   "/readyz 200 again")
        n_before = len(acked)
        wait_until(lambda: len(acked) >= n_before + 300, 60,
                   "300 more jobs acknowledged after the failover")
    finally:
        stop.set()
        for t in threads:
            t.join(40)
    by_job = amqp.wait_for_jobs(acked, timeout=60)
    after = [j for j, (_, t) in acked.items() if t > t_promoted]
    first_delivery = min(min(m.received_at for m in by_job[j]) for j in after)
    early = [j for j, msgs in by_job.items() if j in acked and
             any(m.received_at < acked[j][0] - 0.001 for m in msgs)]
    dups = sum(1 for j, msgs in by_job.items() if j in acked and len(msgs) > 1)
    report(f"PostgreSQL failover (sync standby): {len(acked)} jobs "
           f"acknowledged, all arrived, {dups} duplicated, {len(early)} early; "
           f"kill -> /readyz 503 {t_unready - t_kill:.2f} s; promote took "
           f"{t_promoted - t_unready:.2f} s; kill -> first 201 "
           f"{first_201 - t_kill:.2f} s, kill -> first delivery of a job "
           f"acknowledged after the promotion {first_delivery - t_kill:.2f} s")
    assert not early, early[:5]
