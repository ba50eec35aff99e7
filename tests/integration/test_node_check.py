"""tests/run.sh checks the Node.js it will use before the long install and
build (issue 20): a Node older than 18, or one without npm beside it, stops
the script at once with a message that says what to do, and nothing is
installed or built.

The real tests/run.sh, as root, with a PATH that holds a stand-in `node`
(a shell script answering as an old or a new Node would) and only the
system tools the script uses before the check; never the machine's own
node or npm."""

import os
import shutil
import subprocess
import time

import pytest

pytestmark = pytest.mark.sqlite_only(
    "starts no service (the test command's Node check): nothing here has a store")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOLS = ("bash", "dirname", "id", "readlink", "cat", "mktemp", "rm", "printf")


def fake_path(tmp_path, version, with_npm):
    """A folder with the tools and a node that says it is version."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, d / tool)
    major = version.lstrip("v").split(".")[0]
    node = d / "node"
    node.write_text("#!/bin/bash\n"
                    f'case "$1" in -p) echo {major};; *) echo {version};; esac\n')
    node.chmod(0o755)
    if with_npm:
        npm = d / "npm"
        npm.write_text("#!/bin/bash\necho 9.2.0\n")
        npm.chmod(0o755)
    return str(d)


def run_sh(path):
    t0 = time.monotonic()
    p = subprocess.run(["bash", "tests/run.sh", "-R", "nothing"], cwd=ROOT,
                       env={"PATH": path, "HOME": "/root"}, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    return p, time.monotonic() - t0


def test_a_node_older_than_18_stops_it_before_anything_is_installed(tmp_path):
    assert os.geteuid() == 0, "run through tests/run.sh (as root)"
    p, took = run_sh(fake_path(tmp_path, "v16.20.2", with_npm=True))
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "need Node.js 18 or later" in p.stderr and "v16.20.2" in p.stderr, p.stderr
    assert "installing" not in p.stderr and "cmake" not in p.stdout + p.stderr, p.stderr
    assert took < 30, f"took {took:.1f} s"


def test_a_node_without_npm_stops_it_saying_so(tmp_path):
    p, _ = run_sh(fake_path(tmp_path, "v20.20.2", with_npm=False))
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "has no npm beside it" in p.stderr, p.stderr
    assert "installing" not in p.stderr, p.stderr
