"""tests/bench/poison.py - the poison job's cost (issue 21; bench.py --only
poison; run.sh --only poison).

A private RabbitMQ node whose max_message_size is 64 KiB (its own folder,
ports and epmd, tests/pylib/rabbit.py), the service on a fresh SQLite
database, a pika consumer on one queue. Twice, a burst of --poison-jobs
(20,000) jobs due at one instant, max_attempts 1, posted ahead in batches
of 1,000: once all good; once with one job in the middle whose body is
over the node's limit, which makes the broker close the publish channel
with a reply that names no job (406 PRECONDITION_FAILED - message size
...). The publisher charges nobody for such a close, publishes the jobs
that were in flight again one at a time, and the next close, with one job
in flight, is the culprit's (service/amqp/confirm_window.c).

Reported for each burst: how many good jobs were sent and delivered (and
delivered twice: in flight at the close, published again), lateness of the
good ones at the consumer (p50, p99, max, ms after the due instant), and
for the poison burst when the poison was marked failed (updated_at against
the due instant: how long the culprit search took).

Nothing here asserts: it is a benchmark; each step is bounded in time.
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# pylint: disable=wrong-import-position
from pylib.amqp import Consumer
from pylib.rabbit import RabbitNode
from pylib.times import format_ts_ms, ts_ms
from pylib.wait import free_port
import benchlib  # tests/bench: the runner's shared code

MAX_MESSAGE = 65536
LEAD_MS = 8000  # posting 20,000 jobs takes a few seconds


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def _burst(B, svc, consumer, n, poison):
    due = int(time.time() * 1000) + LEAD_MS
    job = {"exchange": consumer.exchange, "routing_key": consumer.routing_key,
           "deliver_at": format_ts_ms(due), "max_attempts": 1}
    items = [dict(job, body=f"good {i}") for i in range(n)]
    if poison:
        items[n // 2] = dict(job, body="p" * (MAX_MESSAGE + 4096))
    ids = []
    for at in range(0, n, 1000):
        st, _, body = svc.post("/schedule/batch", items[at:at + 1000], timeout=120)
        if st != 201:
            raise B.BenchError(f"POST /schedule/batch answered {st}: {body}")
        ids += [j["id"] for j in body["jobs"]]
    if int(time.time() * 1000) >= due:
        raise B.BenchError("posting the burst took longer than its lead")
    poison_id = ids.pop(n // 2) if poison else None
    want = set(ids)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if want <= {m.job_id for m in consumer.snapshot()}:
            break
        time.sleep(0.2)
    msgs = [m for m in consumer.snapshot() if m.job_id in want]
    first = {}
    for m in msgs:
        first[m.job_id] = min(first.get(m.job_id, m.received_at), m.received_at)
    late = [t * 1000 - due for t in first.values()]
    out = {"jobs": n, "delivered": len(first), "delivered_twice": len(msgs) - len(first),
           "late_p50_ms": round(statistics.median(late), 1) if late else None,
           "late_p99_ms": round(_pct(late, 0.99), 1) if late else None,
           "late_max_ms": round(max(late), 1) if late else None}
    if poison:
        j = svc.wait_status(poison_id, ("failed", "sent"), timeout=60)
        out["poison_status"] = j["status"]
        out["poison_failed_after_ms"] = ts_ms(j["updated_at"]) - due
        out["poison_error"] = (j.get("last_error") or "")[:100]
    st, _, counts = svc.get("/jobs/count?status=sent")
    out["sent"] = counts.get("count") if st == 200 else None
    return out


def scenario(b, _empty_svc):
    """bench.py's entry."""
    B = benchlib
    n = b.a.poison_jobs
    node = RabbitNode("rmqs-bench-poison")
    port = free_port()
    node.prepare(f"listeners.tcp.1 = 127.0.0.1:{port}\n"
                 f"max_message_size = {MAX_MESSAGE}\n", wait_ports=(port,))
    url = f"amqp://guest:guest@127.0.0.1:{port}/"
    out = {}
    consumer = None
    try:
        node.launch()
        node.wait_up()
        for poison in (False, True):
            name = "poison" if poison else "clean"
            svc = B.Service(b.a.bin, b.work, f"poison-{name}-{b.tag()}", url,
                            args=("--max-body-bytes", str(8 << 20)))
            b.services.append(svc)
            svc.start()
            consumer = Consumer(url).start()
            try:
                out[name] = _burst(B, svc, consumer, n, poison)
            finally:
                consumer.stop()
                svc.stop()
            B.log(f"poison: {name} burst of {n:,}: {json.dumps(out[name])}")
    finally:
        node.stop()
    return out


def table_rows(R, row):
    for name in ("clean", "poison"):
        r = R.get(name)
        if not r:
            continue
        scn = f"poison job ({name} burst of {r['jobs']:,})"
        row(scn, "good delivered / delivered twice",
            f"{r['delivered']} / {r['delivered_twice']}")
        row(scn, "good lateness p50 / p99 / max ms",
            f"{r['late_p50_ms']} / {r['late_p99_ms']} / {r['late_max_ms']}")
        if "poison_failed_after_ms" in r:
            row(scn, "poison failed after (ms past due)",
                f"{r['poison_failed_after_ms']} ({r['poison_status']})")


if __name__ == "__main__":
    sys.exit("run through tests/bench/run.sh --only poison")
