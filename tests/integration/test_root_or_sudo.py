"""The test scripts need root, and the README's `tests/run.sh` must work as
written both in a fresh Debian 12 root shell (no sudo there) and for a user
with sudo (tests/lib/as-root.sh, used by tests/run.sh, tests/bench/run.sh and
tests/deploy/run.sh).

Real users, the real sudo and the real scripts: a system user made for the
test with a NOPASSWD sudoers rule (both removed at the end), and `nobody`
with a PATH that has no sudo. Nothing here starts a build or a broker: the
script that is run through sudo is tests/deploy/run.sh with
RMQS_TEST_DEPLOY=0, which stops right after the root check (exit 77)."""

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


def run_as(user, args, env, timeout=60):
    """args as user (runuser), in the repository, with exactly env."""
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *(
        f"{k}={v}" for k, v in env.items()), *args], cwd=ROOT, capture_output=True,
        text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def sudo_user():
    """A system user allowed everything through sudo without a password;
    removed, with its sudoers file, afterwards."""
    assert os.geteuid() == 0, "run through tests/run.sh (as root)"
    assert shutil.which("sudo"), "sudo is missing: tests/run.sh installs it"
    name = f"rmqs-sudo-{uuid.uuid4().hex[:8]}"
    rule = f"/etc/sudoers.d/{name}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                    "/usr/sbin/nologin", name], check=True, timeout=30)
    try:
        with open(rule, "w", encoding="utf-8") as f:
            f.write(f"{name} ALL=(root) NOPASSWD: ALL\n")
        os.chmod(rule, 0o440)
        subprocess.run(["visudo", "-c", "-q", "-f", rule], check=True, timeout=30)
        yield name
    finally:
        if os.path.exists(rule):
            os.unlink(rule)
        subprocess.run(["userdel", name], timeout=30, check=False)


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


@pytest.mark.parametrize("script", SCRIPTS)
def test_without_root_and_without_sudo_the_script_says_what_to_do(script, path_without_sudo):
    assert pwd.getpwnam("nobody").pw_uid != 0
    r = run_as("nobody", ["bash", script, *SCRIPTS[script]], {"PATH": path_without_sudo})
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert f"{script}: needs root" in r.stderr, r.stderr
    assert "there is no sudo" in r.stderr and "root shell" in r.stderr, r.stderr
    assert "command not found" not in r.stderr, r.stderr


def test_a_user_with_sudo_gets_the_script_run_as_root(sudo_user):
    """tests/deploy/run.sh as a user with sudo: it re-executes itself through
    sudo and, as root, honours RMQS_TEST_DEPLOY=0 from the user's
    environment (skipped, exit 77). Before, it refused (exit 2)."""
    r = run_as(sudo_user, ["bash", "tests/deploy/run.sh"],
               {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RMQS_TEST_DEPLOY": "0"})
    assert "tests/deploy/run.sh: not root: running it again with sudo" in r.stderr, r.stderr
    assert "skipped (RMQS_TEST_DEPLOY=0)" in r.stderr, r.stderr
    assert r.returncode == 77, (r.returncode, r.stderr)


def test_sudo_keeps_the_arguments_and_the_variables(sudo_user, open_dir):
    """The re-executed script gets the same arguments (spaces and all) and
    the RMQS_*/CTEST_* variables, and runs as root."""
    probe = os.path.join(open_dir, "probe.sh")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(f'. "{AS_ROOT}"\n'
                'rmqs_as_root "$0" "$@"\n'
                'echo "uid=$(id -u)"\n'
                'printf "arg=<%s>\\n" "$@"\n'
                'echo "RMQS_FUZZ_SECONDS=${RMQS_FUZZ_SECONDS-unset}"\n'
                'echo "CTEST_OUTPUT_ON_FAILURE=${CTEST_OUTPUT_ON_FAILURE-unset}"\n'
                'echo "OTHER=${OTHER-unset}"\n')
    os.chmod(probe, 0o644)
    r = run_as(sudo_user, ["bash", probe, "-R", "two words", ""],
               {"PATH": "/usr/bin:/bin", "RMQS_FUZZ_SECONDS": "7",
                "CTEST_OUTPUT_ON_FAILURE": "1", "OTHER": "x"})
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
