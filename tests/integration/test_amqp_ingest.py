"""AMQP ingest: a drop-in path off the delayed-message plugin.

Publishers send to an ingest exchange with an x-delay (or x-deliver-at)
header, as they would to the plugin's exchange; the service stores each
message as a job (source "amqp") and publishes it, when due, to the mapped
target exchange with the original routing key, body, headers and
properties. The target here is a Consumer's exchange (helpers.Consumer),
bound with the routing key the tests publish with.

Covered: settings refused at start-up; on time (never early) with content
intact; x-deliver-at; a missing target exchange; invalid timing under both
rules; a message_id reused by another message; kill -9 between receive and
commit and between commit and ack (a proxy holds the acks back); a broker
restart mid-stream; a frozen broker; a full disk; /readyz asked while the
service stops; the ingest rate.

The full-disk and start-up tests reuse helpers of test_disk_full.py and
test_startup_errors.py.
"""

import datetime
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
import uuid

import pika
import pytest

from helpers import amqp_params, db_query, env, parse_ts, wait_until
from pylib import tmpfs
from pylib.metrics import metric
from pylib.startup import assert_refused, run_binary

PREFIX = "rmq-scheduler.inbox."


# --- helpers ------------------------------------------------------------------

def ingest_name():
    return f"rmqs-test-ingest-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def cleanup():
    """Exchanges and queues the service (or a test) declared, deleted at the
    end: the node is shared by the whole run. Request it before `service`
    so it is torn down after the services stopped (a service would declare
    a deleted inbox again)."""
    names = {"exchanges": [], "queues": []}
    yield names
    try:
        conn = pika.BlockingConnection(amqp_params(env("RMQS_TEST_AMQP_URL")))
        ch = conn.channel()
        for q in names["queues"]:
            ch.queue_delete(q)
        for x in names["exchanges"]:
            ch.exchange_delete(x)
        conn.close()
    except Exception:
        pass


def ingest_service(service, cleanup, target, *args, ingest=None, **kw):
    ingest = ingest or ingest_name()
    cleanup["exchanges"].append(ingest)
    cleanup["queues"].append(PREFIX + ingest)
    svc = service("--ingest", f"{ingest}={target}", *args, **kw)
    return svc, ingest


class Publisher:
    """A pika publisher with confirms. publish() returns the time.time() at
    which the message was handed over (before its confirm)."""

    def __init__(self):
        self.conn = pika.BlockingConnection(amqp_params(env("RMQS_TEST_AMQP_URL")))
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()

    def publish(self, exchange, routing_key, body, headers=None, **props):
        props.setdefault("delivery_mode", 2)
        t = time.time()
        self.ch.basic_publish(exchange, routing_key, body,
                              pika.BasicProperties(headers=headers, **props))
        return t

    def close(self):
        try:
            self.conn.close()
        except Exception:
            pass


def jobs_where(svc, query):
    """Every job matching a GET /jobs query, following the cursors."""
    jobs, after = [], None
    while True:
        q = query + "&limit=1000" + (f"&after={after}" if after else "")
        st, _, body = svc.get("/jobs?" + q)
        assert st == 200, f"GET /jobs?{q} -> {st} {body!r}"
        jobs.extend(body["jobs"])
        after = body["next"]
        if after is None:
            return jobs


def invalid_lines(svc):
    return [l for l in svc.log().splitlines() if 'msg="invalid message"' in l]


def lateness_ms(m):
    """How long after its deliver_at (x-scheduled-at) a message arrived."""
    return (m.received_at - parse_ts(m.headers["x-scheduled-at"])) * 1000


def summary(values):
    values = sorted(values)
    if not values:
        return "n=0"
    return (f"n={len(values)} median={values[len(values) // 2]:.1f} "
            f"p99={values[int(len(values) * 0.99) - 1 if len(values) > 1 else 0]:.1f} "
            f"max={values[-1]:.1f} ms")


# --- settings the service refuses ------------------------------------------------

BAD_INGEST = {
    "reserved name": (["--ingest", "amq.delayed=t"], "reserved"),
    "target is itself": (["--ingest", "loop=loop"], "loop"),
    "mapped twice": (["--ingest", "a=b,a=c"], "mapped twice"),
    "target is another ingest": (["--ingest", "a=b,b=c"], "loop"),
    "dead letters into an ingest": (["--ingest", "a=t", "--ingest-invalid",
                                     "dead-letter", "--ingest-dead-letter-exchange",
                                     "a"], "loop"),
    "inbox name too long": (["--ingest", "x" * 236 + "=t"], "longer than 235"),
}


@pytest.mark.parametrize("case", sorted(BAD_INGEST))
def test_bad_ingest_settings_refuse_to_start(tmp_path, case):
    args, text = BAD_INGEST[case]
    assert_refused(run_binary(["--db", str(tmp_path / "db"), *args]), (2,),
                   must=["bad ingest settings", text])


# --- on time, content intact ----------------------------------------------------

def test_ingest_delivers_on_time_with_content_intact(cleanup, service, amqp, report):
    svc, ingest = ingest_service(service, cleanup, amqp.exchange)
    st, _, ready = svc.get("/readyz")
    assert st == 200 and ready.get("ingest") == "up", ready

    pub = Publisher()
    sent = {}
    # A fixed instant on purpose, not a clock reading: "when" is an ordinary
    # header (an AMQP timestamp) and the timestamp property below is
    # dropped; the service never compares either with the clock, it only
    # carries "when" through as integer seconds. Only x-delay, relative to
    # the publish, decides when a message is due, so this test passes on
    # any date, before or after this instant.
    stamp = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    try:
        for i, delay in enumerate((1000, 1500, 2000, 2500, 3000)):
            mid = f"ontime-{uuid.uuid4().hex}"
            # (pika 1.2 cannot encode floats: the unit tests cover them)
            headers = {"x-delay": delay, "tenant": "acme", "n": i,
                       "big": 2**40, "neg": -7, "flag": True,
                       "raw": b"bytes-ok", "when": stamp}
            t = pub.publish(ingest, amqp.routing_key, f"body {i}".encode() + b"\x00\xff",
                            headers=headers, message_id=mid,
                            content_type="application/octet-stream",
                            content_encoding="identity", correlation_id=f"c{i}",
                            reply_to="replies", type="order.created",
                            app_id="shop", user_id="guest", priority=3,
                            expiration="600000", timestamp=1767225600)
            sent[mid] = (t, delay, i)
    finally:
        pub.close()

    msgs = amqp.wait_for(len(sent), timeout=30)
    time.sleep(0.5)  # nothing more may come
    msgs = amqp.snapshot()
    assert len(msgs) == len(sent), [m.properties.message_id for m in msgs]
    late_pub, late_due = [], []
    for m in msgs:
        p = m.properties
        t, delay, i = sent[p.message_id]
        due = t + delay / 1000
        # never early: deliver_at is taken when the service receives it,
        # after the publish (ms resolution)
        assert m.received_at >= due - 0.002, \
            f"{p.message_id} arrived {(due - m.received_at) * 1000:.1f} ms early"
        assert m.received_at >= parse_ts(m.headers["x-scheduled-at"]) - 0.001
        late_pub.append((m.received_at - due) * 1000)
        late_due.append(lateness_ms(m))
        assert m.body == f"body {i}".encode() + b"\x00\xff"
        assert m.exchange == amqp.exchange and m.routing_key == amqp.routing_key
        h = dict(m.headers)
        job_id = h.pop("x-scheduler-job-id")
        assert h.pop("x-delay") == -delay, m.headers
        h.pop("x-scheduled-at")
        assert h == {"tenant": "acme", "n": i, "big": 2**40, "neg": -7,
                     "flag": True,
                     "raw": "bytes-ok",             # valid UTF-8 bytes: a string
                     "when": int(stamp.timestamp())}  # timestamp: integer s
        assert (p.content_type, p.content_encoding, p.correlation_id, p.reply_to,
                p.type, p.app_id, p.user_id, p.priority, p.expiration,
                p.delivery_mode) == \
            ("application/octet-stream", "identity", f"c{i}", "replies",
             "order.created", "shop", "guest", 3, "600000", 2)
        assert p.timestamp is None, "the timestamp property is dropped"

        st, _, job = svc.get(f"/jobs/{job_id}")
        assert st == 200 and job["source"] == "amqp", job
        assert job["exchange"] == amqp.exchange and job["status"] == "sent"
        found = jobs_where(svc, f"message_id={p.message_id}")
        assert [j["id"] for j in found] == [job_id], found

    listed = jobs_where(svc, "source=amqp")
    assert {j["properties"]["message_id"] for j in listed} == set(sent)
    assert not jobs_where(svc, "source=http")
    report(f"amqp ingest lateness after publish+x-delay: {summary(late_pub)}; "
           f"after deliver_at: {summary(late_due)}")


def test_x_deliver_at_rfc3339_integer_ms_and_timestamp(cleanup, service, amqp):
    svc, ingest = ingest_service(service, cleanup, amqp.exchange)
    now = time.time()
    at_text = now + 1.5
    at_ms = now + 2.0
    at_s = int(now) + 3  # an AMQP timestamp has whole seconds
    tz = datetime.timezone(datetime.timedelta(hours=2))
    text = datetime.datetime.fromtimestamp(at_text, tz).isoformat(timespec="milliseconds")
    want = {
        "text": (text, parse_ts(text)),
        "bytes": (text.encode(), parse_ts(text)),
        "ms": (int(at_ms * 1000), int(at_ms * 1000) / 1000),
        "past": ("2020-01-01T00:00:00Z", None),
        "ts": (datetime.datetime.fromtimestamp(at_s, datetime.timezone.utc), at_s),
    }
    pub = Publisher()
    try:
        for name, (value, _) in want.items():
            pub.publish(ingest, amqp.routing_key, name.encode(),
                        headers={"x-deliver-at": value})
    finally:
        pub.close()
    msgs = {m.body.decode(): m for m in amqp.wait_for(len(want), timeout=30)}
    assert set(msgs) == set(want)
    for name, (_, due) in want.items():
        m = msgs[name]
        assert "x-deliver-at" not in m.headers
        if due is None:  # in the past: at once, with x-delay 0
            assert m.received_at - now < 2, m.received_at - now
            assert m.headers["x-delay"] == 0
            assert m.headers["x-scheduled-at"] == "2020-01-01T00:00:00.000Z"
            continue
        assert m.received_at >= due - 0.001, f"{name} early by {due - m.received_at:.3f} s"
        assert abs(parse_ts(m.headers["x-scheduled-at"]) - due) < 0.001, (name, m.headers)
        assert m.received_at - due < 1.0, f"{name} late by {m.received_at - due:.3f} s"


def test_missing_target_exchange_is_a_warning(cleanup, service):
    missing = f"rmqs-test-missing-{uuid.uuid4().hex[:12]}"
    svc, ingest = ingest_service(service, cleanup, missing)
    st, _, ready = svc.get("/readyz")
    assert st == 200 and ready["ingest"] == "up", ready
    wait_until(lambda: "target exchange does not exist" in svc.log(), 10,
               "a warning about the missing target exchange")
    line = next(l for l in svc.log().splitlines()
                if "target exchange does not exist" in l)
    assert "level=warn" in line and f'target="{missing}"' in line, line


# --- invalid timing -------------------------------------------------------------

HORIZON_MS = 3650 * 86400000  # --max-delay-days default

INVALID = {  # name: headers
    "missing": {"other": "x"},
    "boolean": {"x-delay": True},
    "string": {"x-delay": "5 s"},
    "beyond": {"x-delay": HORIZON_MS + 1},
    "both": {"x-delay": 100, "x-deliver-at": "2030-01-01T00:00:00Z"},
}


def test_invalid_timing_is_routed_at_once_by_default(cleanup, service, amqp):
    svc, ingest = ingest_service(service, cleanup, amqp.exchange)
    pub = Publisher()
    try:
        t0 = time.time()
        for name, headers in INVALID.items():
            pub.publish(ingest, amqp.routing_key, name.encode(), headers=headers,
                        message_id=f"inv-{name}")
        # cannot be carried (a table): rejected, never delivered with "route"
        pub.publish(ingest, amqp.routing_key, b"table",
                    headers={"x-delay": 100, "nested": {"a": 1}},
                    message_id="inv-table")
        pub.publish(ingest, amqp.routing_key, b"valid", headers={"x-delay": 1500})
    finally:
        pub.close()
    msgs = amqp.wait_for(len(INVALID) + 1, timeout=30)
    time.sleep(1.0)
    msgs = {m.body.decode(): m for m in amqp.snapshot()}
    assert set(msgs) == set(INVALID) | {"valid"}, sorted(msgs)
    for name in INVALID:
        m = msgs[name]
        assert m.received_at - t0 < 1.5, f"{name} not routed at once"
        assert m.headers["x-delay"] == 0, m.headers
    assert msgs["valid"].received_at >= t0 + 1.5 - 0.002

    lines = invalid_lines(svc)
    assert len(lines) == len(INVALID) + 1, lines
    for name in INVALID:
        line = next(l for l in lines if f'message_id="inv-{name}"' in l)
        assert "level=warn" in line and "action=routed" in line and "job_id=" in line
        assert f'exchange="{ingest}"' in line and "reason=" in line
        assert f'routing_key="{amqp.routing_key}"' in line
    table = next(l for l in lines if 'message_id="inv-table"' in l)
    assert "action=rejected" in table and "cannot be carried" in table
    routed = jobs_where(svc, "source=amqp")
    assert len(routed) == len(INVALID) + 1


def dead_letter_sink(dlx):
    """A queue bound to the dead-letter exchange (declared by the service):
    returns (connection, list that fills with (method, properties, body))."""
    dead = []
    conn = pika.BlockingConnection(amqp_params(env("RMQS_TEST_AMQP_URL")))
    ch = conn.channel()
    ch.exchange_declare(dlx, passive=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, dlx, routing_key="anything")
    ch.basic_consume(q, lambda c, m, p, b: dead.append((m, p, b)), auto_ack=True)
    return conn, dead


def test_invalid_timing_is_dead_lettered_when_asked(cleanup, service, amqp_factory):
    target = amqp_factory()
    dlx = f"rmqs-test-dlx-{uuid.uuid4().hex[:12]}"
    cleanup["exchanges"].append(dlx)
    svc, ingest = ingest_service(service, cleanup, target.exchange,
                                 "--ingest-invalid", "dead-letter",
                                 "--ingest-dead-letter-exchange", dlx)
    # The service declared the dead-letter exchange (fanout): bind a queue.
    conn, dead = dead_letter_sink(dlx)
    try:
        pub = Publisher()
        try:
            for name, headers in INVALID.items():
                pub.publish(ingest, target.routing_key, name.encode(),
                            headers=headers, message_id=f"dl-{name}")
            pub.publish(ingest, target.routing_key, b"table",
                        headers={"x-delay": 100, "nested": {"a": 1}})
            pub.publish(ingest, target.routing_key, b"valid",
                        headers={"x-delay": 500})
        finally:
            pub.close()
        deadline = time.monotonic() + 20
        while len(dead) < len(INVALID) + 1 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        target.wait_for(1, timeout=20)
        time.sleep(1.0)
        conn.process_data_events(time_limit=0.1)
    finally:
        conn.close()

    bodies = sorted(b.decode() for _, _, b in dead)
    assert bodies == sorted(list(INVALID) + ["table"]), bodies
    for m, p, b in dead:
        assert m.routing_key == target.routing_key
        death = p.headers["x-death"][0]
        assert death["reason"] == "rejected", death
        assert death["queue"] == PREFIX + ingest, death
        got = {k for k in p.headers
               if not k.startswith(("x-death", "x-first-death"))}
        want = set(INVALID[b.decode()]) if b != b"table" else {"x-delay", "nested"}
        assert got == want, (got, want)  # the message as it was sent
    assert [m.body for m in target.snapshot()] == [b"valid"], \
        "an invalid message reached the target"
    lines = invalid_lines(svc)
    assert len(lines) == len(INVALID) + 1
    assert all("action=dead-lettered" in l for l in lines), lines
    assert len(jobs_where(svc, "source=amqp")) == 1


# --- x-delay as the plugin reads it --------------------------------------------

# Every AMQP 0-9-1 field type as x-delay, published with rabbitmq-c
# (tests/integration/amqp_fields.c: pika cannot encode most of them), and its
# documented outcome (README "x-delay: what each type does"):
#   ("delayed", ms)  due at arrival + ms, published with x-delay -ms
#   ("at once",)     valid, published at once (zero or negative: the plugin
#                    routes those undelayed); not counted as invalid
#   ("invalid",)     --ingest-invalid: route -> at once and logged,
#                    dead-letter -> to the dead-letter exchange
XDELAY_TYPES = [  # (message_id, kind, value, outcome)
    ("b-120", "b", "120", ("delayed", 120)),
    ("b-neg", "b", "-5", ("at once",)),
    ("B-250", "B", "250", ("delayed", 250)),
    ("s-1300", "s", "1300", ("delayed", 1300)),
    ("s-neg", "s", "-3000", ("at once",)),
    ("u-1400", "u", "1400", ("delayed", 1400)),
    ("I-1500", "I", "1500", ("delayed", 1500)),
    ("I-zero", "I", "0", ("at once",)),
    ("i-1600", "i", "1600", ("delayed", 1600)),
    ("l-1700", "l", "1700", ("delayed", 1700)),
    ("l-neg", "l", "-1", ("at once",)),
    ("L-1800", "L", "1800", ("delayed", 1800)),
    ("f-1900.75", "f", "1900.75", ("delayed", 1900)),
    ("d-2000.9", "d", "2000.9", ("delayed", 2000)),
    ("d-neg", "d", "-0.5", ("at once",)),
    ("S-2100", "S", "2100", ("delayed", 2100)),
    ("S-plus", "S", "+2200", ("delayed", 2200)),
    ("S-neg", "S", "-500", ("at once",)),
    ("S-space", "S", " 500", ("invalid",)),
    ("S-exp", "S", "5e2", ("invalid",)),
    ("S-frac", "S", "500.0", ("invalid",)),
    ("S-empty", "S", "", ("invalid",)),
    ("x-2300", "x", "2300", ("delayed", 2300)),
    ("D-decimal", "D", "1:5000", ("invalid",)),
    ("t-true", "t", "1", ("invalid",)),
    ("T-timestamp", "T", "1767225600", ("invalid",)),
    ("V-void", "V", "-", ("invalid",)),
    ("F-table", "F", "-", ("invalid",)),
    ("A-array", "A", "-", ("invalid",)),
]


def amqp_fields(*args, timeout=30):
    """Run the rabbitmq-c helper; returns (exit status, stdout lines)."""
    r = subprocess.run([env("RMQS_AMQP_FIELDS"), *args], capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout.splitlines(), r.stderr


@pytest.mark.parametrize("rule", ["route", "dead-letter"])
def test_x_delay_every_field_type_has_its_documented_outcome(
        cleanup, service, amqp, rule):
    args = ["--ingest-invalid", rule]
    if rule == "dead-letter":
        dlx = f"rmqs-test-dlx-{uuid.uuid4().hex[:12]}"
        cleanup["exchanges"].append(dlx)
        args += ["--ingest-dead-letter-exchange", dlx]
    svc, ingest = ingest_service(service, cleanup, amqp.exchange, *args)
    sink = dead_letter_sink(dlx) if rule == "dead-letter" else None

    t0 = time.time()
    st, out, err = amqp_fields("publish", env("RMQS_TEST_AMQP_PORT"), ingest,
                               amqp.routing_key,
                               *[x for mid, kind, value, _ in XDELAY_TYPES
                                 for x in (mid, kind, value)])
    assert st == 0 and out == [f"acked {len(XDELAY_TYPES)}"], (st, out, err)
    # NaN and infinity never reach the inbox: RabbitMQ cannot decode them
    # and closes the publisher's connection.
    for value in ("nan", "inf", "-inf"):
        st, out, err = amqp_fields("publish", env("RMQS_TEST_AMQP_PORT"), ingest,
                                   amqp.routing_key, f"d-{value}", "d", value)
        assert st == 3 and out and out[0].startswith("closed 541"), (st, out, err)

    invalid = {mid for mid, _, _, o in XDELAY_TYPES if o[0] == "invalid"}
    to_target = [mid for mid, *_ in XDELAY_TYPES
                 if rule == "route" or mid not in invalid]
    amqp.wait_for(len(to_target), timeout=30)
    if sink:
        conn, dead = sink
        deadline = time.monotonic() + 20
        while len(dead) < len(invalid) and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
    time.sleep(0.5)  # nothing more may come
    got = {m.properties.message_id: m for m in amqp.snapshot()}
    assert sorted(got) == sorted(to_target)
    for mid, kind, value, outcome in XDELAY_TYPES:
        if mid not in got:
            continue
        m = got[mid]
        after = m.received_at - t0
        if outcome[0] == "delayed":
            ms = outcome[1]
            assert after >= ms / 1000, f"{mid}: {after * 1000:.0f} ms, early"
            assert after < ms / 1000 + 1.5, f"{mid}: {after * 1000:.0f} ms, late"
            assert m.headers["x-delay"] == -ms, (mid, m.headers)
        else:
            assert after < 1.5, f"{mid}: {after * 1000:.0f} ms, not at once"
            assert m.headers["x-delay"] == 0, (mid, m.headers)

    lines = invalid_lines(svc)
    logged = {re.search(r'message_id="([^"]*)"', l).group(1) for l in lines}
    assert logged == invalid, sorted(logged ^ invalid)
    action = "routed" if rule == "route" else "dead-lettered"
    assert all(f"action={action}" in l for l in lines), lines
    if sink:
        conn, dead = sink
        conn.close()
        assert sorted(p.message_id for _, p, _ in dead) == sorted(invalid)
        for _, p, _ in dead:  # the message as it was sent, x-delay included
            assert "x-delay" in p.headers, p.headers
            assert p.headers["x-death"][0]["reason"] == "rejected"


def test_string_x_delays_arrive_in_delay_order(cleanup, service, amqp):
    """The plugin's own string_delay_header case: x-delay as long strings."""
    svc, ingest = ingest_service(service, cleanup, amqp.exchange)
    # The plugin's test uses 100-500 ms; each delay counts from when its
    # message is taken in, so the steps must outlast taking in all six (a
    # ThreadSanitizer build on PostgreSQL took more than 100 ms): 1-5 s.
    delays = ["5000", "1000", "3000", "2000", "1000", "4000"]
    pub = Publisher()
    try:
        for i, d in enumerate(delays):
            pub.publish(ingest, amqp.routing_key, f"{i}:{d}".encode(),
                        headers={"x-delay": d})
    finally:
        pub.close()
    msgs = amqp.wait_for(len(delays), timeout=20)
    time.sleep(0.3)
    msgs = amqp.snapshot()
    order = [int(m.body.decode().split(":")[1]) for m in msgs]
    assert order == sorted(int(d) for d in delays), \
        [m.body.decode() for m in msgs]
    assert [m.headers["x-delay"] for m in msgs] == [-d for d in order]
    assert invalid_lines(svc) == []


# --- the outgoing x-delay header ---------------------------------------------------

PIKA_READ = r"""
import sys, time
import pika
url, queue, count, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
params = pika.URLParameters(url.rstrip("/") + "/%2F")
conn = pika.BlockingConnection(params)
ch = conn.channel()
got, deadline = 0, time.monotonic() + timeout
while got < count:
    method, props, body = ch.basic_get(queue, auto_ack=True)
    if method is None:
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
        continue
    print(props.message_id, (props.headers or {}).get("x-delay", "-"), flush=True)
    got += 1
conn.close()
sys.exit(0 if got == count else 1)
"""

AMQPLIB_READ = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "amqplib_read.js")


def test_outgoing_x_delay_reads_back_as_the_plugin_writes_it(cleanup, service):
    """x-delay goes out as minus the delay, a signed 32-bit integer while it
    fits (as the plugin writes it), else a 64-bit long: stock pika (Debian's
    python3-pika, which reads a 64-bit long as unsigned), Node's amqplib and
    rabbitmq-c all read back the negative number. HTTP and ingest jobs."""
    tag = uuid.uuid4().hex[:12]
    target, rk = f"rmqs-test-xd-{tag}", f"rk-{tag}"
    queues = {r: f"rmqs-test-xd-{r}-{tag}" for r in ("pika", "amqplib", "rabbitmq-c")}
    cleanup["exchanges"].append(target)
    cleanup["queues"].extend(queues.values())
    conn = pika.BlockingConnection(amqp_params(env("RMQS_TEST_AMQP_URL")))
    ch = conn.channel()
    ch.exchange_declare(target, exchange_type="direct")
    for q in queues.values():
        ch.queue_declare(q)
        ch.queue_bind(q, target, routing_key=rk)
    conn.close()

    svc, ingest = ingest_service(service, cleanup, target)
    month = 30 * 86400000  # 2,592,000,000 ms: beyond int32
    http = {"http-3000": 3000, "http-2^31": 2**31, "http-2^31+1": 2**31 + 1,
            "http-30d": month}
    for mid, ms in http.items():
        svc.schedule({"exchange": target, "routing_key": rk, "body": mid,
                      "delay_ms": ms, "properties": {"message_id": mid}})
    ingested = {"amqp-3000": 3000, "amqp-30d": month}
    pub = Publisher()
    try:
        for mid, ms in ingested.items():
            pub.publish(ingest, rk, mid.encode(), headers={"x-delay": ms},
                        message_id=mid)
    finally:
        pub.close()
    wait_until(lambda: len(jobs_where(svc, "source=amqp")) == len(ingested), 10,
               "the ingest messages stored")

    # The long delays are not waited for: with the service stopped, their
    # jobs are made due now in its database (delay_ms, which x-delay is made
    # of, stays as asked), and the restarted service publishes them.
    svc.stop()
    now_ms = int(time.time() * 1000)
    n = len(db_query(svc, "UPDATE jobs SET deliver_at = ?, due_at = ? "
                          "WHERE delay_ms > 3000 RETURNING 1", now_ms, now_ms))
    assert n == 4
    svc.start()

    want = {**http, **ingested}
    url = env("RMQS_TEST_AMQP_URL")
    readers = {
        "pika": ["/usr/bin/python3", "-c", PIKA_READ, url, queues["pika"]],
        "amqplib": ["node", AMQPLIB_READ, url, queues["amqplib"]],
        "rabbitmq-c": [env("RMQS_AMQP_FIELDS"), "read", env("RMQS_TEST_AMQP_PORT"),
                       queues["rabbitmq-c"]],
    }
    for name, cmd in readers.items():
        timeout_arg = "20000" if name != "pika" else "20"
        r = subprocess.run([*cmd, str(len(want)), timeout_arg], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, (name, r.stdout, r.stderr)
        read = {}
        for line in r.stdout.splitlines():
            fields = line.split()
            read[fields[0]] = fields[1:]
        assert sorted(read) == sorted(want), (name, r.stdout)
        for mid, ms in want.items():
            fits = -ms >= -2**31
            if name == "rabbitmq-c":
                assert read[mid] == ["I" if fits else "l", str(-ms)], (mid, read[mid])
            elif fits or name == "amqplib":
                assert read[mid] == [str(-ms)], (name, mid, read[mid])
            else:  # stock pika 1.2 reads a 64-bit long as unsigned
                assert int(read[mid][0]) % 2**64 == -ms % 2**64, (mid, read[mid])


# --- idempotency ----------------------------------------------------------------

def test_message_id_copies_are_stored_once_but_reuse_is_not_lost(cleanup, service, amqp):
    svc, ingest = ingest_service(service, cleanup, amqp.exchange)
    pub = Publisher()
    try:
        # The same message twice (as a redelivery would be): one job.
        for _ in range(2):
            pub.publish(ingest, amqp.routing_key, b"same", message_id="dup-1",
                        headers={"x-delay": 300})
        # Another message that reuses the id: stored, not lost.
        pub.publish(ingest, amqp.routing_key, b"other", message_id="dup-1",
                    headers={"x-delay": 300})
    finally:
        pub.close()
    amqp.wait_for(2, timeout=20)
    time.sleep(1.0)
    assert sorted(m.body for m in amqp.snapshot()) == [b"other", b"same"]
    jobs = jobs_where(svc, "message_id=dup-1")
    assert len(jobs) == 2, jobs
    assert "message_id reused by a different message" in svc.log()


# --- crashes and outages ----------------------------------------------------------

def settled_counts(svc):
    """Sum of the per-batch debug lines: stored, duplicates (copies
    recognised by message_id)."""
    stored = dup = 0
    for l in svc.log().splitlines():
        if 'msg="batch settled"' in l:
            stored += int(re.search(r" stored=(\d+)", l).group(1))
            dup += int(re.search(r" duplicates=(\d+)", l).group(1))
    return stored, dup


class Proxy:
    """A TCP proxy to the broker on loopback whose service->broker direction
    can be held: while hold is set nothing the service sends (acks
    included) reaches the broker, while deliveries still flow to the
    service. drop_all() closes every connection without forwarding what was
    held."""

    def __init__(self, target_port):
        self.target = target_port
        self.hold = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pairs = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closed.is_set():
            try:
                c, _ = self._sock.accept()
            except OSError:
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._pairs.append((c, u))
            threading.Thread(target=self._pump, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, False), daemon=True).start()

    def _pump(self, src, dst, upstream):
        while not self._closed.is_set():
            if upstream and self.hold.is_set():
                time.sleep(0.005)  # leave it unread: it never reaches the broker
                continue
            try:
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
            except (OSError, ValueError):
                break
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def drop_all(self):
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        self._closed.set()
        self.drop_all()
        self._sock.close()


def test_kill9_between_receive_and_ack_loses_nothing(cleanup, service, amqp, report):
    n = 3000
    proxy = Proxy(int(env("RMQS_TEST_AMQP_PORT")))
    try:
        svc, ingest = ingest_service(
            service, cleanup, amqp.exchange, log_level="debug",
            amqp_url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/")
        due = time.time() + 30  # nothing is published before the kills are over
        due_text = datetime.datetime.fromtimestamp(due, datetime.timezone.utc) \
            .isoformat(timespec="milliseconds")
        keyed = {f"k9-{i}" for i in range(n) if i % 10}
        unkeyed = {f"nomid-{i}" for i in range(n) if i % 10 == 0}
        errors = []

        def name(i):
            return f"k9-{i}" if i % 10 else f"nomid-{i}"

        def publish_all():  # straight to the broker, not through the proxy
            try:
                publish_pipelined(
                    ingest, amqp.routing_key, n, lambda i: name(i).encode(),
                    lambda i: pika.BasicProperties(
                        headers={"x-deliver-at": due_text}, delivery_mode=2,
                        message_id=name(i) if i % 10 else None))
            except Exception as e:
                errors.append(repr(e))
        t = threading.Thread(target=publish_all)
        t.start()

        def pending():
            return metric(svc, 'rmqs_jobs{status="pending"}', 0.0)

        # 1. kill -9 while batches flow (mostly between receive and commit)
        wait_until(lambda: pending() >= n * 0.2, 60, "a fifth of the jobs stored")
        svc.kill9()
        svc.restart()

        # 2. kill -9 between commit and ack: the service's acks are held
        # back, it keeps receiving (up to the prefetch) and committing.
        # The count is read before the hold: read after it, it could already
        # include the prefetch's worth committed under the hold, and then
        # never grow again (PostgreSQL run here).
        wait_until(lambda: pending() >= n * 0.4, 60, "two fifths of the jobs stored")
        held_from = pending()
        proxy.hold.set()
        last = {"v": held_from, "t": time.monotonic()}

        def settled():
            v = pending()
            if v != last["v"]:
                last["v"], last["t"] = v, time.monotonic()
            return v > held_from and time.monotonic() - last["t"] > 0.7
        wait_until(settled, 30, "jobs committed while their acks are held")
        held = int(pending() - held_from)
        svc.kill9()
        proxy.drop_all()  # the acks never reach the broker
        proxy.hold.clear()
        svc.restart()
        assert time.time() < due - 2, "the kills took too long: the test proves nothing"

        t.join(120)
        assert not t.is_alive() and not errors, errors

        wait_until(lambda: pending() >= n - 0.5 or None, 60, f"all {n} messages stored")
        amqp.wait_for(n, timeout=90)
        time.sleep(1.0)
        got = amqp.snapshot()
        count = {}
        for m in got:
            assert m.received_at >= due - 0.001
            count[m.body.decode()] = count.get(m.body.decode(), 0) + 1
        missing = (keyed | unkeyed) - set(count)
        assert not missing, f"{len(missing)} messages lost, e.g. {sorted(missing)[:5]}"
        twice = sorted(k for k in keyed if count[k] != 1)
        assert not twice, f"{len(twice)} messages with a message_id delivered " \
                          f"more than once, e.g. {twice[:5]}"
        per_mid = {}
        for j in jobs_where(svc, "source=amqp"):
            mid = j["properties"].get("message_id")
            if mid:
                per_mid[mid] = per_mid.get(mid, 0) + 1
        assert set(per_mid) == keyed and set(per_mid.values()) == {1}
        _, dup = settled_counts(svc)
        assert dup > 0, "no redelivered copy was recognised: the held acks did not matter"
        unkeyed_twice = sum(1 for k in unkeyed if count[k] > 1)
        report(f"amqp ingest kill -9 x2 during {n} messages: none lost; {held} "
               f"committed with their acks held; {dup} redelivered copies "
               f"recognised by message_id; {unkeyed_twice} of {len(unkeyed)} "
               f"without message_id stored (and delivered) twice")
        svc.terminate()
    finally:
        proxy.close()


def test_broker_restart_mid_stream_loses_nothing(cleanup, service, amqp_factory, broker, report):
    amqp = amqp_factory(durable=True)
    svc, ingest = ingest_service(service, cleanup, amqp.exchange, log_level="debug")
    n = 600
    done = threading.Event()
    stats = {"retries": 0}

    def publish_all():
        pub = None
        i = 0
        while i < n:
            try:
                if pub is None:
                    pub = Publisher()
                pub.publish(ingest, amqp.routing_key, f"br-{i}".encode(),
                            headers={"x-delay": 3000}, message_id=f"br-{i}")
                i += 1
                time.sleep(0.005)
            except Exception:  # broker away: publish the same message again
                stats["retries"] += 1
                if pub is not None:
                    pub.close()
                pub = None
                time.sleep(0.3)
        if pub is not None:
            pub.close()
        done.set()
    t = threading.Thread(target=publish_all, daemon=True)
    t.start()
    time.sleep(1.5)
    broker.stop_app()
    stopped = time.time()

    def ingest_down():
        st, _, body = svc.get("/readyz")
        return st == 503 and body.get("ingest") == "down"
    wait_until(ingest_down, 30, "/readyz to show ingest down")
    time.sleep(1.0)
    broker.start_app()
    restarted = time.time()
    amqp.wait_connected(60)
    wait_until(lambda: svc.get("/readyz").body.get("ingest") == "up", 60,
               "ingest to be up again")
    assert done.wait(120), "publisher did not finish"

    want = {f"br-{i}" for i in range(n)}
    def all_arrived():
        return want <= {m.body.decode() for m in amqp.snapshot()}
    wait_until(all_arrived, 90, f"all {n} messages at the target")
    got = amqp.snapshot()
    for m in got:
        assert m.received_at >= parse_ts(m.headers["x-scheduled-at"]) - 0.001
    jobs = jobs_where(svc, "source=amqp")
    mids = [j["properties"]["message_id"] for j in jobs]
    assert sorted(mids) == sorted(want), "a message was stored twice or not at all"
    _, dup = settled_counts(svc)
    report(f"amqp ingest broker restart: down {restarted - stopped:.1f} s, "
           f"{n} messages, none lost, each stored once ({dup} copies recognised, "
           f"{stats['retries']} publisher retries, "
           f"{len(got) - n} extra deliveries at the target)")


def test_frozen_broker_is_noticed_and_nothing_is_lost(cleanup, service, amqp_factory,
                                                      broker, report):
    # SIGSTOP of the node: nothing closes, nothing answers. The ingest
    # connection must notice through heartbeats and come back after.
    amqp = amqp_factory(durable=True)
    svc, ingest = ingest_service(service, cleanup, amqp.exchange, "--heartbeat-s", "2")
    pub = Publisher()
    try:
        for i in range(20):
            pub.publish(ingest, amqp.routing_key, f"fz-{i}".encode(),
                        headers={"x-delay": 5000}, message_id=f"fz-{i}")
    finally:
        pub.close()
    wait_until(lambda: len(jobs_where(svc, "source=amqp")) == 20, 20, "20 jobs stored")

    def ingest_is(state):
        return svc.get("/readyz").body.get("ingest") == state
    broker.freeze()
    frozen = time.time()
    try:
        wait_until(lambda: ingest_is("down"), 30, "/readyz to show ingest down")
        noticed = time.time() - frozen
        time.sleep(1.0)
    finally:
        broker.thaw()
    wait_until(lambda: ingest_is("up"), 60, "ingest to be up again")
    back = time.time() - frozen
    pub = Publisher()
    try:
        for i in range(20, 25):
            pub.publish(ingest, amqp.routing_key, f"fz-{i}".encode(),
                        headers={"x-delay": 500}, message_id=f"fz-{i}")
    finally:
        pub.close()
    want = {f"fz-{i}" for i in range(25)}
    amqp.wait_connected(60)
    wait_until(lambda: want <= {m.body.decode() for m in amqp.snapshot()}, 60,
               "all 25 messages at the target")
    mids = sorted(j["properties"]["message_id"] for j in jobs_where(svc, "source=amqp"))
    assert mids == sorted(want)
    report(f"amqp ingest, frozen broker (heartbeat 2 s): noticed after "
           f"{noticed:.1f} s, consuming again {back - noticed:.1f} s later; "
           f"none lost, each stored once")


@pytest.mark.sqlite_only(
    "a full disk is a tmpfs under the SQLite file; on postgres the like "
    "failure (a read-only or unreachable database) is the PostgreSQL "
    "store's own test")
def test_full_disk_keeps_messages_in_the_inbox(cleanup, service, amqp, tmp_path, report):
    # The database on a 2 MiB tmpfs with a 1 MiB filler (as in
    # test_disk_full.py, pylib.tmpfs) and a reserve the filler eats into: the
    # writer refuses (storage_full), so messages are nacked back to the inbox,
    # never acknowledged, and stored once space returns, without a restart.
    mnt = tmp_path / "tinyfs"
    filler = tmpfs.mount_filled(mnt)
    svc = None
    try:
        svc, ingest = ingest_service(service, cleanup, amqp.exchange,
                                     "--db", str(mnt / "rmqs.db"),
                                     "--min-free-bytes", "1200000")
        pub = Publisher()
        try:
            for i in range(20):
                pub.publish(ingest, amqp.routing_key, f"full-{i}".encode(),
                            headers={"x-delay": 200}, message_id=f"full-{i}")
        finally:
            pub.close()
        wait_until(lambda: "database trouble; pausing the inbox" in svc.log(), 20,
                   "the ingest to pause on the full database")
        time.sleep(2.0)
        assert not amqp.snapshot(), "a message was stored on a full disk?"
        assert not jobs_where(svc, "source=amqp")

        filler.unlink()
        freed = time.time()
        got = amqp.wait_for(20, timeout=60)
        time.sleep(0.5)
        got = amqp.snapshot()
        assert sorted(m.body.decode() for m in got) == sorted(f"full-{i}" for i in range(20))
        assert len(jobs_where(svc, "source=amqp")) == 20
        report(f"amqp ingest on a full disk: 20 messages kept in the inbox, all "
               f"delivered {max(m.received_at for m in got) - freed:.1f} s after "
               f"space returned")
    finally:
        stop_problem = tmpfs.release(mnt, svc)
    assert stop_problem is None, stop_problem


# --- stopping ------------------------------------------------------------------

def test_readyz_while_stopping_says_the_ingest_is_down(cleanup, service, amqp, report):
    # /readyz asks the ingest whether it consumes. A stop used to free the
    # ingest before the HTTP server had answered its last requests, so a
    # /readyz on a connection opened before SIGTERM read freed memory
    # (ThreadSanitizer reported it in CI). Connections held open through the
    # stop ask once the ingest has disconnected: each gets a clear 503 that
    # names the ingest (and closes), and the service exits 0 with no
    # sanitizer report (the harness checks the log at teardown).
    svc, _ = ingest_service(service, cleanup, amqp.exchange)
    conns = []
    for _ in range(20):
        c = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
        c.request("GET", "/readyz")
        r = c.getresponse()
        ready = json.loads(r.read())
        assert r.status == 200 and ready["ingest"] == "up", (r.status, ready)
        conns.append(c)
    mark = len(svc.log())
    os.kill(svc.pid, signal.SIGTERM)
    wait_until(lambda: 'module=ingest msg="disconnected"' in svc.log()[mark:],
               10, "the ingest to disconnect after SIGTERM", interval=0.002)
    answers = []
    for c in conns:
        try:
            c.request("GET", "/readyz")
            r = c.getresponse()
            answers.append((r.status, r.getheader("Connection"),
                            json.loads(r.read())))
        except (OSError, http.client.HTTPException) as e:
            answers.append((type(e).__name__, None, None))
        finally:
            c.close()
    code = svc.proc.wait(timeout=20)
    svc.exit_codes.append(code)
    answered = [a for a in answers if a[2] is not None]
    report(f"ingest: /readyz during the stop: {len(answered)} of {len(conns)} "
           f"held connections answered, exit {code}")
    assert code == 0, f"exit status {code} after SIGTERM, expected 0"
    assert answered, f"no held connection was answered during the stop: {answers}"
    for status, connection, body in answered:
        assert status == 503 and body["ingest"] == "down", (status, body)
        assert "ingest consumer" in body["error"]["message"], body
        assert connection == "close", connection


# --- rate -----------------------------------------------------------------------

def publish_pipelined(exchange, routing_key, n, body, props_for, window=1000,
                      timeout=120):
    """Publish n messages with confirms, up to window of them unconfirmed at
    once (pika's BlockingChannel waits for every confirm, which the broker
    gives after an fsync: ~150 msg/s). body: bytes, or body(i); the
    properties of message i are props_for(i)."""
    from pika.adapters.select_connection import SelectConnection
    st = {"sent": 0, "unconfirmed": set(), "nacked": 0, "done": False,
          "error": None}

    def pump():
        ch = st["ch"]
        while st["sent"] < n and len(st["unconfirmed"]) < window:
            i = st["sent"]
            ch.basic_publish(exchange, routing_key,
                             body(i) if callable(body) else body, props_for(i))
            st["sent"] += 1
            st["unconfirmed"].add(st["sent"])
        if st["sent"] == n and not st["unconfirmed"] and not st["done"]:
            st["done"] = True
            conn.close()

    def on_confirm(frame):
        m = frame.method
        if isinstance(m, pika.spec.Basic.Nack):
            st["nacked"] += 1
        if m.multiple:
            st["unconfirmed"] = {t for t in st["unconfirmed"] if t > m.delivery_tag}
        else:
            st["unconfirmed"].discard(m.delivery_tag)
        pump()

    def on_channel(ch):
        st["ch"] = ch
        ch.confirm_delivery(on_confirm, callback=lambda _frame: pump())

    def on_error(c, e):
        st["error"] = repr(e)
        c.ioloop.stop()

    def on_timeout():
        st["error"] = f"not done within {timeout} s"
        conn.close()

    conn = SelectConnection(amqp_params(env("RMQS_TEST_AMQP_URL")),
                            on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                            on_open_error_callback=on_error,
                            on_close_callback=lambda c, e: c.ioloop.stop())
    conn.ioloop.call_later(timeout, on_timeout)
    conn.ioloop.start()
    assert st["done"] and not st["error"] and not st["nacked"], st


def stored_rate(svc, n, timeout=120):
    """Poll rmqs_jobs_scheduled_total until it reaches n; the rate from the
    first poll that saw jobs to the one that saw n."""
    first = None
    deadline = time.monotonic() + timeout
    while True:
        v = metric(svc, "rmqs_jobs_scheduled_total", 0.0)
        now = time.monotonic()
        if first is None and v > 0:
            first = (now, v)
        if v >= n:
            return (n - first[1]) / (now - first[0]) if now > first[0] else float("inf")
        assert now < deadline, f"only {v:.0f} of {n} jobs stored in {timeout} s"
        time.sleep(0.02)


def test_ingest_rate(cleanup, service, amqp, report):
    n = 20000
    svc, ingest = ingest_service(service, cleanup, amqp.exchange)
    body = b"x" * 100

    def props(prefix):
        return lambda i: pika.BasicProperties(
            headers={"x-delay": 3_600_000, "tenant": "acme"},
            message_id=f"{prefix}-{i}", delivery_mode=2)

    # 1. live: published with confirms while the service ingests
    t0 = time.time()
    publish_pipelined(ingest, amqp.routing_key, n, body, props("live"))
    t_pub = time.time() - t0
    wait_until(lambda: metric(svc, "rmqs_jobs_scheduled_total", 0.0) >= n, 120,
               f"{n} jobs stored")
    t_live = time.time() - t0

    # 2. backlog: the inbox filled while the service is stopped, then drained
    svc.terminate()
    publish_pipelined(ingest, amqp.routing_key, n, body, props("backlog"))
    svc.restart()
    rate = stored_rate(svc, n)
    report(f"amqp ingest rate (persistent, 100-byte bodies, synchronous=full): "
           f"live {n / t_live:.0f} msg/s (published with confirms at "
           f"{n / t_pub:.0f} msg/s); draining a backlog of {n}: {rate:.0f} msg/s")
