"""GET /metrics: valid Prometheus text (promtool check metrics), documented
in api/openapi.yaml, and its numbers move as jobs flow: scheduled, sent
(with a lateness observation), failed on NO_ROUTE, jobs by status equal to
what GET /jobs lists, HTTP answers by route and status, and whether the
broker connection is up.

promtool comes with Debian's prometheus package; without it the promtool
check is skipped, saying so (the other checks run)."""

import math
import re
import shutil
import subprocess
import time

import pytest

from helpers import (JOB_STATUSES, env, format_ts, free_port, http_request_text,
                     wait_until)

LATER = 3_600_000
LINE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

DOCUMENTED = {  # name: type (api/openapi.yaml, GET /metrics)
    "rmqs_jobs_scheduled_total": "counter",
    "rmqs_jobs_published_total": "counter",
    "rmqs_jobs_cancelled_total": "counter",
    "rmqs_publish_attempts_total": "counter",
    "rmqs_publish_failures_total": "counter",
    "rmqs_jobs": "gauge",
    "rmqs_dispatch_lateness_seconds": "histogram",
    "rmqs_http_requests_total": "counter",
    "rmqs_http_request_duration_seconds": "histogram",
    "rmqs_http_connections_cut_total": "counter",
    "rmqs_broker_connected": "gauge",
    "rmqs_broker_reconnects_total": "counter",
    "rmqs_claims_lapsed_total": "counter",
    "rmqs_database_size_bytes": "gauge",
    "rmqs_search_index_lag_jobs": "gauge",
    "rmqs_http_requests_waiting": "gauge",
    "rmqs_schedule_runs_total": "counter",
    "rmqs_schedules": "gauge",
    "rmqs_build_info": "gauge",
    "rmqs_limit_granted_total": "counter",
    "rmqs_limit_held_total": "counter",
    "rmqs_limit_overflow_total": "counter",
    "rmqs_limit_buckets": "gauge",
    "rmqs_limit_rate_per_second": "gauge",
    "rmqs_limit_wait_seconds": "histogram",
    "rmqs_limit_held_jobs": "gauge",
    "rmqs_broker_blocked": "gauge",
    "rmqs_jobs_failed_total": "counter",
    "rmqs_database_up": "gauge",
    "rmqs_overdue_jobs": "gauge",
    "rmqs_oldest_overdue_job_age_seconds": "gauge",
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_virtual_memory_bytes": "gauge",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
    "process_start_time_seconds": "gauge",
}
# the gauges of the whole database, labelled with the store they count
STORE_GAUGES = ("rmqs_jobs", "rmqs_schedules", "rmqs_database_size_bytes",
                "rmqs_search_index_lag_jobs", "rmqs_overdue_jobs",
                "rmqs_oldest_overdue_job_age_seconds", "rmqs_limit_held_jobs")


class Metrics:
    """One scrape: {(name, frozenset(labels)): value} plus the TYPE lines."""

    def __init__(self, text):
        self.text = text
        self.samples = {}
        self.types = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
                continue
            if not line or line.startswith("#"):
                continue
            m = LINE_RE.match(line)
            assert m, f"unparsable metrics line {line!r}"
            labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
            self.samples[(m.group(1), labels)] = float(m.group(3))

    def matching(self, name, labels):
        want = set(labels.items())
        return [v for (n, ls), v in self.samples.items() if n == name and want <= ls]

    def get(self, name, **labels):
        """The sum of the series of name whose labels include these (0 if
        none: counters only appear once non-zero for HTTP requests), so a
        label added later (method, store) leaves older checks as they were."""
        return sum(self.matching(name, labels), 0.0)

    def has(self, name, **labels):
        return bool(self.matching(name, labels))

    def labels(self, name):
        return [dict(ls) for (n, ls) in self.samples if n == name]


def scrape(svc, headers=None):
    resp = http_request_text(svc.port, "/metrics", headers=headers)
    assert resp.status == 200, resp
    assert resp.headers.get_content_type() == "text/plain"
    assert resp.headers.get_param("version") == "0.0.4", resp.headers["Content-Type"]
    return Metrics(resp.text)


def promtool_check(text):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus): "
                    "the exposition format was not checked")
    r = subprocess.run([promtool, "check", "metrics"], input=text,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, \
        f"promtool check metrics ({r.returncode}):\n{r.stdout}{r.stderr}\n---\n{text}"


def later_job(**kw):
    return dict({"exchange": "", "routing_key": "metrics", "body": "x",
                 "delay_ms": LATER}, **kw)


def assert_histogram(m, name, **labels):
    """Cumulative buckets ending in +Inf == _count, and _sum >= 0."""
    buckets = sorted(((float(le), v) for (n, ls), v in m.samples.items()
                      if n == name + "_bucket"
                      and {k: x for k, x in ls if k != "le"} == labels
                      for le in [dict(ls)["le"]]), key=lambda t: t[0])
    assert buckets and math.isinf(buckets[-1][0]), f"{name}{labels}: no +Inf bucket"
    values = [v for _, v in buckets]
    assert values == sorted(values), f"{name}{labels}: buckets not cumulative: {buckets}"
    assert values[-1] == m.samples[(name + "_count", frozenset(labels.items()))]
    assert m.get(name + "_sum", **labels) >= 0
    return dict(buckets)


def test_metrics_pass_promtool_and_have_every_documented_family(service):
    svc = service()
    svc.schedule(later_job())
    svc.get("/jobs")
    svc.get("/nope")
    m = scrape(svc)
    for name, kind in DOCUMENTED.items():
        assert m.types.get(name) == kind, f"{name}: TYPE {m.types.get(name)}, expected {kind}"
    assert set(m.types) == set(DOCUMENTED), \
        f"undocumented metric families: {sorted(set(m.types) - set(DOCUMENTED))}"
    for status in JOB_STATUSES:
        assert m.has("rmqs_jobs", status=status), status
    for result in ("sent", "failed"):
        assert m.has("rmqs_jobs_published_total", result=result)
    for reason in ("returned", "nacked", "channel_closed", "connection_lost"):
        assert m.has("rmqs_publish_failures_total", reason=reason)
    assert m.get("rmqs_database_size_bytes") > 0
    assert_histogram(m, "rmqs_dispatch_lateness_seconds")
    assert_histogram(m, "rmqs_http_request_duration_seconds", route="/jobs")
    for (name, labels), value in m.samples.items():
        assert value >= 0 and not math.isnan(value), (name, labels, value)
        route = dict(labels).get("route")
        if route is not None:
            assert route in ("/schedule", "/schedule/batch", "/jobs", "/jobs/{id}",
                             "/schedules", "/schedules/{name}", "/healthz", "/readyz",
                             "/metrics", "/status", "other"), route
    for result in ("fired", "misfired_fired", "skipped"):
        assert m.has("rmqs_schedule_runs_total", result=result), result
    for state in ("active", "paused", "ended"):
        assert m.has("rmqs_schedules", state=state), state
    (info,) = [dict(labels) for (name, labels) in m.samples if name == "rmqs_build_info"]
    assert re.fullmatch(r"\d{4}[a-z]", info["tzdata"]), info
    assert info["version"], info
    promtool_check(m.text)


def test_metrics_move_when_jobs_flow(service, amqp, broker):
    svc = service("--backoff-base-ms", "50")
    before = scrape(svc)
    schedule_201 = 0

    # Three jobs delivered at once.
    sent = [svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                          "body": f"m{i}", "delay_ms": 0}) for i in range(3)]
    schedule_201 += 3
    amqp.wait_for_jobs([j["id"] for j in sent])
    for j in sent:
        svc.wait_status(j["id"], "sent")

    # One job no queue takes: NO_ROUTE, one attempt, failed.
    noqueue = broker.declare_exchange()
    failed = svc.schedule({"exchange": noqueue, "routing_key": "nobody", "body": "x",
                           "delay_ms": 0, "max_attempts": 1})
    schedule_201 += 1
    job = svc.wait_status(failed["id"], "failed")
    assert "NO_ROUTE" in (job["last_error"] or ""), job

    # Pending ones, one cancelled, a batch, and some errors.
    pending = [svc.schedule(later_job(body=f"p{i}")) for i in range(2)]
    schedule_201 += 2
    assert svc.delete(f"/jobs/{pending[0]['id']}").status == 200
    st, _, batch = svc.post("/schedule/batch", [later_job(), later_job()])
    assert st == 201, batch
    assert svc.post("/schedule", {"exchange": ""}).status == 400
    assert svc.get("/no-such-route").status == 404
    assert svc.request("PUT", "/schedule").status == 405

    # An answer is counted once it has been sent (libmicrohttpd's completed
    # callback), which may trail the client's read by a moment.
    want_http = {("/schedule", "201"): schedule_201, ("/schedule", "400"): 1,
                 ("/schedule", "405"): 1, ("/schedule/batch", "201"): 1,
                 ("other", "404"): 1}

    def counted():
        m = scrape(svc)
        done = all(m.get("rmqs_http_requests_total", route=r, status=s)
                   - before.get("rmqs_http_requests_total", route=r, status=s) >= n
                   for (r, s), n in want_http.items())
        return m if done else None
    after = wait_until(counted, 10, "the HTTP answers to be counted")

    def delta(name, **labels):
        return after.get(name, **labels) - before.get(name, **labels)

    assert delta("rmqs_jobs_scheduled_total") == 3 + 1 + 2 + 2
    assert delta("rmqs_jobs_published_total", result="sent") == 3
    assert delta("rmqs_jobs_published_total", result="failed") == 1
    assert delta("rmqs_publish_attempts_total") == 4
    assert delta("rmqs_publish_failures_total", reason="returned") == 1
    for reason in ("nacked", "channel_closed", "connection_lost"):
        assert delta("rmqs_publish_failures_total", reason=reason) == 0, reason
    assert delta("rmqs_dispatch_lateness_seconds_count") == 3
    buckets = assert_histogram(after, "rmqs_dispatch_lateness_seconds")
    assert buckets[60.0] >= 3, "3 jobs due at once were not sent within 60 s"

    # Jobs by status: what GET /jobs lists.
    for status in JOB_STATUSES:
        listed = len(svc.list_all(status=status)[0])
        assert after.get("rmqs_jobs", status=status) == listed, status
    assert after.get("rmqs_jobs", status="sent") == 3
    assert after.get("rmqs_jobs", status="failed") == 1
    assert after.get("rmqs_jobs", status="cancelled") == 1
    assert after.get("rmqs_jobs", status="pending") == 1 + 2

    # HTTP answers by route and status.
    for (route, status), n in want_http.items():
        assert delta("rmqs_http_requests_total", route=route, status=status) == n, \
            (route, status)
    assert delta("rmqs_http_requests_total", route="/jobs/{id}", status="200") >= 3 + 1 + 1
    assert after.get("rmqs_http_requests_total", route="/metrics", status="200") >= 1
    assert after.get("rmqs_http_request_duration_seconds_count", route="/schedule") == \
        sum(v for (n, ls), v in after.samples.items()
            if n == "rmqs_http_requests_total" and dict(ls)["route"] == "/schedule")
    assert after.get("rmqs_broker_connected") == 1
    promtool_check(after.text)


def test_broker_connected_is_0_while_the_broker_cannot_be_reached(service):
    svc = service()
    m = scrape(svc)
    assert m.get("rmqs_broker_connected") == 1
    assert m.get("rmqs_broker_reconnects_total") == 0

    # The same service and database, pointed at a port where nothing listens.
    svc.terminate()
    svc.amqp_url = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    svc.restart(wait="health")
    wait_until(lambda: svc.get("/readyz").status == 503, 20, "/readyz 503")
    m = scrape(svc)
    assert m.get("rmqs_broker_connected") == 0
    assert m.has("rmqs_broker_connected")
    # Scheduling goes on; the job waits, pending, and is counted so.
    svc.schedule(later_job(delay_ms=0))
    assert scrape(svc).get("rmqs_jobs", status="pending") == 1
    promtool_check(m.text)

    # Back to the real broker.
    svc.terminate()
    svc.amqp_url = env("RMQS_TEST_AMQP_URL")
    svc.restart()
    assert scrape(svc).get("rmqs_broker_connected") == 1


def test_broker_outage_shows_in_connected_and_reconnects(service, broker):
    svc = service("--heartbeat-s", "2")
    assert scrape(svc).get("rmqs_broker_connected") == 1
    broker.stop_app()
    wait_until(lambda: scrape(svc).get("rmqs_broker_connected") == 0, 30,
               "rmqs_broker_connected 0 during the outage")
    broker.start_app()
    m = wait_until(lambda: (lambda m: m if m.get("rmqs_broker_connected") == 1 else None)(
        scrape(svc)), 60, "rmqs_broker_connected 1 after the outage")
    assert m.get("rmqs_broker_reconnects_total") >= 1


def test_metrics_need_the_token_when_one_is_set(service):
    token = "metrics-token-0123456789abcdef"
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": token})
    resp = http_request_text(svc.port, "/metrics")
    assert resp.status == 401 and resp.headers["WWW-Authenticate"], resp
    good = {"Authorization": f"Bearer {token}"}
    wait_until(lambda: scrape(svc, good).get(
        "rmqs_http_requests_total", route="/metrics", status="401") == 1, 10,
        "the 401 to be counted")


def test_lateness_counts_from_acceptance_for_a_time_already_past(service, amqp):
    """A job accepted (or rescheduled) with a deliver_at already past is due
    from that moment: its age is not dispatch lateness. One job dated a day
    back used to put a whole day into the histogram's sum."""
    svc = service()
    before = scrape(svc)
    day_ago = time.time() - 86400
    old = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                        "body": "old", "deliver_at": format_ts(day_ago)})
    assert old["next_attempt_at"] >= old["created_at"], old
    # Rescheduled to a past time: due from the reschedule.
    moved = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                          "body": "moved", "delay_ms": LATER})
    st, _, body = svc.patch(f"/jobs/{moved['id']}", {"deliver_at": format_ts(day_ago)})
    assert st == 200, body
    assert body["deliver_at"] == format_ts(day_ago) and body["next_attempt_at"] >= body["updated_at"]
    amqp.wait_for_jobs([old["id"], moved["id"]])
    for j in (old, moved):
        svc.wait_status(j["id"], "sent")

    def observed():
        m = scrape(svc)
        n = m.get("rmqs_dispatch_lateness_seconds_count") - \
            before.get("rmqs_dispatch_lateness_seconds_count")
        return m if n >= 2 else None
    after = wait_until(observed, 10, "two lateness observations")
    total = after.get("rmqs_dispatch_lateness_seconds_sum") - \
        before.get("rmqs_dispatch_lateness_seconds_sum")
    # Both were published within moments of being accepted; a day would
    # show as 172800 s. 30 s leaves room for a slow, sanitized build.
    assert 0 <= total < 30, f"lateness sum {total} s for two jobs due at acceptance"
    m = re.search(r"# HELP rmqs_dispatch_lateness_seconds (.*)", after.text)
    assert m and "accept" in m.group(1), after.text[:300]


def test_labels_method_store_and_the_exchange_bound(service, store, amqp):
    """rmqs_http_requests_total has a method label; failures are counted by
    exchange, the first 20 by name and the rest as "other"; every
    whole-database gauge carries the same store label, which a second
    instance on the same PostgreSQL database shares (a dashboard takes max
    by store)."""
    svc = service("--max-attempts", "1", "--backoff-base-ms", "50")
    keep = svc.schedule(later_job())
    gone = svc.schedule(later_job())
    assert svc.delete(f"/jobs/{gone['id']}").status == 200
    svc.get(f"/jobs/{keep['id']}")
    # 22 exchanges that do not exist: each job fails (channel closed)
    names = [f"{amqp.exchange}.missing{i:02d}" for i in range(22)]
    jobs = [svc.schedule({"exchange": n, "routing_key": "k", "body": "x", "delay_ms": 0})
            for n in names]
    for j in jobs:
        svc.wait_status(j["id"], "failed", timeout=60)

    def all_counted():
        m = scrape(svc)
        return m if m.get("rmqs_jobs_failed_total") >= 22 else None
    m = wait_until(all_counted, 20, "22 failures by exchange")
    by = {d["exchange"]: v for (n, ls), v in m.samples.items()
          if n == "rmqs_jobs_failed_total" for d in [dict(ls)]}
    assert len(by) == 21 and by["other"] == 2, by
    assert sum(v for k, v in by.items() if k != "other") == 20, by
    assert set(by) - {"other"} <= set(names), by
    assert m.get("rmqs_jobs_failed_total") == m.get("rmqs_jobs_published_total", result="failed")

    assert m.get("rmqs_http_requests_total", route="/jobs/{id}", method="DELETE",
                 status="200") == 1
    assert m.get("rmqs_http_requests_total", route="/jobs/{id}", method="GET",
                 status="200") >= 1
    assert m.get("rmqs_http_requests_total", route="/schedule", method="POST",
                 status="201") == 24
    assert not m.has("rmqs_http_requests_total", route="/schedule", method="GET")
    for labels in m.labels("rmqs_http_requests_total"):
        assert labels["method"] in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE",
                                    "OPTIONS", "other"), labels

    stores = {d.get("store") for name in STORE_GAUGES for d in m.labels(name)}
    assert len(stores) == 1 and None not in stores, stores
    (ident,) = stores
    assert re.fullmatch(r"(pg-[0-9a-f]{32}|sqlite-[0-9a-f]+-[0-9a-f]+)", ident), ident
    assert ident.startswith("pg-" if store == "postgres" else "sqlite-"), ident
    if store == "postgres":
        other = service(share_db_with=svc)
        assert {d["store"] for d in scrape(other).labels("rmqs_jobs")} == {ident}
    else:
        other = service()  # a database of its own: a store of its own
        assert {d["store"] for d in scrape(other).labels("rmqs_jobs")} != {ident}
    promtool_check(m.text)


def test_process_metrics_are_this_process(service):
    svc = service()
    t0 = time.time()
    m = scrape(svc)
    start = m.get("process_start_time_seconds")
    assert t0 - 120 < start <= t0 + 1, (start, t0)
    # a sanitized build maps terabytes of shadow memory: only the floor
    assert m.get("process_virtual_memory_bytes") >= m.get("process_resident_memory_bytes")
    rss = m.get("process_resident_memory_bytes")
    assert 1 << 20 < rss < 8 << 30, rss
    fds = m.get("process_open_fds")
    assert 5 <= fds <= m.get("process_max_fds"), m.text
    with open(f"/proc/{svc.pid}/limits") as f:
        soft = re.search(r"^Max open files\s+(\d+)", f.read(), re.M).group(1)
    assert m.get("process_max_fds") == int(soft)
    cpu = m.get("process_cpu_seconds_total")
    assert 0 < cpu < time.time() - start + 60, cpu
    # CPU time only grows
    for _ in range(50):
        svc.get("/jobs")
    assert scrape(svc).get("process_cpu_seconds_total") >= cpu
