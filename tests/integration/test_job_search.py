"""GET /jobs and GET /jobs/count with the search's filters (issue 14):
among 2,400 mixed jobs (text, JSON and binary bodies, headers, exchanges,
routing keys, due times; some cancelled), each filter and combinations of
them list exactly the jobs they name, across pages, and count them; bad
filters are 400 naming the parameter and change nothing. On SQLite the
header and body indexes are filled in the background (the search
indexer): a job is found by them at once (the not-yet-indexed tail is
searched directly), after the indexer caught up, and after kill -9
restarts during its catch-up."""

import base64
import sqlite3
import time
import uuid
from urllib.parse import urlencode

import pytest

from helpers import assert_error, format_ts, parse_ts, wait_until
from pylib.metrics import metric

N = 2400


def job_of(i, base):
    """Job number i: the rules the tests' expectations follow."""
    job = {"exchange": f"ex{i % 3}", "routing_key": f"rk{i % 5}",
           "deliver_at": format_ts(base + i),
           "headers": {"tenant": f"t{i % 7}", "n": i}}
    kind = i % 4
    if kind == 0:
        job["body"] = f"hello <script>alert({i})</script>"
    elif kind == 1:
        job["body"] = {"k": f"Needle {i}"}
    elif kind == 2:
        job["body_base64"] = base64.b64encode(f"Needle {i} bytes".encode()).decode()
    else:
        job["body"] = "plain text, Caf\u00e9"
    return job


@pytest.fixture(scope="module")
def jobs(module_service):
    """The service and {i: job as created} for i in 0..N-1; i % 11 == 0
    cancelled."""
    svc = module_service()
    base = time.time() + 3 * 3600
    made = {}
    for start in range(0, N, 800):
        batch = [job_of(i, base) for i in range(start, min(N, start + 800))]
        st, _, body = svc.post("/schedule/batch", batch)
        assert st == 201, body
        for i, j in zip(range(start, start + len(batch)), body["jobs"]):
            made[i] = j
    for i in range(0, N, 11):
        st, _, body = svc.delete(f"/jobs/{made[i]['id']}")
        assert st == 200 and body["status"] == "cancelled", body
    return svc, made, base


def listed(svc, params, limit=97):
    """Every job GET /jobs lists for params, following the cursors, and
    the number of pages."""
    out, after, pages = [], None, 0
    while True:
        q = dict(params, limit=limit)
        if after:
            q["after"] = after
        st, _, body = svc.get("/jobs?" + urlencode(q))
        assert st == 200, body
        out.extend(body["jobs"])
        pages += 1
        after = body["next"]
        if after is None:
            return out, pages


def check(jobs, params, want):
    """params select exactly the jobs i with want(i), in deliver_at order,
    and GET /jobs/count counts them."""
    svc, made, _ = jobs
    expected = [made[i]["id"] for i in range(N) if want(i)]
    got, _ = listed(svc, params)
    assert [j["id"] for j in got] == expected, params
    st, _, body = svc.get("/jobs/count?" + urlencode(params))
    assert st == 200 and body == {"count": len(expected), "capped": False}, (params, body)
    return got


def cancelled(i):
    return i % 11 == 0


CASES = [
    ({"exchange": "ex1"}, lambda i: i % 3 == 1),
    ({"routing_key": "rk2"}, lambda i: i % 5 == 2),
    ({"exchange": "ex1", "routing_key": "rk2"}, lambda i: i % 15 == 7),
    ({"status": "cancelled", "exchange": "ex2"}, lambda i: cancelled(i) and i % 3 == 2),
    ({"status": "pending", "routing_key": "rk0"},
     lambda i: not cancelled(i) and i % 5 == 0),
    ({"header": "tenant:t3"}, lambda i: i % 7 == 3),
    ({"header": "tenant:t3", "status": "pending"}, lambda i: i % 7 == 3 and not cancelled(i)),
    ({"header": "n:5"}, lambda i: False),          # a number is not a string header
    ({"header": "tenant:"}, lambda i: False),      # an empty value is a value
    ({"q": "<script>"}, lambda i: i % 4 == 0),     # found as text
    ({"q": "Needle"}, lambda i: i % 4 == 1),       # JSON bodies; binary never
    ({"q": "needle"}, lambda i: False),            # case-sensitive
    ({"q": "Caf\u00e9"}, lambda i: i % 4 == 3),
    ({"q": '"Needle 1233"'}, lambda i: i == 1233),  # JSON as its compact text
    ({"q": "Needle", "routing_key": "rk2"}, lambda i: i % 4 == 1 and i % 5 == 2),
    ({"q": "Needle", "status": "cancelled"}, lambda i: i % 4 == 1 and cancelled(i)),
    ({"source": "http", "exchange": "ex0"}, lambda i: i % 3 == 0),
    ({"source": "amqp"}, lambda i: False),
]


@pytest.mark.parametrize("params,want", CASES, ids=[urlencode(c[0]) for c in CASES])
def test_each_filter_selects_exactly_its_jobs(jobs, params, want):
    check(jobs, params, want)


def test_due_range_is_inclusive_from_and_exclusive_to(jobs):
    svc, made, base = jobs
    lo = parse_ts(made[100]["deliver_at"])
    hi = parse_ts(made[350]["deliver_at"])
    got = check(jobs, {"deliver_from": format_ts(lo), "deliver_to": format_ts(hi)},
                lambda i: 100 <= i < 350)
    assert got[0]["id"] == made[100]["id"] and got[-1]["id"] == made[349]["id"]
    check(jobs, {"deliver_from": format_ts(lo), "deliver_to": format_ts(hi),
                 "exchange": "ex1", "status": "pending"},
          lambda i: 100 <= i < 350 and i % 3 == 1 and not cancelled(i))
    check(jobs, {"deliver_to": format_ts(lo)}, lambda i: i < 100)
    check(jobs, {"deliver_from": format_ts(hi)}, lambda i: i >= 350)


def test_id_prefix_with_or_without_dashes_and_any_case(jobs):
    svc, made, _ = jobs
    one = made[1234]["id"]
    for prefix in (one, one.replace("-", ""), one.upper(), one[:13], one[:8]):
        got, _ = listed(svc, {"id_prefix": prefix}, limit=1000)
        ids = [j["id"] for j in got]
        assert one in ids, prefix
        bare = prefix.replace("-", "").lower()
        assert all(i.replace("-", "").startswith(bare) for i in ids), prefix
        st, _, body = svc.get("/jobs/count?" + urlencode({"id_prefix": prefix}))
        assert st == 200 and body == {"count": len(ids), "capped": False}
    check(jobs, {"id_prefix": one}, lambda i: i == 1234)


def test_paging_under_a_filter_sees_every_job_once(jobs):
    svc, made, _ = jobs
    want = [made[i]["id"] for i in range(N) if i % 3 == 1 and i % 4 == 1]
    for limit in (1, 7, 1000):
        got, pages = listed(svc, {"exchange": "ex1", "q": "Needle"}, limit=limit)
        assert [j["id"] for j in got] == want
        assert pages == max(1, -(-len(want) // limit))


def test_count_caps_at_max(jobs):
    svc, _, _ = jobs
    st, _, body = svc.get("/jobs/count?exchange=ex1&max=10")
    assert st == 200 and body == {"count": 10, "capped": True}
    st, _, body = svc.get("/jobs/count?max=10")
    assert st == 200 and body == {"count": 10, "capped": True}
    st, _, body = svc.get(f"/jobs/count?max={N}")
    assert st == 200 and body == {"count": N, "capped": False}
    st, _, body = svc.get("/jobs/count?status=cancelled")
    assert st == 200 and body == {"count": len(range(0, N, 11)), "capped": False}


BAD = [
    ("q", {"q": "ab"}), ("q", {"q": ""}), ("q", {"q": "x" * 257}),
    ("id_prefix", {"id_prefix": "abc"}), ("id_prefix", {"id_prefix": "01xz"}),
    ("id_prefix", {"id_prefix": "0" * 33}),
    ("header", {"header": "novalue"}), ("header", {"header": ":v"}),
    ("deliver_from", {"deliver_from": "yesterday"}),
    ("deliver_to", {"deliver_to": "2040-13-01T00:00:00Z"}),
    ("status", {"status": "done", "q": "Needle"}),
]


@pytest.mark.parametrize("field,params", BAD, ids=[urlencode(b[1])[:40] for b in BAD])
def test_bad_filters_are_400_naming_the_parameter(jobs, field, params):
    svc, _, _ = jobs
    for path in ("/jobs", "/jobs/count"):
        assert_error(svc.get(path + "?" + urlencode(params)), 400,
                     "invalid_argument", field)


def test_bad_max_is_400(jobs):
    svc, _, _ = jobs
    for bad in ("0", "-1", "x", "10000001"):
        assert_error(svc.get(f"/jobs/count?max={bad}"), 400, "invalid_argument", "max")
    assert_error(svc.get("/jobs/count?colour=red"), 400, "invalid_argument", "colour")


def index_lag(svc):
    """rmqs_search_index_lag_jobs from GET /metrics."""
    return int(metric(svc, "rmqs_search_index_lag_jobs"))


def forget_the_index(path):
    """The side tables and mark as a database indexed up to nothing has
    them (a crash before the indexer's first batch, or jobs restored behind
    the store's back)."""
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE search_index SET mark = 0")
        db.execute("DELETE FROM job_headers")
        db.execute("INSERT INTO jobs_body_fts (jobs_body_fts) VALUES ('delete-all')")
    db.close()


def found_once(svc, params, job_id):
    """GET /jobs and /jobs/count under params name exactly job_id."""
    st, _, body = svc.get("/jobs?" + urlencode(params))
    assert st == 200 and [j["id"] for j in body["jobs"]] == [job_id], (params, body)
    st, _, body = svc.get("/jobs/count?" + urlencode(params))
    assert st == 200 and body == {"count": 1, "capped": False}, (params, body)


BULK = 30000


def test_found_at_once_after_catch_up_and_after_kill9_restarts(service, store):
    svc = service()
    later = time.time() + 3 * 3600
    for start in range(0, BULK, 1000):
        batch = [{"exchange": "", "routing_key": "bulk", "deliver_at": format_ts(later),
                  "headers": {"kind": "bulk"}, "body": f"bulk body {i}"}
                 for i in range(start, start + 1000)]
        st, _, body = svc.post("/schedule/batch", batch)
        assert st == 201, body
    if store == "sqlite":  # a backlog for the indexer to work off
        svc.kill9()
        forget_the_index(svc.db)
        svc.restart()

    tag = uuid.uuid4().hex
    st, _, job = svc.post("/schedule", {
        "exchange": "", "routing_key": "probe", "deliver_at": format_ts(later),
        "headers": {"probe": f"p-{tag}"}, "body": f"text with needle-{tag} in it"})
    assert st == 201, job
    # at once: the newest job, above the indexer's mark on SQLite
    found_once(svc, {"header": f"probe:p-{tag}"}, job["id"])
    found_once(svc, {"q": f"needle-{tag}"}, job["id"])
    found_once(svc, {"q": f"needle-{tag}", "routing_key": "probe"}, job["id"])
    if store == "sqlite":
        # the mark only grows here (nothing purged): still below the probe
        # after the searches, so they read the tail
        assert index_lag(svc) > 0, "indexed before the searches: tail untested"
        svc.kill9()  # during the catch-up
        svc.restart()
    wait_until(lambda: index_lag(svc) == 0, 120, "the indexer caught up")
    found_once(svc, {"header": f"probe:p-{tag}"}, job["id"])
    found_once(svc, {"q": f"needle-{tag}"}, job["id"])
    for params in ({"header": "kind:bulk"}, {"q": "bulk body"},
                   {"q": "bulk body", "routing_key": "bulk"}):
        st, _, body = svc.get("/jobs/count?" + urlencode(params))
        assert st == 200 and body == {"count": BULK, "capped": False}, (params, body)
    st, _, body = svc.get("/jobs/count?" + urlencode({"q": "bulk body 29999"}))
    assert st == 200 and body == {"count": 1, "capped": False}, body
