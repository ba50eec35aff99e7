"""Every call of the client once, against the real service, and the typed
error of each code the service can be made to answer here."""

import datetime
import os
import re
import time

import pytest

import rmq_scheduler as rmqs
from rmq_scheduler import (Client, ConflictError, CrossOriginError,
                           ForbiddenError, HostNotAllowedError,
                           InvalidArgumentError, MethodNotAllowedError,
                           NotFoundError, PayloadTooLargeError, RmqsError,
                           Retry, StorageFullError, UiReadOnlyError,
                           UnauthorizedError, UnsupportedMediaTypeError)
from service import Service, job

MISSING_ID = "01936f3a-5b1c-7d2e-9f00-1a2b3c4d5e6f"


@pytest.fixture(scope="module")
def svc():
    s = Service(args=["--allow-exchanges", "orders,billing",
                      "--max-body-bytes", "65536"]).start()
    yield s
    s.destroy()


@pytest.fixture(scope="module")
def c(svc):
    with Client(svc.url) as client:
        yield client


def test_schedule_returns_minimal_and_get_reads_the_job(c):
    m = c.schedule(job(headers={"tenant": "acme"}))
    assert sorted(m) == ["deliver_at", "id", "status"]
    assert m["status"] == "pending"
    j = c.get(m["id"])
    assert j["id"] == m["id"]
    assert j["exchange"] == "orders"
    assert j["headers"] == {"tenant": "acme"}
    assert j["body"] == {"n": 1}
    f = c.schedule_async(job())
    assert f.result(10)["status"] == "pending"


def test_schedule_one_idempotency_key(c):
    key = f"py-client-{time.time()}"
    a = c.schedule_one(job(), idempotency_key=key)
    assert a["source"] == "http"
    b = c.schedule_one(job(), idempotency_key=key)
    assert b["id"] == a["id"]
    m = c.schedule_one(job(), minimal=True)
    assert sorted(m) == ["deliver_at", "id", "status"]
    with pytest.raises(ConflictError) as ei:
        c.schedule_one(job(body="other"), idempotency_key=key)
    e = ei.value
    assert isinstance(e, RmqsError)
    assert (e.status, e.code, e.field) == (409, "conflict", "Idempotency-Key")


def test_item_keys_repeat_returns_the_job_conflict_for_that_caller_only(c):
    key = f"py-item-{time.time()}"
    a = c.schedule(job(routing_key="ik"), idempotency_key=key)
    b = c.schedule(job(routing_key="ik"), idempotency_key=key)
    assert b["id"] == a["id"]
    f1 = c.schedule_async(job(routing_key="ik", body="other"),
                          idempotency_key=key)
    f2 = c.schedule_async(job(routing_key="ik"))
    with pytest.raises(ConflictError) as ei:
        f1.result(10)
    assert ei.value.field == "idempotency_key"
    assert f2.result(10)["status"] == "pending"
    assert c.count(routing_key="ik") == {"count": 2, "capped": False}
    many = c.schedule_many([job(routing_key="ik2")],
                           idempotency_keys=[key + "-m"])
    again = c.schedule_many([job(routing_key="ik2")],
                            idempotency_keys=[key + "-m"])
    assert again[0]["id"] == many[0]["id"]


def test_schedule_many_chunks_and_keeps_order(svc):
    with Client(svc.url, max_batch=7) as small:
        jobs = [job(body={"i": i}) for i in range(30)]
        out = small.schedule_many(jobs)
        assert len(out) == 30
        full = small.schedule_many(jobs[:2], minimal=False)
        assert full[1]["body"] == {"i": 1}
        assert small.get(out[0]["id"])["body"] == {"i": 0}
        assert small.get(out[29]["id"])["body"] == {"i": 29}
        jobs[17] = job(delay_ms=-1)
        with pytest.raises(InvalidArgumentError) as ei:
            small.schedule_many(jobs)
        assert [x["index"] for x in ei.value.errors] == [17]
        assert len(ei.value.scheduled) == 14  # chunks 0-6 and 7-13
        jobs[17] = job(exchange="payments")
        with pytest.raises(ForbiddenError) as ei:
            small.schedule_many(jobs)
        assert ei.value.field == "jobs[17].exchange"


def test_list_follows_next_with_filters_and_order_and_count(c):
    tag = f"lst{time.time_ns()}"
    c.schedule_many([job(routing_key=tag, delay_ms=1000000 + i)
                     for i in range(25)])
    seen = list(c.list(routing_key=tag, status="pending", order="-due",
                       page_size=10))
    assert len(seen) == 25
    assert seen[0]["deliver_at"] >= seen[24]["deliver_at"]
    assert list(c.list({"routing_key": tag}, page_size=100)) != []
    assert c.count(routing_key=tag) == {"count": 25, "capped": False}
    assert c.count({"routing_key": tag}, max=5)["capped"] is True
    with pytest.raises(InvalidArgumentError) as ei:
        c.count(q="ab")
    assert ei.value.field == "q"


def test_reschedule_run_now_cancel_retry(c):
    m = c.schedule(job())
    at = (datetime.datetime.now(datetime.timezone.utc)
          + datetime.timedelta(hours=2)).replace(microsecond=123000)
    r = c.reschedule(m["id"], deliver_at=at)
    assert r["deliver_at"] == at.strftime("%Y-%m-%dT%H:%M:%S.123Z")
    r2 = c.reschedule(m["id"], delay_ms=9000000)
    assert r2["deliver_at"] > r["deliver_at"]
    # The broker is down here: a job run now stays pending (or publishing).
    run = c.run_now(m["id"])
    assert run["deliver_at"] < r["deliver_at"]
    m2 = c.schedule(job())
    with pytest.raises(ConflictError, match="pending"):
        c.retry(m2["id"])
    with pytest.raises(ConflictError):
        c.retry(m2["id"], delay_ms=1000)
    assert c.cancel(m2["id"])["status"] == "cancelled"
    assert c.cancel(m2["id"])["status"] == "cancelled"
    with pytest.raises(ConflictError):
        c.reschedule(m2["id"], delay_ms=1)
    with pytest.raises(NotFoundError) as ei:
        c.get(MISSING_ID)
    assert ei.value.status == 404


def test_bulk_bulk_status_wait_bulk(c):
    tag = f"blk{time.time_ns()}"
    c.schedule_many([job(routing_key=tag) for _ in range(40)])
    with pytest.raises(InvalidArgumentError):
        c.bulk("cancel")
    op = c.bulk("cancel", filter={"routing_key": tag, "status": "pending"})
    assert op["id"]
    assert c.bulk_status(op["id"])["id"] == op["id"]
    seen = []
    done = c.wait_bulk(op["id"], on_progress=lambda o: seen.append(o["state"]),
                       interval=0.02)
    assert done["state"] == "done"
    assert done["done"] == 40
    assert seen
    assert c.count(routing_key=tag, status="cancelled") == {
        "count": 40, "capped": False}
    with pytest.raises(NotFoundError):
        c.bulk_status("01936f3c-1111-7a00-8b00-000000000009")


def test_schedules(c):
    spec = {"cron": "0 3 * * *", "timezone": "UTC",
            "job": {"exchange": "orders", "routing_key": "digest", "body": "d"}}
    s = c.put_schedule("py-digest", spec)
    assert s["name"] == "py-digest"
    assert c.put_schedule("py-digest", spec)["generation"] == s["generation"]
    c.put_schedule("py-digest-2", {"every_ms": 3600000, "job": spec["job"]})
    assert len(c.get_schedule("py-digest", count=3)["next_runs"]) == 3
    names = [x["name"] for x in c.list_schedules(page_size=1)]
    assert names == ["py-digest", "py-digest-2"]
    assert c.patch_schedule("py-digest", {"paused": True})["paused"] is True
    run = c.run_schedule("py-digest", idempotency_key="py-run-1")
    assert run["source"] == "schedule"
    assert c.run_schedule("py-digest", idempotency_key="py-run-1")["id"] == run["id"]
    with pytest.raises(InvalidArgumentError) as ei:
        c.put_schedule("py-bad", {"cron": "0 0 32 * *", "job": spec["job"]})
    assert ei.value.field == "cron"
    with pytest.raises(InvalidArgumentError) as ei:
        c.put_schedule("bad name", spec)
    assert ei.value.field == "name"
    assert c.delete_schedule("py-digest") is None
    c.delete_schedule("py-digest-2")
    with pytest.raises(NotFoundError):
        c.get_schedule("py-digest")


def test_limits(c):
    lim = c.put_limit("py-limit", {"match": {"exchange": "orders"},
                                   "rate_per_s": 500, "burst": 50})
    assert lim["generation"] == 1
    assert c.get_limit("py-limit")["rate_per_s"] == 500
    assert [x["name"] for x in c.list_limits()] == ["py-limit"]
    assert c.patch_limit("py-limit", {"rate_per_s": 200})["rate_per_s"] == 200
    with pytest.raises(InvalidArgumentError) as ei:
        c.put_limit("py-limit", {"rate_per_s": 0})
    assert ei.value.field == "rate_per_s"
    assert c.delete_limit("py-limit") is None
    with pytest.raises(NotFoundError):
        c.get_limit("py-limit")
    with pytest.raises(NotFoundError):
        c.delete_limit("py-limit")


def test_stats_status_failures(c):
    assert isinstance(c.stats(window="15m")["samples"], list)
    with pytest.raises(InvalidArgumentError):
        c.stats(window="forever")
    s = c.status()
    real = bool(os.environ.get("RMQS_TEST_AMQP_URL"))
    assert s["broker"]["state"] == ("up" if real else "down")
    assert s["database"]["state"] == "up"
    assert isinstance(c.failures()["groups"], list)


@pytest.mark.skipif(not os.environ.get("RMQS_TEST_AMQP_URL"),
                    reason="no RabbitMQ (RMQS_TEST_AMQP_URL)")
def test_a_due_job_is_published_and_get_shows_what_the_broker_said(c):
    # The exchange does not exist on the node: the broker closes the
    # channel, and the one attempt ends the job as failed, with its reason.
    j = c.schedule({"exchange": "orders", "routing_key": "py.due",
                    "body": {}, "delay_ms": 0, "max_attempts": 1})
    end = time.monotonic() + 30
    while (g := c.get(j["id"]))["status"] != "failed":
        assert time.monotonic() < end, g
        time.sleep(0.05)
    assert g["attempts"] == 1
    assert "orders" in g["last_error"]


def test_every_documented_error_code_has_its_class():
    codes = ["invalid_argument", "unauthorized", "forbidden", "ui_read_only",
             "cross_origin", "host_not_allowed", "not_found",
             "method_not_allowed", "conflict", "payload_too_large",
             "unsupported_media_type", "unavailable", "storage_full",
             "search_timeout", "internal"]
    assert sorted(rmqs.ERROR_CLASSES) == sorted(codes)
    for code in codes:
        cls = rmqs.ERROR_CLASSES[code]
        name = re.sub(r"(?:^|_)(.)", lambda m: m.group(1).upper(), code) + "Error"
        assert cls.__name__ == name
        assert getattr(rmqs, name) is cls
        assert isinstance(cls("x"), RmqsError)
    assert issubclass(rmqs.TimeoutError, TimeoutError)
    assert issubclass(rmqs.ConnectionError, ConnectionError)


def test_typed_errors_the_service_answers(svc, c):
    with pytest.raises(ForbiddenError) as ei:
        c.schedule_one(job(exchange="payments"))
    assert ei.value.field == "exchange"
    with pytest.raises(MethodNotAllowedError) as ei:
        c.request("PUT", "/jobs", body={})
    assert ei.value.status == 405
    with pytest.raises(PayloadTooLargeError) as ei:
        c.schedule_one(job(body="x" * 70000))
    assert ei.value.status == 413
    with pytest.raises(UnsupportedMediaTypeError):
        c.request("POST", "/schedule", raw_body="exchange=orders",
                  headers={"Content-Type": "text/plain"})
    with Client(svc.url, headers={"Origin": "https://evil.example"}) as browser:
        with pytest.raises(CrossOriginError) as ei:
            browser.cancel(MISSING_ID)
        assert not isinstance(ei.value, ForbiddenError)
        assert ei.value.status == 403
    with Client(svc.url, headers={"Origin": svc.url}) as same_origin:
        with pytest.raises(UiReadOnlyError):
            same_origin.schedule(job())
    with Client(svc.url, headers={"Host": "rebind.example"}) as rebinding:
        with pytest.raises(HostNotAllowedError):
            rebinding.get("x")


def test_unauthorized_without_the_token_bearer_with_it():
    s = Service(token="py-client-token-0123456789").start()
    try:
        with Client(s.url) as none:
            with pytest.raises(UnauthorizedError) as ei:
                none.status()
            assert ei.value.status == 401
            with pytest.raises(UnauthorizedError):
                none.schedule(job())
        with Client(s.url, token="py-client-token-0123456789") as ok:
            m = ok.schedule(job())
            assert ok.get(m["id"])["id"] == m["id"]
    finally:
        s.destroy()


@pytest.mark.skipif(os.environ.get("RMQS_TEST_STORE") == "postgres",
                    reason="SQLite only: --min-free-bytes watches the disk "
                    "of a SQLite file, not the PostgreSQL server's")
def test_storage_full_once_the_retries_are_spent():
    s = Service(args=["--min-free-bytes", str(2 ** 62)]).start()
    try:
        with Client(s.url, retry=Retry(attempts=2, base=0.001, cap=0.005)) as cl:
            with pytest.raises(StorageFullError) as ei:
                cl.schedule(job())
            assert ei.value.status == 503
        # Two attempts: the first 503 was retried once.
        assert s.metric('rmqs_http_requests_total{route="/schedule/batch",'
                        'method="POST",status="503"}') == 2
    finally:
        s.destroy()
