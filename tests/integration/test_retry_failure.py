"""A job the broker will not take is retried with backoff and ends failed,
with the broker's reason; the service keeps delivering other jobs."""

import uuid

from helpers import assert_error, assert_job_shape, parse_ts, wait_until

FAST_BACKOFF = ("--backoff-base-ms", "50", "--backoff-cap-ms", "200")


def test_unroutable_job_fails_with_no_route_after_max_attempts(service, broker, amqp):
    svc = service(*FAST_BACKOFF)
    exchange = broker.declare_exchange()  # no queue bound
    job = svc.schedule({"exchange": exchange, "routing_key": "nobody-listens",
                        "body": "lost", "delay_ms": 0, "max_attempts": 3})
    assert job["max_attempts"] == 3
    failed = svc.wait_status(job["id"], "failed", timeout=30)
    assert_job_shape(failed)
    assert failed["attempts"] == 3
    assert "NO_ROUTE" in failed["last_error"], failed["last_error"]
    assert failed["sent_at"] is None
    assert failed["next_attempt_at"] is None
    # a failed job is final: no cancel, no reschedule
    assert_error(svc.delete(f"/jobs/{job['id']}"), 409, "conflict")
    assert_error(svc.patch(f"/jobs/{job['id']}", {"delay_ms": 0}), 409, "conflict")

    # the service still delivers other jobs
    ok = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                       "body": "fine", "delay_ms": 0})
    amqp.wait_for_jobs([ok["id"]], timeout=10)
    svc.wait_status(ok["id"], "sent", timeout=10)
    assert svc.job(job["id"])["attempts"] == 3  # no attempt after failing


def test_missing_exchange_fails_with_not_found(service, amqp):
    svc = service(*FAST_BACKOFF)
    job = svc.schedule({"exchange": f"rmqs-test-missing-{uuid.uuid4().hex}",
                        "routing_key": "rk", "body": "lost", "delay_ms": 0,
                        "max_attempts": 3})
    failed = svc.wait_status(job["id"], "failed", timeout=30)
    assert failed["attempts"] == 3
    err = failed["last_error"]
    assert "404" in err or "NOT_FOUND" in err, err

    # The broker closed the channel each time: the service must recover it.
    ok = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                       "body": "fine", "delay_ms": 0})
    amqp.wait_for_jobs([ok["id"]], timeout=10)
    svc.wait_status(ok["id"], "sent", timeout=10)


def test_configured_max_attempts_is_the_default(service, broker):
    svc = service("--max-attempts", "2", *FAST_BACKOFF)
    exchange = broker.declare_exchange()
    job = svc.schedule({"exchange": exchange, "routing_key": "none",
                        "body": "x", "delay_ms": 0})
    assert job["max_attempts"] == 2
    failed = svc.wait_status(job["id"], "failed", timeout=30)
    assert failed["attempts"] == 2
    assert "NO_ROUTE" in failed["last_error"]


def test_retry_backs_off_and_succeeds_once_a_queue_is_bound(service, amqp):
    svc = service("--backoff-base-ms", "400", "--backoff-cap-ms", "800")
    later_key = f"later-{uuid.uuid4().hex[:8]}"  # nothing bound to it yet
    job = svc.schedule({"exchange": amqp.exchange, "routing_key": later_key,
                        "body": "eventually", "delay_ms": 0, "max_attempts": 50})

    def first_failure():
        j = svc.job(job["id"])
        return j if j["attempts"] >= 1 and j["status"] == "pending" else None
    pending = wait_until(first_failure, 15, "a failed first attempt")
    assert "NO_ROUTE" in pending["last_error"]
    # it waits for its backoff before the next attempt
    assert pending["next_attempt_at"] is not None
    assert parse_ts(pending["next_attempt_at"]) > parse_ts(pending["deliver_at"])

    amqp.bind(later_key)
    msgs = amqp.wait_for_jobs([job["id"]], timeout=15)[job["id"]]
    assert len(msgs) == 1
    assert msgs[0].body == b"eventually"
    sent = svc.wait_status(job["id"], "sent", timeout=10)
    assert sent["attempts"] >= 1
    assert sent["next_attempt_at"] is None
