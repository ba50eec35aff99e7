"""--write-queue-bytes bounds what waits parsed in memory for the database:
beyond the budget a POST waits, suspended and unparsed, and goes on once
earlier requests are answered. Nothing is refused or lost because of it, and
a SIGTERM with requests waiting answers every one (201 stored, or 503
unavailable storing nothing) and exits 0."""

import collections
import concurrent.futures
import os
import re
import signal
import time

from helpers import http_request, http_request_text, wait_until

CLIENTS = 24
JOBS_PER_BATCH = 1000


def _batch(tag, k):
    return [{"exchange": "", "routing_key": "q", "body": f"{tag}-{k}-{i}",
             "delay_ms": 3_600_000, "headers": {"t-batch": f"{tag}-{k}"}}
            for i in range(JOBS_PER_BATCH)]


def _post_all(port, tag, timeout=60):
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        futs = [pool.submit(http_request, port, "POST", "/schedule/batch",
                            _batch(tag, k), {"Prefer": "return=minimal"},
                            timeout)
                for k in range(CLIENTS)]
        out = []
        for f in futs:
            try:
                out.append(f.result())
            except Exception as e:  # noqa: BLE001 - a dropped connection
                out.append(e)
        return out


def _commit_sizes(svc):
    return [int(m) for m in re.findall(r'msg="group commit" requests=(\d+)',
                                        svc.log())]


def test_requests_beyond_the_budget_wait_their_turn_and_all_succeed(service):
    # A budget of one byte admits one request at a time (one is always
    # admitted when none is), so every commit holds exactly one batch.
    svc = service("--write-queue-bytes", "1", log_level="debug")
    answers = _post_all(svc.port, "a")
    assert all(getattr(a, "status", None) == 201 for a in answers), \
        [a if isinstance(a, Exception) else (a.status, a.body) for a in answers][:3]
    ids = [j["id"] for a in answers for j in a.body["jobs"]]
    assert len(ids) == len(set(ids)) == CLIENTS * JOBS_PER_BATCH
    sizes = _commit_sizes(svc)
    assert sizes and max(sizes) == 1, f"commits held {sorted(set(sizes))} requests"
    stored, _ = svc.list_all()
    assert len(stored) == CLIENTS * JOBS_PER_BATCH


def test_without_a_budget_commits_group_requests(service):
    """The control for the test above: the same load with no budget is
    committed several requests at a time (so max(sizes) == 1 there is the
    budget's doing)."""
    svc = service("--write-queue-bytes", "0", log_level="debug")
    answers = _post_all(svc.port, "b")
    assert all(getattr(a, "status", None) == 201 for a in answers)
    assert max(_commit_sizes(svc)) > 1


def _waiting(svc):
    text = http_request_text(svc.port, "/metrics").text
    m = re.search(r"^rmqs_http_requests_waiting (\d+)$", text, re.M)
    assert m, "rmqs_http_requests_waiting missing from /metrics"
    return int(m.group(1))


def test_sigterm_with_requests_waiting_answers_every_one(service):
    svc = service("--write-queue-bytes", "1", "--shutdown-grace-s", "20")
    assert _waiting(svc) == 0
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(_post_all, svc.port, "c")
        waiting = wait_until(lambda: (lambda n: n if n >= 3 else 0)(_waiting(svc)),
                             20, "requests waiting for admission",
                             interval=0.005)
        os.kill(svc.pid, signal.SIGTERM)
        answers = fut.result(timeout=90)
    code = svc.proc.wait(timeout=30)
    svc.exit_codes.append(code)
    assert code == 0, f"exit status {code}"
    ok = [a for a in answers if getattr(a, "status", None) == 201]
    refused = [a for a in answers if getattr(a, "status", None) == 503]
    dropped = [a for a in answers if isinstance(a, Exception)]
    other = [a for a in answers if not isinstance(a, Exception)
             and a.status not in (201, 503)]
    assert not other, [(a.status, a.body) for a in other][:3]
    for a in refused:
        assert a.body["error"]["code"] == "unavailable", a.body
    # what the stop left stored, read back by the service on either store
    svc.restart()
    stored = collections.Counter(j["headers"]["t-batch"] for j in svc.list_all()[0])
    # Every batch is stored whole or not at all; every 201 is stored, every
    # 503 is not; a connection the stop closed unanswered may be either.
    assert all(n == JOBS_PER_BATCH for n in stored.values()), stored
    for k, a in enumerate(answers):
        status = getattr(a, "status", None)
        if status == 201:
            assert f"c-{k}" in stored, f"batch {k} answered 201 but not stored"
        elif status == 503:
            assert f"c-{k}" not in stored, f"batch {k} answered 503 but stored"
    # The requests waiting at the signal were answered, not dropped.
    assert len(ok) + len(refused) >= waiting, (len(ok), len(refused), waiting)
    print(f"admission at SIGTERM: {waiting} waiting; {len(ok)} stored (201), "
          f"{len(refused)} refused (503), {len(dropped)} closed unanswered, "
          f"of {CLIENTS}")
