"""POST /schedule/batch items with their own idempotency_key: a client that
batches many callers' calls into one request retries it (after a
connection error, a 503 or a 429) without duplicating any job, each caller
keeping its own key; the keys are checked in the batch's one transaction,
so a retry after kill -9 or a restart dedupes too."""

from helpers import assert_error
from pylib.schedules import name_of, put_ok

N = 100


def item(i, key=None, body=None):
    job = {"exchange": "", "routing_key": "q", "delay_ms": 3_600_000,
           "body": body if body is not None else {"caller": i}}
    if key is not None:
        job["idempotency_key"] = key
    return job


def count(svc):
    status, _, body = svc.get("/jobs/count")
    assert status == 200, body
    return body["count"]


def post_batch(svc, items, expect, headers=None):
    status, _, body = svc.post("/schedule/batch", items, headers=headers)
    assert status == expect, (status, body)
    return body


def ids(body):
    return [j["id"] for j in body["jobs"]]


def test_keyed_batch_posted_twice_stores_each_job_once(service):
    svc = service()
    items = [item(i, f"caller-{i}/call-1") for i in range(N)]
    first = post_batch(svc, items, 201)
    assert len(first["jobs"]) == N
    for j in first["jobs"]:
        assert "idempotency_key" not in j, j
    second = post_batch(svc, items, 200)
    assert ids(second) == ids(first)
    assert second == first
    assert count(svc) == N
    # with Prefer: return=minimal, the same ids in the same order
    minimal = post_batch(svc, items, 200,
                         headers={"Prefer": "return=minimal"})
    assert ids(minimal) == ids(first)
    assert count(svc) == N


def test_known_and_new_keys_mixed_is_201_with_known_jobs_in_place(service):
    svc = service()
    known = [item(i, f"k-{i}") for i in range(N)]
    first = post_batch(svc, known, 201)
    # 50 known keys between 50 new ones, and an item without key
    mixed = []
    for i in range(50):
        mixed.append(known[i])
        mixed.append(item(1000 + i, f"new-{i}"))
    body = post_batch(svc, mixed, 201)
    got = ids(body)
    assert len(got) == N
    assert got[0::2] == ids(first)[:50]
    assert not set(got[1::2]) & set(ids(first))
    assert count(svc) == 150


def test_known_key_with_changed_body_is_409_and_stores_nothing(service):
    svc = service()
    items = [item(i, f"c-{i}") for i in range(10)]
    post_batch(svc, items, 201)
    changed = [item(100 + i, f"n-{i}") for i in range(5)]
    changed.append(item(7, "c-7", body={"caller": 7, "changed": True}))
    changed += [item(200 + i) for i in range(5)]
    assert_error(svc.post("/schedule/batch", changed), 409, "conflict",
                 "jobs[5].idempotency_key")
    assert count(svc) == 10
    # the new keys of the refused batch were not kept: they are new again
    body = post_batch(svc, [item(100 + i, f"n-{i}") for i in range(5)], 201)
    assert len(body["jobs"]) == 5
    assert count(svc) == 15


def test_same_key_as_header_of_post_schedule_matches(service):
    svc = service()
    job = item(1)
    status, _, single = svc.post("/schedule", job,
                                 headers={"Idempotency-Key": "shared"})
    assert status == 201, single
    body = post_batch(svc, [item(1, "shared")], 200)
    assert ids(body) == [single["id"]]
    assert count(svc) == 1


def run_now(svc, name, key, expect):
    status, _, body = svc.request("POST", f"/schedules/{name}/run", None,
                                  headers={"Idempotency-Key": key})
    assert status == expect, (status, body)
    return body


def test_run_now_key_and_batch_item_keys_are_one_set(service):
    """POST /schedules/{name}/run with an Idempotency-Key goes through the
    same keyed insert as a batch (its key an array of one): a repeat
    answers the same run; its key in a batch item, or a batch item's key
    on run now, is 409 naming the key, and stores nothing."""
    svc = service()
    name = name_of("idem-batch")
    put_ok(svc, name, {"cron": "0 0 1 1 *",
                       "job": {"exchange": "", "routing_key": "q",
                               "body": "tick"}})
    first = run_now(svc, name, "run-now-1", 201)
    assert run_now(svc, name, "run-now-1", 200)["id"] == first["id"]
    assert count(svc) == 1
    assert_error(svc.post("/schedule/batch",
                          [item(0, "fresh-0"), item(1, "run-now-1")]),
                 409, "conflict", "jobs[1].idempotency_key")
    assert count(svc) == 1
    batch = post_batch(svc, [item(0, "fresh-0"), item(1, "fresh-1")], 201)
    assert_error(svc.request("POST", f"/schedules/{name}/run", None,
                             headers={"Idempotency-Key": "fresh-1"}),
                 409, "conflict", "Idempotency-Key")
    assert count(svc) == 3
    assert run_now(svc, name, "run-now-1", 200)["id"] == first["id"]
    assert ids(post_batch(svc, [item(0, "fresh-0"), item(1, "fresh-1")],
                          200)) == ids(batch)
    assert count(svc) == 3


def test_bad_or_repeated_item_keys_are_item_errors(service):
    svc = service()
    for bad in ("", "x" * 201, "has space", 7):
        status, _, body = svc.post("/schedule/batch",
                                   [item(0), item(1, bad)])
        assert status == 400, body
        assert body["error"]["field"] == "jobs"
        assert body["errors"] == [{"index": 1, "field": "idempotency_key",
                                   "message": body["errors"][0]["message"]}]
    status, _, body = svc.post("/schedule/batch",
                               [item(0, "dup"), item(1), item(2, "dup")])
    assert status == 400, body
    assert [(e["index"], e["field"]) for e in body["errors"]] == \
        [(2, "idempotency_key")]
    assert "jobs[0]" in body["errors"][0]["message"], body
    # the header stays refused on a batch
    assert_error(svc.post("/schedule/batch", [item(0, "a")],
                          headers={"Idempotency-Key": "a"}),
                 400, "invalid_argument", "Idempotency-Key")
    assert count(svc) == 0
    status, _, _ = svc.post("/schedule/batch", [item(0, "x" * 200)])
    assert status == 201


def test_retry_after_kill9_dedupes(service):
    svc = service()
    items = [item(i, f"crash-{i}") for i in range(N)]
    first = post_batch(svc, items, 201)
    svc.kill9()  # right after the answer: it was committed before
    svc.restart()
    again = post_batch(svc, items, 200)
    assert ids(again) == ids(first)
    assert count(svc) == N
    svc.terminate()
    svc.restart()
    again = post_batch(svc, items, 200)
    assert ids(again) == ids(first)
    assert count(svc) == N
