"""Bad requests get the documented 4xx answer with a JSON error, and change
nothing. The cases are data: bad_requests.json (one object per case:
name, method, path, headers, body (raw text or null), expect_status,
expect_code, optional expect_field and expect_allow). "{job_id}" in a path
stands for an existing pending job."""

import http.client
import json
import os
import time

import pytest

from helpers import assert_error, http_request
from pylib.http import post_chunked

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "bad_requests.json")) as f:
    CASES = json.load(f)

VALID = {"exchange": "ex", "routing_key": "rk", "body": "hello", "delay_ms": 3_600_000}


@pytest.fixture(scope="module")
def api(module_service):
    """One service for all the cases, with one pending job to aim at."""
    svc = module_service()
    job = svc.schedule(VALID)
    return svc, job


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_bad_request(api, case):
    svc, job = api
    total_before = len(svc.list_all()[0])
    resp = svc.request(case["method"], case["path"].replace("{job_id}", job["id"]),
                       case["body"], headers=case["headers"])
    err = assert_error(resp, case["expect_status"], case["expect_code"],
                       case.get("expect_field"))
    if "field" in err:
        assert isinstance(err["field"], str) and err["field"], err
    if case["expect_status"] == 405:
        allow = {m.strip() for m in (resp.headers.get("Allow") or "").split(",")}
        assert set(case["expect_allow"]) <= allow, f"Allow: {resp.headers.get('Allow')}"
        assert case["method"] not in allow
    # the request changed nothing
    assert len(svc.list_all()[0]) == total_before
    assert svc.job(job["id"]) == job


def test_content_type_with_charset_is_accepted(service):
    svc = service()
    status, _, job = svc.post("/schedule", VALID,
                              headers={"Content-Type": "application/json; charset=utf-8"})
    assert status == 201, job


def test_deliver_at_offset_is_shown_in_utc_with_ms(service):
    svc = service()
    year = time.gmtime().tm_year + 1
    status, _, job = svc.post("/schedule", {
        "exchange": "ex", "routing_key": "rk", "body": "x",
        "deliver_at": f"{year}-06-01T20:30:00.5+05:30"})
    assert status == 201, job
    assert job["deliver_at"] == f"{year}-06-01T15:00:00.500Z"
    status, _, job = svc.post("/schedule", {
        "exchange": "ex", "routing_key": "rk", "body": "x",
        "deliver_at": f"{year}-06-01T15:00:00.123456-00:30"})
    assert status == 201, job
    assert job["deliver_at"] == f"{year}-06-01T15:30:00.123Z"


def test_limits_are_inclusive(service):
    svc = service()
    edge = {"exchange": "e" * 255, "routing_key": "k" * 255, "body": "x",
            "delay_ms": 3650 * 86_400_000, "max_attempts": 1000,
            "headers": {f"h{i}": i for i in range(128)},
            "properties": {"priority": 255, "message_id": "m" * 255}}
    status, _, job = svc.post("/schedule", edge)
    assert status == 201, job
    assert job["max_attempts"] == 1000
    assert len(job["headers"]) == 128
    status, _, page = svc.get("/jobs?limit=1000")
    assert status == 200 and len(page["jobs"]) == 1
    status, _, page = svc.get("/jobs?limit=1")
    assert status == 200 and len(page["jobs"]) == 1 and page["next"] is None


# --- request size ------------------------------------------------------------

def test_body_over_the_limit_is_413(service):
    svc = service("--max-body-bytes", "1024")
    small = dict(VALID, body="s" * 900)
    assert len(json.dumps(small)) <= 1024
    status, _, _ = svc.post("/schedule", small)
    assert status == 201

    big = dict(VALID, body="b" * 2000)
    assert_error(svc.post("/schedule", big), 413, "payload_too_large")
    big_patch = {"delay_ms": 5, "pad": "p" * 2000}
    job = svc.list_all()[0][0]
    assert_error(svc.patch(f"/jobs/{job['id']}", big_patch), 413, "payload_too_large")
    assert len(svc.list_all()[0]) == 1


def test_chunked_body_over_the_limit_is_413(service):
    svc = service("--max-body-bytes", "1024")
    chunks = [b'{"exchange": "ex", "routing_key": "rk", "delay_ms": 1, "body": "']
    chunks += [b"x" * 512] * 8 + [b'"}']
    status, raw = post_chunked(svc.port, "/schedule", chunks, timeout=10)
    assert status == 413, (status, raw)
    assert json.loads(raw)["error"]["code"] == "payload_too_large"
    assert svc.list_all()[0] == []


def test_announced_content_length_over_the_limit_is_413_at_once(service):
    svc = service("--max-body-bytes", "1024")
    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=5)
    try:
        t0 = time.monotonic()
        conn.putrequest("POST", "/schedule")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(100 * 1024 * 1024))
        conn.endheaders()  # and no body: the service must not wait for it
        resp = conn.getresponse()
        raw = resp.read()
        elapsed = time.monotonic() - t0
    finally:
        conn.close()
    assert resp.status == 413, (resp.status, raw)
    assert json.loads(raw)["error"]["code"] == "payload_too_large"
    assert elapsed < 2.0, f"answered after {elapsed:.2f} s"
    # still serving
    assert http_request(svc.port, "GET", "/healthz").status == 200
    assert svc.list_all()[0] == []
