"""RabbitMQ faults seen from the service, with timing bounds.

(a) The broker application stops (rabbitmqctl stop_app) for longer than the
    heartbeat interval while jobs fall due: /readyz turns 503 naming the
    broker within a bound and back to 200 after the restart, and the jobs that
    fell due during the outage are all published after it, oldest first,
    without spending an attempt, none early.
(b) The broker freezes (SIGSTOP of its beam.smp: the TCP connection stays
    open, nothing answers, nothing closes) while jobs are due: the heartbeat
    notices it within 3 x heartbeat even with a publish awaiting confirms,
    and after SIGCONT every job arrives, none early.

test_broker_outage.py has the simple versions; these add ordering, timing
bounds and the /readyz body. A background thread polls /readyz every 50 ms
and keeps every answer with its time.
"""

import http.client
import random
import threading
import time

from helpers import format_ts, parse_ts, port_open, wait_until

HEARTBEAT_S = 2
POLL_S = 0.05
EARLY_TOLERANCE_S = 0.001
# After the broker accepts connections again the dispatcher retries with a
# jittered backoff of at most 5 s (README); connecting takes well under 1 s.
RECONNECT_BOUND_S = 5 + 3


class ReadyzWatcher:
    """Polls GET /readyz and records (time sent, status, body, time
    answered); status None and the error text when it did not answer within
    2 s."""

    def __init__(self, svc):
        self.svc = svc
        self.samples = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="readyz-watcher")

    def __enter__(self):
        self.thread.start()
        wait_until(lambda: self.snapshot(), 10, "a first /readyz answer")
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(10)

    def _run(self):
        while not self.stop_event.is_set():
            t = time.time()
            try:
                st, _, body = self.svc.get("/readyz", timeout=2)
            except (OSError, http.client.HTTPException) as e:
                st, body = None, repr(e)
            with self.lock:
                self.samples.append((t, st, body, time.time()))
            self.stop_event.wait(POLL_S)

    def snapshot(self):
        with self.lock:
            return list(self.samples)

    def first(self, status, after):
        """(time, body) of the first answer with this status sent at or after
        `after`, or None."""
        for t, st, body, _ in self.snapshot():
            if t >= after and st == status:
                return t, body
        return None

    def wait_first(self, status, after, timeout, what):
        return wait_until(lambda: self.first(status, after), timeout, what)

    def between(self, t0, t1):
        """The answers to requests sent at t0 or later and answered by t1."""
        return [(t, st, b) for t, st, b, done in self.snapshot()
                if t0 <= t and done <= t1]

    def unanswered(self):
        return [(t, b) for t, st, b, _ in self.snapshot() if st is None]


def assert_broker_down_body(body):
    # "ingest" appears only when an ingest consumer is configured (not here)
    assert set(body) - {"ingest"} == {"status", "database", "broker", "error"}, body
    assert body["status"] == "unavailable", body
    assert body["database"] == "up", body
    assert body["broker"] == "down", body
    assert set(body["error"]) <= {"code", "message", "field"}, body
    assert body["error"]["code"] == "unavailable", body
    assert "broker" in body["error"]["message"].lower(), \
        f"/readyz 503 does not name the broker: {body!r}"


def is_ready_body(body):
    return isinstance(body, dict) and body.get("status") == "ready" and \
        body.get("database") == "up" and body.get("broker") == "up" and \
        set(body) - {"ingest"} == {"status", "database", "broker"} and \
        "error" not in body


def _schedule(svc, amqp, tag, deliver_at):
    return svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                         "body": tag, "deliver_at": format_ts(deliver_at)})


def _assert_none_early(jobs, got):
    for j in jobs:
        due = parse_ts(j["deliver_at"])
        for m in got[j["id"]]:
            assert m.received_at >= due - EARLY_TOLERANCE_S, \
                f"job {j['id']} arrived {(due - m.received_at) * 1000:.1f} ms early"


def test_outage_longer_than_heartbeat_publishes_everything_oldest_first(
        service, amqp_factory, broker, report):
    svc = service("--heartbeat-s", str(HEARTBEAT_S))
    amqp = amqp_factory(durable=True)  # keeps its messages across stop_app
    rng = random.Random()

    with ReadyzWatcher(svc) as watch:
        first = watch.snapshot()[0]
        assert first[1] == 200 and is_ready_body(first[2]), first

        # Due while stop_app is in progress: claimed around the disconnect,
        # so they may take a failed attempt, but they must not be lost.
        now = time.time()
        around = [_schedule(svc, amqp, f"around {i}", now + 0.5 + 0.25 * i)
                  for i in range(8)]

        stop_invoked = time.time()
        broker.stop_app()
        port_closed = time.time()
        t503, body = watch.wait_first(503, stop_invoked, 3 * HEARTBEAT_S + 5,
                                      "/readyz to answer 503 after stop_app")
        assert_broker_down_body(body)
        assert t503 <= port_closed + 3 * HEARTBEAT_S, (
            f"/readyz said 503 only {t503 - port_closed:.1f} s after the AMQP "
            f"port closed (bound {3 * HEARTBEAT_S} s)")

        # Scheduled during the outage, in random order of creation, due
        # during the outage: each must be published after it, in due order.
        base = time.time()
        dues = [base + 0.3 + 0.06 * i for i in range(40)]
        rng.shuffle(dues)
        during = [_schedule(svc, amqp, f"during {i}", d) for i, d in enumerate(dues)]
        last_due = max(parse_ts(j["deliver_at"]) for j in around + during)
        # down longer than the heartbeat interval, with every job due
        down_until = max(last_due + 0.5, t503 + 2 * HEARTBEAT_S)
        wait_until(lambda: time.time() >= down_until, 30,
                   "every job to fall due while the broker is down")
        assert not port_open(broker.port), "the broker came back by itself"
        for j in during:
            job = svc.job(j["id"])
            assert job["status"] == "pending" and job["attempts"] == 0, job

        start_invoked = time.time()
        broker.start_app()
        port_open_at = time.time()
        t200, body = watch.wait_first(200, start_invoked, RECONNECT_BOUND_S + 10,
                                      "/readyz to answer 200 after start_app")
        assert is_ready_body(body), body
        assert t200 <= port_open_at + RECONNECT_BOUND_S, (
            f"/readyz said 200 only {t200 - port_open_at:.1f} s after the AMQP "
            f"port opened (bound {RECONNECT_BOUND_S} s)")

        # never "ready" while the broker was down
        flaps = [s for s in watch.between(t503, start_invoked) if s[1] != 503]
        assert not flaps, f"/readyz was not 503 during the outage: {flaps[:3]}"
        assert not watch.unanswered(), \
            f"/readyz did not answer within 2 s: {watch.unanswered()[:3]}"

    jobs = around + during
    got = amqp.wait_for_jobs([j["id"] for j in jobs], timeout=60)
    _assert_none_early(jobs, got)
    for j in jobs:
        svc.wait_status(j["id"], "sent", timeout=20)

    # Oldest first: the queue keeps the order they were published in.
    order = [m.job_id for m in amqp.snapshot()]
    position = {}
    for i, job_id in enumerate(order):
        position.setdefault(job_id, i)
    by_arrival = sorted(during, key=lambda j: position[j["id"]])
    # due order is next_attempt_at's: the later of deliver_at and the
    # moment the job was accepted (a slow answer makes it the latter)
    arrival_dues = [j["next_attempt_at"] for j in by_arrival]
    assert arrival_dues == sorted(arrival_dues), (
        "jobs that fell due during the outage were not published oldest "
        f"first: next_attempt_at in arrival order {arrival_dues}")
    for j in during:
        assert len(got[j["id"]]) == 1, f"job {j['id']} arrived {len(got[j['id']])} times"
        # not before the broker was asked to start (start_app returns after
        # the port opened: the service may have published by then)
        assert min(m.received_at for m in got[j["id"]]) >= start_invoked, j
        job = svc.job(j["id"])
        assert job["attempts"] == 1 and job["last_error"] is None, (
            f"a job that fell due while the broker was down spent an attempt: {job!r}")
    publish_s = max(m.received_at for j in during for m in got[j["id"]]) - port_open_at
    around_attempts = [svc.job(j["id"])["attempts"] for j in around]
    report(f"broker outage (heartbeat {HEARTBEAT_S} s): down "
           f"{port_open_at - stop_invoked:.1f} s; /readyz 503 "
           f"{t503 - stop_invoked:.2f} s after stop_app began "
           f"({t503 - port_closed:+.2f} s from port closed); 200 again "
           f"{t200 - port_open_at:.2f} s after the port reopened; "
           f"{len(during)} jobs due in the outage all published oldest first, "
           f"the last {publish_s:.2f} s after the port reopened; {len(around)} "
           f"jobs due during stop_app "
           f"took attempts {sorted(around_attempts)}")


def test_frozen_broker_is_noticed_within_3_heartbeats(service, amqp_factory,
                                                      broker, report):
    # Default confirm timeout (10 s): the heartbeat alone must notice the
    # silent broker, also while a publish waits for its confirm.
    svc = service("--heartbeat-s", str(HEARTBEAT_S))
    amqp = amqp_factory(durable=True)

    with ReadyzWatcher(svc) as watch:
        now = time.time()
        # due from just before the freeze to well into it
        jobs = [_schedule(svc, amqp, f"frozen {i}", now + 0.5 + 0.1 * i)
                for i in range(30)]
        last_due = max(parse_ts(j["deliver_at"]) for j in jobs)
        amqp.wait_for(1, timeout=10)  # the service is publishing now
        frozen_at = time.time()
        broker.freeze()
        try:
            t503, body = watch.wait_first(503, frozen_at, 3 * HEARTBEAT_S + 10,
                                          "/readyz to notice the frozen broker")
            assert_broker_down_body(body)
            detect_s = t503 - frozen_at
            assert detect_s <= 3 * HEARTBEAT_S, (
                f"frozen broker noticed after {detect_s:.1f} s, bound "
                f"{3 * HEARTBEAT_S} s (3 x heartbeat)")
            # scheduling still works while the broker is frozen
            jobs.append(_schedule(svc, amqp, "during freeze", time.time()))
            wait_until(lambda: time.time() >= last_due + 0.5, 30,
                       "every job to fall due during the freeze")
        finally:
            # Before SIGCONT: an answer received until then was given while
            # the node could not answer anything (taken after it, a busy
            # machine let the service reconnect and say "ready" first).
            thawed_at = time.time()
            broker.thaw()  # always: a frozen node would stall the whole run
        t200, body = watch.wait_first(
            200, thawed_at, 30, "/readyz to answer 200 after SIGCONT")
        assert is_ready_body(body), body
        flaps = [s for s in watch.between(t503, thawed_at) if s[1] != 503]
        assert not flaps, f"/readyz was not 503 while frozen: {flaps[:3]}"
        assert not watch.unanswered(), \
            f"/readyz did not answer within 2 s: {watch.unanswered()[:3]}"

    got = amqp.wait_for_jobs([j["id"] for j in jobs], timeout=60)
    _assert_none_early(jobs, got)
    for j in jobs:
        svc.wait_status(j["id"], "sent", timeout=20)
    before = sum(1 for j in jobs if min(m.received_at for m in got[j["id"]]) < frozen_at)
    dups = sum(len(got[j["id"]]) - 1 for j in jobs)
    retried = sum(1 for j in jobs if svc.job(j["id"])["attempts"] > 1)
    report(f"frozen broker (heartbeat {HEARTBEAT_S} s): noticed (/readyz 503) "
           f"{detect_s:.2f} s after SIGSTOP (bound {3 * HEARTBEAT_S} s); ready "
           f"{t200 - thawed_at:.2f} s after SIGCONT; {len(jobs)} jobs, "
           f"{before} arrived before the freeze, all delivered, {retried} "
           f"needed a second attempt, {dups} duplicates")
