"""The client of rmq-scheduler's HTTP API (api/openapi.yaml).

schedule() batches: a call made while one of the ``senders`` threads is
free goes at once (with whatever is buffered beside it), and the calls
made while all are busy go together when one is free (or, with ``linger``
set, the calls made within ``linger`` seconds of each other), up to ``max_batch`` items or
``max_batch_bytes``, as one POST /schedule/batch from a background sender
thread; each caller gets its own job or its own error. Every call retries what is safe to retry
(connection refused, a reset keep-alive connection, 503, 429) with capped
exponential backoff and full jitter; scheduling carries idempotency keys
so that a retry never creates a second job.
"""

import builtins
import concurrent.futures
import datetime
import email.utils
import http.client
import json
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass

from .errors import (
    AbortError,
    ConflictError,
    ConnectionError,
    ForbiddenError,
    InvalidArgumentError,
    PayloadTooLargeError,
    RmqsError,
    TimeoutError,
    error_from_answer,
)

MAX_SERVER_BATCH = 1000
_ITEM_FIELD = re.compile(r"^jobs\[(\d+)\]\.(.+)$")
_ANY_ITEM_FIELD = re.compile(r"^jobs\[(\d+)\](.*)$")

# Nothing was sent: safe to retry for every request.
_CONNECT_ERRORS = (ConnectionRefusedError, socket.gaierror,
                   ConnectionAbortedError)
# The connection was cut: safe to retry a request that can be repeated, or
# any request on a reused keep-alive connection the server had closed.
_RESET_ERRORS = (ConnectionResetError, BrokenPipeError,
                 http.client.RemoteDisconnected,
                 http.client.IncompleteRead, http.client.BadStatusLine)


@dataclass(frozen=True)
class Retry:
    """Retries of connection errors, 503 and 429: at most ``attempts``
    tries, waiting uniform in [0, min(cap, base * 2**(n-1))] seconds
    (full jitter) unless the answer says Retry-After."""

    attempts: int = 5
    base: float = 0.05
    cap: float = 2.0

    def backoff(self, attempt):
        return random.uniform(0, min(self.cap, self.base * 2 ** (attempt - 1)))


def _iso(v):
    """A datetime as the API's RFC 3339 UTC text (naive means UTC)."""
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        v = v.astimezone(datetime.timezone.utc)
        ms = v.microsecond // 1000
        return v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms:03d}Z"
    return v


def _text(v):
    v = _iso(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _query(params):
    parts = {k: _text(v) for k, v in (params or {}).items() if v is not None}
    return "?" + urllib.parse.urlencode(parts) if parts else ""


def _seg(s):
    return urllib.parse.quote(str(s), safe="")


def _new_key():
    return uuid.uuid4().hex


def _when(deliver_at=None, delay_ms=None):
    body = {}
    if deliver_at is not None:
        body["deliver_at"] = _iso(deliver_at)
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    return body


def _parse_retry_after(v):
    if not v:
        return None
    v = v.strip()
    if v.isdigit():
        return float(v)
    try:
        t = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    now = datetime.datetime.now(datetime.timezone.utc)
    return max(0.0, (t - now).total_seconds())


class _Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body


class _Item:
    """One schedule() call: its future, its item's JSON and its size."""

    __slots__ = ("future", "json", "bytes", "done")

    def __init__(self, future, text):
        self.future = future
        self.json = text
        self.bytes = len(text.encode()) + 1
        self.done = False


class Client:
    """A thread-safe client of one rmq-scheduler service.

    ``url`` is the service's base URL (http or https), ``token`` the API
    token (sent as ``Authorization: Bearer``), ``timeout`` the seconds a
    request may wait for its answer, ``ssl_context`` an
    :class:`ssl.SSLContext` for https, ``headers`` extra headers of every
    request, ``pool_size`` the keep-alive connections kept open.
    """

    def __init__(self, url="http://127.0.0.1:8080", token=None, timeout=10.0,
                 linger=0.0, max_batch=1000, max_batch_bytes=900 * 1024,
                 max_outstanding=10000, retry=Retry(), *, ssl_context=None,
                 headers=None, pool_size=8, senders=4):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError("url: http or https only")
        self.url = url
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._base = u.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.linger = linger
        self.max_batch = max(1, min(max_batch, MAX_SERVER_BATCH))
        self.max_batch_bytes = max_batch_bytes
        self.max_outstanding = max(1, max_outstanding)
        self.retry_policy = retry
        self._ssl_context = ssl_context
        self._headers = dict(headers or {})
        self._pool_size = pool_size
        self._pool = []  # idle keep-alive connections
        self._pool_lock = threading.Lock()
        # Batching state, under _cond.
        self._cond = threading.Condition()
        self._buf = []  # items waiting for the next batch
        self._buf_bytes = 0
        self._buf_since = 0.0  # monotonic time of the oldest buffered item
        self._ready = []  # batches cut, for the sender thread to send
        self._outstanding = 0  # schedule() calls accepted and not settled
        self._inflight = 0  # batches being sent
        self._closed = False
        self._retries = 0
        self._requests = 0
        self._stats_lock = threading.Lock()
        self._nsenders = senders
        self._senders = concurrent.futures.ThreadPoolExecutor(
            max_workers=senders, thread_name_prefix="rmqs-batch")
        self._thread = threading.Thread(target=self._run, name="rmqs-sender",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ status

    @property
    def outstanding(self):
        """schedule() calls accepted and not yet settled."""
        return self._outstanding

    @property
    def requests(self):
        """HTTP requests sent, in all (for monitoring)."""
        return self._requests

    @property
    def retries(self):
        """Tries repeated, in all (for monitoring)."""
        return self._retries

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------ transport

    def _connection(self):
        with self._pool_lock:
            if self._pool:
                return self._pool.pop(), True
        if self._https:
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout,
                context=self._ssl_context)
        else:
            conn = http.client.HTTPConnection(self._host, self._port,
                                              timeout=self.timeout)
        return conn, False

    def _release(self, conn):
        with self._pool_lock:
            if not self._closed and len(self._pool) < self._pool_size:
                self._pool.append(conn)
                return
        conn.close()

    def _once(self, method, path, payload, extra):
        """One request on one connection: a _Response, or the exception
        of the socket (tagged ``connect`` / ``reused``)."""
        headers = {"Accept": "application/json", **self._headers, **extra}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if payload is not None:
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(payload))
        conn, reused = self._connection()
        with self._stats_lock:
            self._requests += 1
        try:
            if conn.sock is None:
                try:
                    conn.connect()
                except OSError as e:
                    # A certificate refused stays refused: not retried.
                    if not isinstance(e, ssl.SSLCertVerificationError):
                        e.rmqs_connect = True
                    raise
            skip_host = any(k.lower() == "host" for k in headers)
            conn.putrequest(method, path, skip_host=skip_host,
                            skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders(payload)
            resp = conn.getresponse()
            data = resp.read()
        except BaseException as e:
            conn.close()
            if isinstance(e, Exception):
                e.rmqs_reused = reused
            raise
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)
        body = None
        if data:
            text = data.decode("utf-8", "replace")
            try:
                body = json.loads(text)
            except ValueError:
                body = text
        return _Response(resp.status, resp.headers, body)

    def request(self, method, path, *, query=None, body=None, raw_body=None,
                headers=None, safe=None, full=False):
        """One API call: the answer's parsed body (None for 204), or the
        whole answer with ``full=True``; a typed error otherwise.

        ``safe``: the request may be repeated after a cut connection
        without changing the outcome (GET, PUT, DELETE, a keyed POST).
        """
        if safe is None:
            safe = method in ("GET", "PUT", "DELETE")
        if raw_body is not None:
            payload = raw_body
            if isinstance(raw_body, str):
                payload = raw_body.encode()
        elif body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
        else:
            payload = None
        target = self._base + path + _query(query)
        policy = self.retry_policy
        attempt = 0
        while True:
            attempt += 1
            try:
                res = self._once(method, target, payload, headers or {})
            except builtins.TimeoutError as e:  # socket.timeout too
                raise TimeoutError(
                    f"{method} {path}: no answer within {self.timeout} s",
                    code="timeout") from e
            except (OSError, http.client.HTTPException) as e:
                retryable = (getattr(e, "rmqs_connect", False)
                             or isinstance(e, _CONNECT_ERRORS)
                             or ((safe or getattr(e, "rmqs_reused", False))
                                 and isinstance(e, _RESET_ERRORS)))
                if not retryable or attempt >= policy.attempts:
                    raise ConnectionError(f"{method} {path}: {e!r}",
                                          code="connection") from e
                self._count_retry()
                time.sleep(policy.backoff(attempt))
                continue
            if 200 <= res.status < 300:
                return res if full else res.body
            retry_after = _parse_retry_after(res.headers.get("Retry-After"))
            err = error_from_answer(res.status, res.body, retry_after)
            if res.status in (503, 429) and attempt < policy.attempts:
                self._count_retry()
                time.sleep(retry_after if retry_after is not None
                           else policy.backoff(attempt))
                continue
            raise err

    def _count_retry(self):
        with self._stats_lock:
            self._retries += 1

    # ------------------------------------------------------------ batching

    def schedule(self, job, idempotency_key=None, timeout=None):
        """Schedules one job through the batcher and returns its JobMinimal
        ``{id, status, deliver_at}`` (get(id) reads the whole job).

        Blocks while max_outstanding calls are pending, then until the
        batch is answered; ``timeout`` bounds the wait for the answer (a
        TimeoutError then: the job may still be stored).
        """
        fut = self.schedule_async(job, idempotency_key)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no answer within {timeout} s",
                               code="timeout") from None

    def schedule_async(self, job, idempotency_key=None):
        """Like schedule(), but returns a concurrent.futures.Future at once
        (after waiting for room while max_outstanding calls are pending).
        """
        if not isinstance(job, dict):
            raise TypeError("schedule(job): job must be a dict")
        key = idempotency_key or job.get("idempotency_key") or _new_key()
        text = json.dumps({**job, "idempotency_key": key},
                          separators=(",", ":"))
        fut = concurrent.futures.Future()
        item = _Item(fut, text)
        with self._cond:
            while (not self._closed
                   and self._outstanding >= self.max_outstanding):
                self._cond.wait()
            if self._closed:
                raise AbortError("the client is closed", code="aborted")
            self._outstanding += 1
            if self._buf and (self._buf_bytes + item.bytes + 2
                              > self.max_batch_bytes):
                self._cut()
            if not self._buf:
                self._buf_since = time.monotonic()
            self._buf.append(item)
            self._buf_bytes += item.bytes
            if (len(self._buf) >= self.max_batch
                    or self._buf_bytes + 2 >= self.max_batch_bytes):
                self._cut()
            self._cond.notify_all()
        return fut

    def _cut(self):
        """Moves the buffer to the ready batches (under _cond)."""
        if self._buf:
            self._ready.append(self._buf)
            self._buf = []
            self._buf_bytes = 0

    def _run(self):
        """The sender thread: hands each batch to a sender worker when it
        is full, or (linger 0) a sender is free, or its oldest item has
        lingered ``linger`` seconds and a sender is free."""
        with self._cond:
            while True:
                if self._buf and not self._ready:
                    # linger 0 (the default): the buffer goes at once while a
                    # sender is free (a lone caller waits for nobody), and
                    # otherwise when one is (the calls made meanwhile share
                    # a request). A linger set: the batch waits that long,
                    # and keeps growing past it while every sender is busy.
                    due = self._buf_since + self.linger
                    now = time.monotonic()
                    if self.linger <= 0:
                        go = self._inflight < self._nsenders
                    else:
                        go = now >= due and self._inflight < self._nsenders
                    if self._closed or go:
                        self._cut()
                    else:
                        self._cond.wait(due - now if now < due else None)
                        continue
                if self._ready:
                    batches, self._ready = self._ready, []
                    self._inflight += len(batches)
                    for b in batches:
                        self._senders.submit(self._send_batch_task, b)
                    continue
                if self._closed:
                    return
                self._cond.wait()

    def _send_batch_task(self, items):
        try:
            self._send_batch(items)
        except BaseException as e:  # a bug: never leave a caller waiting
            for it in items:
                self._settle(it, e if isinstance(e, Exception)
                             else RmqsError(repr(e)), True)
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def _settle(self, item, value, is_error):
        """Settles one schedule() caller (once) and lets a waiting one in."""
        with self._cond:
            if item.done:
                return
            item.done = True
            self._outstanding -= 1
            self._cond.notify_all()
        if item.future.done():  # cancelled by its caller
            return
        try:
            if is_error:
                item.future.set_exception(value)
            else:
                item.future.set_result(value)
        except concurrent.futures.InvalidStateError:
            pass

    def _send_batch(self, items):
        """Sends items (all-or-nothing on the server) until each caller
        has its job or its own error: the items a 400 lists, or a 403/409
        names, get their own error and the rest is sent again."""
        live = []
        for it in items:
            if it.future.cancelled():
                self._settle(it, None, True)
            else:
                live.append(it)
        while live:
            body = "[" + ",".join(it.json for it in live) + "]"
            try:
                res = self.request("POST", "/schedule/batch", raw_body=body,
                                   headers={"Prefer": "return=minimal"},
                                   safe=True, full=True)
            except RmqsError as err:
                bad = _bad_items(err, live)
                if bad:
                    for it, e in bad.items():
                        self._settle(it, e, True)
                    live = [it for it in live if it not in bad and not it.done]
                    continue
                if isinstance(err, PayloadTooLargeError) and len(live) > 1:
                    half = (len(live) + 1) // 2
                    self._send_batch(live[:half])
                    self._send_batch(live[half:])
                    return
                for it in live:
                    self._settle(it, err, True)
                return
            jobs = res.body.get("jobs") if isinstance(res.body, dict) else None
            if not isinstance(jobs, list):
                jobs = []
            for i, it in enumerate(live):
                if i < len(jobs):
                    self._settle(it, jobs[i], False)
                else:
                    err = RmqsError("the batch answer lacks this job",
                                    status=res.status)
                    self._settle(it, err, True)
            return

    def flush(self, timeout=None):
        """Sends every buffered schedule() now and waits for the batches in
        flight; False if ``timeout`` seconds passed first."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._cut()
            self._cond.notify_all()
            while self._buf or self._ready or self._inflight:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    # ------------------------------------------------------------ scheduling

    def schedule_many(self, jobs, idempotency_keys=None, minimal=True):
        """An explicit batch: jobs in chunks of max_batch items /
        max_batch_bytes, each chunk all-or-nothing, in order. Returns the
        JobMinimal of each (the whole jobs with ``minimal=False``) in the
        order given. A chunk refused stops there: the error's
        ``errors[].index`` (or ``jobs[<i>]`` field) is the index in
        ``jobs``, and ``error.scheduled`` holds what the chunks before
        stored."""
        jobs = list(jobs)
        out = []
        chunk = []
        size = 2
        start = 0

        def send():
            nonlocal chunk, size, start
            if not chunk:
                return
            try:
                prefer = {"Prefer": "return=minimal"} if minimal else {}
                r = self.request("POST", "/schedule/batch",
                                 raw_body="[" + ",".join(chunk) + "]",
                                 headers=prefer, safe=True)
                out.extend(r["jobs"])
            except RmqsError as err:
                if err.errors:
                    err.errors = [{**e, "index": e.get("index", 0) + start}
                                  for e in err.errors]
                m = _ANY_ITEM_FIELD.match(err.field or "")
                if m:
                    err.field = f"jobs[{int(m.group(1)) + start}]{m.group(2)}"
                err.scheduled = out
                raise
            start += len(chunk)
            chunk = []
            size = 2

        for i, job in enumerate(jobs):
            key = idempotency_keys[i] if idempotency_keys else _new_key()
            s = json.dumps({**job, "idempotency_key": key},
                           separators=(",", ":"))
            b = len(s.encode()) + 1
            if chunk and (len(chunk) >= self.max_batch
                          or size + b > self.max_batch_bytes):
                send()
            chunk.append(s)
            size += b
        send()
        return out

    def schedule_one(self, job, idempotency_key=None, minimal=False):
        """POST /schedule, one job, with an Idempotency-Key header (the one
        given or a random one: retries never create a second job). The
        whole job, or its JobMinimal with ``minimal=True``."""
        headers = {"Idempotency-Key": idempotency_key or _new_key()}
        if minimal:
            headers["Prefer"] = "return=minimal"
        return self.request("POST", "/schedule", body=job, headers=headers,
                            safe=True)

    # ------------------------------------------------------------ jobs

    def get(self, job_id):
        return self.request("GET", f"/jobs/{_seg(job_id)}")

    def list(self, filter=None, *, page_size=None, **filters):
        """Every job the filter matches (status, source, exchange,
        routing_key, deliver_from, deliver_to, q, order, ...), page by
        page, following ``next``: a generator."""
        f = {**(filter or {}), **filters}
        limit = f.pop("limit", None)
        after = None
        while True:
            page = self.request("GET", "/jobs", query={
                **f, "limit": page_size or limit, "after": after})
            yield from page["jobs"]
            if not page.get("next"):
                return
            after = page["next"]

    def count(self, filter=None, *, max=None, **filters):
        """{count, capped}: the jobs the filter matches (up to ``max``)."""
        return self.request("GET", "/jobs/count",
                            query={**(filter or {}), **filters, "max": max})

    def reschedule(self, job_id, deliver_at=None, delay_ms=None):
        return self.request("PATCH", f"/jobs/{_seg(job_id)}",
                            body=_when(deliver_at, delay_ms), safe=True)

    def cancel(self, job_id):
        return self.request("DELETE", f"/jobs/{_seg(job_id)}")

    def run_now(self, job_id):
        return self.request("POST", f"/jobs/{_seg(job_id)}/run", safe=False)

    def retry(self, job_id, deliver_at=None, delay_ms=None):
        return self.request("POST", f"/jobs/{_seg(job_id)}/retry",
                            body=_when(deliver_at, delay_ms))

    def bulk(self, action, filter=None, all=None):
        body = {"action": action,
                "filter": {k: _text(v) for k, v in (filter or {}).items()
                           if v is not None}}
        if all is not None:
            body["all"] = all
        return self.request("POST", "/jobs/bulk", body=body)

    def bulk_status(self, op_id):
        return self.request("GET", f"/jobs/bulk/{_seg(op_id)}")

    def wait_bulk(self, op_id, on_progress=None, interval=0.2, timeout=None):
        """Polls a bulk operation until it is no longer ``running`` and
        returns it; ``on_progress(op)`` sees each poll."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            op = self.bulk_status(op_id)
            if on_progress:
                on_progress(op)
            if op.get("state") != "running":
                return op
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"bulk {op_id} still running after "
                                   f"{timeout} s", code="timeout")
            time.sleep(interval)

    # ------------------------------------------------------------ schedules

    def put_schedule(self, name, spec):
        return self.request("PUT", f"/schedules/{_seg(name)}", body=spec)

    def get_schedule(self, name, count=None):
        return self.request("GET", f"/schedules/{_seg(name)}",
                            query={"count": count})

    def list_schedules(self, page_size=None):
        after = None
        while True:
            page = self.request("GET", "/schedules",
                                query={"limit": page_size, "after": after})
            yield from page["schedules"]
            if not page.get("next"):
                return
            after = page["next"]

    def patch_schedule(self, name, patch):
        return self.request("PATCH", f"/schedules/{_seg(name)}", body=patch,
                            safe=True)

    def delete_schedule(self, name):
        self.request("DELETE", f"/schedules/{_seg(name)}")

    def run_schedule(self, name, idempotency_key=None):
        return self.request(
            "POST", f"/schedules/{_seg(name)}/run", safe=True,
            headers={"Idempotency-Key": idempotency_key or _new_key()})

    # ------------------------------------------------------------ limits

    def put_limit(self, name, spec):
        return self.request("PUT", f"/limits/{_seg(name)}", body=spec)

    def get_limit(self, name):
        return self.request("GET", f"/limits/{_seg(name)}")

    def list_limits(self):
        return self.request("GET", "/limits")["limits"]

    def patch_limit(self, name, patch):
        return self.request("PATCH", f"/limits/{_seg(name)}", body=patch,
                            safe=True)

    def delete_limit(self, name):
        self.request("DELETE", f"/limits/{_seg(name)}")

    # ------------------------------------------------------------ monitoring

    def stats(self, window=None):
        return self.request("GET", "/stats", query={"window": window})

    def status(self):
        return self.request("GET", "/status")

    def failures(self):
        return self.request("GET", "/stats/failures")

    # ------------------------------------------------------------ lifecycle

    def close(self):
        """Sends what is buffered, waits for the batches in flight, then
        closes the connections. schedule() after close() (or waiting for
        room when it is called) raises AbortError."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        self.flush()
        self._senders.shutdown(wait=True)
        with self._pool_lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()


def _bad_items(err, live):
    """The items an error is about, each with an error of its own; None if
    the error is about the whole batch."""
    if isinstance(err, InvalidArgumentError) and err.errors:
        bad = {}
        for e in err.errors:
            i = e.get("index")
            if not isinstance(i, int) or not 0 <= i < len(live):
                continue
            it = live[i]
            if it in bad:
                continue
            bad[it] = InvalidArgumentError(
                e.get("message") or err.message, status=400,
                code="invalid_argument", field=e.get("field"), body=err.body)
        return bad or None
    m = _ITEM_FIELD.match(err.field or "")
    if m and isinstance(err, (ForbiddenError, ConflictError,
                              InvalidArgumentError)):
        i = int(m.group(1))
        if i >= len(live):
            return None
        e = type(err)(err.message, status=err.status, code=err.code,
                      field=m.group(2), body=err.body)
        return {live[i]: e}
    return None
