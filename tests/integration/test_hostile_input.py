"""Hostile and malformed input: every bad request gets its documented 4xx
with a JSON error {"error": {"code", "message"}} and changes nothing: the
jobs (GET /jobs) stay as they were and nothing reaches the queue that the
would-be jobs of this file are aimed at. Where libmicrohttpd itself refuses
a request (broken framing, oversized headers) the answer is its own 4xx
page, or the connection is closed; nothing is stored either way.

bad_requests.json (test_api_errors.py) has the basic cases; this file goes
beyond them: bytes that are not UTF-8 or hold NULs, numbers past int64 and
double, nesting, duplicate keys at every level, header tables AMQP cannot
carry, batches, and broken HTTP framing (truncated bodies, lying or
missing Content-Length, chunked bodies over the limit), which need raw
sockets. Cases that an ordinary client can send are data (CASES).

Would-be jobs are aimed at a real consumer's exchange and routing key with
delay_ms 0, so one wrongly accepted would be published at once: a control
job proves the route works, and test_nothing_was_published (last in the
file) checks that only the control arrived.
"""

import json
import select
import socket
import time

import pytest

from helpers import Consumer, assert_error, env
from pylib.http import post_chunked

MiB = 1024 * 1024


# --- a raw HTTP/1.1 client (for what http.client cannot send) ----------------

class RawResponse:
    def __init__(self, status, headers, body, elapsed, raw):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body
        self.elapsed = elapsed
        self.raw = raw

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<RawResponse {self.status} {self.raw[:300]!r}>"


def parse_response(buf):
    """(status, headers, body) of the first response in buf, or None if it
    is not complete yet."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if len(buf) < end + 4 + length:
        return None
    return status, headers, buf[end + 4:end + 4 + length]


def raw_exchange(port, data, timeout=5.0):
    """Send data on a fresh connection and read the first response (None if
    the server closed without one). Bounded by timeout."""
    t0 = time.monotonic()
    buf = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading it all
        while True:
            parsed = parse_response(buf)
            if parsed:
                return RawResponse(*parsed, time.monotonic() - t0, buf)
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                chunk = b""
            if not chunk:
                return None
            buf += chunk


def request_bytes(method, path, body=b"", headers=None, content_length=True):
    """An HTTP/1.1 request as bytes, Connection: close."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if content_length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# --- the module's service, consumer and control job ----------------------------

class Target:
    def __init__(self, svc, mq, control):
        self.svc = svc
        self.mq = mq
        self.control = control

    def fill(self, data):
        """Aim a case's bytes at the consumer: @X@ and @RK@ placeholders."""
        if data is None:
            return None
        return data.replace(b"@X@", self.mq.exchange.encode()) \
                   .replace(b"@RK@", self.mq.routing_key.encode())

    def job_count(self):
        return len(self.svc.list_all()[0])

    def assert_unchanged(self, what):
        jobs = self.svc.list_all()[0]
        assert [j["id"] for j in jobs] == [self.control["id"]], \
            f"{what}: jobs changed: {[(j['id'], j['routing_key']) for j in jobs]}"
        assert self.svc.get("/healthz").status == 200, f"{what}: service unhealthy"


@pytest.fixture(scope="module")
def hostile(module_service):
    mq = Consumer(env("RMQS_TEST_AMQP_URL")).start()
    try:
        svc = module_service()
        control = svc.schedule({"exchange": mq.exchange, "routing_key": mq.routing_key,
                                "body": "control", "delay_ms": 0})
        mq.wait_for(1)  # the route works: a job that slipped through would arrive
        yield Target(svc, mq, control)
    finally:
        mq.stop()


def job(rest):
    """A request body aimed at the consumer with the given extra members."""
    return b'{"exchange":"@X@","routing_key":"@RK@",' + rest + b"}"


OK = b'"body":"x","delay_ms":0'


def C(name, body, status=400, code="invalid_argument", field=None, message=None,
      method="POST", path="/schedule", content_type="application/json",
      allow=None, contract=True):
    """One case. contract=False: skip the api/openapi.yaml check of the
    answer (helpers.OpenApiContract reads any trailing-slash path as the
    documented one, while the service knows only /jobs/ as /jobs)."""
    return pytest.param(dict(body=body, status=status, code=code, field=field,
                             message=message, method=method, path=path,
                             content_type=content_type, allow=allow,
                             contract=contract), id=name)


def nested(depth):
    return b"[" * depth + b"1" + b"]" * depth


CASES = [
    # --- not JSON, or not the JSON this API reads
    C("NaN", job(b'"body":"x","delay_ms":NaN'), message="invalid JSON"),
    C("Infinity", job(b'"body":"x","delay_ms":Infinity'), message="invalid JSON"),
    C("single quotes", b"{'exchange':'@X@','routing_key':'@RK@','body':'x','delay_ms':0}",
      message="invalid JSON"),
    C("comment", job(OK + b" /* later */"), message="invalid JSON"),
    C("byte order mark", b"\xef\xbb\xbf" + job(OK), message="invalid JSON"),
    C("unterminated string", job(b'"body":"x,"delay_ms":0'), message="invalid JSON"),
    C("raw tab in a string", job(b'"body":"a\tb","delay_ms":0'), message="invalid JSON"),
    C("raw newline in a string", job(b'"body":"a\nb","delay_ms":0'), message="invalid JSON"),
    C("two objects", job(OK) + job(OK), message="invalid JSON"),
    C("only whitespace", b" \r\n\t ", message="invalid JSON"),
    # --- NUL: raw bytes and \u0000 escapes
    C("raw NUL in routing_key",
      b'{"exchange":"@X@","routing_key":"@RK@\x00","body":"x","delay_ms":0}',
      message="invalid JSON"),
    C("raw NUL in body string", job(b'"body":"a\x00b","delay_ms":0'), message="invalid JSON"),
    C("raw NUL between members", job(b'"body":"x",\x00"delay_ms":0'), message="invalid JSON"),
    C("raw NUL after the object", job(OK) + b"\x00", message="invalid JSON"),
    C("only NUL bytes", b"\x00" * 64, message="invalid JSON"),
    # jansson 2.14 alone skips a NUL right after a number or a literal
    C("raw NUL after a number", job(b'"body":"x","delay_ms":0\x00'), message="NUL byte"),
    C("raw NUL after true", job(OK + b',"properties":{"persistent":true\x00}'),
      message="NUL byte"),
    C("escaped NUL in routing_key",
      b'{"exchange":"@X@","routing_key":"@RK@\\u0000","body":"x","delay_ms":0}',
      message="invalid JSON"),
    C("escaped NUL in exchange",
      b'{"exchange":"@X@\\u0000","routing_key":"@RK@","body":"x","delay_ms":0}',
      message="invalid JSON"),
    C("escaped NUL in body", job(b'"body":"\\u0000","delay_ms":0'), message="invalid JSON"),
    C("escaped NUL in a JSON body key", job(b'"body":{"a\\u0000":1},"delay_ms":0'),
      message="invalid JSON"),
    C("escaped NUL in a header name", job(OK + b',"headers":{"a\\u0000b":"v"}'),
      message="invalid JSON"),
    C("escaped NUL in a header value", job(OK + b',"headers":{"h":"v\\u0000"}'),
      message="invalid JSON"),
    C("escaped NUL in a property", job(OK + b',"properties":{"message_id":"m\\u0000"}'),
      message="invalid JSON"),
    # --- not UTF-8
    C("byte 0xff in routing_key",
      b'{"exchange":"@X@","routing_key":"@RK@\xff","body":"x","delay_ms":0}',
      message="invalid JSON"),
    C("overlong encoding", job(b'"body":"\xc0\xaf","delay_ms":0'), message="invalid JSON"),
    C("UTF-8 encoded surrogate", job(b'"body":"\xed\xa0\x80","delay_ms":0'),
      message="invalid JSON"),
    C("above U+10FFFF", job(b'"body":"\xf4\x90\x80\x80","delay_ms":0'), message="invalid JSON"),
    C("truncated sequence", job(b'"body":"\xe2\x82","delay_ms":0'), message="invalid JSON"),
    C("lone continuation byte", job(b'"body":"\x80","delay_ms":0'), message="invalid JSON"),
    C("latin-1 header name", job(OK + b',"headers":{"caf\xe9":"v"}'), message="invalid JSON"),
    C("latin-1 unknown key", job(OK + b',"\xe9":1'), message="invalid JSON"),
    C("lone high surrogate escape", job(b'"body":"\\ud800","delay_ms":0'), message="invalid JSON"),
    C("lone low surrogate escape", job(b'"body":"\\udc00","delay_ms":0'), message="invalid JSON"),
    C("reversed surrogate pair", job(b'"body":"\\ude00\\ud83d","delay_ms":0'),
      message="invalid JSON"),
    # jansson's error text quotes the input and can cut a character in two
    C("bad escape before a 2-byte character", job(b'"body":"\\u00e\xcf\x87","delay_ms":0'),
      message="invalid JSON"),
    C("bad escape before a 4-byte character", job(b'"body":"\\u0\xf0\x9f\x98\x80","delay_ms":0'),
      message="invalid JSON"),
    # --- numbers past int64 / double, and at their edges
    C("delay_ms 2^63", job(b'"body":"x","delay_ms":9223372036854775808'), message="invalid JSON"),
    C("delay_ms -2^63-1", job(b'"body":"x","delay_ms":-9223372036854775809'),
      message="invalid JSON"),
    C("delay_ms 1e400", job(b'"body":"x","delay_ms":1e400'), message="invalid JSON"),
    C("delay_ms -1e400", job(b'"body":"x","delay_ms":-1e400'), message="invalid JSON"),
    C("delay_ms of 400 digits", job(b'"body":"x","delay_ms":' + b"9" * 400),
      message="invalid JSON"),
    C("header value 2^64", job(OK + b',"headers":{"n":18446744073709551616}'),
      message="invalid JSON"),
    C("number 1e999 in a JSON body", job(b'"body":[1e999],"delay_ms":0'), message="invalid JSON"),
    C("delay_ms int64 max", job(b'"body":"x","delay_ms":9223372036854775807'), field="delay_ms",
      message="beyond the scheduling horizon"),
    C("delay_ms int64 min", job(b'"body":"x","delay_ms":-9223372036854775808'), field="delay_ms",
      message="must not be negative"),
    C("delay_ms -0.0", job(b'"body":"x","delay_ms":-0.0'), field="delay_ms",
      message="must be an integer"),
    C("delay_ms 1e3", job(b'"body":"x","delay_ms":1e3'), field="delay_ms",
      message="must be an integer"),
    C("max_attempts int64 max", job(OK + b',"max_attempts":9223372036854775807'),
      field="max_attempts"),
    C("max_attempts int64 min", job(OK + b',"max_attempts":-9223372036854775808'),
      field="max_attempts"),
    C("priority int64 max", job(OK + b',"properties":{"priority":9223372036854775807}'),
      field="properties.priority"),
    C("expiration 20 digits", job(OK + b',"properties":{"expiration":"99999999999999999999"}'),
      field="properties.expiration"),
    C("deliver_at leaves year 0001 through its offset", job(
        b'"body":"x","deliver_at":"0001-01-01T00:00:00+01:00"'), field="deliver_at",
      message="not an RFC 3339 timestamp"),
    C("deliver_at leaves year 9999 through its offset", job(
        b'"body":"x","deliver_at":"9999-12-31T23:59:59-01:00"'), field="deliver_at"),
    C("deliver_at year 10000", job(b'"body":"x","deliver_at":"10000-01-01T00:00:00Z"'),
      field="deliver_at"),
    # --- wrong types, beyond bad_requests.json
    C("exchange an array", b'{"exchange":["@X@"],"routing_key":"@RK@","body":"x","delay_ms":0}',
      field="exchange"),
    C("exchange an object",
      b'{"exchange":{"name":"@X@"},"routing_key":"@RK@","body":"x","delay_ms":0}',
      field="exchange"),
    C("routing_key a number", b'{"exchange":"@X@","routing_key":42,"body":"x","delay_ms":0}',
      field="routing_key"),
    C("routing_key null", b'{"exchange":"@X@","routing_key":null,"body":"x","delay_ms":0}',
      field="routing_key"),
    C("body null", job(b'"body":null,"delay_ms":0'), field="body"),
    C("delay_ms true", job(b'"body":"x","delay_ms":true'), field="delay_ms"),
    C("delay_ms an array", job(b'"body":"x","delay_ms":[5]'), field="delay_ms"),
    C("delay_ms an object", job(b'"body":"x","delay_ms":{"ms":5}'), field="delay_ms"),
    C("deliver_at null", job(b'"body":"x","deliver_at":null'), field="deliver_at"),
    C("deliver_at an object", job(b'"body":"x","deliver_at":{}'), field="deliver_at"),
    C("headers a string", job(OK + b',"headers":"a=b"'), field="headers"),
    C("headers an array of pairs", job(OK + b',"headers":[["a","b"]]'), field="headers"),
    C("max_attempts true", job(OK + b',"max_attempts":true'), field="max_attempts"),
    C("max_attempts 2.5", job(OK + b',"max_attempts":2.5'), field="max_attempts"),
    C("priority 1.5", job(OK + b',"properties":{"priority":1.5}'), field="properties.priority"),
    C("body_base64 an array", job(b'"body_base64":["eA=="],"delay_ms":0'), field="body_base64"),
    # --- duplicate keys, at every level
    C("duplicate routing_key",
      b'{"exchange":"@X@","routing_key":"@RK@","routing_key":"@RK@","body":"x","delay_ms":0}',
      message="duplicate"),
    C("duplicate delay_ms", job(b'"body":"x","delay_ms":0,"delay_ms":0'), message="duplicate"),
    C("duplicate header", job(OK + b',"headers":{"h":"1","h":"2"}'), message="duplicate"),
    C("duplicate property", job(OK + b',"properties":{"type":"a","type":"b"}'),
      message="duplicate"),
    C("duplicate key deep in a JSON body", job(b'"body":{"a":[{"k":1,"k":2}]},"delay_ms":0'),
      message="duplicate"),
    # --- unknown fields
    C("unknown field Body", job(b'"Body":"x","delay_ms":0'), field="Body"),
    C("unknown field __proto__", job(OK + b',"__proto__":{"admin":true}'), field="__proto__"),
    C("unknown field delay", job(b'"body":"x","delay":0'), field="delay"),
    C("unknown field of 1000 bytes", job(OK + b',"' + b"k" * 1000 + b'":1'), message="unknown"),
    C("unknown property headers", job(OK + b',"properties":{"headers":{"a":"b"}}'),
      field="properties.headers"),
    # --- nesting
    C("JSON body nested 33 deep", job(b'"delay_ms":0,"body":' + nested(33)), field="body",
      message="too deeply nested"),
    C("JSON body of objects nested 33 deep", job(
        b'"delay_ms":0,"body":' + b'{"a":' * 33 + b"1" + b"}" * 33), field="body",
      message="too deeply nested"),
    C("JSON body nested 2000 deep", job(b'"delay_ms":0,"body":' + nested(2000)), field="body",
      message="too deeply nested"),
    C("JSON nested past the parser's limit", job(b'"delay_ms":0,"body":' + nested(5000)),
      message="invalid JSON"),
    C("deep nesting in an unknown field", job(OK + b',"extra":' + nested(1000)), field="extra"),
    C("header value nested", job(OK + b',"headers":{"h":' + nested(50) + b"}"), field="headers.h"),
    # --- base64
    C("base64 url-safe alphabet", job(b'"body_base64":"-_-_","delay_ms":0'), field="body_base64"),
    C("base64 with a newline", job(b'"body_base64":"Zm9v\\nYmFy","delay_ms":0'),
      field="body_base64"),
    C("base64 non-zero padding bits", job(b'"body_base64":"QR==","delay_ms":0'),
      field="body_base64"),
    C("base64 padding in the middle", job(b'"body_base64":"Zg==Zg==","delay_ms":0'),
      field="body_base64"),
    C("base64 three padding characters", job(b'"body_base64":"Z===","delay_ms":0'),
      field="body_base64"),
    C("base64 only padding", job(b'"body_base64":"====","delay_ms":0'), field="body_base64"),
    C("base64 non-ASCII", job(b'"body_base64":"Zm9v\xe2\x82\xac","delay_ms":0'),
      field="body_base64"),
    # --- AMQP short strings and header tables
    C("routing key of 255 two-byte characters", b'{"exchange":"@X@","routing_key":"'
      + "\u00e9".encode() * 255 + b'","body":"x","delay_ms":0}', field="routing_key"),
    C("exchange of 256 bytes", b'{"exchange":"' + b"x" * 256
      + b'","routing_key":"@RK@","body":"x","delay_ms":0}', field="exchange"),
    C("exchange with a newline",
      b'{"exchange":"@X@\\n","routing_key":"@RK@","body":"x","delay_ms":0}',
      field="exchange"),
    C("header name of 256 bytes", job(OK + b',"headers":{"' + b"h" * 256 + b'":"v"}'),
      field="headers"),
    C("one header of 70000 bytes", job(OK + b',"headers":{"h":"' + b"v" * 70000 + b'"}'),
      field="headers", message="more than 65536"),
    C("128 headers of 600 bytes", job(OK + b',"headers":{' + b",".join(
        b'"h%03d":"%s"' % (i, b"v" * 600) for i in range(128)) + b"}"),
      field="headers", message="more than 65536"),
    C("reply_to of 256 bytes", job(OK + b',"properties":{"reply_to":"' + b"r" * 256 + b'"}'),
      field="properties.reply_to"),
    # --- content types
    C("content type application/jsonx", job(OK), status=415, code="unsupported_media_type",
      content_type="application/jsonx"),
    C("content type text/json", job(OK), status=415, code="unsupported_media_type",
      content_type="text/json"),
    C("content type application/json-seq", job(OK), status=415,
      code="unsupported_media_type", content_type="application/json-seq"),
    C("content type multipart", job(OK), status=415, code="unsupported_media_type",
      content_type="multipart/form-data; boundary=x"),
    C("content type empty", job(OK), status=415, code="unsupported_media_type",
      content_type=""),
    C("content type application/ json", job(OK), status=415, code="unsupported_media_type",
      content_type="application/ json"),
    C("batch with text/plain", b"[" + job(OK) + b"]", status=415,
      code="unsupported_media_type", path="/schedule/batch", content_type="text/plain"),
    # --- unknown paths
    C("GET /", None, status=404, code="not_found", method="GET", path="/"),
    C("POST /schedule/", job(OK), status=404, code="not_found", path="/schedule/",
      contract=False),
    C("POST /schedule/batch/", b"[" + job(OK) + b"]", status=404, code="not_found",
      path="/schedule/batch/", contract=False),
    C("POST /schedule/now", job(OK), status=404, code="not_found", path="/schedule/now"),
    C("POST /SCHEDULE", job(OK), status=404, code="not_found", path="/SCHEDULE"),
    C("POST //schedule", job(OK), status=404, code="not_found", path="//schedule"),
    C("GET /jobs/{id}/", None, status=404, code="not_found", method="GET",
      path="/jobs/{job_id}/"),
    C("GET /jobs//", None, status=404, code="not_found", method="GET", path="/jobs//"),
    C("GET /healthz/", None, status=404, code="not_found", method="GET", path="/healthz/",
      contract=False),
    C("GET a 4000-byte path", None, status=404, code="not_found", method="GET",
      path="/jobs/" + "a" * 4000),
    # --- methods
    C("PATCH /schedule", job(OK), status=405, code="method_not_allowed", method="PATCH",
      allow={"POST"}),
    C("DELETE /schedule", None, status=405, code="method_not_allowed", method="DELETE",
      allow={"POST"}),
    C("OPTIONS /schedule", None, status=405, code="method_not_allowed", method="OPTIONS",
      allow={"POST"}),
    C("made-up method BREW /schedule", job(OK), status=405, code="method_not_allowed",
      method="BREW", allow={"POST"}),
    C("GET /schedule/batch", None, status=405, code="method_not_allowed", method="GET",
      path="/schedule/batch", allow={"POST"}),
    C("PUT /schedule/batch", b"[" + job(OK) + b"]", status=405, code="method_not_allowed",
      method="PUT", path="/schedule/batch", allow={"POST"}),
    C("POST /jobs", job(OK), status=405, code="method_not_allowed", path="/jobs",
      allow={"GET"}),
    C("PUT /jobs/{id}", job(OK), status=405, code="method_not_allowed", method="PUT",
      path="/jobs/{job_id}", allow={"GET", "PATCH", "DELETE"}),
    C("TRACE /jobs", None, status=405, code="method_not_allowed", method="TRACE",
      path="/jobs", allow={"GET"}),
    C("POST /readyz", None, status=405, code="method_not_allowed", path="/readyz",
      allow={"GET"}),
    C("DELETE /healthz", None, status=405, code="method_not_allowed", method="DELETE",
      path="/healthz", allow={"GET"}),
    # --- PATCH bodies are held to the same rules
    C("PATCH with NUL", b'{"delay_ms":1\x00}', method="PATCH", path="/jobs/{job_id}",
      message="invalid JSON"),
    C("PATCH with invalid UTF-8", b'{"deliver_at":"\xff"}', method="PATCH",
      path="/jobs/{job_id}", message="invalid JSON"),
    C("PATCH delay_ms int64 max", b'{"delay_ms":9223372036854775807}', method="PATCH",
      path="/jobs/{job_id}", field="delay_ms"),
    C("PATCH delay_ms 2^63", b'{"delay_ms":9223372036854775808}', method="PATCH",
      path="/jobs/{job_id}", message="invalid JSON"),
    C("PATCH duplicate delay_ms", b'{"delay_ms":1,"delay_ms":2}', method="PATCH",
      path="/jobs/{job_id}", message="duplicate"),
    C("PATCH bad escape before a 2-byte character", b'{"deliver_at":"\\u00e\xcf\x87"}',
      method="PATCH", path="/jobs/{job_id}", message="invalid JSON"),
]


@pytest.mark.parametrize("case", CASES)
def test_hostile_request(hostile, case):
    svc = hostile.svc
    path = case["path"].replace("{job_id}", hostile.control["id"])
    headers = {"Content-Type": case["content_type"] if case["body"] is not None else None}
    resp = svc.request(case["method"], path, hostile.fill(case["body"]), headers=headers,
                       check_contract=case["contract"])
    err = assert_error(resp, case["status"], case["code"], case["field"])
    if case["message"]:
        assert case["message"] in err["message"], err
    if "field" in err:
        assert isinstance(err["field"], str) and err["field"], err
    if case["allow"]:
        allow = {m.strip() for m in (resp.headers.get("Allow") or "").split(",")}
        assert case["allow"] <= allow, f"Allow: {resp.headers.get('Allow')}"
        assert case["method"] not in allow
    hostile.assert_unchanged(case["method"] + " " + case["path"])


def test_long_non_ascii_names_give_a_400_with_its_field(hostile):
    """A header, property or field name of multi-byte characters, long
    enough that the error's field is cut: still a 400 whose field and message
    are valid UTF-8 (it used to be a 500 "out of memory", or lose "field")."""
    svc = hostile.svc
    for extra, prefix in (({"headers": {"\u00e9" * 127 + "a": None}}, "headers."),
                          ({"headers": {"\U0001F600" * 63 + "abc": [1]}}, "headers."),
                          ({"properties": {"\u00e9" * 127 + "a": 1}}, "properties."),
                          ({"\u00e9" * 40: 1}, "")):
        body = dict({"exchange": hostile.mq.exchange, "routing_key": hostile.mq.routing_key,
                     "body": "x", "delay_ms": 0}, **extra)
        raw = json.dumps(body, ensure_ascii=False).encode()
        err = assert_error(svc.post("/schedule", raw), 400, "invalid_argument")
        assert err.get("field", "").startswith(prefix) and len(err["field"]) > len(prefix), err
    hostile.assert_unchanged("non-ASCII names")


# --- batches ------------------------------------------------------------------

def batch_item(hostile, **extra):
    return dict({"exchange": hostile.mq.exchange, "routing_key": hostile.mq.routing_key,
                 "body": "x", "delay_ms": 0}, **extra)


def post_batch(hostile, items, headers=None):
    status, hdrs, body = hostile.svc.post("/schedule/batch", items, headers=headers)
    assert status == 400, (status, body)
    assert hdrs.get_content_type() == "application/json"
    assert body["error"]["code"] == "invalid_argument", body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


def test_batch_with_bad_items_lists_them_and_stores_nothing(hostile):
    items = [batch_item(hostile, body=f"item {i}") for i in range(7)]
    items[1]["delay_ms"] = -1
    items[3] = 42
    items[4]["body"] = json.loads(nested(40).decode())
    items[6]["headers"] = {"\u00e9" * 127 + "a": None}  # cut field: still listed
    body = post_batch(hostile, items)
    errors = body["errors"]
    assert [e["index"] for e in errors] == [1, 3, 4, 6], errors
    assert [e.get("field", "") for e in errors[:3]] == ["delay_ms", "", "body"], errors
    assert errors[3]["field"].startswith("headers.")
    assert body["error"]["message"].startswith("4 of 7 jobs are invalid"), body
    hostile.assert_unchanged("batch with bad items")


def test_batch_of_1001_is_refused(hostile):
    body = post_batch(hostile, [batch_item(hostile) for _ in range(1001)])
    assert "1000" in body["error"]["message"], body
    hostile.assert_unchanged("batch of 1001")


@pytest.mark.parametrize("items", [[], {"jobs": []}, "[]", None, [[]], [None]],
                         ids=["empty", "object", "string", "null", "nested array",
                              "null item"])
def test_batch_that_is_not_a_list_of_jobs_is_refused(hostile, items):
    status, _, body = hostile.svc.post("/schedule/batch", json.dumps(items))
    assert status == 400 and body["error"]["code"] == "invalid_argument", body
    hostile.assert_unchanged("batch not a list of jobs")


def test_batch_error_list_is_capped(hostile):
    body = post_batch(hostile, [batch_item(hostile, delay_ms=-1) for _ in range(60)])
    assert len(body["errors"]) == 50, len(body["errors"])
    assert body["error"]["message"].startswith("60 of 60"), body
    hostile.assert_unchanged("batch of 60 bad items")


def test_batch_with_one_bad_item_among_1000_stores_nothing(hostile):
    items = [batch_item(hostile, body=f"{i}") for i in range(1000)]
    items[999]["properties"] = {"priority": 256}
    body = post_batch(hostile, items)
    assert [(e["index"], e["field"]) for e in body["errors"]] == \
        [(999, "properties.priority")], body["errors"]
    hostile.assert_unchanged("batch of 1000 with one bad item")


def test_batch_with_idempotency_key_is_refused(hostile):
    body = post_batch(hostile, [batch_item(hostile)], headers={"Idempotency-Key": "k1"})
    assert body["error"].get("field") == "Idempotency-Key", body
    hostile.assert_unchanged("batch with Idempotency-Key")


# POST /schedule/batch parses its body in http_jobs.c, not through job.c: the
# same two traps, on a service of their own (a job wrongly stored there must
# not disturb the module's checks).

def test_batch_refuses_a_nul_byte_after_a_number(service):
    """jansson 2.14 skips a raw NUL right after a number or literal; the
    batch endpoint must refuse it as POST /schedule and PATCH do."""
    svc = service()
    body = b'[{"exchange":"ex","routing_key":"rk","body":"x","delay_ms":3600000\x00}]'
    assert_error(svc.post("/schedule/batch", body), 400, "invalid_argument")
    assert svc.list_all()[0] == []


def test_batch_invalid_json_with_a_cut_character_is_a_400(service):
    """jansson's error text quotes the input near the error and can cut a
    multi-byte character: the answer must still be a 400 with valid JSON,
    not a 500 "out of memory"."""
    svc = service()
    body = b'[{"exchange":"ex","routing_key":"rk","body":"\\u00e\xcf\x87","delay_ms":0}]'
    err = assert_error(svc.post("/schedule/batch", body), 400, "invalid_argument")
    assert err["message"].startswith("invalid JSON"), err
    assert svc.list_all()[0] == []


# --- broken HTTP framing (raw sockets) ------------------------------------------

def valid_job_bytes(hostile):
    return hostile.fill(job(OK))


def test_truncated_bodies_store_nothing(hostile):
    """Content-Length larger than what is sent, then the client goes away:
    nothing is stored, even when the bytes that did arrive are a complete,
    valid job."""
    port = hostile.svc.port
    whole = valid_job_bytes(hostile)
    for sent, announced in ((whole[:20], len(whole)), (whole, len(whole) + 1),
                            (whole, 1000), (b"", 10)):
        data = request_bytes("POST", "/schedule", sent,
                             {"Content-Type": "application/json",
                              "Content-Length": announced}, content_length=False)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(data)
            time.sleep(0.2)  # let the service read what there is
        time.sleep(0.3)
        hostile.assert_unchanged(f"{len(sent)} of {announced} bytes then close")


def test_content_length_shorter_than_the_body(hostile):
    """Only Content-Length bytes are the body: a valid job cut there is
    invalid JSON; the bytes after it are not a request of ours."""
    whole = valid_job_bytes(hostile)
    data = request_bytes("POST", "/schedule", whole,
                         {"Content-Type": "application/json", "Content-Length": 10},
                         content_length=False)
    resp = raw_exchange(hostile.svc.port, data)
    assert resp is not None and resp.status == 400, resp
    assert resp.json()["error"]["code"] == "invalid_argument", resp
    time.sleep(0.3)
    hostile.assert_unchanged("Content-Length shorter than the body")


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "0x10", "99999999999999999999999"])
def test_malformed_content_length_is_refused(hostile, length):
    """libmicrohttpd answers these itself (400 or 413, not our JSON error)."""
    data = request_bytes("POST", "/schedule", valid_job_bytes(hostile),
                         {"Content-Type": "application/json", "Content-Length": length},
                         content_length=False)
    resp = raw_exchange(hostile.svc.port, data)
    assert resp is None or resp.status in (400, 413), resp
    hostile.assert_unchanged(f"Content-Length {length}")


def test_malformed_chunked_encoding_is_refused(hostile):
    whole = valid_job_bytes(hostile)
    for chunks in (b"zz\r\n" + whole + b"\r\n0\r\n\r\n",           # size not hex
                   b"%x\r\n" % (len(whole) + 5) + whole + b"\r\n0\r\n\r\n",  # size lies
                   b"%x\r\n" % len(whole) + whole + b"XX0\r\n\r\n"):     # no CRLF after data
        data = request_bytes("POST", "/schedule", chunks,
                             {"Content-Type": "application/json",
                              "Transfer-Encoding": "chunked"}, content_length=False)
        resp = raw_exchange(hostile.svc.port, data, timeout=3)
        assert resp is None or 400 <= resp.status < 500, resp
        time.sleep(0.2)
        hostile.assert_unchanged(f"chunked {chunks[:8]!r}")


def test_announced_100_mb_body_gets_413_without_being_read(hostile):
    """Content-Length 100 MB over the default 1 MiB limit, and only 64 KiB
    sent: the 413 comes at once, without waiting for (or reading) the rest."""
    head = request_bytes("POST", "/schedule", b"",
                         {"Content-Type": "application/json",
                          "Content-Length": 100 * 1000 * 1000}, content_length=False)
    with socket.create_connection(("127.0.0.1", hostile.svc.port), timeout=5) as s:
        t0 = time.monotonic()
        s.sendall(head + b'{"exchange":"' + b"x" * (64 * 1024))
        buf = b""
        parsed = None
        while parsed is None and time.monotonic() - t0 < 5:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
            parsed = parse_response(buf)
        elapsed = time.monotonic() - t0
    assert parsed is not None, f"no answer, got {buf[:200]!r}"
    status, headers, body = parsed
    assert status == 413, buf[:300]
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    assert elapsed < 2.0, f"413 after {elapsed:.2f} s"
    hostile.assert_unchanged("100 MB announced")


def test_chunked_body_over_the_default_limit_is_413(hostile):
    """2 MiB sent chunked (no Content-Length to refuse up front) against the
    default 1 MiB limit: 413 with a JSON error once the body ends."""
    head = valid_job_bytes(hostile)[:-1] + b',"pad":"'
    chunks = [head] + [b"p" * 65536] * 32 + [b'"}']
    status, raw = post_chunked(hostile.svc.port, "/schedule", chunks, timeout=30)
    assert status == 413, (status, raw[:300])
    assert json.loads(raw)["error"]["code"] == "payload_too_large"
    hostile.assert_unchanged("2 MiB chunked")


def test_endless_chunked_body_is_cut_off(hostile, report):
    """A chunked body that never ends: once past the limit the service must
    stop taking it within a bound (answer 413, or close the connection), not
    read and discard it for as long as the client cares to send."""
    sock = socket.create_connection(("127.0.0.1", hostile.svc.port), timeout=2)
    head = request_bytes("POST", "/schedule", b"",
                         {"Content-Type": "application/json",
                          "Transfer-Encoding": "chunked"}, content_length=False)
    chunk = b"%x\r\n" % 65536 + b"x" * 65536 + b"\r\n"
    budget_bytes, budget_s = 256 * MiB, 10.0
    sent, outcome = 0, None
    t0 = time.monotonic()
    try:
        sock.sendall(head)
        while sent < budget_bytes and time.monotonic() - t0 < budget_s:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                data = sock.recv(65536)
                outcome = ("answered", data) if data else ("closed", b"")
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                outcome = ("closed", b"")
                break
            except socket.timeout:
                outcome = ("stopped reading", b"")
                break
            sent += len(chunk)
        if outcome and outcome[0] == "stopped reading":
            sock.settimeout(5)
            try:
                data = sock.recv(65536)
                outcome = ("answered", data) if data else ("closed", b"")
            except (socket.timeout, ConnectionResetError):
                pass
    finally:
        sock.close()
    elapsed = time.monotonic() - t0
    report(f"hostile: endless chunked body: {sent / MiB:.0f} MiB sent in {elapsed:.1f} s, "
           f"outcome {outcome[0] if outcome else 'still reading'}")
    assert outcome is not None, (
        f"the service kept reading a chunked body over its 1 MiB limit: "
        f"{sent / MiB:.0f} MiB in {elapsed:.1f} s and it neither answered nor closed")
    if outcome[0] == "answered":
        assert outcome[1].startswith(b"HTTP/1.1 413"), outcome[1][:200]
    hostile.assert_unchanged("endless chunked body")


def test_oversized_header_section_and_url_are_refused(hostile):
    """libmicrohttpd's own limits (its 32 KiB connection memory): 431 for a
    huge header, 414 for a huge URL; nothing stored, still serving."""
    body = valid_job_bytes(hostile)
    data = request_bytes("POST", "/schedule", body,
                         {"Content-Type": "application/json", "X-Pad": "p" * 100_000})
    resp = raw_exchange(hostile.svc.port, data)
    assert resp is None or resp.status in (413, 431), resp
    data = request_bytes("POST", "/schedule?" + "q" * 50_000, body,
                         {"Content-Type": "application/json"})
    resp = raw_exchange(hostile.svc.port, data)
    assert resp is None or resp.status in (413, 414, 431), resp
    hostile.assert_unchanged("oversized header and URL")


def test_garbage_instead_of_http(hostile):
    for data in (b"\x00\x01\x02\x03" * 64 + b"\r\n\r\n",
                 b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # TLS hello
                 b"GET / HTTP/9.9\r\n\r\n",
                 b"POST /schedule HTTP/1.1\r\nContent-Type application/json\r\n\r\n"):
        try:
            resp = raw_exchange(hostile.svc.port, data, timeout=3)
        except OSError:
            resp = None
        assert resp is None or 400 <= resp.status < 600, resp
    hostile.assert_unchanged("garbage")


# --- last: nothing that was refused reached the queue ------------------------

def test_nothing_was_published(hostile):
    """Every would-be job above was aimed at this consumer with delay_ms 0:
    only the control job may have arrived."""
    time.sleep(1.5)  # a due job is published within milliseconds
    bodies = [m.body for m in hostile.mq.snapshot()]
    assert bodies == [b"control"], bodies[:10]
    hostile.assert_unchanged("at the end")


# --- limits at their edges (own services) ----------------------------------------

def test_body_exactly_at_the_limit_is_accepted(service):
    """--max-body-bytes is inclusive, with Content-Length and chunked."""
    svc = service("--max-body-bytes", "1024")
    base = {"exchange": "ex", "routing_key": "rk", "delay_ms": 3_600_000, "body": ""}
    pad = 1024 - len(json.dumps(base, separators=(",", ":")))
    exact = json.dumps(dict(base, body="b" * pad), separators=(",", ":")).encode()
    assert len(exact) == 1024
    over = json.dumps(dict(base, body="b" * (pad + 1)), separators=(",", ":")).encode()
    assert svc.post("/schedule", exact).status == 201
    assert_error(svc.post("/schedule", over), 413, "payload_too_large")
    for body, want in ((exact, 201), (over, 413)):
        status, _ = post_chunked(svc.port, "/schedule", [body[:500], body[500:]],
                                 timeout=10)
        assert status == want, (len(body), status)
    assert len(svc.list_all()[0]) == 2


def test_large_header_table_under_the_cap_is_published_intact(service, amqp):
    """Just under the 64 KiB cap on headers + properties: accepted, and the
    broker delivers every header (the cap keeps jobs publishable)."""
    svc = service()
    headers = {f"h{i:03d}": "v" * 480 for i in range(120)}  # ~60 KB encoded
    job_ = svc.schedule({"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                         "body": "big headers", "delay_ms": 0, "headers": headers,
                         "properties": {"message_id": "m" * 255, "type": "t" * 255}})
    msgs = amqp.wait_for_jobs([job_["id"]], timeout=30)[job_["id"]]
    got = msgs[0].headers
    assert {k: got[k] for k in headers} == headers
    assert msgs[0].properties.message_id == "m" * 255
    assert svc.wait_status(job_["id"], "sent")["attempts"] == 1
