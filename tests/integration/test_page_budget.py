"""Every list answer is bounded (issue 21, item 4): a page of GET /jobs and of
GET /schedules stops at --page-max-bytes and gives its `next` cursor, whatever
`limit` asks; one item larger than the budget comes out alone; following
`next` gives every item exactly once, in order; and two concurrent lists of
many ~1 MiB jobs with limit=1000 leave the service's memory flat (before the
budget, one such answer held every job at once: 120 MiB for 120 jobs, and two
concurrent ones took the service from 28 MB to 1.07 GB resident).

The store applies the budget while it collects the page (store_common.h,
"Page budgets"): the RSS bound proves that, not only the answer sizes.
"""

import os
import threading

from helpers import rss_bytes
from pylib.procs import peak_rss_bytes, reset_peak_rss

MiB = 1024 * 1024
BODY = MiB                      # the usual job: a 1 MiB text body
BIG = 4 * MiB + MiB // 2        # one job larger than the budget
BUDGET = 3 * MiB + MiB // 2     # --page-max-bytes: three usual jobs fit
N_JOBS = 48
BIG_AT = 20                     # its position in deliver_at order
# Two concurrent walks hold at most a page each, collected and written
# (the jobs, the JSON, the connection's copy): a few budgets, where one
# unbounded answer alone is N_JOBS MiB.
RSS_GROWTH_MAX = 8 * BUDGET
ITEM_OVERHEAD = 512             # STORE_ITEM_OVERHEAD


def start(service):
    # ASan keeps freed memory in a quarantine (256 MiB by default): a small
    # one lets RSS show what the service really holds.
    asan = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                  "quarantine_size_mb=4"]))
    return service("--page-max-bytes", str(BUDGET),
                   "--max-body-bytes", str(8 * MiB),
                   "--write-queue-bytes", str(16 * MiB),
                   extra_env={"ASAN_OPTIONS": asan})


def body_of(i, size):
    head = f"job {i:03d} "
    return head + "x" * (size - len(head))


def store_jobs(svc):
    """N_JOBS jobs, far in the future, in deliver_at order of i; their ids
    in that order."""
    ids = []
    for i in range(N_JOBS):
        job = svc.schedule({"exchange": "page-budget", "routing_key": "rk",
                            "delay_ms": 3600000 + 1000 * i,
                            "body": body_of(i, BIG if i == BIG_AT else BODY)})
        ids.append(job["id"])
    return ids


def walk(svc, path, key, limit=1000):
    """Every page of path with limit, following next: [(items, raw bytes)]."""
    pages, after = [], None
    while True:
        q = f"{path}?limit={limit}" + (f"&after={after}" if after else "")
        r = svc.get(q, timeout=60)
        assert r.status == 200, f"GET {q} -> {r.status} {r.raw[:300]!r}"
        pages.append((r.body[key], len(r.raw)))
        after = r.body["next"]
        if after is None:
            return pages
        assert r.body[key], f"a page with a next holds an item: {q}"
        assert len(pages) <= 1000, "the cursor never ends"


def expected_pages(sizes):
    """The store's rule over item sizes: take while the page stays within
    the budget, the first item always."""
    pages, cur, used = [], 0, 0
    for s in sizes:
        if cur and used + s > BUDGET:
            pages.append(cur)
            cur, used = 0, 0
        cur += 1
        used += s
    return pages + ([cur] if cur else [])


def check_pages(pages, ids, report, what):
    got = [j["id"] for items, _ in pages for j in items]
    assert got == ids, f"{what}: every job exactly once, in order"
    for n, (items, raw) in enumerate(pages):
        assert len(items) == 1 or raw <= BUDGET, \
            f"{what}: page {n} holds {len(items)} jobs in {raw} bytes, over {BUDGET}"
    sizes = [len(body_of(i, BIG if i == BIG_AT else BODY)) + ITEM_OVERHEAD
             for i in range(N_JOBS)]
    assert [len(items) for items, _ in pages] == expected_pages(sizes), \
        f"{what}: pages stop at the budget, never earlier"
    big = [items for items, _ in pages if any(j["id"] == ids[BIG_AT] for j in items)]
    assert len(big) == 1 and len(big[0]) == 1, "the oversize job comes out alone"
    report(f"{what}: {len(pages)} pages for {len(ids)} jobs with limit=1000, "
           f"budget {BUDGET} bytes; jobs per page "
           f"{[len(items) for items, _ in pages]}; largest multi-job page "
           f"{max(raw for items, raw in pages if len(items) > 1)} bytes; the "
           f"oversize page {max(raw for items, raw in pages if len(items) == 1)} bytes")


def test_job_pages_stop_at_the_budget_and_memory_stays_flat(service, store, report):
    svc = start(service)
    ids = store_jobs(svc)

    # alone (checked below, after the memory: so a store that collects
    # everything and cuts the page later fails on its memory, not only on
    # the page sizes)
    alone = walk(svc, "/jobs", "jobs")

    # two concurrent walks with limit=1000: the peak of resident memory
    # (VmHWM, reset first, so no transient peak is missed) stays within a
    # few budgets of what the service held before
    before = rss_bytes(svc.pid)
    reset_peak_rss(svc.pid)
    results, errors = {}, []

    def lister(k):
        try:
            results[k] = walk(svc, "/jobs", "jobs")
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)
    threads = [threading.Thread(target=lister, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a list did not finish"
    assert not errors, errors
    peak = peak_rss_bytes(svc.pid)
    report(f"RSS ({store}): {before / MiB:.1f} MiB before, peak "
           f"{peak / MiB:.1f} MiB during two concurrent limit=1000 lists of "
           f"{N_JOBS} jobs ({((N_JOBS - 1) * BODY + BIG) / MiB:.1f} MiB of "
           f"bodies); growth {(peak - before) / MiB:.1f} MiB, bound "
           f"{RSS_GROWTH_MAX / MiB:.0f} MiB")
    assert peak - before <= RSS_GROWTH_MAX, \
        f"RSS grew {(peak - before) / MiB:.1f} MiB during two lists, over " \
        f"{RSS_GROWTH_MAX / MiB:.0f} MiB: a page is not bounded while collected"
    # the pages, their sizes, every job once in order
    check_pages(alone, ids, report, f"GET /jobs ({store})")
    for k in range(2):
        check_pages(results[k], ids, report, f"concurrent GET /jobs #{k} ({store})")


def test_a_shorter_limit_still_wins(service):
    svc = start(service)
    ids = store_jobs(svc)[:6]
    pages = walk(svc, "/jobs", "jobs", limit=2)
    assert [j["id"] for items, _ in pages[:3] for j in items] == ids
    assert [len(items) for items, _ in pages[:3]] == [2, 2, 2]


def test_schedule_pages_stop_at_the_budget(service, report):
    svc = start(service)
    names = [f"page-budget-{i:02d}" for i in range(7)]
    for i, name in enumerate(names):
        spec = {"cron": "30 8 * * *", "timezone": "UTC",
                "job": {"exchange": "page-budget", "routing_key": "rk",
                        "body": body_of(i, BIG if i == 3 else BODY)}}
        r = svc.request("PUT", f"/schedules/{name}", spec, timeout=60)
        assert r.status == 201, f"PUT /schedules/{name} -> {r.status} {r.raw[:300]!r}"
    pages = walk(svc, "/schedules", "schedules")
    assert [s["name"] for items, _ in pages for s in items] == names
    for n, (items, raw) in enumerate(pages):
        assert len(items) == 1 or raw <= BUDGET, \
            f"page {n}: {len(items)} schedules in {raw} bytes, over {BUDGET}"
    # three 1 MiB templates to a page; the 4.5 MiB one alone
    assert [len(items) for items, _ in pages] == [3, 1, 3]
    report(f"GET /schedules: schedules per page {[len(i) for i, _ in pages]}, "
           f"bytes {[raw for _, raw in pages]}")


def test_a_bulk_status_is_bounded_by_its_filter_cap(service, report):
    # the operation keeps its filter and GET /jobs/bulk/{id} echoes it; the
    # filter's strings have no cap of their own, so the filter has one
    svc = start(service)
    r = svc.post("/jobs/bulk", {"action": "cancel",
                                "filter": {"routing_key": "r" * 9000}})
    assert r.status == 400 and r.body["error"]["field"] == "filter", r.body
    r = svc.post("/jobs/bulk", {"action": "cancel",
                                "filter": {"routing_key": "r" * 8000}})
    assert r.status == 202, r.body
    got = svc.get(r.headers["Location"])
    assert got.status == 200 and got.body["filter"]["routing_key"] == "r" * 8000
    assert len(got.raw) < 9 * 1024, len(got.raw)
    report(f"GET /jobs/bulk/{{id}} with the largest filter: {len(got.raw)} bytes")
