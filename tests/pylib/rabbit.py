"""RabbitMQ nodes of the tests: Broker controls the suite's node (started
by tests/run.sh through tests/lib/common.sh, found through RMQS_TEST_*);
RabbitNode runs a private node of a test's own (its folder, ports, epmd and
config, started with rabbitmq-server -detached, stopped by PID), the way
common.sh's rmqs_rabbit_start does for the shell scripts; RabbitCluster
runs three such nodes clustered (node loss tests).
"""

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import pika

from pylib.amqp import amqp_params
from pylib.procs import pid_alive
from pylib.service import env
from pylib.wait import free_port, free_ports, port_open, wait_until


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

    def proc_state(self, pid):
        """The process's state letter (/proc/<pid>/stat: R, S, T...), or None."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None

    def log_tail(self, lines=60):
        """The last lines of the node's own log (RABBITMQ_LOG_BASE)."""
        base = os.environ.get("RABBITMQ_LOG_BASE", "")
        path = os.path.join(base, f"{self.node}.log")
        try:
            with open(path, errors="replace") as f:
                return f"--- {path}\n" + "".join(f.readlines()[-lines:])
        except OSError as e:
            return f"--- {path}: {e}"

    def ensure_up(self):
        """The suite's node accepts AMQP connections, or is brought back.
        A test that stops or freezes the node puts it back in its cleanup;
        one killed before its cleanup (a ctest timeout) would leave every
        later test of the run waiting on a dead port, one timeout at a
        time. So each test starts by checking (one TCP connect) and, when
        the node is not answering: a stopped VM (SIGSTOP) gets SIGCONT, a
        stopped app gets start_app. Returns None when the node was up, else
        what was found and done (raises, with the node's log, when it
        cannot be brought back: its VM is gone)."""
        try:
            pid = self.beam_pid()
        except (OSError, ValueError):
            pid = None
        state = self.proc_state(pid) if pid else None
        if state not in ("Z", "T") and port_open(self.port):
            return None  # a frozen VM's port still completes a TCP connect
        if state is None or state == "Z":
            raise AssertionError(
                f"the suite's RabbitMQ node {self.node} is gone (VM pid {pid}); "
                f"every test from here on would fail:\n{self.log_tail()}")
        if state == "T":
            os.kill(pid, signal.SIGCONT)
            found = f"its VM (pid {pid}) stopped by SIGSTOP: sent SIGCONT"
            try:
                self.wait_port(timeout=30)
                return found
            except AssertionError:
                pass
        else:
            found = f"its VM (pid {pid}, state {state}) up, AMQP port {self.port} closed"
        try:
            self.ctl("start_app")
            self.wait_port()
        except (AssertionError, subprocess.TimeoutExpired) as e:
            raise AssertionError(f"the suite's RabbitMQ node {self.node}: {found}; "
                                 f"start_app did not bring it back: {e}\n"
                                 f"{self.log_tail()}") from None
        return found + "; start_app brought it back"

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
        self.ever_launched = False  # its epmd may be running
        self.env = None
        self.log_mark = 0

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

    def log_path(self):
        return os.path.join(self.dir, "log", f"{self.node}.log")

    def _log_since_launch(self):
        """What the node logged since the last launch() (a restarted node
        appends to the same file)."""
        try:
            with open(self.log_path(), errors="replace") as f:
                f.seek(self.log_mark)
                return f.read()
        except OSError:
            return ""

    def launch(self):
        """Start the node in the background (rabbitmq-server -detached)."""
        try:
            self.log_mark = os.path.getsize(self.log_path())
        except OSError:
            self.log_mark = 0
        r = subprocess.run(["rabbitmq-server", "-detached"], env=self.env,
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"rabbitmq-server -detached: {r.stdout}{r.stderr}"
        self.launched = self.ever_launched = True

    def wait_up(self, timeout=90):
        """The node has booted since launch() (its log says "Server startup
        complete") with a listener of its own on every port of wait_ports
        (its log names each one), and those ports accept connections: 5-15 s
        on an idle machine. A port that answers is not enough: if another
        process took a port before the node could bind it, the node fails
        to boot and whatever holds the port answers instead (a TLS client
        then sees a failed handshake, not a missing node)."""
        deadline = time.monotonic() + timeout

        def booted():
            log = self._log_since_launch()
            return ("Server startup complete" in log and
                    all(f"listener on 127.0.0.1:{p}\n" in log
                        for p in self.wait_ports))
        while not (booted() and all(port_open(p) for p in self.wait_ports)):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"RabbitMQ node {self.node} did not boot with listeners on "
                    f"{list(self.wait_ports)} within {timeout} s:\n"
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

    def stop_vm(self):
        """rabbitmqctl stop, then SIGKILL of the node's VM if still alive;
        its epmd and folder stay (a cluster shares one epmd)."""
        if not self.launched:
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
        self.launched = False

    def stop(self):
        """stop_vm(), then the node's epmd, then its folder."""
        self.stop_vm()
        if self.ever_launched:
            self.kill_epmd()
        shutil.rmtree(self.dir, ignore_errors=True)

    def kill_epmd(self):
        try:
            subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"],
                           env=self.env, capture_output=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            pass


class RabbitCluster:
    """A RabbitMQ cluster of private nodes on 127.0.0.1 (three by default):
    RabbitNodes that share one private epmd, keep AMQP and the Erlang
    distribution on loopback, and join the first node at their first boot
    (classic_config peer discovery; TESTING-NOTES.md "A 3-node RabbitMQ
    cluster on loopback"). About 15-25 s to start: a test module starts one
    (a module fixture) and stops it at the end.

    nodes[i] are the RabbitNodes, ports[i] their AMQP ports, urls[i] their
    amqp:// URLs and url_list() the comma-separated list the service takes.
    stop_node / kill_node / restart_node act on one node; stop() ends only
    the nodes this object started (rabbitmqctl stop, then SIGKILL by PID),
    their epmd and their folders."""

    def __init__(self, size=3, prefix="rmqs-cluster"):
        self.ports = free_ports(size)
        epmd = free_port()
        self.nodes = []
        for i in range(size):
            node = RabbitNode(f"{prefix}{i + 1}")
            node.epmd_port = epmd  # one epmd, so the nodes find each other
            self.nodes.append(node)
        self.urls = [f"amqp://guest:guest@127.0.0.1:{p}/%2F" for p in self.ports]

    def url_list(self, order=None):
        return ",".join(self.urls[i] for i in (order or range(len(self.urls))))

    def _config(self, i):
        lines = [f"listeners.tcp.1 = 127.0.0.1:{self.ports[i]}",
                 "disk_free_limit.absolute = 50MB",
                 "log.file.level = info"]
        if i > 0:
            lines += ["cluster_formation.peer_discovery_backend = classic_config",
                      f"cluster_formation.classic_config.nodes.1 = {self.nodes[0].node}"]
        return "\n".join(lines) + "\n"

    def start(self, timeout=120):
        try:
            for i, node in enumerate(self.nodes):
                node.prepare(self._config(i), [self.ports[i]])
                node.env.update(
                    ERL_CRASH_DUMP=f"{node.dir}/erl_crash.dump",
                    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=
                        "-kernel inet_dist_use_interface {127,0,0,1}")
            self.nodes[0].launch()
            self.nodes[0].wait_up(timeout)
            for node in self.nodes[1:]:  # they join the first at boot
                node.launch()
            for node in self.nodes[1:]:
                node.wait_up(timeout)
            self.wait_running(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def running(self, via=None):
        """The node names the cluster reports running, asked through node
        index `via` (the first live one by default)."""
        order = [via] if via is not None else range(len(self.nodes))
        for i in order:
            if not self.nodes[i].launched:
                continue
            try:
                out = self.nodes[i].ctl("-q", "cluster_status", "--formatter",
                                        "json", timeout=30)
                return set(json.loads(out).get("running_nodes", []))
            except (AssertionError, ValueError, subprocess.TimeoutExpired):
                continue
        return set()

    def wait_running(self, names=None, timeout=90):
        """Until every node in names (all started nodes by default) is
        running in the cluster."""
        want = set(names or (n.node for n in self.nodes if n.launched))
        wait_until(lambda: want <= self.running(), timeout,
                   f"cluster nodes {sorted(want)} running", interval=0.5)

    def index_of_port(self, port):
        return self.ports.index(port)

    def stop_node(self, i):
        """Graceful stop of node i (rabbitmqctl stop, waits for the exit)."""
        self.nodes[i].stop_vm()

    def kill_node(self, i):
        """kill -9 of node i's Erlang VM; returns when it is gone."""
        node = self.nodes[i]
        pid = node.pid or node._read_pid()
        assert pid is not None and pid_alive(pid), f"node {i} not running"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 10, f"node {i} to die")
        node.launched = False

    def restart_node(self, i, timeout=90):
        """Start node i again with its data: it rejoins the cluster."""
        node = self.nodes[i]
        node.launch()
        node.wait_up(timeout)
        self.wait_running(timeout=timeout)

    def stop(self):
        threads = [threading.Thread(target=n.stop_vm) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        if any(n.ever_launched for n in self.nodes):
            self.nodes[0].kill_epmd()
        for n in self.nodes:
            shutil.rmtree(n.dir, ignore_errors=True)
