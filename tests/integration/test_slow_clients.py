"""Slow and idle clients must not take the service away from the others.

The service runs with small limits (--http-max-conns 64, --http-timeout-s
2) so that the attacks stay small: a connection that sends nothing, or
stops half-way through its headers or body, is closed by the service after
the timeout; and a slowloris attack (200 connections from another host,
127.0.0.2, each sending its request headers one byte every half second,
which an idle timeout alone never fires on) must not stop a fresh client on
127.0.0.1 from scheduling a job.

The deadlines (issue 21): with --http-header-timeout-s 2 and
--http-body-timeout-s 3 (and an idle timeout of 5 s that a byte every 0.3 s
never trips), a client trickling its headers is cut 2 s after it
connected, or 2 s after the previous answer on a kept-alive connection; one
trickling its body is cut 3 s after its headers; one that is slow but
within both deadlines is answered. And the issue's attack, scaled down:
four addresses (127.0.0.2-5) each trying to hold 30 of the 100 slots with
headers a byte every 0.1 s, and taking a slot again within 0.1 s of its
cut (the former per-address default, a quarter, let them take all 100:
/healthz then timed out on most probes) while 127.0.0.1 asks /healthz and
POST /schedule every quarter second and must be answered within 1 s every
time.

Everything is on loopback, bounded in connections and time (the attack
stops after ATTACK_S seconds), and closes its own sockets.
"""

import errno
import http.client
import re
import select
import socket
import threading
import time

import pytest

from helpers import http_request, http_request_text, wait_until

MAX_CONNS = 64
TIMEOUT_S = 2
MARGIN_S = 2.5            # scheduling slack on a loaded 2-core machine
ATTACK_CONNS = 200
ATTACK_BYTE_EVERY_S = 0.5  # well under TIMEOUT_S: never idle long enough
ATTACK_S = 12.0
ATTACK_MAX_OPENED = 5000   # reconnects included
ATTACKER_IP = "127.0.0.2"  # another host on loopback
CLIENT_BOUND_S = 4 * TIMEOUT_S

JOB = {"exchange": "ex", "routing_key": "rk", "body": "from a patient client",
       "delay_ms": 3_600_000}


@pytest.fixture
def small(service):
    return service("--http-max-conns", str(MAX_CONNS), "--http-timeout-s", str(TIMEOUT_S))


def seconds_until_closed(sock, limit):
    """Seconds until the peer closes sock (EOF or reset), or None if it is
    still open after limit seconds. Discards anything received."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - t0 < limit:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - t0
        if not data:
            return time.monotonic() - t0
    return None


# --- idle connections -----------------------------------------------------------

PARTIAL = {
    "nothing": b"",
    "half a request line": b"POST /sched",
    "headers without the blank line": b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    "half a body": b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                   b'{"exchange":"ex","routing_key":"rk",',
    "half a chunked body": b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/json\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"exchange\":\"ex\"",
}


@pytest.mark.parametrize("sent", list(PARTIAL.values()), ids=list(PARTIAL))
def test_idle_connection_is_closed_after_the_timeout(small, sent):
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as s:
        if sent:
            s.sendall(sent)
        took = seconds_until_closed(s, TIMEOUT_S + MARGIN_S + 3)
    assert took is not None, \
        f"still open {TIMEOUT_S + MARGIN_S + 3} s after going silent (timeout {TIMEOUT_S} s)"
    assert TIMEOUT_S - 0.5 <= took <= TIMEOUT_S + MARGIN_S, \
        f"closed after {took:.2f} s, timeout is {TIMEOUT_S} s"
    assert small.list_all()[0] == []


def test_idle_connections_at_the_limit_are_reaped(small, report):
    """MAX_CONNS connections from another host that send nothing fill the
    service; a client waiting behind them gets in within the timeout, and
    every one of them is closed by then (refused at once, or reaped)."""
    idle = []
    try:
        for _ in range(MAX_CONNS):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            idle.append(s)
            s.bind((ATTACKER_IP, 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", small.port))
        t_idle = time.monotonic()
        time.sleep(0.3)  # let the service accept them all
        t0 = time.monotonic()
        resp = http_request(small.port, "POST", "/schedule", JOB,
                            timeout=TIMEOUT_S + MARGIN_S + 2)
        took = time.monotonic() - t0
        still_open = [s for s in idle if seconds_until_closed(
            s, max(0.1, TIMEOUT_S + MARGIN_S - (time.monotonic() - t_idle))) is None]
    finally:
        for s in idle:
            s.close()
    report(f"slow clients: behind {MAX_CONNS} idle connections a client waited {took:.2f} s")
    assert resp.status == 201, resp
    assert took <= TIMEOUT_S + MARGIN_S, f"waited {took:.2f} s"
    assert not still_open, \
        f"{len(still_open)} idle connections still open {TIMEOUT_S + MARGIN_S} s on"


# --- slowloris --------------------------------------------------------------------

class Slowloris:
    """conns connections (ATTACK_CONNS) from the addresses ips (slot i from
    ips[i % len(ips)]; ATTACKER_IP), each sending request headers one byte
    every tick seconds (ATTACK_BYTE_EVERY_S) and reconnecting, at the next
    tick, when the service closes it, on one thread, until stop() or
    duration (ATTACK_S)."""

    HEAD = (b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nX-Padding: " + b"p" * 4000)

    def __init__(self, port, ips=(ATTACKER_IP,), conns=ATTACK_CONNS,
                 duration=ATTACK_S, tick=ATTACK_BYTE_EVERY_S,
                 max_opened=ATTACK_MAX_OPENED):
        self.port = port
        self.tick = tick
        self.max_opened = max_opened
        self.ips = list(ips)
        self.conns = conns
        self.duration = duration
        self.slots = [None] * conns  # [socket, bytes sent, connected]
        self.opened = 0
        self.closed_by_service = 0
        self.connect_failures = 0
        self.max_established = 0
        self.established = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="slowloris")

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        for slot in self.slots:
            if slot:
                slot[0].close()
        self.slots = [None] * self.conns

    def _open(self, i):
        if self.opened >= self.max_opened:
            return
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((self.ips[i % len(self.ips)], 0))
        s.setblocking(False)
        rc = s.connect_ex(("127.0.0.1", self.port))
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            self.connect_failures += 1
            return
        self.opened += 1
        self.slots[i] = [s, 0, rc == 0]

    def _drop(self, i):
        self.slots[i][0].close()
        self.slots[i] = None

    def _tick(self):
        established = 0
        for i, slot in enumerate(self.slots):
            if slot is None:
                self._open(i)
                continue
            s = slot[0]
            if not slot[2]:  # connect still in progress?
                _, writable, _ = select.select([], [s], [], 0)
                if not writable:
                    continue
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    self.connect_failures += 1
                    self._drop(i)
                    continue
                slot[2] = True
            readable, _, _ = select.select([s], [], [], 0)
            if readable:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:  # the service closed it: come back
                    self.closed_by_service += 1
                    self._drop(i)
                    continue
            try:
                s.send(self.HEAD[slot[1] % len(self.HEAD):][:1])
                slot[1] += 1
            except BlockingIOError:
                pass
            except OSError:
                self.closed_by_service += 1
                self._drop(i)
                continue
            established += 1
        self.established = established
        self.max_established = max(self.max_established, established)

    def _run(self):
        t0 = time.monotonic()
        while not self._stop.is_set() and time.monotonic() - t0 < self.duration:
            self._tick()
            self._stop.wait(self.tick)

    def __str__(self):
        return (f"{self.opened} opened, {self.closed_by_service} closed by the service, "
                f"{self.connect_failures} failed to connect, at most "
                f"{self.max_established} established at once")


def test_slowloris_does_not_lock_out_a_client(small, report):
    attack = Slowloris(small.port).start()
    attempts, status, took = [], None, None
    try:
        # the attack is in place once it holds at least every slot the
        # service has (or after two ticks, whatever the service does)
        deadline = time.monotonic() + 5
        while attack.max_established < MAX_CONNS and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2 * ATTACK_BYTE_EVERY_S)
        t0 = time.monotonic()
        while time.monotonic() - t0 < CLIENT_BOUND_S:
            left = CLIENT_BOUND_S - (time.monotonic() - t0)
            try:
                resp = http_request(small.port, "POST", "/schedule", JOB,
                                    timeout=max(0.5, min(TIMEOUT_S, left)))
                attempts.append(resp.status)
                if resp.status == 201:
                    status, took = 201, time.monotonic() - t0
                    break
            except (OSError, http.client.HTTPException) as e:
                attempts.append(type(e).__name__)
                time.sleep(0.1)
        during = str(attack)
    finally:
        attack.stop()
    report(f"slow clients: slowloris ({during}); client: "
           f"{'201 after %.2f s' % took if took is not None else 'no 201'} "
           f"in {len(attempts)} attempts")
    assert status == 201, (
        f"a fresh client got no 201 within {CLIENT_BOUND_S} s while {ATTACK_CONNS} "
        f"connections from {ATTACKER_IP} sent their headers one byte every "
        f"{ATTACK_BYTE_EVERY_S} s (attack: {during}); attempts: {attempts[:10]}")

    # afterwards: still serving, and the job is there once
    assert small.get("/healthz").status == 200
    assert len(small.list_all()[0]) == 1


# --- deadlines for headers and body (issue 21) -------------------------------------

HEADER_S = 2
BODY_S = 3
IDLE_S = 5                # never reached by a byte every TRICKLE_EVERY_S
TRICKLE_EVERY_S = 0.3
CUT_MARGIN_S = 1.5        # the sweep (0.2 s), then a loaded 2-core machine
EARLY_S = 0.3             # cut no earlier than this before the deadline
HEAD_ONLY = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * 4000)
BODY_LEN = 1000
POST_HEAD = (b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % BODY_LEN)


@pytest.fixture
def deadlines(service):
    return service("--http-timeout-s", str(IDLE_S),
                   "--http-header-timeout-s", str(HEADER_S),
                   "--http-body-timeout-s", str(BODY_S))


def cuts(svc):
    """rmqs_http_connections_cut_total by reason."""
    text = http_request_text(svc.port, "/metrics").text
    return {m.group(1): int(float(m.group(2))) for m in re.finditer(
        r'^rmqs_http_connections_cut_total\{reason="(\w+)"\} (\S+)$', text, re.M)}


def trickle_until_closed(sock, data, limit):
    """Send data one byte every TRICKLE_EVERY_S (from the start again when
    it runs out) until the peer closes sock; the seconds that took, or None
    if still open after limit. Anything received fails: a cut has no
    answer."""
    t0 = time.monotonic()
    sock.settimeout(TRICKLE_EVERY_S)
    i = 0
    while time.monotonic() - t0 < limit:
        try:
            sock.send(data[i % len(data):][:1])
            i += 1
            got = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - t0
        assert not got, f"an answer instead of a cut: {got[:200]!r}"
        return time.monotonic() - t0
    return None


def assert_cut_at(took, deadline_s, what):
    assert took is not None, \
        f"{what}: still open {deadline_s + CUT_MARGIN_S + 3} s on (deadline {deadline_s} s)"
    assert deadline_s - EARLY_S <= took <= deadline_s + CUT_MARGIN_S, \
        f"{what}: cut after {took:.2f} s, the deadline is {deadline_s} s"


def assert_counted_once(svc, reason):
    """The service (started for this test) counts one cut, for reason."""
    want = {r: int(r == reason) for r in ("header_timeout", "body_timeout",
                                           "keepalive_timeout")}
    try:
        wait_until(lambda: cuts(svc) == want, 3, f"one cut counted as {reason}")
    except AssertionError:
        assert cuts(svc) == want


def test_trickled_headers_are_cut_at_the_header_deadline(deadlines, report):
    with socket.create_connection(("127.0.0.1", deadlines.port), timeout=5) as s:
        took = trickle_until_closed(s, HEAD_ONLY, HEADER_S + CUT_MARGIN_S + 3)
    report(f"slow clients: headers a byte every {TRICKLE_EVERY_S} s cut after "
           f"{took if took is None else round(took, 2)} s (header deadline {HEADER_S} s, "
           f"idle timeout {IDLE_S} s)")
    assert_cut_at(took, HEADER_S, "headers a byte at a time")
    assert_counted_once(deadlines, "header_timeout")


def test_trickled_body_is_cut_at_the_body_deadline(deadlines, report):
    with socket.create_connection(("127.0.0.1", deadlines.port), timeout=5) as s:
        s.sendall(POST_HEAD)  # headers at once: the body deadline runs from here
        took = trickle_until_closed(s, b'{"exchange":"ex"' + b" " * BODY_LEN,
                                    BODY_S + CUT_MARGIN_S + 3)
    report(f"slow clients: a body a byte every {TRICKLE_EVERY_S} s cut after "
           f"{took if took is None else round(took, 2)} s (body deadline {BODY_S} s)")
    assert_cut_at(took, BODY_S, "a body a byte at a time")
    assert_counted_once(deadlines, "body_timeout")
    assert deadlines.list_all()[0] == []


def test_kept_alive_connection_has_the_header_deadline_from_its_last_answer(deadlines):
    """After an answer, a kept-alive connection's next headers are due
    HEADER_S later, however they trickle (an attacker cannot send one quick
    request and then hold the connection)."""
    with socket.create_connection(("127.0.0.1", deadlines.port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while b'"ok"' not in got:
            chunk = s.recv(4096)
            assert chunk, f"closed before the answer: {got!r}"
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got
        took = trickle_until_closed(s, HEAD_ONLY, HEADER_S + CUT_MARGIN_S + 3)
    assert_cut_at(took, HEADER_S, "the next request's headers a byte at a time")
    assert_counted_once(deadlines, "keepalive_timeout")


def test_a_slow_client_within_both_deadlines_is_answered(deadlines):
    """Headers over 1.5 s and then a body over 1.5 s: 3 s in all, more than
    the header deadline, but each part within its own. The body's deadline
    runs from the headers, not from the connection."""
    job = (b'{"exchange":"ex","routing_key":"rk","body":"slow but in time",'
           b'"delay_ms":3600000}')
    head = (b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(job))
    with socket.create_connection(("127.0.0.1", deadlines.port), timeout=10) as s:
        t0 = time.monotonic()
        for part, spread in ((head, 1.5), (job, 1.5)):
            pieces = [part[i:i + max(1, len(part) // 10)]
                      for i in range(0, len(part), max(1, len(part) // 10))]
            for p in pieces:
                s.sendall(p)
                time.sleep(spread / len(pieces))
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        took = time.monotonic() - t0
    assert got.startswith(b"HTTP/1.1 201"), got[:300]
    assert took > HEADER_S, f"sent in {took:.2f} s: not slower than the header deadline"
    assert len(deadlines.list_all()[0]) == 1
    assert cuts(deadlines) == {"header_timeout": 0, "body_timeout": 0,
                               "keepalive_timeout": 0}


# --- the issue's attack, scaled down ----------------------------------------------

ISSUE_MAX_CONNS = 100         # the per-address default is a tenth: 10
ISSUE_IPS = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
ISSUE_CONNS_PER_IP = 30       # over a quarter of the slots each
ISSUE_ATTACK_S = 10.0         # five header deadlines
ISSUE_TICK_S = 0.1            # a cut slot is taken again within 0.1 s
ISSUE_MAX_OPENED = 20000      # refused ones retry every tick: ~4,300 in 10 s
ISSUE_PROBE_EVERY_S = 0.25
ISSUE_BOUND_S = 1.0


def test_addresses_trickling_headers_leave_room_for_healthz(service, report):
    svc = service("--http-max-conns", str(ISSUE_MAX_CONNS),
                  "--http-timeout-s", str(IDLE_S),
                  "--http-header-timeout-s", str(HEADER_S))
    attack = Slowloris(svc.port, ips=ISSUE_IPS,
                       conns=len(ISSUE_IPS) * ISSUE_CONNS_PER_IP,
                       duration=ISSUE_ATTACK_S + 5, tick=ISSUE_TICK_S,
                       max_opened=ISSUE_MAX_OPENED).start()
    probes = {"/healthz": [], "/schedule": []}  # (seconds, status or error)
    try:
        wait_until(lambda: attack.max_established >= len(ISSUE_IPS) * 10, 5,
                   "the attack holding its addresses' share of the slots")
        t_end = time.monotonic() + ISSUE_ATTACK_S
        while time.monotonic() < t_end:
            for path in probes:
                t0 = time.monotonic()
                try:
                    if path == "/healthz":
                        resp = http_request(svc.port, "GET", path, timeout=ISSUE_BOUND_S)
                    else:
                        resp = http_request(svc.port, "POST", path, JOB,
                                            timeout=ISSUE_BOUND_S)
                    outcome = resp.status
                except (OSError, http.client.HTTPException) as e:
                    outcome = type(e).__name__
                probes[path].append((time.monotonic() - t0, outcome))
            time.sleep(ISSUE_PROBE_EVERY_S)
        during = str(attack)
        gave_up = attack.opened >= ISSUE_MAX_OPENED
    finally:
        attack.stop()
    counted = cuts(svc)
    lat = {p: sorted(t for t, _ in v) for p, v in probes.items()}
    report(f"slow clients: {len(ISSUE_IPS)} addresses x {ISSUE_CONNS_PER_IP} trickling "
           f"connections for {ISSUE_ATTACK_S:.0f} s against {ISSUE_MAX_CONNS} slots "
           f"({during}; cut by the header deadline: {counted['header_timeout']}); "
           + "; ".join(f"{p} from 127.0.0.1: {len(v)} probes, median "
                       f"{v[len(v) // 2] * 1000:.1f} ms, max {v[-1] * 1000:.1f} ms"
                       for p, v in lat.items()))
    expected = {"/healthz": 200, "/schedule": 201}
    for path, results in probes.items():
        bad = [(round(t, 2), o) for t, o in results
               if o != expected[path] or t > ISSUE_BOUND_S]
        assert not bad, (f"{path} from 127.0.0.1 under attack ({during}): "
                         f"{len(bad)} of {len(results)} not answered within "
                         f"{ISSUE_BOUND_S} s: {bad[:10]}")
    assert not gave_up, f"the attack ran out of connections to open ({during})"
    assert counted["header_timeout"] >= len(ISSUE_IPS) * 10, \
        f"the trickling connections were not cut by the header deadline: {counted}"
    assert len(svc.list_all()[0]) == len(probes["/schedule"])
