"""Private PostgreSQL 15 servers for the tests that break one (the run-wide
server of tests/run.sh must keep working for every other test): a primary,
optionally with a synchronous hot standby (TESTING-NOTES.md: set
synchronous_standby_names after the base backup), in a temporary folder on
private loopback ports; kill -9 or freeze (SIGSTOP) of the primary. And a
TCP proxy on loopback that can stop forwarding: a network path that goes
silent (no answer, no reset), as a cut cable or a frozen firewall looks."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading

from pylib.wait import free_ports, wait_until

PG_BIN = "/usr/lib/postgresql/15/bin"


def run(*cmd, as_postgres=False, timeout=60, **kw):
    if as_postgres:
        cmd = ("runuser", "-u", "postgres", "--") + cmd
    return subprocess.run(cmd, check=True, timeout=timeout, capture_output=True,
                          text=True, **kw)


class PgServers:
    """A primary (p1) and, with standby=True, a hot standby (s1) streaming
    from it synchronously; the role app (password secret) owns appdb."""

    def __init__(self, standby=False):
        self.dir = tempfile.mkdtemp(prefix="rmqs-pg-")
        shutil.chown(self.dir, "postgres", "postgres")
        self.p1_port, self.s1_port = free_ports(2)
        self.standby = standby
        self.started = []  # data folders of servers started
        self.frozen = []   # pids stopped by freeze_primary

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
        if not self.standby:
            return self
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

    def url(self, port=None):
        """The service's URL: both servers (read-write wins) with a standby,
        else the primary, or `port` (a proxy in front of the primary)."""
        if port is not None:
            hosts = f"127.0.0.1:{port}"
        elif self.standby:
            hosts = f"127.0.0.1:{self.p1_port},127.0.0.1:{self.s1_port}"
        else:
            hosts = f"127.0.0.1:{self.p1_port}"
        return (f"postgresql://app:secret@{hosts}/appdb"
                "?target_session_attrs=read-write&connect_timeout=2")

    def _primary_pid(self):
        with open(os.path.join(self.dir, "p1", "postmaster.pid")) as f:
            return int(f.readline())

    def kill9_primary(self):
        os.kill(self._primary_pid(), signal.SIGKILL)
        self.started.remove("p1")  # never restarted: it would be a 2nd primary

    def promote_standby(self):
        run(f"{PG_BIN}/pg_ctl", "-D", os.path.join(self.dir, "s1"), "-w",
            "promote", as_postgres=True)

    def freeze_primary(self):
        """SIGSTOP the primary's postmaster and every process it started:
        connections stay open and nothing answers."""
        top = self._primary_pid()
        kids = subprocess.run(("pgrep", "-P", str(top)), capture_output=True,
                              text=True).stdout.split()
        self.frozen = [top] + [int(k) for k in kids]
        for pid in self.frozen:
            os.kill(pid, signal.SIGSTOP)

    def thaw_primary(self):
        for pid in self.frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.frozen = []

    def stop(self):
        self.thaw_primary()
        for name in self.started:
            subprocess.run(("runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl",
                            "-D", os.path.join(self.dir, name), "-m", "immediate",
                            "-w", "stop"), timeout=60, capture_output=True)
        # a killed primary's children die with their postmaster
        shutil.rmtree(self.dir, ignore_errors=True)


class SilentProxy:
    """Forwards 127.0.0.1:port to 127.0.0.1:target until freeze(): from then
    on it reads nothing and answers nothing (bytes wait in the kernel's
    buffers, no connection is reset, new ones are accepted by the kernel and
    left waiting) until thaw()."""

    def __init__(self, target):
        self.target = target
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = threading.Event()
        self.lsn = socket.socket()
        self.lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsn.bind(("127.0.0.1", 0))
        self.lsn.listen(64)
        self.port = self.lsn.getsockname()[1]
        self.socks = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _pump(self, src, dst):
        try:
            while not self.closed.is_set():
                self.flowing.wait()
                data = src.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # a freeze while this was read
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self):
        while not self.closed.is_set():
            try:
                self.flowing.wait()
                c, _ = self.lsn.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), 5)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.socks += [c, u]
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c), daemon=True).start()

    def freeze(self):
        self.flowing.clear()

    def thaw(self):
        self.flowing.set()

    def close(self):
        self.closed.set()
        self.flowing.set()
        self.lsn.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass
