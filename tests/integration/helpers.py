"""Helpers of the integration tests: what the test files import. The shared
pieces (the real service, a real AMQP consumer, control of the real RabbitMQ
node, HTTP, the OpenAPI checker, waiting with deadlines) live in tests/pylib
and are re-exported here under the names the tests have always used; what
is the integration tests' own (the Job shape, the error shape) is here.

Only the standard library and Debian's python3-pika (and python3-yaml for
the contract). Everything talks to 127.0.0.1 only. The fixtures that hand
these out live in conftest.py. The contract check hook is
pylib.http.RESPONSE_CHECK (set by conftest.py).
"""

import os
import re
import sqlite3
import sys

# The one place the integration tests find tests/pylib: conftest.py and
# every test file import this module first.
sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(
    os.path.abspath(__file__)), "..")))

# pylint: disable=wrong-import-position
from pylib.amqp import Consumer, Message, amqp_params
from pylib.http import (Response, TextResponse, http_request,
                        http_request_text)
from pylib import pg
from pylib.openapi import (OPENAPI_PATH, ContractError,
                           OpenApiContract, SchemaValidator, openapi_contract)
from pylib.procs import go_build, rss_bytes
from pylib.rabbit import Broker
from pylib.service import SANITIZER_MARKERS, Service, env
from pylib.times import format_ts, parse_ts, ts_ms
from pylib.wait import free_port, port_open, wait_until

UUID7_RE = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
TIMESTAMP_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
JOB_STATUSES = ("pending", "publishing", "sent", "failed", "cancelled")
# The store every service of this test process uses (RMQS_TEST_STORE, set
# per ctest entry): "sqlite" or "postgres".
STORE = pg.store()

__all__ = [
    "Broker", "Consumer", "ContractError", "JOB_STATUSES", "Message",
    "OPENAPI_PATH", "OpenApiContract", "Response", "SANITIZER_MARKERS",
    "STORE", "SchemaValidator", "Service", "TIMESTAMP_RE", "TextResponse",
    "UUID7_RE",
    "amqp_params", "assert_error", "assert_job_shape", "db_count",
    "log_excerpt",
    "db_has_schema", "db_name", "db_query", "env", "format_ts",
    "free_port", "go_build", "http_request", "http_request_text",
    "openapi_contract", "parse_ts", "port_open", "rss_bytes", "ts_ms",
    "wait_until"]


def assert_job_shape(job):
    """The Job object of the contract (api/openapi.yaml)."""
    required = {"id", "status", "exchange", "routing_key", "deliver_at",
                "next_attempt_at", "created_at", "updated_at", "sent_at",
                "attempts", "max_attempts", "last_error", "headers",
                "properties"}
    missing = required - job.keys()
    assert not missing, f"job lacks {missing}: {job!r}"
    assert ("body" in job) != ("body_base64" in job), job
    assert UUID7_RE.match(job["id"]), job["id"]
    assert job["status"] in JOB_STATUSES, job["status"]
    for k in ("deliver_at", "created_at", "updated_at"):
        assert TIMESTAMP_RE.match(job[k]), (k, job[k])
    for k in ("sent_at", "next_attempt_at"):
        assert job[k] is None or TIMESTAMP_RE.match(job[k]), (k, job[k])
    assert isinstance(job["attempts"], int) and job["attempts"] >= 0
    assert isinstance(job["max_attempts"], int) and job["max_attempts"] >= 1
    assert job["last_error"] is None or isinstance(job["last_error"], str)
    assert isinstance(job["headers"], dict) and isinstance(job["properties"], dict)
    if job["status"] != "pending":
        assert job["next_attempt_at"] is None, job
    if job["status"] == "sent":
        assert job["sent_at"] is not None, job
    # UUIDv7: the first 48 bits are the creation time in ms.
    id_ms = int(job["id"].replace("-", "")[:12], 16)
    assert abs(id_ms - ts_ms(job["created_at"])) <= 1000, (job["id"], job["created_at"])


def assert_error(resp, status, code, field=None):
    """An error answer of the contract: {"error": {code, message, field?}}."""
    st, _, body = resp
    assert st == status, f"expected {status}, got {resp!r}"
    assert resp.headers.get_content_type() == "application/json", resp.headers
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert set(err) <= {"code", "message", "field"}, err
    assert err.get("code") == code, f"expected code {code}: {body!r}"
    assert isinstance(err.get("message"), str) and err["message"], body
    if field is not None:
        assert err.get("field") == field, f"expected field {field!r}: {body!r}"
    return err


# --- the store behind the service's back ----------------------------------------
# For the few tests that read or change what the service stored without
# asking it (a job made due while it is stopped, rows left by a stop). The
# same SQL runs on both stores: the PostgreSQL schema (migrations/postgres/)
# keeps the SQLite table and column names, with times as integer ms since
# the epoch and status as the job_status number (0 pending, 1 publishing,
# 2 sent, 3 failed, 4 cancelled). Parameters are `?` and integers only (on
# postgres they are written into the query; psql takes no parameters).

def log_excerpt(svcs, keep, most=12):
    """The first `most` lines of each service's log that keep(line) selects,
    as "svc<k>: <line>", for a failure's first lines (where a CI excerpt
    shows them): what the services said when a bound of time was missed."""
    out = []
    for k, s in enumerate(svcs):
        try:
            with open(s.log_path, errors="replace") as f:
                lines = [ln.strip()[:240] for ln in f if keep(ln)]
        except OSError as e:
            lines = [f"(log not read: {e})"]
        out += [f"svc{k}: {ln}" for ln in lines[:most]]
    return out


def db_query(svc, query, *params):
    """Run query on svc's database (the service may be stopped); returns
    its rows as tuples: SQLite's values, or on postgres the text psql
    prints (None for NULL). An UPDATE or DELETE returns rows through
    RETURNING (both stores have it), which counts them."""
    if svc.store == "sqlite":
        with sqlite3.connect(svc.db) as db:
            rows = [tuple(r) for r in db.execute(query, params).fetchall()]
        db.close()
        return rows
    parts = query.split("?")
    assert len(parts) == len(params) + 1, (query, params)
    for p in params:
        assert isinstance(p, int) and not isinstance(p, bool), \
            f"db_query: integer parameters only, not {p!r}"
    text = parts[0] + "".join(str(p) + rest for p, rest in zip(params, parts[1:]))
    return [tuple(r) for r in svc.sql(text)]


def db_count(svc, query, *params):
    """The one integer a SELECT count(*) ... returns, on either store."""
    (n,), = db_query(svc, query, *params)
    return int(n)


def db_has_schema(svc):
    """The service made its store: the SQLite file exists, or the postgres
    database has its jobs table."""
    if svc.store == "sqlite":
        return os.path.exists(svc.db)
    return db_count(svc, "SELECT count(*) FROM information_schema.tables "
                         "WHERE table_name = 'jobs'") == 1


def db_name(svc):
    """How a log line names svc's database: the SQLite path, or the
    PostgreSQL database name (never the URL with its password)."""
    return svc.db if svc.store == "sqlite" else svc.pg_database
