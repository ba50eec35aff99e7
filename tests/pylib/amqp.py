"""AMQP as the tests see it (pika 1.2, Debian 12): connection parameters
that fail fast, a decoder fix for the table types pika 1.2 gets wrong, and a
real consumer on its own thread and connection that records what arrives
and when. Importing this module installs the decoder fix.
"""

import struct
import threading
import time
import uuid

import pika

from pylib.wait import wait_until


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
    exchange, the queue and its messages across a broker restart). url may
    be a list (cluster nodes, tried in turn); queue_arguments are the
    queue's (e.g. {"x-queue-type": "quorum"}, with durable=True)."""

    def __init__(self, url, durable=False, queue_arguments=None):
        tag = uuid.uuid4().hex[:12]
        self.url = url
        self.durable = durable
        self.queue_arguments = queue_arguments
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

    def _params(self):
        urls = self.url if isinstance(self.url, (list, tuple)) else [self.url]
        return [amqp_params(u) for u in urls]

    def start(self, timeout=20):
        self._thread.start()
        if not self._connected.wait(timeout):
            raise AssertionError(f"consumer could not connect: {self.errors[-3:]}")
        return self

    def _declare(self, ch):
        ch.exchange_declare(self.exchange, exchange_type="direct",
                            durable=self.durable)
        ch.queue_declare(self.queue, durable=self.durable,
                         arguments=self.queue_arguments)
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
                conn = pika.BlockingConnection(self._params())
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
        conn = pika.BlockingConnection(self._params())
        try:
            conn.channel().queue_bind(self.queue, self.exchange,
                                      routing_key=routing_key)
        finally:
            conn.close()

    def queue_depth(self):
        """Messages ready in the queue, not yet handed to this consumer (a
        passive declare on a connection of its own)."""
        conn = pika.BlockingConnection(self._params())
        try:
            return conn.channel().queue_declare(self.queue, passive=True).method.message_count
        finally:
            conn.close()

    def wait_connected(self, timeout=60):
        if not self._connected.wait(timeout):
            raise AssertionError(f"consumer did not reconnect: {self.errors[-3:]}")

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        try:  # best effort: the node is private to the test run anyway
            conn = pika.BlockingConnection(self._params())
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
