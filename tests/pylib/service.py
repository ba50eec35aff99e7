"""The real rmq-scheduler binary as the tests run it: its own loopback port,
folder and database (a SQLite file in the folder, or a fresh database on
the run's PostgreSQL server: store="postgres", tests/pylib/pg.py), started
and waited for (GET /healthz, /readyz),
stopped with SIGTERM (exit status 0 expected) or killed, its log read back
for sanitizer reports, and the HTTP API in terms of jobs. The integration
fixtures (conftest.py) and the bench (bench.py) both start it through here.
"""

import http.client
import os
import re
import signal
import subprocess
import time

from pylib import pg
from pylib.http import http_request
from pylib.runenv import env  # noqa: F401 (helpers.py imports it from here)
from pylib.wait import free_port, wait_until

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:", "WARNING: ThreadSanitizer")


class Service:
    """The real rmq-scheduler binary with its own database folder and port."""

    def __init__(self, workdir, amqp_url, args=(), log_level="info",
                 host="127.0.0.1", settings_in_env=False, extra_env=None,
                 binary=None, log_path=None, store="sqlite",
                 share_db_with=None, db=None):
        """settings_in_env: pass listen address, database and AMQP URL as
        RMQS_LISTEN/RMQS_DB/RMQS_AMQP_URL instead of flags. extra_env: more
        environment variables for the process. binary: the executable
        ($RMQS_BIN when None); log_path: its stdout and stderr (service.log
        in workdir when None). store: "sqlite" (rmqs.db in workdir) or
        "postgres" (a new database, created here; drop_database() removes
        it). share_db_with: another postgres Service whose database this
        one uses too (a second instance on the same data; it is that
        Service's to drop). Two instances on one SQLite file are refused by
        its lock file, so sharing is postgres-only. db: a postgres URL of a
        server the test runs itself (nothing created or dropped here)."""
        self.dir = workdir
        os.makedirs(self.dir, exist_ok=True)
        if share_db_with is not None:
            store = share_db_with.store
            assert store == "postgres", \
                "share_db_with: only on postgres (one SQLite file takes one instance)"
        assert store in pg.STORES, store
        self.store = store
        self.pg_database = None  # the database's name on postgres
        self.owns_database = False
        if store == "sqlite":
            self.db = os.path.join(self.dir, "rmqs.db")
        elif share_db_with is not None:
            self.pg_database = share_db_with.pg_database
            self.db = share_db_with.db
        elif db is not None:
            self.db = db
        else:
            self.pg_database = pg.create_database()
            self.owns_database = True
            self.db = pg.database_url(self.pg_database)
        self.log_path = log_path or os.path.join(self.dir, "service.log")
        self.binary = binary
        self.host = host
        self.port = free_port(host)
        self.amqp_url = amqp_url
        self.args = list(args)
        self.log_level = log_level
        self.settings_in_env = settings_in_env
        self.extra_env = dict(extra_env or {})
        self.proc = None
        self.exit_codes = []  # of every process this Service ran, in order
        # seconds from just before exec to /healthz and /readyz answering
        # 200, of the last start that waited for them
        self.start_times = {}
        self.started_at = None  # time.monotonic() just before the last exec

    # lifecycle
    def listen(self):
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def settings(self):
        return {"RMQS_LISTEN": self.listen(), "RMQS_DB": self.db,
                "RMQS_AMQP_URL": self.amqp_url}

    def command(self):
        cmd = [self.binary or env("RMQS_BIN")]
        if not self.settings_in_env:
            cmd += ["--listen", self.listen(), "--db", self.db,
                    "--amqp-url", self.amqp_url]
        return cmd + ["--log-level", self.log_level, *self.args]

    def environment(self):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("RMQS_") and not k.startswith("RMQS_TEST"):
                del e[k]  # only what this service is given
        if self.settings_in_env:
            e.update(self.settings())
        e.update(self.extra_env)
        return e

    def start(self, wait="ready", timeout=20, interval=0.05):
        assert not self.alive(), "service already running"
        with open(self.log_path, "ab") as log:
            shown = re.sub(r"((?:amqps?|postgres(?:ql)?)://[^:/@]*:)[^@]*@",
                           r"\1***@", " ".join(self.command()))
            log.write(f"=== start: {shown}\n".encode())
            log.flush()
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log,
                                         env=self.environment())
        self.wait_healthy(wait, timeout, interval)
        return self

    def wait_healthy(self, wait="ready", timeout=20, interval=0.05):
        """wait: "ready" (healthz and readyz 200), "health" (healthz only) or
        None (do not wait). Polls every `interval` s; notes in start_times
        when each answered 200."""
        if wait is None:
            return
        self.start_times = {}
        paths = ["/healthz"] + (["/readyz"] if wait == "ready" else [])
        for path in paths:
            def ok(path=path):
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"service exited with {self.proc.returncode} during start-up")
                try:
                    return self.get(path, timeout=2).status == 200
                except (OSError, http.client.HTTPException):
                    return False
            wait_until(ok, timeout, f"GET {path} to answer 200", interval)
            self.start_times[path.strip("/") + "_s"] = \
                round(time.monotonic() - self.started_at, 4)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid

    def kill9(self):
        assert self.alive(), "service is not running"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.exit_codes.append(self.proc.wait(timeout=10))

    def terminate(self, timeout=30):
        """SIGTERM; the service must exit by itself with status 0."""
        assert self.alive(), "service is not running"
        code = self._sigterm(timeout)
        if code is None:
            raise AssertionError(f"service did not exit within {timeout} s of SIGTERM")
        assert code == 0, f"service exited with {code} after SIGTERM, expected 0"

    def _sigterm(self, timeout):
        """SIGTERM, wait; SIGKILL after timeout. Notes the exit status in
        exit_codes; returns it, or None if it had to be killed."""
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.exit_codes.append(self.proc.wait(timeout=10))
            return None
        self.exit_codes.append(code)
        return code

    def restart(self, wait="ready", timeout=20):
        """Start again on the same database and port (after kill9/terminate)."""
        return self.start(wait, timeout)

    def stop(self, timeout=20):
        """Teardown: SIGTERM, then SIGKILL after the deadline. Returns a
        problem description, or None if it exited cleanly (or was not
        running)."""
        if not self.alive():
            return None
        code = self._sigterm(timeout)
        if code is None:
            return f"service did not exit within {timeout} s of SIGTERM (killed)"
        if code != 0:
            return f"service exited with status {code} after SIGTERM"
        return None

    def drop_database(self):
        """postgres: drop the database this Service created (after every
        instance on it stopped). Nothing on sqlite: the file goes with the
        test's folder."""
        if self.owns_database:
            pg.drop_database(self.pg_database)
            self.owns_database = False

    def sql(self, query):
        """postgres: rows of `query` in this service's database (pg.sql)."""
        assert self.store == "postgres", "sql() reads the postgres database"
        return pg.sql(self.pg_database, query)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def sanitizer_report(self):
        text = self.log()
        if any(m in text for m in SANITIZER_MARKERS):
            return text
        return None

    # HTTP
    def request(self, method, path, body=None, headers=None, timeout=15,
                check_contract=True):
        return http_request(self.port, method, path, body, headers, timeout,
                            self.host, check_contract)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def patch(self, path, body=None, **kw):
        return self.request("PATCH", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    # the API in terms of jobs
    def schedule(self, job, headers=None, expect=201):
        status, hdrs, body = self.post("/schedule", job, headers=headers)
        assert status == expect, f"POST /schedule {job!r} -> {status} {body!r}"
        if status == 201:
            assert hdrs.get("Location") == f"/jobs/{body['id']}", hdrs.get("Location")
        return body

    def job(self, job_id):
        status, _, body = self.get(f"/jobs/{job_id}")
        assert status == 200, f"GET /jobs/{job_id} -> {status} {body!r}"
        return body

    def wait_status(self, job_id, statuses, timeout=30):
        if isinstance(statuses, str):
            statuses = (statuses,)
        last = {}

        def reached():
            last["job"] = self.job(job_id)
            return last["job"] if last["job"]["status"] in statuses else None
        try:
            return wait_until(reached, timeout, f"job {job_id} to be {statuses}")
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {last.get('job')!r}") from None

    def list_all(self, status=None, limit=1000):
        """Every job, following the cursors. Returns (jobs, pages)."""
        jobs, pages, after = [], 0, None
        while True:
            q = [f"limit={limit}"]
            if status:
                q.append(f"status={status}")
            if after:
                q.append(f"after={after}")
            st, _, body = self.get("/jobs?" + "&".join(q))
            assert st == 200, f"GET /jobs -> {st} {body!r}"
            jobs.extend(body["jobs"])
            pages += 1
            after = body["next"]
            if after is None:
                return jobs, pages
            assert pages < 10000, "cursor never ends"
