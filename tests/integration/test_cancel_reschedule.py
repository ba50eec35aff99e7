"""A cancelled job never arrives; a rescheduled job arrives at its new time."""

import time
import uuid

from helpers import assert_error, assert_job_shape, format_ts, parse_ts, ts_ms

LATE_LIMIT_S = 1.0  # generous: ASan build on a shared machine


def _job(amqp, **kw):
    req = {"exchange": amqp.exchange, "routing_key": amqp.routing_key, "body": "x"}
    req.update(kw)
    return req


def test_cancelled_job_never_arrives(service, amqp):
    svc = service()
    # Far enough ahead that the cancel comes before the dispatcher claims A
    # (--dispatch-lookahead-ms, 500 ms before its time).
    a = svc.schedule(_job(amqp, body="A", delay_ms=2000))
    b = svc.schedule(_job(amqp, body="B (sentinel)", delay_ms=2500))

    status, _, cancelled = svc.delete(f"/jobs/{a['id']}")
    assert status == 200, cancelled
    assert_job_shape(cancelled)
    assert cancelled["id"] == a["id"]
    assert cancelled["status"] == "cancelled"
    assert cancelled["next_attempt_at"] is None
    assert cancelled["sent_at"] is None

    # cancelling again is no error and changes nothing
    status, _, again = svc.delete(f"/jobs/{a['id']}")
    assert status == 200, again
    assert again["status"] == "cancelled"

    # The sentinel, due after A, arrives: A had its chance and did not come.
    got = amqp.wait_for_jobs([b["id"]], timeout=15)
    assert a["id"] not in got, "a cancelled job was published"
    assert [m.body for m in amqp.snapshot()] == [b"B (sentinel)"]
    assert svc.job(a["id"])["status"] == "cancelled"

    # a sent job cannot be cancelled
    svc.wait_status(b["id"], "sent", timeout=10)
    assert_error(svc.delete(f"/jobs/{b['id']}"), 409, "conflict")
    assert svc.job(b["id"])["status"] == "sent"


def test_delete_unknown_job_is_404(service):
    svc = service()
    assert_error(svc.delete(f"/jobs/{uuid.uuid4()}"), 404, "not_found")
    assert_error(svc.delete("/jobs/not-a-uuid"), 404, "not_found")


def test_cancelled_job_is_listed_as_cancelled(service):
    svc = service()
    job = svc.schedule({"exchange": "", "routing_key": "q", "body": "x",
                        "delay_ms": 60_000})
    assert svc.delete(f"/jobs/{job['id']}").status == 200
    listed, _ = svc.list_all(status="cancelled")
    assert [j["id"] for j in listed] == [job["id"]]
    assert svc.list_all(status="pending")[0] == []


def test_rescheduled_sooner_arrives_at_new_time(service, amqp):
    svc = service()
    job = svc.schedule(_job(amqp, delay_ms=10_000))
    t0 = time.time()
    status, _, moved = svc.patch(f"/jobs/{job['id']}", {"delay_ms": 500})
    assert status == 200, moved
    assert_job_shape(moved)
    assert moved["id"] == job["id"]
    assert moved["status"] == "pending"
    new_at = parse_ts(moved["deliver_at"])
    assert t0 + 0.5 - 0.01 <= new_at <= time.time() + 0.5 + 0.01, moved["deliver_at"]
    assert moved["next_attempt_at"] == moved["deliver_at"]

    msg = amqp.wait_for_jobs([job["id"]], timeout=10)[job["id"]][0]
    late = msg.received_at - new_at
    assert late >= -0.001, f"arrived {-late * 1000:.1f} ms before the new deliver_at"
    assert late <= LATE_LIMIT_S, f"arrived {late * 1000:.0f} ms after the new deliver_at"
    assert msg.headers["x-scheduled-at"] == moved["deliver_at"]
    assert msg.headers["x-delay"] == -500

    # a sent job cannot be rescheduled
    svc.wait_status(job["id"], "sent", timeout=10)
    assert_error(svc.patch(f"/jobs/{job['id']}", {"delay_ms": 1000}), 409, "conflict")


def test_rescheduled_later_does_not_arrive_at_old_time(service, amqp):
    svc = service()
    # Moved long before the dispatcher would claim it (500 ms ahead).
    job = svc.schedule(_job(amqp, body="moved", delay_ms=2000))
    new_at_text = format_ts(time.time() + 4.0, offset_minutes=120)
    status, _, moved = svc.patch(f"/jobs/{job['id']}", {"deliver_at": new_at_text})
    assert status == 200, moved
    assert moved["deliver_at"].endswith("Z")
    assert ts_ms(moved["deliver_at"]) == ts_ms(new_at_text)
    # a sentinel due after the old time but before the new one
    sentinel = svc.schedule(_job(amqp, body="sentinel", delay_ms=2600))
    amqp.wait_for_jobs([sentinel["id"]], timeout=10)
    assert job["id"] not in amqp.by_job(), "the job arrived at its old time"

    msg = amqp.wait_for_jobs([job["id"]], timeout=10)[job["id"]][0]
    assert msg.received_at >= parse_ts(moved["deliver_at"]) - 0.001
    assert len(amqp.by_job()[job["id"]]) == 1


def test_reschedule_errors(service):
    svc = service()
    job = svc.schedule({"exchange": "", "routing_key": "q", "body": "x",
                        "delay_ms": 60_000})
    assert_error(svc.patch(f"/jobs/{uuid.uuid4()}", {"delay_ms": 1}), 404, "not_found")
    assert_error(svc.patch(f"/jobs/{job['id']}", {"delay_ms": 1, "deliver_at":
                                                  format_ts(time.time())}),
                 400, "invalid_argument")
    assert_error(svc.patch(f"/jobs/{job['id']}", {}), 400, "invalid_argument")
    assert_error(svc.patch(f"/jobs/{job['id']}", {"delay_ms": -1}), 400,
                 "invalid_argument", "delay_ms")
    assert_error(svc.patch(f"/jobs/{job['id']}", {"delay_ms": 1, "exchange": "x"}),
                 400, "invalid_argument", "exchange")
    assert_error(svc.patch(f"/jobs/{job['id']}", {"deliver_at": "tomorrow"}), 400,
                 "invalid_argument", "deliver_at")
    assert_error(svc.patch(f"/jobs/{job['id']}", '{"delay_ms": 1}',
                           headers={"Content-Type": "text/plain"}),
                 415, "unsupported_media_type")
    # none of that changed the job
    assert svc.job(job["id"]) == job

    assert svc.delete(f"/jobs/{job['id']}").status == 200
    assert_error(svc.patch(f"/jobs/{job['id']}", {"delay_ms": 1}), 409, "conflict")
