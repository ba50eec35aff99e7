"""The deployment, for real: the image of ./Dockerfile (small, not root,
healthy, graceful on docker stop, a job kept across a re-created container
through the named volume), deploy/docker-compose.yml (valid; the stack with
the test override runs the README's curl flow), deploy/grafana-dashboard.json
(every query answered by a real Prometheus scraping the service) and
deploy/rmq-scheduler.service (started hardened by a real systemd).
Run through tests/deploy/run.sh (ctest: deploy.docker)."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import uuid

import pytest
import yaml

from conftest import (COMPOSE, IMAGE_TAG, REPO, RUN_ID, TOKEN, ComposeProject,
                      Queue, docker, docker_env, free_ports, http, inspect,
                      parse_time, sh, standin_image, wait_ready, wait_until)

BASE_FILE = os.path.join(REPO, "deploy", "docker-compose.yml")
TEST_FILE = os.path.join(REPO, "deploy", "docker-compose.test.yml")
DASHBOARD = os.path.join(REPO, "deploy", "grafana-dashboard.json")
STANDIN = "rabbitmq:3-management"


# --- the image -------------------------------------------------------------

def test_image_is_small_unprivileged_and_configured_by_environment(image, report):
    cfg = json.loads(docker("image", "inspect", image).stdout)[0]
    c = cfg["Config"]
    assert c["User"] == "10001:10001"
    assert "8080/tcp" in c["ExposedPorts"]
    assert "/data" in c["Volumes"]
    assert c["Healthcheck"]["Test"] == ["CMD", "rmq-scheduler", "--healthcheck"]
    assert c["StopSignal"] == "SIGTERM"
    assert "RMQS_DB=/data/scheduler.db" in c["Env"]
    assert "RMQS_LISTEN=0.0.0.0:8080" in c["Env"]
    assert c["Entrypoint"] == ["rmq-scheduler"]
    size_mb = cfg["Size"] / 1e6
    base_mb = json.loads(docker("image", "inspect", "debian:bookworm-slim").stdout)[0]["Size"] / 1e6
    report(f"image size: {size_mb:.1f} MB ({size_mb - base_mb:.1f} MB over "
           f"debian:bookworm-slim {base_mb:.1f} MB)")
    assert size_mb - base_mb < 40, "the runtime layers should be small"

    # Only the runtime: no compiler, no headers; the binary's libraries resolve.
    p = docker("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c",
               "command -v cc gcc cmake make; ls /usr/include 2>/dev/null | head -1; "
               "ldd /usr/local/bin/rmq-scheduler | grep 'not found'; id -u", check=False)
    assert p.stdout.split() == ["10001"], p.stdout + p.stderr
    # Configured only by the environment: --help lists the RMQS_* variables.
    p = docker("run", "--rm", "--network", "none", image, "--help")
    assert "RMQS_AMQP_URL" in p.stdout and "RMQS_API_TOKEN" in p.stdout
    assert "--healthcheck" in p.stdout


def test_container_schedules_delivers_runs_as_non_root_and_is_healthy(
        containers, suite_amqp_url, suite_queue, report):
    (port,) = free_ports(1)
    t0 = time.monotonic()
    name = containers.start(suite_amqp_url, port, containers.volume())
    wait_ready(port, 60)
    report(f"docker run to /readyz 200: {time.monotonic() - t0:.1f} s")

    # Not root: the service process as the host sees it, and inside.
    top = docker("top", name, "-eo", "uid,pid,comm").stdout.split("\n")[1:]
    procs = [line.split() for line in top if line.strip()]
    assert procs and all(uid == "10001" for uid, *_ in procs), top
    assert [p[2] for p in procs] == ["rmq-scheduler"], top
    assert docker("exec", name, "id", "-u").stdout.strip() == "10001"
    assert docker("exec", name, "stat", "-c", "%u", "/data/scheduler.db").stdout.strip() == "10001"

    st, headers, job = http(port, "POST", "/schedule", {
        "exchange": "", "routing_key": suite_queue.name,
        "body": {"hello": "container"}, "delay_ms": 300,
        "headers": {"tenant": "deploy"}})
    assert st == 201, job
    props, body, _ = suite_queue.get(15)
    assert json.loads(body) == {"hello": "container"}
    assert props.message_id == job["id"]
    assert props.headers["tenant"] == "deploy"
    wait_until(lambda: http(port, "GET", f"/jobs/{job['id']}")[2]["status"] == "sent",
               10, "job sent")

    # The dashboard is in the image's binary: the page and a module it
    # loads, with the strict CSP (issue 14; no Node in the image).
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui/", timeout=10) as r:
        page, ctype = r.read().decode(), r.headers["Content-Type"]
        csp = r.headers["Content-Security-Policy"] or ""
    assert ctype.startswith("text/html") and 'src="app.js"' in page, (ctype, page[:200])
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, csp
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui/app.js", timeout=10) as r:
        assert "javascript" in r.headers["Content-Type"] and r.read(), r.headers
    assert docker("exec", name, "sh", "-c", "command -v node || echo none").stdout.strip() \
        == "none"

    # The image's HEALTHCHECK runs `rmq-scheduler --healthcheck`.
    assert docker("exec", name, "rmq-scheduler", "--healthcheck", check=False).returncode == 0
    t0 = time.monotonic()
    wait_until(lambda: inspect(name, "{{.State.Health.Status}}") == "healthy", 60,
               "docker health status healthy", interval=1)
    report(f"docker health status healthy {time.monotonic() - t0:.1f} s after ready")


def test_stop_is_graceful_and_a_job_survives_a_restart_through_the_volume(
        containers, suite_amqp_url, suite_queue, report):
    (port,) = free_ports(1)
    volume = containers.volume()
    first = containers.start(suite_amqp_url, port, volume)
    wait_ready(port, 60)
    st, _, job = http(port, "POST", "/schedule", {
        "exchange": "", "routing_key": suite_queue.name,
        "body": "survives a restart", "delay_ms": 15000})
    assert st == 201, job
    due = parse_time(job["deliver_at"])

    # docker stop: SIGTERM, the service stops by itself well before the
    # engine's SIGKILL (exit 0, "stopped" logged, not 137).
    t0 = time.monotonic()
    docker("stop", "-t", "30", first, timeout=60)
    stop_s = time.monotonic() - t0
    assert inspect(first, "{{.State.ExitCode}}") == "0"
    assert inspect(first, "{{.State.OOMKilled}}") == "false"
    logs = containers.logs(first)
    assert re.search(r'msg="stopping" signal=SIGTERM', logs), logs
    assert 'msg="stopped"' in logs, logs
    assert stop_s < 10, f"docker stop took {stop_s:.1f} s"
    report(f"docker stop (SIGTERM) to exit 0: {stop_s:.2f} s")
    assert suite_queue.empty(), "the job was published before its time"

    # A new container on the same named volume has the job and delivers it.
    docker("rm", first)
    second = containers.start(suite_amqp_url, port, volume)
    wait_ready(port, 60)
    st, _, again = http(port, "GET", f"/jobs/{job['id']}")
    assert st == 200 and again["status"] == "pending", again
    assert time.time() < due, "restart too slow for this test's 15 s delay"
    props, body, arrived = suite_queue.get(due - time.time() + 15)
    assert body == b"survives a restart"
    assert props.message_id == job["id"]
    assert arrived >= due - 0.05, "delivered early"
    report(f"job scheduled before the restart delivered "
           f"{arrived - due:.3f} s after its time")
    wait_until(lambda: http(port, "GET", f"/jobs/{job['id']}")[2]["status"] == "sent",
               10, "job sent")
    assert 'msg="ready"' in containers.logs(second)


# --- compose -----------------------------------------------------------------

def compose_env(**extra):
    e = docker_env()
    e.update({k: str(v) for k, v in extra.items()})
    return e


def test_compose_file_is_valid(report):
    # As a user runs it: no .env, no variables.
    p = sh(COMPOSE, "-f", BASE_FILE, "config", env=compose_env())
    cfg = yaml.safe_load(p.stdout)
    rabbit, svc = cfg["services"]["rabbitmq"], cfg["services"]["rmq-scheduler"]
    assert rabbit["image"] == "rabbitmq:3-management"
    assert "rabbitmq-diagnostics" in rabbit["healthcheck"]["test"]
    assert svc["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert svc["build"]["dockerfile"] == "Dockerfile"
    assert os.path.samefile(svc["build"]["context"], REPO)
    assert "scheduler-data:/data:rw" in svc["volumes"]
    assert any(str(p).endswith(":8080:8080/tcp") for p in svc["ports"])
    assert {"RMQS_AMQP_URL", "RMQS_API_TOKEN"} <= set(svc["environment"])
    ports = " ".join(str(p) for p in rabbit["ports"])
    assert ":5672:5672" in ports and ":15672:15672" in ports
    assert set(cfg["volumes"]) == {"scheduler-data", "rabbitmq-data"}

    # With the documented .env: its values reach the services.
    p = sh(COMPOSE, "-f", BASE_FILE, "--env-file",
           os.path.join(REPO, "deploy", ".env.example"), "config", env=compose_env())
    cfg = yaml.safe_load(p.stdout)
    env = cfg["services"]["rmq-scheduler"]["environment"]
    assert env["RMQS_API_TOKEN"] == "change-me-to-a-long-random-string"
    assert env["RMQS_AMQP_URL"].startswith("amqp://rmqs:")
    assert cfg["services"]["rabbitmq"]["environment"]["RABBITMQ_DEFAULT_USER"] == "rmqs"

    # The override: both services on the host's network, loopback only.
    p = sh(COMPOSE, "-f", BASE_FILE, "-f", TEST_FILE, "config", env=compose_env())
    cfg = yaml.safe_load(p.stdout)
    for s in cfg["services"].values():
        assert s["network_mode"] == "host"
    assert cfg["services"]["rmq-scheduler"]["environment"]["RMQS_LISTEN"].startswith("127.0.0.1:")
    report("docker-compose config: deploy/docker-compose.yml alone, with "
           ".env.example, and with the test override: valid")


@pytest.fixture
def standin_broker_image(engine, report):
    """rabbitmq:3-management: a real one, or the stand-in of
    deploy/rabbitmq.Dockerfile (conftest.standin_image)."""
    return standin_image(STANDIN, "deploy/rabbitmq.Dockerfile", report)


class ComposeStack(ComposeProject):
    """deploy/docker-compose.yml + deploy/docker-compose.test.yml as one
    project. docker-compose 1.29 refuses `ports:` together with
    network_mode: host (the engine would ignore them anyway), and an
    override cannot remove a list entry, so the merged configuration
    (`docker-compose config`) is written out without the ports of
    host-network services and started from there."""

    def __init__(self, workdir, env):
        merged = yaml.safe_load(sh(COMPOSE, "-f", BASE_FILE, "-f", TEST_FILE,
                                   "config", env=env).stdout)
        for s in merged["services"].values():
            if s.get("network_mode") == "host":
                s.pop("ports", None)
        file = os.path.join(workdir, "docker-compose.yml")
        with open(file, "w", encoding="utf-8") as f:
            yaml.safe_dump(merged, f, sort_keys=False)
        super().__init__(f"rmqsdeploy{RUN_ID}", file, env)


def curl(*args, timeout=15):
    p = subprocess.run(["curl", "-s", "--max-time", "10", *args], capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_compose_stack_runs_the_readme_flow(image, standin_broker_image, request,
                                            report, tmp_path):
    amqp, dist, epmd, mgmt, http_port = free_ports(5)
    user, password = "rmqs-test", "pw-" + uuid.uuid4().hex[:12]
    env = compose_env(RMQS_IMAGE_TAG=IMAGE_TAG, RMQS_API_TOKEN=TOKEN,
                      RABBITMQ_DEFAULT_USER=user, RABBITMQ_DEFAULT_PASS=password,
                      RABBITMQ_AMQP_PORT=amqp, RABBITMQ_DIST_PORT=dist,
                      RABBITMQ_EPMD_PORT=epmd, RABBITMQ_MANAGEMENT_PORT=mgmt,
                      RMQS_HTTP_PORT=http_port)
    stack = ComposeStack(str(tmp_path), env)
    queue = None
    try:
        t0 = time.monotonic()
        stack.run("up", "-d", "--no-build", timeout=300)
        up_s = time.monotonic() - t0
        wait_ready(http_port, 240)
        ready_s = time.monotonic() - t0
        report(f"docker-compose up -d to /readyz 200: {ready_s:.1f} s "
               f"(up -d returned after {up_s:.1f} s, once the broker was healthy)")
        assert inspect(f"{stack.project}_rabbitmq_1", "{{.State.Health.Status}}") == "healthy"

        # The broker's management API answers, on loopback, with the user
        # created from RABBITMQ_DEFAULT_USER/PASS.
        out = curl("-u", f"{user}:{password}", f"http://127.0.0.1:{mgmt}/api/overview")
        assert json.loads(out)["management_version"]

        # A queue bound where the README's example publishes.
        queue = Queue(f"amqp://{user}:{password}@127.0.0.1:{amqp}/",
                      f"invoice-overdue-{RUN_ID}", exchange="billing",
                      routing_key="invoice.overdue")

        # The README's example, with the bearer token and a 1 s delay.
        base = f"http://127.0.0.1:{http_port}"
        auth = f"Authorization: Bearer {TOKEN}"
        schedule = ["-i", f"{base}/schedule", "-H", "Content-Type: application/json",
                    "-H", "Idempotency-Key: order-1234-expiry", "-H", auth, "-d",
                    '{"exchange": "billing", "routing_key": "invoice.overdue",'
                    ' "body": {"order": 1234}, "delay_ms": 1000,'
                    ' "headers": {"tenant": "acme"}, "properties": {"priority": 5}}']
        out = curl(*schedule)
        head, _, body = out.replace("\r\n", "\n").partition("\n\n")
        assert head.startswith("HTTP/1.1 201"), out
        job = json.loads(body)
        assert re.search(rf"(?im)^location: /jobs/{job['id']}$", head), head
        assert job["status"] == "pending" and job["properties"]["priority"] == 5
        # Repeating it with the same Idempotency-Key: the same job, 200.
        out = curl(*schedule)
        assert out.startswith("HTTP/1.1 200") and f'"id":"{job["id"]}"' in out.replace(" ", "")

        got = json.loads(curl(f"{base}/jobs/{job['id']}", "-H", auth))
        assert got["id"] == job["id"] and got["status"] in ("pending", "publishing", "sent")

        props, msg, _ = queue.get(20)
        assert json.loads(msg) == {"order": 1234}
        assert props.priority == 5 and props.content_type == "application/json"
        assert props.headers["tenant"] == "acme"
        assert props.headers["x-scheduler-job-id"] == job["id"]
        wait_until(lambda: json.loads(curl(f"{base}/jobs/{job['id']}", "-H", auth))
                   ["status"] == "sent", 10, "job sent")
        listed = json.loads(curl(f"{base}/jobs?status=sent&limit=100", "-H", auth))
        assert job["id"] in [j["id"] for j in listed["jobs"]]
        assert json.loads(curl(f"{base}/healthz"))  # no token needed
        assert json.loads(curl(f"{base}/readyz", "-H", auth))["broker"] == "up"
        report("compose stack: README flow (schedule, idempotent repeat, get, "
               "consume from billing/invoice.overdue, list) passed")
    finally:
        if queue:
            queue.close()
        if failed_now(request):
            print(stack.run("logs", "--no-color", "--tail", "200", check=False).stdout)
        t0 = time.monotonic()
        down = stack.run("down", "-v", "--remove-orphans", timeout=180, check=False)
        report(f"docker-compose down -v: {time.monotonic() - t0:.1f} s")
    assert down.returncode == 0, down.stderr
    assert stack.containers() == [] and stack.volumes() == []


def failed_now(request):
    return getattr(request.node, "rep_call", None) is None or request.node.rep_call.failed


# --- Grafana dashboard -------------------------------------------------------

METRIC_RE = re.compile(r"\b(rmqs_[a-z0-9_]+)")


def dashboard_exprs():
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))
    exprs = [(p["title"], t["expr"]) for p in panels(dash["panels"])
             for t in p.get("targets", [])]
    return dash, list(panels(dash["panels"])), exprs


def scrape_samples(text):
    """{metric sample name: [label dicts]} from Prometheus text."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
        assert m, line
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', m.group(3) or ""))
        samples.setdefault(m.group(1), []).append(labels)
    return samples


def test_grafana_dashboard_queries_real_metrics(containers, suite_amqp_url, suite_queue,
                                                report, tmp_path):
    dash, panels, exprs = dashboard_exprs()
    assert dash["schemaVersion"] >= 36 and dash["uid"] and dash["id"] is None
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    for p in panels:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
            assert p["targets"], p["title"]
    assert len(exprs) >= 12

    # A service with some traffic: a job sent, one that fails (unroutable,
    # max_attempts 1), a 404.
    (port, prom_port) = free_ports(2)
    containers.start(suite_amqp_url, port, containers.volume())
    wait_ready(port, 60)
    for body in ({"exchange": "", "routing_key": suite_queue.name, "body": "m",
                  "delay_ms": 0},
                 {"exchange": "", "routing_key": f"no-such-queue-{uuid.uuid4().hex}",
                  "body": "x", "delay_ms": 0, "max_attempts": 1}):
        assert http(port, "POST", "/schedule", body)[0] == 201
    suite_queue.get(15)
    assert http(port, "GET", "/no-such-route")[0] == 404
    wait_until(lambda: 'rmqs_jobs_published_total{result="failed"} 1' in
               http(port, "GET", "/metrics")[2], 15, "the unroutable job failed")
    st, _, text = http(port, "GET", "/metrics")
    assert st == 200
    samples = scrape_samples(text)

    # Every metric an expression names is exported; every label it groups or
    # matches by is on that metric, with a value the service really uses.
    for title, expr in exprs:
        names = METRIC_RE.findall(expr)
        assert names, (title, expr)
        for n in names:
            assert n in samples, f"{title}: {n} is not in GET /metrics"
            have = {k for lbls in samples[n] for k in lbls}
            for group in re.findall(r"by \(([^)]*)\)", expr):
                for label in (x.strip() for x in group.split(",")):
                    assert label in have | {"instance", "job"}, f"{title}: {n} has no label {label}"
            for label, value in re.findall(r'([a-z_]+)="([^"$]*)"', expr):
                assert any(lbls.get(label) == value for lbls in samples[n]), \
                    f"{title}: no {n}{{{label}=\"{value}\"}} in GET /metrics"

    # The same expressions through a real Prometheus scraping the container:
    # they parse (promtool) and each returns data.
    promtool = shutil.which("promtool")
    prometheus = shutil.which("prometheus")
    if not (promtool and prometheus):
        pytest.fail("promtool/prometheus missing: apt-get install prometheus")
    concrete = [(t, e.replace("$instance", ".*")) for t, e in exprs]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": e} for i, (_, e) in enumerate(concrete)]}]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    sh(promtool, "check", "rules", str(tmp_path / "rules.yml"), env=dict(os.environ))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": "rmq-scheduler",
            "authorization": {"type": "Bearer", "credentials": TOKEN},
            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}))
    log = open(tmp_path / "prometheus.log", "w")
    prom = subprocess.Popen(
        [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=log, stderr=subprocess.STDOUT)

    def query(q):
        url = (f"http://127.0.0.1:{prom_port}/api/v1/query?"
               + urllib.parse.urlencode({"query": q}))
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)
        except OSError:
            return None

    try:
        # Enough scrapes for rate() over two samples.
        wait_until(lambda: (r := query('count_over_time(up{job="rmq-scheduler"}[1m])'))
                   and r["data"]["result"] and float(r["data"]["result"][0]["value"][1]) >= 3,
                   60, "three scrapes by Prometheus", interval=0.5)
        # Traffic after the first scrapes, so rate() and histogram_quantile()
        # see increases.
        assert http(port, "POST", "/schedule", {"exchange": "", "routing_key": suite_queue.name,
                                                "body": "m2", "delay_ms": 0})[0] == 201
        suite_queue.get(15)
        time.sleep(2.5)
        empty = []
        for title, e in concrete:
            r = query(e)
            assert r and r["status"] == "success", (title, e, r)
            if not r["data"]["result"]:
                empty.append((title, e))
        assert not empty, f"no data for: {empty}"
        assert query('up{job="rmq-scheduler"}')["data"]["result"][0]["value"][1] == "1"
    finally:
        prom.send_signal(signal.SIGTERM)
        try:
            prom.wait(15)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait(5)
        log.close()
    report(f"grafana dashboard: {len([p for p in panels if p['type'] != 'row'])} panels, "
           f"{len(exprs)} queries: every metric and label is in a real scrape, "
           f"promtool parses them, a real Prometheus returns data for each")


# --- the systemd unit, under a real systemd -----------------------------------

PROBE_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
        systemd systemd-sysv libmicrohttpd12 librabbitmq4 libsqlite3-0 libjansson4 libpq5 libglib2.0-0 tzdata \\
        ca-certificates \\
 && rm -rf /var/lib/apt/lists/* \\
 && systemctl mask getty.target console-getty.service systemd-logind.service \\
        systemd-timesyncd.service
COPY --from={image} /usr/local/bin/rmq-scheduler /usr/local/bin/rmq-scheduler
COPY rmq-scheduler.service /etc/systemd/system/rmq-scheduler.service
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
"""


def test_systemd_unit_runs_hardened_under_systemd(image, suite_amqp_url, suite_queue,
                                                  request, report, tmp_path):
    """deploy/rmq-scheduler.service as installed on a host: systemd (as PID 1
    of a container on the host's network) starts the binary of the image
    with every sandboxing setting of the unit; it serves, publishes, runs as
    a dynamic user without capabilities under a seccomp filter, stops
    gracefully on `systemctl stop`, and its state folder keeps a job across
    a restart."""
    shutil.copy(os.path.join(REPO, "deploy", "rmq-scheduler.service"), tmp_path)
    (tmp_path / "Dockerfile").write_text(PROBE_DOCKERFILE.format(image=image))
    probe = f"rmqs-systemd-probe:{RUN_ID}"
    name = f"rmqs-deploy-{RUN_ID}-systemd"
    (port,) = free_ports(1)
    t0 = time.monotonic()
    docker("build", "--network", "host", "--force-rm", "-t", probe, str(tmp_path),
           timeout=900)
    report(f"systemd probe image build: {time.monotonic() - t0:.0f} s")

    def ctl(*args, check=True):
        return docker("exec", name, *args, check=check, timeout=60)

    try:
        # systemd needs CAP_SYS_ADMIN (mount namespaces for ProtectSystem and
        # friends) and a writable cgroup tree; no --privileged.
        docker("run", "-d", "--name", name, "--network", "host",
               "--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined",
               "--security-opt", "apparmor=unconfined", "--cgroupns", "host",
               "--tmpfs", "/run", "--tmpfs", "/run/lock",
               "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", probe, timeout=120)
        wait_until(lambda: ctl("systemctl", "is-system-running", check=False)
                   .stdout.strip() in ("running", "degraded"), 60, "systemd up")
        env_file = (f"RMQS_AMQP_URL={suite_amqp_url}\nRMQS_API_TOKEN={TOKEN}\n"
                    f"RMQS_LISTEN=127.0.0.1:{port}\n")
        ctl("sh", "-c", "install -d -m 0750 /etc/rmq-scheduler && "
            f"umask 077 && printf '%s' '{env_file}' > /etc/rmq-scheduler/env")
        ctl("systemctl", "start", "rmq-scheduler")
        wait_ready(port, 30)

        pid = ctl("systemctl", "show", "-p", "MainPID", "--value", "rmq-scheduler").stdout.strip()
        status = dict(line.split(":\t", 1) for line in
                      ctl("cat", f"/proc/{pid}/status").stdout.splitlines() if ":\t" in line)
        uid = status["Uid"].split()[0]
        assert uid != "0", status["Uid"]
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2"
        assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
        assert ctl("stat", "-c", "%u", "/var/lib/private/rmq-scheduler/scheduler.db"
                   ).stdout.strip() == uid

        st, _, job = http(port, "POST", "/schedule", {
            "exchange": "", "routing_key": suite_queue.name, "body": "from systemd",
            "delay_ms": 0})
        assert st == 201, job
        assert suite_queue.get(15)[1] == b"from systemd"

        st, _, later = http(port, "POST", "/schedule", {
            "exchange": "", "routing_key": suite_queue.name, "body": "after restart",
            "delay_ms": 6000})
        assert st == 201, later
        ctl("systemctl", "stop", "rmq-scheduler")
        shown = ctl("systemctl", "show", "-p", "Result", "-p", "ExecMainStatus",
                    "rmq-scheduler").stdout
        assert "Result=success" in shown and "ExecMainStatus=0" in shown, shown
        journal = ctl("journalctl", "-u", "rmq-scheduler", "--no-pager", "-o", "cat").stdout
        assert 'msg="stopped"' in journal, journal[-3000:]
        assert suite_queue.empty()
        ctl("systemctl", "start", "rmq-scheduler")
        wait_ready(port, 30)
        assert http(port, "GET", f"/jobs/{later['id']}")[2]["status"] == "pending"
        assert suite_queue.get(20)[1] == b"after restart"
        report(f"systemd unit: ran hardened (uid {uid}, no capabilities, seccomp, "
               "NoNewPrivs), served, stopped with status 0, kept a job across a restart")
    finally:
        if failed_now(request):
            p = docker("exec", name, "journalctl", "--no-pager", "-n", "200",
                       check=False, timeout=60)
            print(p.stdout + p.stderr)
        docker("rm", "-f", "-v", name, check=False, timeout=60)
        docker("rmi", probe, check=False, timeout=120)
