"""Security: the bearer token, the exchange allow-list, HTTPS, and AMQP over
TLS (amqps://), each against the real binary, a real RabbitMQ node and real
files.

- Bearer token (RMQS_API_TOKEN, or the first line of RMQS_API_TOKEN_FILE /
  --api-token-file): every endpoint but /healthz answers 401 without it;
  never a command-line argument; never in the log or in /readyz.
- --allow-exchanges: jobs for other exchanges are 403 and nothing is stored.
- --tls-cert-file/--tls-key-file: HTTPS that a client trusting our own CA can
  use and that nothing else can.
- amqps:// with --amqp-ca-file (and a client certificate): a second, private
  RabbitMQ node with a TLS listener is started by this module (its own name,
  ports, epmd and data folder) and always stopped at the end. For an IP
  literal in the URL, both AMQP connections (publisher and --ingest) must
  find that IP in the certificate's subjectAltName (a third node presents a
  certificate that names the IP only in its CN).

Certificates are made with the openssl command line in temporary folders.
Everything talks to 127.0.0.1 only; every wait has a deadline.
"""

import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import pika
import pytest

from helpers import (Consumer, amqp_params, assert_error, env, free_port,
                     port_open, wait_until)
from pylib.rabbit import RabbitNode

LATER = 3_600_000  # a delay that does not come due during a test


def later_job(exchange="", routing_key="q", body="x"):
    return {"exchange": exchange, "routing_key": routing_key, "body": body,
            "delay_ms": LATER}


def new_token():
    """A distinctive token (its hex part is searched for in logs)."""
    return "tok-" + uuid.uuid4().hex + "-end"


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def run_binary(*args, extra_env=None, timeout=20):
    """Run the binary for a start-up check, with only the RMQS_* settings
    given here (none of the caller's)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("RMQS_") or k.startswith("RMQS_TEST")}
    e.update(extra_env or {})
    return subprocess.run([env("RMQS_BIN"), *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=e)


def assert_no_sanitizer(text):
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:"):
        assert marker not in text, text


def wait_ready(svc, headers=None, timeout=20, broker=None):
    """/readyz 200 (sending headers, e.g. the token); fails early if the
    service exits, and quotes the service's own explanation if it never
    becomes ready."""
    def ok():
        if not svc.alive():
            raise AssertionError(
                f"service exited with {svc.proc.returncode}: {svc.log()[-3000:]}")
        try:
            return svc.get("/readyz", headers=headers, timeout=2).status == 200
        except (OSError, http.client.HTTPException):
            return False
    try:
        wait_until(ok, timeout, "GET /readyz to answer 200", interval=0.1)
    except AssertionError as e:
        why = [ln for ln in svc.log().splitlines()
               if "unreachable" in ln or "level=error" in ln]
        # A private node's side of a refused TLS handshake (its alerts).
        said = "" if broker is None else "; the node's log ends:\n" + broker._log_tail()
        raise AssertionError(f"{e}; service log says: {why[-3:]}{said}") from None


def assert_unauthorized(resp, token=None):
    assert_error(resp, 401, "unauthorized")
    assert resp.headers.get("WWW-Authenticate") == 'Bearer realm="rmq-scheduler"', \
        dict(resp.headers)
    if token is not None:
        assert token not in resp.raw.decode("utf-8", "replace")


def stored_jobs(svc, headers=None):
    st, _, body = svc.get("/jobs?limit=1000", headers=headers)
    assert st == 200, (st, body)
    assert body["next"] is None, "more jobs than expected"
    return body["jobs"]


# --- certificates (openssl command line) ------------------------------------

def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"openssl {' '.join(args)}: {r.stderr}"


class Pki:
    """A private CA, a server certificate for 127.0.0.1 (SAN IP:127.0.0.1
    and DNS:localhost), a server certificate without the IP in a SAN (no
    subjectAltName, CN=127.0.0.1: what RFC 6125 clients refuse for an IP)
    and a client certificate, all PEM, EC P-256."""

    def __init__(self, folder):
        self.dir = folder
        tag = uuid.uuid4().hex[:8]
        self.client_cn = f"rmqs-test-client-{tag}"
        self.ca = self._path("ca.pem")
        self.ca_key = self._path("ca.key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key",
                "-out", "ca.pem", "-days", "2", "-subj", f"/CN=rmqs test CA {tag}",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
        self.server_cert, self.server_key = self._issue(
            "server", "/CN=127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "extendedKeyUsage=serverAuth\n")
        self.noip_cert, self.noip_key = self._issue(
            "server-noip", "/CN=127.0.0.1", "extendedKeyUsage=serverAuth\n")
        self.client_cert, self.client_key = self._issue(
            "client", f"/CN={self.client_cn}", "extendedKeyUsage=clientAuth\n")

    def _path(self, name):
        return os.path.join(self.dir, name)

    def _issue(self, name, subject, extensions):
        with open(self._path(f"{name}.ext"), "w") as f:
            f.write("basicConstraints=critical,CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\n" + extensions)
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subject, cwd=self.dir)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey",
                "ca.key", "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
                "-extfile", f"{name}.ext", cwd=self.dir)
        return self._path(f"{name}.pem"), self._path(f"{name}.key")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


# --- HTTPS client (urllib, never through a proxy) ----------------------------

def https_request(port, method, path, body=None, headers=None, context=None,
                  timeout=10):
    """One HTTPS request to 127.0.0.1; returns (status, headers, JSON body).
    TLS failures raise (urllib.error.URLError with .reason)."""
    data = json.dumps(body).encode() if body is not None else None
    h = dict(headers or {})
    if data is not None:
        h.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=data,
                                 headers=h, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, r.headers, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, e.headers, json.loads(raw) if raw else None


def trusting(ca):
    return ssl.create_default_context(cafile=ca)


def start_https_service(service, pki, *args, extra_env=None, timeout=20):
    svc = service("--tls-cert-file", pki.server_cert, "--tls-key-file",
                  pki.server_key, *args, wait=None, extra_env=extra_env)
    ctx = trusting(pki.ca)

    def healthy():
        if not svc.alive():
            raise AssertionError(f"service exited with {svc.proc.returncode}")
        try:
            return https_request(svc.port, "GET", "/healthz", context=ctx,
                                 timeout=2)[0] == 200
        except (OSError, http.client.HTTPException):
            return False
    wait_until(healthy, timeout, "GET https://.../healthz to answer 200",
               interval=0.1)
    return svc


# --- a second RabbitMQ node with a TLS listener ------------------------------

class TlsBroker(RabbitNode):
    """A private RabbitMQ node (pylib.rabbit.RabbitNode): a TLS listener and
    a plain one, both on 127.0.0.1, its own Erlang distribution port and
    epmd. Its folder (data, logs, config and a copy of the certificates)
    belongs to the rabbitmq user, which the node drops to."""

    def __init__(self, pki, require_client_cert, ip_in_cert=True):
        super().__init__("rmqs-sectls")
        self.require_client_cert = require_client_cert
        self.tls_port, self.plain_port = free_port(), free_port()
        for name in ("ca.pem", "server.pem", "server.key"):
            src = {"ca.pem": pki.ca,
                   "server.pem": pki.server_cert if ip_in_cert else pki.noip_cert,
                   "server.key": pki.server_key if ip_in_cert else pki.noip_key}[name]
            shutil.copy(src, os.path.join(self.dir, name))
        self.prepare(f"listeners.tcp.1 = 127.0.0.1:{self.plain_port}\n"
                     f"listeners.ssl.1 = 127.0.0.1:{self.tls_port}\n"
                     f"ssl_options.cacertfile = {self.dir}/ca.pem\n"
                     f"ssl_options.certfile = {self.dir}/server.pem\n"
                     f"ssl_options.keyfile = {self.dir}/server.key\n"
                     "ssl_options.verify = verify_peer\n"
                     "ssl_options.fail_if_no_peer_cert = "
                     f"{'true' if require_client_cert else 'false'}\n"
                     "loopback_users.guest = true\n",
                     wait_ports=(self.tls_port, self.plain_port))

    @property
    def plain_url(self):
        return f"amqp://guest:guest@127.0.0.1:{self.plain_port}/"

    def tls_url(self, host):
        return f"amqps://guest:guest@{host}:{self.tls_port}/"

    def tls_connections(self):
        """Connections to the TLS listener, as rabbitmqctl sees them
        (client_properties as [name, type, value] triples)."""
        out = self.ctl("list_connections", "port", "ssl", "ssl_protocol",
                       "peer_cert_subject", "user", "client_properties",
                       "--formatter", "json", "-q")
        return [c for c in json.loads(out) if c.get("port") == self.tls_port]


@pytest.fixture(scope="module")
def tls_broker(pki):
    """tls_broker(require_client_cert=False, ip_in_cert=True): the module's
    TLS node of that kind. On first use both client-certificate kinds are
    launched at once (booting side by side is much quicker than one after
    the other), and with them the node whose certificate lacks the IP if
    that is what is asked for; all are stopped, in parallel, at the end of
    the module."""
    nodes = {}

    def get(require_client_cert=False, ip_in_cert=True):
        want = (require_client_cert, ip_in_cert)
        for kind in ((False, True), (True, True), want):
            if kind not in nodes:
                nodes[kind] = TlsBroker(pki, *kind)
                nodes[kind].launch()
        return nodes[want].wait_up()
    yield get
    stoppers = [threading.Thread(target=b.stop) for b in nodes.values()]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join(120)


@pytest.fixture
def tls_consumers():
    """Consumers on a TLS node (through its plain listener)."""
    made = []

    def make(broker):
        c = Consumer(broker.plain_url).start()
        made.append(c)
        return c
    yield make
    for c in made:
        c.stop()


# =============================================================================
# Bearer token
# =============================================================================

def test_without_a_token_every_endpoint_is_open(service):
    svc = service()
    job = svc.schedule(later_job())
    for headers in (None, {"Authorization": "Bearer anything-at-all-here"}):
        assert svc.get("/healthz", headers=headers).status == 200
        assert svc.get("/readyz", headers=headers).status == 200
        assert svc.get("/jobs", headers=headers).status == 200
        assert svc.get(f"/jobs/{job['id']}", headers=headers).status == 200
        assert svc.patch(f"/jobs/{job['id']}", {"delay_ms": LATER + 1},
                         headers=headers).status == 200
        st, _, batch = svc.post("/schedule/batch", [later_job()], headers=headers)
        assert st == 201, batch
        assert svc.post("/schedule", later_job(), headers=headers).status == 201
    assert svc.delete(f"/jobs/{job['id']}").status == 200
    wait_until(lambda: "auth=off" in svc.log(), 10, "the log line 'listening' with auth=off")


def _endpoints(job_id):
    return [("GET", "/readyz", None), ("HEAD", "/readyz", None),
            ("GET", "/metrics", None), ("GET", "/jobs", None),
            ("GET", "/jobs?status=pending", None),
            ("GET", f"/jobs/{job_id}", None),
            ("PATCH", f"/jobs/{job_id}", {"delay_ms": 5}),
            ("DELETE", f"/jobs/{job_id}", None),
            ("POST", "/schedule", later_job(body="unauthorized")),
            ("POST", "/schedule/batch", [later_job(), later_job()]),
            ("GET", "/no-such-route", None)]


def _bad_credentials(token):
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    return {
        "no Authorization header": None,
        "wrong token, same length": f"Bearer {flipped}",
        "wrong token, different case": f"Bearer {token.upper()}",
        "Basic scheme with the token as password":
            "Basic " + base64.b64encode(f"user:{token}".encode()).decode(),
        "Basic scheme with the bare token": f"Basic {token}",
        "token without a scheme": token,
        "a shorter token (a prefix)": f"Bearer {token[:-1]}",
        "a longer token": f"Bearer {token}x",
        "a much shorter token": f"Bearer {token[:4]}",
        "empty bearer token": "Bearer ",
        "token in another scheme": f"Token {token}",
    }


def test_with_a_token_every_endpoint_but_healthz_needs_it(service):
    token = new_token()
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": token})
    wait_ready(svc, bearer(token))
    wait_until(lambda: "auth=bearer" in svc.log(), 10, "the log line 'listening' with auth=bearer")
    job = svc.schedule(later_job(body="kept"), headers=bearer(token))

    # /healthz stays open, with or without (even wrong) credentials.
    for h in (None, {"Authorization": "Bearer wrong-wrong-wrong-wrong"}):
        st, _, body = svc.get("/healthz", headers=h)
        assert (st, body) == (200, {"status": "ok"})

    for what, value in _bad_credentials(token).items():
        headers = {"Authorization": value}
        for method, path, body in _endpoints(job["id"]):
            resp = svc.request(method, path, body, headers=headers)
            try:
                if method == "HEAD":
                    assert resp.status == 401
                    assert resp.headers.get("WWW-Authenticate") == \
                        'Bearer realm="rmq-scheduler"'
                else:
                    assert_unauthorized(resp, token)
            except AssertionError as e:
                raise AssertionError(f"{method} {path} with {what}: {e}") from None

    # Nothing any of those requests asked for happened.
    jobs = stored_jobs(svc, bearer(token))
    assert [j["id"] for j in jobs] == [job["id"]], jobs
    again = svc.get(f"/jobs/{job['id']}", headers=bearer(token)).body
    assert again["status"] == "pending"
    assert again["deliver_at"] == job["deliver_at"], "a 401 PATCH rescheduled the job"

    # The right token opens everything; the scheme is case-insensitive.
    for scheme in ("Bearer", "bearer"):
        h = {"Authorization": f"{scheme} {token}"}
        assert svc.get("/readyz", headers=h).status == 200
        assert svc.get("/jobs", headers=h).status == 200
        assert svc.get(f"/jobs/{job['id']}", headers=h).status == 200
        assert svc.post("/schedule", later_job(), headers=h).status == 201
        assert svc.post("/schedule/batch", [later_job()], headers=h).status == 201
        assert_error(svc.get("/no-such-route", headers=h), 404, "not_found")
    st, _, patched = svc.patch(f"/jobs/{job['id']}", {"delay_ms": LATER * 2},
                               headers=bearer(token))
    assert st == 200 and patched["deliver_at"] != job["deliver_at"], patched
    st, _, cancelled = svc.delete(f"/jobs/{job['id']}", headers=bearer(token))
    assert st == 200 and cancelled["status"] == "cancelled", cancelled


def test_an_unauthorized_post_stores_nothing(service):
    token = new_token()
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": token})
    wait_ready(svc, bearer(token))
    key = f"idem-{uuid.uuid4().hex}"
    # A large body, an Idempotency-Key and a wrong token: 401, nothing kept
    # (not the job, not the key).
    big = later_job(body="y" * 200_000)
    for h in ({"Idempotency-Key": key},
              {"Idempotency-Key": key, "Authorization": f"Bearer {token[:-1]}Z"}):
        assert_unauthorized(svc.post("/schedule", big, headers=h), token)
        assert_unauthorized(svc.post("/schedule/batch", [big, big], headers=h), token)
    assert stored_jobs(svc, bearer(token)) == []
    st, _, job = svc.post("/schedule", big,
                          headers={"Idempotency-Key": key, **bearer(token)})
    assert st == 201, "the key was recorded by an unauthorized request"
    assert [j["id"] for j in stored_jobs(svc, bearer(token))] == [job["id"]]
    # The connection handling survived: the service still answers.
    assert svc.get("/healthz").status == 200


@pytest.mark.parametrize("how", ["flag", "environment"])
@pytest.mark.parametrize("ending", ["\n", "\r\n", ""], ids=["lf", "crlf", "no-eol"])
def test_token_from_a_file_first_line(service, tmp_path, how, ending):
    token = new_token()
    second = new_token()
    path = tmp_path / "token"
    path.write_text(token + ending + (second + ending if ending else ""))
    os.chmod(path, 0o600)
    args, extra = ((("--api-token-file", str(path)), {}) if how == "flag" else
                   ((), {"RMQS_API_TOKEN_FILE": str(path)}))
    svc = service(*args, wait="health", extra_env=extra)
    wait_ready(svc, bearer(token))
    assert svc.post("/schedule", later_job(), headers=bearer(token)).status == 201
    assert_unauthorized(svc.get("/jobs"), token)
    assert_unauthorized(svc.get("/jobs", headers=bearer(second)), token)
    assert_unauthorized(svc.get("/jobs", headers=bearer(token + second)), token)
    # The secret itself is not on the command line.
    with open(f"/proc/{svc.pid}/cmdline", "rb") as f:
        assert token.encode() not in f.read()


def test_a_long_token_from_a_file_is_used_whole(service, tmp_path):
    """A 2 KiB token (a JWT-sized secret) read from a file must be the token
    that is checked, not a silently truncated prefix of it."""
    token = "long-" + uuid.uuid4().hex * 64  # 2053 characters
    path = tmp_path / "token"
    path.write_text(token + "\n")
    svc = service("--api-token-file", str(path), wait="health")
    full = svc.get("/jobs", headers=bearer(token)).status
    prefix = svc.get("/jobs", headers=bearer(token[:1023])).status
    assert (full, prefix) == (200, 401), (
        f"the full {len(token)}-character token from the file gets {full}, "
        f"its first 1023 characters get {prefix}")


def test_a_16_character_token_is_enough(service):
    token = uuid.uuid4().hex[:16]
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": token})
    wait_ready(svc, bearer(token))
    assert_unauthorized(svc.get("/jobs"))


@pytest.mark.parametrize("case", ["short env token", "short file token",
                                  "empty file", "missing file", "both"])
def test_bad_token_settings_stop_the_start(tmp_path, case):
    secret = "s3cr3t-" + uuid.uuid4().hex[:8]   # 15 characters
    good = new_token()
    f = tmp_path / "token"
    base = ["--db", str(tmp_path / "db"), "--listen", f"127.0.0.1:{free_port()}",
            "--amqp-url", f"amqp://guest:guest@127.0.0.1:{free_port()}/"]
    if case == "short env token":
        r = run_binary(*base, extra_env={"RMQS_API_TOKEN": secret})
        want = "16"
    elif case == "short file token":
        f.write_text(secret + "\n")
        r = run_binary(*base, "--api-token-file", str(f))
        want = "16"
    elif case == "empty file":
        f.write_text("\n" + good + "\n")   # the first line is the token
        r = run_binary(*base, "--api-token-file", str(f))
        want = "16"
    elif case == "missing file":
        r = run_binary(*base, "--api-token-file", str(tmp_path / "nope"))
        want = str(tmp_path / "nope")
    else:
        f.write_text(good + "\n")
        r = run_binary(*base, "--api-token-file", str(f),
                       extra_env={"RMQS_API_TOKEN": good})
        want = "RMQS_API_TOKEN"
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert want in r.stderr, r.stderr
    out = r.stdout + r.stderr
    assert secret not in out and good not in out, out
    assert_no_sanitizer(out)


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_the_token_is_never_a_command_line_argument(tmp_path, form):
    token = new_token()
    args = (["--api-token", token] if form == "separate"
            else [f"--api-token={token}"])
    r = run_binary("--db", str(tmp_path / "db"), "--listen",
                   f"127.0.0.1:{free_port()}", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "unknown option" in r.stderr and "--api-token" in r.stderr, r.stderr
    assert token not in r.stdout + r.stderr, "the rejected token was echoed"
    assert not os.path.exists(tmp_path / "db"), "it went on starting"
    # --help offers no such flag either: the token is environment or file only.
    h = run_binary("--help")
    assert h.returncode == 0
    flags = {w for line in h.stdout.splitlines() for w in line.split()
             if w.startswith("--")}
    assert "--api-token" not in flags and "--api-token-file" in flags, flags
    assert "RMQS_API_TOKEN" in h.stdout


def test_secrets_never_appear_in_the_log_or_readyz(service):
    token = new_token()
    # A wrong password with characters that must be URL-encoded, so any
    # spelling of it (encoded or decoded) can be looked for.
    pw_tag = uuid.uuid4().hex
    password_decoded = f"pw@/:{pw_tag}"
    password_url = f"pw%40%2F%3A{pw_tag}"
    url = f"amqp://guest:{password_url}@127.0.0.1:{env('RMQS_TEST_AMQP_PORT')}/"
    svc = service(amqp_url=url, log_level="debug", wait="health",
                  settings_in_env=True, extra_env={"RMQS_API_TOKEN": token})
    wait_until(lambda: "broker unreachable" in svc.log(), 20,
               "the refused login to be logged")
    assert "ACCESS_REFUSED" in svc.log() or "login" in svc.log(), svc.log()

    bodies = []
    for value in _bad_credentials(token).values():
        r = svc.get("/jobs", headers={"Authorization": value})
        assert r.status == 401
        bodies.append(r.raw)
        r = svc.post("/schedule", later_job(), headers={"Authorization": value})
        assert r.status == 401
        bodies.append(r.raw)
    h = bearer(token)
    job = svc.schedule(later_job(), headers=h)
    bodies.append(svc.get(f"/jobs/{job['id']}", headers=h).raw)
    bodies.append(svc.post("/schedule", {"nonsense": True}, headers=h).raw)
    st, _, ready = svc.get("/readyz", headers=h)
    assert st == 503 and ready["broker"] == "down", ready
    bodies.append(json.dumps(ready).encode())
    bodies.append(svc.get("/readyz").raw)
    svc.terminate()  # every line is written

    log = svc.log()
    assert "level=debug" in log, "debug logging was not on"
    secrets = {"token": token, "token hex": token[4:-4],
               "password (URL form)": password_url,
               "password (decoded)": password_decoded, "password tag": pw_tag,
               "token in base64": base64.b64encode(f"user:{token}".encode()).decode()}
    for what, s in secrets.items():
        assert s not in log, f"the {what} is in the service log"
        for b in bodies:
            assert s.encode() not in b, f"the {what} is in an answer: {b[:300]!r}"


# =============================================================================
# Exchange allow-list
# =============================================================================

ALLOWED = ["billing", "amq.direct", "amq.topic", "amq.x.y"]
FORBIDDEN = ["orders", "", "billing2", "bill", "xbilling", "amq", "amqx.direct",
             "AMQ.direct", "Billing", "billing*", "am"]


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_allow_list_refuses_other_exchanges_and_stores_nothing(service, how):
    if how == "flag":
        svc = service("--allow-exchanges", "billing,amq.*")
    else:
        svc = service(extra_env={"RMQS_ALLOW_EXCHANGES": "billing,amq.*"})
    # the server answers a moment before its "listening" line is written
    wait_until(lambda: "allow_exchanges=list" in svc.log(), 10,
               "the log to say the allow list is on")
    for name in FORBIDDEN:
        resp = svc.post("/schedule", later_job(exchange=name),
                        headers={"Idempotency-Key": f"k-{uuid.uuid4().hex}"})
        err = assert_error(resp, 403, "forbidden", "exchange")
        assert f"'{name}'" in err["message"], err
    assert stored_jobs(svc) == [], "a forbidden job was stored"

    allowed = [svc.schedule(later_job(exchange=name)) for name in ALLOWED]
    assert sorted(j["id"] for j in stored_jobs(svc)) == sorted(j["id"] for j in allowed)

    # A batch with one forbidden item: 403 naming it, nothing of it stored.
    for bad_at in (0, 2):
        items = [later_job(exchange="billing"), later_job(exchange="amq.direct"),
                 later_job(exchange="billing")]
        items[bad_at] = later_job(exchange="orders")
        err = assert_error(svc.post("/schedule/batch", items), 403, "forbidden")
        assert err.get("field") in (f"jobs[{bad_at}].exchange",
                                    f"[{bad_at}].exchange"), err
        assert "orders" in err["message"], err
    assert len(stored_jobs(svc)) == len(ALLOWED), "part of a forbidden batch was stored"
    st, _, body = svc.post("/schedule/batch", [later_job(exchange="billing"),
                                               later_job(exchange="amq.topic")])
    assert st == 201 and len(body["jobs"]) == 2, body


def test_allowed_jobs_are_published(service, amqp):
    """A job on an exchange allowed by prefix really goes out (amq.direct,
    bound to the consumer's queue)."""
    conn = pika.BlockingConnection(amqp_params(env("RMQS_TEST_AMQP_URL")))
    try:
        conn.channel().queue_bind(amqp.queue, "amq.direct",
                                  routing_key=amqp.routing_key)
    finally:
        conn.close()
    svc = service("--allow-exchanges", "billing,amq.*")
    job = svc.schedule({"exchange": "amq.direct", "routing_key": amqp.routing_key,
                        "body": "allowed", "delay_ms": 0})
    got = amqp.wait_for_jobs([job["id"]], timeout=20)
    assert got[job["id"]][0].body == b"allowed"
    assert got[job["id"]][0].exchange == "amq.direct"
    svc.wait_status(job["id"], "sent")


def test_without_an_allow_list_any_exchange_is_accepted(service):
    svc = service()
    wait_until(lambda: "allow_exchanges=any" in svc.log(), 10, "the log line 'listening' with allow_exchanges=any")
    for name in FORBIDDEN + ALLOWED + [f"anything-{uuid.uuid4().hex}"]:
        svc.schedule(later_job(exchange=name))


# =============================================================================
# HTTPS
# =============================================================================

def test_https_schedule_and_read_with_a_trusted_ca(service, pki, amqp):
    token = new_token()
    svc = start_https_service(service, pki, extra_env={"RMQS_API_TOKEN": token})
    wait_until(lambda: "tls=on" in svc.log(), 10, "the log line 'listening' with tls=on")
    ctx = trusting(pki.ca)
    h = bearer(token)
    st, _, ready = https_request(svc.port, "GET", "/readyz", headers=h, context=ctx)
    deadline = time.monotonic() + 20
    while st != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
        st, _, ready = https_request(svc.port, "GET", "/readyz", headers=h,
                                     context=ctx)
    assert st == 200, ready

    # The token is still required over HTTPS.
    st, hdrs, body = https_request(svc.port, "POST", "/schedule", later_job(),
                                   context=ctx)
    assert st == 401 and body["error"]["code"] == "unauthorized", body

    st, hdrs, job = https_request(
        svc.port, "POST", "/schedule",
        {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
         "body": "over https", "delay_ms": 0}, headers=h, context=ctx)
    assert st == 201, job
    assert hdrs.get("Location") == f"/jobs/{job['id']}"
    amqp.wait_for_jobs([job["id"]], timeout=20)

    def sent():
        s, _, j = https_request(svc.port, "GET", f"/jobs/{job['id']}", headers=h,
                                context=ctx)
        assert s == 200, j
        return j if j["status"] == "sent" else None
    read = wait_until(sent, 20, "the job to be sent (read over HTTPS)")
    assert read["id"] == job["id"] and read["body"] == "over https"


def test_https_refuses_plain_http_and_untrusted_clients(service, pki):
    svc = start_https_service(service, pki)
    # Plain HTTP on the TLS port gets no HTTP answer at all.
    for method, path, body in (("GET", "/healthz", None),
                               ("POST", "/schedule", later_job())):
        conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=5)
        try:
            with pytest.raises((OSError, http.client.HTTPException)):
                conn.request(method, path,
                             body=json.dumps(body) if body else None,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
        finally:
            conn.close()

    # A client that trusts only the system store does not trust our CA.
    with pytest.raises(urllib.error.URLError) as e:
        https_request(svc.port, "GET", "/healthz", context=ssl.create_default_context())
    assert isinstance(e.value.reason, ssl.SSLCertVerificationError), e.value

    # A client trusting a different CA neither.
    other = tempfile.mkdtemp(prefix="rmqs-otherca-")
    try:
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "k.pem",
                "-out", "ca.pem", "-days", "1", "-subj", "/CN=another CA",
                cwd=other)
        with pytest.raises(urllib.error.URLError) as e:
            https_request(svc.port, "GET", "/healthz",
                          context=trusting(os.path.join(other, "ca.pem")))
        assert isinstance(e.value.reason, ssl.SSLCertVerificationError), e.value
    finally:
        shutil.rmtree(other, ignore_errors=True)

    # Nothing was stored by any of that; a trusted client still works.
    st, _, body = https_request(svc.port, "GET", "/jobs", context=trusting(pki.ca))
    assert st == 200 and body["jobs"] == [], body


@pytest.mark.skipif(not getattr(ssl, "HAS_TLSv1_1", False),
                    reason="this Python's OpenSSL cannot speak TLS 1.1")
@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_https_refuses_tls_older_than_1_2(service, pki):
    """TLS 1.0/1.1 are deprecated (RFC 8996); the AMQP side of the service
    already demands TLS 1.2, the HTTPS side must not offer less."""
    svc = start_https_service(service, pki)
    for version in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(pki.ca)
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        ctx.minimum_version = version
        ctx.maximum_version = version
        try:
            st, _, _ = https_request(svc.port, "GET", "/healthz", context=ctx)
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            continue  # refused: good
        raise AssertionError(f"the HTTPS server accepted {version.name} "
                             f"(GET /healthz -> {st})")
    # TLS 1.2 itself works.
    ctx = trusting(pki.ca)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    assert https_request(svc.port, "GET", "/healthz", context=ctx)[0] == 200


@pytest.mark.parametrize("broken", ["missing key", "garbage key", "key of another cert"])
def test_https_with_a_bad_key_file_stops_the_start(tmp_path, pki, broken):
    key = tmp_path / "server.key"
    if broken == "garbage key":
        key.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n"
                       "-----END PRIVATE KEY-----\n")
    elif broken == "key of another cert":
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-out", str(key), cwd=str(tmp_path))
    port = free_port()
    t0 = time.monotonic()
    r = run_binary("--db", str(tmp_path / "db"), "--listen", f"127.0.0.1:{port}",
                   "--amqp-url", f"amqp://guest:guest@127.0.0.1:{free_port()}/",
                   "--tls-cert-file", pki.server_cert, "--tls-key-file", str(key))
    assert r.returncode != 0, (r.returncode, r.stderr)
    assert time.monotonic() - t0 < 15
    out = r.stdout + r.stderr
    errors = [ln for ln in out.splitlines() if "level=error" in ln]
    assert errors, f"no error line: {out}"
    if broken == "missing key":
        assert str(key) in errors[-1], errors
    else:
        assert "TLS" in errors[-1] or "key" in errors[-1], errors
    assert not port_open(port)
    assert_no_sanitizer(out)


def test_https_needs_both_cert_and_key(tmp_path, pki):
    r = run_binary("--db", str(tmp_path / "db"), "--tls-cert-file", pki.server_cert)
    assert r.returncode == 2 and "tls-key-file" in r.stderr, r.stderr
    r = run_binary("--db", str(tmp_path / "db"), "--tls-key-file", pki.server_key)
    assert r.returncode == 2 and "tls-cert-file" in r.stderr, r.stderr


# =============================================================================
# AMQP over TLS
# =============================================================================

def _assert_delivered_over_tls(svc, consumer, broker, text):
    job = svc.schedule({"exchange": consumer.exchange,
                        "routing_key": consumer.routing_key,
                        "body": text, "delay_ms": 0})
    got = consumer.wait_for_jobs([job["id"]], timeout=20)
    assert got[job["id"]][0].body == text.encode()
    svc.wait_status(job["id"], "sent")
    conns = wait_until(lambda: broker.tls_connections(), 10,
                       "the service's connection on the TLS listener")
    assert all(c["ssl"] is True for c in conns), conns
    assert {c["ssl_protocol"] for c in conns} <= {"tlsv1.2", "tlsv1.3"}, conns
    return conns


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_amqps_with_the_ca_file_delivers_through_tls(service, pki, tls_broker,
                                                     tls_consumers, host):
    """The node's certificate names 127.0.0.1 (SAN IP) and localhost (SAN
    DNS): both spellings of the broker's address must verify."""
    broker = tls_broker(require_client_cert=False)
    consumer = tls_consumers(broker)
    # A standard TLS client (Python's ssl: chain and host name/IP checked)
    # trusting our CA accepts the node under this name.
    with socket.create_connection(("127.0.0.1", broker.tls_port), timeout=5) as raw:
        with trusting(pki.ca).wrap_socket(raw, server_hostname=host) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3"), tls.version()
    svc = service("--amqp-ca-file", pki.ca, amqp_url=broker.tls_url(host),
                  wait="health")
    wait_ready(svc, timeout=15, broker=broker)
    assert "amqps://guest:***@" in svc.log()
    conns = _assert_delivered_over_tls(svc, consumer, broker, f"tls via {host}")
    assert all(not c["peer_cert_subject"] for c in conns), conns


def test_amqps_with_a_client_certificate(service, pki, tls_broker, tls_consumers):
    """The node demands a client certificate (fail_if_no_peer_cert = true):
    with --amqp-cert-file/--amqp-key-file the job goes through and the node
    sees our client certificate; without them the node refuses the service."""
    broker = tls_broker(require_client_cert=True)
    consumer = tls_consumers(broker)
    svc = service("--amqp-ca-file", pki.ca, "--amqp-cert-file", pki.client_cert,
                  "--amqp-key-file", pki.client_key,
                  amqp_url=broker.tls_url("localhost"), wait="health")
    wait_ready(svc, broker=broker)
    conns = _assert_delivered_over_tls(svc, consumer, broker, "with client cert")
    assert any(pki.client_cn in (c["peer_cert_subject"] or "") for c in conns), conns

    without = service("--amqp-ca-file", pki.ca, amqp_url=broker.tls_url("localhost"),
                      wait="health")
    wait_until(lambda: "broker unreachable" in without.log(), 20,
               "the refused TLS handshake to be logged")
    for _ in range(10):  # and it stays down
        assert without.get("/readyz").status == 503
        time.sleep(0.2)


def test_amqps_client_certificate_needs_both_files(tmp_path, pki):
    r = run_binary("--db", str(tmp_path / "db"), "--listen",
                   f"127.0.0.1:{free_port()}", "--amqp-url",
                   f"amqps://guest:guest@localhost:{free_port()}/",
                   "--amqp-cert-file", pki.client_cert)
    assert r.returncode != 0, r.stderr
    assert "amqp" in (r.stdout + r.stderr).lower() and \
        "key" in (r.stdout + r.stderr), r.stdout + r.stderr
    assert_no_sanitizer(r.stdout + r.stderr)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_amqps_without_the_ca_file_does_not_trust_the_broker(service, tls_broker,
                                                             host):
    """No --amqp-ca-file: the system store does not know our CA, so the
    connection is refused by the service itself; /readyz stays 503 and the
    log says why."""
    broker = tls_broker(require_client_cert=False)
    svc = service(amqp_url=broker.tls_url(host), wait="health")
    line = wait_until(
        lambda: next((ln for ln in svc.log().splitlines()
                      if "broker unreachable" in ln), None),
        20, "the failed connection to be logged")
    assert "cert" in line.lower() and "verif" in line.lower(), line
    assert "amqps://guest:***@" in line and "guest:guest" not in line, line
    for _ in range(15):
        st, _, body = svc.get("/readyz")
        assert (st, body["broker"]) == (503, "down"), body
        time.sleep(0.2)


@pytest.mark.parametrize("missing", ["ca", "client cert"])
def test_amqps_unreadable_tls_files_stop_the_start(pki, tmp_path, missing):
    """A CA file or client certificate that cannot be read stops the start
    with exit 2 and names the file: a typo must not leave a service running
    that can never reach its broker."""
    nope = str(tmp_path / "nope.pem")
    args = (["--amqp-ca-file", nope] if missing == "ca" else
            ["--amqp-ca-file", pki.ca, "--amqp-cert-file", nope,
             "--amqp-key-file", pki.client_key])
    r = run_binary("--db", str(tmp_path / "db"), "--listen",
                   f"127.0.0.1:{free_port()}", "--amqp-url",
                   f"amqps://guest:guest@localhost:{free_port()}/", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert nope in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "db"), "it went on starting"
    assert_no_sanitizer(r.stdout + r.stderr)


def _connection_named(broker, name):
    """The TLS-listener connection whose client properties carry this
    connection_name, or None."""
    for c in broker.tls_connections():
        props = {p[0]: p[2] for p in c.get("client_properties") or []
                 if isinstance(p, list) and len(p) == 3}
        if props.get("connection_name") == name:
            return c
    return None


def test_amqps_ingest_to_an_ip_literal_verifies_the_ip(service, pki, tls_broker,
                                                       tls_consumers):
    """--ingest over amqps://127.0.0.1 checks the certificate's IP address,
    as the publisher does: a certificate with IP:127.0.0.1 in its
    subjectAltName is accepted (a delayed message goes in through the ingest
    connection and comes out when due), one that names the IP only in its CN
    is refused by both connections (the ingest used to ask rabbitmq-c for a
    DNS-name check, which refuses the first and, by its CN fallback, accepts
    the second)."""
    noip = tls_broker(ip_in_cert=False)
    broker = tls_broker()
    consumer = tls_consumers(broker)
    ingest = f"rmqs-test-ingest-tls-{uuid.uuid4().hex[:8]}"
    # (the ingest exchange and inbox live on the module's private nodes)

    svc = service("--ingest", f"{ingest}={consumer.exchange}",
                  "--amqp-ca-file", pki.ca,
                  amqp_url=broker.tls_url("127.0.0.1"), wait="health")
    wait_ready(svc, timeout=20)
    st, _, ready = svc.get("/readyz")
    assert (st, ready.get("broker"), ready.get("ingest")) == (200, "up", "up"), ready
    conn = wait_until(lambda: _connection_named(broker, "rmq-scheduler ingest"),
                      10, "the ingest connection on the TLS listener")
    assert conn["ssl"] is True and conn["ssl_protocol"] in ("tlsv1.2", "tlsv1.3"), conn
    # A message through the ingest: published on the node's plain listener,
    # consumed over TLS by the service, stored, published when due.
    mid = f"tls-ingest-{uuid.uuid4().hex}"
    pub = pika.BlockingConnection(amqp_params(broker.plain_url))
    try:
        ch = pub.channel()
        ch.confirm_delivery()
        ch.basic_publish(ingest, consumer.routing_key, b"via amqps ingest",
                         pika.BasicProperties(headers={"x-delay": 200},
                                              message_id=mid, delivery_mode=2))
    finally:
        pub.close()
    msgs = consumer.wait_for(1, timeout=20)
    assert [(m.body, m.properties.message_id) for m in msgs] == \
        [(b"via amqps ingest", mid)], msgs

    refused = service("--ingest", f"{ingest}={consumer.exchange}",
                      "--amqp-ca-file", pki.ca,
                      amqp_url=noip.tls_url("127.0.0.1"), wait="health")
    line = wait_until(
        lambda: next((ln for ln in refused.log().splitlines()
                      if "cannot consume the inboxes" in ln), None),
        20, "the ingest's refused TLS handshake to be logged")
    assert "cert" in line.lower() and "verif" in line.lower(), line
    assert "amqps://guest:***@127.0.0.1:" in line and "guest:guest" not in line, line
    wait_until(lambda: "broker unreachable" in refused.log(), 20,
               "the publisher's refused TLS handshake to be logged")
    for _ in range(10):  # and both stay down
        st, _, body = refused.get("/readyz")
        assert (st, body["broker"], body["ingest"]) == (503, "down", "down"), body
        time.sleep(0.2)
    assert noip.tls_connections() == [], "a connection got through"
