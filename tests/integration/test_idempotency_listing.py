"""Idempotency-Key makes a repeated POST /schedule harmless; GET /jobs pages
through every job once, in deliver_at order, and filters by status."""

import json
import random
import time

from helpers import assert_error, format_ts, parse_ts


def test_same_key_same_request_returns_the_same_job_once(service, amqp):
    svc = service()
    req = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
           "body": {"n": 1}, "delay_ms": 3000, "headers": {"h": "v"}}
    key = {"Idempotency-Key": "order-42/attempt"}

    status, hdrs, first = svc.post("/schedule", req, headers=key)
    assert status == 201, first
    status, hdrs2, second = svc.post("/schedule", req, headers=key)
    assert status == 200, second
    assert second["id"] == first["id"]
    assert second == first
    assert hdrs2.get("Location") == f"/jobs/{first['id']}"

    # The same request written differently (key order, spacing) is the same.
    reordered = json.dumps(dict(reversed(list(req.items()))), indent=2)
    status, _, third = svc.post("/schedule", reordered, headers=key)
    assert status == 200, third
    assert third["id"] == first["id"]

    # A sentinel due after it: once it arrives, the job has had its chance
    # to arrive twice.
    sentinel = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                             "body": "sentinel", "delay_ms": 4000})
    got = amqp.wait_for_jobs([first["id"], sentinel["id"]], timeout=15)
    assert len(got[first["id"]]) == 1
    assert len(amqp.snapshot()) == 2
    listed, _ = svc.list_all()
    assert len(listed) == 2


def test_same_key_different_request_is_409(service):
    svc = service()
    req = {"exchange": "", "routing_key": "q", "body": "a", "delay_ms": 60_000}
    key = {"Idempotency-Key": "k-1"}
    status, _, first = svc.post("/schedule", req, headers=key)
    assert status == 201
    assert_error(svc.post("/schedule", dict(req, body="b"), headers=key),
                 409, "conflict")
    # a different key is a different job
    status, _, other = svc.post("/schedule", req, headers={"Idempotency-Key": "k-2"})
    assert status == 201 and other["id"] != first["id"]
    # no key: always a new job
    assert svc.post("/schedule", req).body["id"] not in (first["id"], other["id"])
    assert len(svc.list_all()[0]) == 3


def test_bad_idempotency_keys_are_400(service):
    svc = service()
    req = {"exchange": "", "routing_key": "q", "body": "a", "delay_ms": 60_000}
    for bad in ("", "x" * 201, "tab\there", "caf\u00e9"):
        assert_error(svc.post("/schedule", req, headers={"Idempotency-Key": bad}),
                     400, "invalid_argument")
    assert svc.list_all()[0] == []
    status, _, _ = svc.post("/schedule", req, headers={"Idempotency-Key": "x" * 200})
    assert status == 201


def test_listing_pages_through_every_job_in_deliver_at_order(service):
    svc = service()
    base = time.time() + 3600
    offsets = list(range(30)) + [15] * 6  # six jobs share one deliver_at
    random.Random(7).shuffle(offsets)
    created = []
    for i, off in enumerate(offsets):
        created.append(svc.schedule({
            "exchange": "", "routing_key": "q", "body": f"job {i}",
            "deliver_at": format_ts(base + off)}))
    by_id = {j["id"]: j for j in created}

    seen, after, pages = [], None, 0
    while True:
        path = "/jobs?limit=7" + (f"&after={after}" if after else "")
        status, _, page = svc.get(path)
        assert status == 200, page
        assert set(page) == {"jobs", "next"}
        assert len(page["jobs"]) <= 7
        seen.extend(page["jobs"])
        pages += 1
        after = page["next"]
        if after is None:
            break
        assert len(page["jobs"]) == 7, "a page before the last one is short"
        assert pages <= 10, "the cursor never ends"
    ids = [j["id"] for j in seen]
    assert len(ids) == len(set(ids)), "a job was listed twice"
    assert set(ids) == set(by_id), "a job was never listed"
    times = [parse_ts(j["deliver_at"]) for j in seen]
    assert times == sorted(times), "not in deliver_at order"
    for j in seen:
        assert j == by_id[j["id"]]

    # default limit is 100: one page for 36 jobs
    status, _, page = svc.get("/jobs")
    assert status == 200 and len(page["jobs"]) == 36 and page["next"] is None


def test_listing_filters_by_status(service):
    svc = service()
    jobs = [svc.schedule({"exchange": "", "routing_key": "q", "body": str(i),
                          "delay_ms": 3_600_000 + i}) for i in range(12)]
    cancelled = {j["id"] for j in jobs[::3]}
    for jid in cancelled:
        assert svc.delete(f"/jobs/{jid}").status == 200

    got, pages = svc.list_all(status="cancelled", limit=2)
    assert {j["id"] for j in got} == cancelled
    assert all(j["status"] == "cancelled" for j in got)
    assert pages >= 2
    pending, _ = svc.list_all(status="pending", limit=5)
    assert {j["id"] for j in pending} == {j["id"] for j in jobs} - cancelled
    assert svc.list_all(status="sent")[0] == []
    assert svc.list_all(status="failed")[0] == []
    assert len(svc.list_all()[0]) == 12


def test_a_job_reads_the_same_in_every_answer(service):
    """One serializer: the POST /schedule answer, GET /jobs/{id} and a GET
    /jobs page show a job in the same bytes, and a page is exactly
    {"jobs":[<GET /jobs/{id}>,...],"next":<cursor or null>}."""
    svc = service()
    base = time.time() + 3600
    reqs = [
        {"exchange": "", "routing_key": "q", "body": "caf\u00e9 \u20ac \U0001f600 "
         "\"quoted\" back\\slash /slash \u0001\u001f\t\n", "deliver_at": format_ts(base)},
        {"exchange": "", "routing_key": "q.json", "delay_ms": 3_600_001,
         "body": {"n": [1, -0.0, 2.5, 1e300, 0.1, None, True], "s": "\u00e9\n",
                  "deep": {"a": [{"b": {}}]}},
         "headers": {"h": 1, "s": "v\n", "f": 2.5, "b": False},
         "properties": {"priority": 5, "app_id": "z", "correlation_id": "c\u00e9"}},
        {"exchange": "", "routing_key": "q.bin", "body_base64": "AAEC/w==",
         "deliver_at": format_ts(base + 2), "max_attempts": 7},
        {"exchange": "", "routing_key": "q.empty", "body": "",
         "deliver_at": format_ts(base + 3)},
    ]
    posted = []
    for r in reqs:
        answer = svc.post("/schedule", r)
        assert answer.status == 201, answer
        posted.append(answer)
    cancelled = svc.delete(f"/jobs/{posted[3].body['id']}")
    assert cancelled.status == 200, cancelled

    single = {}
    for answer in posted:
        jid = answer.body["id"]
        got = svc.get(f"/jobs/{jid}")
        assert got.status == 200, got
        single[jid] = got.raw
        if jid != posted[3].body["id"]:
            assert got.raw == answer.raw, "POST /schedule and GET /jobs/{id} differ"
    assert single[posted[3].body["id"]] == cancelled.raw

    listed, after = [], None
    for _ in range(5):
        page = svc.get("/jobs?limit=3" + (f"&after={after}" if after else ""))
        assert page.status == 200, page
        after = page.body["next"]
        ids = [j["id"] for j in page.body["jobs"]]
        want = (b'{"jobs":[' + b",".join(single[i] for i in ids) + b'],"next":'
                + json.dumps(after).encode() + b"}")
        assert page.raw == want
        listed.extend(ids)
        if after is None:
            break
    assert sorted(listed) == sorted(single), "every job listed once"
