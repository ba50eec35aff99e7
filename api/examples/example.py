#!/usr/bin/env python3
"""Schedule a job, read its status, cancel it: rmq-scheduler from Python's
standard library alone.

The HTTP calls themselves, for reading or porting to a language without a
library. From a Python application, use clients/python instead: batching,
safe retries and typed errors over these same calls.

    python3 api/examples/example.py [BASE_URL]     default http://127.0.0.1:8080
    RMQS_API_TOKEN=... python3 api/examples/example.py

Prints one line per step and exits non-zero on any unexpected answer:
    scheduled id=<id> status=pending deliver_at=<time>
    read id=<id> status=pending
    cancelled id=<id> status=cancelled
"""

import json
import os
import sys
import urllib.error
import urllib.request


class ApiError(Exception):
    pass


class Scheduler:
    def __init__(self, base_url, token=None, timeout=10):
        self.base = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method, path, body=None, headers=None):
        """(status, parsed JSON answer); HTTP errors are answers too."""
        h = {"Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, headers=h,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode("utf-8", "replace")

    def expect(self, want, method, path, body=None, headers=None):
        status, answer = self.call(method, path, body, headers)
        if status != want:
            raise ApiError(f"{method} {path}: HTTP {status}: {answer}")
        return answer

    def schedule(self, job, idempotency_key=None):
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        status, answer = self.call("POST", "/schedule", job, headers)
        if status not in (200, 201):  # 200: a repeat of the same request
            raise ApiError(f"POST /schedule: HTTP {status}: {answer}")
        return answer

    def job(self, job_id):
        return self.expect(200, "GET", f"/jobs/{job_id}")

    def cancel(self, job_id):
        return self.expect(200, "DELETE", f"/jobs/{job_id}")


def main(argv):
    base = argv[1] if len(argv) > 1 else "http://127.0.0.1:8080"
    api = Scheduler(base, os.environ.get("RMQS_API_TOKEN"))

    # 1. Cancel order 1234 in 10 minutes unless it is paid by then.
    job = api.schedule({"exchange": "", "routing_key": "orders.expire",
                        "body": {"order": 1234}, "delay_ms": 600_000,
                        "headers": {"tenant": "acme"}})
    if job.get("status") != "pending":
        raise ApiError(f"POST /schedule: unexpected job {job}")
    print(f"scheduled id={job['id']} status={job['status']} "
          f"deliver_at={job['deliver_at']}")

    # 2. Read it back.
    again = api.job(job["id"])
    if again.get("id") != job["id"]:
        raise ApiError(f"GET /jobs/{job['id']}: unexpected job {again}")
    print(f"read id={again['id']} status={again['status']}")

    # 3. The order was paid: cancel the job.
    done = api.cancel(job["id"])
    if done.get("status") != "cancelled":
        raise ApiError(f"DELETE /jobs/{job['id']}: unexpected job {done}")
    print(f"cancelled id={done['id']} status={done['status']}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (ApiError, OSError, ValueError) as e:
        print(f"example.py: {e}", file=sys.stderr)
        sys.exit(1)
