"""A search has a time budget (issue 21, item 2): --search-timeout-ms ends a
list or search past it with 503 search_timeout, and a count with what it
counted, capped; the same search within a larger budget answers in full.
Searches read on connections of their own, so a write never waits for one.

The data makes a body search walk most of the table: 15,000 jobs whose 4 KB
bodies lack the term, due first, then 500 that end with it, due last (the
newest jobs all match, so the search walks the listing order and checks
each body rather than use the trigram index).
"""

import time

from helpers import assert_error, format_ts

N_MISS, N_HIT = 15000, 500
TERM = "needle-at-the-end"
FILLER = "x" * 4000


def fill(svc):
    base = time.time() + 86400
    jobs = [{"exchange": "search", "routing_key": "r", "body": FILLER,
             "deliver_at": format_ts(base + i)} for i in range(N_MISS)]
    jobs += [{"exchange": "search", "routing_key": "r", "body": FILLER + TERM,
              "deliver_at": format_ts(base + N_MISS + i)} for i in range(N_HIT)]
    for at in range(0, len(jobs), 200):
        st, _, body = svc.post("/schedule/batch", jobs[at:at + 200])
        assert st == 201, body


def test_a_search_past_its_budget_ends_and_a_count_answers_capped(service, report):
    svc = service("--search-timeout-ms", "60000")
    fill(svc)
    t0 = time.monotonic()
    st, _, full = svc.get(f"/jobs/count?q={TERM}")
    full_ms = (time.monotonic() - t0) * 1000
    assert st == 200 and full == {"count": N_HIT, "capped": False}, full
    st, _, page = svc.get(f"/jobs?q={TERM}&limit=10")
    assert st == 200 and len(page["jobs"]) == 10, page

    svc.terminate()
    svc.args = ["--search-timeout-ms", "10"]
    svc.restart()
    t0 = time.monotonic()
    resp = svc.get(f"/jobs?q={TERM}&limit=10")
    cut_ms = (time.monotonic() - t0) * 1000
    err = assert_error(resp, 503, "search_timeout")
    assert "--search-timeout-ms" in err["message"], err
    st, _, part = svc.get(f"/jobs/count?q={TERM}")
    assert st == 200 and part["capped"] is True and part["count"] < N_HIT, part
    # a narrow search within the same budget still answers in full
    st, _, narrow = svc.get("/jobs/count?status=sent")
    assert st == 200 and narrow == {"count": 0, "capped": False}, narrow
    # and writes go on
    svc.schedule({"exchange": "search", "routing_key": "r", "body": "after",
                  "delay_ms": 86400000})
    report(f"search budget on {svc.store}: a body search over "
           f"{N_MISS + N_HIT} jobs of 4 KB took {full_ms:.0f} ms in full; "
           f"with a 10 ms budget the list answered 503 in {cut_ms:.0f} ms and "
           f"the count {part['count']} (capped)")
