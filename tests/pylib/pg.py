"""The test run's PostgreSQL server (tests/run.sh, rmqs_pg_start in
tests/lib/common.sh) as the harnesses use it: a fresh database per service,
the URL the service is given, and SQL through psql for what a test reads or
changes behind the service's back (a job's raw row, a schema version, a
read-only switch).

Why psql and not a driver: it ships with the server package, so the tests
need nothing more than the server, and what a test runs is plain SQL that
can be pasted into a shell. Every call is bounded (timeout) and goes to the
server's unix socket (the admin, trusted locally) or to 127.0.0.1 (the test
role, scram), never to port 5432 unless run.sh chose it.

  store()                        "sqlite" or "postgres" (RMQS_TEST_STORE)
  create_database() -> name      CREATE DATABASE rmqs_t_<unique> OWNER role
  drop_database(name)            DROP DATABASE ... WITH (FORCE)
  database_url(name)             postgres://role:pw@127.0.0.1:port/name
  sql(name, query) -> rows       psql as the admin in that database: a list
                                 of rows, each a list of strings (None: NULL)
  sql_json(name, query)          the first column of each row parsed as JSON
  redact(text)                   the run's role password replaced by ***
  Listener(name, channel, s)     a session LISTENing for s seconds; stop()
                                 gives the payloads it received
"""

import json
import os
import re
import shutil
import subprocess
import time
import uuid

from pylib.runenv import env as _env

PSQL_TIMEOUT_S = 30
STORES = ("sqlite", "postgres")
NULL_MARK = "\x1e<null>\x1e"
ROW_SEP = "\x1d"  # ASCII group separator: in no value a test reads


def store():
    """The store this test process runs against (ctest sets RMQS_TEST_STORE
    per entry: integration.<feature> is sqlite, .postgres is postgres)."""
    value = os.environ.get("RMQS_TEST_STORE", "sqlite")
    if value not in STORES:
        raise RuntimeError(f"RMQS_TEST_STORE={value!r}: expected one of {STORES}")
    return value


def _psql():
    return shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"


def _run(conninfo, query, timeout=PSQL_TIMEOUT_S):
    """psql -c query against conninfo; returns its unaligned, tuples-only
    output: fields split by zero bytes (which text cannot hold), rows by
    ROW_SEP, the last row ended by a newline; a NULL is NULL_MARK."""
    r = subprocess.run(
        [_psql(), "-X", "-q", "-A", "-t", "-z", "-R", ROW_SEP, "-v", "ON_ERROR_STOP=1",
         "-P", f"null={NULL_MARK}", "-d", conninfo, "-c", query],
        capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, env=dict(os.environ, PGCONNECT_TIMEOUT="5"))
    if r.returncode != 0:
        raise AssertionError(f"psql failed ({r.returncode}) on {query!r}: "
                             f"{redact(r.stderr.strip())}")
    return r.stdout


def _admin(dbname="postgres"):
    return f"{_env('RMQS_TEST_PG_ADMIN')} dbname={dbname}"


def _ident(name):
    assert name.replace("_", "").isalnum(), f"not a plain identifier: {name!r}"
    return '"' + name + '"'


def create_database():
    """A new, empty database owned by the test role; returns its name."""
    name = f"rmqs_t_{uuid.uuid4().hex[:16]}"
    _run(_admin(), f"CREATE DATABASE {_ident(name)} OWNER "
                   f"{_ident(_env('RMQS_TEST_PG_USER'))}")
    return name


def drop_database(name):
    """Drop it even if a (killed, stuck) service still holds connections."""
    _run(_admin(), f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")


def database_url(name):
    """What the service gets as --db / RMQS_DB."""
    return f"{_env('RMQS_TEST_PG_URL')}/{name}"


def sql(name, query):
    """Run query as the admin in database `name`; the rows it returns."""
    out = _run(_admin(name), query)
    if out.endswith("\n"):
        out = out[:-1]
    if out == "":
        return []
    return [[None if f == NULL_MARK else f for f in record.split("\0")]
            for record in out.split(ROW_SEP)]


def sql_json(name, query):
    """The first column of every row, parsed as JSON (row_to_json, ...)."""
    return [None if r[0] is None else json.loads(r[0]) for r in sql(name, query)]


def redact(text):
    password = os.environ.get("RMQS_TEST_PG_PASSWORD")
    return text.replace(password, "***") if password else text


class Listener:
    """A psql session that LISTENs on `channel` in database `name` for
    `seconds`, then ends; stop() returns the payloads it received, in
    order. Started means listening: the constructor waits until the
    session's sleep runs (after its LISTEN)."""

    APP = "rmqs-test-listener"

    def __init__(self, name, channel, seconds):
        assert channel.replace("_", "").isalnum(), channel
        self.proc = subprocess.Popen(
            [_psql(), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-d", f"{_admin(name)} application_name={self.APP}",
             "-c", f"LISTEN {channel}", "-c", f"SELECT pg_sleep({float(seconds)})"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL)
        self.seconds = seconds
        deadline = time.monotonic() + PSQL_TIMEOUT_S
        while not _run(_admin(name),
                       "SELECT count(*) FROM pg_stat_activity WHERE "
                       f"application_name = '{self.APP}' AND query LIKE "
                       "'SELECT pg_sleep%' AND state = 'active'").strip() == "1":
            assert time.monotonic() < deadline, "the listener never listened"
            assert self.proc.poll() is None, self.proc.communicate()
            time.sleep(0.05)

    def stop(self):
        """Wait for the session's end; the payloads (strings) it got."""
        out, err = self.proc.communicate(timeout=self.seconds + PSQL_TIMEOUT_S)
        assert self.proc.returncode == 0, redact(err)
        return re.findall(r'Asynchronous notification "\w+" with payload "([^"]*)"',
                          out)
