"""GET /jobs?order= (issue 25): due (the default), -due, created and
-created. Among 330 jobs sharing 13 due times (ties), some cancelled, each
order paged to the end lists every matching job exactly once, in order,
with and without filters, pages cut by `limit` and by the page budget
(--page-max-bytes); a cursor belongs to its order (another order is 400,
`field` after); a bad order is 400 on the list and on the count, which
otherwise ignores it. Run on both stores."""

import time
from urllib.parse import urlencode

import pytest

from helpers import assert_error, format_ts

N = 330
ORDERS = ("due", "-due", "created", "-created")
PAD = "x" * 900  # about 1.5 KB a job: a 64 KiB page holds about 40


def due_of(i):
    """Job i's due time, in seconds after the base: 13 values, scrambled."""
    return (i * 7) % 13


def cancelled(i):
    return i % 11 == 0


@pytest.fixture(scope="module")
def jobs(module_service):
    """The service and the ids of jobs 0..N-1, created in that order."""
    svc = module_service("--page-max-bytes", "65536")
    base = time.time() + 3 * 3600
    ids = []
    for start in range(0, N, 110):
        batch = [{"exchange": f"ex{i % 3}", "routing_key": "rk",
                  "deliver_at": format_ts(base + due_of(i)),
                  "headers": {"tenant": f"t{i % 5}"},
                  "body": f"job {i} {PAD}"}
                 for i in range(start, min(N, start + 110))]
        st, _, body = svc.post("/schedule/batch", batch)
        assert st == 201, body
        ids.extend(j["id"] for j in body["jobs"])
    for i in range(0, N, 11):
        st, _, body = svc.delete(f"/jobs/{ids[i]}")
        assert st == 200 and body["status"] == "cancelled", body
    return svc, ids


def sequence(order, want):
    """The job numbers with want(i), in order."""
    chosen = [i for i in range(N) if want(i)]
    if order == "due":
        return sorted(chosen, key=lambda i: (due_of(i), i))
    if order == "-due":
        return sorted(chosen, key=lambda i: (due_of(i), i), reverse=True)
    return chosen if order == "created" else chosen[::-1]


def listed(svc, params, limit):
    """Every job listed for params, following the cursors; the pages."""
    out, after, pages = [], None, 0
    while True:
        q = dict(params, limit=limit)
        if after:
            q["after"] = after
        st, _, body = svc.get("/jobs?" + urlencode(q))
        assert st == 200, body
        assert body["jobs"] or body["next"] is None, body
        out.extend(body["jobs"])
        pages += 1
        after = body["next"]
        if after is None:
            return out, pages


CASES = [
    ({}, lambda i: True),
    ({"status": "pending"}, lambda i: not cancelled(i)),
    ({"status": "cancelled"}, cancelled),
    ({"exchange": "ex1"}, lambda i: i % 3 == 1),
    ({"exchange": "ex2", "status": "pending"}, lambda i: i % 3 == 2 and not cancelled(i)),
    ({"header": "tenant:t2"}, lambda i: i % 5 == 2),
    ({"q": "job 1"}, lambda i: str(i).startswith("1")),
]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("params,want", CASES, ids=[urlencode(c[0]) or "all" for c in CASES])
def test_every_order_lists_every_job_once_in_order(jobs, order, params, want):
    svc, ids = jobs
    expected = [ids[i] for i in sequence(order, want)]
    for limit in (23, 1000):  # cut by the limit, then by the page budget
        got, pages = listed(svc, dict(params, order=order), limit)
        assert [j["id"] for j in got] == expected, (order, params, limit)
        if limit == 1000 and len(expected) > 60:
            assert pages > 1, "the page budget cuts a page of 1.5 KB jobs"
    # the count takes the same query string and ignores the order
    st, _, body = svc.get("/jobs/count?" + urlencode(dict(params, order=order)))
    assert st == 200 and body == {"count": len(expected), "capped": False}, body


def test_due_is_the_default_order(jobs):
    svc, _ = jobs
    default, _ = listed(svc, {"status": "pending"}, 50)
    due, _ = listed(svc, {"status": "pending", "order": "due"}, 50)
    assert [j["id"] for j in default] == [j["id"] for j in due]


def test_newest_first_shows_the_newest_job_first(jobs):
    """The dashboard's Jobs page: the job created last heads -created,
    whatever its due time; the latest due heads -due."""
    svc, ids = jobs
    st, _, body = svc.get("/jobs?order=-created&limit=1")
    assert st == 200 and body["jobs"][0]["id"] == ids[N - 1], body
    st, _, body = svc.get("/jobs?order=-due&limit=1")
    latest = max(range(N), key=lambda i: (due_of(i), i))
    assert st == 200 and body["jobs"][0]["id"] == ids[latest], body


def test_a_cursor_belongs_to_its_order(jobs):
    svc, _ = jobs
    cursors = {}
    for order in ORDERS:
        st, _, body = svc.get(f"/jobs?order={order}&limit=5")
        assert st == 200 and body["next"], body
        cursors[order] = body["next"]
    for made_in, cursor in cursors.items():
        for order in ORDERS:
            r = svc.get("/jobs?" + urlencode({"order": order, "after": cursor, "limit": 5}))
            if order == made_in:
                assert r.status == 200 and len(r.body["jobs"]) == 5, r.body
            else:
                assert_error(r, 400, "invalid_argument", field="after")


@pytest.mark.parametrize("path", ["/jobs", "/jobs/count"])
@pytest.mark.parametrize("bad", ["newest", "DUE", "-", "due,created", ""])
def test_a_bad_order_is_400_naming_order(jobs, path, bad):
    svc, _ = jobs
    assert_error(svc.get(f"{path}?order={bad}"), 400, "invalid_argument", field="order")
