"""Slow and idle clients must not take the service away from the others.

The service runs with small limits (--http-max-conns 64, --http-timeout-s
2) so that the attacks stay small: a connection that sends nothing, or
stops half-way through its headers or body, is closed by the service after
the timeout; and a slowloris attack (200 connections from another host,
127.0.0.2, each sending its request headers one byte every half second,
which an idle timeout alone never fires on) must not stop a fresh client on
127.0.0.1 from scheduling a job.

Everything is on loopback, bounded in connections and time (the attack
stops after ATTACK_S seconds), and closes its own sockets.
"""

import errno
import http.client
import select
import socket
import threading
import time

import pytest

from helpers import http_request

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
    """ATTACK_CONNS connections from ATTACKER_IP, each sending request
    headers one byte every ATTACK_BYTE_EVERY_S and reconnecting when the
    service closes it, on one thread, until stop() or ATTACK_S."""

    HEAD = (b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nX-Padding: " + b"p" * 4000)

    def __init__(self, port):
        self.port = port
        self.slots = [None] * ATTACK_CONNS  # [socket, bytes sent, connected]
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
        self.slots = [None] * ATTACK_CONNS

    def _open(self, i):
        if self.opened >= ATTACK_MAX_OPENED:
            return
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((ATTACKER_IP, 0))
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
        while not self._stop.is_set() and time.monotonic() - t0 < ATTACK_S:
            self._tick()
            self._stop.wait(ATTACK_BYTE_EVERY_S)

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
