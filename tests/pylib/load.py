"""A load generator: client threads posting one job per request (POST
/schedule, a fresh loopback connection each) while a test kills, stops or
restarts the service under them. The crash torture, the graceful stop and
the several-instances tests all use this one.

Every request is kept, in the order it was made, as a record:
  n       the request number (0, 1, ...): make_job can tag the job with it
          (a header), so a stored job or a message traces back to its request
  target  the index into `ports` the request went to (round robin per thread)
  start, end  wall-clock time before the request and when its answer (or
          its failure) came
  status  the HTTP status, or "bad answer" (not JSON, or not the documented
          shape), or None when no answer came (refused, reset: see error)
  body    the answer's JSON body (the failure text for a bad answer)
  error   the exception's class name when no answer came, else None
  job     the request body
Only a 201 counts as acknowledged; a request without an answer may or may
not have been stored.
"""

import http.client
import random
import threading
import time

from pylib.http import http_request


class Pacer:
    """Hands out request slots at a fixed rate to any number of threads."""

    def __init__(self, rate):
        self.interval = 1.0 / rate
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def wait_slot(self, stop):
        with self.lock:
            slot = max(self.next, time.monotonic())
            self.next = slot + self.interval
        delay = slot - time.monotonic()
        if delay > 0:
            stop.wait(delay)


class Load:
    """`threads` threads posting make_job(n, rng) to `ports` until join(),
    or until `target` requests were acknowledged. make_job is called under
    the generator's lock with the request number and a random.Random(seed)
    shared by all threads. rate: requests per second, all threads together
    (None: back to back). pause_s: a pause after each answered request;
    error_pause_s: after a request that got no answer (the process is going
    away: do not spin on a refused port). headers go with every request
    (an Authorization header, for instance)."""

    def __init__(self, ports, make_job, threads, rate=None, target=None,
                 pause_s=0.0, error_pause_s=0.0, seed=None, headers=None):
        self.ports = list(ports)
        self.headers = headers
        self.make_job = make_job
        self.target = target
        self.pause_s = pause_s
        self.error_pause_s = error_pause_s
        self.rng = random.Random(seed)
        self.pacer = Pacer(rate) if rate else None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.records = []
        self._n_acked = 0
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True,
                                         name=f"load-{k}")
                        for k in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)
            assert not t.is_alive(), f"load thread {t.name} did not stop"

    def acked(self):
        """The records answered 201, in request order."""
        with self.lock:
            return [r for r in self.records if r["status"] == 201]

    def n_acked(self):
        with self.lock:
            return self._n_acked

    def done(self):
        return self.target is not None and self.n_acked() >= self.target

    def errors(self):
        """{exception class name: count} of the requests without an answer."""
        out = {}
        with self.lock:
            for r in self.records:
                if r["error"] is not None:
                    out[r["error"]] = out.get(r["error"], 0) + 1
        return out

    def _run(self, k):
        i = k
        while not self.stop.is_set() and not self.done():
            if self.pacer is not None:
                self.pacer.wait_slot(self.stop)
                if self.stop.is_set():
                    return
            i = (i + 1) % len(self.ports)
            with self.lock:
                rec = {"n": len(self.records), "target": i, "start": time.time(),
                       "end": None, "status": None, "body": None, "error": None}
                rec["job"] = self.make_job(rec["n"], self.rng)
                self.records.append(rec)
            try:
                r = http_request(self.ports[i], "POST", "/schedule", rec["job"],
                                 headers=self.headers, timeout=10)
            except (OSError, http.client.HTTPException) as e:  # refused, reset
                rec["error"], rec["end"] = type(e).__name__, time.time()
                self.stop.wait(self.error_pause_s)
                continue
            except AssertionError as e:  # not JSON, or not the documented shape
                rec["status"], rec["body"] = "bad answer", str(e)[:500]
            else:
                rec["status"], rec["body"] = r.status, r.body
            rec["end"] = time.time()
            if rec["status"] == 201:
                with self.lock:
                    self._n_acked += 1
            if self.pause_s:
                self.stop.wait(self.pause_s)
