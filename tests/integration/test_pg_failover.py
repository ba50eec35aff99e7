"""PostgreSQL failover under load: a primary with a synchronous hot standby
(both private, on loopback), the service on a libpq multi-host URL with
target_session_attrs=read-write. The primary is killed with SIGKILL while
clients post; /readyz answers 503 while no primary answers; the standby is
promoted; the service follows it. Every job acknowledged (201) before,
during or after arrives: with synchronous replication a 201 means the job
was on both servers. Measured: time from the kill to the first 201 and to
the first delivery of a job acknowledged after the promotion.

This test runs its own two servers (the run-wide one cannot fail over), so
it applies to PostgreSQL only.
"""

import http.client
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest

from helpers import format_ts, http_request, parse_ts, wait_until
from pylib.wait import free_ports

pytestmark = pytest.mark.skipif(
    os.environ.get("RMQS_TEST_STORE", "sqlite") != "postgres",
    reason="fails over a PostgreSQL primary to its standby: no such thing "
           "for a SQLite file")

PG_BIN = "/usr/lib/postgresql/15/bin"


def run(*cmd, as_postgres=False, timeout=60, **kw):
    if as_postgres:
        cmd = ("runuser", "-u", "postgres", "--") + cmd
    return subprocess.run(cmd, check=True, timeout=timeout, capture_output=True,
                          text=True, **kw)


class PrimaryAndStandby:
    """A primary (p1) and a hot standby (s1) streaming from it, synchronous
    (synchronous_standby_names = FIRST 1 (s1), set after the base backup as
    TESTING-NOTES.md says), in a temporary folder, on private ports."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rmqs-pgfo-")
        shutil.chown(self.dir, "postgres", "postgres")
        self.p1_port, self.s1_port = free_ports(2)
        self.started = []  # data folders of servers started

    def psql(self, port, *sql, db="postgres"):
        args = [f"{PG_BIN}/psql", "-h", self.dir, "-p", str(port), "-U",
                "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-qAt"]
        for s in sql:
            args += ["-c", s]
        return run(*args).stdout.strip()

    def _conf(self, name, text):
        with open(os.path.join(self.dir, name, "postgresql.conf"), "a") as f:
            f.write(text)

    def _start(self, name):
        run(f"{PG_BIN}/pg_ctl", "-D", os.path.join(self.dir, name), "-l",
            os.path.join(self.dir, name + ".log"), "-w", "-t", "60", "start",
            as_postgres=True, timeout=90)
        self.started.append(name)

    def start(self):
        p1 = os.path.join(self.dir, "p1")
        run(f"{PG_BIN}/initdb", "-D", p1, "-U", "postgres", "--auth-local=trust",
            "--auth-host=scram-sha-256", as_postgres=True)
        self._conf("p1", f"port={self.p1_port}\nlisten_addresses='127.0.0.1'\n"
                         f"unix_socket_directories='{self.dir}'\n")
        self._start("p1")
        self.psql(self.p1_port, "CREATE ROLE app LOGIN PASSWORD 'secret'",
                  "CREATE DATABASE appdb OWNER app",
                  "CREATE ROLE repl REPLICATION LOGIN PASSWORD 'replpw'")
        run(f"{PG_BIN}/pg_basebackup", "-d",
            f"host=127.0.0.1 port={self.p1_port} user=repl password=replpw",
            "-D", os.path.join(self.dir, "s1"), "-R", "-X", "stream", "-c", "fast",
            as_postgres=True)
        self._conf("s1", f"port={self.s1_port}\ncluster_name='s1'\n"
                         "wal_retrieve_retry_interval='100ms'\n")
        self._start("s1")
        self.psql(self.p1_port,
                  "ALTER SYSTEM SET synchronous_standby_names='FIRST 1 (s1)'",
                  "SELECT pg_reload_conf()")
        wait_until(lambda: self.psql(
            self.p1_port, "SELECT sync_state FROM pg_stat_replication "
                          "WHERE application_name = 's1'") == "sync",
            30, "the standby to be synchronous")
        return self

    def url(self):
        return (f"postgresql://app:secret@127.0.0.1:{self.p1_port},"
                f"127.0.0.1:{self.s1_port}/appdb?target_session_attrs=read-write"
                "&connect_timeout=2")

    def kill9_primary(self):
        with open(os.path.join(self.dir, "p1", "postmaster.pid")) as f:
            pid = int(f.readline())
        os.kill(pid, signal.SIGKILL)
        self.started.remove("p1")  # never restarted: it would be a 2nd primary

    def promote_standby(self):
        run(f"{PG_BIN}/pg_ctl", "-D", os.path.join(self.dir, "s1"), "-w",
            "promote", as_postgres=True)

    def stop(self):
        for name in self.started:
            subprocess.run(("runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl",
                            "-D", os.path.join(self.dir, name), "-m", "immediate",
                            "-w", "stop"), timeout=60, capture_output=True)
        # the killed primary's children die with their postmaster
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pg_pair():
    pair = PrimaryAndStandby().start()
    yield pair
    pair.stop()


def test_primary_killed_and_standby_promoted_loses_no_acknowledged_job(
        service, amqp, pg_pair, report):
    svc = service("--lease-ms", "3000", db=pg_pair.url())
    lock = threading.Lock()
    acked = {}  # id -> (deliver_at, answered at)
    stop = threading.Event()

    def post():
        while not stop.is_set():
            job = {"exchange": amqp.exchange, "routing_key": amqp.routing_key,
                   "body": "failover",
                   "deliver_at": format_ts(time.time() + 0.5)}
            try:
                r = http_request(svc.port, "POST", "/schedule", job, timeout=30)
            except (OSError, http.client.HTTPException):
                stop.wait(0.05)
                continue
            if r.status == 201:
                with lock:
                    acked[r.body["id"]] = (parse_ts(r.body["deliver_at"]),
                                           time.time())
            else:
                assert r.status == 503, r
                stop.wait(0.02)
    threads = [threading.Thread(target=post, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(acked) >= 300, 60, "300 jobs acknowledged")
        t_kill = time.time()
        pg_pair.kill9_primary()
        wait_until(lambda: svc.get("/readyz", timeout=10).status == 503, 20,
                   "/readyz to say 503 with no primary")
        t_unready = time.time()
        pg_pair.promote_standby()
        t_promoted = time.time()
        wait_until(lambda: any(t > t_promoted for _, t in list(acked.values())),
                   60, "a 201 after the promotion")
        first_201 = min(t for _, t in acked.values() if t > t_unready)
        wait_until(lambda: svc.get("/readyz", timeout=10).status == 200, 30,
                   "/readyz 200 again")
        n_before = len(acked)
        wait_until(lambda: len(acked) >= n_before + 300, 60,
                   "300 more jobs acknowledged after the failover")
    finally:
        stop.set()
        for t in threads:
            t.join(40)
    by_job = amqp.wait_for_jobs(acked, timeout=60)
    after = [j for j, (_, t) in acked.items() if t > t_promoted]
    first_delivery = min(min(m.received_at for m in by_job[j]) for j in after)
    early = [j for j, msgs in by_job.items() if j in acked and
             any(m.received_at < acked[j][0] - 0.001 for m in msgs)]
    dups = sum(1 for j, msgs in by_job.items() if j in acked and len(msgs) > 1)
    report(f"PostgreSQL failover (sync standby): {len(acked)} jobs "
           f"acknowledged, all arrived, {dups} duplicated, {len(early)} early; "
           f"kill -> /readyz 503 {t_unready - t_kill:.2f} s; promote took "
           f"{t_promoted - t_unready:.2f} s; kill -> first 201 "
           f"{first_201 - t_kill:.2f} s, kill -> first delivery of a job "
           f"acknowledged after the promotion {first_delivery - t_kill:.2f} s")
    assert not early, early[:5]
