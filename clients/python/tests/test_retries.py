"""Retries against the real service: a client started before the service,
a service killed and restarted mid-way (0 lost, 0 duplicates: the item
keys), 503 and 429 (Retry-After) from a front that stands between them, a
cut answer, no retry of other 4xx."""

import http.client
import http.server
import json
import signal
import threading
import time
from concurrent.futures import wait

import pytest

from rmq_scheduler import (Client, ConflictError, ConnectionError,
                           InvalidArgumentError, Retry, UnavailableError)
from service import Service, free_port

PATIENT = Retry(attempts=40, base=0.02, cap=0.3)


def job(**extra):
    return {"exchange": "orders", "routing_key": "retry", "body": "r",
            "delay_ms": 3600000, **extra}


@pytest.fixture(scope="module")
def svc():
    s = Service().start()
    yield s
    s.destroy()


class Front:
    """An HTTP front for the service: ``plan(method, path, n)`` for request
    n answers (status, headers, body) itself, "reset" to cut the connection
    after the service answered, or None to pass the request through."""

    def __init__(self, target_port, plan):
        self.n = 0
        self.lock = threading.Lock()
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                with front.lock:
                    n = front.n
                    front.n += 1
                p = plan(self.command, self.path, n)
                if p is not None and p != "reset":
                    status, headers, body = p
                    out = json.dumps(body).encode()
                    self.send_response(status)
                    for k, v in {"Content-Type": "application/json",
                                 **headers}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                    return
                up = http.client.HTTPConnection("127.0.0.1", target_port,
                                                timeout=10)
                hdrs = {k: v for k, v in self.headers.items()
                        if k.lower() not in ("host", "connection")}
                up.request(self.command, self.path, body=data, headers=hdrs)
                r = up.getresponse()
                out = r.read()
                up.close()
                if p == "reset":
                    self.close_connection = True
                    return
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("connection", "content-length",
                                         "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_client_started_before_the_service():
    late = Service()
    late.port = free_port()
    try:
        with Client(late.url, retry=PATIENT, max_batch=100) as c:
            futures = [c.schedule_async(job(routing_key="late", body={"i": i}))
                       for i in range(1000)]
            time.sleep(0.4)
            late.start()
            wait(futures, 60)
            jobs = [f.result() for f in futures]
            assert len({j["id"] for j in jobs}) == 1000
            assert c.status()["database"]["state"] == "up"
            assert c.count(routing_key="late") == {"count": 1000,
                                                   "capped": False}
    finally:
        late.destroy()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_service_restarted_mid_way_zero_lost_zero_duplicates(sig):
    s = Service().start()
    tag = f"restart-{sig.name}"
    try:
        with Client(s.url, retry=PATIENT, max_batch=50) as c:
            futures = []
            for wave in range(20):
                for i in range(100):
                    futures.append(c.schedule_async(
                        job(routing_key=tag, body={"wave": wave, "i": i})))
                time.sleep(0.02)
                if wave == 6:
                    s.stop(sig)
                if wave == 12:
                    s.start(wait=False)
            wait(futures, 120)
            failed = [repr(f.exception()) for f in futures if f.exception()]
            assert failed == []
            ids = {f.result()["id"] for f in futures}
            assert len(ids) == 2000
            assert c.retries > 0, "the stop was seen"
            print(f"restart ({sig.name}): {c.retries} tries repeated")
            # Every job a caller got is stored, and nothing else: a batch
            # cut after its commit was retried with the same item keys.
            stored = [j["id"] for j in c.list(routing_key=tag, page_size=1000)]
            assert len(stored) == len(set(stored)) == 2000
            assert set(stored) == ids
    finally:
        s.destroy()


def test_429_with_retry_after_and_503_are_retried(svc):
    def plan(method, path, n):
        if n == 0:
            return 429, {"Retry-After": "1"}, {
                "error": {"code": "unavailable", "message": "slow down"}}
        if n in (1, 2):
            return 503, {}, {"error": {"code": "unavailable",
                                       "message": "the database is unavailable"}}
        return None

    f = Front(svc.port, plan)
    try:
        with Client(f.url, retry=Retry(attempts=5, base=0.01, cap=0.05)) as c:
            t0 = time.monotonic()
            m = c.schedule(job(routing_key="r429"))
            assert time.monotonic() - t0 >= 1.0, "Retry-After: 1 waited"
            assert f.n == 4
            assert c.get(m["id"])["routing_key"] == "r429"
            assert c.count(routing_key="r429") == {"count": 1, "capped": False}
    finally:
        f.close()


def test_retries_end_after_attempts_other_4xx_never_retried(svc):
    def plan(method, path, n):
        if path.startswith("/status"):
            return 503, {}, {"error": {"code": "unavailable", "message": "down"}}
        if path.startswith("/stats"):
            return 400, {}, {"error": {"code": "invalid_argument",
                                       "message": "no"}}
        return 409, {}, {"error": {"code": "conflict", "message": "no"}}

    f = Front(svc.port, plan)
    try:
        with Client(f.url, retry=Retry(attempts=3, base=0.001, cap=0.005)) as c:
            with pytest.raises(UnavailableError) as ei:
                c.status()
            assert ei.value.status == 503
            assert f.n == 3
            with pytest.raises(InvalidArgumentError):
                c.stats()
            assert f.n == 4
            with pytest.raises(ConflictError):
                c.schedule_one(job())
            assert f.n == 5
    finally:
        f.close()
    nobody = Client(f"http://127.0.0.1:{free_port()}",
                    retry=Retry(attempts=2, base=0.001, cap=0.002))
    with pytest.raises(ConnectionError) as ei:
        nobody.get("x")
    assert isinstance(ei.value.__cause__, ConnectionRefusedError)
    assert nobody.retries == 1
    nobody.close()


def test_cut_answers_are_retried_with_the_same_keys_stored_once(svc):
    f = Front(svc.port, lambda method, path, n: "reset" if n == 0 else None)
    try:
        with Client(f.url, retry=Retry(attempts=3, base=0.001, cap=0.005)) as c:
            j = c.schedule_one(job(routing_key="cut1"))
            assert f.n == 2
            assert j["routing_key"] == "cut1"
            assert c.count(routing_key="cut1") == {"count": 1, "capped": False}
    finally:
        f.close()
    f = Front(svc.port, lambda method, path, n: "reset" if n == 0 else None)
    try:
        with Client(f.url, retry=Retry(attempts=3, base=0.001, cap=0.005),
                    linger=0.5) as c:
            futures = [c.schedule_async(job(routing_key="ikcut"))
                       for _ in range(300)]
            jobs = [x.result(30) for x in futures]
            assert len({j["id"] for j in jobs}) == 300
            assert f.n == 2
            assert c.count(routing_key="ikcut") == {"count": 300,
                                                    "capped": False}
    finally:
        f.close()
