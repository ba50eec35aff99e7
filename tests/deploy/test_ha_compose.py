"""deploy/docker-compose.ha.yml, for real: the file is valid and wires what
it says (every service on the host's network on 127.0.0.1, three instances
reaching the PostgreSQL leader through pgproxy, two Patroni nodes over three
etcd members, every RabbitMQ node, one front port); HAProxy accepts both of
its configurations; the stack comes up as a 3-node RabbitMQ cluster and a
Patroni cluster with a synchronous standby, the front spreads jobs over the
three instances (each instance's own rmqs_jobs_scheduled_total), and every
job arrives on a quorum queue. Then, on the same stack (its start is the
expensive part), one fault after another:
  - `docker kill` of one instance: the front still answers every POST and
    every acknowledged job still arrives;
  - under load (clients posting through the front, a consumer on a quorum
    queue), `docker kill` of the RabbitMQ node the instances publish to,
    which also leads the queue;
  - under load, `docker kill` of the PostgreSQL leader's container
    (Patroni and postmaster at once): the standby becomes the leader, the
    instances carry on through pgproxy, and the old leader, started again,
    rejoins as the standby;
  - under load, `docker kill` of that standby and of the etcd leader at
    once: the PostgreSQL leader goes on alone (at worst after demoting
    itself for a few seconds while etcd elects a new leader).
Each time: 0 acknowledged (201) jobs lost, none early, duplicates counted
and allowed only for jobs due around the fault; the time from the fault to
the first 201 and to the first delivery of a job posted after it, and how
long the instances' /readyz was red, are reported.
Run through tests/deploy/run.sh (ctest: deploy.docker)."""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid

import yaml

from conftest import (COMPOSE, IMAGE_TAG, REPO, RUN_ID, TOKEN, ComposeProject,
                      Queue, docker, docker_env, free_ports, http, local_image,
                      parse_time, sh, standin_image, wait_ready, wait_until)
from pylib.amqp import Consumer  # tests/pylib, on the path through conftest
from pylib.load import Load
from pylib.wait import port_open

HA_FILE = os.path.join(REPO, "deploy", "docker-compose.ha.yml")
INSTANCES = ("rmqs1", "rmqs2", "rmqs3")
NODES = ("rabbitmq1", "rabbitmq2", "rabbitmq3")
PATRONI = ("patroni1", "patroni2")
ETCD = ("etcd1", "etcd2", "etcd3")
STANDINS = {"haproxy:2.6": "deploy/haproxy.Dockerfile",
            "rabbitmq:3-management": "deploy/rabbitmq.Dockerfile"}
LOCAL_IMAGES = {"rmq-scheduler-patroni:3.0.2-pg15": "deploy/patroni.Dockerfile",
                "rmq-scheduler-etcd:3.4.23": "deploy/etcd.Dockerfile"}
LEASE_MS = 5000


def compose_config(**env):
    e = docker_env()
    e.update({k: str(v) for k, v in env.items()})
    return yaml.safe_load(sh(COMPOSE, "-f", HA_FILE, "config", env=e).stdout)


def amqp_ports(url_list):
    return [int(re.fullmatch(r"amqp://[^@/]+@127\.0\.0\.1:(\d+)", u).group(1))
            for u in url_list.split(",")]


def mount_targets(service):
    """The paths in the container of a service's volumes (docker-compose
    config writes them as source:target:mode)."""
    return {v.split(":")[1] if isinstance(v, str) else v["target"]
            for v in service["volumes"]}


def test_ha_compose_file_is_valid(report):
    # As a user runs it: no .env, no variables; the documented defaults.
    cfg = compose_config()
    svc = cfg["services"]
    assert set(svc) == {*ETCD, *PATRONI, "pgproxy", "epmd", *NODES, *INSTANCES, "front"}
    for name, s in svc.items():
        assert s["network_mode"] == "host", name
        assert "ports" not in s, name
        assert s["restart"] == "unless-stopped", name
    listens = []
    for name in INSTANCES:
        s, env = svc[name], svc[name]["environment"]
        assert s["image"] == "rmq-scheduler:latest"
        assert os.path.samefile(s["build"]["context"], REPO)
        assert {n: d["condition"] for n, d in s["depends_on"].items()} == {
            "patroni1": "service_healthy", "patroni2": "service_healthy",
            "pgproxy": "service_started"}
        # pgproxy's port: the leader, whichever node it is
        assert env["RMQS_DB"] == ("postgres://rmqs:rmqs@127.0.0.1:5432/rmqs"
                                  "?target_session_attrs=read-write&connect_timeout=2")
        assert amqp_ports(env["RMQS_AMQP_URL"]) == [5672, 5673, 5674]
        assert env["RMQS_LISTEN"].startswith("127.0.0.1:")
        listens.append(env["RMQS_LISTEN"])
        assert {"RMQS_API_TOKEN", "RMQS_LEASE_MS"} <= set(env)
    assert listens == ["127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"]
    front = svc["front"]["environment"]
    assert front["RMQS_FRONT_LISTEN"] == "127.0.0.1:8080"
    assert [front[f"RMQS_INSTANCE_{i}"] for i in (1, 2, 3)] == listens

    node_env = [svc[n]["environment"] for n in NODES]
    assert [e["RABBITMQ_NODE_PORT"] for e in node_env] == ["5672", "5673", "5674"]
    assert len({e["RABBITMQ_DIST_PORT"] for e in node_env}) == 3
    assert len({e["RABBITMQ_CLUSTER_COOKIE"] for e in node_env}) == 1
    assert {e["RABBITMQ_NODE_IP_ADDRESS"] for e in node_env} == {"127.0.0.1"}
    for n in NODES[1:]:
        assert svc[n]["depends_on"]["rabbitmq1"]["condition"] == "service_healthy"

    # Three etcd members on loopback, one cluster; the Patroni nodes know
    # them all, listen on loopback, each on its own ports, with a data
    # volume and a tmpfs /dev/shm; pgproxy checks each node's REST port.
    etcd = [svc[n]["environment"] for n in ETCD]
    peers = [f"etcd{i}=http://127.0.0.1:{p}" for i, p in ((1, 2380), (2, 22380), (3, 32380))]
    assert {e["ETCD_INITIAL_CLUSTER"] for e in etcd} == {",".join(peers)}
    for i, (e, client) in enumerate(zip(etcd, (2379, 22379, 32379)), 1):
        assert e["ETCD_NAME"] == f"etcd{i}"
        assert e["ETCD_LISTEN_CLIENT_URLS"] == e["ETCD_ADVERTISE_CLIENT_URLS"] \
            == f"http://127.0.0.1:{client}"
        assert e["ETCD_LISTEN_PEER_URLS"] == e["ETCD_INITIAL_ADVERTISE_PEER_URLS"] \
            == peers[i - 1].split("=")[1]
        assert mount_targets(svc[f"etcd{i}"]) == {"/var/lib/etcd"}
    for i, n in enumerate(PATRONI, 1):
        s, env = svc[n], svc[n]["environment"]
        assert env["PATRONI_NAME"] == n
        assert env["PATRONI_ETCD3_HOSTS"] == \
            "127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379"
        assert env["PATRONI_POSTGRESQL_LISTEN"] == f"127.0.0.1:{5432 + i}"
        assert env["PATRONI_RESTAPI_LISTEN"] == f"127.0.0.1:{8007 + i}"
        assert env["POSTGRES_USER"] == env["POSTGRES_DB"] == env["POSTGRES_PASSWORD"] == "rmqs"
        assert {d: c["condition"] for d, c in s["depends_on"].items()} == \
            {e: "service_healthy" for e in ETCD}
        assert s["shm_size"] and s["healthcheck"]["test"][0] == "CMD"
        assert mount_targets(s) == {
            "/etc/patroni/patroni.yml", "/etc/patroni/post-init.sh",
            "/var/lib/postgresql/data"}
    assert svc["pgproxy"]["environment"] == {
        "PGPROXY_LISTEN": "127.0.0.1:5432", "PATRONI_PG_1": "127.0.0.1:5433",
        "PATRONI_PG_2": "127.0.0.1:5434", "PATRONI_REST_PORT_1": "8008",
        "PATRONI_REST_PORT_2": "8009"}
    # The settings the compose file's comment and the docs promise.
    with open(os.path.join(REPO, "deploy", "ha", "patroni.yml"), encoding="utf-8") as f:
        patroni = yaml.safe_load(f)
    dcs = patroni["bootstrap"]["dcs"]
    assert (dcs["ttl"], dcs["loop_wait"], dcs["retry_timeout"]) == (8, 1, 3)
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"]
    assert (dcs["synchronous_mode"], dcs["synchronous_mode_strict"],
            dcs["primary_start_timeout"]) == (True, False, 0)
    assert dcs["postgresql"]["use_pg_rewind"] is True
    assert "etcd3" not in patroni  # the hosts come from PATRONI_ETCD3_HOSTS

    # Every port and secret follows its variable, in every place it is used.
    cfg = compose_config(RMQS_HTTP_PORT=18080, RMQS_HTTP_PORT_2=18082, POSTGRES_PORT=15433,
                         POSTGRES_PASSWORD="pw", RABBITMQ_AMQP_PORT_3=15674,
                         RABBITMQ_DEFAULT_USER="u", RABBITMQ_DEFAULT_PASS="p",
                         PATRONI_PG_PORT_2=15435, PATRONI_REST_PORT_1=18018,
                         ETCD_CLIENT_PORT_3=12379, ETCD_PEER_PORT_2=12380,
                         PATRONI_SUPERUSER_PASSWORD="su", PATRONI_REPLICATION_PASSWORD="re",
                         PATRONI_REWIND_PASSWORD="rw")
    svc = cfg["services"]
    env2 = svc["rmqs2"]["environment"]
    assert env2["RMQS_LISTEN"] == "127.0.0.1:18082"
    assert svc["front"]["environment"]["RMQS_INSTANCE_2"] == "127.0.0.1:18082"
    assert svc["front"]["environment"]["RMQS_FRONT_LISTEN"] == "127.0.0.1:18080"
    assert env2["RMQS_DB"].startswith("postgres://rmqs:pw@127.0.0.1:15433/")
    assert amqp_ports(env2["RMQS_AMQP_URL"]) == [5672, 5673, 15674]
    assert env2["RMQS_AMQP_URL"].startswith("amqp://u:p@")
    assert svc["rabbitmq3"]["environment"]["RABBITMQ_NODE_PORT"] == "15674"
    proxy = svc["pgproxy"]["environment"]
    assert (proxy["PGPROXY_LISTEN"], proxy["PATRONI_PG_2"], proxy["PATRONI_REST_PORT_1"]) == \
        ("127.0.0.1:15433", "127.0.0.1:15435", "18018")
    p1, p2 = (svc[n]["environment"] for n in PATRONI)
    assert p2["PATRONI_POSTGRESQL_LISTEN"] == p2["PATRONI_POSTGRESQL_CONNECT_ADDRESS"] \
        == "127.0.0.1:15435"
    assert p1["PATRONI_RESTAPI_LISTEN"] == p1["PATRONI_RESTAPI_CONNECT_ADDRESS"] \
        == "127.0.0.1:18018"
    for e in (p1, p2):
        assert e["PATRONI_ETCD3_HOSTS"].endswith(",127.0.0.1:12379")
        assert (e["POSTGRES_PASSWORD"], e["PATRONI_SUPERUSER_PASSWORD"],
                e["PATRONI_REPLICATION_PASSWORD"], e["PATRONI_REWIND_PASSWORD"]) == \
            ("pw", "su", "re", "rw")
    assert svc["etcd3"]["environment"]["ETCD_LISTEN_CLIENT_URLS"] == "http://127.0.0.1:12379"
    assert svc["etcd2"]["environment"]["ETCD_LISTEN_PEER_URLS"] == "http://127.0.0.1:12380"
    assert "etcd2=http://127.0.0.1:12380" in svc["etcd1"]["environment"]["ETCD_INITIAL_CLUSTER"]

    # The single-node file's documented .env serves this file too.
    p = sh(COMPOSE, "-f", HA_FILE, "--env-file", os.path.join(REPO, "deploy", ".env.example"),
           "config", env=docker_env())
    svc = yaml.safe_load(p.stdout)["services"]
    for name in INSTANCES:
        env = svc[name]["environment"]
        assert env["RMQS_API_TOKEN"] == "change-me-to-a-long-random-string"
        assert env["RMQS_AMQP_URL"].startswith("amqp://rmqs:change-me-broker-password@127.0.0.1:")
    assert svc["front"]["environment"]["RMQS_API_TOKEN"] == "change-me-to-a-long-random-string"
    report("docker-compose config: deploy/docker-compose.ha.yml valid, with "
           "defaults, with every port and secret overridden, and with .env.example")


def haproxy_args(service):
    """docker run arguments giving a container the environment and mounts
    the compose file gives service (one of its HAProxy services)."""
    args = []
    for k, v in service["environment"].items():
        args += ["-e", f"{k}={v}"]
    for v in service["volumes"]:
        args += ["-v", v if isinstance(v, str) else f"{v['source']}:{v['target']}:ro"]
    return args


def test_ha_pgproxy_config_is_valid(engine, report):
    tag = standin_image("haproxy:2.6", STANDINS["haproxy:2.6"], report)
    proxy = compose_config()["services"]["pgproxy"]
    p = docker("run", "--rm", "--network", "none", *haproxy_args(proxy), tag,
               "haproxy", "-c", "-f", proxy["command"][-1])
    assert "Configuration file is valid" in p.stdout + p.stderr
    report("pgproxy: haproxy -c accepts deploy/ha/pgproxy.cfg")


def test_ha_front_is_valid_and_answers_json_503_without_instances(engine, report):
    tag = standin_image("haproxy:2.6", STANDINS["haproxy:2.6"], report)
    # The front as the compose file configures it, on free ports where no
    # instance listens.
    front_port, *closed = free_ports(4)
    front = compose_config(RMQS_API_TOKEN=TOKEN, RMQS_HTTP_PORT=front_port,
                           **{f"RMQS_HTTP_PORT_{i}": p for i, p in enumerate(closed, 1)}
                           )["services"]["front"]
    args = haproxy_args(front)
    p = docker("run", "--rm", "--network", "none", *args, tag, "sh", "-c",
               "haproxy -c -f /usr/local/etc/haproxy/haproxy.cfg")
    assert "Configuration file is valid" in p.stdout + p.stderr

    name = f"rmqs-deploy-{RUN_ID}-front"
    try:
        docker("run", "-d", "--name", name, "--network", "host", *args, tag,
               *front["command"], timeout=60)
        wait_until(lambda: http(front_port, "GET", "/readyz")[0] is not None, 30,
                   "the front listens")
        # Every instance is down: the service's JSON error, 503, and the
        # health check (which sends the token) has logged each one down.
        def logs():
            p = docker("logs", name, check=False, timeout=30)
            return p.stdout + p.stderr
        wait_until(lambda: all(f"Server schedulers/rmqs{i} is DOWN" in logs()
                               for i in (1, 2, 3)), 30, "every instance marked down")
        st, headers, body = http(front_port, "POST", "/schedule", {"exchange": "", "body": "x"})
        assert st == 503 and headers["content-type"] == "application/json", (st, headers)
        assert body["error"]["code"] == "unavailable" and body["error"]["message"], body
    finally:
        docker("rm", "-f", name, check=False, timeout=60)
    report("front: haproxy -c accepts deploy/ha/haproxy.cfg; with no instance up it "
           "answers 503 with the service's JSON error")


class HAStack(ComposeProject):
    """The HA compose file as one project, on free loopback ports."""

    def __init__(self, env):
        super().__init__(f"rmqsha{RUN_ID}", HA_FILE, env)

    def container(self, service):
        return f"{self.project}_{service}_1"

    def logs(self, service):
        p = docker("logs", self.container(service), check=False, timeout=30)
        return p.stdout + p.stderr

    def front_state(self, server):
        """"UP" or "DOWN": the last state change of server its health check
        logged, "UP" before any (HAProxy starts a server up)."""
        changes = re.findall(rf"Server schedulers/{server} is (UP|DOWN)", self.logs("front"))
        return changes[-1] if changes else "UP"

    @staticmethod
    def patroni_roles(rest_ports):
        """(leader, synchronous standby) by Patroni's GET /cluster, asked of
        the nodes' REST ports in turn, each of them running; None until
        there are both."""
        for rest in rest_ports:
            st, _, body = http(rest, "GET", "/cluster", token=None)
            if st != 200 or not isinstance(body, dict):
                continue
            role = {m["role"]: m["name"] for m in body.get("members", [])
                    if m.get("state") in ("running", "streaming")}
            if "leader" in role and "sync_standby" in role:
                return role["leader"], role["sync_standby"]
        return None


def scheduled_total(port):
    st, _, text = http(port, "GET", "/metrics")
    assert st == 200, text
    return int(re.search(r"^rmqs_jobs_scheduled_total (\d+)$", text, re.M).group(1))


def post_jobs(front, queue, n, delay_ms):
    """POST n jobs through the front; every answer must be 201. Returns
    {job id: deliver_at (epoch s)} and the slowest answer (s)."""
    jobs, slowest = {}, 0.0
    for i in range(n):
        t0 = time.monotonic()
        st, _, job = http(front, "POST", "/schedule", {
            "exchange": "", "routing_key": queue.name, "body": f"ha-{i}",
            "delay_ms": delay_ms(i)})
        slowest = max(slowest, time.monotonic() - t0)
        assert st == 201, (st, job)
        jobs[job["id"]] = parse_time(job["deliver_at"])
    return jobs, slowest


def collect(queue, expected, timeout):
    """Consume until every expected job id ({id: deliver_at}) has arrived,
    none before its time, or fail after timeout seconds. Returns {id:
    count} of everything consumed."""
    seen, deadline = {}, time.monotonic() + timeout
    while not set(expected) <= set(seen):
        left = deadline - time.monotonic()
        missing = len(set(expected) - set(seen))
        assert left > 0, f"{missing} of {len(expected)} acknowledged jobs never arrived"
        try:
            props, _, arrived = queue.get(left)
        except AssertionError:
            raise AssertionError(f"{missing} of {len(expected)} acknowledged jobs "
                                 f"never arrived within {timeout:.0f} s") from None
        job_id = props.message_id
        if job_id in expected:
            assert arrived >= expected[job_id] - 0.05, f"{job_id} arrived early"
        seen[job_id] = seen.get(job_id, 0) + 1
    return seen


class ReadyWatch:
    """A thread asking each instance's GET /readyz every 0.2 s until stop(),
    recording (wall time, status or None) per instance."""

    def __init__(self, ports):
        self.ports = dict(ports)
        self.seen = {name: [] for name in self.ports}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="readyz-watch")

    def start(self):
        self._thread.start()
        return self

    def _sample(self):
        for name, port in self.ports.items():
            try:
                st = http(port, "GET", "/readyz", timeout=1)[0]
            except Exception:  # pylint: disable=broad-except  # a half answer
                st = None
            self.seen[name].append((time.time(), st))

    def _run(self):
        while not self._stop.wait(0.2):
            self._sample()

    def stop(self):
        """Stop, with one last look at each instance."""
        self._stop.set()
        self._thread.join(10)
        self._sample()

    def red(self, since):
        """{instance: (first answer other than 200, first 200 after the last
        such answer), in seconds after since; (None, None) if always 200}."""
        out = {}
        for name, seen in self.seen.items():
            reds = [t for t, st in seen if t >= since and st != 200]
            green = next((t for t, st in seen if reds and t > reds[-1] and st == 200), None)
            out[name] = (reds[0] - since if reds else None,
                         green - since if green is not None else None)
        return out


DELAY_MS = 500  # the load's jobs are due this long after their POST


def in_flight(front, routing_key):
    """Jobs to routing_key still pending or publishing (through the front),
    or None when the front does not answer."""
    n = 0
    for status in ("pending", "publishing"):
        st, _, body = http(front, "GET", f"/jobs/count?status={status}&routing_key={routing_key}")
        if st != 200:
            return None
        n += body["count"]
    return n


def under_load(front, amqp_urls, instances, label, fault, report):
    """fault() while two clients post jobs through the front (40 a second in
    all, each due DELAY_MS later, back to their POST at once on an error)
    and a consumer takes them off a quorum queue (amqp_urls: the nodes it
    tries in turn; it declares the queue on the first, which then leads
    it). fault() does the harm and returns the wall-clock time it was done
    and a line for the report. Every acknowledged (201) job must arrive,
    none early, and a job may arrive twice only if it was due around the
    fault. Returns the line reported."""
    consumer = Consumer(list(amqp_urls), durable=True,
                        queue_arguments={"x-queue-type": "quorum"}).start(60)
    watch = ReadyWatch(instances)

    def make_job(n, _rng):
        return {"exchange": consumer.exchange, "routing_key": consumer.routing_key,
                "body": f"{label}-{n}", "delay_ms": DELAY_MS}
    load = Load([front], make_job, threads=2, rate=40, error_pause_s=0.05,
                headers={"Authorization": f"Bearer {TOKEN}"})

    def after(t):
        return [r for r in load.acked() if r["start"] >= t]

    def first_delivery(t):
        ids = {r["body"]["id"] for r in after(t)}
        return min((m.received_at for m in consumer.snapshot() if m.job_id in ids),
                   default=None)
    try:
        load.start()
        watch.start()
        wait_until(lambda: len(consumer.snapshot()) >= 20, 60,
                   "20 jobs of the load delivered before the fault", interval=0.1)
        t_fault, what = fault()
        first_ack = wait_until(lambda: min((r["end"] for r in after(t_fault)), default=None),
                               120, f"a 201 for a POST sent after: {what}", interval=0.1)
        first_del = wait_until(lambda: first_delivery(t_fault), 60,
                               "the first delivery of a job posted after the fault",
                               interval=0.1)
        # The load goes on past the recovery for a while.
        wait_until(lambda: len(after(first_del)) >= 20, 60,
                   "20 more 201s after the recovery", interval=0.1)
        load.join()
        # The watch goes on until every instance is ready again, so that it
        # sees the end of each one's red span.
        wait_until(lambda: all(http(p, "GET", "/readyz")[0] == 200
                               for p in instances.values()),
                   60, "every instance's /readyz 200 again", interval=0.2)
    finally:
        load.join()
        watch.stop()
    try:
        acked = {r["body"]["id"]: parse_time(r["body"]["deliver_at"]) for r in load.acked()}
        try:
            consumer.wait_for_jobs(acked, timeout=LEASE_MS / 1000 + 90)
        except AssertionError:
            got = set(consumer.by_job())
            missing = [j for j in acked if j not in got][:5]
            states = [http(front, "GET", f"/jobs/{j}")[2] for j in missing]
            raise AssertionError(f"{label}: acknowledged jobs lost, e.g. {states}") from None
        # Nothing left to publish, so no later copy can come: duplicates are
        # counted on what the queue got (the consumer is a few ms behind).
        wait_until(lambda: in_flight(front, consumer.routing_key) == 0, 60,
                   "no job of the load left pending or publishing", interval=0.2)
        wait_until(lambda: consumer.queue_depth() == 0, 30, "the queue drained",
                   interval=0.1)
        by_job = consumer.by_job()
    finally:
        consumer.stop()
    early = [j for j, due in acked.items() if min(m.received_at for m in by_job[j]) < due - 0.05]
    assert not early, f"{label}: {len(early)} jobs arrived early"
    dups = {j: len(by_job[j]) - 1 for j in acked if len(by_job[j]) > 1}
    # Around the fault: due from a lease before it to a little after the
    # first delivery that followed it.
    lo, hi = t_fault - LEASE_MS / 1000 - 5, first_del + 5
    stray = {j: round(acked[j] - t_fault, 2) for j in dups if not lo <= acked[j] <= hi}
    assert not stray, f"{label}: duplicates of jobs due far from the fault (s after it): {stray}"
    failed = {}  # "status: message" (or the exception without an answer): count
    for r in load.records:
        if r["start"] >= t_fault and r["status"] != 201:
            err = r["body"].get("error", {}) if isinstance(r["body"], dict) else {}
            k = f"{r['status'] or r['error']}: {err.get('message', '')}"
            failed[k] = failed.get(k, 0) + 1

    def span(a, b):
        if a is None:
            return "never red"
        return f"red {a:.1f} to {b:.1f} s" if b is not None else f"red from {a:.1f} s to the end"
    red = ", ".join(f"{n} {span(a, b)}" for n, (a, b) in watch.red(t_fault).items())
    dup = (f"{sum(dups.values())} duplicates (of jobs due "
           f"{min(acked[j] for j in dups) - t_fault:.1f} to "
           f"{max(acked[j] for j in dups) - t_fault:.1f} s from it)" if dups else "0 duplicates")
    line = (f"{what}: first 201 {first_ack - t_fault:.2f} s after it, first delivery of a "
            f"job posted after it {first_del - t_fault:.2f} s (due {DELAY_MS} ms after its "
            f"POST); {len(acked)} acknowledged jobs all arrived, 0 early, {dup}; "
            f"{len(set(by_job) - set(acked))} unanswered POSTs stored and delivered; "
            f"answers other than 201 after it: {failed or 'none'}; instances' /readyz: {red}")
    report(f"HA stack: {line}")
    return line


DASHBOARD = os.path.join(REPO, "deploy", "grafana-dashboard.json")


def dashboard_expr(title):
    """The expression of the Grafana dashboard's panel of that title."""
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))
    for p in panels(dash["panels"]):
        if p.get("title") == title:
            return p["targets"][0]["expr"]
    raise AssertionError(f"no panel {title!r} in {DASHBOARD}")


def dashboard_shows_true_pending(front, inst, tmp_path, report):
    """A real Prometheus scraping the three instances: the dashboard's
    'Pending jobs' expression gives the database's pending count (each
    instance reports the whole shared database's, so a plain sum is 3x)."""
    rk = f"ha-pending-{uuid.uuid4().hex[:6]}"
    later = time.time() + 3600
    for i in range(40):
        st, _, _ = http(front, "POST", "/schedule", {
            "exchange": "amq.direct", "routing_key": rk, "body": str(i),
            "deliver_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later + i))})
        assert st == 201
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus missing: apt-get install prometheus (tests/run.sh does)"
    (prom_port,) = free_ports(1)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": "rmq-scheduler",
            "authorization": {"type": "Bearer", "credentials": TOKEN},
            "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in inst.values()]}]}]}))
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
                res = json.load(r)["data"]["result"]
                return float(res[0]["value"][1]) if res else None
        except OSError:
            return None

    expr = dashboard_expr("Pending jobs").replace("$instance", ".*")
    try:
        wait_until(lambda: query('count(up{job="rmq-scheduler"} == 1)') == 3, 60,
                   "Prometheus scraping all three instances", interval=0.5)
        seen = {}

        def agrees():
            true = http(front, "GET", "/jobs/count?status=pending")[2]["count"]
            seen.update(true=true, shown=query(expr),
                        summed=query('sum(rmqs_jobs{status="pending"})'))
            return seen["shown"] == true >= 40 and seen["summed"] == 3 * true
        try:
            wait_until(agrees, 30, "the dashboard's pending count to equal the store's",
                       interval=0.5)
        except AssertionError:
            raise AssertionError(f"last seen: {seen}") from None
    finally:
        prom.send_signal(signal.SIGTERM)
        try:
            prom.wait(15)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait(5)
        log.close()
    for j in http(front, "GET", f"/jobs?routing_key={rk}&limit=100")[2]["jobs"]:
        http(front, "DELETE", f"/jobs/{j['id']}")
    report(f"HA stack: the dashboard's 'Pending jobs' ({expr}) shows {seen['true']:.0f}, "
           f"the store's count; a plain sum over the three instances would show "
           f"{seen['summed']:.0f}")


def test_ha_stack_spreads_jobs_and_survives_instance_broker_and_database_kills(
        image, engine, report, tmp_path):
    for tag, dockerfile in STANDINS.items():
        standin_image(tag, dockerfile, report)
    for tag, dockerfile in LOCAL_IMAGES.items():
        local_image(tag, dockerfile, report)
    names = ["POSTGRES_PORT", "RABBITMQ_EPMD_PORT", "RMQS_HTTP_PORT",
             *[f"RABBITMQ_{k}_PORT_{i}" for i in (1, 2, 3)
               for k in ("AMQP", "DIST", "MANAGEMENT")],
             *[f"RMQS_HTTP_PORT_{i}" for i in (1, 2, 3)],
             *[f"PATRONI_{k}_PORT_{i}" for i in (1, 2) for k in ("PG", "REST")],
             *[f"ETCD_{k}_PORT_{i}" for i in (1, 2, 3) for k in ("CLIENT", "PEER")]]
    port = dict(zip(names, free_ports(len(names))))
    user, password = "rmqs-test", "pw" + uuid.uuid4().hex[:12]
    env = docker_env()
    env.update({k: str(v) for k, v in port.items()})
    env.update(RMQS_IMAGE_TAG=IMAGE_TAG, RMQS_API_TOKEN=TOKEN, RMQS_LEASE_MS=str(LEASE_MS),
               POSTGRES_PASSWORD="pg" + uuid.uuid4().hex[:12],
               PATRONI_SUPERUSER_PASSWORD="su" + uuid.uuid4().hex[:12],
               PATRONI_REPLICATION_PASSWORD="re" + uuid.uuid4().hex[:12],
               PATRONI_REWIND_PASSWORD="rw" + uuid.uuid4().hex[:12],
               RABBITMQ_DEFAULT_USER=user, RABBITMQ_DEFAULT_PASS=password,
               RABBITMQ_CLUSTER_COOKIE="cookie" + uuid.uuid4().hex)
    stack = HAStack(env)
    front = port["RMQS_HTTP_PORT"]
    inst = {s: port[f"RMQS_HTTP_PORT_{i}"] for i, s in enumerate(INSTANCES, 1)}
    rest = {n: port[f"PATRONI_REST_PORT_{i}"] for i, n in enumerate(PATRONI, 1)}
    amqp = {n: f"amqp://{user}:{password}@127.0.0.1:{port[f'RABBITMQ_AMQP_PORT_{i}']}/"
            for i, n in enumerate(NODES, 1)}
    queue = None
    try:
        t0 = time.monotonic()
        stack.run("up", "-d", "--no-build", timeout=600)
        up_s = time.monotonic() - t0
        wait_until(lambda: http(front, "GET", "/readyz")[0] == 200, 300,
                   "/readyz 200 through the front", interval=1)
        for s in INSTANCES:
            wait_ready(inst[s], 120)
            # An instance that came up late was marked down; it is back in
            # the rotation after two good checks.
            wait_until(lambda s=s: stack.front_state(s) == "UP", 30,
                       f"the front's health check marks {s} up")
        report(f"HA stack: docker-compose up -d {up_s:.0f} s, every instance ready "
               f"{time.monotonic() - t0:.0f} s after the start")
        # The instances started once both database nodes were healthy: one
        # leads, the other is its synchronous standby.
        leader, standby = wait_until(lambda: stack.patroni_roles(rest.values()), 60,
                                     "a Patroni leader and a synchronous standby",
                                     interval=0.5)

        # A real 3-node cluster: nodes 2 and 3 start once node 1 is healthy
        # and join it at their first boot, which can outlast the instances'
        # start (they need one node only).
        seen = {}

        def cluster_formed():
            p = docker("exec", stack.container("rabbitmq1"), "rabbitmqctl", "-n",
                       "rabbit1@localhost", "-q", "cluster_status", "--formatter",
                       "json", timeout=60)
            seen["running"] = sorted(json.loads(p.stdout)["running_nodes"])
            return seen["running"] == ["rabbit1@localhost", "rabbit2@localhost",
                                       "rabbit3@localhost"]
        try:
            wait_until(cluster_formed, 120, "3 running RabbitMQ nodes", interval=2)
        except AssertionError:
            raise AssertionError(f"running nodes: {seen.get('running')}") from None
        # a node counts as running a moment before its AMQP listener opens
        for n in (1, 2, 3):
            wait_until(lambda n=n: port_open(port[f"RABBITMQ_AMQP_PORT_{n}"]), 60,
                       f"rabbitmq{n} to accept AMQP connections", interval=0.5)
        queue = Queue(amqp["rabbitmq2"], f"ha-{RUN_ID}-{uuid.uuid4().hex[:6]}",
                      arguments={"x-queue-type": "quorum"})

        # Round robin: the jobs land on every instance; all arrive.
        before = {s: scheduled_total(inst[s]) for s in INSTANCES}
        jobs, _ = post_jobs(front, queue, 30, lambda i: 200 + 20 * i)
        spread = {s: scheduled_total(inst[s]) - before[s] for s in INSTANCES}
        assert sum(spread.values()) == 30 and min(spread.values()) >= 5, spread
        seen = collect(queue, jobs, 60)
        report(f"HA stack: 30 jobs through the front, per instance {spread}, "
               f"all arrived ({sum(seen.values()) - len(jobs)} duplicates)")
        dashboard_shows_true_pending(front, inst, tmp_path, report)

        # docker kill of one instance while it holds jobs due in the next
        # seconds: the front answers every POST, every job arrives.
        due_soon, _ = post_jobs(front, queue, 30, lambda i: 600 + 100 * i)
        victim = "rmqs2"
        # Killed once claiming has begun (the first jobs are due within the
        # 0.5 s lookahead): with three instances claiming, the victim most
        # likely holds some of them under its lease; whatever it held must
        # still arrive, taken over by another instance.
        wait_until(lambda: any(j["status"] != "pending" for j in http(
            inst[victim], "GET", "/jobs?limit=100")[2]["jobs"] if j["id"] in due_soon),
            10, "the first claims")
        t_kill = time.monotonic()
        docker("kill", stack.container(victim), timeout=60)
        during, slowest = post_jobs(front, queue, 30, lambda i: 100 + 50 * i)
        expected = {**due_soon, **during}
        seen = collect(queue, expected, LEASE_MS / 1000 + 60)
        last = time.monotonic() - t_kill
        dups = sum(seen.get(j, 0) - 1 for j in expected)
        assert http(front, "GET", "/readyz")[0] == 200
        wait_until(lambda: stack.front_state(victim) == "DOWN", 10,
                   f"the front's health check marks {victim} down")
        report(f"HA stack: docker kill {victim}: 30 POSTs through the front during the "
               f"outage all 201 (slowest {slowest * 1000:.0f} ms), {len(expected)} "
               f"acknowledged jobs all arrived, the last {last:.1f} s after the kill "
               f"(lease {LEASE_MS} ms), {dups} duplicates")
        # Started again, it is back in the rotation.
        docker("start", stack.container(victim), timeout=60)
        wait_ready(inst[victim], 60)
        wait_until(lambda: stack.front_state(victim) == "UP", 30,
                   f"the front's health check marks {victim} up again")

        # Under load, docker kill of the RabbitMQ node every instance
        # publishes to (the first of their URL list) and that leads the
        # queue (declared there by the consumer, which then moves on to
        # rabbitmq3).
        def kill_node():
            docker("kill", stack.container("rabbitmq1"), timeout=60)
            return time.time(), "docker kill rabbitmq1 (the instances' node, the queue's leader)"
        under_load(front, (amqp["rabbitmq1"], amqp["rabbitmq3"]), inst, "rabbit",
                   kill_node, report)

        # Under load, docker kill of the PostgreSQL leader's container:
        # Patroni and its postmaster die together. The standby is promoted
        # once the leader key expires; pgproxy routes to it.
        leader, standby = wait_until(lambda: stack.patroni_roles(rest.values()), 60,
                                     "a Patroni leader and a synchronous standby",
                                     interval=0.5)
        promoted = {}

        def kill_leader():
            docker("kill", stack.container(leader), timeout=60)
            t = time.time()
            wait_until(lambda: http(rest[standby], "GET", "/primary", token=None)[0] == 200,
                       60, f"{standby} promoted", interval=0.1)
            promoted["s"] = time.time() - t
            return t, f"docker kill {leader} (the PostgreSQL leader)"
        under_load(front, (amqp["rabbitmq2"], amqp["rabbitmq3"]), inst, "pg",
                   kill_leader, report)
        report(f"HA stack: {standby} was the leader {promoted['s']:.1f} s after the kill "
               f"of {leader} (ttl 8 s)")
        # The old leader, started again, rewinds and follows the new one as
        # its synchronous standby: never a second primary.
        t0 = time.monotonic()
        docker("start", stack.container(leader), timeout=60)
        wait_until(lambda: stack.patroni_roles(rest.values()) == (standby, leader), 120,
                   f"{leader} back as the synchronous standby", interval=0.5)
        report(f"HA stack: {leader} started again: the synchronous standby of {standby} "
               f"{time.monotonic() - t0:.1f} s later")

        # Under load, docker kill of the synchronous standby and of the etcd
        # leader at once: the leader goes on alone (non-strict synchronous
        # mode). It keeps its key through etcd's election, or, when its etcd
        # calls time out during the election (Patroni gives each member
        # retry_timeout / 3 = 1 s; seen on a loaded machine), demotes itself
        # and takes the key back, a new timeline: reported either way.
        leader, standby = stack.patroni_roles(rest.values())
        timeline = http(rest[leader], "GET", "/patroni", token=None)[2]["timeline"]

        def etcd_leader():
            for i, name in enumerate(ETCD, 1):
                st, _, body = http(port[f"ETCD_CLIENT_PORT_{i}"], "POST",
                                   "/v3/maintenance/status", {}, token=None)
                if st == 200 and body["header"]["member_id"] == body.get("leader"):
                    return name
            return None
        etcd_victim = wait_until(etcd_leader, 30, "the etcd leader", interval=0.5)

        def kill_standby():
            docker("kill", stack.container(standby), stack.container(etcd_victim), timeout=60)
            return time.time(), (f"docker kill {standby} (the synchronous standby) and "
                                 f"{etcd_victim} (the etcd leader)")
        under_load(front, (amqp["rabbitmq2"], amqp["rabbitmq3"]), inst, "standby",
                   kill_standby, report)
        st, _, body = http(rest[leader], "GET", "/patroni", token=None)
        # (Patroni 3.0 still says "master" here; later versions "primary")
        assert st == 200 and body["role"] in ("master", "primary"), body
        report(f"HA stack: {leader} led on alone, " + (
            f"timeline {timeline} kept" if body["timeline"] == timeline else
            f"after demoting itself (etcd unreachable during its election) and "
            f"taking the key back: timeline {timeline} -> {body['timeline']}"))
    except BaseException:
        print(stack.run("logs", "--no-color", "--tail", "100", check=False,
                        timeout=120).stdout)
        raise
    finally:
        if queue:
            queue.close()
        t0 = time.monotonic()
        down = stack.run("down", "-v", "--remove-orphans", timeout=300, check=False)
        report(f"HA stack: docker-compose down -v {time.monotonic() - t0:.0f} s")
    assert down.returncode == 0, down.stderr
    assert stack.containers() == [] and stack.volumes() == []
