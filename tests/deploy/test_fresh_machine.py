"""A new user's machine: the README's two commands in a fresh container made
from the bare image (debian:bookworm-slim, which tests/deploy/make-base-image.sh
builds with debootstrap: root, nothing installed, no Node, no compiler), with
the checkout in /root (mode 0700) as a root user clones it. Nothing the suite
installed on this machine can help it there.

1. `deploy/run-local.sh` as the README's first terminal, then its second
   terminal: the message arrives. The install, the build and the node's
   start are timed; the data of the node goes where the rabbitmq user can
   reach it; Ctrl-C leaves nothing running.
2. `tests/run.sh` with a subset that takes every install path: apt (Node
   first, from Debian), the ASan build, RabbitMQ, PostgreSQL, Chromium with
   playwright-core on Debian's Node 18, Go, the cron differential test's
   croniter, sudo. Afterwards nothing runs that the user did not ask for, and
   no PostgreSQL main cluster was made by the install.

The only changes to what a user types: free ports through run-local.sh's
documented RMQS_LOCAL_* variables (the container shares the host's network,
loopback only), and, as under any TLS-intercepting proxy, the host's
NODE_EXTRA_CA_CERTS file given to the container when the host has one (npm
reaches its registry through it here). Costs about 10 minutes of CI
(figures in the report)."""

import os
import re
import signal
import subprocess
import tarfile
import tempfile
import time
import uuid

import pytest

from conftest import DOCKER, REPO, docker, docker_env, free_ports, http
from pylib import quickstart

BASE = "debian:bookworm-slim"
CHECKOUT = "/root/rmq-scheduler"
RUN_LOCAL_TIMEOUT_S = 900      # packages, a cold build on two cores, the node
SUITE_TIMEOUT_S = 2400         # 400 packages, the ASan build, the subset
# Every install path of tests/run.sh, in the fewest tests: unit (Criterion),
# cron differential (python3-croniter), the integration tests on both stores
# (RabbitMQ, PostgreSQL), the root check for a user with sudo, the example
# clients (Go, Node, Python), the contract (its Redocly lint skipped on Node
# 18, saying so), the browser on both stores (Chromium,
# playwright-core, Debian's Node).
SUBSET = ["unit.cron", "cron.differential", "integration.delivery",
          "integration.delivery.postgres", "integration.root_or_sudo",
          "integration.examples", "integration.openapi_contract", "browser.pages",
          "browser.pages.postgres"]
# What may run in the container between the steps: its init (sleep) and the
# shell that lists the processes.
IDLE = {"sleep", "sh", "cat"}


def checkout_tar(path):
    """The checkout as git sees it (tracked and untracked-but-not-ignored
    files, as they are in the working tree: no build trees), into a tar."""
    names = subprocess.run(
        ["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    with tarfile.open(path, "w") as tar:
        for name in names:
            full = os.path.join(REPO, name)
            if name and os.path.lexists(full):
                tar.add(full, arcname=name, recursive=False)


def host_extra_ca():
    """The certificate authorities this machine adds for Node (as behind a
    TLS-intercepting proxy): NODE_EXTRA_CA_CERTS's file, else the local
    ones of update-ca-certificates gathered into one file; None when there
    are none."""
    ca = os.environ.get("NODE_EXTRA_CA_CERTS")
    if ca and os.path.isfile(ca):
        return ca
    local = "/usr/local/share/ca-certificates"
    pems = sorted(os.path.join(d, f) for d, _, fs in os.walk(local) for f in fs
                  if f.endswith(".crt")) if os.path.isdir(local) else []
    if not pems:
        return None
    out = os.path.join(tempfile.gettempdir(), f"rmqs-fresh-ca-{os.getpid()}.pem")
    with open(out, "w", encoding="utf-8") as f:
        for pem in pems:
            with open(pem, encoding="utf-8") as g:
                f.write(g.read().rstrip("\n") + "\n")
    return out


class Fresh:
    """One container from the bare image, kept running with `sleep`."""

    def __init__(self):
        self.name = f"rmqs-fresh-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.env = {}
        args = ["run", "-d", "--name", self.name, "--network", "host",
                "--shm-size", "512m"]
        ca = host_extra_ca()
        if ca:
            args += ["-v", f"{ca}:/run/host-extra-ca.pem:ro"]
            self.env["NODE_EXTRA_CA_CERTS"] = "/run/host-extra-ca.pem"
        docker(*args, BASE, "sleep", "infinity")

    def exec_args(self, command, env=None, workdir=CHECKOUT, user="root"):
        args = [DOCKER, "exec", "-i", "-w", workdir, "-u", user]
        for k, v in {**self.env, **(env or {})}.items():
            args += ["-e", f"{k}={v}"]
        return args + [self.name, "bash", "-c", command]

    def run(self, command, timeout=120, env=None, workdir=CHECKOUT, check=True, user="root"):
        p = subprocess.run(self.exec_args(command, env, workdir, user), capture_output=True,
                           text=True, timeout=timeout, env=docker_env(),
                           stdin=subprocess.DEVNULL)
        if check:
            assert p.returncode == 0, f"exit {p.returncode}: {command}\n{p.stdout[-4000:]}" \
                                      f"\n{p.stderr[-4000:]}"
        return p

    def processes(self):
        """The names of the processes running in the container, but the idle
        ones. A zombie has ended: the container's init (sleep) reaps no
        orphan, so what a script stopped stays listed with state Z."""
        out = self.run("for p in /proc/[0-9]*; do s=$(cat $p/stat 2>/dev/null) && "
                       "case ${s##*) } in Z*) ;; *) cat $p/comm;; esac; done",
                       workdir="/").stdout.split()
        return sorted(set(out) - IDLE - {"bash"})

    def close(self):
        docker("rm", "-f", "-v", self.name, check=False, timeout=120)


@pytest.fixture(scope="module")
def fresh(engine):  # pylint: disable=unused-argument
    f = Fresh()
    try:
        with tempfile.TemporaryDirectory() as d:
            tar = os.path.join(d, "checkout.tar")
            checkout_tar(tar)
            with open(tar, "rb") as src:
                p = subprocess.run(f.exec_args(f"mkdir -p {CHECKOUT} && tar -x -C {CHECKOUT}",
                                               workdir="/"),
                                   stdin=src, capture_output=True, timeout=120, env=docker_env())
            assert p.returncode == 0, p.stderr
        yield f
    finally:
        f.close()


def test_the_bare_image_is_a_new_machine(fresh):
    """What the test relies on: root's home is closed to other users, and
    nothing the scripts install is there yet."""
    p = fresh.run("stat -c %a /root; for c in node npm cmake gcc rabbitmq-server psql "
                  "chromium go sudo; do command -v $c || true; done; id -u", workdir="/")
    lines = p.stdout.split()
    assert lines == ["700", "0"], p.stdout
    assert fresh.processes() == [], fresh.processes()


def quick_start(fresh, user, checkout):
    """The README's quick start in the container as user, from checkout:
    the first terminal until ready, the second terminal as pasted, Ctrl-C in
    the first. Returns (seconds to ready, seconds of the second terminal,
    the first terminal's output)."""
    blocks = quickstart.quickstart_blocks(os.path.join(REPO, "README.md"))
    names = ["amqp", "management", "dist", "epmd", "http"]
    ports = dict(zip(names, free_ports(len(names))))
    env = quickstart.local_ports_env(ports, f"rmqs-fresh-{uuid.uuid4().hex[:6]}@localhost",
                                     f"{checkout}/data", "build")
    env["PATH"] = "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env["HOME"] = os.path.dirname(checkout)  # both checkouts are in a home
    pgid = f"/tmp/first-terminal-{uuid.uuid4().hex[:8]}.pgid"
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as log:
        # setsid: the first terminal's process group, for its Ctrl-C
        proc = subprocess.Popen(
            fresh.exec_args(f"setsid --wait bash -c 'echo $$ > {pgid}; "
                            "exec bash -c \"$FIRST_TERMINAL\"'",
                            {**env, "FIRST_TERMINAL": blocks[0]}, checkout, user),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=docker_env())

        def text():
            log.seek(0)
            return log.read().decode(errors="replace")
        try:
            deadline = time.monotonic() + RUN_LOCAL_TIMEOUT_S
            while http(ports["http"], "GET", "/readyz", token=None)[0] != 200:
                assert proc.poll() is None, f"run-local.sh exited {proc.returncode}:\n{text()[-6000:]}"
                assert time.monotonic() < deadline, f"not ready in {RUN_LOCAL_TIMEOUT_S} s:\n" \
                                                    f"{text()[-6000:]}"
                time.sleep(0.5)
            ready_s = time.monotonic() - t0
            out = text()
            assert f'dashboard=http://127.0.0.1:{ports["http"]}/ui/' in out, out[-3000:]
            # The second terminal, as pasted.
            t1 = time.monotonic()
            p = fresh.run(quickstart.second_terminal(blocks[1], env["RMQS_LISTEN"],
                                                     ports["management"]),
                          timeout=90, env={"PATH": env["PATH"]}, workdir=checkout, user=user)
            row = quickstart.delivered_row(p.stdout)
            assert row and "quickstart" in row, p.stdout + p.stderr
            second_s = time.monotonic() - t1
            # Ctrl-C in the first terminal.
            fresh.run(f"kill -INT -- -$(cat {pgid})", workdir="/")
            rc = proc.wait(timeout=90)
            out = text()
            assert rc == 0, out[-4000:]
            assert 'msg="stopped"' in out and "RabbitMQ stopped" in out, out[-3000:]
        except BaseException:
            print(f"----- run-local.sh in the container -----\n{text()[-8000:]}")
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            raise
    assert fresh.processes() == [], f"left running after Ctrl-C: {fresh.processes()}"
    return ready_s, second_s, out


def test_run_local_and_the_quick_start_work_as_pasted(fresh, report):
    ready_s, second_s, out = quick_start(fresh, "root", CHECKOUT)
    # It said which broker before installing, and where the node's data went
    # (the rabbitmq user cannot enter /root).
    said = out.index("will start a RabbitMQ node of its own")
    assert said < out.index("run-local: installing "), out[:3000]
    assert "cannot pass through /root (mode 700)" in out, out[:3000]
    assert "/var/lib/rabbitmq/rmq-scheduler-local-" in out, out[:3000]
    # Debian's RabbitMQ service was kept from starting by the install's own
    # policy (without it, invoke-rc.d in a container only warns that it has
    # no policy and blocks by default).
    kept = [ln for ln in out.splitlines() if "kept from starting by policy-rc.d:" in ln]
    assert kept and "rabbitmq-server" in kept[0].split(), out[:3000]
    installed = fresh.run("dpkg-query -W -f '${db:Status-Abbrev}\\n' | grep -c '^ii'",
                          workdir="/").stdout.strip()
    report(f"fresh machine: run-local.sh as root from /root ready in {ready_s:.0f} s "
           f"(install, {installed} packages in all now; build; node), quick start's second "
           f"terminal {second_s:.1f} s, nothing left running after Ctrl-C")


def test_a_user_with_sudo_runs_it_from_their_home(fresh, report):
    """A user with sudo and the checkout in their home (mode 0700, as
    Debian 12's adduser makes it): the same two terminals, as that user."""
    home = "/home/dev"
    fresh.run("command -v sudo >/dev/null || apt-get install -y -qq sudo >/dev/null; "
              "useradd -m -d /home/dev -s /bin/bash dev && chmod 700 /home/dev && "
              "echo 'dev ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/dev && "
              f"cp -a {CHECKOUT} {home}/rmq-scheduler && rm -rf {home}/rmq-scheduler/build "
              f"{home}/rmq-scheduler/data && chown -R dev:dev {home}/rmq-scheduler",
              workdir="/", timeout=300)
    ready_s, second_s, out = quick_start(fresh, "dev", f"{home}/rmq-scheduler")
    assert "cannot pass through /home/dev (mode 700)" in out, out[:3000]
    report(f"fresh machine: run-local.sh as a sudo user from their home ready in "
           f"{ready_s:.0f} s (packages there already; build; node), second terminal "
           f"{second_s:.1f} s, nothing left running after Ctrl-C")


def test_the_test_command_passes_a_subset_that_takes_every_install_path(fresh, report):
    regex = "^(" + "|".join(n.replace(".", r"\.") for n in SUBSET) + ")$"
    t0 = time.monotonic()
    p = fresh.run(f"tests/run.sh --no-tests=error -R '{regex}' 2>&1", timeout=SUITE_TIMEOUT_S)
    took = time.monotonic() - t0
    out = p.stdout
    for name in SUBSET:
        assert f" {name} ...." in out and "Passed" in out.split(f" {name} ", 1)[1][:200], \
            f"{name} did not pass:\n{out[-6000:]}"
    assert "100% tests passed" in out, out[-6000:]
    assert "Node.js v18." in out, "not Debian's Node 18: " + out[:3000]
    left = fresh.processes()
    assert left == [], f"left running after tests/run.sh: {left}"
    # The install made no PostgreSQL cluster of its own, and took its
    # no-start policy away again.
    p = fresh.run("ls /etc/postgresql/15 2>/dev/null; ls /usr/sbin/policy-rc.d "
                  "/etc/postgresql-common/createcluster.d/ 2>&1 || true", workdir="/")
    assert "main" not in p.stdout.split() and "No such file" in p.stdout, p.stdout
    steps = [ln.split(": ", 1)[1] for ln in out.splitlines()
             if ln.startswith("run.sh: ") and " ready after " in ln]
    times = [ln.strip() for ln in out.splitlines() if re.search(r" Test +#", ln)]
    report(f"fresh machine: tests/run.sh with {len(SUBSET)} tests (every install path) "
           f"passed in {took:.0f} s ({'; '.join(steps)}), nothing left running; "
           + "; ".join(" ".join(t.split()) for t in times))

