"""RabbitMQ nodes of the tests: Broker controls the suite's node (started
by tests/run.sh through tests/lib/common.sh, found through RMQS_TEST_*);
RabbitNode runs a private node of a test's own (its folder, ports, epmd and
config, started with rabbitmq-server -detached, stopped by PID), the way
common.sh's rmqs_rabbit_start does for the shell scripts.
"""

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pika

from pylib.amqp import amqp_params
from pylib.procs import pid_alive
from pylib.service import env
from pylib.wait import free_port, port_open, wait_until


class Broker:
    """Control of the test run's own RabbitMQ node (started by tests/run.sh)."""

    def __init__(self):
        self.url = env("RMQS_TEST_AMQP_URL")
        self.port = int(env("RMQS_TEST_AMQP_PORT"))
        self.node = env("RMQS_TEST_RABBIT_NODE")
        self.app_stopped = False
        self.frozen_pid = None
        self.exchanges = []

    def ctl(self, *args, timeout=90):
        r = subprocess.run(["rabbitmqctl", "-n", self.node, *args],
                           capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(args)} failed "
                                 f"({r.returncode}): {r.stdout}{r.stderr}")
        return r.stdout

    def stop_app(self):
        self.app_stopped = True
        self.ctl("stop_app")
        wait_until(lambda: not port_open(self.port), 30, "the AMQP port to close")

    def start_app(self):
        self.ctl("start_app")
        self.wait_port()
        self.app_stopped = False

    def wait_port(self, timeout=60):
        wait_until(lambda: port_open(self.port), timeout,
                   "the AMQP port to accept connections", interval=0.1)

    def beam_pid(self):
        """The node's Erlang VM (from the pid file tests/run.sh gave it)."""
        with open(env("RABBITMQ_PID_FILE")) as f:
            return int(f.read().strip())

    def freeze(self):
        """SIGSTOP the node: connections stay open but nothing answers (a
        half-open broker). thaw() or cleanup() resumes it."""
        self.frozen_pid = self.beam_pid()
        os.kill(self.frozen_pid, signal.SIGSTOP)

    def thaw(self):
        if self.frozen_pid is not None:
            os.kill(self.frozen_pid, signal.SIGCONT)
            self.frozen_pid = None

    def declare_exchange(self, durable=False):
        """A unique direct exchange with no queue bound to it."""
        name = f"rmqs-test-noqueue-{uuid.uuid4().hex[:12]}"
        conn = pika.BlockingConnection(amqp_params(self.url))
        try:
            conn.channel().exchange_declare(name, exchange_type="direct",
                                            durable=durable)
        finally:
            conn.close()
        self.exchanges.append(name)
        return name

    def cleanup(self):
        self.thaw()
        if self.app_stopped:
            self.start_app()
        if self.exchanges:
            try:
                conn = pika.BlockingConnection(amqp_params(self.url))
                ch = conn.channel()
                for name in self.exchanges:
                    ch.exchange_delete(name)
                conn.close()
            except Exception:
                pass


class RabbitNode:
    """A private RabbitMQ node: its own name, folder (data, logs, config),
    Erlang distribution port and epmd, all on 127.0.0.1; the listeners are
    whatever the config says. The folder belongs to the rabbitmq user, which
    the node drops to (see /work/shared/TESTING-NOTES.md).

    Use: node = RabbitNode("rmqs-x"); put files in node.dir; node.prepare(
    config_text, wait_ports); node.launch(); node.wait_up(); ...
    node.stop(). launch() returns at once, so several nodes boot side by
    side."""

    def __init__(self, prefix):
        self.node = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}@localhost"
        self.dir = tempfile.mkdtemp(prefix=f"{prefix}-", dir="/tmp")
        self.dist_port, self.epmd_port = free_port(), free_port()
        self.wait_ports = ()
        self.pid = None
        self.launched = False
        self.env = None

    def prepare(self, config, wait_ports):
        """Write rabbitmq.conf (config) and an empty plugin list, give the
        folder to rabbitmq, and set the node's environment. wait_up() waits
        for every port of wait_ports to accept connections."""
        self.wait_ports = tuple(wait_ports)
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        with open(os.path.join(self.dir, "rabbitmq.conf"), "w") as f:
            f.write(config)
        rabbit = pwd.getpwnam("rabbitmq")
        os.chmod(self.dir, 0o750)
        for root, dirs, files in os.walk(self.dir):
            for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                os.chown(name, rabbit.pw_uid, rabbit.pw_gid)
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("RABBITMQ_", "ERL_"))}
        d = self.dir
        e.update(RABBITMQ_NODENAME=self.node,
                 RABBITMQ_DIST_PORT=str(self.dist_port),
                 ERL_EPMD_PORT=str(self.epmd_port), ERL_EPMD_ADDRESS="127.0.0.1",
                 RABBITMQ_MNESIA_BASE=f"{d}/mnesia", RABBITMQ_LOG_BASE=f"{d}/log",
                 RABBITMQ_PID_FILE=f"{d}/pid",
                 RABBITMQ_ENABLED_PLUGINS_FILE=f"{d}/enabled_plugins",
                 RABBITMQ_CONFIG_FILE=f"{d}/rabbitmq.conf",
                 RABBITMQ_ADVANCED_CONFIG_FILE=f"{d}/advanced.config",
                 RABBITMQ_CONF_ENV_FILE=f"{d}/rabbitmq-env.conf")
        self.env = e

    def _log_tail(self):
        out = []
        logdir = os.path.join(self.dir, "log")
        for name in sorted(os.listdir(logdir)) if os.path.isdir(logdir) else []:
            with open(os.path.join(logdir, name), errors="replace") as f:
                out.append(f"--- {name}\n" + "".join(f.readlines()[-40:]))
        return "\n".join(out)

    def _read_pid(self):
        try:
            with open(os.path.join(self.dir, "pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def launch(self):
        """Start the node in the background (rabbitmq-server -detached)."""
        r = subprocess.run(["rabbitmq-server", "-detached"], env=self.env,
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"rabbitmq-server -detached: {r.stdout}{r.stderr}"
        self.launched = True

    def wait_up(self, timeout=90):
        """Every port of wait_ports accepts connections (5-15 s on an idle
        machine)."""
        deadline = time.monotonic() + timeout
        while not all(port_open(p) for p in self.wait_ports):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"RabbitMQ node {self.node} did not listen within {timeout} s:\n"
                    + self._log_tail())
            time.sleep(0.2)
        self.pid = self._read_pid()
        return self

    def ctl(self, *args, timeout=60):
        r = subprocess.run(["rabbitmqctl", "-n", self.node, *args], env=self.env,
                           capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r.stdout

    def stop(self):
        """rabbitmqctl stop, then SIGKILL of the node's VM if still alive,
        then its epmd, then its folder."""
        if not self.launched:
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        pid = self.pid or self._read_pid()
        try:
            self.ctl("stop", timeout=60)
        except (AssertionError, subprocess.TimeoutExpired):
            pass
        if pid is not None:
            deadline = time.monotonic() + 15
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        try:
            subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"],
                           env=self.env, capture_output=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
