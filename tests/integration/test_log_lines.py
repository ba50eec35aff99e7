"""A client's value cannot forge a log line or a field (issue 21): a routing
key, a bulk filter, a Host or an Origin that holds a newline, quotes and
`level=error module=auth ...` is written as one value of one line, in both
log formats. Against the real binary and a real RabbitMQ: the job's publish
fails (its exchange does not exist), which logs its routing key.
"""

import json
import re
import uuid

from helpers import wait_until

FORGED = ('x\n2026-01-01T00:00:00.000Z level=error module=auth msg="forged" '
          'user="root" "level":"error","module":"auth","message":"forged"')
TEXT_LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(debug|info|warn|error) '
                       r'module=[a-z_]+ msg="')


def harness(line):
    """The test harness's own marks in the log file (tests/pylib/service.py
    writes "=== start: ..." before each start)."""
    return line.startswith("=== ")


def provoke(svc):
    """Every path that logs a client's value: a failed publish (routing key),
    a bulk action (its filter), a refused Host and Origin."""
    job = svc.schedule({"exchange": f"no-such-exchange-{uuid.uuid4().hex[:8]}",
                        "routing_key": FORGED, "body": "x", "delay_ms": 0,
                        "max_attempts": 1})
    wait_until(lambda: svc.job(job["id"])["status"] == "failed", 20,
               "the publish to a missing exchange to fail")
    r = svc.post("/jobs/bulk", {"action": "cancel", "filter": {"routing_key": FORGED}})
    assert r.status == 202, r.body
    quoted = 'evil" level=error module=auth msg="forged'
    assert svc.get("/jobs", headers={"Host": quoted}).status in (400, 403)
    assert svc.request("DELETE", f"/jobs/{job['id']}", None,
                       headers={"Origin": quoted}).status == 403
    wait_until(lambda: "change from another origin refused" in svc.log(), 10,
               "the refused Origin in the log")
    # the bulk action's own line, in either format (a bare "finished" also
    # matches the migration 0003_finished_index.sql logged at start)
    wait_until(lambda: 'module=bulk msg="finished"' in svc.log()
               or '"module":"bulk","message":"finished"' in svc.log(), 20,
               "the bulk action's finished line")
    return job


def test_text_lines_cannot_be_forged(service):
    svc = service("--log-format", "text")
    provoke(svc)
    lines = svc.log().splitlines()
    bad = [ln for ln in lines if ln.strip() and not TEXT_LINE.match(ln)
           and not harness(ln)]
    assert not bad, f"lines that are not the service's own: {bad[:5]}"
    assert not [ln for ln in lines if "module=auth" in ln.split(' msg="', 1)[0]]
    failed = [ln for ln in lines if 'msg="job failed"' in ln]
    assert failed, lines[-20:]
    # the routing key is one quoted value, its newline and quotes escaped
    assert 'routing_key="x\\n2026-01-01T00:00:00.000Z level=error module=auth ' \
           'msg=\\"forged\\"' in failed[0], failed[0]


def test_json_lines_keep_each_value_whole(service):
    svc = service("--log-format", "json")
    provoke(svc)
    objs = []
    for ln in svc.log().splitlines():
        if not ln.strip() or harness(ln):
            continue
        objs.append(json.loads(ln))
    assert all(o["module"] != "auth" for o in objs)
    failed = [o for o in objs if o["message"] == "job failed"]
    assert failed and failed[0]["routing_key"] == FORGED, failed
    assert failed[0]["level"] == "warn"
    # the bulk filter is logged as its JSON text, whole
    started = [o for o in objs if o["module"] == "bulk" and o["message"] == "started"]
    assert started, objs[-10:]
    assert json.loads(started[0]["filter"])["routing_key"] == FORGED, started[0]
    refused = [o for o in objs if o["message"] == "change from another origin refused"]
    assert refused and refused[0]["origin"].startswith('evil" level=error'), refused
    for o in objs:
        assert o["level"] in ("debug", "info", "warn", "error"), o
