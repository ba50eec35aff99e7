"""Only the sites the operator names may act (issue 21): a page on another
site can reach a service on 127.0.0.1 by DNS rebinding (its own name then
resolves to 127.0.0.1 and the browser sends that name as Host) or with a
plain HTML form (no preflight; Chromium sends no Sec-Fetch-Site to a
non-trustworthy origin). Against the real binary, in every --ui mode
without a token:

- a Host that is not the listen address, localhost, an IP literal or a
  --public-origin: 403 host_not_allowed for every method, nothing stored;
- a change whose Origin is not the service's own (or a --public-origin):
  403 cross_origin, whatever Sec-Fetch-Site says;
- a change with a form content type: 415, nothing changed;
- scripts (curl, Python's http.client) without Origin are unaffected.
"""

import subprocess

import pytest

from helpers import assert_error, wait_until

LATER = 3_600_000
UI_MODES = [("--ui", "off"), ("--ui", "read-only"), ("--ui", "on")]
FORM = "application/x-www-form-urlencoded"


def later_job(routing_key="sites"):
    return {"exchange": "", "routing_key": routing_key, "body": "x", "delay_ms": LATER}


def count(svc):
    return svc.get("/jobs/count").body["count"]


@pytest.mark.parametrize("ui", UI_MODES, ids=[m[1] for m in UI_MODES])
def test_a_rebinding_page_gets_nothing_and_changes_nothing(service, ui):
    svc = service(*ui)
    job = svc.schedule(later_job())
    evil = {"Host": f"evil.test:{svc.port}"}
    before = count(svc)
    for method, path, body in [
            ("GET", "/jobs", None), ("GET", f"/jobs/{job['id']}", None),
            ("GET", "/ui/config.json", None), ("GET", "/metrics", None),
            ("POST", "/schedule", later_job("rebound")),
            ("POST", f"/jobs/{job['id']}/run", None),
            ("DELETE", f"/jobs/{job['id']}", None),
            ("POST", "/jobs/bulk", {"action": "cancel", "filter": {}})]:
        r = svc.request(method, path, body, headers=evil)
        assert_error(r, 403, "host_not_allowed")
        assert r.headers["Connection"].lower() == "close", method + path
    assert count(svc) == before
    again = svc.job(job["id"])
    assert again["status"] == "pending" and again["deliver_at"] == job["deliver_at"]
    wait_until(lambda: "request for another host refused" in svc.log(), 10,
               "the refusal in the log")


@pytest.mark.parametrize("ui", UI_MODES, ids=[m[1] for m in UI_MODES])
def test_a_cross_site_form_cannot_act(service, ui):
    svc = service(*ui)
    job = svc.schedule(later_job())
    own = f"http://127.0.0.1:{svc.port}"
    cases = [
        # a form on another site: its Origin, its content type, and no
        # Sec-Fetch-Site (Chromium sends none to a non-trustworthy origin)
        ({"Origin": "http://evil.test", "Content-Type": FORM}, 403, "cross_origin"),
        ({"Origin": "null", "Content-Type": "text/plain"}, 403, "cross_origin"),
        # Sec-Fetch-Site cannot vouch for another Origin
        ({"Origin": "http://evil.test", "Sec-Fetch-Site": "same-origin",
          "Content-Type": "application/json"}, 403, "cross_origin"),
        ({"Origin": f"http://127.0.0.1:{svc.port + 1}"}, 403, "cross_origin"),
        # the service's own origin still may not send a form type
        ({"Origin": own, "Content-Type": FORM}, 415, "unsupported_media_type"),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 415,
         "unsupported_media_type"),
    ]
    for headers, status, code in cases:
        for method, path, body in [("POST", f"/jobs/{job['id']}/run", b"a=1"),
                                   ("DELETE", f"/jobs/{job['id']}", None),
                                   ("POST", "/schedule", b"exchange=&routing_key=x")]:
            r = svc.request(method, path, body, headers=headers)
            assert_error(r, status, code)
    again = svc.job(job["id"])
    assert again["status"] == "pending" and again["deliver_at"] == job["deliver_at"]
    assert count(svc) == 1


def test_curl_without_origin_is_unaffected(service):
    svc = service()
    job = svc.schedule(later_job())
    out = subprocess.run(
        ["curl", "-sS", "-X", "POST", "-w", "\n%{http_code}",
         f"http://127.0.0.1:{svc.port}/jobs/{job['id']}/run"],
        capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.rsplit("\n", 1)[1] == "200", out
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: evil.test",
         f"http://127.0.0.1:{svc.port}/jobs"],
        capture_output=True, text=True, timeout=30, check=True).stdout
    assert out == "403", out
    for host in ("localhost", f"localhost:{svc.port}", f"[::1]:{svc.port}", "10.0.0.1"):
        assert svc.get("/jobs", headers={"Host": host}).status == 200, host


def test_a_public_origin_may_act_and_name_the_host(service):
    svc = service("--ui", "on", "--public-origin",
                  "https://sched.example.com, http://ops.example:8081")
    job = svc.schedule(later_job())
    assert svc.get("/jobs", headers={"Host": "sched.example.com"}).status == 200
    r = svc.request("POST", f"/jobs/{job['id']}/run", None,
                    headers={"Host": "sched.example.com",
                             "Origin": "https://sched.example.com"})
    assert r.status == 200, r.body
    r = svc.request("DELETE", f"/jobs/{job['id']}", None,
                    headers={"Origin": "http://ops.example:8081"})
    assert r.status in (200, 409), r.body  # it may have been sent by now
    assert_error(svc.get("/jobs", headers={"Host": "other.example.com"}), 403,
                 "host_not_allowed")


@pytest.mark.parametrize("value", ["sched.example.com", "https://h/path", "ftp://h"])
def test_a_public_origin_that_is_not_one_stops_the_start(service, value):
    svc = service("--public-origin", value, wait=None)
    code = svc.proc.wait(timeout=20)
    assert code == 2, (code, svc.log()[-2000:])
    assert "public_origin" in svc.log() or "public-origin" in svc.log(), svc.log()[-2000:]
