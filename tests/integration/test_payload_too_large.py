"""Every client receives the 413: a body over --max-body-bytes is answered
with the documented JSON error (413 payload_too_large), not a reset or a
broken pipe, by ordinary clients that write their whole body before they
read the answer.

The matrix: real clients {Node http, Python urllib, curl, Go net/http} x
bodies {1.1 x the limit, 2 MiB, 20 MiB} x targets {POST /schedule, POST
/schedule/batch, a GET carrying a body}, ATTEMPTS (100) attempts each, one
fresh connection per attempt. Node, Python and Go run the small programs in
clients/ (one process loops over the attempts and prints one JSON line per
attempt); curl is one process with ATTEMPTS URLs. curl by default sends
"Expect: 100-continue" for bodies over 1 MiB, so its 2 MiB and 20 MiB rows
are the 100-continue case (answered before the body is sent); the row
"curl, no Expect" sends every body. Go runs where `go` is installed and is
skipped with the reason where it is not.

The service runs with --max-body-bytes 65536 (LIMIT) so that the 1.1 x row
is small; the 2 MiB and 20 MiB rows are the sizes of the issue. While the
20 MiB rows run, the service's resident memory is sampled: it must stay
within RSS_GROWTH_MAX of where it was, since refused bytes are dropped,
never buffered. No job may be stored (bad input changes nothing).

The table of successes per client and size is printed (pytest -s, or
ctest's output) and written to payload-too-large.txt next to the binary
(build-test/).

The other tests bound what the service reads of a refused body: a client
that sends "Expect: 100-continue" gets the 413 without sending the body, a
client that trickles a refused body is cut off after the connection
timeout, and (test_hostile_input.py) an announced body far past the discard
bound gets the 413 at once and an endless chunked body is cut off.
"""

import contextlib
import email.message
import json
import os
import select
import shutil
import socket
import subprocess
import threading
import time

import pytest

import helpers
import pylib.http
from helpers import Response, env, go_build, rss_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = os.path.join(HERE, "clients")
MiB = 1024 * 1024
LIMIT = 64 * 1024
ATTEMPTS = 100
SIZES = {"1.1x limit": int(LIMIT * 1.1), "2 MiB": 2 * MiB, "20 MiB": 20 * MiB}
TARGETS = {"POST /schedule": ("POST", "/schedule"),
           "POST /schedule/batch": ("POST", "/schedule/batch"),
           "GET /jobs with a body": ("GET", "/jobs")}
RSS_GROWTH_MAX = 16 * MiB  # one buffered 20 MiB body would be past it
CLIENT_TIMEOUT_S = 300     # one client process, ATTEMPTS attempts
CURL_MARK = "\n@@rmqs-outcome "


# --- the clients ----------------------------------------------------------------

def _node():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node http client not run")
    return [node, os.path.join(CLIENTS, "post_body.mjs")]


def _python():
    return ["/usr/bin/python3", os.path.join(CLIENTS, "post_body.py")]


def _go():
    if shutil.which("go") is None:
        pytest.skip("go is not installed (apt-get install golang-go): "
                    "the Go net/http client not run")
    return [go_build(os.path.join(CLIENTS, "post_body.go"))]


def _client_env():
    e = {k: v for k, v in os.environ.items()
         if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    e["NO_PROXY"] = e["no_proxy"] = "127.0.0.1,localhost"
    return e


def run_program(argv, port, method, path, body_file, attempts=ATTEMPTS):
    """Outcomes of one of the clients/ programs: one dict per attempt."""
    r = subprocess.run(argv + [str(port), method, path, body_file, str(attempts)],
                       capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                       env=_client_env(), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{argv} exited {r.returncode}:\n{r.stderr[-2000:]}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def run_curl(port, method, path, body_file, attempts=ATTEMPTS, expect=True):
    """curl with ATTEMPTS URLs in one process, its defaults otherwise;
    expect=False: without "Expect: 100-continue", so it sends every body."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    url = f"http://127.0.0.1:{port}{path}"
    r = subprocess.run(
        [curl, "-sS", "--noproxy", "*", "--max-time", "30", "-X", method,
         "-H", "Content-Type: application/json", "--data-binary", "@" + body_file]
        + ([] if expect else ["-H", "Expect:"])
        + ["-w", CURL_MARK + "%{http_code} %{exitcode} %header{www-authenticate}\\t%{content_type}\\n"]
        + [url] * attempts,
        capture_output=True, timeout=CLIENT_TIMEOUT_S, env=_client_env(),
        stdin=subprocess.DEVNULL)
    # the body of attempt i, then CURL_MARK and its outcome line
    parts = r.stdout.decode("utf-8", "replace").split(CURL_MARK)
    outcomes = []
    for i in range(len(parts) - 1):
        body = parts[i] if i == 0 else parts[i].partition("\n")[2]
        code, exitcode, rest = (parts[i + 1].partition("\n")[0].split(" ", 2) + [""])[:3]
        auth, _, ctype = rest.partition("\t")
        if exitcode != "0":
            outcomes.append({"attempt": i, "error": f"curl exit {exitcode}"})
        else:
            outcomes.append({"attempt": i, "status": int(code),
                             "content_type": ctype or None,
                             "www_authenticate": auth or None, "body": body})
    return outcomes


CLIENT_RUNNERS = {
    "Node http": lambda *a, **kw: run_program(_node(), *a, **kw),
    "Python urllib": lambda *a, **kw: run_program(_python(), *a, **kw),
    "curl": run_curl,
    "curl, no Expect": lambda *a, **kw: run_curl(*a, expect=False, **kw),
    "Go net/http": lambda *a, **kw: run_program(_go(), *a, **kw),
}


# --- judging an outcome --------------------------------------------------------------

def problem(outcome, method, path, status=413, code="payload_too_large"):
    """None if the attempt read the documented error (413 by default), else
    what it got."""
    if "error" in outcome:
        return outcome["error"]
    if outcome["status"] != status:
        return f"status {outcome['status']}: {outcome.get('body', '')[:200]!r}"
    headers = email.message.Message()
    if outcome.get("content_type"):
        headers["Content-Type"] = outcome["content_type"]
    if outcome.get("www_authenticate"):
        headers["WWW-Authenticate"] = outcome["www_authenticate"]
    try:
        resp = Response(status, headers, outcome["body"].encode())
        helpers.assert_error(resp, status, code)
        if pylib.http.RESPONSE_CHECK is not None:  # api/openapi.yaml
            pylib.http.RESPONSE_CHECK(method, path, resp)
    except AssertionError as e:
        return f"not the documented {status}: {e}"
    return None


# --- the service, the bodies, the table ---------------------------------------------

class Matrix:
    def __init__(self, svc, files):
        self.svc = svc
        self.files = files       # size name -> body file per target
        self.rows = {}           # client -> {size: (ok, attempts)}
        self.rss = {}            # client -> (before, peak) during the 20 MiB rows

    def table(self):
        lines = [f"413 matrix: --max-body-bytes {LIMIT}, {ATTEMPTS} attempts per "
                 f"client, size and target; received the JSON 413 / attempts, "
                 f"summed over the {len(TARGETS)} targets",
                 f"{'client':<17}" + "".join(f"{s:>14}" for s in SIZES)
                 + f"{'service RSS during 20 MiB':>30}"]
        for client, row in self.rows.items():
            cells = "".join(f"{'%d/%d' % row[s]:>14}" if s in row else f"{'-':>14}"
                            for s in SIZES)
            before, peak = self.rss.get(client, (0, 0))
            rss = f"{before / MiB:.1f} -> {peak / MiB:.1f} MiB" if peak else "-"
            lines.append(f"{client:<17}{cells}{rss:>30}")
        return "\n".join(lines)


def job_body(size, batch):
    """A valid job (batch: a batch of one) padded to exactly size bytes: one
    stored by mistake would show in GET /jobs."""
    head = b'{"exchange":"ex","routing_key":"rk","delay_ms":3600000,"body":"'
    tail = b'"}'
    if batch:
        head, tail = b"[" + head, tail + b"]"
    return head + b"p" * (size - len(head) - len(tail)) + tail


@pytest.fixture(scope="module")
def matrix(module_service, tmp_path_factory):
    # ASan keeps freed memory in a quarantine (256 MiB by default), so the
    # RSS of a sanitized service grows with every connection served; a small
    # one lets RSS show what the service really holds.
    asan = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "quarantine_size_mb=4"]))
    svc = module_service("--max-body-bytes", str(LIMIT), extra_env={"ASAN_OPTIONS": asan})
    folder = tmp_path_factory.mktemp("bodies")
    files = {}
    for name, size in SIZES.items():
        files[name] = {}
        for target, (_, path) in TARGETS.items():
            p = folder / f"{size}-{path.strip('/').replace('/', '-')}.json"
            p.write_bytes(job_body(size, path.endswith("/batch")))
            files[name][target] = str(p)
    m = Matrix(svc, files)
    yield m
    if m.rows:
        out = os.path.join(os.path.dirname(env("RMQS_BIN")), "payload-too-large.txt")
        with open(out, "w") as f:
            f.write(m.table() + "\n")


class RssSampler:
    """Peak resident memory of pid, sampled every 20 ms while running."""

    def __init__(self, pid):
        self.pid = pid
        self.before = rss_bytes(pid)
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


@pytest.mark.parametrize("client", list(CLIENT_RUNNERS))
def test_every_client_receives_the_413(matrix, client, report):
    svc = matrix.svc
    runner = CLIENT_RUNNERS[client]
    row, failures = {}, []
    t0 = time.monotonic()
    for size_name in SIZES:
        ok = total = 0
        sampled = size_name == "20 MiB"
        with RssSampler(svc.pid) if sampled else contextlib.nullcontext() as sampler:
            for target, (method, path) in TARGETS.items():
                outcomes = runner(svc.port, method, path, matrix.files[size_name][target])
                assert len(outcomes) == ATTEMPTS, \
                    f"{client} reported {len(outcomes)} of {ATTEMPTS} attempts"
                for o in outcomes:
                    p = problem(o, method, path)
                    total += 1
                    if p is None:
                        ok += 1
                    elif len(failures) < 10:
                        failures.append(f"{size_name} {target} #{o['attempt']}: {p}")
        row[size_name] = (ok, total)
        if sampled:
            matrix.rss[client] = (sampler.before, sampler.peak)
    matrix.rows[client] = row
    lines = matrix.table().splitlines()
    for line in (lines[:2] if len(matrix.rows) == 1 else []) + [lines[-1]]:
        report(line)
    report(f"413 matrix: {client} took {time.monotonic() - t0:.1f} s")

    assert all(ok == n for ok, n in row.values()), \
        f"{client}: not every attempt received the JSON 413: {row}; first: {failures}"
    before, peak = matrix.rss[client]
    assert peak - before <= RSS_GROWTH_MAX, \
        f"service RSS grew {(peak - before) / MiB:.1f} MiB during the 20 MiB bodies"
    assert svc.list_all()[0] == [], "a refused body was stored"
    assert svc.get("/healthz").status == 200


# --- what the service reads of a refused body is bounded -----------------------------

def read_answer(sock, limit_s):
    """Bytes received until the peer closes or limit_s passes."""
    buf = b""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    return buf


def test_expect_100_continue_gets_the_413_without_sending_the_body(matrix):
    """Content-Length over the limit with "Expect: 100-continue": the 413
    comes at once, no "100 Continue" first, so the client never sends the
    body; the connection is closed after it."""
    for target, (method, path) in TARGETS.items():
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {20 * MiB}\r\n"
                "Expect: 100-continue\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", matrix.svc.port), timeout=5) as s:
            t0 = time.monotonic()
            s.sendall(head)
            buf = read_answer(s, 5)
            took = time.monotonic() - t0
        assert buf.startswith(b"HTTP/1.1 413 "), f"{target}: {buf[:300]!r}"
        assert took < 2.0, f"{target}: the 413 and the close took {took:.2f} s"
        status_head, _, body = buf.partition(b"\r\n\r\n")
        assert json.loads(body)["error"]["code"] == "payload_too_large", buf[:300]
    assert matrix.svc.list_all()[0] == []


def test_a_slow_refused_body_is_cut_off(service):
    """A refused body trickled in (never idle long enough for the idle
    timeout) is not read for ever: the connection is closed within the
    connection timeout of the refusal. Nothing is stored."""
    timeout_s = 2
    svc = service("--max-body-bytes", str(LIMIT), "--http-timeout-s", str(timeout_s))
    head = (f"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {2 * MiB}\r\n\r\n").encode()
    sent, closed_after = 0, None
    with socket.create_connection(("127.0.0.1", svc.port), timeout=5) as s:
        s.sendall(head + b"p" * (LIMIT + 1))  # over the limit at once
        t0 = time.monotonic()
        while closed_after is None and time.monotonic() - t0 < timeout_s + 6:
            try:
                if select.select([s], [], [], 0)[0] and not s.recv(65536):
                    raise ConnectionResetError  # EOF
                s.sendall(b"p" * 1024)
                sent += 1024
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - t0
                break
            time.sleep(0.2)  # 5 KiB/s: the 2 MiB would take 7 minutes
    assert closed_after is not None, \
        f"still reading a refused body trickled for {timeout_s + 6} s ({sent} bytes)"
    assert closed_after <= timeout_s + 2.5, f"cut off after {closed_after:.1f} s"
    assert svc.list_all()[0] == []


# --- the 401 has the same problem, and the same answer --------------------------------

AUTH_ATTEMPTS = 50
AUTH_BODY = 1_000_000  # under the default --max-body-bytes (1 MiB); curl sends
                       # it without Expect (that starts above 1 MiB)


@pytest.mark.parametrize("client", ["Node http", "Python urllib", "curl", "Go net/http"])
def test_every_client_receives_the_401_when_it_sends_a_body_without_the_token(
        service, tmp_path, client):
    """A request without the token that carries a body (under the body limit)
    is answered 401 once its body has been read, so a client that writes the
    whole body before reading gets the JSON 401, not a reset. Nothing is
    stored."""
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": "secret-401-0123456789"})
    body = tmp_path / "job.json"
    body.write_bytes(job_body(AUTH_BODY, False))
    outcomes = CLIENT_RUNNERS[client](svc.port, "POST", "/schedule", str(body),
                                      attempts=AUTH_ATTEMPTS)
    assert len(outcomes) == AUTH_ATTEMPTS
    bad = [(o["attempt"], p) for o in outcomes
           if (p := problem(o, "POST", "/schedule", 401, "unauthorized")) is not None]
    assert not bad, f"{client}: {len(bad)} of {AUTH_ATTEMPTS} did not read the 401: {bad[:5]}"
    listed = svc.get("/jobs", headers={"Authorization": "Bearer secret-401-0123456789"})
    assert listed.status == 200 and listed.body["jobs"] == [], listed
