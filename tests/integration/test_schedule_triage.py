"""Recurring schedules an operator can read and act on (issue 25), against
the real binary, the real RabbitMQ node and the real store (every test runs
on SQLite and on PostgreSQL):

- a schedule whose exchange does not exist fails every run: GET shows its
  last run failed with the broker's answer and a failure streak that grows
  run after run, in GET /schedules/{name} and GET /schedules alike; once its
  template is fixed (PUT with an exchange that exists) a run is sent and the
  streak is back to 0;
- the streak is counted up to 100: exactly 100 failed runs after a sent one
  say 100, one more says 100 with failure_streak_capped;
- run now (POST /schedules/{name}/run) creates one run due now from the
  template, published at once with the run headers, with an id of its own,
  on a paused schedule too, and leaves the schedule's fire times, generation
  and last_run_at as they were; an Idempotency-Key repeat answers the same
  run; unknown schedule 404, bad name / a body / bad key 400, other methods
  405, and none of those creates a job;
- an exchange --allow-exchanges closed is 403 (job.exchange) to run now and
  to PUT, and creates nothing.

Times are relative to now; every wait has a deadline.
"""

import uuid

from helpers import assert_error, ts_ms, wait_until
from pylib.schedules import name_of, now_ms, put_ok, schedule_jobs, template

FAR_CRON = "0 0 1 1 *"  # once a year: valid, and never fires during a test


def missing_exchange():
    return f"rmqs-triage-missing-{uuid.uuid4().hex[:10]}"


def get_schedule(svc, name):
    st, _, body = svc.get(f"/schedules/{name}")
    assert st == 200, (name, st, body)
    return body


def listed(svc, name):
    st, _, page = svc.get("/schedules?limit=1000")
    assert st == 200, page
    (s,) = [s for s in page["schedules"] if s["name"] == name]
    return s


def run_now(svc, name, headers=None, expect=201):
    st, hdrs, job = svc.request("POST", f"/schedules/{name}/run", None, headers=headers)
    assert st == expect, (name, st, job)
    assert hdrs["Location"] == f"/jobs/{job['id']}", hdrs
    return job


def job_count(svc, name):
    return len(schedule_jobs(svc, name))


def test_a_failing_schedule_shows_its_streak_and_the_fix_resets_it(service, amqp):
    svc = service()
    name = name_of("failing")
    exchange = missing_exchange()
    created = put_ok(svc, name, {"every_ms": 1000, "job": {
        "exchange": exchange, "routing_key": "x", "body": "tick", "max_attempts": 1}})
    assert created["last_run"] is None, created
    assert created["failure_streak"] == 0 and created["failure_streak_capped"] is False

    streaks = []

    def failed_three_times():
        s = get_schedule(svc, name)
        streaks.append(s["failure_streak"])
        return s if s["failure_streak"] >= 3 else None
    s = wait_until(failed_three_times, 40, "three failed runs in a row")
    assert streaks == sorted(streaks), f"the streak went down while failing: {streaks}"
    assert s["state"] == "active" and s["failure_streak_capped"] is False, s
    last = s["last_run"]
    assert last["status"] == "failed", s
    assert ("NOT_FOUND" in last["error"] or "404" in last["error"]), last
    # last_run is the run's own job, as GET /jobs/{id} shows it
    job = svc.job(last["job_id"])
    assert job["schedule"] == name and job["status"] == "failed", job
    assert job["last_error"] == last["error"], (job, last)
    assert ts_ms(job["fire_at"]) == ts_ms(last["fire_time"]) <= now_ms(), (job, last)
    # the list shows the same
    row = listed(svc, name)
    assert row["last_run"]["status"] == "failed" and row["failure_streak"] >= 3, row

    # fixed: an exchange that exists; a run is sent and the streak ends
    put_ok(svc, name, {"every_ms": 1000, "job": template(amqp, "fixed")}, expect=200)
    msg = amqp.wait_for(1, timeout=20)[0]
    assert msg.body == b"fixed" and msg.headers["x-scheduler-schedule"] == name, msg

    def sent_and_reset():
        s = get_schedule(svc, name)
        ok = s["failure_streak"] == 0 and s["last_run"] and s["last_run"]["status"] == "sent"
        return s if ok else None
    s = wait_until(sent_and_reset, 20, "a sent run and the streak back to 0")
    assert s["last_run"]["error"] is None, s
    assert svc.job(s["last_run"]["job_id"])["status"] == "sent"


def test_the_streak_is_counted_up_to_100(service):
    svc = service()
    name = name_of("capped")
    exchange = missing_exchange()
    put_ok(svc, name, {"cron": FAR_CRON, "job": {
        "exchange": exchange, "routing_key": "x", "body": "b", "max_attempts": 1}})

    def all_finished(n):
        def check():
            jobs = schedule_jobs(svc, name)
            done = [j for j in jobs if j["status"] in ("failed", "sent")]
            return len(jobs) == n and len(done) == n
        wait_until(check, 90, f"{n} runs finished")

    for _ in range(100):
        run_now(svc, name)
    all_finished(100)
    s = get_schedule(svc, name)
    assert s["failure_streak"] == 100 and s["failure_streak_capped"] is False, s
    assert s["last_run"]["status"] == "failed", s
    run_now(svc, name)
    all_finished(101)
    s = get_schedule(svc, name)
    assert s["failure_streak"] == 100 and s["failure_streak_capped"] is True, s


def test_run_now_publishes_at_once_and_leaves_the_series_alone(service, amqp):
    svc = service()
    name = name_of("runnow")
    put_ok(svc, name, {"cron": FAR_CRON, "job": template(amqp, "now")})
    before = get_schedule(svc, name)
    assert before["last_run"] is None, before

    t0 = now_ms()
    job = run_now(svc, name)
    assert job["source"] == "schedule" and job["schedule"] == name, job
    assert job["status"] in ("pending", "publishing"), job
    assert t0 <= ts_ms(job["fire_at"]) <= now_ms(), job
    assert ts_ms(job["deliver_at"]) == ts_ms(job["fire_at"]), job
    assert job["body"] == "now", job
    msg = amqp.wait_for_jobs([job["id"]], timeout=10)[job["id"]][0]
    assert msg.body == b"now"
    assert msg.headers["x-scheduler-schedule"] == name, msg.headers
    assert ts_ms(msg.headers["x-scheduler-fire-time"]) == ts_ms(job["fire_at"]), msg.headers
    assert msg.received_at * 1000 - t0 < 3000, f"{msg.received_at * 1000 - t0:.0f} ms"

    after = wait_until(lambda: (lambda s: s if s["last_run"] and
                                s["last_run"]["status"] == "sent" else None)(
        get_schedule(svc, name)), 10, "the run now as the last run, sent")
    assert after["last_run"]["job_id"] == job["id"], after
    for key in ("next_runs", "generation", "last_run_at", "last_job_id", "state",
                "updated_at"):
        assert after[key] == before[key], (key, before[key], after[key])

    # paused: an operator's run now still goes out; the schedule stays paused
    st, _, paused = svc.patch(f"/schedules/{name}", {"paused": True})
    assert st == 200 and paused["state"] == "paused", paused
    second = run_now(svc, name)
    assert second["id"] != job["id"]
    amqp.wait_for_jobs([second["id"]], timeout=10)
    again = get_schedule(svc, name)
    assert again["state"] == "paused" and again["next_runs"] == paused["next_runs"], again
    assert again["generation"] == paused["generation"], again
    assert job_count(svc, name) == 2


def test_run_now_honours_an_idempotency_key(service, amqp):
    svc = service()
    name, other = name_of("idem"), name_of("idem-other")
    put_ok(svc, name, {"cron": FAR_CRON, "job": template(amqp, "once")})
    put_ok(svc, other, {"cron": FAR_CRON, "job": template(amqp, "other")})
    key = {"Idempotency-Key": f"triage-{uuid.uuid4().hex}"}
    first = run_now(svc, name, headers=key)
    repeat = run_now(svc, name, headers=key, expect=200)
    assert repeat["id"] == first["id"], (first, repeat)
    amqp.wait_for_jobs([first["id"]], timeout=10)
    # the same key for another request: 409, nothing made
    assert_error(svc.request("POST", f"/schedules/{other}/run", None, headers=key),
                 409, "conflict", "Idempotency-Key")
    assert_error(svc.post("/schedule", {"exchange": "", "routing_key": "r", "body": "x",
                                        "delay_ms": 3_600_000}, headers=key),
                 409, "conflict", "Idempotency-Key")
    assert_error(svc.request("POST", f"/schedules/{name}/run", None,
                             headers={"Idempotency-Key": "a b"}),
                 400, "invalid_argument", "Idempotency-Key")
    assert job_count(svc, name) == 1 and job_count(svc, other) == 0
    assert {m.job_id for m in amqp.snapshot()} == {first["id"]}


def test_run_now_refuses_what_it_cannot_do_and_changes_nothing(service, amqp):
    svc = service()
    name = name_of("refuse")
    put_ok(svc, name, {"cron": FAR_CRON, "job": template(amqp)})
    assert_error(svc.request("POST", f"/schedules/{name_of('nope')}/run", None),
                 404, "not_found")
    assert_error(svc.request("POST", "/schedules/bad%20name/run", None),
                 400, "invalid_argument", "name")
    assert_error(svc.request("POST", f"/schedules/{name}/run", {}),
                 400, "invalid_argument")
    for method in ("GET", "PUT", "DELETE"):
        r = svc.request(method, f"/schedules/{name}/run", {} if method == "PUT" else None)
        assert_error(r, 405, "method_not_allowed")
        assert r.headers["Allow"] == "POST", r.headers
    assert job_count(svc, name) == 0
    assert get_schedule(svc, name)["last_run"] is None


def test_an_exchange_the_allow_list_closed_is_refused_to_put_and_run_now(service):
    """--allow-exchanges holds for a schedule's template as for a job: a
    schedule stored before a restart closed its exchange is 403 (field
    job.exchange) to run now and makes no run; a PUT naming that exchange
    is 403 the same way and creates nothing."""
    svc = service()
    name = name_of("closed")
    tmpl = {"exchange": "orders", "routing_key": "k", "body": "x"}
    put_ok(svc, name, {"cron": FAR_CRON, "job": tmpl})
    assert svc.stop() is None
    svc.args += ["--allow-exchanges", "billing"]
    svc.restart()
    err = assert_error(svc.request("POST", f"/schedules/{name}/run", None),
                       403, "forbidden", "job.exchange")
    assert "'orders'" in err["message"], err
    assert job_count(svc, name) == 0
    other = name_of("closed")
    err = assert_error(svc.request("PUT", f"/schedules/{other}",
                                   {"cron": FAR_CRON, "job": tmpl}),
                       403, "forbidden", "job.exchange")
    assert "'orders'" in err["message"], err
    assert_error(svc.get(f"/schedules/{other}"), 404, "not_found")
