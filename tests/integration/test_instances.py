"""Several instances on one PostgreSQL database: no single point of failure.

Every instance accepts jobs and dispatches; they share nothing but the
database (and the broker). What each test proves:

(a) kill -9 of random instances, again and again, while clients post to all
    of them: every acknowledged (201) job arrives, none early; a duplicate
    only for a job that was due around a kill (it could have been in
    flight); the jobs due around a kill (the killed instance may have held
    them) arrive within a second at p99, with the default 10 s lease: the
    others take them over when its database session ends, not when the
    lease does.
(b) An instance frozen (SIGSTOP) past its lease while it holds claimed
    jobs: another instance publishes them; on SIGCONT the frozen one
    publishes none of them and marks none (each was published once).
(c) Two instances whose clocks disagree by 2 s (faketime): none publishes
    early, though both publish.
(d) The same Idempotency-Key posted to two instances at once gives one job.
(e) Cancel on one instance against the claim of another: each job is either
    cancelled (200) and never published, or published and the cancel 409.
(f) An instance that loses its database session while alive (the server
    ends its listening backend) hands back the jobs it had claimed, another
    instance publishes them, each once, and it claims again under a new
    session.
(g) A commit wakes the other instances (NOTIFY) only for a job due soon;
    a job due later, stored by an instance that then stops, is still
    published on time by another (its feeder looks again every second).

SQLite has one process per database file (the lock file refuses a second),
so these tests apply to PostgreSQL only.
"""

import os
import random
import re
import signal
import statistics
import threading
import time

import pytest

from helpers import format_ts, http_request, parse_ts, wait_until
from pylib import pg
from pylib.load import Load
from pylib.metrics import metric

pytestmark = pytest.mark.skipif(
    os.environ.get("RMQS_TEST_STORE", "sqlite") != "postgres",
    reason="several instances share one database only on PostgreSQL: a "
           "SQLite file belongs to one process (its lock file refuses a "
           "second)")

EARLY_TOLERANCE_S = 0.001  # deliver_at is kept in whole milliseconds
LEASE_MS = 2000
LEASE_S = 10.0  # the default --lease-ms
SPREAD_S = (0.05, 3.0)  # the posted jobs' deliver_at: now + uniform(...)


def instances(service, n, *args):
    """n instances on one database (the first one's)."""
    first = service(*args)
    return [first] + [service(*args, share_db_with=first) for _ in range(n - 1)]


def early_messages(by_job, deliver_at):
    """[(job id, ms early)] of every copy that arrived before its time."""
    out = []
    for job_id, msgs in by_job.items():
        due = deliver_at.get(job_id)
        for m in msgs:
            if due is not None and m.received_at < due - EARLY_TOLERANCE_S:
                out.append((job_id, round((due - m.received_at) * 1000, 1)))
    return out


# --- (a) kill -9 of random instances -------------------------------------

def posters(svcs, amqp):
    """Threads (pylib.load) posting one job per request to the instances in
    turn, each due a little later (SPREAD_S)."""
    def make(_n, rng):
        at = format_ts(time.time() + rng.uniform(*SPREAD_S))
        return {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                "body": "instances", "deliver_at": at}
    return Load([s.port for s in svcs], make, threads=4, pause_s=0.005,
                error_pause_s=0.02, seed=1)


def test_kill9_of_random_instances_loses_nothing(service, amqp, report):
    kills_wanted = 20
    # The default lease (10 s): a job waiting for it would show.
    svcs = instances(service, 3)
    rng = random.Random(12)
    load = posters(svcs, amqp).start()
    kills = []  # (epoch s, instance index)
    try:
        deadline = time.monotonic() + 150
        while len(kills) < kills_wanted:
            assert time.monotonic() < deadline, \
                f"only {len(kills)} kills in 150 s"
            time.sleep(rng.uniform(0.5, 1.5))  # load runs meanwhile
            i = rng.randrange(len(svcs))
            kills.append((time.time(), i))
            svcs[i].kill9()
            svcs[i].restart()
        time.sleep(SPREAD_S[1])  # the last jobs come due meanwhile
    finally:
        load.join()
    acked = {r["body"]["id"]: parse_ts(r["body"]["deliver_at"])
             for r in load.acked()}  # job id -> deliver_at (epoch s)
    by_instance = [sum(1 for r in load.acked() if r["target"] == i)
                   for i in range(len(svcs))]
    assert len(acked) >= 500, f"only {len(acked)} jobs acknowledged"
    assert all(n > 0 for n in by_instance), by_instance

    by_job = amqp.wait_for_jobs(acked, timeout=LEASE_S + 60)
    early = early_messages(by_job, acked)
    dups = {j: m for j, m in by_job.items() if j in acked and len(m) > 1}
    # A duplicate is a job whose first copy was published by an instance
    # that was then killed before it recorded it: due before some kill.
    kill_times = [t for t, _ in kills]
    unexplained = [j for j in dups
                   if not any(acked[j] <= t + 0.6 for t in kill_times)]
    late = {j: min(m.received_at for m in msgs) - acked[j]
            for j, msgs in by_job.items() if j in acked}
    lateness = sorted(late.values())
    # The jobs a killed instance may have held: due from just before a
    # kill (claimed ahead, in flight) to a second after it.
    near = sorted(x for j, x in late.items()
                  if any(t - 0.6 <= acked[j] <= t + 1.0 for t in kill_times))
    p99 = near[min(len(near) - 1, int(len(near) * 0.99))] if near else 0
    report(f"{len(kills)} kill -9 of 3 instances (lease {LEASE_S:.0f} s): "
           f"{len(acked)} jobs acknowledged ({by_instance} per "
           f"instance), all arrived, {len(early)} early, {len(dups)} "
           f"duplicated; lateness p50 {statistics.median(lateness) * 1000:.1f} "
           f"ms, max {lateness[-1] * 1000:.0f} ms; late-after-kill "
           f"({len(near)} jobs due from 0.6 s before to 1 s after a kill): "
           f"p50 {(statistics.median(near) * 1000 if near else 0):.0f} ms, "
           f"p99 {p99 * 1000:.0f} ms, max "
           f"{(near[-1] * 1000 if near else 0):.0f} ms")
    assert not early, f"{len(early)} copies arrived early: {early[:5]}"
    assert not unexplained, \
        f"duplicates of jobs not due near any kill: {unexplained[:5]}"
    assert len(near) >= 50, f"only {len(near)} jobs due near a kill"
    # Takeover in a second: the killed instance's database session ended,
    # and the others took its jobs without waiting for its lease.
    assert p99 <= 1.0, f"late-after-kill p99 {p99:.2f} s"
    assert lateness[-1] < LEASE_S * 0.8, \
        f"a job arrived {lateness[-1]:.1f} s late: it waited for a lease"
    for svc in svcs:
        wait_until(lambda s=svc: s.alive(), 5, "instance alive")


# --- (b) a frozen instance ----------------------------------------------

def test_frozen_instance_past_its_lease_publishes_nothing_it_lost(
        service, amqp, report):
    n = 50
    lease_ms = 1500
    # A alone claims the jobs ahead of their time (a long lookahead), is
    # frozen before they are due, and B takes them over once the lease ends.
    a = service("--lease-ms", str(lease_ms), "--dispatch-lookahead-ms", "3000")
    at = format_ts(time.time() + 4.0)
    ids = []
    for _ in range(n):
        j = a.schedule({"exchange": amqp.exchange,
                        "routing_key": amqp.routing_key,
                        "body": "frozen", "deliver_at": at})
        ids.append(j["id"])

    def claimed_by_a():
        return len(a.list_all(status="publishing")[0]) == n
    wait_until(claimed_by_a, 10, f"{n} jobs claimed by A")
    os.kill(a.pid, signal.SIGSTOP)
    try:
        t_stop = time.time()
        b = service("--lease-ms", str(lease_ms), share_db_with=a)
        by_job = amqp.wait_for_jobs(ids, timeout=30)
        t_all = time.time()
    finally:
        os.kill(a.pid, signal.SIGCONT)
    # A wakes, finds its leases lapsed and releases the jobs unpublished.
    wait_until(lambda: metric(a, "rmqs_claims_lapsed_total") >= n, 15,
               f"A to release its {n} lapsed claims")
    # Give A's recorder time to try its (refused) marks, then look.
    wait_until(lambda: all(b.job(i)["status"] == "sent" for i in ids), 10,
               "every job sent")
    time.sleep(1.0)  # anything A wrongly published would arrive by now
    by_job = amqp.by_job()
    twice = [j for j in ids if len(by_job.get(j, [])) > 1]
    early = early_messages(by_job, {j: parse_ts(at) for j in ids})
    report(f"frozen instance (lease {lease_ms} ms): {n} jobs it held were "
           f"published by the other {t_all - t_stop:.2f} s after the freeze; "
           f"after SIGCONT it released {metric(a, 'rmqs_claims_lapsed_total'):.0f} "
           f"lapsed claims; {len(twice)} arrived twice, {len(early)} early")
    assert not twice, f"published twice: {twice[:5]}"
    assert not early
    for i in ids:
        assert a.job(i)["status"] == "sent"


# --- (c) clocks that disagree -------------------------------------------

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def skewed(offset):
    """Environment that shifts the service's wall clock by offset (Debian's
    libfaketime, preloaded into the service itself so that signals reach
    it; the faketime command would stand between). Monotonic time stays
    real, as a host's would."""
    assert os.path.exists(LIBFAKETIME), \
        "libfaketime is not installed (tests/run.sh installs faketime)"
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1",
            # the sanitizer runtime is not first in the preload list
            "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
            ":verify_asan_link_order=0"}


@pytest.mark.skipif(
    os.environ.get("RMQS_TEST_TSAN") == "1",
    reason="libfaketime's pthread wrappers call the real pthread functions "
           "past ThreadSanitizer's interceptors, which then reports double "
           "locks and races that are not there (the ASan stage runs it)")
def test_instances_whose_clocks_disagree_by_2s_never_publish_early(
        service, amqp, report):
    n = 300
    ahead = service("--lease-ms", str(LEASE_MS), extra_env=skewed("+2s"))
    honest = service("--lease-ms", str(LEASE_MS), share_db_with=ahead)
    behind = service("--lease-ms", str(LEASE_MS), share_db_with=ahead,
                     extra_env=skewed("-2s"))
    svcs = [ahead, honest, behind]
    for svc, want in ((ahead, -2000), (behind, 2000)):  # the skew took hold
        offsets = [int(x) for x in re.findall(r"clock_offset_ms=(-?\d+)", svc.log())]
        assert offsets and abs(offsets[-1] - want) < 500, \
            f"database clock minus the service's: {offsets}, expected ~{want}"
    # A third of the jobs through each instance (one batch each), due over
    # 3 s from 2 s on; every instance claims from the whole table.
    due = {}
    t0 = time.time() + 2.0
    for k, svc in enumerate(svcs):
        items = [{"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                  "body": "skew",
                  "deliver_at": format_ts(t0 + 3.0 * (3 * m + k) / n)}
                 for m in range(n // 3)]
        st, _, body = svc.post("/schedule/batch", items, timeout=60)
        assert st == 201, (st, body)
        due.update({j["id"]: parse_ts(j["deliver_at"]) for j in body["jobs"]})
    assert time.time() < t0, "scheduling took too long: jobs already due"
    by_job = amqp.wait_for_jobs(due, timeout=30)
    early = early_messages(by_job, due)
    published = [metric(s, 'rmqs_jobs_published_total{result="sent"}')
                 for s in svcs]
    late = sorted(min(m.received_at for m in msgs) - due[j]
                  for j, msgs in by_job.items())
    report(f"clock skew +2 s / 0 / -2 s: {n} jobs, published "
           f"{[int(p) for p in published]} by the three, {len(early)} early, "
           f"lateness p50 {statistics.median(late) * 1000:.1f} ms, max "
           f"{late[-1] * 1000:.1f} ms")
    assert not early, f"{len(early)} arrived early: {early[:5]}"
    assert published[0] > 0, "the instance whose clock is ahead published " \
        "nothing: the test proves nothing"


# --- (d) idempotency keys raced -----------------------------------------

def test_one_idempotency_key_raced_on_two_instances_gives_one_job(
        service, amqp, report):
    a, b = instances(service, 2)
    at = format_ts(time.time() + 3600)
    rounds = 30
    for r in range(rounds):
        key = f"race-{os.getpid()}-{r}-{random.random()}"
        job = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
               "body": f"race {r}", "deliver_at": at}
        barrier = threading.Barrier(2)
        answers = [None, None]

        def post(k, svc):
            barrier.wait(5)
            answers[k] = http_request(svc.port, "POST", "/schedule", job,
                                      headers={"Idempotency-Key": key})
        ts = [threading.Thread(target=post, args=(k, s)) for k, s in
              enumerate((a, b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        statuses = sorted(x.status for x in answers)
        assert statuses in ([200, 201], [201, 201]), statuses
        assert answers[0].body["id"] == answers[1].body["id"], \
            f"round {r}: two jobs for one key: {answers[0].body['id']} " \
            f"{answers[1].body['id']}"
    jobs, _ = a.list_all()
    assert len(jobs) == rounds, f"{len(jobs)} jobs stored for {rounds} keys"
    report(f"idempotency key raced on two instances: {rounds} rounds, one job each")


# --- (e) cancel against a claim on another instance ---------------------

def test_cancel_against_a_claim_on_another_instance(service, amqp, report):
    n = 200
    spread_s = 0.4  # due times spread so the cancels meet claims at every stage
    a, b = instances(service, 2, "--dispatch-lookahead-ms", "50")
    t_due = time.time() + 3.0
    items = [{"exchange": amqp.exchange, "routing_key": amqp.routing_key,
              "body": "cancel race",
              "deliver_at": format_ts(t_due + spread_s * k / n)}
             for k in range(n)]
    st, _, body = a.post("/schedule/batch", items, timeout=60)
    assert st == 201, (st, body)
    ids = [j["id"] for j in body["jobs"]]
    assert time.time() < t_due - 0.5, "scheduling took too long: already due"
    # Cancel on B, in due order, each job at a moment that sweeps from
    # 250 ms before its due time (pending: the lookahead is 50 ms) to 50 ms
    # after it (claimed, by A or B), across the moment of its claim.
    outcomes = {}
    for k, i in enumerate(ids):
        at = t_due + spread_s * k / n - 0.25 + 0.3 * k / n
        wait_until(lambda at=at: time.time() >= at, 5, "the cancel's moment",
                   interval=0.001)
        r = b.delete(f"/jobs/{i}")
        assert r.status in (200, 409), (r.status, r.body)
        outcomes[i] = r.status
    cancelled = [i for i, s in outcomes.items() if s == 200]
    refused = [i for i, s in outcomes.items() if s == 409]
    amqp.wait_for_jobs(refused, timeout=30)
    # every job is settled one way or the other before we look
    wait_until(lambda: all(a.job(i)["status"] in ("sent", "cancelled")
                           for i in ids), 20, "every job sent or cancelled")
    time.sleep(0.5)  # a cancelled job wrongly published would be here by now
    by_job = amqp.by_job()
    published_cancelled = [i for i in cancelled if i in by_job]
    report(f"cancel on B against claims on A and B: {len(cancelled)} cancelled "
           f"(never published), {len(refused)} 409 (published)")
    assert not published_cancelled, \
        f"cancelled (200) yet published: {published_cancelled[:5]}"
    for i in cancelled:
        assert a.job(i)["status"] == "cancelled"
    for i in refused:
        assert a.job(i)["status"] == "sent"
    assert cancelled and refused, \
        "the cancels did not meet both pending and claimed jobs: the race " \
        "was not run"


# --- (f) a session lost while the instance lives ------------------------

def instance_rows(svc):
    """(id, pid) of the instances rows on svc's database."""
    return [(r[0], int(r[1])) for r in svc.sql("SELECT id, pid FROM instances")]


def test_session_lost_while_alive_hands_back_its_claims(service, amqp, report):
    n = 50
    # A claims the jobs well ahead (3 s lookahead); B only 0.5 s before.
    a = service("--dispatch-lookahead-ms", "3000")
    service(share_db_with=a)  # B, which takes over
    at = time.time() + 4.0
    ids = [a.schedule({"exchange": amqp.exchange,
                       "routing_key": amqp.routing_key, "body": "session",
                       "deliver_at": format_ts(at)})["id"]
           for _ in range(n)]
    wait_until(lambda: len(a.list_all(status="publishing")[0]) == n, 10,
               f"{n} jobs claimed by A")
    before = [i for i, pid in instance_rows(a) if pid == a.pid]
    assert len(before) == 1, instance_rows(a)
    # The server ends A's session (the backend holding its presence lock)
    # while A lives: A must treat every claim it holds as lost.
    ended = a.sql(
        "SELECT pg_terminate_backend(l.pid) FROM instances i JOIN pg_locks l "
        "ON l.locktype = 'advisory' AND l.classid = 1380799827 "
        "AND l.objid = hashtext(i.id)::oid AND l.objsubid = 2 "
        f"WHERE i.id = '{before[0]}'")
    assert ended == [["t"]], ended
    assert time.time() < at - 1.0, "too slow: the jobs are nearly due"
    by_job = amqp.wait_for_jobs(ids, timeout=30)
    wait_until(lambda: all(a.job(i)["status"] == "sent" for i in ids), 10,
               "every job sent")
    # A begins a new session under a new id, and claims again.
    wait_until(lambda: any(pid == a.pid and i != before[0]
                           for i, pid in instance_rows(a)), 10,
               "A's new session")
    later = a.schedule({"exchange": amqp.exchange,
                        "routing_key": amqp.routing_key, "body": "after",
                        "delay_ms": 200})
    amqp.wait_for_jobs([later["id"]], timeout=10)
    time.sleep(0.5)  # anything published twice would be here by now
    by_job = amqp.by_job()
    twice = [j for j in ids if len(by_job.get(j, [])) > 1]
    early = early_messages(by_job, {j: at for j in ids})
    late = sorted(min(m.received_at for m in by_job[j]) - at for j in ids)
    report(f"session of A ended by the server while A held {n} claims: all "
           f"published once ({len(twice)} twice, {len(early)} early), "
           f"lateness max {late[-1] * 1000:.0f} ms; A began a new session "
           f"and claims again")
    assert not twice, f"published twice: {twice[:5]}"
    assert not early
    assert late[-1] < 1.0, f"a job {late[-1]:.2f} s late"
    assert "lost the database session" in a.log()


# --- (g) wake-ups only for jobs due soon --------------------------------

def test_only_jobs_due_soon_wake_the_others_yet_later_ones_go_on_time(
        service, amqp, report):
    a = service()
    service(share_db_with=a)  # B, which publishes what A stored
    listener = pg.Listener(a.pg_database, "rmqs_due", seconds=10)
    near = a.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                       "body": "near", "delay_ms": 300})
    amqp.wait_for_jobs([near["id"]], timeout=10)
    # Nothing is pending now: both feeders planned an idle wait. The far job
    # is beyond the horizon (the lookahead, 500 ms, and twice the feeders'
    # replan, 1 s): stored without a wake-up. A goes away at once, so only B
    # can publish it, and nothing tells B about it.
    far_at = time.time() + 4.0
    far = a.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                      "body": "far", "deliver_at": format_ts(far_at)})
    a.stop()
    assert time.time() < far_at - 1.0, "too slow: the far job is nearly due"
    by_job = amqp.wait_for_jobs([far["id"], near["id"]], timeout=15)
    payloads = [int(p) for p in listener.stop()]
    far_ms, near_ms = (round(parse_ts(j["deliver_at"]) * 1000)
                       for j in (far, near))
    late = min(m.received_at for m in by_job[far["id"]]) - far_ms / 1000
    report(f"wake-ups: {len(payloads)} NOTIFY (payloads relative to the far "
           f"job's due time, ms: {[p - far_ms for p in payloads]}); the job due "
           f"in 4 s, stored without one by an instance that then stopped, "
           f"published by the other {late * 1000:.1f} ms after its time")
    assert near_ms in payloads, (near_ms, payloads)
    assert all(p < far_ms - 1000 for p in payloads), \
        f"a wake-up for the job due in 4 s: {payloads}"
    assert -0.001 <= late < 0.25, f"the far job {late:.3f} s late"
