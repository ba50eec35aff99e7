"""The test scripts need root, and the README's `tests/run.sh` must work as
written both in a fresh Debian 12 root shell (no sudo there) and for a user
with sudo (tests/lib/as-root.sh, used by tests/run.sh, tests/bench/run.sh and
tests/deploy/run.sh).

Real users, the real sudo and the real scripts: a system user made for the
test with a NOPASSWD sudoers rule (both removed at the end), and `nobody`
with a PATH that has no sudo. Nothing here starts a build or a broker: the
script that is run through sudo is tests/deploy/run.sh with
RMQS_TEST_DEPLOY=0, which stops right after the root check (exit 77).

Each user runs the scripts from a checkout of their own (a copy of the
scripts, owned by that user, mode 0700 like a home folder on Debian 12), not
from this one: this checkout may be under /root, where no other user can
read it, and a user with sudo runs their own clone, not root's."""

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid

import pytest

# Whole file: it runs the test scripts' root check and starts no service.
pytestmark = pytest.mark.sqlite_only(
    "starts no service (the scripts' root handling): nothing here has a store")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
AS_ROOT = os.path.join(ROOT, "tests", "lib", "as-root.sh")
# Each script with arguments it takes.
SCRIPTS = {"tests/run.sh": ["-L", "unit"], "tests/bench/run.sh": ["--quick"],
           "tests/deploy/run.sh": ["-k", "image"]}


# What the scripts read before (and, for tests/deploy/run.sh with
# RMQS_TEST_DEPLOY=0, just after) their root check.
CHECKOUT_FILES = [*SCRIPTS, "tests/lib/as-root.sh", "tests/lib/common.sh",
                  "deploy/lib/apt-install.sh"]


def own_checkout(user):
    """A copy of the scripts in a folder that belongs to user, mode 0700;
    its path. Removed by the caller."""
    base = tempfile.mkdtemp(prefix="rmqs-root-test-")
    os.chmod(base, 0o755)
    home = os.path.join(base, "checkout")
    for rel in CHECKOUT_FILES:
        os.makedirs(os.path.dirname(os.path.join(home, rel)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(home, rel))
    pw = pwd.getpwnam(user)
    for d, _, files in os.walk(home):
        for name in [d, *(os.path.join(d, f) for f in files)]:
            os.chown(name, pw.pw_uid, pw.pw_gid)
    os.chmod(home, 0o700)
    return home


def run_as(user, args, env, cwd, timeout=60):
    """args as user (runuser), in the folder cwd, with exactly env."""
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *(
        f"{k}={v}" for k, v in env.items()), *args], cwd=cwd, capture_output=True,
        text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def sudo_user():
    """A system user allowed everything through sudo without a password;
    removed, with its sudoers file, afterwards."""
    assert os.geteuid() == 0, "run through tests/run.sh (as root)"
    assert shutil.which("sudo"), "sudo is missing: tests/run.sh installs it"
    name = f"rmqs-sudo-{uuid.uuid4().hex[:8]}"
    rule = f"/etc/sudoers.d/{name}"
    home = None
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                    "/usr/sbin/nologin", name], check=True, timeout=30)
    try:
        with open(rule, "w", encoding="utf-8") as f:
            f.write(f"{name} ALL=(root) NOPASSWD: ALL\n")
        os.chmod(rule, 0o440)
        subprocess.run(["visudo", "-c", "-q", "-f", rule], check=True, timeout=30)
        home = own_checkout(name)
        yield name, home
    finally:
        if os.path.exists(rule):
            os.unlink(rule)
        subprocess.run(["userdel", name], timeout=30, check=False)
        if home:
            shutil.rmtree(os.path.dirname(home), ignore_errors=True)


@pytest.fixture
def open_dir():
    """A folder other users can read (pytest's tmp_path is root's only)."""
    with tempfile.TemporaryDirectory(prefix="rmqs-root-test-") as d:
        os.chmod(d, 0o755)
        yield d


@pytest.fixture
def path_without_sudo(open_dir):
    """A PATH with only what the scripts use before the root check."""
    d = os.path.join(open_dir, "bin")
    os.mkdir(d)
    for tool in ("bash", "id", "dirname", "readlink"):
        os.symlink(shutil.which(tool), os.path.join(d, tool))
    assert shutil.which("sudo", path=d) is None
    return d


@pytest.fixture
def nobody_checkout():
    home = own_checkout("nobody")
    yield home
    shutil.rmtree(os.path.dirname(home), ignore_errors=True)


@pytest.mark.parametrize("script", SCRIPTS)
def test_without_root_and_without_sudo_the_script_says_what_to_do(script, path_without_sudo,
                                                                  nobody_checkout):
    assert pwd.getpwnam("nobody").pw_uid != 0
    r = run_as("nobody", ["bash", script, *SCRIPTS[script]], {"PATH": path_without_sudo},
               cwd=nobody_checkout)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert f"{script}: needs root" in r.stderr, r.stderr
    assert "there is no sudo" in r.stderr and "root shell" in r.stderr, r.stderr
    assert "command not found" not in r.stderr, r.stderr


def test_a_user_with_sudo_gets_the_script_run_as_root(sudo_user):
    """tests/deploy/run.sh as a user with sudo: it re-executes itself through
    sudo and, as root, honours RMQS_TEST_DEPLOY=0 from the user's
    environment (skipped, exit 77). Before, it refused (exit 2)."""
    user, home = sudo_user
    r = run_as(user, ["bash", "tests/deploy/run.sh"],
               {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RMQS_TEST_DEPLOY": "0"}, cwd=home)
    assert "tests/deploy/run.sh: not root: running it again with sudo" in r.stderr, r.stderr
    assert "skipped (RMQS_TEST_DEPLOY=0)" in r.stderr, r.stderr
    assert r.returncode == 77, (r.returncode, r.stderr)


def test_sudo_keeps_the_arguments_and_the_variables(sudo_user, open_dir):
    """The re-executed script gets the same arguments (spaces and all) and
    the RMQS_*/CTEST_* variables, and runs as root."""
    user, home = sudo_user
    probe = os.path.join(open_dir, "probe.sh")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(f'. "{os.path.join(home, "tests", "lib", "as-root.sh")}"\n'
                'rmqs_as_root "$0" "$@"\n'
                'echo "uid=$(id -u)"\n'
                'printf "arg=<%s>\\n" "$@"\n'
                'echo "RMQS_FUZZ_SECONDS=${RMQS_FUZZ_SECONDS-unset}"\n'
                'echo "CTEST_OUTPUT_ON_FAILURE=${CTEST_OUTPUT_ON_FAILURE-unset}"\n'
                'echo "OTHER=${OTHER-unset}"\n')
    os.chmod(probe, 0o644)
    r = run_as(user, ["bash", probe, "-R", "two words", ""],
               {"PATH": "/usr/bin:/bin", "RMQS_FUZZ_SECONDS": "7",
                "CTEST_OUTPUT_ON_FAILURE": "1", "OTHER": "x"}, cwd=home)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "uid=0", "arg=<-R>", "arg=<two words>", "arg=<>", "RMQS_FUZZ_SECONDS=7",
        "CTEST_OUTPUT_ON_FAILURE=1", "OTHER=unset"], r.stdout + r.stderr


def test_as_root_the_script_is_not_run_again(tmp_path):
    probe = tmp_path / "probe.sh"
    probe.write_text(f'. "{AS_ROOT}"\nrmqs_as_root "$0" "$@"\necho "uid=$(id -u) $$"\n')
    r = subprocess.run(["bash", str(probe)], capture_output=True, text=True,
                       timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.startswith("uid=0 "), r
    assert r.stderr == "", r.stderr


def test_the_readme_and_the_scripts_say_tests_run_sh_without_sudo():
    """The documented commands are the ones that work as written."""
    for rel in ("README.md", "tests/bench/README.md", *SCRIPTS,
                "tests/integration/conftest.py"):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            text = f.read()
        assert "sudo tests/" not in text and "sudo RMQS_" not in text, rel
