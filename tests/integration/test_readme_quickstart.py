"""README.md's quick start, run as written: the first ```sh block of the
"Quick start" section (deploy/run-local.sh) in the background as the first
terminal, the next block as the second terminal; the message must arrive in
the queue. Then, of the RabbitMQ node run-local.sh started: every listening
socket is on loopback (`ss`), and Ctrl-C stops it with the service.

The only changes to the README's commands, so that this can run next to
other tests on the same machine: run-local.sh gets free ports and a fresh
data folder through its documented RMQS_LOCAL_* variables and RMQS_LISTEN;
in the second block `127.0.0.1:8080` becomes that RMQS_LISTEN address and
`rabbitmqadmin ` becomes `rabbitmqadmin --port=<management port> `. Nothing
else is rewritten. The node is this test's own (not the suite's node);
its build goes to build-test/run-local (kept, so later runs are incremental).
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid

import pika
import pytest

from helpers import amqp_params, free_port, http_request, port_open, wait_until
from pylib import quickstart

# Whole file: the quick start is the README's two-command start on SQLite.
pytestmark = pytest.mark.sqlite_only(
    "the README's quick start (deploy/run-local.sh) is the SQLite default")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
README = os.path.join(ROOT, "README.md")
BUILD_TIMEOUT_S = 420   # a cold build on two busy cores, then the node's boot
STOP_TIMEOUT_S = 60
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|\[::1\]|::1)$")


def quickstart_blocks():
    return quickstart.quickstart_blocks(README)


def listeners(pids):
    """(process, pid, address, port) of every listening TCP socket of these
    processes, from `ss`. UDP is left out: the node serves nothing over UDP,
    and what `ss -u` shows of it is the client socket Erlang's DNS resolver
    (inet_res) binds to 0.0.0.0 on an ephemeral port for its queries, which
    comes and goes with lookups (seen in CI runs) and accepts no service."""
    out = subprocess.run(["ss", "-H", "-l", "-n", "-p", "-t", "-u"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    found = []
    for line in out.splitlines():
        cols = line.split()
        if not cols or cols[0] != "tcp":
            continue
        users = re.findall(r'\("([^"]+)",pid=(\d+),', line)
        for name, pid in users:
            if int(pid) in pids:
                local = cols[4]
                addr, port = local.rsplit(":", 1)
                found.append((name, int(pid), addr.split("%")[0], int(port)))
    return found


def pid_listening_on(port):
    out = subprocess.run(["ss", "-H", "-l", "-n", "-p", "-t", f"sport = :{port}"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    pids = {int(p) for p in re.findall(r"pid=(\d+),", out)}
    assert len(pids) == 1, f"listening on {port}: {out!r}"
    return pids.pop()


def descendants(pid):
    """pid and every process below it."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class RunLocal:
    """deploy/run-local.sh in its own session (so Ctrl-C can be sent to its
    process group, as a terminal does), on free ports."""

    def __init__(self):
        self.data = tempfile.mkdtemp(prefix="rmqs-run-local-")
        os.chmod(self.data, 0o755)  # the node runs as the rabbitmq user
        self.ports = {"amqp": free_port(), "management": free_port(),
                      "dist": free_port(), "epmd": free_port(), "http": free_port()}
        assert len(set(self.ports.values())) == 5, self.ports
        self.node = f"rmqs-quickstart-{uuid.uuid4().hex[:8]}@localhost"
        self.log_path = os.path.join(self.data, "run-local.log")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("RMQS_", "RABBITMQ_", "ERL_"))}
        self.env.update(quickstart.local_ports_env(
            self.ports, self.node, self.data, "build-test/run-local"))
        self.proc = None
        self.node_pid = None

    def start(self, command):
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        port = self.ports["http"]

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"run-local.sh exited with {self.proc.returncode}:\n"
                                     + self.log()[-4000:])
            try:
                return http_request(port, "GET", "/readyz", timeout=2).status == 200
            except OSError:
                return False
        wait_until(ready, BUILD_TIMEOUT_S, "run-local.sh's service to be ready", interval=0.5)
        with open(os.path.join(self.data, "rabbitmq", "pid")) as f:
            self.node_pid = int(f.read().strip())

    def log(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def ctrl_c(self):
        """SIGINT to the foreground process group, like Ctrl-C in a terminal;
        the script's exit status."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout=STOP_TIMEOUT_S)

    def close(self):
        """Whatever happened: nothing of this test's left running."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.ctrl_c()
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.node_pid is not None and running(self.node_pid):
            subprocess.run(["rabbitmqctl", "-n", self.node, "stop"], env=self.env,
                           timeout=60, capture_output=True, check=False)
            if running(self.node_pid):
                os.kill(self.node_pid, signal.SIGKILL)
        subprocess.run(["epmd", "-port", str(self.ports["epmd"]), "-kill"],
                       timeout=10, capture_output=True, check=False)
        subprocess.run(["rm", "-rf", self.data], timeout=60, check=False)


@pytest.fixture(scope="module")
def run_local():
    r = RunLocal()
    try:
        r.start(quickstart_blocks()[0])
        yield r
    except BaseException:
        print(f"----- run-local.sh log -----\n{r.log()[-8000:]}\n----- end -----")
        raise
    finally:
        r.close()


def second_terminal(r):
    """The README's second block with only host:port values replaced."""
    return quickstart.second_terminal(quickstart_blocks()[1], r.env["RMQS_LISTEN"],
                                      r.ports["management"])


def test_the_quick_start_delivers_the_message(run_local):
    r = run_local
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-e", "-c", second_terminal(r)], cwd=ROOT, env=r.env,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    lines = p.stdout.splitlines()
    job = json.loads(next(ln for ln in lines if ln.startswith("{")))
    assert job["status"] == "pending" and job["routing_key"] == "quickstart", job
    got = quickstart.delivered_row(p.stdout)
    assert got and "quickstart" in got, p.stdout
    # It came from the scheduler at its due time, and the queue is empty now.
    sent = http_request(r.ports["http"], "GET", f"/jobs/{job['id']}").body
    assert sent["status"] == "sent" and sent["sent_at"] >= sent["deliver_at"], sent
    conn = pika.BlockingConnection(amqp_params(f"amqp://guest:guest@127.0.0.1:{r.ports['amqp']}/"))
    try:
        left = conn.channel().queue_declare("quickstart", passive=True).method.message_count
    finally:
        conn.close()
    assert left == 0, f"{left} messages left in the queue"
    assert took >= 2.0, f"the message arrived {took:.2f} s after the curl, before it was due"
    print(f"[quickstart] second terminal took {took:.2f} s (delay 2 s)")


def test_the_broker_it_started_listens_on_loopback_only(run_local):
    r = run_local
    epmd = pid_listening_on(r.ports["epmd"])
    pids = descendants(r.node_pid) | {epmd}
    socks = listeners(pids)
    ports = {port for _, _, _, port in socks}
    for name in ("amqp", "management", "dist", "epmd"):
        assert r.ports[name] in ports, f"nothing of the node listens on its {name} port: {socks}"
    wide = [s for s in socks if not LOOPBACK.match(s[2])]
    assert not wide, f"the node listens beyond loopback: {wide}"
    print(f"[quickstart] node listeners: {sorted(set(socks))}")


def test_ctrl_c_stops_the_service_and_the_broker(run_local):
    r = run_local
    epmd = pid_listening_on(r.ports["epmd"])
    t0 = time.monotonic()
    assert r.ctrl_c() == 0, r.log()[-3000:]
    took = time.monotonic() - t0
    log = r.log()
    assert 'msg="stopped"' in log and "RabbitMQ stopped" in log, log[-3000:]
    for pid in (r.node_pid, epmd):
        assert not running(pid), f"pid {pid} still runs after Ctrl-C"
    for name, port in r.ports.items():
        assert not port_open(port), f"{name} port {port} still open after Ctrl-C"
    print(f"[quickstart] Ctrl-C to everything stopped: {took:.1f} s")
