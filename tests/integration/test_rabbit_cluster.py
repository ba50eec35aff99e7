"""RabbitMQ node loss (issue 12, item 3): one service given the three nodes
of a private cluster (--amqp-url url1,url2,url3) and a quorum target queue.
While jobs fall due over a few seconds, the node the service is connected
to, which is also the quorum leader of the target queue and of the ingest
inbox, is (a) stopped gracefully, (b) killed with SIGKILL. The service must
move its publisher and its ingest to another node, deliver every
acknowledged job (HTTP 201, or an x-delay message the broker confirmed to
its publisher), none early, and only publish twice what it published
again after the loss (at least once: copies of a job <= its attempts).

Measured and reported: time from the loss to the publisher's and the
ingest's new connection, duplicates, jobs published again.
"""

import re
import threading
import time
import uuid

import pika
import pytest

from helpers import Consumer, amqp_params, format_ts, parse_ts, wait_until
from pylib.rabbit import RabbitCluster

INBOX_PREFIX = "rmq-scheduler.inbox."
QUORUM = {"x-queue-type": "quorum"}
HTTP_JOBS = 120     # due over the window, before and after the loss
INGEST_BEFORE = 30  # x-delay messages published before the loss
INGEST_AFTER = 15   # and after it, through a surviving node
WINDOW_S = 4.0      # jobs fall due from +1.5 s to +5.5 s
LOSS_AT_S = 3.0     # the node goes at +3 s


@pytest.fixture(scope="module")
def cluster():
    c = RabbitCluster().start()
    yield c
    c.stop()


def _heal(cluster):
    for i, node in enumerate(cluster.nodes):
        if not node.launched:
            cluster.restart_node(i)


def _log_events(svc, what):
    """(time.time(), port) of every `what` log line of svc ("connected" of
    the publisher, "consuming" of the ingest)."""
    out = []
    for line in svc.log().splitlines():
        if f'msg="{what}"' not in line:
            continue
        ts = re.match(r"(\S+) level=", line)
        port = re.search(r"url=amqps?://[^ ]*@[^ ]*:(\d+)/", line)
        if ts and port:
            out.append((parse_ts(ts.group(1)), int(port.group(1))))
    return out


def _declare_quorum(url, queue):
    conn = pika.BlockingConnection(amqp_params(url))
    try:
        conn.channel().queue_declare(queue, durable=True, arguments=QUORUM)
    finally:
        conn.close()


class _IngestPublisher:
    """x-delay messages with confirms, through one node."""

    def __init__(self, url, exchange):
        self.conn = pika.BlockingConnection(amqp_params(url))
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()
        self.exchange = exchange
        self.sent = {}  # tag -> (time.time() before the publish, delay_ms)

    def publish(self, tag, delay_ms):
        t = time.time()
        self.ch.basic_publish(
            self.exchange, "rk", f"ingest {tag}".encode(),
            pika.BasicProperties(delivery_mode=2, message_id=f"m-{tag}",
                                 headers={"x-delay": delay_ms, "tag": tag}),
            mandatory=True)  # returns only once the broker confirmed it
        self.sent[tag] = (t, delay_ms)

    def close(self):
        try:
            self.conn.close()
        except Exception:
            pass


def _node_loss(cluster, service, report, how):
    _heal(cluster)
    victim, survivor = 0, 2
    victim_port = cluster.ports[victim]
    ingest = f"rmqs-test-ingest-{uuid.uuid4().hex[:12]}"
    # Declared through the victim: it leads both quorum queues (the leader
    # goes where the declaring client is), the case of the 3.10 nack trap.
    amqp = Consumer(cluster.urls, durable=True, queue_arguments=QUORUM).start()
    _declare_quorum(cluster.urls[victim], INBOX_PREFIX + ingest)
    pub = None
    try:
        svc = service("--ingest", f"{ingest}={amqp.exchange}",
                      "--backoff-base-ms", "100", "--backoff-cap-ms", "500",
                      "--heartbeat-s", "2", amqp_url=cluster.url_list())
        wait_until(lambda: _log_events(svc, "consuming"), 20, "the ingest to consume")
        assert _log_events(svc, "connected")[-1][1] == victim_port
        assert _log_events(svc, "consuming")[-1][1] == victim_port
        pub = _IngestPublisher(cluster.urls[survivor], ingest)
        amqp.bind("rk")  # the ingest keeps the message's routing key

        t0 = time.time()
        loss_at = t0 + LOSS_AT_S
        jobs = []
        for i in range(HTTP_JOBS):
            due = t0 + 1.5 + WINDOW_S * i / HTTP_JOBS
            if due >= loss_at - 0.3:
                break  # the rest are posted after the loss
            jobs.append(svc.schedule({
                "exchange": amqp.exchange, "routing_key": amqp.routing_key,
                "body": f"http {i}",
                "deliver_at": format_ts(due)}))
        for i in range(INGEST_BEFORE):
            due_in = 1.5 + WINDOW_S * i / INGEST_BEFORE - (time.time() - t0)
            pub.publish(f"b{i}", max(100, int(due_in * 1000)))

        wait_until(lambda: time.time() >= loss_at, 10, "the moment of the loss")
        lost_at = time.time()
        if how == "stop":
            stopper = threading.Thread(target=cluster.stop_node, args=(victim,))
            stopper.start()
        else:
            cluster.kill_node(victim)
        # Clients keep going while the node goes: POSTs to the service, and
        # x-delay messages through a surviving node.
        k = len(jobs)
        for i in range(k, HTTP_JOBS):
            due = max(time.time() + 0.2, t0 + 1.5 + WINDOW_S * i / HTTP_JOBS)
            jobs.append(svc.schedule({
                "exchange": amqp.exchange, "routing_key": amqp.routing_key,
                "body": f"http {i}", "delay_ms": int((due - time.time()) * 1000)}))
        for i in range(INGEST_AFTER):
            pub.publish(f"a{i}", 300 + 100 * i)
        if how == "stop":
            stopper.join(60)

        # Every acknowledged job arrives, none early.
        got = amqp.wait_for_jobs([j["id"] for j in jobs], timeout=60)
        tags = set(pub.sent)
        wait_until(lambda: tags <= {m.headers.get("tag") for m in amqp.snapshot()},
                   60, f"{len(tags)} ingest messages to arrive")
        msgs = amqp.snapshot()
        due_of = {j["id"]: parse_ts(j["deliver_at"]) for j in jobs}
        for m in msgs:
            if m.job_id in due_of:
                assert m.received_at >= due_of[m.job_id] - 0.001, (m, due_of[m.job_id])
            else:
                t, delay = pub.sent[m.headers["tag"]]
                assert m.received_at >= t + delay / 1000 - 0.001, m
                assert m.received_at >= parse_ts(m.headers["x-scheduled-at"]) - 0.001

        # It moved on: the publisher and the ingest, to another node.
        conns = [e for e in _log_events(svc, "connected") if e[0] >= lost_at - 0.05]
        cons = [e for e in _log_events(svc, "consuming") if e[0] >= lost_at - 0.05]
        assert conns and conns[0][1] != victim_port, conns
        assert cons and cons[0][1] != victim_port, cons

        # Copies: only what was published again (attempts > 1) comes twice.
        copies = {}
        for m in msgs:
            copies[m.job_id] = copies.get(m.job_id, 0) + 1
        republished = 0
        for job_id, n in copies.items():
            final = svc.wait_status(job_id, "sent", timeout=20)
            assert n <= final["attempts"], (job_id, n, final)
            republished += final["attempts"] > 1
        dups = sum(n - 1 for n in copies.values())
        nacks = svc.log().count("the broker nacked a publish")
        report(f"rabbit node loss ({how}): publisher reconnected to "
               f":{conns[0][1]} {conns[0][0] - lost_at:.3f} s after the loss "
               f"(last connection, to :{conns[-1][1]}, at "
               f"{conns[-1][0] - lost_at:.3f} s; {nacks} nack-drops), "
               f"ingest to :{cons[0][1]} {cons[0][0] - lost_at:.3f} s; "
               f"{len(jobs)} HTTP + {len(tags)} x-delay jobs, 0 lost, 0 early, "
               f"{republished} published again, {dups} duplicates")
    finally:
        if pub is not None:
            pub.close()
        amqp.stop()
        _heal(cluster)


def test_graceful_node_stop_moves_on(cluster, service, report):
    _node_loss(cluster, service, report, "stop")


def test_killed_node_moves_on(cluster, service, report):
    _node_loss(cluster, service, report, "kill")
