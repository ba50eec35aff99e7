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
    assert svc.job(job["id"]) == retried
    assert_error(svc.post(f"/jobs/{uuid.uuid4()}/retry"), 404, "not_found")
    # the counts moved with it: one pending, no failed
    counts = {j["status"] for j in svc.list_all()[0]}
    assert counts == {"pending"}
