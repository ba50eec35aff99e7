"""schedule()'s batching against the real service: many concurrent calls
in few requests, each caller its own job or its own error, the bound on
pending calls, the byte budget, timeouts and close()."""

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from rmq_scheduler import (AbortError, Client, ForbiddenError,
                           InvalidArgumentError, PayloadTooLargeError,
                           TimeoutError)
from service import Service, batch_requests


def job(**extra):
    return {"exchange": "orders", "routing_key": "batch", "body": "b",
            "delay_ms": 3600000, **extra}


@pytest.fixture(scope="module")
def svc():
    s = Service(args=["--allow-exchanges", "orders",
                      "--max-body-bytes", "262144"]).start()
    yield s
    s.destroy()


def test_10000_schedule_async_calls_from_4_threads_in_at_most_100_requests(svc):
    # The default linger (2 ms): four Python threads sharing the GIL with
    # the sender threads make calls slower than a 2 ms batch fills; the
    # batch keeps growing while every sender is busy (with batches cut at
    # 2 ms regardless, this made 32 to 129 requests here).
    # 60 s per request: the service under ASan, beside another test, took
    # up to 2.7 s per 1,000-item batch, and the batches queue at its one
    # writer.
    with Client(svc.url, timeout=60) as c:
        before = batch_requests(svc)
        futures = [[] for _ in range(4)]

        def produce(t):
            for i in range(2500):
                n = t * 2500 + i
                futures[t].append(c.schedule_async(
                    job(routing_key="tenk", body={"i": n})))

        t0 = time.monotonic()
        threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        jobs = [f.result(60) for fs in futures for f in fs]
        elapsed = time.monotonic() - t0
        assert len({j["id"] for j in jobs}) == 10000
        requests = batch_requests(svc) - before
        assert requests <= 100, requests
        assert c.requests == requests
        assert c.count(routing_key="tenk") == {"count": 10000, "capped": False}
        # Each caller got the job of its own item.
        for n in (0, 4321, 9999):
            assert c.get(jobs[n]["id"])["body"] == {"i": n}
        print(f"10000 schedule_async() calls: {requests:.0f} requests, "
              f"{elapsed:.2f} s")


def test_2000_threads_calling_schedule_in_at_most_20_requests(svc):
    # 200 ms of linger: 2,000 threads released by a barrier wake over more
    # than 50 ms here, and each call blocks its thread until its answer.
    with Client(svc.url, linger=0.2) as c:
        before = batch_requests(svc)
        n = 2000
        barrier = threading.Barrier(n)
        results = [None] * n

        def call(i):
            barrier.wait()
            results[i] = c.schedule(job(routing_key="threads", body={"i": i}))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({r["id"] for r in results}) == n
        requests = batch_requests(svc) - before
        assert requests <= n // 100, requests
        assert c.count(routing_key="threads") == {"count": n, "capped": False}
        assert c.get(results[1234]["id"])["body"] == {"i": 1234}


def test_callers_awaiting_their_jobs_share_requests_a_lone_caller_waits_for_nobody(svc):
    with Client(svc.url) as c:
        # 64 threads, 5 jobs each, one at a time: while the 4 senders are
        # busy, the calls made meanwhile go together when one is free.
        before = batch_requests(svc)
        ids = []

        def caller(k):
            for i in range(5):
                ids.append(c.schedule(job(routing_key="rounds",
                                          body={"k": k, "i": i}))["id"])

        threads = [threading.Thread(target=caller, args=(k,))
                   for k in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(ids)) == 320
        requests = batch_requests(svc) - before
        assert 5 <= requests <= 160, requests
        # One caller, one job at a time: each call a request of its own,
        # sent at once (not held for calls that cannot come).
        before = batch_requests(svc)
        for i in range(20):
            c.schedule(job(routing_key="lone", body={"i": i}))
        assert batch_requests(svc) - before == 20
        assert c.count(routing_key="lone") == {"count": 20, "capped": False}


def test_invalid_items_each_caller_its_own_error(svc):
    # 200 ms: the 1,000 calls are made within it on a loaded machine too
    # (20 ms made two batches beside another test: 10 requests).
    with Client(svc.url, linger=0.2) as c:
        before = batch_requests(svc)
        futures = []
        for i in range(1000):
            if i % 7 == 3:
                j = job(routing_key="mixed", delay_ms=-1)
            elif i == 600:
                j = job(routing_key="mixed", exchange="payments")
            elif i == 601:
                j = job(routing_key="mixed", colour="red")
            elif i == 602:
                j = job(routing_key="mixed", exchange="nope")
            else:
                j = job(routing_key="mixed", body={"i": i})
            futures.append(c.schedule_async(j))
        wait(futures, 30)
        ok = 0
        for i, f in enumerate(futures):
            e = f.exception()
            if i % 7 == 3:
                assert isinstance(e, InvalidArgumentError), (i, e)
                assert e.field == "delay_ms"
                assert "negative" in e.message
            elif i in (600, 602):
                assert isinstance(e, ForbiddenError), (i, e)
                assert e.field == "exchange"
            elif i == 601:
                assert isinstance(e, InvalidArgumentError), (i, e)
                assert e.field == "colour"
            else:
                assert e is None, (i, e)
                ok += 1
        assert ok == 1000 - 143 - 3
        assert c.count(routing_key="mixed") == {"count": ok, "capped": False}
        # 144 invalid, 50 listed per 400: 3 answers of 400, 2 of 403, a 201.
        assert batch_requests(svc) - before <= 8


def test_back_pressure_never_more_than_max_outstanding(svc):
    with Client(svc.url, max_outstanding=50, max_batch=20,
                linger=0.001) as c:
        peak = 0
        stop = threading.Event()

        def watch():
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, c.outstanding)
                time.sleep(0.0005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        with ThreadPoolExecutor(64) as pool:
            results = list(pool.map(
                lambda i: c.schedule(job(routing_key="bp")), range(2000)))
        stop.set()
        watcher.join()
        assert len(results) == 2000
        assert 0 < peak <= 50, peak
        assert c.outstanding == 0
        assert c.count(routing_key="bp") == {"count": 2000, "capped": False}

    # With nothing answering, the 51st call waits for room (and close()
    # ends the wait with AbortError).
    mute, held = _mute_server()
    c = Client(f"http://127.0.0.1:{mute.getsockname()[1]}", timeout=1.0,
               max_outstanding=3)
    for _ in range(3):
        c.schedule_async(job())
    blocked = ThreadPoolExecutor(1).submit(c.schedule_async, job())
    time.sleep(0.2)
    assert not blocked.done()
    assert c.outstanding == 3
    c.close()
    with pytest.raises(AbortError):
        blocked.result(5)
    _close_mute(mute, held)


def test_max_batch_bytes_cuts_413_splits_one_too_large_fails_alone(svc):
    body = "x" * 10 * 1024
    with Client(svc.url, max_batch_bytes=100 * 1024) as c:
        futures = [c.schedule_async(job(routing_key="bytes", body=body))
                   for _ in range(50)]
        wait(futures)
        assert all(f.exception() is None for f in futures)
        # About 10 items per request (100 KiB of 10 KiB bodies).
        assert 5 <= c.requests <= 8, c.requests
    # A budget above the service's --max-body-bytes (256 KiB): 413, halves.
    with Client(svc.url, max_batch_bytes=900 * 1024) as big:
        futures = [big.schedule_async(job(routing_key="split", body=body))
                   for _ in range(60)]
        futures.append(big.schedule_async(
            job(routing_key="split", body="y" * 300 * 1024)))
        wait(futures)
        assert sum(f.exception() is None for f in futures) == 60
        assert isinstance(futures[60].exception(), PayloadTooLargeError)
        assert big.count(routing_key="split") == {"count": 60, "capped": False}


def _mute_server():
    """A server that accepts and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held = []

    def accept():
        while True:
            try:
                held.append(s.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return s, held


def _close_mute(s, held):
    s.close()
    for h in held:
        h.close()


def test_timeouts_and_close():
    mute, held = _mute_server()
    try:
        slow = Client(f"http://127.0.0.1:{mute.getsockname()[1]}", timeout=0.15)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as ei:
            slow.status()
        assert ei.value.code == "timeout"
        with pytest.raises(TimeoutError):
            slow.schedule(job())
        assert time.monotonic() - t0 < 2
        slow.close()
        with pytest.raises(AbortError):
            slow.schedule(job())
        # schedule()'s own timeout: the wait for the answer.
        patient = Client(f"http://127.0.0.1:{mute.getsockname()[1]}",
                         timeout=5)
        with pytest.raises(TimeoutError):
            patient.schedule(job(), timeout=0.1)
        patient.close()
    finally:
        _close_mute(mute, held)
