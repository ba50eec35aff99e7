"""One client's job cannot cost other clients theirs (issue 21, items 1, 7).

- A user_id other than the broker login (RabbitMQ closes the publish
  channel for it, naming no job) is refused at the door: POST /schedule,
  each item of a batch, a schedule's template.
- A job the broker refuses by closing the channel with a reply that names
  no job (here a body over the node's max_message_size) costs only that
  job: the others in flight are not charged, the publisher sends them again
  one at a time until the broker's next close names its job by being alone.
  Measured: 200 good jobs + 1 poison due at one instant, max_attempts 1.
- The exchange allow-list holds on every path: a job stored before the list
  closed its exchange fails at publish time (never published), and run-now
  and retry of such a job are 403.
"""

import statistics
import time

import pytest

from helpers import assert_error, wait_until
from pylib.amqp import Consumer
from pylib.rabbit import RabbitNode
from pylib.times import format_ts_ms, ts_ms
from pylib.wait import free_port

MAX_MESSAGE = 65536


def now_ms():
    return int(time.time() * 1000)


# --- user_id at the door ------------------------------------------------------

def test_a_user_id_other_than_the_login_is_refused_at_the_door(service):
    svc = service()
    bad = {"exchange": "billing", "routing_key": "r", "body": "x",
           "delay_ms": 600000, "properties": {"user_id": "mallory"}}
    err = assert_error(svc.post("/schedule", bad), 400, "invalid_argument",
                       "properties.user_id")
    assert "'guest'" in err["message"], err
    ok = dict(bad, properties={"user_id": "guest"})
    svc.schedule(ok)
    for name in ("CC", "BCC"):  # RabbitMQ takes them only as lists
        cc = dict(bad, properties={}, headers={name: "billing.eu"})
        assert_error(svc.post("/schedule", cc), 400, "invalid_argument",
                     f"headers.{name}")

    good = {"exchange": "billing", "routing_key": "r", "body": "y",
            "delay_ms": 600000}
    st, _, body = svc.post("/schedule/batch", [good, bad, good])
    assert st == 400, body
    assert body["error"]["field"] == "jobs", body
    assert [(e["index"], e.get("field")) for e in body["errors"]] == \
        [(1, "properties.user_id")], body
    st, _, listed = svc.get("/jobs?limit=100")
    assert st == 200 and len(listed["jobs"]) == 1, "part of the batch was stored"

    template = {k: v for k, v in bad.items() if k != "delay_ms"}
    st, _, body = svc.request("PUT", "/schedules/poison", {
        "cron": "0 8 * * *", "job": template})
    assert st == 400 and body["error"]["field"] == "job.properties.user_id", body


# --- a close that names no job --------------------------------------------------

@pytest.fixture(scope="module")
def small_broker():
    """A private node whose max_message_size is 64 KiB: a larger body makes
    it close the publish channel with 406 and a reply naming no job."""
    node = RabbitNode("rmqs-poison")
    port = free_port()
    node.prepare(f"listeners.tcp.1 = 127.0.0.1:{port}\n"
                 f"max_message_size = {MAX_MESSAGE}\n", wait_ports=(port,))
    node.url = f"amqp://guest:guest@127.0.0.1:{port}/"
    try:
        node.launch()
        node.wait_up()
        yield node
    finally:
        node.stop()


def test_a_poison_job_in_a_burst_fails_alone_and_every_other_is_sent(
        service, small_broker, report):
    consumer = Consumer(small_broker.url).start()
    try:
        svc = service(amqp_url=small_broker.url)
        due = now_ms() + 3000
        n_good = 200
        job = {"exchange": consumer.exchange, "routing_key": consumer.routing_key,
               "deliver_at": format_ts_ms(due), "max_attempts": 1}
        items = [dict(job, body=f"good {i}") for i in range(n_good)]
        items.insert(n_good // 2, dict(job, body="p" * (MAX_MESSAGE + 4096)))
        st, _, body = svc.post("/schedule/batch", items)
        assert st == 201, body
        ids = [j["id"] for j in body["jobs"]]
        poison = ids.pop(n_good // 2)

        got = consumer.wait_for_jobs(ids, timeout=60)
        failed = svc.wait_status(poison, ("failed",), timeout=30)
        assert "larger than configured max size" in failed["last_error"], failed
        assert failed["attempts"] == 1, failed
        for i in ids:
            svc.wait_status(i, ("sent",), timeout=30)
        dupes = sum(len(m) - 1 for m in got.values())
        late = sorted(min(m.received_at for m in msgs) * 1000 - due
                      for msgs in got.values())
        found_ms = ts_ms(failed["updated_at"]) - due
        report(f"poison job on {svc.store}: {n_good} good + 1 over "
               f"max_message_size, max_attempts 1: {n_good}/{n_good} sent, the "
               f"poison failed {found_ms} ms after its due time, {dupes} "
               f"delivered twice (in flight at the close, sent again), "
               f"lateness of the good p50 {statistics.median(late):.1f} ms, "
               f"max {late[-1]:.1f} ms")
        assert "the close named no job" in svc.log()
        assert "publish attempt failed" not in svc.log(), \
            "a job other than the poison was charged an attempt"
        assert not consumer.errors or consumer.connects > 0
    finally:
        consumer.stop()


# --- the allow-list on every path -------------------------------------------------

def test_the_allow_list_holds_for_jobs_stored_before_it(service, amqp, broker):
    svc = service()
    later = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
             "body": "stored before the list"}
    due_soon = svc.schedule(dict(later, delay_ms=5000))
    parked = svc.schedule(dict(later, delay_ms=600000))
    noqueue = broker.declare_exchange()
    failed = svc.schedule({"exchange": noqueue, "routing_key": "nobody",
                           "body": "returned", "delay_ms": 0, "max_attempts": 1})
    svc.wait_status(failed["id"], ("failed",))
    svc.terminate()
    svc.args = ["--allow-exchanges", "billing"]
    svc.restart()

    for path in (f"/jobs/{parked['id']}/run", f"/jobs/{failed['id']}/retry"):
        err = assert_error(svc.post(path), 403, "forbidden", "exchange")
        assert "not in the allowed list" in err["message"], err
    assert svc.job(parked["id"])["status"] == "pending"
    assert svc.job(failed["id"])["status"] == "failed"

    j = svc.wait_status(due_soon["id"], ("failed", "sent"), timeout=30)
    assert j["status"] == "failed", j
    assert "--allow-exchanges" in j["last_error"], j
    wait_until(lambda: "job refused by the publish policy" in svc.log(), 10,
               "the publisher's log line")
    assert amqp.snapshot() == [], "a job of a closed exchange was published"

