"""GET /stats: the in-memory ring of per-interval samples reflects the jobs
scheduled and sent in each interval, with lateness percentiles and the
pending gauge; a bad window is 400. The interval is shortened with
--stats-interval-ms so the test takes seconds, not minutes."""

import time

from helpers import assert_error, parse_ts, wait_until

INTERVAL_MS = 200


def _sums(body):
    keys = ("scheduled", "sent", "failed", "cancelled")
    return {k: sum(s[k] for s in body["samples"]) for k in keys}


def test_ring_reflects_jobs_scheduled_and_sent(service, amqp):
    svc = service("--stats-interval-ms", str(INTERVAL_MS))
    t0 = time.time()
    now_jobs = [svc.schedule({"exchange": amqp.exchange,
                              "routing_key": amqp.routing_key,
                              "body": f"n{i}", "delay_ms": 0})["id"]
                for i in range(5)]
    later = [svc.schedule({"exchange": amqp.exchange,
                           "routing_key": amqp.routing_key,
                           "body": "later", "delay_ms": 600_000})["id"]
             for _ in range(3)]
    gone = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                         "body": "gone", "delay_ms": 600_000})["id"]
    assert svc.delete(f"/jobs/{gone}").status == 200
    amqp.wait_for_jobs(now_jobs, timeout=10)
    for job_id in now_jobs:
        svc.wait_status(job_id, "sent", timeout=10)
    t_sent = time.time()

    def sampled():
        status, _, body = svc.get("/stats?window=15m")
        assert status == 200, body
        sums = _sums(body)
        if sums["sent"] < 5 or sums["cancelled"] < 1:
            return None
        # and a sample taken after the last send: the pending gauge is current
        last = body["samples"][-1]
        return body if parse_ts(last["t"]) > t_sent else None

    body = wait_until(sampled, 10, "the ring to hold the sends and the cancel")
    assert body["interval_s"] == INTERVAL_MS / 1000
    assert body["window_s"] == 900
    assert _sums(body) == {"scheduled": 9, "sent": 5, "failed": 0, "cancelled": 1}
    ts = [parse_ts(s["t"]) for s in body["samples"]]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    assert t0 - 1 <= ts[0] and ts[-1] <= time.time() + 0.01
    # samples are an interval apart (however loaded the machine, never closer
    # than a fraction of it)
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    assert all(g >= INTERVAL_MS / 1000 * 0.5 for g in gaps), gaps
    assert body["samples"][-1]["pending"] == len(later)
    with_sends = [s for s in body["samples"] if s["sent"] > 0]
    for s in body["samples"]:
        if s["sent"] == 0:
            assert s["late_p50_ms"] is None and s["late_p99_ms"] is None, s
    for s in with_sends:
        assert 0 <= s["late_p50_ms"] <= s["late_p90_ms"] <= s["late_p99_ms"], s
        assert s["late_p99_ms"] <= 60_000, s
    totals = body["totals"]
    assert totals["scheduled"] == 9 and totals["sent"] == 5
    assert totals["cancelled"] == 1 and totals["failed"] == 0
    assert totals["jobs"]["pending"] == 3 and totals["jobs"]["sent"] == 5

    # a window shorter than the history keeps only its newest samples
    status, _, short = svc.get("/stats?window=1")
    assert status == 200
    assert short["window_s"] == 1
    assert 0 < len(short["samples"]) < len(body["samples"]) + 10
    assert all(parse_ts(s["t"]) > parse_ts(short["now"]) - 1 - 0.001
               for s in short["samples"])
    # the default window is an hour
    assert svc.get("/stats").body["window_s"] == 3600
    assert svc.get("/stats?window=6h").body["window_s"] == 21600


def test_bad_window_is_400(service):
    svc = service("--stats-interval-ms", str(INTERVAL_MS))
    for w in ("2h", "0", "-5", "abc", "21601", "1.5", ""):
        assert_error(svc.get(f"/stats?window={w}"), 400, "invalid_argument", "window")
    assert_error(svc.get("/stats?windw=1h"), 400, "invalid_argument", "windw")
