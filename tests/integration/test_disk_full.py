"""A full disk: POST /schedule answers 503 and stores nothing, never a 201
for a job that is not stored; what was stored before is still delivered,
while the disk is full (the --min-free-bytes reserve is left for the
dispatcher); once space returns, jobs are accepted again without a restart.

The database lives on a 2 MiB tmpfs mounted by this test (the tests run as
root), next to a 1 MiB filler file written first: deleting the filler is how
space comes back. The service log stays outside the tiny filesystem.

On PostgreSQL the server's disk is not the service's to fill; the like
failure is a server that refuses writes: default_transaction_read_only set
server-wide (ALTER SYSTEM and a reload, which every open session follows;
the tests run one at a time) and reset afterwards whatever happens.
"""

import os
import time

import pytest

from helpers import STORE, env, parse_ts, wait_until
from pylib import pg, tmpfs
from pylib.tmpfs import FS_SIZE

# bodies of the jobs that fill the disk: big ones first, then smaller ones to
# fill what is left, so the disk is really full at the end
FILL_PHASES = ((100_000, 40), (10_000, 200), (1_000, 500))
EARLY_TOLERANCE_S = 0.001
RESERVE_BYTES = 512 * 1024


@pytest.mark.sqlite_only(
    "the SQLite file on a 2 MiB tmpfs with --min-free-bytes; a PostgreSQL "
    "server's disk is not the service's to fill (its like failure: "
    "test_read_only_database_is_503_...)")
def test_full_disk_is_503_stores_nothing_and_recovers_without_restart(
        service, amqp, tmp_path, report):
    mnt = tmp_path / "tinyfs"
    filler = tmpfs.mount_filled(mnt)
    svc = None
    try:
        # the last --db wins; a 512 KiB reserve on this 2 MiB filesystem
        svc = service("--db", str(mnt / "rmqs.db"), "--min-free-bytes",
                      str(RESERVE_BYTES))

        def job(body, **when):
            return {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                    "body": body, **when}

        # stored before the disk fills, due soon after it is full
        early = [svc.schedule(job(f"early {i}", delay_ms=2500)) for i in range(5)]
        acked = {j["id"]: j for j in early}
        bodies = {j["id"]: f"early {i}" for i, j in enumerate(early)}

        # fill the disk until POST says 503, in ever smaller steps
        counts, first_503 = [], None
        for size, bound in FILL_PHASES:
            n_ok = 0
            for i in range(bound):
                body = f"{size}-{i}-" + "x" * size
                resp = svc.post("/schedule", job(body, delay_ms=1000))
                if resp.status == 201:
                    acked[resp.body["id"]] = resp.body
                    bodies[resp.body["id"]] = body
                    n_ok += 1
                    continue
                assert resp.status == 503, f"expected 201 or 503: {resp!r}"
                assert resp.headers.get_content_type() == "application/json"
                err = resp.body["error"]
                assert err["code"] in ("storage_full", "unavailable"), resp.body
                assert err["message"], resp.body
                first_503 = first_503 or resp.body
                break
            else:
                raise AssertionError(f"{bound} jobs of {size} bytes fitted on a "
                                     f"{FS_SIZE} filesystem")
            counts.append((size, n_ok))
        st = os.statvfs(mnt)
        free_kib = st.f_bavail * st.f_frsize // 1024
        # a few more tiny ones: a 201 must be stored like any other (space
        # a failed write left behind may be reused), else 503
        tiny_503 = 0
        for i in range(3):
            body = f"tiny {i}"
            resp = svc.post("/schedule", job(body, delay_ms=0))
            if resp.status == 201:
                acked[resp.body["id"]] = resp.body
                bodies[resp.body["id"]] = body
                continue
            assert resp.status == 503, f"expected 201 or 503: {resp!r}"
            assert resp.body["error"]["code"] in ("storage_full", "unavailable")
            tiny_503 += 1

        # every 201 is stored: readable (reads work on a full disk), intact
        for job_id, j in acked.items():
            got = svc.job(job_id)
            assert got["body"] == bodies[job_id], f"job {job_id} body differs"
            assert got["status"] in ("pending", "publishing", "sent"), got

        # the jobs stored before fall due while the disk is full
        last_early = max(parse_ts(j["deliver_at"]) for j in early)
        wait_until(lambda: time.time() >= last_early + 2.0, 30,
                   "the early jobs to fall due while the disk is full")
        for j in early:
            got = svc.job(j["id"])
            assert got["status"] in ("pending", "publishing", "sent"), got
            assert got["attempts"] <= 1, f"attempts spent on a full disk: {got!r}"
        early_ids = {j["id"] for j in early}
        wait_until(lambda: early_ids <= {m.job_id for m in amqp.snapshot()}, 30,
                   "the jobs stored before the disk filled to be delivered "
                   "while it is full")
        delivered_while_full = early_ids
        readyz_while_full = svc.get("/readyz")
        assert readyz_while_full.status == 503, readyz_while_full
        assert readyz_while_full.body["database"] == "full", readyz_while_full
        for j in early:
            got = svc.job(j["id"])
            assert got["status"] == "sent", f"not marked sent on a full disk: {got!r}"

        # space comes back: accepted again at once, no restart
        pid = svc.pid
        filler.unlink()
        freed_at = time.time()
        small = svc.post("/schedule", job("after free", delay_ms=0))
        assert small.status == 201, f"first POST after freeing space: {small!r}"
        big_body = "after free big " + "y" * 100_000
        big = svc.post("/schedule", job(big_body, delay_ms=0))
        assert big.status == 201, f"100 KB POST after freeing space: {big!r}"
        assert svc.pid == pid and svc.alive()
        for r, body in ((small, "after free"), (big, big_body)):
            acked[r.body["id"]] = r.body
            bodies[r.body["id"]] = body

        # everything acknowledged is delivered, once, not early
        got = amqp.wait_for_jobs(list(acked), timeout=60)
        for job_id, j in acked.items():
            msgs = got[job_id]
            assert len(msgs) == 1, f"job {job_id} arrived {len(msgs)} times"
            assert msgs[0].body == bodies[job_id].encode()
            assert msgs[0].received_at >= parse_ts(j["deliver_at"]) - EARLY_TOLERANCE_S
        early_done = max(got[j["id"]][0].received_at for j in early)

        def settled():
            return not svc.list_all(status="pending")[0] and \
                not svc.list_all(status="publishing")[0]
        wait_until(settled, 30, "no job left pending or publishing")
        listed, _ = svc.list_all()
        assert {j["id"] for j in listed} == set(acked), \
            "the database holds other jobs than the acknowledged ones"
        assert all(j["status"] == "sent" and j["attempts"] == 1 for j in listed), \
            [j for j in listed if j["status"] != "sent" or j["attempts"] != 1][:3]
        unexpected = set(got) - set(acked)
        assert not unexpected, f"messages of jobs never acknowledged: {unexpected}"

        report(f"disk full ({FS_SIZE} tmpfs, 1 MiB filler): 201s before the first "
               f"503 by body size {counts}; first 503 {first_503['error']['code']}; "
               f"{free_kib} KiB left, {tiny_503} of 3 tiny jobs then 503; "
               f"/readyz while full {readyz_while_full.status}; "
               f"{len(delivered_while_full)} of {len(early)} jobs due while full "
               f"delivered before space returned, all {len(early)} "
               f"{max(0.0, early_done - freed_at):.2f} s after it; POST 201 again "
               f"at once; {len(acked)} jobs acknowledged, all delivered once")
    finally:
        stop_problem = tmpfs.release(mnt, svc)
    assert stop_problem is None, stop_problem


def _server_read_only(on):
    """Every session of the run's server, open ones too, refuses (or takes
    again) writes. The admin's own session is writable whatever is set."""
    admin = f"{env('RMQS_TEST_PG_ADMIN')} options='-c default_transaction_read_only=off'"
    pg._run(admin, "ALTER SYSTEM SET default_transaction_read_only = on" if on
            else "ALTER SYSTEM RESET default_transaction_read_only")
    pg._run(admin, "SELECT pg_reload_conf()")


@pytest.mark.skipif(STORE != "postgres", reason="a read-only PostgreSQL server; "
                    "on SQLite the like failure is the full disk above")
def test_read_only_database_is_503_stores_nothing_and_recovers_without_restart(
        service, amqp, report):
    svc = service()

    def job(body, **when):
        return {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                "body": body, **when}
    before = svc.schedule(job("before", delay_ms=1500))
    acked = {before["id"]: b"before"}
    try:
        _server_read_only(True)
        t0 = time.monotonic()
        # A session takes the reloaded setting between its statements; the
        # service's writer may commit once more before it has. /readyz
        # (on the writer's connection) saying 503 is the moment it has.
        wait_until(lambda: svc.get("/readyz").status == 503, 15,
                   "/readyz to say 503 while the database refuses writes")
        refused = []
        for i in range(5):
            resp = svc.post("/schedule", job(f"refused {i}", delay_ms=0))
            assert resp.status == 503, f"POST on a read-only database: {resp!r}"
            assert resp.headers.get_content_type() == "application/json"
            assert resp.body["error"]["code"] in ("storage_full", "unavailable"), resp.body
            refused.append(resp.body["error"]["code"])
        first_503_s = time.monotonic() - t0
        # what was stored is still readable; nothing refused was stored
        assert svc.job(before["id"])["body"] == "before"
    finally:
        _server_read_only(False)
    back_at = time.monotonic()

    def accepted():
        resp = svc.post("/schedule", job("after", delay_ms=0))
        assert resp.status in (201, 503), f"POST after writes returned: {resp!r}"
        return resp if resp.status == 201 else None
    after = wait_until(accepted, 15, "POST to answer 201 again", interval=0.1)
    recovered_s = time.monotonic() - back_at
    assert svc.alive()
    acked[after.body["id"]] = b"after"
    # the 503s stored nothing: the database holds the acknowledged jobs only
    listed, _ = svc.list_all()
    assert {j["id"] for j in listed} == set(acked), listed
    got = amqp.wait_for_jobs(list(acked), timeout=60)
    for job_id, body in acked.items():
        assert [m.body for m in got[job_id]] == [body], (job_id, got[job_id])
    report(f"read-only PostgreSQL: /readyz 503, then 5 POSTs 503 "
           f"{sorted(set(refused))}, {first_503_s:.2f} s after the switch, none "
           f"stored; 201 again "
           f"{recovered_s:.2f} s after writes returned, without a restart")
