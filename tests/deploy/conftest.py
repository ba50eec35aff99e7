"""Fixtures of the deployment tests (tests/deploy/test_*.py).

They drive a real Docker engine (tests/deploy/run.sh makes sure one runs and
that the base image debian:bookworm-slim exists), the real Dockerfile and
compose files of deploy/, and the suite's RabbitMQ node ($RMQS_TEST_AMQP_URL,
set by tests/run.sh). Containers use the host's network and listen on
127.0.0.1 only; every request goes to 127.0.0.1.

  image              the image built from ./Dockerfile, tagged
                     rmq-scheduler:deploy-test-<pid>; removed at the end with
                     its build layers (kept with RMQS_DEPLOY_KEEP_CACHE=1)
  containers         start(...) a container of that image; each one and its
                     named volume are removed after the test
  suite_queue        a queue on the suite's broker to consume from
  standin_image(...) an image the compose files name (rabbitmq:3-management,
                     haproxy:2.6): used as found, else built from its
                     stand-in Dockerfile in deploy/ and kept cached
  local_image(...)   an image of the project's own (the database nodes and
                     etcd members of the HA compose file): built every run,
                     in seconds once its layers are cached, and kept
  ComposeProject     a compose file run as one project (run, containers,
                     volumes left)
  report(line)       print a measurement past pytest's capture (and append it
                     to $RMQS_TEST_REPORT when set)

Every external command has a timeout; a failing test prints the logs of the
containers it started. Free ports, waits and the HTTP exchange come from
tests/pylib, shared with the integration tests and the bench.
"""

import datetime
import functools
import json
import os
import subprocess
import sys
import time
import uuid

import pika
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))  # tests/pylib
# pylint: disable=wrong-import-position
from pylib.http import exchange
from pylib.outcome import pytest_runtest_makereport, call_failed  # noqa: F401 (the hook)
from pylib.wait import free_ports, wait_until  # noqa: F401 (test_deploy.py imports free_ports from here)

DOCKER = os.environ.get("DOCKER", "docker")
COMPOSE = os.environ.get("DOCKER_COMPOSE", "docker-compose")
RUN_ID = f"{os.getpid()}"
TOKEN = "deploy-test-token-" + uuid.uuid4().hex
IMAGE_TAG = f"deploy-test-{RUN_ID}"
IMAGE = f"rmq-scheduler:{IMAGE_TAG}"
KEEP_CACHE = os.environ.get("RMQS_DEPLOY_KEEP_CACHE", "0") == "1"


def docker_env():
    """The environment for docker and docker-compose: the suite's RMQS_*,
    RABBITMQ_* and ERL_* variables left out, so none leaks into a container
    or a compose interpolation; the classic builder (no BuildKit: it would
    want a registry)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("RMQS_", "RABBITMQ_", "ERL_"))}
    e["DOCKER_BUILDKIT"] = "0"
    e["COMPOSE_DOCKER_CLI_BUILD"] = "0"
    return e


def sh(*args, timeout=60, check=True, env=None, cwd=REPO):
    """Run a command; return the CompletedProcess (text). Fail the test with
    its output when check and the status is not 0, or when it times out."""
    try:
        p = subprocess.run(list(args), capture_output=True, text=True,
                           timeout=timeout, env=env or docker_env(), cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"timed out after {timeout} s: {' '.join(args)}\n"
                             f"{e.stdout or ''}{e.stderr or ''}") from None
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}: {' '.join(args)}\n"
                             f"{p.stdout[-4000:]}{p.stderr[-4000:]}")
    return p


def docker(*args, **kw):
    return sh(DOCKER, *args, **kw)


# pylib's, polling docker and the containers 5 times a second
wait_until = functools.partial(wait_until, interval=0.2)


def http(port, method, path, body=None, token=TOKEN, timeout=5):
    """One request to 127.0.0.1:port; returns (status, headers, parsed JSON
    or text), or (None, {}, error) when the connection fails."""
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        status, hdrs, raw = exchange(port, method, path, data, headers, timeout)
    except OSError as e:
        return None, {}, str(e)
    raw = raw.decode()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw
    return status, {k.lower(): v for k, v in hdrs.items()}, parsed


def wait_ready(port, timeout, token=TOKEN):
    """Wait until GET /readyz answers 200 (database and broker up)."""
    return wait_until(lambda: http(port, "GET", "/readyz", token=token)[0] == 200,
                      timeout, f"/readyz on 127.0.0.1:{port}", interval=0.1)


def parse_time(s):
    """An answer's RFC 3339 time (deliver_at) as epoch seconds."""
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def inspect(name, fmt):
    return docker("inspect", "-f", fmt, name).stdout.strip()


@pytest.fixture(scope="session")
def report():
    path = os.environ.get("RMQS_TEST_REPORT")

    def _report(line):
        print(f"\n[deploy] {line}", file=sys.__stderr__, flush=True)
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"deploy: {line}\n")
    return _report


@pytest.fixture(scope="session")
def suite_amqp_url():
    url = os.environ.get("RMQS_TEST_AMQP_URL")
    if not url:
        pytest.fail("RMQS_TEST_AMQP_URL is not set: run through "
                    "'tests/run.sh -L deploy'")
    return url


@pytest.fixture(scope="session")
def engine():
    p = docker("info", "--format", "{{.ServerVersion}} {{.Driver}}",
               check=False, timeout=30)
    if p.returncode != 0:
        pytest.fail("no Docker engine answers: run through tests/deploy/run.sh")
    if docker("image", "inspect", "debian:bookworm-slim", check=False).returncode:
        pytest.fail("base image debian:bookworm-slim is missing: "
                    "tests/deploy/make-base-image.sh makes it")
    return p.stdout.strip()


def _image_ids():
    return set(docker("images", "-aq", "--no-trunc").stdout.split())


@pytest.fixture(scope="session")
def image(engine, report):
    """Build ./Dockerfile as rmq-scheduler:deploy-test-<pid>."""
    before = _image_ids()
    t0 = time.monotonic()
    try:
        docker("build", "--network", "host", "--force-rm", "-t", IMAGE, ".", timeout=1800)
        report(f"image build: {time.monotonic() - t0:.1f} s "
               f"(engine {engine}; classic builder)")
        yield IMAGE
    finally:
        docker("rmi", IMAGE, check=False, timeout=120)
        if KEEP_CACHE:
            report("build layers kept (RMQS_DEPLOY_KEEP_CACHE=1)")
        else:
            # The build stage's layers and anything else this build left,
            # never an image that existed before or that has a tag (the
            # stand-in broker image is kept like the base image).
            for _ in range(3):
                left = [i for i in _image_ids() - before
                        if docker("image", "inspect", "-f", "{{len .RepoTags}}", i,
                                  check=False).stdout.strip() == "0"]
                for i in left:
                    docker("rmi", i, check=False, timeout=120)
                if not left:
                    break


def standin_image(tag, dockerfile, report):
    """The image tag: used as found (the official one, or the stand-in of an
    earlier run), else built from dockerfile (context deploy/, Debian's
    packages: no registry can be reached here) and kept, like the base
    image, for the next run."""
    if docker("image", "inspect", tag, check=False).returncode == 0:
        return tag
    return local_image(tag, dockerfile, report)


def local_image(tag, dockerfile, report):
    """The image tag built from dockerfile (context deploy/) now, and kept.
    For the project's own images: built every run, so that a change of the
    Dockerfile is never hidden by the image of an earlier run; with its
    layers cached that takes seconds."""
    t0 = time.monotonic()
    docker("build", "--network", "host", "--force-rm", "-f", dockerfile,
           "-t", tag, "deploy", timeout=1800)
    report(f"built {tag} from {dockerfile} in {time.monotonic() - t0:.0f} s "
           "(kept cached)")
    return tag


class ComposeProject:
    """One compose file run as one docker-compose project; what is left of
    it (containers, volumes) is found by the project's label."""

    def __init__(self, project, file, env):
        self.project = project
        self.file = file
        self.env = env

    def run(self, *args, timeout=120, check=True):
        return sh(COMPOSE, "-p", self.project, "-f", self.file, *args,
                  env=self.env, timeout=timeout, check=check)

    def containers(self):
        return docker("ps", "-aq", "--filter",
                      f"label=com.docker.compose.project={self.project}").stdout.split()

    def volumes(self):
        return docker("volume", "ls", "-q", "--filter",
                      f"label=com.docker.compose.project={self.project}").stdout.split()


class Containers:
    """Containers of the image under test, on the host's network."""

    def __init__(self, image):
        self.image = image
        self.names = []
        self.volumes = []

    def volume(self):
        v = f"rmqs-deploy-{RUN_ID}-{uuid.uuid4().hex[:8]}"
        self.volumes.append(v)
        return v

    def start(self, amqp_url, port, volume, extra_env=None, name=None):
        name = name or f"rmqs-deploy-{RUN_ID}-{uuid.uuid4().hex[:8]}"
        env = {"RMQS_AMQP_URL": amqp_url, "RMQS_LISTEN": f"127.0.0.1:{port}",
               "RMQS_API_TOKEN": TOKEN}
        env.update(extra_env or {})
        args = ["run", "-d", "--name", name, "--network", "host",
                "-v", f"{volume}:/data"]
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        self.names.append(name)
        docker(*args, self.image, timeout=120)
        return name

    def logs(self, name):
        p = docker("logs", name, check=False, timeout=30)
        return p.stdout + p.stderr

    def close(self, failed):
        for n in self.names:
            if failed:
                print(f"----- docker logs {n} -----\n{self.logs(n)[-8000:]}"
                      "----- end -----", file=sys.stderr)
            docker("rm", "-f", "-v", n, check=False, timeout=60)
        for v in self.volumes:
            docker("volume", "rm", "-f", v, check=False, timeout=60)


@pytest.fixture
def containers(image, request):
    c = Containers(image)
    yield c
    c.close(call_failed(request))


class Queue:
    """A queue on a broker, bound to the default exchange by its name (or to
    exchange/routing_key), read with basic.get; arguments are the declare's
    (e.g. {"x-queue-type": "quorum"})."""

    def __init__(self, url, name, exchange="", routing_key=None, arguments=None):
        self.name = name
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.queue_declare(queue=name, durable=True, auto_delete=False,
                              arguments=arguments)
        if exchange:
            self.ch.exchange_declare(exchange=exchange, exchange_type="direct",
                                     durable=True)
            self.ch.queue_bind(queue=name, exchange=exchange,
                               routing_key=routing_key or name)

    def get(self, timeout):
        """The next message as (properties, body, monotonic arrival), or
        fail after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            method, props, body = self.ch.basic_get(self.name, auto_ack=True)
            if method is not None:
                return props, body, time.time()
            if time.monotonic() >= deadline:
                raise AssertionError(f"no message on {self.name} within {timeout} s")
            self.conn.sleep(0.05)

    def empty(self):
        return self.ch.queue_declare(queue=self.name, passive=True).method.message_count == 0

    def close(self, delete=True):
        try:
            if delete:
                self.ch.queue_delete(self.name)
            self.conn.close()
        except Exception:  # the broker may be gone already (compose down)
            pass


@pytest.fixture
def suite_queue(suite_amqp_url):
    q = Queue(suite_amqp_url, f"rmqs-deploy-{RUN_ID}-{uuid.uuid4().hex[:8]}")
    yield q
    q.close()
