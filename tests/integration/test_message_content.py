"""The published message carries the body, headers and properties exactly as
scheduled, plus the scheduler's own headers."""

import base64
import json
import time

from helpers import format_ts, ts_ms


def schedule_and_receive(svc, amqp, **fields):
    req = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
           "delay_ms": 100}
    req.update(fields)
    req = {k: v for k, v in req.items() if v is not None}  # None: leave out
    job = svc.schedule(req)
    got = amqp.wait_for_jobs([job["id"]], timeout=15)
    msgs = got[job["id"]]
    assert len(msgs) == 1
    return job, msgs[0]


def test_text_body_is_sent_as_utf8_bytes(service, amqp):
    svc = service()
    text = "héllo wörld ✓ \"quoted\" \\ and a\nnewline"
    job, msg = schedule_and_receive(svc, amqp, body=text)
    assert msg.body == text.encode("utf-8")
    assert job["body"] == text
    assert "body_base64" not in job


def test_json_body_is_sent_as_compact_json(service, amqp):
    svc = service()
    obj = {"order": 42, "items": [1, 2.5, {"sku": "A-1", "qty": 3}],
           "ok": True, "none": None, "name": "cafe"}
    job, msg = schedule_and_receive(svc, amqp, body=obj)
    assert json.loads(msg.body) == obj
    # compact: no whitespace between tokens (keys in the order given)
    compact = json.dumps(json.loads(msg.body), separators=(",", ":"),
                         ensure_ascii=False).encode()
    assert msg.body == compact, msg.body
    assert msg.properties.content_type == "application/json"
    assert job["body"] == obj


def test_json_array_body(service, amqp):
    svc = service()
    job, msg = schedule_and_receive(svc, amqp, body=[1, "two", [3]])
    assert msg.body == b'[1,"two",[3]]'
    assert msg.properties.content_type == "application/json"


def test_explicit_content_type_wins_over_json_default(service, amqp):
    svc = service()
    job, msg = schedule_and_receive(svc, amqp, body={"a": 1},
                                    properties={"content_type": "application/vnd.x+json"})
    assert msg.properties.content_type == "application/vnd.x+json"


def test_base64_body_with_binary_bytes_arrives_intact(service, amqp):
    svc = service()
    raw = bytes([0, 255, 254, 128, 10, 0]) + b"\xc3\x28 not utf-8" + bytes(range(256))
    b64 = base64.b64encode(raw).decode()
    job, msg = schedule_and_receive(svc, amqp, body_base64=b64)
    assert msg.body == raw
    assert job["body_base64"] == b64
    assert "body" not in job


def test_empty_base64_body(service, amqp):
    svc = service()
    job, msg = schedule_and_receive(svc, amqp, body_base64="")
    assert msg.body == b""


def test_headers_keep_their_types(service, amqp):
    svc = service()
    headers = {"s": "text ✓", "i": 42, "neg": -7, "big": 2**40, "f": 2.5,
               "t": True, "fa": False, "empty": ""}
    job, msg = schedule_and_receive(svc, amqp, body="h", headers=headers)
    for k, v in headers.items():
        assert k in msg.headers, f"header {k} missing: {msg.headers}"
        got = msg.headers[k]
        if isinstance(got, bytes):
            got = got.decode()
        assert got == v and type(got) is type(v), (k, got, v)
    assert job["headers"] == headers


def test_properties_arrive_intact(service, amqp):
    svc = service()
    props = {"content_type": "text/plain", "content_encoding": "identity",
             "correlation_id": "corr-123", "reply_to": "replies",
             "message_id": "msg-abc", "type": "order.created",
             "app_id": "rmqs-tests", "user_id": "guest", "priority": 7,
             "expiration": "60000", "persistent": False}
    job, msg = schedule_and_receive(svc, amqp, body="p", properties=props)
    p = msg.properties
    assert p.content_type == "text/plain"
    assert p.content_encoding == "identity"
    assert p.correlation_id == "corr-123"
    assert p.reply_to == "replies"
    assert p.message_id == "msg-abc"
    assert p.type == "order.created"
    assert p.app_id == "rmqs-tests"
    assert p.user_id == "guest"
    assert p.priority == 7
    assert p.expiration == "60000"
    assert p.delivery_mode == 1
    assert job["properties"] == props


def test_defaults_persistent_and_message_id_is_job_id(service, amqp):
    svc = service()
    job, msg = schedule_and_receive(svc, amqp, body="d")
    assert msg.properties.delivery_mode == 2
    assert msg.properties.message_id == job["id"]


def test_scheduler_headers(service, amqp):
    svc = service()
    job, msg = schedule_and_receive(svc, amqp, body="x", delay_ms=250,
                                    headers={"mine": "kept"})
    assert msg.headers["x-scheduler-job-id"] == job["id"]
    assert msg.headers["x-scheduled-at"] == job["deliver_at"]
    assert msg.headers["x-delay"] == -250
    assert msg.headers["mine"] == "kept"
    assert msg.routing_key == amqp.routing_key
    assert msg.exchange == amqp.exchange


def test_x_delay_of_deliver_at_form_is_the_requested_delay(service, amqp):
    svc = service()
    job, msg = schedule_and_receive(svc, amqp, body="x",
                                    deliver_at=format_ts(time.time() + 0.4),
                                    delay_ms=None)
    expected = ts_ms(job["deliver_at"]) - ts_ms(job["created_at"])
    assert 0 <= expected <= 400
    assert msg.headers["x-delay"] == -expected
