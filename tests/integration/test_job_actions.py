"""Job actions: run now (POST /jobs/{id}/run), retry of a failed job (POST
/jobs/{id}/retry) and bulk cancel / retry over a filter (POST /jobs/bulk,
GET /jobs/bulk/{id}), against the real service, broker and store."""

import time
import uuid

from helpers import Consumer, assert_error, assert_job_shape, env, parse_ts, wait_until

FAST_BACKOFF = ("--backoff-base-ms", "50", "--backoff-cap-ms", "200")


def _job(amqp, **kw):
    req = {"exchange": amqp.exchange, "routing_key": amqp.routing_key, "body": "x"}
    req.update(kw)
    return req


def test_run_now_is_delivered_at_once(service, amqp):
    svc = service()
    job = svc.schedule(_job(amqp, body="later", delay_ms=3_600_000))
    t0 = time.time()
    status, _, ran = svc.post(f"/jobs/{job['id']}/run")
    assert status == 200, ran
    assert_job_shape(ran)
    assert ran["id"] == job["id"]
    assert ran["status"] == "pending"
    assert ran["attempts"] == 0
    assert t0 - 0.01 <= parse_ts(ran["deliver_at"]) <= time.time() + 0.01, ran
    # an hour early: delivered now, not in an hour (nor at the next poll)
    msg = amqp.wait_for_jobs([job["id"]], timeout=5)[job["id"]][0]
    assert msg.body == b"later"
    assert msg.received_at - t0 < 2.0, f"{msg.received_at - t0:.3f} s after the run"
    sent = svc.wait_status(job["id"], "sent", timeout=10)
    assert sent["attempts"] == 1


def test_run_now_of_a_job_not_pending_is_409_and_changes_nothing(service, amqp):
    svc = service()
    sent = svc.schedule(_job(amqp, delay_ms=0))
    svc.wait_status(sent["id"], "sent", timeout=10)
    cancelled = svc.schedule(_job(amqp, delay_ms=60_000))
    assert svc.delete(f"/jobs/{cancelled['id']}").status == 200
    for job_id, state in ((sent["id"], "sent"), (cancelled["id"], "cancelled")):
        before = svc.job(job_id)
        r = svc.post(f"/jobs/{job_id}/run")
        assert_error(r, 409, "conflict")
        assert state in r.body["error"]["message"], r.body
        assert svc.job(job_id) == before
    assert_error(svc.post(f"/jobs/{uuid.uuid4()}/run"), 404, "not_found")
    assert_error(svc.post("/jobs/not-a-uuid/run"), 404, "not_found")
    assert len(amqp.snapshot()) == 1


def test_retry_of_a_job_failed_by_a_missing_exchange(service):
    svc = service(*FAST_BACKOFF)
    # The consumer's exchange does not exist until it starts.
    consumer = Consumer(env("RMQS_TEST_AMQP_URL"))
    job = svc.schedule({"exchange": consumer.exchange,
                        "routing_key": consumer.routing_key, "body": "again",
                        "delay_ms": 0, "max_attempts": 2})
    failed = svc.wait_status(job["id"], "failed", timeout=30)
    assert failed["attempts"] == 2
    error = failed["last_error"]
    assert "404" in error or "NOT_FOUND" in error, error

    consumer.start()  # declares the exchange, its queue and the binding
    try:
        status, _, retried = svc.post(f"/jobs/{job['id']}/retry")
        assert status == 200, retried
        assert_job_shape(retried)
        assert retried["status"] == "pending"
        assert retried["attempts"] == 0
        assert retried["last_error"] == error  # kept for history
        msg = consumer.wait_for_jobs([job["id"]], timeout=10)[job["id"]][0]
        assert msg.body == b"again"
        sent = svc.wait_status(job["id"], "sent", timeout=10)
        assert sent["attempts"] == 1  # counted from 0 again
    finally:
        consumer.stop()


def test_retry_at_a_later_time_and_its_errors(service, broker):
    svc = service(*FAST_BACKOFF)
    exchange = broker.declare_exchange()  # no queue: NO_ROUTE
    job = svc.schedule({"exchange": exchange, "routing_key": "none", "body": "x",
                        "delay_ms": 0, "max_attempts": 1})
    failed = svc.wait_status(job["id"], "failed", timeout=30)

    # bad bodies are 400 and change nothing
    for body in ({"delay_ms": -1}, {"delay_ms": 1, "deliver_at": "2037-01-01T00:00:00Z"},
                 {"when": "now"}, "[1]"):
        assert_error(svc.post(f"/jobs/{job['id']}/retry", body), 400,
                     "invalid_argument")
    assert svc.job(job["id"]) == failed

    t0 = time.time()
    status, _, retried = svc.post(f"/jobs/{job['id']}/retry", {"delay_ms": 60_000})
    assert status == 200, retried
    assert retried["status"] == "pending" and retried["attempts"] == 0
    assert t0 + 60 - 0.01 <= parse_ts(retried["deliver_at"]) <= time.time() + 60.01

    # a pending job cannot be retried: 409 naming its status, nothing changed
    r = svc.post(f"/jobs/{job['id']}/retry", {})
    assert_error(r, 409, "conflict")
    assert "pending" in r.body["error"]["message"], r.body
    # GET /jobs/{id} adds the errors of the failed attempts (kept by the
    # retry), which no other answer carries
    now = svc.job(job["id"])
    assert now.pop("attempt_errors") == failed["attempt_errors"]
    assert now == retried
    assert_error(svc.post(f"/jobs/{uuid.uuid4()}/retry"), 404, "not_found")
    # the counts moved with it: one pending, no failed
    counts = {j["status"] for j in svc.list_all()[0]}
    assert counts == {"pending"}


# ---- bulk actions -----------------------------------------------------------

def _batch(svc, jobs):
    for i in range(0, len(jobs), 1000):
        status, _, body = svc.post("/schedule/batch", jobs[i:i + 1000],
                                   headers={"Prefer": "return=minimal"})
        assert status == 201, body


def _count(svc, query):
    """Jobs GET /jobs?query lists (following the cursors)."""
    n, after = 0, None
    while True:
        q = f"/jobs?{query}&limit=1000" + (f"&after={after}" if after else "")
        status, _, body = svc.get(q)
        assert status == 200, body
        n += len(body["jobs"])
        after = body.get("next")
        if not after:
            return n


def _wait_bulk(svc, location, timeout=120):
    def finished():
        status, _, op = svc.get(location)
        assert status == 200, op
        return op if op["state"] != "running" else None
    return wait_until(finished, timeout, f"{location} to finish", interval=0.05)


def test_bulk_cancel_of_a_filtered_set_while_the_dispatcher_delivers(service, amqp):
    n_target, n_other = 10_000, 2_000
    # a pause between pages, so its progress can be seen and due jobs are
    # delivered while it runs
    svc = service("--bulk-pause-ms", "100")
    far = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
           "body": "x", "delay_ms": 3_600_000}
    _batch(svc, [dict(far, properties={"message_id": "bulk-target"})] * n_target)
    _batch(svc, [dict(far, properties={"message_id": "bulk-other"})] * n_other)
    sent = svc.schedule(dict(far, delay_ms=0, properties={"message_id": "bulk-target"}))
    svc.wait_status(sent["id"], "sent", timeout=10)  # matches, not pending: skipped

    status, headers, op = svc.post("/jobs/bulk", {"action": "cancel",
                                                  "filter": {"message_id": "bulk-target"}})
    assert status == 202, op
    location = headers["Location"]
    assert location == f"/jobs/bulk/{op['id']}"
    assert op["action"] == "cancel" and op["filter"] == {"message_id": "bulk-target"}
    assert op["state"] == "running" and op["finished_at"] is None

    # one at a time: a second is refused while it runs, and changes nothing
    second = svc.post("/jobs/bulk", {"action": "cancel", "all": True})
    assert_error(second, 409, "conflict")
    assert op["id"] in second.body["error"]["message"]

    # the dispatcher keeps delivering while it runs
    during = [svc.schedule(dict(far, delay_ms=0, body=f"during {i}"))["id"]
              for i in range(3)]
    got = amqp.wait_for_jobs(during, timeout=10)
    # progress is reported while it runs
    seen = []

    def progressed():
        status, _, now = svc.get(location)
        assert status == 200, now
        seen.append(now)
        return 0 < now["matched_so_far"] < n_target + 1 and now["state"] == "running"
    wait_until(progressed, 30, "progress of the bulk cancel")
    running = seen[-1]
    assert running["done"] + running["skipped"] + running["errors"] == running["matched_so_far"]

    done = _wait_bulk(svc, location)
    assert done["state"] == "done", done
    assert done["matched_so_far"] == n_target + 1
    assert done["done"] == n_target
    assert done["skipped"] == 1 and done["errors"] == 0
    finished_at = parse_ts(done["finished_at"])
    assert all(got[j][0].received_at < finished_at for j in during), \
        "due jobs waited for the bulk action"
    assert parse_ts(done["started_at"]) <= finished_at

    assert _count(svc, "message_id=bulk-target&status=cancelled") == n_target
    assert _count(svc, "message_id=bulk-target&status=pending") == 0
    assert _count(svc, "message_id=bulk-other&status=pending") == n_other
    assert svc.job(sent["id"])["status"] == "sent"
    # the status counts moved in the same transactions
    status, _, stats = svc.get("/stats")
    assert stats["totals"]["jobs"]["cancelled"] == n_target
    assert stats["totals"]["jobs"]["pending"] == n_other
    assert stats["totals"]["cancelled"] == n_target


def test_bulk_retry_of_failed_jobs(service):
    svc = service(*FAST_BACKOFF)
    consumer = Consumer(env("RMQS_TEST_AMQP_URL"))  # its exchange: not yet
    tag = uuid.uuid4().hex[:8]
    base = {"exchange": consumer.exchange, "routing_key": consumer.routing_key,
            "body": "b", "max_attempts": 1, "properties": {"message_id": tag}}
    failed = [svc.schedule(dict(base, delay_ms=0))["id"] for _ in range(3)]
    pending = svc.schedule(dict(base, delay_ms=3_600_000))["id"]
    for job_id in failed:
        svc.wait_status(job_id, "failed", timeout=30)
    consumer.start()
    try:
        status, headers, op = svc.post("/jobs/bulk", {"action": "retry",
                                                      "filter": {"message_id": tag}})
        assert status == 202, op
        done = _wait_bulk(svc, headers["Location"])
        assert (done["state"], done["matched_so_far"], done["done"],
                done["skipped"], done["errors"]) == ("done", 4, 3, 1, 0), done
        consumer.wait_for_jobs(failed, timeout=10)
        for job_id in failed:
            sent = svc.wait_status(job_id, "sent", timeout=10)
            assert sent["attempts"] == 1
        assert svc.job(pending)["status"] == "pending"
        assert svc.job(pending)["attempts"] == 0
    finally:
        consumer.stop()


def test_bulk_refusals_change_nothing(service):
    svc = service()
    job = svc.schedule({"exchange": "", "routing_key": "q", "body": "x",
                        "delay_ms": 3_600_000})
    # an empty filter cancels nothing unless "all": true says so
    for body in ({"action": "cancel"}, {"action": "cancel", "filter": {}},
                 {"action": "cancel", "filter": {}, "all": False}):
        assert_error(svc.post("/jobs/bulk", body), 400, "invalid_argument", "filter")
    for body, field in (({"action": "delete", "filter": {"status": "pending"}}, "action"),
                        ({"filter": {"status": "pending"}}, "action"),
                        ({"action": "cancel", "filter": {"status": "nope"}}, "filter.status"),
                        ({"action": "cancel", "filter": {"colour": "red"}}, "filter.colour"),
                        ({"action": "cancel", "filter": {"status": 1}}, "filter.status"),
                        ({"action": "cancel", "filter": "status=pending"}, "filter"),
                        ({"action": "cancel", "all": "yes"}, "all"),
                        ({"action": "cancel", "filter": {}, "extra": 1}, "extra")):
        assert_error(svc.post("/jobs/bulk", body), 400, "invalid_argument", field)
    assert_error(svc.post("/jobs/bulk", "[]"), 400, "invalid_argument")
    assert svc.job(job["id"])["status"] == "pending"
    assert_error(svc.get(f"/jobs/bulk/{uuid.uuid4()}"), 404, "not_found")

    # with "all": true it is every pending job
    status, headers, op = svc.post("/jobs/bulk", {"action": "cancel", "all": True})
    assert status == 202, op
    done = _wait_bulk(svc, headers["Location"])
    assert (done["done"], done["skipped"]) == (1, 0), done
    assert svc.job(job["id"])["status"] == "cancelled"
