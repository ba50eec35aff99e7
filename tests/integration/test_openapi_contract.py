"""api/openapi.yaml against the server: the file lints clean (Redocly CLI),
its schemas and examples are consistent, every route, method, error code and
auth rule of service/http/http_api.c is documented and every documented one
exists, and the tests' own answer checker (helpers.OpenApiContract, run on
every answer of every integration test) catches drift.

The lint needs npx (Node.js 20.19+ with npm) and the npm registry; it is
skipped, saying so, only where npx is missing or the Node is older (Debian
12's is 18: Redocly CLI 2 does not run there, and 1.x's validator reports
hundreds of false problems with this JSON Schema 2020-12 file)."""

import glob
import http.client
import json
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest

import helpers
import pylib.http
from helpers import (ContractError, OpenApiContract, Response, TextResponse,
                     assert_error, format_ts, free_port, http_request, http_request_text,
                     parse_ts, wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SPEC = os.path.join(ROOT, "api", "openapi.yaml")
HTTP_API_C = os.path.join(ROOT, "service", "http", "http_api.c")
# The HTTP layer: every .c of service/http (the router, the reply layer and
# the endpoints), read in a sorted order, so a new file cannot be missed.
HTTP_LAYER_C = sorted(glob.glob(os.path.join(ROOT, "service", "http", "*.c")))
# The schedule the documented /schedules/{name} examples work on.
EXAMPLE_SCHEDULE = "contract-example"
METRICS_C = os.path.join(ROOT, "service", "util", "metrics.c")
REDOCLY = "@redocly/cli@2.77.0"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
LATER = 3_600_000


@pytest.fixture(scope="module")
def contract():
    return OpenApiContract(SPEC)


def operations(doc):
    """(template, method, operation) of every documented operation."""
    for template, item in doc["paths"].items():
        for m in METHODS:
            if m in item:
                yield template, m, item[m]


def walk(node, where="#"):
    """Every (where, dict) in the document, depth first."""
    if isinstance(node, dict):
        yield where, node
        for k, v in node.items():
            yield from walk(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{where}/{i}")


def source(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def c_function(text, signature):
    """The body of the C function whose definition starts with signature."""
    start = text.index(signature)
    end = text.index("\n}\n", start)
    return text[start:end]


# =============================================================================
# The file itself
# =============================================================================

def test_redocly_lint_is_clean():
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed (Node.js with npm): api/openapi.yaml "
                    "was not linted; install nodejs (20.19+) with npm")
    version = subprocess.run(["node", "-p", "process.versions.node"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    if tuple(int(x) for x in version.split(".")[:2]) < (20, 19):
        pytest.skip(f"Node.js {version}: {REDOCLY} needs 20.19 or later; "
                    "api/openapi.yaml was not linted")
    r = subprocess.run([npx, "--yes", REDOCLY, "lint", "--format=stylish", SPEC],
                       capture_output=True, text=True, timeout=600, cwd=ROOT,
                       stdin=subprocess.DEVNULL,
                       env=dict(os.environ, NO_COLOR="1", REDOCLY_TELEMETRY="off",
                                REDOCLY_SUPPRESS_UPDATE_NOTICE="true"))
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"redocly lint failed ({r.returncode}):\n{out}"
    problems = [ln for ln in out.splitlines()
                if re.search(r"\b(warning|error)\b", ln, re.I)
                and "Deprecation warning" not in ln]
    assert not problems, "redocly lint reports problems:\n" + out
    assert "valid" in out, out


def test_every_ref_resolves(contract):
    for where, node in walk(contract.doc):
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                contract.schemas.resolve(ref)
            except ContractError as e:
                raise AssertionError(f"{where}: {e}") from None


def _schemas(doc):
    """Every schema object of the document, with where it is."""
    for name, schema in doc["components"]["schemas"].items():
        yield f"#/components/schemas/{name}", schema
    for where, node in walk(doc):
        if "/components/schemas/" in where:
            continue
        if isinstance(node.get("schema"), dict):
            yield f"{where}/schema", node["schema"]


def test_schemas_use_only_keywords_the_checker_implements(contract):
    for where, schema in _schemas(contract.doc):
        contract.schemas.check_keywords(schema, where)


def _examples(contract, node):
    """(name, value) of the example(s) of a media type, parameter or header."""
    if "example" in node:
        yield "example", node["example"]
    for name, ex in (node.get("examples") or {}).items():
        ex = contract.deref(ex)
        assert "value" in ex, f"example {name} has no value"
        yield name, ex["value"]


def test_every_example_matches_its_schema(contract):
    checked = 0
    for where, node in walk(contract.doc):
        if "/components/schemas/" in where or not isinstance(node.get("schema"), dict):
            continue
        schema = node["schema"]
        for name, value in _examples(contract, node):
            errs = contract.schemas.errors(schema, value)
            assert not errs, f"{where} example {name!r}: {errs}"
            checked += 1
    for name, schema in contract.doc["components"]["schemas"].items():
        if "example" in schema:
            assert not contract.schemas.errors(schema, schema["example"]), name
            checked += 1
    assert checked >= 30, f"only {checked} examples found"


def test_every_operation_but_healthz_needs_the_bearer_token(contract):
    doc = contract.doc
    scheme = doc["components"]["securitySchemes"]["bearerAuth"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    for template, method, op in operations(doc):
        security = op.get("security", doc.get("security", []))
        secured = any("bearerAuth" in req for req in security)
        if template == "/healthz":
            assert not secured, "GET /healthz must be documented without auth"
            assert "401" not in op["responses"]
        else:
            assert secured, f"{method.upper()} {template} has no bearerAuth"
            assert "401" in op["responses"], f"{method.upper()} {template} lacks 401"
        assert op.get("operationId") and op.get("summary"), (template, method)


def test_routes_of_the_server_and_of_the_file_are_the_same(contract):
    """service/http/http_api.c route() and metrics.c's route labels against the
    documented paths, both ways."""
    body = c_function(source(HTTP_API_C), "static enum MHD_Result route(")
    exact = set(re.findall(r'strcmp\(url, "([^"]+)"\)', body))
    prefixes = set(re.findall(r'strncmp\(url, "([^"]+)", \d+\)', body))
    assert {"/schedule", "/healthz"} <= exact and prefixes, (exact, prefixes)
    documented = set(contract.doc["paths"])
    for path in exact:
        assert contract.path_template(path) is not None, \
            f"the server answers {path}, api/openapi.yaml does not document it"
    for prefix in prefixes:
        assert any(t.startswith(prefix + "{") for t in documented), \
            f"the server answers {prefix}<anything>, not documented"
    for template in documented:
        if "{" in template:
            assert template[:template.index("{")] in prefixes, \
                f"{template} is documented, the server has no such prefix route"
        else:
            assert template in exact, \
                f"{template} is documented, service/http/http_api.c does not route it"
    labels = re.search(r"route_names\[MR_COUNT\] = \{(.*?)\};", source(METRICS_C), re.S)
    names = set(re.findall(r'"([^"]+)"', labels.group(1))) - {"other"}
    assert names == documented, \
        f"metrics route labels {sorted(names)} vs documented {sorted(documented)}"


MHD_STATUS = {"BAD_REQUEST": 400, "UNAUTHORIZED": 401, "FORBIDDEN": 403,
              "NOT_FOUND": 404, "METHOD_NOT_ALLOWED": 405, "CONFLICT": 409,
              "CONTENT_TOO_LARGE": 413, "UNSUPPORTED_MEDIA_TYPE": 415,
              "INTERNAL_SERVER_ERROR": 500, "SERVICE_UNAVAILABLE": 503}


def test_error_codes_of_the_server_and_of_the_file_are_the_same(contract):
    text = "".join(source(p) for p in HTTP_LAYER_C)
    pairs = {(MHD_STATUS[s], code) for s, code in re.findall(
        r'reply_error(?:_h)?\(\s*c,\s*MHD_HTTP_([A-Z_]+),\s*"([a-z_]+)"', text)}
    pairs |= {(500, c) for c in re.findall(r'\\"code\\":\\"([a-z_]+)\\"', text)}
    assert len(pairs) >= 10, pairs
    enum = set(contract.doc["components"]["schemas"]["ErrorDetail"]
               ["properties"]["code"]["enum"])
    server_codes = {code for _, code in pairs} | {"unavailable"}  # /readyz
    assert server_codes == enum, \
        f"server codes {sorted(server_codes)} vs documented {sorted(enum)}"
    # The status table of info.description has every (status, code) pair.
    table = {}
    for status, cell in re.findall(r"^\| (\d{3}) \| (.*) \|$",
                                   contract.doc["info"]["description"], re.M):
        table[int(status)] = set(re.findall(r"`([a-z_]+)`", cell))
    for status, code in sorted(pairs):
        assert code in table.get(status, set()), \
            f"the server answers {status} {code}; info.description's table does not say so"


# =============================================================================
# The checker that every integration test runs
# =============================================================================

def _answer(status, body=None, headers=None, raw=None, text=False):
    msg = http.client.HTTPMessage()
    ctype = "text/plain; version=0.0.4; charset=utf-8" if text else "application/json"
    for k, v in {"Content-Type": ctype, **(headers or {})}.items():
        if v is not None:
            msg[k] = v
    if raw is None:
        raw = b"" if body is None else json.dumps(body).encode()
    return TextResponse(status, msg, raw) if text else Response(status, msg, raw)


JOB = {"id": "01936f3a-5b1c-7d2e-9f00-1a2b3c4d5e6f", "status": "pending",
       "source": "http", "exchange": "orders", "routing_key": "r", "deliver_at": "2026-11-30T14:00:30.000Z",
       "next_attempt_at": "2026-11-30T14:00:30.000Z",
       "created_at": "2026-11-30T14:00:00.000Z", "updated_at": "2026-11-30T14:00:00.000Z",
       "sent_at": None, "failed_at": None, "attempts": 0, "max_attempts": 10, "priority": 0,
       "held_by": None, "held_ms": 0, "last_error": None,
       "headers": {}, "properties": {}, "body": "x"}
JOB_PATH = f"/jobs/{JOB['id']}"


@pytest.mark.parametrize("method, path, answer, complaint", [
    ("GET", "/jobs", _answer(418, {"error": {"code": "internal", "message": "x"}}),
     "status 418 is not documented"),
    ("GET", JOB_PATH, _answer(200, {k: v for k, v in JOB.items() if k != "status"}),
     "'status' is missing"),
    ("GET", JOB_PATH, _answer(200, dict(JOB, colour="red")), "'colour' is not documented"),
    ("GET", JOB_PATH, _answer(200, dict(JOB, status="done")), "is not one of"),
    ("GET", JOB_PATH, _answer(200, dict(JOB, attempts=True)), "is not of type"),
    ("GET", JOB_PATH, _answer(200, dict(JOB, body_base64="AA==")), "exactly one of oneOf"),
    ("GET", JOB_PATH, _answer(200, dict(JOB, sent_at="2026-11-30 14:00")), "oneOf"),
    ("GET", JOB_PATH, _answer(200, JOB, headers={"Content-Type": "text/html"}),
     "Content-Type 'text/html' is not documented"),
    ("POST", "/schedule", _answer(201, JOB), "required header Location is missing"),
    ("POST", "/schedule", _answer(201, JOB, headers={"Location": "/jobs/x"}),
     "does not match"),
    ("POST", "/jobs", _answer(405, {"error": {"code": "method_not_allowed", "message": "m"}},
                              headers={"Allow": "GET, POST"}), "Allow"),
    ("GET", "/schedule", _answer(405, {"error": {"code": "method_not_allowed",
                                                 "message": "m"}}),
     "required header Allow is missing"),
    ("GET", "/nope", _answer(500, {"error": {"code": "internal", "message": "m"}}),
     "unknown path /nope"),
    ("GET", "/jobs", _answer(401, {"error": {"code": "unauthorized", "message": "m"}}),
     "WWW-Authenticate is missing"),
    ("GET", "/metrics", _answer(200, {"a": 1}), "Content-Type 'application/json'"),
    ("GET", "/metrics", _answer(200, raw=b"x 1\n", text=True,
                                headers={"Content-Type": "text/plain; version=0.0.4"}),
     "Content-Type 'text/plain; version=0.0.4' is not documented"),
    ("GET", "/metrics", _answer(200, raw=b"x 1\n", text=True, headers={
        "Content-Type": "text/plain; version=0.0.4; charset=utf-8; x=1"}),
     "is not documented"),
    ("GET", "/metrics", _answer(200, raw=b"x 1\n", text=True,
                                headers={"Content-Type": "text/plain; charset=utf-8"}),
     "is not documented"),
    ("GET", "/healthz", _answer(200, {"status": "ok"},
                                headers={"Content-Type": "application/json; charset=utf-8"}),
     "is not documented"),
    ("POST", "/schedule/batch",
     _answer(400, {"error": {"code": "invalid_argument", "message": "m", "field": "jobs"},
                   "errors": [{"field": "x", "message": "m"}]}), "oneOf"),
    ("GET", "/healthz", _answer(200, {"status": "OK"}), "is not 'ok'"),
])
def test_checker_reports_drift(contract, method, path, answer, complaint):
    with pytest.raises(ContractError) as e:
        contract.check(method, path, answer)
    assert complaint in str(e.value), str(e.value)


@pytest.mark.parametrize("method, path, answer", [
    ("GET", JOB_PATH, _answer(200, JOB)),
    ("HEAD", JOB_PATH, _answer(200, raw=b"")),
    ("GET", "/jobs/", _answer(200, {"jobs": [JOB], "next": None})),
    ("GET", "/jobs?status=pending", _answer(200, {"jobs": [], "next": "abc"})),
    ("POST", "/schedule", _answer(201, JOB, headers={"Location": JOB_PATH})),
    ("DELETE", "/jobs", _answer(405, {"error": {"code": "method_not_allowed", "message": "m"}},
                                headers={"Allow": "GET"})),
    ("PUT", JOB_PATH, _answer(405, {"error": {"code": "method_not_allowed", "message": "m"}},
                              headers={"Allow": "GET, PATCH, DELETE"})),
    ("GET", "/nope", _answer(404, {"error": {"code": "not_found", "message": "m"}})),
    ("GET", "/metrics", _answer(200, raw=b"rmqs_broker_connected 1\n", text=True)),
    ("GET", "/metrics", _answer(200, raw=b"x 1\n", text=True, headers={
        "Content-Type": "Text/Plain; charset=UTF-8; version=0.0.4"})),
    ("POST", "/schedule/batch",
     _answer(400, {"error": {"code": "invalid_argument", "message": "m", "field": "jobs"},
                   "errors": [{"index": 3, "message": "m"}]})),
])
def test_checker_accepts_documented_answers(contract, method, path, answer):
    contract.check(method, path, answer)


def test_the_checker_is_on_in_these_tests():
    assert pylib.http.RESPONSE_CHECK is not None or \
        os.environ.get("RMQS_TEST_CONTRACT") == "0", \
        "conftest.py did not turn the contract check on"


# =============================================================================
# Against the real service (every answer also goes through the checker)
# =============================================================================

def assert_batch_error(resp, *expect_errors):
    """A 400 of POST /schedule/batch for invalid items: the plain error with
    field "jobs", plus the per-item errors list."""
    st, _, body = resp
    assert st == 400, f"expected 400, got {resp!r}"
    assert set(body) == {"error", "errors"}, body
    assert body["error"]["code"] == "invalid_argument"
    assert body["error"]["field"] == "jobs", body
    if expect_errors:
        assert body["errors"] == list(expect_errors), body["errors"]
    return body


def later_job(**kw):
    return dict({"exchange": "", "routing_key": "contract", "body": "x",
                 "delay_ms": LATER}, **kw)


def _request_examples(contract, op):
    content = (op.get("requestBody") or {}).get("content", {})
    media = content.get("application/json", {})
    return list(_examples(contract, media))


# Request fields that name a moment; the examples give them as RFC 3339 text.
TIME_FIELDS = ("deliver_at", "start_at", "end_at")
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _example_times(value, where=""):
    """(where, text) of every time field in a request example."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in TIME_FIELDS and isinstance(v, str):
                yield f"{where}/{k}", v
            else:
                yield from _example_times(v, f"{where}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _example_times(v, f"{where}/{i}")


def _offset_minutes(text):
    if text.endswith(("Z", "z")):
        return 0
    sign = -1 if text[-6] == "-" else 1
    return sign * (int(text[-5:-3]) * 60 + int(text[-2:]))


def relative_to_now(value, ahead_ms=LATER):
    """The request example with each time field moved to now + ahead_ms, in
    the example's own form (its UTC offset, with or without a fraction): what
    the example means is kept, but what the test sends never depends on
    today's date (an example dated in the past would be due at once)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in TIME_FIELDS and isinstance(v, str) and TS_RE.match(v):
                t = format_ts(time.time() + ahead_ms / 1000, _offset_minutes(v))
                if "." not in v:
                    t = re.sub(r"\.\d+", "", t)
                out[k] = t
            else:
                out[k] = relative_to_now(v, ahead_ms)
        return out
    if isinstance(value, list):
        return [relative_to_now(v, ahead_ms) for v in value]
    return value


def test_request_examples_are_at_least_a_day_ahead(contract):
    """The guard against examples going stale: a request example dated in
    the past (or within a day of now) would, pasted by a reader, be due at
    once, which is not what it shows. Update the example when this fails."""
    horizon = time.time() + 86400
    found = []
    for template, method, op in operations(contract.doc):
        for name, body in _request_examples(contract, op):
            for where, text in _example_times(body):
                assert TS_RE.match(text), f"{method.upper()} {template} {name}{where}: {text!r}"
                found.append((f"{method.upper()} {template} ({name}){where}", text))
    assert found, "no dated request example found: the guard checks nothing"
    stale = [(w, t) for w, t in found if parse_ts(t) < horizon]
    assert not stale, ("request examples in api/openapi.yaml dated in the past or "
                       f"within a day of now: {stale}")


def test_relative_to_now_keeps_the_form_of_the_example():
    now = time.time()
    moved = relative_to_now({"deliver_at": "2020-01-02T03:04:05+01:00",
                             "jobs": [{"deliver_at": "2020-01-02T03:04:05.000Z"}],
                             "body": {"deliver_at": 5}}, 60_000)
    assert moved["deliver_at"].endswith("+01:00") and "." not in moved["deliver_at"]
    inner = moved["jobs"][0]["deliver_at"]
    assert inner.endswith("Z") and re.search(r"\.\d{3}Z$", inner), inner
    for t in (moved["deliver_at"], inner):
        assert now + 59 <= parse_ts(t) <= now + 62, t
    assert moved["body"] == {"deliver_at": 5}


def test_every_documented_operation_exists_and_takes_its_examples(service, contract):
    """Each documented method of each documented path answers 2xx to the
    file's own request examples; HEAD answers like GET without a body."""
    svc = service("--backoff-base-ms", "50")
    job = svc.schedule(later_job())
    seen = []

    def own_job(template):
        """A job of its own for the actions that change a job's status
        (each example once): a pending one to run now, a failed one (no
        such exchange, one attempt) to retry."""
        if template == "/jobs/{id}/run":
            return svc.schedule(later_job())["id"]
        if template == "/jobs/{id}/retry":
            failed = svc.schedule(later_job(exchange="rmqs-contract-missing",
                                            delay_ms=0, max_attempts=1))
            return svc.wait_status(failed["id"], "failed", timeout=30)["id"]
        if template == "/jobs/bulk/{id}":
            return bulk_ids[-1]
        return job["id"]

    bulk_ids = []

    def bulk_done(resp):
        """A bulk action (one at a time) is finished before the next."""
        bulk_ids.append(resp.body["id"])
        wait_until(lambda: svc.get(resp.headers["Location"]).body["state"] == "done",
                   30, "the bulk action to finish")
    # PUT first (it creates the schedule the others use), DELETE last (it
    # cancels the job and deletes the schedule).
    order = sorted(operations(contract.doc),
                   key=lambda t: (t[1] == "delete", t[1] != "put"))
    for template, method, op in order:
        examples = _request_examples(contract, op) or [(None, None)]
        for name, body in examples:
            path = template.replace("{id}", own_job(template)).replace(
                "{name}", EXAMPLE_SCHEDULE)
            body = relative_to_now(body)
            if method == "get" and template == "/metrics":
                resp = http_request_text(svc.port, path)
            else:
                resp = svc.request(method.upper(), path, body)
            assert 200 <= resp.status < 300, \
                f"{method.upper()} {template} (example {name}) -> {resp!r}"
            if template == "/jobs/bulk":
                bulk_done(resp)
            seen.append((template, method))
        if method == "get":
            head = svc.request("HEAD", path)
            assert head.status == resp.status and head.raw == b"", head
    assert len(set(seen)) == len(list(operations(contract.doc)))


def test_methods_not_documented_are_405_with_the_documented_allow(service, contract):
    svc = service()
    job = svc.schedule(later_job())
    for template, item in contract.doc["paths"].items():
        path = template.replace("{id}", job["id"])
        documented = {m.upper() for m in METHODS if m in item}
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            if method in documented:
                continue
            resp = svc.request(method, path, {} if method in ("POST", "PUT", "PATCH") else None)
            assert_error(resp, 405, "method_not_allowed")
            allow = {m.strip() for m in resp.headers["Allow"].split(",")}
            assert allow == documented, (template, method, resp.headers["Allow"])
    assert svc.job(job["id"])["status"] == "pending"


@pytest.fixture(scope="module")
def shared_service(module_service):
    return module_service()


@pytest.mark.parametrize("path", ["/", "/nope", "/schedule/", "/schedule/batch/",
                                  "/schedule/now", "/jobs//", "/jobs/x/cancel",
                                  "/healthz/", "/metrics/x", "/v1/schedule", "/JOBS"])
def test_paths_not_documented_are_404(shared_service, contract, path):
    svc = shared_service
    assert contract.path_template(path) is None, f"{path} is documented"
    resp = svc.get(path)
    assert_error(resp, 404, "not_found")
    assert resp.body["error"]["message"] == "no such route"


def test_batch_answers_are_documented(service):
    svc = service()
    st, _, body = svc.post("/schedule/batch", [later_job(body=f"b{i}") for i in range(3)])
    assert st == 201, body
    assert [j["body"] for j in body["jobs"]] == ["b0", "b1", "b2"]
    assert len(svc.list_all()[0]) == 3

    # Invalid items: every one named (index, field, message), at most 50.
    items = [later_job(), {"exchange": "", "body": "x", "delay_ms": 1}, "not an object",
             later_job(max_attempts=0)]
    assert_batch_error(
        svc.post("/schedule/batch", items),
        {"index": 1, "field": "routing_key", "message": "routing_key: required"},
        {"index": 2, "message": "a job must be a JSON object"},
        {"index": 3, "field": "max_attempts",
         "message": "max_attempts: must be an integer from 1 to 1000"})
    body = assert_batch_error(svc.post("/schedule/batch",
                                       [{"colour": i} for i in range(60)]))
    assert [e["index"] for e in body["errors"]] == list(range(50))
    assert "60 of 60" in body["error"]["message"]

    for body, why in (([], "empty"), ({"a": 1}, "object"), ("[1,", "bad JSON"),
                      ([later_job()] * 1001, "1001 jobs")):
        resp = svc.post("/schedule/batch", body)
        assert_error(resp, 400, "invalid_argument")
        assert "errors" not in resp.body, (why, resp.body)
    assert_error(svc.post("/schedule/batch", [later_job()],
                          headers={"Idempotency-Key": "k-1"}),
                 400, "invalid_argument", "Idempotency-Key")
    assert_error(svc.post("/schedule/batch", "[]", headers={"Content-Type": "text/plain"}),
                 415, "unsupported_media_type")
    assert len(svc.list_all()[0]) == 3, "a refused batch stored something"


def test_forbidden_exchange_answers_are_documented(service):
    svc = service("--allow-exchanges", "billing, pre.*")
    assert svc.schedule(later_job(exchange="billing"))["exchange"] == "billing"
    assert svc.schedule(later_job(exchange="pre.x"))["exchange"] == "pre.x"
    err = assert_error(svc.post("/schedule", later_job(exchange="other")),
                       403, "forbidden", "exchange")
    assert "'other'" in err["message"]
    assert_error(svc.post("/schedule/batch", [later_job(exchange="billing"),
                                              later_job(exchange="pre"),
                                              later_job(exchange="nope")]),
                 403, "forbidden", "jobs[1].exchange")
    # An invalid item is a 400 even when another item's exchange is forbidden.
    assert_batch_error(svc.post("/schedule/batch", [later_job(exchange="nope"),
                                                    {"exchange": "billing"}]))
    assert len(svc.list_all()[0]) == 2


def test_idempotency_key_answers_are_documented(service, contract):
    svc = service()
    key = f"contract-{uuid.uuid4().hex}"
    first = svc.schedule(later_job(), headers={"Idempotency-Key": key})
    st, hdrs, again = svc.post("/schedule", later_job(), headers={"Idempotency-Key": key})
    assert (st, again["id"], hdrs["Location"]) == (200, first["id"], f"/jobs/{first['id']}")
    assert_error(svc.post("/schedule", later_job(body="other"),
                          headers={"Idempotency-Key": key}),
                 409, "conflict", "Idempotency-Key")
    pattern = re.compile(contract.doc["components"]["parameters"]["IdempotencyKey"]
                         ["schema"]["pattern"])
    for bad in ("a b", "x" * 201, "caf\u00e9"):
        assert not pattern.search(bad), bad
        raw = bad.encode("utf-8").decode("latin-1")
        assert_error(svc.post("/schedule", later_job(), headers={"Idempotency-Key": raw}),
                     400, "invalid_argument", "Idempotency-Key")
    assert pattern.search("x" * 200) and pattern.search("~!#")


def test_auth_answers_are_documented(service, contract):
    token = f"contract-{uuid.uuid4().hex}"
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": token})
    good = {"Authorization": f"Bearer {token}"}
    helpers.wait_until(lambda: svc.get("/readyz", headers=good).status == 200, 20,
                       "/readyz 200 with the token")
    job = svc.schedule(later_job(), headers=good)
    for template, method, op in operations(contract.doc):
        path = template.replace("{id}", job["id"])
        body = [later_job()] if template == "/schedule/batch" else \
            (later_job() if method in ("post", "patch") else None)
        if template == "/metrics":
            resp = http_request_text(svc.port, path)
        else:
            resp = svc.request(method.upper(), path, body)
        if template == "/healthz":
            assert resp.status == 200
        else:
            assert resp.status == 401, (method, template, resp)
    # Unknown paths and methods too: 401 comes first.
    assert svc.get("/nope").status == 401
    assert svc.request("PUT", "/jobs").status == 401
    assert http_request_text(svc.port, "/metrics", headers=good).status == 200
    assert svc.get(f"/jobs/{job['id']}", headers=good).body["status"] == "pending"


def test_body_over_the_limit_is_413_on_any_path(service):
    svc = service("--max-body-bytes", "1024")
    big = "x" * 2000
    for method, path in (("POST", "/schedule"), ("POST", "/schedule/batch"),
                         ("GET", "/jobs"), ("POST", "/nope"), ("PUT", "/jobs")):
        assert_error(svc.request(method, path, big), 413, "payload_too_large")
    assert svc.get("/healthz").status == 200


def test_metrics_content_type_is_exactly_the_documented_one(service, contract):
    """The one media type api/openapi.yaml declares for GET /metrics is the
    Content-Type the server sends, parameters included."""
    documented = list(contract.doc["paths"]["/metrics"]["get"]["responses"]["200"]
                      ["content"])
    resp = http_request_text(service().port, "/metrics")
    assert resp.status == 200
    assert [resp.headers["Content-Type"]] == documented


def test_unreachable_port_is_not_a_contract_question():
    """The checker runs only on answers: a refused connection is an OSError."""
    with pytest.raises(OSError):
        http_request(free_port(), "GET", "/healthz", timeout=2)


@pytest.mark.no_contract_check
def test_a_test_can_opt_out_of_the_check():
    assert pylib.http.RESPONSE_CHECK is None
