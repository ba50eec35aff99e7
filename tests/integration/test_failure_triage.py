"""Failed jobs an operator can triage (issue 25), against a real broker,
on both stores: failed_at is set when the attempts run out and null
otherwise (a retry clears it); GET /jobs/{id} keeps the error of each
failed attempt, oldest first, at most the last 10 (lists never carry
them); GET /stats/failures groups the recent failed jobs by exchange and
error, counted, the largest first, each with its latest job. (An error
cut at 512 characters needs a broker answer longer than any RabbitMQ
gives: tests/unit/test_store_triage.c cuts one on both stores.)"""

import uuid

from helpers import assert_error, assert_job_shape, parse_ts, ts_ms

FAST_BACKOFF = ("--backoff-base-ms", "50", "--backoff-cap-ms", "200")


def missing_exchange():
    return f"rmqs-test-missing-{uuid.uuid4().hex}"


def test_failed_at_and_each_attempt_error(service, broker):
    svc = service(*FAST_BACKOFF)
    exchange = broker.declare_exchange()  # no queue bound: 312 NO_ROUTE
    job = svc.schedule({"exchange": exchange, "routing_key": "nobody", "body": "x",
                        "delay_ms": 0, "max_attempts": 3})
    assert job["failed_at"] is None
    failed = svc.wait_status(job["id"], "failed", timeout=30)
    assert_job_shape(failed)
    assert failed["attempts"] == 3
    assert failed["failed_at"] is not None
    errors = failed["attempt_errors"]
    assert [e["attempt"] for e in errors] == [1, 2, 3], errors
    assert all("NO_ROUTE" in e["error"] for e in errors), errors
    ats = [ts_ms(e["at"]) for e in errors]
    assert ats == sorted(ats) and len(set(ats)) == 3, errors
    # the last attempt is when the attempts ran out
    assert ts_ms(failed["failed_at"]) == ats[-1] == ts_ms(failed["updated_at"])
    assert ts_ms(failed["failed_at"]) >= ts_ms(failed["created_at"])

    # lists carry failed_at, never the attempts
    st, _, page = svc.get("/jobs?status=failed")
    assert st == 200 and [j["id"] for j in page["jobs"]] == [job["id"]], page
    assert page["jobs"][0]["failed_at"] == failed["failed_at"]
    assert "attempt_errors" not in page["jobs"][0]

    # a retry clears failed_at and keeps the errors as history
    st, _, retried = svc.post(f"/jobs/{job['id']}/retry", {"delay_ms": 3_600_000})
    assert st == 200 and retried["status"] == "pending", retried
    assert retried["failed_at"] is None and "attempt_errors" not in retried
    again = svc.job(job["id"])
    assert again["failed_at"] is None
    assert again["attempt_errors"] == errors


def test_a_pending_or_sent_job_has_no_failed_at(service, amqp):
    svc = service()
    pending = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                            "body": "later", "delay_ms": 3_600_000})
    sent = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                         "body": "now", "delay_ms": 0})
    sent = svc.wait_status(sent["id"], "sent", timeout=15)
    for j in (svc.job(pending["id"]), sent):
        assert j["failed_at"] is None, j
        assert "attempt_errors" not in j, j  # absent when no attempt failed


def test_only_the_last_ten_attempt_errors_are_kept(service):
    svc = service(*FAST_BACKOFF)
    job = svc.schedule({"exchange": missing_exchange(), "routing_key": "rk",
                        "body": "x", "delay_ms": 0, "max_attempts": 13})
    failed = svc.wait_status(job["id"], "failed", timeout=60)
    assert failed["attempts"] == 13
    errors = failed["attempt_errors"]
    assert [e["attempt"] for e in errors] == list(range(4, 14)), errors
    assert all("404" in e["error"] or "NOT_FOUND" in e["error"] for e in errors), errors
    assert errors[-1]["error"] == failed["last_error"]
    assert ts_ms(errors[-1]["at"]) == ts_ms(failed["failed_at"])


def test_failures_are_grouped_by_exchange_and_error(service, broker):
    svc = service(*FAST_BACKOFF)
    st, _, body = svc.get("/stats/failures")
    assert st == 200 and body == {"window_jobs": 0, "groups": []}, body

    unroutable = broker.declare_exchange()
    missing = missing_exchange()
    made = ([svc.schedule({"exchange": unroutable, "routing_key": f"rk{i}", "body": "x",
                           "delay_ms": 0, "max_attempts": 1})["id"] for i in range(3)]
            + [svc.schedule({"exchange": missing, "routing_key": "rk", "body": "x",
                             "delay_ms": 0, "max_attempts": 1})["id"] for _ in range(2)])
    failed = {i: svc.wait_status(i, "failed", timeout=30) for i in made}

    st, _, body = svc.get("/stats/failures")
    assert st == 200, body
    assert body["window_jobs"] == 5, body
    groups = body["groups"]
    assert [(g["exchange"], g["count"]) for g in groups] == [(unroutable, 3), (missing, 2)], groups
    assert "NO_ROUTE" in groups[0]["error"], groups
    assert "NOT_FOUND" in groups[1]["error"] or "404" in groups[1]["error"], groups
    for g, ids in ((groups[0], made[:3]), (groups[1], made[3:])):
        latest = max(ids, key=lambda i: (ts_ms(failed[i]["failed_at"])))
        assert ts_ms(g["last_failed_at"]) == ts_ms(failed[latest]["failed_at"]), g
        assert g["example_job_id"] in ids, g
        assert failed[g["example_job_id"]]["failed_at"] == g["last_failed_at"], g
        parse_ts(g["last_failed_at"])

    # a retried job leaves the failures (it is no longer failed)
    st, _, _ = svc.post(f"/jobs/{made[0]}/retry", {"delay_ms": 3_600_000})
    assert st == 200
    st, _, body = svc.get("/stats/failures")
    assert body["window_jobs"] == 4 and body["groups"][0]["count"] == 2, body

    assert_error(svc.get("/stats/failures?window=1h"), 400, "invalid_argument",
                 field="window")
    st, _, body = svc.post("/stats/failures", {})
    assert st == 405, body
