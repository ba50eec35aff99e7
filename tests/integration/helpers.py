"""Helpers for the integration tests: the real service, a real AMQP consumer,
control of the real RabbitMQ node, and waiting on conditions with deadlines.

Only the standard library and Debian's python3-pika. Everything talks to
127.0.0.1 only. The fixtures that hand these out live in conftest.py.
"""

import atexit
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid

import pika

UUID7_RE = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
TIMESTAMP_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:", "WARNING: ThreadSanitizer")
JOB_STATUSES = ("pending", "publishing", "sent", "failed", "cancelled")


def env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(
            f"{name} is not set: run the integration tests through tests/run.sh")
    return value


def free_port(host="127.0.0.1"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout, what, interval=0.05):
    """Call predicate until it returns something truthy, and return that.
    Fail with `what` if it has not by the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def port_open(port, host="127.0.0.1"):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


# --- client programs and processes ------------------------------------------

_GO_BUILT = {}


def go_build(source):
    """The path of the Go program `source` (standard library only), built
    once per test process with `go build`, as `go run` would but without
    compiling it for every run. No network and no module downloads. The
    caller checks first that `go` is on PATH (shutil.which)."""
    if source not in _GO_BUILT:
        folder = tempfile.mkdtemp(prefix="rmqs-go-")
        atexit.register(shutil.rmtree, folder, True)
        out = os.path.join(folder, os.path.splitext(os.path.basename(source))[0])
        env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=mod",
                   GO111MODULE="on", GOTOOLCHAIN="local", CGO_ENABLED="0")
        if not env.get("HOME"):  # else the build cache is Go's default
            env["GOCACHE"] = os.path.join(folder, "gocache")
        r = subprocess.run([shutil.which("go"), "build", "-o", out, source],
                           capture_output=True, text=True, timeout=600, env=env,
                           cwd=folder, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, \
            f"go build {os.path.basename(source)} failed:\n{r.stdout}{r.stderr}"
        _GO_BUILT[source] = out
    return _GO_BUILT[source]


def rss_bytes(pid):
    """Resident memory of a process now (VmRSS), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


# --- time -----------------------------------------------------------------

def parse_ts(text):
    """RFC 3339 text -> seconds since the epoch (float)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def ts_ms(text):
    return round(parse_ts(text) * 1000)


def format_ts(epoch_s, offset_minutes=0):
    """Seconds since the epoch -> RFC 3339 with milliseconds and the given
    UTC offset ("Z" for 0)."""
    tz = datetime.timezone(datetime.timedelta(minutes=offset_minutes))
    d = datetime.datetime.fromtimestamp(epoch_s, tz)
    text = d.isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


# --- the service ------------------------------------------------------------

class Response:
    """An HTTP answer: unpacks as (status, headers, body); body is the parsed
    JSON (None if the answer had no body). .raw keeps the bytes."""

    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers  # http.client.HTTPMessage: case-insensitive
        self.raw = raw
        self.body = None
        if raw:
            try:
                self.body = json.loads(raw)
            except ValueError as e:
                raise AssertionError(
                    f"answer {status} is not JSON: {raw[:500]!r}") from e

    def __iter__(self):
        return iter((self.status, self.headers, self.body))

    def __repr__(self):
        return f"<Response {self.status} {self.raw[:300]!r}>"


def http_request(port, method, path, body=None, headers=None, timeout=15,
                 host="127.0.0.1", check_contract=True):
    """One request on a fresh connection. A dict/list body is sent as JSON;
    str/bytes are sent as they are. Content-Type defaults to
    application/json when there is a body; a header whose value is None is
    left out. The answer is checked against api/openapi.yaml when
    RESPONSE_CHECK is set (conftest.py does; check_contract=False skips it
    for this request)."""
    headers = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    # A header given as None is not sent (and not defaulted).
    if body is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    headers = {k: v for k, v in headers.items() if v is not None}
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        answer = Response(resp.status, resp.headers, raw)
    finally:
        conn.close()
    if check_contract and RESPONSE_CHECK is not None:
        RESPONSE_CHECK(method, path, answer)
    return answer


class Service:
    """The real rmq-scheduler binary with its own database folder and port."""

    def __init__(self, workdir, amqp_url, args=(), log_level="info",
                 host="127.0.0.1", settings_in_env=False, extra_env=None):
        """settings_in_env: pass listen address, database and AMQP URL as
        RMQS_LISTEN/RMQS_DB/RMQS_AMQP_URL instead of flags. extra_env: more
        environment variables for the process."""
        self.dir = workdir
        os.makedirs(self.dir, exist_ok=True)
        self.db = os.path.join(self.dir, "rmqs.db")
        self.log_path = os.path.join(self.dir, "service.log")
        self.host = host
        self.port = free_port(host)
        self.amqp_url = amqp_url
        self.args = list(args)
        self.log_level = log_level
        self.settings_in_env = settings_in_env
        self.extra_env = dict(extra_env or {})
        self.proc = None
        self.exit_codes = []  # of every process this Service ran, in order

    # lifecycle
    def listen(self):
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def settings(self):
        return {"RMQS_LISTEN": self.listen(), "RMQS_DB": self.db,
                "RMQS_AMQP_URL": self.amqp_url}

    def command(self):
        cmd = [env("RMQS_BIN")]
        if not self.settings_in_env:
            cmd += ["--listen", self.listen(), "--db", self.db,
                    "--amqp-url", self.amqp_url]
        return cmd + ["--log-level", self.log_level, *self.args]

    def environment(self):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("RMQS_") and not k.startswith("RMQS_TEST"):
                del e[k]  # only what this service is given
        if self.settings_in_env:
            e.update(self.settings())
        e.update(self.extra_env)
        return e

    def start(self, wait="ready", timeout=20):
        assert not self.alive(), "service already running"
        with open(self.log_path, "ab") as log:
            shown = re.sub(r"(amqps?://[^:/@]*:)[^@]*@", r"\1***@",
                           " ".join(self.command()))
            log.write(f"=== start: {shown}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log,
                                         env=self.environment())
        self.wait_healthy(wait, timeout)
        return self

    def wait_healthy(self, wait="ready", timeout=20):
        """wait: "ready" (healthz and readyz 200), "health" (healthz only) or
        None (do not wait)."""
        if wait is None:
            return
        paths = ["/healthz"] + (["/readyz"] if wait == "ready" else [])
        for path in paths:
            def ok(path=path):
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"service exited with {self.proc.returncode} during start-up")
                try:
                    return self.get(path, timeout=2).status == 200
                except (OSError, http.client.HTTPException):
                    return False
            wait_until(ok, timeout, f"GET {path} to answer 200")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid

    def kill9(self):
        assert self.alive(), "service is not running"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.exit_codes.append(self.proc.wait(timeout=10))

    def terminate(self, timeout=30):
        """SIGTERM; the service must exit by itself with status 0."""
        assert self.alive(), "service is not running"
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.exit_codes.append(self.proc.wait(timeout=10))
            raise AssertionError(f"service did not exit within {timeout} s of SIGTERM")
        self.exit_codes.append(code)
        assert code == 0, f"service exited with {code} after SIGTERM, expected 0"

    def restart(self, wait="ready", timeout=20):
        """Start again on the same database and port (after kill9/terminate)."""
        return self.start(wait, timeout)

    def stop(self, timeout=20):
        """Teardown: SIGTERM, then SIGKILL after the deadline. Returns a
        problem description, or None if it exited cleanly (or was not
        running)."""
        if not self.alive():
            return None
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.exit_codes.append(self.proc.wait(timeout=10))
            return f"service did not exit within {timeout} s of SIGTERM (killed)"
        self.exit_codes.append(code)
        if code != 0:
            return f"service exited with status {code} after SIGTERM"
        return None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def sanitizer_report(self):
        text = self.log()
        if any(m in text for m in SANITIZER_MARKERS):
            return text
        return None

    # HTTP
    def request(self, method, path, body=None, headers=None, timeout=15,
                check_contract=True):
        return http_request(self.port, method, path, body, headers, timeout,
                            self.host, check_contract)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def patch(self, path, body=None, **kw):
        return self.request("PATCH", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    # the API in terms of jobs
    def schedule(self, job, headers=None, expect=201):
        status, hdrs, body = self.post("/schedule", job, headers=headers)
        assert status == expect, f"POST /schedule {job!r} -> {status} {body!r}"
        if status == 201:
            assert hdrs.get("Location") == f"/jobs/{body['id']}", hdrs.get("Location")
        return body

    def job(self, job_id):
        status, _, body = self.get(f"/jobs/{job_id}")
        assert status == 200, f"GET /jobs/{job_id} -> {status} {body!r}"
        return body

    def wait_status(self, job_id, statuses, timeout=30):
        if isinstance(statuses, str):
            statuses = (statuses,)
        last = {}

        def reached():
            last["job"] = self.job(job_id)
            return last["job"] if last["job"]["status"] in statuses else None
        try:
            return wait_until(reached, timeout, f"job {job_id} to be {statuses}")
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {last.get('job')!r}") from None

    def list_all(self, status=None, limit=1000):
        """Every job, following the cursors. Returns (jobs, pages)."""
        jobs, pages, after = [], 0, None
        while True:
            q = [f"limit={limit}"]
            if status:
                q.append(f"status={status}")
            if after:
                q.append(f"after={after}")
            st, _, body = self.get("/jobs?" + "&".join(q))
            assert st == 200, f"GET /jobs -> {st} {body!r}"
            jobs.extend(body["jobs"])
            pages += 1
            after = body["next"]
            if after is None:
                return jobs, pages
            assert pages < 10000, "cursor never ends"


def assert_job_shape(job):
    """The Job object of the contract (api/openapi.yaml)."""
    required = {"id", "status", "exchange", "routing_key", "deliver_at",
                "next_attempt_at", "created_at", "updated_at", "sent_at",
                "attempts", "max_attempts", "last_error", "headers",
                "properties"}
    missing = required - job.keys()
    assert not missing, f"job lacks {missing}: {job!r}"
    assert ("body" in job) != ("body_base64" in job), job
    assert UUID7_RE.match(job["id"]), job["id"]
    assert job["status"] in JOB_STATUSES, job["status"]
    for k in ("deliver_at", "created_at", "updated_at"):
        assert TIMESTAMP_RE.match(job[k]), (k, job[k])
    for k in ("sent_at", "next_attempt_at"):
        assert job[k] is None or TIMESTAMP_RE.match(job[k]), (k, job[k])
    assert isinstance(job["attempts"], int) and job["attempts"] >= 0
    assert isinstance(job["max_attempts"], int) and job["max_attempts"] >= 1
    assert job["last_error"] is None or isinstance(job["last_error"], str)
    assert isinstance(job["headers"], dict) and isinstance(job["properties"], dict)
    if job["status"] != "pending":
        assert job["next_attempt_at"] is None, job
    if job["status"] == "sent":
        assert job["sent_at"] is not None, job
    # UUIDv7: the first 48 bits are the creation time in ms.
    id_ms = int(job["id"].replace("-", "")[:12], 16)
    assert abs(id_ms - ts_ms(job["created_at"])) <= 1000, (job["id"], job["created_at"])


def assert_error(resp, status, code, field=None):
    """An error answer of the contract: {"error": {code, message, field?}}."""
    st, _, body = resp
    assert st == status, f"expected {status}, got {resp!r}"
    assert resp.headers.get_content_type() == "application/json", resp.headers
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert set(err) <= {"code", "message", "field"}, err
    assert err.get("code") == code, f"expected code {code}: {body!r}"
    assert isinstance(err.get("message"), str) and err["message"], body
    if field is not None:
        assert err.get("field") == field, f"expected field {field!r}: {body!r}"
    return err


# --- AMQP ---------------------------------------------------------------------

def _plain(value):
    """A header value as plain Python (pika hands out its own int subclass)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


# pika 1.2 (Debian 12) decodes three AMQP table field types wrongly: 'l'
# (signed 64-bit in RabbitMQ's and rabbitmq-c's table encoding) as unsigned,
# and 'd' / 'f' (double / float) truncated to integers. The tests must see
# the values the service really sent, so those three are decoded here and
# everything else is left to pika.
_pika_decode_value = pika.data.decode_value


def _decode_value(encoded, offset):
    kind = encoded[offset:offset + 1]
    if kind == b"l":
        return struct.unpack_from(">q", encoded, offset + 1)[0], offset + 9
    if kind == b"d":
        return struct.unpack_from(">d", encoded, offset + 1)[0], offset + 9
    if kind == b"f":
        return struct.unpack_from(">f", encoded, offset + 1)[0], offset + 5
    return _pika_decode_value(encoded, offset)


pika.data.decode_value = _decode_value


class Message:
    __slots__ = ("received_at", "body", "properties", "headers", "exchange",
                 "routing_key")

    def __init__(self, received_at, body, properties, exchange, routing_key):
        self.received_at = received_at  # time.time() when it arrived
        self.body = body
        self.properties = properties
        self.headers = {k: _plain(v) for k, v in (properties.headers or {}).items()}
        self.exchange = exchange
        self.routing_key = routing_key

    @property
    def job_id(self):
        return self.headers.get("x-scheduler-job-id")

    def __repr__(self):
        return f"<Message job={self.job_id} body={self.body[:40]!r}>"


def amqp_params(url):
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 3
    params.blocked_connection_timeout = 10
    return params


class Consumer:
    """A real consumer on its own thread and connection: a unique exchange
    (direct) with a unique queue bound by a unique routing key. It records
    every message with its arrival time. If the connection is lost it
    reconnects, re-declares and consumes again (durable=True keeps the
    exchange, the queue and its messages across a broker restart)."""

    def __init__(self, url, durable=False):
        tag = uuid.uuid4().hex[:12]
        self.url = url
        self.durable = durable
        self.exchange = f"rmqs-test-x-{tag}"
        self.queue = f"rmqs-test-q-{tag}"
        self.routing_key = f"rk-{tag}"
        self.messages = []
        self.errors = []
        self.connects = 0
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"consumer-{tag}")

    def start(self, timeout=20):
        self._thread.start()
        if not self._connected.wait(timeout):
            raise AssertionError(f"consumer could not connect: {self.errors[-3:]}")
        return self

    def _declare(self, ch):
        ch.exchange_declare(self.exchange, exchange_type="direct",
                            durable=self.durable)
        ch.queue_declare(self.queue, durable=self.durable)
        ch.queue_bind(self.queue, self.exchange, routing_key=self.routing_key)

    def _on_message(self, ch, method, properties, body):
        msg = Message(time.time(), body, properties, method.exchange,
                      method.routing_key)
        with self._lock:
            # Manual acks: a message the broker handed over just before the
            # connection broke comes again (redelivered) instead of being
            # lost in this client's buffers. A redelivery of one already
            # recorded is the broker's, not a second publish: skip it.
            seen = method.redelivered and any(
                m.body == body and m.job_id == msg.job_id for m in self.messages)
            if not seen:
                self.messages.append(msg)
        ch.basic_ack(method.delivery_tag)

    def _run(self):
        while not self._stop.is_set():
            conn = None
            try:
                conn = pika.BlockingConnection(amqp_params(self.url))
                ch = conn.channel()
                self._declare(ch)
                ch.basic_consume(self.queue, self._on_message, auto_ack=False)
                self.connects += 1
                self._connected.set()
                while not self._stop.is_set():
                    conn.process_data_events(time_limit=0.02)
                conn.close()
                return
            except Exception as e:  # lost connection, refused, channel closed
                self._connected.clear()
                self.errors.append(repr(e))
                try:
                    if conn is not None and conn.is_open:
                        conn.close()
                except Exception:
                    pass
                self._stop.wait(0.3)

    def bind(self, routing_key):
        """Also bind the queue with another routing key (own connection)."""
        conn = pika.BlockingConnection(amqp_params(self.url))
        try:
            conn.channel().queue_bind(self.queue, self.exchange,
                                      routing_key=routing_key)
        finally:
            conn.close()

    def wait_connected(self, timeout=60):
        if not self._connected.wait(timeout):
            raise AssertionError(f"consumer did not reconnect: {self.errors[-3:]}")

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        try:  # best effort: the node is private to the test run anyway
            conn = pika.BlockingConnection(amqp_params(self.url))
            ch = conn.channel()
            ch.queue_delete(self.queue)
            ch.exchange_delete(self.exchange)
            conn.close()
        except Exception:
            pass

    # reading what arrived
    def snapshot(self):
        with self._lock:
            return list(self.messages)

    def wait_for(self, n, timeout=30):
        """Wait until at least n messages have arrived; return them all."""
        got = wait_until(lambda: len(self.messages) >= n and self.snapshot(),
                         timeout, f"{n} messages on {self.queue} "
                                  f"(have {len(self.messages)})")
        return got

    def wait_for_jobs(self, job_ids, timeout=30):
        """Wait until a message of every job id has arrived; return
        {job_id: [messages]} for everything received."""
        want = set(job_ids)

        def done():
            seen = {m.job_id for m in self.snapshot()}
            return want <= seen
        try:
            wait_until(done, timeout, f"{len(want)} jobs to arrive")
        except AssertionError:
            seen = {m.job_id for m in self.snapshot()}
            missing = sorted(want - seen)
            raise AssertionError(
                f"{len(missing)} of {len(want)} jobs never arrived within "
                f"{timeout} s, e.g. {missing[:5]}") from None
        return self.by_job()

    def by_job(self):
        out = {}
        for m in self.snapshot():
            out.setdefault(m.job_id, []).append(m)
        return out


class Broker:
    """Control of the test run's own RabbitMQ node (started by tests/run.sh)."""

    def __init__(self):
        self.url = env("RMQS_TEST_AMQP_URL")
        self.port = int(env("RMQS_TEST_AMQP_PORT"))
        self.node = env("RMQS_TEST_RABBIT_NODE")
        self.app_stopped = False
        self.frozen_pid = None
        self.exchanges = []

    def ctl(self, *args, timeout=90):
        r = subprocess.run(["rabbitmqctl", "-n", self.node, *args],
                           capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(args)} failed "
                                 f"({r.returncode}): {r.stdout}{r.stderr}")
        return r.stdout

    def stop_app(self):
        self.app_stopped = True
        self.ctl("stop_app")
        wait_until(lambda: not port_open(self.port), 30, "the AMQP port to close")

    def start_app(self):
        self.ctl("start_app")
        self.wait_port()
        self.app_stopped = False

    def wait_port(self, timeout=60):
        wait_until(lambda: port_open(self.port), timeout,
                   "the AMQP port to accept connections", interval=0.1)

    def beam_pid(self):
        """The node's Erlang VM (from the pid file tests/run.sh gave it)."""
        with open(env("RABBITMQ_PID_FILE")) as f:
            return int(f.read().strip())

    def freeze(self):
        """SIGSTOP the node: connections stay open but nothing answers (a
        half-open broker). thaw() or cleanup() resumes it."""
        self.frozen_pid = self.beam_pid()
        os.kill(self.frozen_pid, signal.SIGSTOP)

    def thaw(self):
        if self.frozen_pid is not None:
            os.kill(self.frozen_pid, signal.SIGCONT)
            self.frozen_pid = None

    def declare_exchange(self, durable=False):
        """A unique direct exchange with no queue bound to it."""
        name = f"rmqs-test-noqueue-{uuid.uuid4().hex[:12]}"
        conn = pika.BlockingConnection(amqp_params(self.url))
        try:
            conn.channel().exchange_declare(name, exchange_type="direct",
                                            durable=durable)
        finally:
            conn.close()
        self.exchanges.append(name)
        return name

    def cleanup(self):
        self.thaw()
        if self.app_stopped:
            self.start_app()
        if self.exchanges:
            try:
                conn = pika.BlockingConnection(amqp_params(self.url))
                ch = conn.channel()
                for name in self.exchanges:
                    ch.exchange_delete(name)
                conn.close()
            except Exception:
                pass


# --- the HTTP contract (api/openapi.yaml) --------------------------------------
#
# Every answer http_request receives is checked against the response that
# api/openapi.yaml documents for its operation (method, path template,
# status): the status must be documented there, the Content-Type must be one
# of its media types, its required headers must be present, and a JSON body
# must match its schema. Requests that match no operation are checked
# against the file's x-unmatched-requests (unknown path: 401/404/413;
# unknown method: 401/405 with an Allow header naming the path's methods, or
# 413). conftest.py sets RESPONSE_CHECK for every test; a test opts out with
# @pytest.mark.no_contract_check, a request with check_contract=False, a run
# with RMQS_TEST_CONTRACT=0.
#
# The schemas are checked by a small JSON Schema (2020-12) validator for the
# keywords the file uses; a keyword it does not know is an error, so the
# file cannot come to rely on a rule nobody checks. Needs python3-yaml.

OPENAPI_PATH = os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "api", "openapi.yaml"))

# callable(method, path, response) run on every answer of http_request, or
# None. Raises ContractError on a drift.
RESPONSE_CHECK = None


class ContractError(AssertionError):
    """An answer differs from api/openapi.yaml, or the file is unusable."""


_DATE_TIME_RE = re.compile(
    r"^\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")
_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_BASE64_RE = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")


def _json_kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _json_equal(a, b):
    """JSON equality: true is not 1, 1 is 1.0, and containers compare deeply."""
    ka, kb = _json_kind(a), _json_kind(b)
    numbers = ("integer", "number")
    if ka in numbers and kb in numbers:
        return a == b
    if ka != kb:
        return False
    if ka == "array":
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if ka == "object":
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return a == b


class SchemaValidator:
    """JSON Schema 2020-12, the subset api/openapi.yaml uses, with $ref to
    '#/...' pointers of the one document."""

    ANNOTATIONS = frozenset((
        "description", "summary", "title", "example", "examples", "default",
        "deprecated", "readOnly", "writeOnly", "$comment", "contentMediaType"))
    KEYWORDS = frozenset((
        "$ref", "type", "enum", "const", "properties", "required",
        "additionalProperties", "propertyNames", "minProperties",
        "maxProperties", "items", "minItems", "maxItems", "oneOf", "anyOf",
        "allOf", "not", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minLength", "maxLength", "pattern", "format",
        "contentEncoding"))
    FORMATS = frozenset(("date-time", "uuid", "int64", "int32"))

    def __init__(self, document):
        self.doc = document
        self._patterns = {}

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ContractError(f"only local $ref are supported: {ref}")
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise ContractError(f"$ref {ref} points nowhere")
            node = node[part]
        return node

    def check_keywords(self, schema, where="schema"):
        """Raise if schema (recursively) uses a keyword this validator
        does not implement."""
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise ContractError(f"{where}: a schema must be an object")
        unknown = set(schema) - self.KEYWORDS - self.ANNOTATIONS
        unknown = {k for k in unknown if not k.startswith("x-")}
        if unknown:
            raise ContractError(f"{where}: keywords {sorted(unknown)} are not "
                                "supported by the tests' validator")
        if "format" in schema and schema["format"] not in self.FORMATS:
            raise ContractError(f"{where}: format {schema['format']!r} is not "
                                "supported by the tests' validator")
        for key in ("items", "additionalProperties", "propertyNames", "not"):
            if key in schema:
                self.check_keywords(schema[key], f"{where}/{key}")
        for key in ("oneOf", "anyOf", "allOf"):
            for i, sub in enumerate(schema.get(key, ())):
                self.check_keywords(sub, f"{where}/{key}/{i}")
        for name, sub in schema.get("properties", {}).items():
            self.check_keywords(sub, f"{where}/properties/{name}")

    def errors(self, schema, value, where="$"):
        """Every way value fails schema, as 'where: why' strings."""
        out = []
        self._check(schema, value, where, out)
        return out

    def validate(self, schema, value, where="$"):
        errs = self.errors(schema, value, where)
        if errs:
            raise ContractError("; ".join(errs[:10]))

    def _pattern(self, text):
        p = self._patterns.get(text)
        if p is None:
            p = self._patterns[text] = re.compile(text)
        return p

    def _check(self, schema, value, where, out):
        if schema is True:
            return
        if schema is False:
            out.append(f"{where}: no value is allowed here")
            return
        unknown = set(schema) - self.KEYWORDS - self.ANNOTATIONS
        if any(not k.startswith("x-") for k in unknown):
            raise ContractError(f"schema at {where} uses unsupported keywords "
                                f"{sorted(unknown)}")
        if "$ref" in schema:
            self._check(self.resolve(schema["$ref"]), value, where, out)
        kind = _json_kind(value)
        if "type" in schema:
            types = schema["type"]
            types = [types] if isinstance(types, str) else types
            ok = kind in types or (kind == "integer" and "number" in types) or \
                (kind == "number" and "integer" in types and value.is_integer())
            if not ok:
                out.append(f"{where}: {kind} {value!r:.80} is not of type {types}")
                return
        if "const" in schema and not _json_equal(schema["const"], value):
            out.append(f"{where}: {value!r:.80} is not {schema['const']!r}")
        if "enum" in schema and not any(_json_equal(e, value) for e in schema["enum"]):
            out.append(f"{where}: {value!r:.80} is not one of {schema['enum']}")
        for key in ("allOf", "anyOf", "oneOf"):
            if key not in schema:
                continue
            results = [self.errors(sub, value, where) for sub in schema[key]]
            passed = sum(1 for r in results if not r)
            if key == "allOf" and passed != len(results):
                out.extend(e for r in results for e in r)
            elif key == "anyOf" and passed == 0:
                out.append(f"{where}: matches none of anyOf: "
                           + " | ".join("; ".join(r[:3]) for r in results))
            elif key == "oneOf" and passed != 1:
                why = " | ".join("; ".join(r[:3]) for r in results) if passed == 0 \
                    else f"{passed} alternatives match"
                out.append(f"{where}: must match exactly one of oneOf: {why}")
        if "not" in schema and not self.errors(schema["not"], value, where):
            out.append(f"{where}: {value!r:.80} matches a schema it must not")
        if kind == "object":
            self._check_object(schema, value, where, out)
        elif kind == "array":
            self._check_array(schema, value, where, out)
        elif kind == "string":
            self._check_string(schema, value, where, out)
        elif kind in ("integer", "number"):
            self._check_number(schema, value, where, out)

    def _check_object(self, schema, value, where, out):
        props = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                out.append(f"{where}: required member {name!r} is missing")
        extra = schema.get("additionalProperties", True)
        for name, member in value.items():
            if name in props:
                self._check(props[name], member, f"{where}.{name}", out)
            elif extra is False:
                out.append(f"{where}: member {name!r} is not documented")
            elif extra is not True:
                self._check(extra, member, f"{where}.{name}", out)
            if "propertyNames" in schema:
                self._check(schema["propertyNames"], name, f"{where} (name {name!r})", out)
        if len(value) > schema.get("maxProperties", float("inf")):
            out.append(f"{where}: more than {schema['maxProperties']} members")
        if len(value) < schema.get("minProperties", 0):
            out.append(f"{where}: fewer than {schema['minProperties']} members")

    def _check_array(self, schema, value, where, out):
        if len(value) > schema.get("maxItems", float("inf")):
            out.append(f"{where}: more than {schema['maxItems']} items")
        if len(value) < schema.get("minItems", 0):
            out.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                self._check(schema["items"], item, f"{where}[{i}]", out)

    def _check_string(self, schema, value, where, out):
        if len(value) > schema.get("maxLength", float("inf")):
            out.append(f"{where}: longer than {schema['maxLength']} characters")
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: shorter than {schema['minLength']} characters")
        if "pattern" in schema and not self._pattern(schema["pattern"]).search(value):
            out.append(f"{where}: {value!r:.80} does not match {schema['pattern']}")
        fmt = schema.get("format")
        if fmt == "date-time" and not _DATE_TIME_RE.match(value):
            out.append(f"{where}: {value!r:.80} is not an RFC 3339 date-time")
        if fmt == "uuid" and not _UUID_RE.match(value):
            out.append(f"{where}: {value!r:.80} is not a UUID")
        if schema.get("contentEncoding") == "base64" and not _BASE64_RE.match(value):
            out.append(f"{where}: {value!r:.80} is not padded base64")

    def _check_number(self, schema, value, where, out):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: {value} is below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: {value} is above {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(f"{where}: {value} is not above {schema['exclusiveMinimum']}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            out.append(f"{where}: {value} is not below {schema['exclusiveMaximum']}")
        fmt = schema.get("format")
        if fmt == "int64" and not -2**63 <= value < 2**63:
            out.append(f"{where}: {value} is not an int64")
        if fmt == "int32" and not -2**31 <= value < 2**31:
            out.append(f"{where}: {value} is not an int32")


_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


class OpenApiContract:
    """api/openapi.yaml, to look operations up and check answers."""

    # Paths the server answers as another (info.description says so).
    ALIASES = {"/jobs/": "/jobs"}

    def __init__(self, path=OPENAPI_PATH):
        try:
            import yaml
        except ImportError:
            raise ContractError("the contract check needs PyYAML: apt-get install "
                                "python3-yaml (tests/run.sh installs it)") from None
        with open(path, encoding="utf-8") as f:
            self.doc = yaml.safe_load(f)
        self.path = path
        self.schemas = SchemaValidator(self.doc)
        self.unmatched = self.doc.get("x-unmatched-requests", {})
        self._templates = []
        for template in self.doc.get("paths", {}):
            rx = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            self._templates.append((template.count("{"), template, re.compile(rx)))
        self._templates.sort()  # literal paths win over templated ones

    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            node = self.schemas.resolve(node["$ref"])
        return node

    def path_template(self, path):
        """The documented path template that path (no query) falls under,
        or None. /jobs/ is /jobs (README, http_api.c)."""
        path = path.split("?", 1)[0].split("#", 1)[0]
        path = self.ALIASES.get(path, path)
        for _, template, rx in self._templates:
            if rx.match(path):
                return template
        return None

    def methods(self, template):
        """Upper-case methods documented for a path template."""
        item = self.doc["paths"][template]
        return [m.upper() for m in _METHODS if m in item]

    def responses_for(self, method, path):
        """(what, responses, template): the documented responses for this
        request, and a description of where they come from."""
        template = self.path_template(path)
        if template is None:
            return f"unknown path {path}", self.unmatched.get("unknown-path", {}), None
        item = self.doc["paths"][template]
        m = method.lower()
        if m == "head" and "head" not in item:
            m = "get"
        if m not in item:
            return (f"{method} {template} (method not documented)",
                    self.unmatched.get("unknown-method", {}), template)
        return f"{method} {template}", item[m].get("responses", {}), template

    def check(self, method, path, resp):
        """Raise ContractError if resp (status, headers, raw/body) is not an
        answer api/openapi.yaml documents for method and path."""
        method = method.upper()
        what, responses, template = self.responses_for(method, path)
        status = str(resp.status)
        where = f"{method} {path} -> {resp.status}"
        if status not in responses and "default" not in responses:
            raise ContractError(
                f"{where}: status {status} is not documented in "
                f"{os.path.basename(self.path)} for {what} (documented: "
                f"{', '.join(sorted(responses)) or 'none'}); answer: {resp.raw[:300]!r}")
        spec = self.deref(responses.get(status, responses.get("default")))
        for name, header in (spec.get("headers") or {}).items():
            header = self.deref(header)
            value = resp.headers.get(name)
            if value is None:
                if header.get("required"):
                    raise ContractError(f"{where}: required header {name} is missing")
                continue
            if "schema" in header:
                errs = self.schemas.errors(header["schema"], value, f"header {name}")
                if errs:
                    raise ContractError(f"{where}: {'; '.join(errs)}")
        if status == "405" and template is not None:
            allow = {m.strip() for m in (resp.headers.get("Allow") or "").split(",")}
            documented = set(self.methods(template)) - {"HEAD"}
            if allow != documented:
                raise ContractError(f"{where}: Allow: {resp.headers.get('Allow')!r} "
                                    f"but {template} documents {sorted(documented)}")
        content = spec.get("content") or {}
        ctype = resp.headers.get("Content-Type")
        if not content:
            if resp.raw:
                raise ContractError(f"{where}: documented without a body, got "
                                    f"{resp.raw[:200]!r}")
            return
        if ctype is None:
            if method == "HEAD" and not resp.raw:
                return
            raise ContractError(f"{where}: no Content-Type (documented: {sorted(content)})")
        media = self._media_type(content, ctype)
        if media is None:
            raise ContractError(f"{where}: Content-Type {ctype!r} is not documented "
                                f"(documented: {sorted(content)})")
        if method == "HEAD":
            if resp.raw:
                raise ContractError(f"{where}: a HEAD answer has a body")
            return
        schema = content[media].get("schema")
        if schema is None:
            return
        if media.split(";")[0].strip().lower().endswith("json"):
            value = resp.body
            if value is None:
                try:
                    value = json.loads(resp.raw)
                except ValueError:
                    raise ContractError(f"{where}: body is not JSON: "
                                        f"{resp.raw[:200]!r}") from None
        else:
            value = resp.raw.decode("utf-8")
        errs = self.schemas.errors(schema, value, "body")
        if errs:
            raise ContractError(f"{where}: body does not match "
                                f"{os.path.basename(self.path)} ({what}): "
                                + "; ".join(errs[:8]) + f"; answer: {resp.raw[:400]!r}")

    @staticmethod
    def _params(text):
        """(type, {parameter: value}); names, and the charset's value, in
        lower case (they are case-insensitive); a parameter without '=' is
        kept with the value None, so it counts as a difference."""
        parts = [p.strip() for p in text.split(";")]
        params = {}
        for p in parts[1:]:
            k, eq, v = p.partition("=")
            k = k.strip().lower()
            v = v.strip().strip('"') if eq else None
            params[k] = v.lower() if k == "charset" and v else v
        return parts[0].lower(), params

    def _media_type(self, content, ctype):
        """The documented media type key ctype is: the same type with the
        same parameters, no more and no fewer (the contract declares what
        the server sends)."""
        got = self._params(ctype)
        for key in content:
            if self._params(key) == got:
                return key
        return None


_CONTRACT = None


def openapi_contract():
    """The contract, loaded once per process."""
    global _CONTRACT
    if _CONTRACT is None:
        _CONTRACT = OpenApiContract()
    return _CONTRACT


class TextResponse(Response):
    """An answer that is not JSON (GET /metrics): .text is the decoded body."""

    def __init__(self, status, headers, raw):  # pylint: disable=super-init-not-called
        self.status = status
        self.headers = headers
        self.raw = raw
        self.body = None
        self.text = raw.decode("utf-8")


def http_request_text(port, path, headers=None, timeout=15, host="127.0.0.1",
                      method="GET", check_contract=True):
    """A request whose answer is text (GET /metrics); checked against the
    contract like http_request's. Returns a TextResponse."""
    headers = {k: v for k, v in (headers or {}).items() if v is not None}
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        answer = TextResponse(r.status, r.headers, r.read())
    finally:
        conn.close()
    if check_contract and RESPONSE_CHECK is not None:
        RESPONSE_CHECK(method, path, answer)
    return answer
