"""Recurring schedules as the integration tests drive them: names, PUT,
the runs a schedule made (GET /jobs?schedule=), GET /metrics (pylib.metrics), and
the check that every fire time of a killed-and-restarted schedule ran
exactly once. test_schedules.py (one instance) and
test_schedules_instances.py (three on one PostgreSQL database) share it.
"""

import time
import uuid

from pylib.times import ts_ms
from pylib.wait import wait_until

EVERY_SECOND = "*/1 * * * * *"
LEASE_MS = 2000  # PostgreSQL claim lease in the kill tests (default 10 s)


def now_ms():
    return time.time_ns() // 1_000_000


def name_of(prefix="s"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def template(amqp, body="tick", **kw):
    return dict({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                 "body": body}, **kw)


def put(svc, name, spec, headers=None, **kw):
    return svc.request("PUT", f"/schedules/{name}", spec, headers=headers, **kw)


def put_ok(svc, name, spec, expect=201):
    st, _, body = put(svc, name, spec)
    assert st == expect, f"PUT /schedules/{name} {spec!r} -> {st} {body!r}"
    return body


def schedule_jobs(svc, name):
    """Every job GET /jobs?schedule=name lists (following the cursor)."""
    jobs, after = [], None
    for _ in range(1000):
        q = f"/jobs?schedule={name}&limit=1000" + (f"&after={after}" if after else "")
        st, _, body = svc.get(q)
        assert st == 200, (q, st, body)
        jobs.extend(body["jobs"])
        after = body["next"]
        if after is None:
            return jobs
    raise AssertionError("cursor never ends")


def fire_ms(msg):
    """The fire time a message is for (its x-scheduler-fire-time header)."""
    text = msg.headers.get("x-scheduler-fire-time")
    assert isinstance(text, str) and text.endswith("Z"), msg.headers
    return ts_ms(text)


def by_fire_time(messages):
    out = {}
    for m in messages:
        out.setdefault(fire_ms(m), []).append(m)
    return out


def check_runs(svc, first, last, consumers, names, kills):
    """Per schedule: every fire time in [first[name], last] has exactly one
    run (one job id; GET /jobs?schedule= holds one job per fire time), and
    a message unless the misfire rule skipped it. A message twice is the
    dispatcher's at-least-once (README, Delivery semantics): allowed only
    for the same job, due around a kill (published, its confirm not yet
    recorded). Waits (bounded) for the claims of killed instances to be
    taken over first. Returns (fire times missing, messages duplicated)."""
    def complete():
        return all(set(range(first[n], last + 1, 1000)) <= set(by_fire_time(c.snapshot()))
                   for n, c in zip(names, consumers))
    try:  # a killed instance's claims go out once its lease ends
        wait_until(complete, LEASE_MS * 2 / 1000 + 15, "a message for every fire time")
    except AssertionError:
        pass  # what is missing is reported below
    missing, dup_msgs = {}, 0
    for n, c in zip(names, consumers):
        got = by_fire_time(c.snapshot())
        for t, msgs in got.items():
            ids = {m.job_id for m in msgs}
            assert len(ids) == 1, f"{n}: fire time {t} published by two runs {ids}"
            if len(msgs) > 1:
                near = [k for k in kills if k - 2000 <= t <= k + 1000]
                assert near, f"{n}: fire time {t} published {len(msgs)} times, " \
                    f"not near a kill ({[k - t for k in kills]} ms)"
                dup_msgs += len(msgs) - 1
        early = [t for t in got if t < first[n]]
        assert not early, f"{n}: runs before its first fire time: {early}"
        jobs = schedule_jobs(svc, n)
        fires = [ts_ms(j["fire_at"]) for j in jobs]
        twice = sorted({t for t in fires if fires.count(t) > 1})
        assert not twice, f"{n}: two jobs for one fire time: {twice}"
        missing[n] = [t for t in range(first[n], last + 1, 1000) if t not in got]
        by_fire = {ts_ms(j["fire_at"]): j for j in jobs}
        for t in missing[n]:
            j = by_fire.get(t)
            print(f"{n}: fire time +{t - first[n]} ms has no message; its run: "
                  f"{j and (j['id'], j['status'], j['attempts'], j['last_error'], j['created_at'])}")
    return missing, dup_msgs
