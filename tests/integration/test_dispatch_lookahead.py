"""The dispatcher claims jobs --dispatch-lookahead-ms before they are due
(so the database is never between a due job and the broker), yet publishes
each only once it is due; a claimed job can no longer be cancelled; jobs
claimed ahead at a stop are handed back, not counted as an attempt, and
delivered on time after the restart; a cancel or reschedule racing the
claim either sticks (200) or meets a job that is published (409)."""

import concurrent.futures
import time

from helpers import assert_error, db_count, parse_ts, wait_until

LOOKAHEAD_MS = 2000
LATE_LIMIT_S = 1.0  # generous: ASan build on a shared machine


def _job(amqp, delay_ms, body="x"):
    return {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
            "body": body, "delay_ms": delay_ms}


def test_job_is_claimed_ahead_but_published_only_when_due(service, amqp):
    svc = service("--dispatch-lookahead-ms", str(LOOKAHEAD_MS))
    job = svc.schedule(_job(amqp, 4000))
    due = parse_ts(job["deliver_at"])

    # Claimed within the lookahead: publishing, well before its time.
    claimed = svc.wait_status(job["id"], "publishing", timeout=10)
    seen_at = time.time()
    assert seen_at < due, "not claimed before it was due"
    assert seen_at >= due - LOOKAHEAD_MS / 1000 - 0.5, \
        f"claimed {due - seen_at:.2f} s ahead, lookahead is {LOOKAHEAD_MS} ms"
    assert claimed["attempts"] == 1

    # Too late to cancel or reschedule once claimed.
    assert_error(svc.delete(f"/jobs/{job['id']}"), 409, "conflict")
    assert_error(svc.patch(f"/jobs/{job['id']}", {"delay_ms": 60_000}), 409,
                 "conflict")

    msg = amqp.wait_for_jobs([job["id"]], timeout=15)[job["id"]][0]
    late = msg.received_at - due
    assert late >= -0.001, f"arrived {-late * 1000:.1f} ms early"
    assert late <= LATE_LIMIT_S, f"arrived {late * 1000:.0f} ms late"
    sent = svc.wait_status(job["id"], "sent", timeout=10)
    assert sent["attempts"] == 1


def test_short_notice_job_is_not_held_behind_a_later_claim(service, amqp):
    """A job scheduled after a later one was claimed ahead still leaves
    first: the claims are merged in due order."""
    svc = service("--dispatch-lookahead-ms", str(LOOKAHEAD_MS))
    later = svc.schedule(_job(amqp, 1500, body="later"))
    svc.wait_status(later["id"], "publishing", timeout=10)
    sooner = svc.schedule(_job(amqp, 300, body="sooner"))
    got = amqp.wait_for_jobs([sooner["id"], later["id"]], timeout=15)
    assert [m.body for m in amqp.snapshot()] == [b"sooner", b"later"]
    for j in (sooner, later):
        late = got[j["id"]][0].received_at - parse_ts(j["deliver_at"])
        assert -0.001 <= late <= LATE_LIMIT_S, (j["id"], late)


def test_jobs_claimed_ahead_at_stop_are_released_and_delivered_on_time(
        service, amqp):
    svc = service("--dispatch-lookahead-ms", "8000")
    jobs = [svc.schedule(_job(amqp, 5000 + 100 * k, body=f"j{k}"))
            for k in range(5)]
    for j in jobs:
        svc.wait_status(j["id"], "publishing", timeout=10)
    svc.stop()  # graceful: claimed but not due, so handed back
    left = db_count(svc, "SELECT count(*) FROM jobs WHERE status = 1")
    assert left == 0, f"{left} jobs left publishing by a graceful stop"

    # Restart without lookahead: the jobs must be pending again, their
    # attempt not counted, and none published early.
    svc.args = ["--dispatch-lookahead-ms", "0"]
    svc.start()
    for j in jobs:
        now = svc.job(j["id"])
        if time.time() < parse_ts(j["deliver_at"]) - 0.3:
            assert now["status"] == "pending", now
            assert now["attempts"] == 0, now
    got = amqp.wait_for_jobs([j["id"] for j in jobs], timeout=20)
    for j in jobs:
        msg = got[j["id"]][0]
        late = msg.received_at - parse_ts(j["deliver_at"])
        assert late >= -0.001, f"{j['id']} arrived {-late * 1000:.1f} ms early"
        assert late <= LATE_LIMIT_S, f"{j['id']} arrived {late * 1000:.0f} ms late"
        assert len(got[j["id"]]) == 1
    wait_until(lambda: all(svc.job(j["id"])["status"] == "sent" for j in jobs),
               10, "all sent")
    assert all(svc.job(j["id"])["attempts"] == 1 for j in jobs)


def test_cancel_or_reschedule_racing_the_claim_never_publishes_a_changed_job(
        service, amqp):
    """Jobs are claimed ahead from a snapshot, before their claim is written
    (so publishing never waits for a commit). Cancels and reschedules sent
    while the dispatcher claims the same jobs: every change answered 200 must
    stick (a cancelled job never published, a rescheduled one not before
    its new time), every 409 must be a job that is published."""
    lookahead_ms = 600
    svc = service("--dispatch-lookahead-ms", str(lookahead_ms))
    n = 240
    jobs = [svc.schedule(_job(amqp, 900 + 5 * k, body=f"r{k}")) for k in range(n)]
    # Each job is claimed from lookahead_ms before its due time; send its
    # change around that moment, some before and some after.
    far_ms = 120_000

    def change(k):
        j = jobs[k]
        at = parse_ts(j["deliver_at"]) - lookahead_ms / 1000 + ((k % 7) - 3) * 0.02
        d = at - time.time()
        if d > 0:
            time.sleep(d)
        if k % 2 == 0:
            r = svc.delete(f"/jobs/{j['id']}")
        else:
            r = svc.patch(f"/jobs/{j['id']}", {"delay_ms": far_ms})
        assert r.status in (200, 409), (k, r)
        return k, r.status, time.time()

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        results = list(ex.map(change, range(n)))
    refused = [jobs[k]["id"] for k, st, _ in results if st == 409]
    changed = {jobs[k]["id"]: (k, t) for k, st, t in results if st == 200}
    assert changed, "no change landed before its claim: the race was not run"

    got = amqp.wait_for_jobs(refused, timeout=30)
    # Everything refused is published; wait a little longer than the last
    # original due time for anything changed that would leak out anyway.
    last_due = max(parse_ts(j["deliver_at"]) for j in jobs)
    time.sleep(max(0.0, last_due + 1.5 - time.time()))
    seen = {}
    for m in amqp.snapshot():
        seen.setdefault(m.job_id, []).append(m)
    for jid, (k, t) in changed.items():
        assert jid not in seen, (
            f"job {k} was {'cancelled' if k % 2 == 0 else 'rescheduled'} "
            f"(200) and published anyway")
        want = "cancelled" if k % 2 == 0 else "pending"
        assert svc.job(jid)["status"] == want
    for jid in refused:
        assert len(got[jid]) >= 1
        assert svc.wait_status(jid, "sent", timeout=10)["attempts"] == 1
    print(f"race: {len(changed)} changed (200), {len(refused)} refused (409)")
