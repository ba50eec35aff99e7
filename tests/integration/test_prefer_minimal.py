"""Prefer: return=minimal (RFC 7240) on POST /schedule and POST
/schedule/batch: a successful answer carries only each job's id, status and
deliver_at, says Preference-Applied: return=minimal, and schedules exactly
what the full answer would; without the preference (or with any other) the
answer is the whole job, as before. Errors are the same either way.

Every answer here goes through the suite's api/openapi.yaml check as well."""

import http.client
import json
import time

from helpers import UUID7_RE, Response, assert_error, format_ts
import pylib.http

MINIMAL = {"Prefer": "return=minimal"}
APPLIED = "Preference-Applied"
LATER = 3_600_000


def job_req(i=0, **extra):
    return dict({"exchange": "", "routing_key": "q", "body": f"job {i}",
                 "delay_ms": LATER}, **extra)


def assert_minimal(item, full=None):
    """item is a JobMinimal; if full (the job from GET) is given, it agrees."""
    assert set(item) == {"id", "status", "deliver_at"}, item
    assert UUID7_RE.match(item["id"]), item
    if full is not None:
        assert item["id"] == full["id"]
        assert item["status"] == full["status"]
        assert item["deliver_at"] == full["deliver_at"]


def post_with_header_lines(svc, path, body, header_lines):
    """POST with header lines sent exactly as given, repeats included
    (http_request takes a dict, so one line per name)."""
    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=15)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        for name, value in header_lines:
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        answer = Response(resp.status, resp.headers, resp.read())
    finally:
        conn.close()
    if pylib.http.RESPONSE_CHECK is not None:
        pylib.http.RESPONSE_CHECK("POST", path, answer)
    return answer


def test_schedule_minimal_answer_is_id_status_deliver_at(service):
    svc = service()
    at = round(time.time() + LATER / 1000, 3)  # a time with milliseconds, in +01:00
    req = {"exchange": "", "routing_key": "q", "body": "m",
           "deliver_at": format_ts(at, 60)}
    status, hdrs, body = svc.post("/schedule", req, headers=MINIMAL)
    assert status == 201, body
    assert_minimal(body)
    assert body["status"] == "pending"
    assert body["deliver_at"] == format_ts(at), (req, body)  # in UTC
    assert hdrs.get(APPLIED) == "return=minimal"
    assert hdrs.get("Location") == f"/jobs/{body['id']}"
    # the job itself is whole
    full = svc.job(body["id"])
    assert_minimal(body, full)
    assert full["body"] == "m" and full["routing_key"] == "q"


def test_schedule_without_minimal_is_unchanged(service):
    svc = service()
    for headers in (None, {"Prefer": "return=representation"},
                    {"Prefer": "respond-async"}, {"Prefer": "return=other"}):
        status, hdrs, body = svc.post("/schedule", job_req(), headers=headers)
        assert status == 201, (headers, body)
        assert hdrs.get(APPLIED) is None, headers
        assert body == svc.job(body["id"]), headers
        assert "next_attempt_at" in body and "body" in body


def test_batch_minimal_lists_the_jobs_in_request_order(service):
    svc = service()
    reqs = [job_req(i) for i in range(20)]
    at = int(time.time()) + 2 * LATER // 1000  # whole seconds, given without a fraction
    reqs[3] = {"exchange": "", "routing_key": "q", "body_base64": "AAE=",
               "deliver_at": format_ts(at).replace(".000Z", "Z")}
    status, hdrs, body = svc.post("/schedule/batch", reqs, headers=MINIMAL)
    assert status == 201, body
    assert hdrs.get(APPLIED) == "return=minimal"
    assert set(body) == {"jobs"} and len(body["jobs"]) == len(reqs)
    assert len({j["id"] for j in body["jobs"]}) == len(reqs)
    for i, item in enumerate(body["jobs"]):
        full = svc.job(item["id"])
        assert_minimal(item, full)
        if i == 3:
            assert full["body_base64"] == "AAE="
            assert item["deliver_at"] == format_ts(at)
        else:
            assert full["body"] == f"job {i}"
    assert len(svc.list_all()[0]) == len(reqs)


def test_batch_minimal_answer_is_a_fraction_of_the_full_one(service):
    svc = service()
    reqs = [job_req(i) for i in range(1000)]
    full = svc.post("/schedule/batch", reqs)
    small = svc.post("/schedule/batch", reqs, headers=MINIMAL)
    assert full.status == small.status == 201
    assert full.headers.get(APPLIED) is None
    assert len(full.body["jobs"]) == len(small.body["jobs"]) == 1000
    assert len(small.raw) * 3 < len(full.raw), (len(small.raw), len(full.raw))
    # the full answer is each job as GET shows it
    first = full.body["jobs"][0]
    assert first == svc.job(first["id"])


def test_minimal_with_idempotency_key(service):
    svc = service()
    key = {"Idempotency-Key": "minimal-1"}
    status, hdrs, first = svc.post("/schedule", job_req(), headers=key | MINIMAL)
    assert status == 201 and hdrs.get(APPLIED) == "return=minimal"
    assert_minimal(first)
    # the repeat: 200, the earlier job, minimal or whole as asked
    status, hdrs, again = svc.post("/schedule", job_req(), headers=key | MINIMAL)
    assert status == 200 and hdrs.get(APPLIED) == "return=minimal"
    assert again == first
    assert hdrs.get("Location") == f"/jobs/{first['id']}"
    status, hdrs, whole = svc.post("/schedule", job_req(), headers=key)
    assert status == 200 and hdrs.get(APPLIED) is None
    assert_minimal(first, whole)
    assert whole == svc.job(first["id"])
    # the earlier job's status now, not "pending" by habit
    assert svc.delete(f"/jobs/{first['id']}").status == 200
    status, _, again = svc.post("/schedule", job_req(), headers=key | MINIMAL)
    assert status == 200 and again["status"] == "cancelled"
    assert_minimal(again, svc.job(first["id"]))


def test_errors_are_the_same_with_minimal(service):
    svc = service("--allow-exchanges", "allowed")
    cases = [
        ("/schedule", job_req(exchange="allowed", delay_ms=-1), 400, "invalid_argument"),
        ("/schedule", job_req(exchange="other"), 403, "forbidden"),
        ("/schedule", "{not json", 400, "invalid_argument"),
        ("/schedule/batch", [job_req(exchange="allowed"), job_req(exchange="other")],
         403, "forbidden"),
        ("/schedule/batch", "[]", 400, "invalid_argument"),
    ]
    for path, body, st, code in cases:
        plain = svc.post(path, body)
        small = svc.post(path, body, headers=MINIMAL)
        assert_error(small, st, code)
        assert small.body == plain.body, (path, body)
        assert small.headers.get(APPLIED) is None
    # a batch with invalid items: the same per-item errors
    bad = [job_req(exchange="allowed"), job_req(exchange="allowed", routing_key=None)]
    plain = svc.post("/schedule/batch", bad)
    small = svc.post("/schedule/batch", bad, headers=MINIMAL)
    assert small.status == plain.status == 400
    assert small.body == plain.body and small.body["errors"][0]["index"] == 1
    assert small.headers.get(APPLIED) is None
    assert svc.list_all()[0] == []


def test_prefer_header_forms(service):
    svc = service()
    body = json.dumps(job_req())
    cases = [
        ([("Prefer", "respond-async, return=minimal")], True),
        ([("Prefer", "RETURN=MINIMAL")], True),
        ([("Prefer", 'return="minimal"; x=1')], True),
        ([("Prefer", "respond-async"), ("Prefer", "return=minimal")], True),
        ([("Prefer", "return=representation"), ("Prefer", "return=minimal")], False),
        ([("Prefer", "return=unknown"), ("Prefer", "return=minimal")], False),
        ([("Prefer", "return=representation, return=minimal")], False),
        ([("Prefer", "handling=lenient; return=minimal")], False),
        ([("Prefer", "")], False),
    ]
    for lines, minimal in cases:
        resp = post_with_header_lines(svc, "/schedule", body.encode(), lines)
        assert resp.status == 201, (lines, resp)
        if minimal:
            assert_minimal(resp.body)
            assert resp.headers.get(APPLIED) == "return=minimal", lines
        else:
            assert "exchange" in resp.body, lines
            assert resp.headers.get(APPLIED) is None, lines
        batch = post_with_header_lines(svc, "/schedule/batch",
                                       ("[" + body + "," + body + "]").encode(), lines)
        assert batch.status == 201, (lines, batch)
        assert (batch.headers.get(APPLIED) == "return=minimal") == minimal, lines
        for item in batch.body["jobs"]:
            assert ("exchange" not in item) == minimal, lines


def test_jobs_scheduled_with_minimal_are_delivered(service, amqp):
    svc = service()
    one = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
           "body": {"n": 1}, "delay_ms": 300}
    status, _, single = svc.post("/schedule", one, headers=MINIMAL)
    assert status == 201
    status, _, batch = svc.post("/schedule/batch", [dict(one, body={"n": i}) for i in range(5)],
                                headers=MINIMAL)
    assert status == 201
    ids = [single["id"]] + [j["id"] for j in batch["jobs"]]
    got = amqp.wait_for_jobs(ids, timeout=20)
    assert all(len(got[i]) == 1 for i in ids)
    for i in ids:
        svc.wait_status(i, "sent")
