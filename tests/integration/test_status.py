"""GET /status, the dashboard's trouble banner: the broker's and the
database's state with since-when and the last error, and the pending jobs
overdue (more than 1 s past deliver_at, counted to 10,000) with the oldest
one's age; the same overdue numbers in /metrics. Jobs are made overdue by a
service whose broker URL points at a port where nothing listens, so the
run's shared RabbitMQ is never stopped."""

import os
import re
import time

import pytest

from helpers import (format_ts, free_port, http_request_text, parse_ts, pg,
                     wait_until)


def status(svc):
    code, _, body = svc.get("/status")
    assert code == 200, body
    return body


def overdue_metrics(svc):
    text = http_request_text(svc.port, "/metrics").text
    got = {}
    for name in ("rmqs_overdue_jobs", "rmqs_oldest_overdue_job_age_seconds"):
        m = re.search(rf'^{name}{{store="([^"]+)"}} (\S+)$', text, re.M)
        assert m, f"{name} missing:\n{text[:2000]}"
        got[name] = float(m.group(2))
        got["store"] = m.group(1)
    return got


def test_status_says_up_and_nothing_overdue_on_a_healthy_service(service):
    svc = service()
    t0 = time.time()
    body = wait_until(lambda: (lambda b: b if b["broker"]["state"] == "up" else None)(
        status(svc)), 20, "the broker to be up in /status")
    assert body["broker"]["last_error"] is None, body
    assert body["database"] == {"state": "up", "since": body["database"]["since"],
                                "last_error": None}, body
    assert body["overdue"] == {"count": 0, "capped": False, "oldest_due_at": None,
                               "oldest_age_s": None}, body
    assert body["trouble"] is False
    # since: when it came up, not before the process started nor in the future
    started = parse_ts(body["instance"]["started_at"])
    assert started - 1 <= parse_ts(body["broker"]["since"]) <= time.time() + 1, body
    assert started <= t0 + 1, body
    assert body["instance"]["version"] and body["instance"]["store"], body
    m = overdue_metrics(svc)
    assert m["rmqs_overdue_jobs"] == 0 and m["rmqs_oldest_overdue_job_age_seconds"] == 0
    assert m["store"] == body["instance"]["store"]
    # a query parameter it does not take is 400, as elsewhere
    code, _, err = svc.get("/status?verbose=1")
    assert code == 400 and err["error"]["code"] == "invalid_argument", err


def test_overdue_jobs_counted_while_the_broker_is_unreachable(service):
    port = free_port()
    svc = service(wait="health", amqp_url=f"amqp://guest:guest@127.0.0.1:{port}/")
    body = wait_until(lambda: (lambda b: b if b["broker"]["last_error"] else None)(
        status(svc)), 20, "a connection error in /status")
    assert body["broker"]["state"] == "down" and body["trouble"] is True, body
    assert str(port) in body["broker"]["last_error"], body
    down_since = body["broker"]["since"]

    now = time.time()
    def job(**when):
        return svc.schedule({"exchange": "", "routing_key": "status", "body": "x", **when})
    oldest = job(deliver_at=format_ts(now - 40))
    job(deliver_at=format_ts(now - 20))
    soon = [job(delay_ms=300) for _ in range(2)]
    job(delay_ms=3_600_000)  # not due: never overdue

    def four_overdue():
        b = status(svc)
        return b if b["overdue"]["count"] == 4 else None
    body = wait_until(four_overdue, 20, "the 4 past-due jobs to count as overdue")
    assert body["overdue"]["capped"] is False
    assert body["overdue"]["oldest_due_at"] == oldest["deliver_at"], body
    age = body["overdue"]["oldest_age_s"]
    assert 40 <= age < 40 + 30, body
    assert body["broker"]["since"] == down_since, "since moved without a change"
    for j in soon:
        assert svc.job(j["id"])["status"] == "pending"

    m = overdue_metrics(svc)
    assert m["rmqs_overdue_jobs"] == 4, m
    assert 40 <= m["rmqs_oldest_overdue_job_age_seconds"] < 40 + 30, m
    assert m["store"] == body["instance"]["store"]


def test_database_full_shows_with_its_error(service, store, tmp_path):
    if store != "sqlite":
        pytest.skip("the free-space reserve is SQLite's (PostgreSQL's disk is "
                    "the server's): GET /status's database full is checked on SQLite")
    st = os.statvfs(tmp_path)
    reserve = st.f_bavail * st.f_frsize + (1 << 40)  # more than is free
    svc = service("--db", str(tmp_path / "full.db"), "--min-free-bytes", str(reserve))
    assert status(svc)["database"]["state"] == "up"
    code, _, body = svc.post("/schedule", {"exchange": "", "routing_key": "k",
                                           "body": "x", "delay_ms": 1000})
    assert code == 503 and body["error"]["code"] == "storage_full", body
    body = status(svc)
    assert body["database"]["state"] == "full", body
    assert "disk" in body["database"]["last_error"], body
    assert body["trouble"] is True


def test_database_down_shows_with_its_error_and_clears(service, store):
    """The database going away under a running service (PostgreSQL: its
    sessions ended and new ones refused, the server itself left running
    for the other tests): /status says "down" with the error and since
    when, and "up" again once it is back."""
    if store != "postgres":
        pytest.skip("a SQLite file's ping does not fail while the process "
                    "holds it open: GET /status's database down is checked "
                    "on PostgreSQL")
    svc = service()
    wait_until(lambda: status(svc)["database"]["state"] == "up", 20,
               "the database up in /status")
    db = svc.pg_database
    t0 = time.time()
    pg.sql("postgres", f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
    try:
        pg.sql("postgres", "SELECT pg_terminate_backend(pid) FROM "
               f"pg_stat_activity WHERE datname = '{db}'")
        body = wait_until(
            lambda: (lambda b: b if b["database"]["state"] == "down" else None)(
                status(svc)), 30, "the database down in /status")
        assert body["trouble"] is True, body
        assert "does not answer" in body["database"]["last_error"], body
        down_since = parse_ts(body["database"]["since"])
        assert t0 - 1 <= down_since <= time.time() + 1, body
    finally:
        pg.sql("postgres", f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
    body = wait_until(
        lambda: (lambda b: b if b["database"]["state"] == "up" else None)(
            status(svc)), 30, "the database up again in /status")
    # since: when it came back; the error that took it down is kept (the
    # contract: for the operator who looks after the fact)
    assert parse_ts(body["database"]["since"]) >= down_since, body
    assert "does not answer" in body["database"]["last_error"], body
    # a job is taken again once it is back
    code, _, job = svc.post("/schedule", {"exchange": "", "routing_key": "k",
                                          "body": "x", "delay_ms": 60000})
    assert code == 201, job
