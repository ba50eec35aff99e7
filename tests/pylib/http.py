"""HTTP to the service on loopback: one request on a fresh connection (the
answer parsed as JSON, or kept as text for GET /metrics), and one keep-alive
connection for clients that send many requests (the bench's paced client).

Every answer http_request and http_request_text receive goes through
RESPONSE_CHECK when it is set: integration/conftest.py sets it to the
OpenAPI contract check (pylib.openapi) for the whole run.
"""

import http.client
import json

# callable(method, path, response) run on every answer of http_request, or
# None. Raises ContractError on a drift.
RESPONSE_CHECK = None


def exchange(port, method, path, body=None, headers=None, timeout=15,
             host="127.0.0.1"):
    """One request on a fresh connection, body as bytes (or None), headers
    as given. Returns (status, http.client.HTTPMessage, raw body bytes);
    connection errors are raised (OSError, http.client.HTTPException)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def post_chunked(port, path, chunks, timeout=15, host="127.0.0.1"):
    """POST a JSON body sent in the given chunks (Transfer-Encoding:
    chunked, no Content-Length) on a fresh connection. Returns (status, raw
    body bytes); the answer is not checked against the contract."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body=iter(chunks), encode_chunked=True,
                     headers={"Content-Type": "application/json",
                              "Transfer-Encoding": "chunked"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get_status(port, path, timeout=1.0, host="127.0.0.1"):
    """The status of GET path (the answer is read and dropped)."""
    return exchange(port, "GET", path, timeout=timeout, host=host)[0]


class Response:
    """An HTTP answer: unpacks as (status, headers, body); body is the parsed
    JSON (None if the answer had no body). .raw keeps the bytes."""

    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers  # http.client.HTTPMessage: case-insensitive
        self.raw = raw
        self.body = None
        if raw:
            try:
                self.body = json.loads(raw)
            except ValueError as e:
                raise AssertionError(
                    f"answer {status} is not JSON: {raw[:500]!r}") from e

    def __iter__(self):
        return iter((self.status, self.headers, self.body))

    def __repr__(self):
        return f"<Response {self.status} {self.raw[:300]!r}>"


def http_request(port, method, path, body=None, headers=None, timeout=15,
                 host="127.0.0.1", check_contract=True):
    """One request on a fresh connection. A dict/list body is sent as JSON;
    str/bytes are sent as they are. Content-Type defaults to
    application/json when there is a body; a header whose value is None is
    left out. The answer is checked against api/openapi.yaml when
    RESPONSE_CHECK is set (conftest.py does; check_contract=False skips it
    for this request)."""
    headers = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    # A header given as None is not sent (and not defaulted).
    if body is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    headers = {k: v for k, v in headers.items() if v is not None}
    answer = Response(*exchange(port, method, path, body, headers, timeout, host))
    if check_contract and RESPONSE_CHECK is not None:
        RESPONSE_CHECK(method, path, answer)
    return answer


class TextResponse(Response):
    """An answer that is not JSON (GET /metrics): .text is the decoded body."""

    def __init__(self, status, headers, raw):  # pylint: disable=super-init-not-called
        self.status = status
        self.headers = headers
        self.raw = raw
        self.body = None
        self.text = raw.decode("utf-8")


def http_request_text(port, path, headers=None, timeout=15, host="127.0.0.1",
                      method="GET", check_contract=True):
    """A request whose answer is text (GET /metrics); checked against the
    contract like http_request's. Returns a TextResponse."""
    headers = {k: v for k, v in (headers or {}).items() if v is not None}
    answer = TextResponse(*exchange(port, method, path, None, headers, timeout, host))
    if check_contract and RESPONSE_CHECK is not None:
        RESPONSE_CHECK(method, path, answer)
    return answer


class KeepAlive:
    """One keep-alive connection: post() reconnects once if the connection
    was closed under it, and returns (status, raw body)."""

    def __init__(self, port, timeout=60, host="127.0.0.1"):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.conn = None

    def post(self, path, body):
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
            try:
                self.conn.request("POST", path, body=body,
                                  headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
