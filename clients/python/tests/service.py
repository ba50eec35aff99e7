"""The real rmq-scheduler binary for the client's tests: a temporary SQLite
database (or a PostgreSQL database of its own), a free loopback port,
stopped by its PID.

RMQS_TEST_STORE=postgres (tests/run.sh, for the clients.*.postgres tests)
gives each service a database of its own on the server RMQS_TEST_PG_ADMIN
and RMQS_TEST_PG_URL name, dropped by destroy().

RMQS_BIN names the binary. RMQS_TEST_AMQP_URL names a RabbitMQ if there is
one; without it the service gets a closed port: jobs are accepted and
stored while the broker is down, which is all these tests need.
"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bin_path():
    b = os.environ.get("RMQS_BIN")
    if not b:
        raise RuntimeError("RMQS_BIN is not set: the path of the "
                           "rmq-scheduler binary to test against")
    return b


def pg_env(name):
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(f"{name} is not set: RMQS_TEST_STORE=postgres "
                           "needs the server tests/run.sh starts")
    return v


def psql(sql):
    subprocess.run(["/usr/lib/postgresql/15/bin/psql", "-X", "-q", "-v",
                    "ON_ERROR_STOP=1", "-d", pg_env("RMQS_TEST_PG_ADMIN"),
                    "-c", sql], check=True, stdout=subprocess.DEVNULL)


_closed_amqp = None


def amqp_url():
    global _closed_amqp
    if os.environ.get("RMQS_TEST_AMQP_URL"):
        return os.environ["RMQS_TEST_AMQP_URL"]
    if _closed_amqp is None:
        # A port nothing listens on: the broker is "down" the whole test.
        _closed_amqp = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    return _closed_amqp


class Service:
    def __init__(self, args=(), token=None, env=None):
        self.args = list(args)
        self.token = token
        self.env = env or {}
        self.dir = tempfile.mkdtemp(prefix="rmqs-py-client-")
        self.db = os.path.join(self.dir, "scheduler.db")
        self.pg_name = None
        if os.environ.get("RMQS_TEST_STORE") == "postgres":
            self.pg_name = (f"rmqs_pc_{os.getpid()}_"
                            f"{random.randrange(10**9)}")
            psql(f"CREATE DATABASE {self.pg_name} "
                 f'OWNER "{pg_env("RMQS_TEST_PG_USER")}"')
            self.db = f"{pg_env('RMQS_TEST_PG_URL')}/{self.pg_name}"
        self.log_path = os.path.join(self.dir, "service.log")
        self.port = None
        self.proc = None
        self.scheme = "http"

    @property
    def url(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self, wait=True):
        """Starts the process (again, on the same port and database after
        stop()); wait=False returns before it listens."""
        if not self.port:
            self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RMQS_")}
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        if self.token:
            env["RMQS_API_TOKEN"] = self.token
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [bin_path(), "--listen", f"127.0.0.1:{self.port}",
                 "--db", self.db, "--amqp-url", amqp_url(), *self.args],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        if wait:
            self.ready()
        return self

    def ready(self, timeout=30):
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("the service exited: " + self.log())
            try:
                if self.api("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("the service is not ready: " + self.log())
            time.sleep(0.05)

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def api(self, method, path, body=None, headers=None):
        """A request of its own (urllib, no client): (status, body)."""
        h = dict(headers or {})
        if self.token and "Authorization" not in h:
            h["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            h["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=h)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def metric(self, prefix):
        """One Prometheus sample of /metrics, summed over the lines whose
        name and labels start with ``prefix``."""
        _, text = self.api("GET", "/metrics")
        return sum(float(line.rsplit(" ", 1)[1])
                   for line in str(text).splitlines() if line.startswith(prefix))

    def stop(self, sig=signal.SIGTERM):
        if not self.proc or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def destroy(self):
        self.stop()
        if self.pg_name:
            psql(f"DROP DATABASE IF EXISTS {self.pg_name} WITH (FORCE)")
        shutil.rmtree(self.dir, ignore_errors=True)


def batch_requests(svc):
    return svc.metric('rmqs_http_requests_total{route="/schedule/batch"')


def job(**extra):
    return {"exchange": "orders", "routing_key": "order.reminder",
            "body": {"n": 1}, "delay_ms": 3600000, **extra}
