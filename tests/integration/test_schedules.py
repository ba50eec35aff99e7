"""Recurring schedules (issue 13) against the real binary, the real RabbitMQ
node and the real store (SQLite file or PostgreSQL database: the store
fixture; every test runs on both).

What each test proves:
- the API: PUT 201 / 200 / same body twice is one schedule (generation
  unchanged), GET with next_runs (count=, local times in the zone, checked
  against Python's zoneinfo), list paging, PATCH pause / resume, DELETE
  204 / 404, every 400 (named field, the cron position) changing nothing,
  401 without the token, and curl and urllib as clients;
- `*/1 * * * * *` delivers one message per second, each a few ms after its
  second and none early, with the x-scheduler-schedule / -fire-time headers,
  the runs listed by GET /jobs?schedule= with source "schedule";
- kill -9 while schedules fire, several times: every fire time has at most
  one message, and every fire time without one is a run the misfire rule
  counted as skipped (rmqs_schedule_runs_total);
- downtime shorter than misfire_grace_ms fires once (not once per missed
  run), longer skips; a run created before the downtime and older than the
  grace is expired, not published;
- PATCH (routing key, body), DELETE and pause / resume take effect for the
  next run, and a fire time is never published twice across the change;
- RabbitMQ down past the grace: one run waits and expires unpublished, then
  the latest missed run fires once, the rest are skipped;
- the curl examples of docs/schedules.md run as written.

Times are built relative to now; every wait has a deadline. The figures
(lateness of the per-second schedule, downtimes) are printed through the
report fixture.
"""

import datetime
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import time
import urllib.error
import urllib.request
import uuid
import zoneinfo

import pytest

from helpers import assert_error, db_query, format_ts, ts_ms, wait_until
from pylib import markdown
from pylib.metrics import metrics
from pylib.schedules import (EVERY_SECOND, LEASE_MS, by_fire_time, check_runs,
                             fire_ms, name_of, now_ms, put, put_ok,
                             schedule_jobs, template)

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULES_DOC = os.path.join(markdown.DOCS, "schedules.md")
FAR_CRON = "0 0 1 1 *"  # once a year: valid, and never fires during a test
# A run the dispatcher had already claimed when a PATCH/DELETE came (its
# lookahead, 500 ms by default) still goes out; anything later must not.
HELD_MS = 1000
EARLY_TOLERANCE_MS = 1  # fire times are whole ms; the consumer's clock is the same


def iso(ms):
    return format_ts(ms / 1000)


def get_schedule(svc, name, query=""):
    st, _, body = svc.get(f"/schedules/{name}{query}")
    assert st == 200, f"GET /schedules/{name}{query} -> {st} {body!r}"
    return body


def runs(svc, result):
    return metrics(svc).get(f'rmqs_schedule_runs_total{{result="{result}"}}', 0.0)


def duplicates(*consumers):
    seen = {}
    for c in consumers:
        for m in c.snapshot():
            seen.setdefault(fire_ms(m), []).append(m)
    return {t: ms for t, ms in seen.items() if len(ms) > 1}


# --- the API ------------------------------------------------------------------

def test_put_creates_replaces_and_the_same_body_twice_is_one_schedule(service):
    svc = service()
    name = name_of("daily")
    spec = {"cron": "30 8 * * *", "timezone": "Europe/Berlin",
            "job": {"exchange": "", "routing_key": "digest", "body": "go"}}
    st, _, created = put(svc, name, spec)
    assert st == 201, created
    assert created["name"] == name and created["cron"] == "30 8 * * *"
    assert created["timezone"] == "Europe/Berlin"
    assert created["state"] == "active" and created["generation"] == 1
    assert created["misfire_grace_ms"] == 60000  # the documented default
    assert created["last_run_at"] is None and created["last_job_id"] in (None, "")
    got = get_schedule(svc, name)
    assert got == created, "PUT answers the schedule as GET does"

    st, _, again = put(svc, name, spec)
    assert st == 200, again
    assert again["generation"] == 1 and again["updated_at"] == created["updated_at"], \
        "the same body twice changes nothing"
    st, _, page = svc.get("/schedules")
    assert st == 200 and [s["name"] for s in page["schedules"]] == [name], page

    changed = dict(spec, cron="45 8 * * *")
    st, _, replaced = put(svc, name, changed)
    assert st == 200, replaced
    assert replaced["generation"] == 2 and replaced["cron"] == "45 8 * * *"
    assert replaced["created_at"] == created["created_at"], "created_at is kept"
    assert ts_ms(replaced["updated_at"]) >= ts_ms(created["updated_at"])
    assert all(r["local"][11:19] == "08:45:00" for r in replaced["next_runs"]), replaced


def berlin_expected(count, hour, minute):
    """The next `count` instants of hour:minute in Europe/Berlin after now,
    by Python's zoneinfo (the test's independent reference)."""
    zone = zoneinfo.ZoneInfo("Europe/Berlin")
    now = datetime.datetime.now(datetime.timezone.utc)
    day = now.astimezone(zone).date()
    out = []
    while len(out) < count:
        local = datetime.datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
        if local.astimezone(datetime.timezone.utc) > now:
            out.append(local)
        day += datetime.timedelta(days=1)
    return out


def test_get_previews_next_runs_in_utc_and_local_time(service):
    svc = service()
    name = name_of("berlin")
    put_ok(svc, name, {"cron": "30 8 * * *", "timezone": "Europe/Berlin",
                       "job": {"exchange": "", "routing_key": "q", "body": "x"}})
    body = get_schedule(svc, name)
    assert len(body["next_runs"]) == 5, "5 by default"
    body = get_schedule(svc, name, "?count=40")
    runs_ = body["next_runs"]
    assert len(runs_) == 40
    # 40 days ahead cross a DST change in half the year: the offsets checked
    # are zoneinfo's, whichever applies
    want = berlin_expected(40, 8, 30)
    for r, w in zip(runs_, want):
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", r["utc"]), r
        assert ts_ms(r["utc"]) == ts_ms(r["local"]), f"utc and local differ: {r}"
        assert ts_ms(r["utc"]) == int(w.timestamp() * 1000), (r, w.isoformat())
        assert r["local"] == w.isoformat(timespec="milliseconds"), (r, w.isoformat())
    assert len(get_schedule(svc, name, "?count=1000")["next_runs"]) == 1000
    for bad in ("0", "1001", "x"):
        resp = svc.get(f"/schedules/{name}?count={bad}")
        assert_error(resp, 400, "invalid_argument", "count")
    assert_error(svc.get(f"/schedules/{name_of('nope')}"), 404, "not_found")

    # every_ms from start_at up to end_at: fewer runs when it ends
    start = (now_ms() // 1000 + 3600) * 1000
    name2 = name_of("every")
    body = put_ok(svc, name2, {"every_ms": 60000, "start_at": iso(start),
                               "end_at": iso(start + 150000),
                               "job": {"exchange": "", "routing_key": "q", "body": "x"}})
    assert [ts_ms(r["utc"]) for r in body["next_runs"]] == \
        [start, start + 60000, start + 120000], body["next_runs"]
    assert all(r["local"].endswith("Z") or r["local"].endswith("+00:00")
               for r in body["next_runs"]), "UTC is the default zone"


def test_list_pages_in_name_order(service):
    svc = service()
    names = sorted(name_of("page") for _ in range(7))
    for n in names:
        put_ok(svc, n, {"cron": FAR_CRON, "job": {"exchange": "", "routing_key": "q",
                                                  "body": n}})
    seen, after, pages = [], None, 0
    while True:
        st, _, body = svc.get("/schedules?limit=3" + (f"&after={after}" if after else ""))
        assert st == 200, body
        assert len(body["schedules"]) <= 3
        seen += [s["name"] for s in body["schedules"]]
        pages += 1
        after = body["next"]
        if after is None:
            break
        assert pages < 10
    assert seen == names and pages == 3, (seen, pages)
    assert_error(svc.get("/schedules?limit=0"), 400, "invalid_argument", "limit")


def test_max_schedules_caps_creation_not_replacement(service):
    """--max-schedules: a PUT creating one more is 409 and stores nothing;
    replacing one, and creating again after a delete, still work."""
    svc = service("--max-schedules", "3")
    spec = {"cron": FAR_CRON, "job": {"exchange": "", "routing_key": "q", "body": "b"}}
    names = [name_of("cap") for _ in range(3)]
    for n in names:
        put_ok(svc, n, spec)
    extra = name_of("cap")
    err = assert_error(put(svc, extra, spec), 409, "conflict")
    assert "--max-schedules" in err["message"], err
    st, _, _ = svc.get(f"/schedules/{extra}")
    assert st == 404, "a refused schedule was stored"
    put_ok(svc, names[0], dict(spec, job=dict(spec["job"], body="replaced")), expect=200)
    st, _, _ = svc.delete(f"/schedules/{names[1]}")
    assert st == 204, st
    put_ok(svc, extra, spec)


def test_patch_pauses_and_resumes_and_delete_removes(service):
    svc = service()
    name = name_of("p")
    put_ok(svc, name, {"cron": FAR_CRON, "job": {"exchange": "", "routing_key": "q",
                                                 "body": "x"}})
    st, _, paused = svc.patch(f"/schedules/{name}", {"paused": True})
    assert st == 200, paused
    assert paused["state"] == "paused" and paused["paused"] is True
    assert paused["generation"] == 2
    assert get_schedule(svc, name)["state"] == "paused"
    m = metrics(svc)
    assert m.get('rmqs_schedules{state="paused"}') == 1, m
    st, _, resumed = svc.patch(f"/schedules/{name}", {"paused": False})
    assert st == 200 and resumed["state"] == "active" and resumed["generation"] == 3
    assert_error(svc.patch(f"/schedules/{name}", {"paused": "yes"}), 400,
                 "invalid_argument", "paused")
    assert get_schedule(svc, name)["generation"] == 3, "a bad PATCH changes nothing"
    assert_error(svc.patch(f"/schedules/{name_of('nope')}", {"paused": True}), 404,
                 "not_found")

    st, _, body = svc.delete(f"/schedules/{name}")
    assert st == 204 and body is None
    assert_error(svc.get(f"/schedules/{name}"), 404, "not_found")
    assert_error(svc.delete(f"/schedules/{name}"), 404, "not_found")
    assert metrics(svc).get('rmqs_schedules{state="active"}') == 0


GOOD_JOB = {"exchange": "", "routing_key": "q", "body": "x"}
BAD_BODIES = [
    # (why, body, field the error names: one of)
    ("cron out of range", {"cron": "0 0 32 * *", "job": GOOD_JOB}, ("cron",)),
    ("cron never fires", {"cron": "0 0 30 2 *", "job": GOOD_JOB}, ("cron",)),
    ("cron and every_ms", {"cron": FAR_CRON, "every_ms": 60000, "job": GOOD_JOB},
     ("cron", "every_ms")),
    ("neither cron nor every_ms", {"job": GOOD_JOB}, ("cron", "every_ms")),
    ("every_ms below 1 s", {"every_ms": 999, "job": GOOD_JOB}, ("every_ms",)),
    ("every_ms above 366 days", {"every_ms": 366 * 86400000 + 1, "job": GOOD_JOB},
     ("every_ms",)),
    ("every_ms not an integer", {"every_ms": "60000", "job": GOOD_JOB}, ("every_ms",)),
    ("unknown field", {"cron": FAR_CRON, "colour": "red", "job": GOOD_JOB}, ("colour",)),
    ("unknown time zone", {"cron": FAR_CRON, "timezone": "Mars/Olympus_Mons",
                           "job": GOOD_JOB}, ("timezone",)),
    ("end_at before start_at", None, ("end_at",)),  # built from now below
    ("grace below 0", {"cron": FAR_CRON, "misfire_grace_ms": -1, "job": GOOD_JOB},
     ("misfire_grace_ms",)),
    ("grace above 7 days", {"cron": FAR_CRON, "misfire_grace_ms": 7 * 86400000 + 1,
                            "job": GOOD_JOB}, ("misfire_grace_ms",)),
    ("bad dst rule", {"cron": FAR_CRON, "dst": {"skipped": "later"}, "job": GOOD_JOB},
     ("dst", "dst.skipped")),
    ("paused not a boolean", {"cron": FAR_CRON, "paused": 1, "job": GOOD_JOB},
     ("paused",)),
    ("no job", {"cron": FAR_CRON}, ("job",)),
    ("job without exchange", {"cron": FAR_CRON, "job": {"routing_key": "q", "body": "x"}},
     ("exchange", "job.exchange")),
    ("job with deliver_at", {"cron": FAR_CRON,
                             "job": dict(GOOD_JOB, deliver_at="IN AN HOUR")},
     ("deliver_at", "job.deliver_at")),
    ("job with delay_ms", {"cron": FAR_CRON, "job": dict(GOOD_JOB, delay_ms=5)},
     ("delay_ms", "job.delay_ms")),
    ("job with body and body_base64", {"cron": FAR_CRON,
                                       "job": dict(GOOD_JOB, body_base64="eA==")},
     ("body", "body_base64", "job.body", "job.body_base64")),
    ("job max_attempts 0", {"cron": FAR_CRON, "job": dict(GOOD_JOB, max_attempts=0)},
     ("max_attempts", "job.max_attempts")),
]


def test_every_bad_request_is_a_400_naming_the_field_and_changes_nothing(service):
    svc = service()
    keep = name_of("keep")
    kept = put_ok(svc, keep, {"cron": FAR_CRON, "job": GOOD_JOB})
    start = now_ms() + 3600000
    failures = []
    for why, body, fields in BAD_BODIES:
        if body is None:
            body = {"every_ms": 60000, "start_at": iso(start), "end_at": iso(start),
                    "job": GOOD_JOB}
        if body.get("job", {}).get("deliver_at") == "IN AN HOUR":
            body = dict(body, job=dict(GOOD_JOB, deliver_at=iso(start)))
        for target in (name_of("new"), keep):  # a new name, and an existing one
            resp = put(svc, target, body)
            try:
                err = assert_error(resp, 400, "invalid_argument")
                assert err.get("field") in fields, f"field {err.get('field')!r}, want {fields}"
            except AssertionError as e:
                failures.append(f"{why} -> {resp!r}: {e}")
    assert not failures, "\n".join(failures)
    # the position of the bad part, and the reason
    err = assert_error(put(svc, name_of(), {"cron": "0 0 32 * *", "job": GOOD_JOB}),
                       400, "invalid_argument", "cron")
    assert "position 5" in err["message"] and "day-of-month" in err["message"], err
    err = assert_error(put(svc, name_of(), {"cron": "0 0 30 2 *", "job": GOOD_JOB}),
                       400, "invalid_argument", "cron")
    assert "never fires" in err["message"], err
    # bad names: a character outside [A-Za-z0-9._:-], 201 bytes
    for bad in ("bad*name", "a" * 201, "caf%C3%A9"):
        assert_error(put(svc, bad, {"cron": FAR_CRON, "job": GOOD_JOB}), 400,
                     "invalid_argument", "name")
    ok_name = "a" * 200
    put_ok(svc, ok_name, {"cron": FAR_CRON, "job": GOOD_JOB})
    assert svc.delete(f"/schedules/{ok_name}").status == 204
    # not JSON, the wrong media type
    assert_error(put(svc, name_of(), "{not json"), 400, "invalid_argument")
    assert_error(put(svc, name_of(), json.dumps({"cron": FAR_CRON, "job": GOOD_JOB}),
                     headers={"Content-Type": "text/plain"}), 415, "unsupported_media_type")
    # nothing changed: one schedule, as it was, and no job
    st, _, page = svc.get("/schedules")
    assert [s["name"] for s in page["schedules"]] == [keep], page
    assert get_schedule(svc, keep) == kept, "the existing schedule is as it was"
    st, _, jobs = svc.get("/jobs")
    assert st == 200 and jobs["jobs"] == [], jobs


def test_the_token_guards_every_schedule_route(service):
    token = "sched-token-" + uuid.uuid4().hex
    svc = service(extra_env={"RMQS_API_TOKEN": token}, wait="health")
    auth = {"Authorization": f"Bearer {token}"}
    name = name_of("tok")
    spec = {"cron": FAR_CRON, "job": GOOD_JOB}
    assert_error(put(svc, name, spec), 401, "unauthorized")
    assert_error(svc.get("/schedules"), 401, "unauthorized")
    st, _, body = put(svc, name, spec, headers=auth)
    assert st == 201, body
    for method, path, body in (("GET", f"/schedules/{name}", None),
                               ("PATCH", f"/schedules/{name}", {"paused": True}),
                               ("DELETE", f"/schedules/{name}", None)):
        assert_error(svc.request(method, path, body), 401, "unauthorized")
    assert svc.get(f"/schedules/{name}", headers=auth).body["generation"] == 1
    assert svc.request("DELETE", f"/schedules/{name}", headers=auth).status == 204


def test_curl_and_urllib_put_and_get(service):
    svc = service()
    base = f"http://127.0.0.1:{svc.port}"
    spec = json.dumps({"every_ms": 3600000, "job": GOOD_JOB})
    # curl
    if shutil.which("curl") is None:
        pytest.fail("curl is missing (tests/run.sh installs it)")
    name = name_of("curl")
    r = subprocess.run(["curl", "-sS", "-X", "PUT", f"{base}/schedules/{name}",
                        "-H", "Content-Type: application/json", "-d", spec,
                        "-w", "\n%{http_code}"], capture_output=True, text=True,
                       timeout=30, check=True)
    body, code = r.stdout.rsplit("\n", 1)
    assert code == "201", r.stdout
    assert json.loads(body)["every_ms"] == 3600000
    r = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}",
                        f"{base}/schedules/{name}?count=2"],
                       capture_output=True, text=True, timeout=30, check=True)
    body, code = r.stdout.rsplit("\n", 1)
    assert code == "200" and len(json.loads(body)["next_runs"]) == 2, r.stdout
    # Python's urllib
    name = name_of("urllib")
    req = urllib.request.Request(f"{base}/schedules/{name}", data=spec.encode(),
                                 method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=15) as resp:
        assert resp.status == 201
        assert json.load(resp)["name"] == name
    with urllib.request.urlopen(f"{base}/schedules/{name}", timeout=15) as resp:
        assert resp.status == 200 and json.load(resp)["state"] == "active"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{base}/schedules/{name_of('none')}", timeout=15)
    assert e.value.code == 404


# --- firing ---------------------------------------------------------------------

def test_every_second_delivers_one_message_per_second_on_time(service, amqp, report):
    svc = service()
    name = name_of("tick")
    put_ok(svc, name, {"cron": EVERY_SECOND, "job": template(amqp, "tick",
                                                             headers={"k": "v"})})
    n = 8
    msgs = amqp.wait_for(n, timeout=n + 15)
    late = []
    times = []
    for m in msgs:
        assert m.headers.get("x-scheduler-schedule") == name, m.headers
        assert m.headers.get("k") == "v" and m.body == b"tick"
        t = fire_ms(m)
        assert t % 1000 == 0, f"fire time not a whole second: {t}"
        times.append(t)
        late.append(m.received_at * 1000 - t)
    assert len(set(times)) == len(times), f"a fire time twice: {sorted(times)}"
    ts = sorted(times)
    assert ts == list(range(ts[0], ts[0] + 1000 * len(ts), 1000)), \
        f"not one per second: {[t - ts[0] for t in ts]}"
    early = [round(v, 1) for v in late if v < -EARLY_TOLERANCE_MS]
    p50 = statistics.median(late)
    report(f"schedules: */1 s on {svc.store}: {len(late)} messages, lateness "
           f"p50 {p50:.1f} ms, max {max(late):.1f} ms, min {min(late):.1f} ms")
    assert not early, f"published before the fire time (ms): {early}"
    assert p50 < 20, f"median lateness {p50:.1f} ms: {sorted(late)}"
    assert max(late) < 500, f"a message {max(late):.0f} ms late: {sorted(late)}"

    jobs = schedule_jobs(svc, name)
    by_id = {j["id"]: j for j in jobs}
    for m in msgs:
        j = by_id.get(m.job_id)
        assert j, f"message job {m.job_id} not in GET /jobs?schedule={name}"
        assert j["source"] == "schedule" and j["schedule"] == name, j
        assert ts_ms(j["fire_at"]) == fire_ms(m), j
        svc.wait_status(j["id"], "sent", timeout=10)  # its confirm recorded
    # the ids are the fire times' (time-ordered: the first 48 bits)
    for j in jobs:
        assert int(j["id"].replace("-", "")[:12], 16) == ts_ms(j["fire_at"]), j
    m = metrics(svc)
    assert m.get('rmqs_schedule_runs_total{result="fired"}', 0) >= n, m
    assert m.get('rmqs_schedules{state="active"}') == 1
    s = get_schedule(svc, name)
    assert s["last_job_id"] in by_id or ts_ms(s["last_run_at"]) >= max(ts), s


def test_kill_9_while_firing_loses_and_repeats_no_run(service, amqp_factory, report, store):
    """Three 1-second schedules; the service is killed -9 four times at
    random moments and restarted at once. Every fire time from the first to
    the last has exactly one run, and a message unless the misfire rule
    skipped it (counted by the metric, scraped just before each kill; with a
    large grace and a restart quicker than the lead, none)."""
    rng = random.Random()
    # PostgreSQL: the claims of the killed process are another instance's
    # to the restarted one, taken over when their lease ends
    svc = service(*(("--lease-ms", str(LEASE_MS)) if store == "postgres" else ()))
    consumers = [amqp_factory() for _ in range(3)]
    names = [name_of(f"k{i}") for i in range(3)]
    first = {}
    for n, c in zip(names, consumers):
        body = put_ok(svc, n, {"cron": EVERY_SECOND, "misfire_grace_ms": 600000,
                               "job": template(c, n)})
        first[n] = ts_ms(body["next_runs"][0]["utc"])
    skipped = misfired = 0
    downtimes, kills = [], []
    for c in consumers:
        c.wait_for(1, timeout=15)
    for _ in range(4):
        time.sleep(rng.uniform(1.2, 2.8))  # let it run a random while
        m = metrics(svc)
        skipped += m.get('rmqs_schedule_runs_total{result="skipped"}', 0)
        misfired += m.get('rmqs_schedule_runs_total{result="misfired_fired"}', 0)
        t0 = time.monotonic()
        kills.append(now_ms())
        svc.kill9()
        svc.restart()
        downtimes.append(round(time.monotonic() - t0, 2))
    last = (now_ms() // 1000 + 3) * 1000
    for c in consumers:
        wait_until(lambda c=c: any(fire_ms(m) >= last for m in c.snapshot()), 20,
                   "runs after the last restart")
    m = metrics(svc)
    skipped += m.get('rmqs_schedule_runs_total{result="skipped"}', 0)
    misfired += m.get('rmqs_schedule_runs_total{result="misfired_fired"}', 0)
    missing, dups = check_runs(svc, first, last, consumers, names, kills)
    n_missing = sum(len(v) for v in missing.values())
    report(f"schedules: kill -9 x4 on {svc.store}: 3 schedules, "
           f"{sum((last - first[n]) // 1000 + 1 for n in names)} fire times, missing "
           f"{n_missing}, duplicated messages {dups} (same job, at a kill), downtimes "
           f"{downtimes} s, skipped {skipped:.0f}, misfired_fired {misfired:.0f}")
    lost = {n: [t - first[n] for t in v] for n, v in missing.items() if v}
    assert n_missing == skipped, \
        f"{n_missing} fire times without a message, {skipped:.0f} counted skipped: {lost}"
    # Runs are created --schedule-lead-ms (2 s) ahead: a restart quicker
    # than that finds the next runs made and misses nothing at all.
    if max(downtimes) < 2.0:
        assert n_missing == 0, f"runs lost: {lost}"


def schedule_row(svc, name):
    """(next_fire_at, last_fire_at) of the stored schedule (service stopped)."""
    assert re.fullmatch(r"[A-Za-z0-9._:-]+", name)
    (nxt, last), = db_query(svc, "SELECT next_fire_at, last_fire_at FROM schedules "
                                 f"WHERE name = '{name}'")
    return int(nxt), (None if last is None else int(last))


def wait_phase(anchor, every, phase_ms):
    """Sleep until now is phase_ms after a fire time of the grid anchor +
    k * every (a deliberate point in the interval, not a wait for a result)."""
    now = now_ms()
    k = (now - anchor) // every + 1
    target = anchor + k * every + phase_ms
    if target - now < 0:
        target += every
    time.sleep((target - now) / 1000)


@pytest.mark.parametrize("case", ["shorter", "longer"])
def test_downtime_shorter_than_the_grace_fires_once_longer_skips(service, amqp, report,
                                                                 case):
    """every_ms on a known grid; the service is stopped across several fire
    times. shorter: grace 3 s, interval 2 s: the latest missed run fires
    once at restart (misfired_fired 1), the others are skipped. longer:
    grace 0.5 s, interval 4 s, restarted 1 s after a fire time: the latest
    is already older than the grace, so every missed run is skipped. A run
    created before the stop whose time passed more than the grace ago is
    expired (cancelled), never published."""
    every, grace, phase = (2000, 3000, 300) if case == "shorter" else (4000, 500, 1000)
    svc = service()
    anchor = (now_ms() // 1000 + 2) * 1000
    name = name_of(case)
    put_ok(svc, name, {"every_ms": every, "start_at": iso(anchor),
                       "misfire_grace_ms": grace, "job": template(amqp)})
    amqp.wait_for(2, timeout=15)
    svc.terminate()
    stopped = now_ms()
    nxt, last = schedule_row(svc, name)
    assert (nxt - anchor) % every == 0, (nxt, anchor)
    # down for 3 fire times at least, restarted at `phase` after one of them
    time.sleep(max(0, (nxt + 2 * every - now_ms()) / 1000))
    wait_phase(anchor, every, phase)
    restart = now_ms()
    svc.restart()
    ready = now_ms()
    L = anchor + (restart - anchor) // every * every  # latest fire time <= restart
    wait_until(lambda: runs(svc, "skipped") > 0 or runs(svc, "misfired_fired") > 0, 10,
               "the catch-up to be counted")
    after = L + every
    wait_until(lambda: any(fire_ms(m) >= after for m in amqp.snapshot()), every / 1000 + 10,
               "the first run after the catch-up")
    m = metrics(svc)
    sk = m.get('rmqs_schedule_runs_total{result="skipped"}', 0)
    mf = m.get('rmqs_schedule_runs_total{result="misfired_fired"}', 0)
    got = by_fire_time(amqp.snapshot())
    assert not {t for t, v in got.items() if len(v) > 1}, "a fire time twice"
    in_gap = sorted(t for t in got if nxt <= t <= L)
    missed = list(range(nxt, L + 1, every))
    report(f"schedules: downtime {case} than the grace on {svc.store}: down "
           f"{(restart - stopped) / 1000:.1f} s, start-up {ready - restart} ms, missed "
           f"{len(missed)} fire times, skipped {sk:.0f}, misfired_fired {mf:.0f}, "
           f"published in the gap {[t - nxt for t in in_gap]}")
    assert ready - restart < every - phase, "restart slower than the test's margin"
    if case == "shorter":
        assert in_gap == [L], f"want only the latest missed run ({L - nxt}) fired"
        assert mf == 1 and sk == len(missed) - 1, (mf, sk, len(missed))
        msg = got[L][0]
        assert msg.received_at * 1000 >= restart, "the misfired run went out before the restart?"
        job = next(j for j in schedule_jobs(svc, name) if ts_ms(j["fire_at"]) == L)
        assert job["status"] == "sent" and ts_ms(job["sent_at"]) >= restart, job
    else:
        assert in_gap == [], f"published after more than the grace: {in_gap}"
        assert mf == 0 and sk == len(missed), (mf, sk, len(missed))
    # a run created before the stop for a time after it: expired, not sent
    jobs = schedule_jobs(svc, name)
    early_made = [j for j in jobs if stopped < ts_ms(j["fire_at"]) < nxt]
    for j in early_made:
        j = svc.wait_status(j["id"], ("cancelled",), timeout=10)
        assert "misfire_grace_ms" in (j["last_error"] or ""), j
        assert ts_ms(j["fire_at"]) not in got, j
    # the following runs are on time again: the next run is an ordinary
    # run, sent at its fire time by the service's clock (its sent_at: the
    # broker's confirm), whatever the test's consumer thread was doing on a
    # loaded machine
    j = next(j for j in schedule_jobs(svc, name) if ts_ms(j["fire_at"]) == after)
    j = svc.wait_status(j["id"], ("sent",), timeout=10)
    assert ts_ms(j["deliver_at"]) == after and ts_ms(j["sent_at"]) - after < 500, j


# --- changes take effect for the next run -----------------------------------

def firing(svc, amqp, prefix, body="tick"):
    """A */1 s schedule to amqp's queue, once two of its runs have arrived:
    (its name, now in ms)."""
    name = name_of(prefix)
    put_ok(svc, name, {"cron": EVERY_SECOND, "job": template(amqp, body)})
    amqp.wait_for(2, timeout=15)
    return name, now_ms()


def wait_past(ms, what):
    wait_until(lambda: now_ms() >= ms, (ms - now_ms()) / 1000 + 5, what)


def contiguous(times):
    ts = sorted(times)
    return ts == list(range(ts[0], ts[-1] + 1, 1000))


def test_patch_routing_key_and_body_take_effect_for_the_next_run(service, amqp_factory):
    svc = service()
    a, b = amqp_factory(), amqp_factory()
    name = name_of("patch")
    put_ok(svc, name, {"cron": EVERY_SECOND, "job": template(a, "old")})
    a.wait_for(2, timeout=15)
    t_patch = now_ms()
    st, _, body = svc.patch(f"/schedules/{name}", {"job": template(b, "new")})
    assert st == 200 and body["generation"] == 2, body
    b.wait_for(3, timeout=15)
    t_end = now_ms()
    for m in a.snapshot():
        assert m.body == b"old"
        assert fire_ms(m) <= t_patch + HELD_MS, \
            f"old routing key used {fire_ms(m) - t_patch} ms after the PATCH"
    assert all(m.body == b"new" for m in b.snapshot())
    assert not duplicates(a, b), "a fire time published under both templates"
    times = [fire_ms(m) for m in a.snapshot() + b.snapshot() if fire_ms(m) < t_end - 1000]
    assert contiguous(times), f"a run lost across the PATCH: {sorted(times)}"


def test_put_with_another_body_takes_effect_for_the_next_run(service, amqp):
    svc = service()
    name, t_put = firing(svc, amqp, "put", "v1")
    put_ok(svc, name, {"cron": EVERY_SECOND, "job": template(amqp, "v2")}, expect=200)
    wait_until(lambda: sum(m.body == b"v2" for m in amqp.snapshot()) >= 2, 15,
               "two runs of the new body")
    t_end = now_ms()
    for m in amqp.snapshot():
        if m.body == b"v1":
            assert fire_ms(m) <= t_put + HELD_MS, fire_ms(m) - t_put
    assert not duplicates(amqp)
    times = [fire_ms(m) for m in amqp.snapshot() if fire_ms(m) < t_end - 1000]
    assert contiguous(times), f"a run lost across the PUT: {sorted(times)}"


def test_delete_stops_future_runs_and_keeps_the_jobs(service, amqp):
    svc = service()
    name, t_del = firing(svc, amqp, "del")
    assert svc.delete(f"/schedules/{name}").status == 204
    # what may still come is a run the dispatcher holds: within HELD_MS
    wait_past(t_del + HELD_MS + 3000, "3 s past the DELETE")
    late = [fire_ms(m) - t_del for m in amqp.snapshot() if fire_ms(m) > t_del + HELD_MS]
    assert not late, f"runs after the DELETE: {late} ms"
    jobs = schedule_jobs(svc, name)
    sent = [j for j in jobs if j["status"] == "sent"]
    assert len(sent) >= 2, jobs
    for j in jobs:
        if ts_ms(j["fire_at"]) > t_del + HELD_MS:
            assert j["status"] == "cancelled", j
    assert not duplicates(amqp)


def test_pause_stops_runs_and_resume_does_not_replay_them(service, amqp):
    svc = service()
    name, t_pause = firing(svc, amqp, "pause")
    assert svc.patch(f"/schedules/{name}", {"paused": True}).status == 200
    wait_past(t_pause + HELD_MS + 2500, "2.5 s of pause")
    t_resume = now_ms()
    during = [fire_ms(m) - t_pause for m in amqp.snapshot()
              if t_pause + HELD_MS < fire_ms(m) <= t_resume]
    assert not during, f"runs while paused: {during}"
    assert svc.patch(f"/schedules/{name}", {"paused": False}).status == 200
    wait_until(lambda: any(fire_ms(m) > t_resume for m in amqp.snapshot()), 10,
               "a run after the resume")
    replayed = [fire_ms(m) for m in amqp.snapshot()
                if t_pause + HELD_MS < fire_ms(m) <= t_resume]
    assert not replayed, f"paused runs fired at the resume: {replayed}"
    assert runs(svc, "misfired_fired") == 0 and runs(svc, "skipped") == 0, \
        "a paused schedule misses nothing"
    assert not duplicates(amqp)


def test_broker_down_past_the_grace_one_run_waits_expires_and_one_fires_after(
        service, amqp_factory, broker, report):
    """RabbitMQ stopped for longer than the grace under a 1-second schedule:
    the scheduler keeps one run waiting (it creates no more while the last
    one is more than 1 s overdue), that run expires unpublished (cancelled,
    last_error naming misfire_grace_ms), and after the broker is back the
    catch-up fires the latest missed run once and skips the others; nothing
    is published more than the grace after its fire time."""
    grace = 2000
    svc = service("--backoff-base-ms", "100", "--backoff-cap-ms", "500")
    amqp = amqp_factory(durable=True)
    name = name_of("outage")
    put_ok(svc, name, {"cron": EVERY_SECOND, "misfire_grace_ms": grace,
                       "job": template(amqp)})
    amqp.wait_for(2, timeout=15)
    t_stop = now_ms()
    broker.stop_app()
    wait_until(lambda: svc.get("/readyz").status == 503, 20, "/readyz 503")
    wait_past(now_ms() + grace + 4000, "the outage to outlast the grace")
    made = [j for j in schedule_jobs(svc, name) if ts_ms(j["fire_at"]) > t_stop]
    outage_s = (now_ms() - t_stop) / 1000
    broker.start_app()
    t_back = now_ms()
    wait_until(lambda: svc.get("/readyz").status == 200, 60, "/readyz 200 again")
    wait_until(lambda: any(fire_ms(m) > t_back + 2000 for m in amqp.snapshot()), 30,
               "runs on time again")
    # one run waiting, plus those created ahead before the broker went
    assert len(made) <= 4, \
        f"{len(made)} runs created during a {outage_s:.0f} s outage: " \
        f"{[ts_ms(j['fire_at']) - t_stop for j in made]}"
    got = by_fire_time(amqp.snapshot())
    for t, msgs in got.items():
        assert len({m.job_id for m in msgs}) == 1, f"fire time {t} by two runs"
        late = msgs[0].received_at * 1000 - t
        assert late <= grace + 500, f"published {late:.0f} ms after its fire time " \
            f"(grace {grace})"
    expired = []
    for j in made:
        if ts_ms(j["fire_at"]) not in got:
            j = svc.wait_status(j["id"], ("cancelled",), timeout=20)
            assert "misfire_grace_ms" in (j["last_error"] or ""), j
            expired.append(j["id"])
    assert expired, "the run waiting through the outage was published past its grace?"
    mf, sk = runs(svc, "misfired_fired"), runs(svc, "skipped")
    report(f"schedules: broker down {outage_s:.1f} s on {svc.store} (grace {grace} ms): "
           f"{len(made)} runs made meanwhile, {len(expired)} expired, then "
           f"misfired_fired {mf:.0f}, skipped {sk:.0f}")
    assert mf == 1 and sk >= 1, (mf, sk)


# --- the documentation's examples, run ----------------------------------------

def readme_schedule_commands():
    """The curl commands of docs/schedules.md's opening section (before its
    first subheading), as word lists (pylib.markdown's block reader and
    shell-line splitter)."""
    first, text = markdown.section(SCHEDULES_DOC, "Recurring schedules",
                                   subsections=False)
    cmds = [w for _, b in markdown.fenced_blocks(text, "sh", first)
            for w in markdown.shell_commands(b) if w[0] == "curl"]
    assert len(cmds) >= 6, cmds
    return cmds


def test_the_readme_schedule_examples_run_as_written(service):
    """Each curl command of the section against the real service (only the
    address rewritten): a 2xx answer, in the README's order."""
    svc = service()
    done = []
    for words in readme_schedule_commands():
        words = [w.replace("127.0.0.1:8080", f"127.0.0.1:{svc.port}") for w in words]
        r = subprocess.run(words + ["-sS", "-o", "/dev/stderr", "-w", "%{http_code}"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (words, r.stderr)
        assert r.stdout.startswith("2"), f"{' '.join(words)} -> {r.stdout} {r.stderr}"
        done.append(r.stdout)
    assert "201" in done and "204" in done, done
