"""The client examples of api/examples/ work against the real service: each
schedules a job, reads it back pending and cancels it, prints what the
README of the examples says, and exits non-zero on an unexpected answer.

schedule.sh needs curl, example.mjs Node.js 18 or later (built-in fetch),
main.go a Go toolchain (built once per run with `go build`, as `go run`
would): a missing tool skips that example with the reason; example.py
always runs (standard library only)."""

import os
import re
import shutil
import subprocess
import uuid

import pytest

from helpers import UUID7_RE, free_port, go_build

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.normpath(os.path.join(HERE, "..", "..", "api", "examples"))
PYTHON = "/usr/bin/python3"

LINES = [
    re.compile(r"^scheduled id=(?P<id>\S+) status=pending "
               r"deliver_at=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"),
    re.compile(r"^read id=(?P<id>\S+) status=pending$"),
    re.compile(r"^cancelled id=(?P<id>\S+) status=cancelled$"),
]


def _node_major():
    node = shutil.which("node")
    if node is None:
        return None
    r = subprocess.run([node, "--version"], capture_output=True, text=True,
                       timeout=30)
    m = re.match(r"v(\d+)", r.stdout.strip())
    return int(m.group(1)) if m else None


def _go_example(tmp_path):
    """main.go built once per test run (go run would compile it every time)."""
    return [go_build(os.path.join(EXAMPLES, "main.go"))]


def _command(name, tmp_path):
    """The argv that runs an example, or pytest.skip."""
    path = os.path.join(EXAMPLES, name)
    if name == "schedule.sh":
        if shutil.which("curl") is None:
            pytest.skip("curl is not installed (apt-get install curl)")
        return ["sh", path]
    if name == "example.py":
        return [PYTHON, path]
    if name == "example.mjs":
        major = _node_major()
        if major is None:
            pytest.skip("node is not installed: example.mjs not run")
        if major < 18:
            pytest.skip(f"node {major} has no built-in fetch (needs 18+)")
        return [shutil.which("node"), path]
    if name == "main.go":
        if shutil.which("go") is None:
            pytest.skip("go is not installed: main.go not run")
        return _go_example(tmp_path)
    raise AssertionError(name)


def run_example(name, base_url, tmp_path, token=None, timeout=180):
    argv = _command(name, tmp_path)
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
           and k != "RMQS_API_TOKEN"}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    if token is not None:
        env["RMQS_API_TOKEN"] = token
    return subprocess.run(argv + [base_url], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL,
                          cwd=str(tmp_path))


def assert_ran(r, svc, name):
    assert r.returncode == 0, f"{name} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3, f"{name} printed:\n{r.stdout}"
    ids = set()
    for line, rx in zip(lines, LINES):
        m = rx.match(line)
        assert m, f"{name}: unexpected line {line!r} (want {rx.pattern})"
        ids.add(m.group("id"))
    assert len(ids) == 1, f"{name}: the steps name different jobs: {lines}"
    job_id = ids.pop()
    assert UUID7_RE.match(job_id), job_id
    # What the example did really happened in the service.
    job = svc.job(job_id)
    assert job["status"] == "cancelled", job
    assert job["routing_key"] == "orders.expire"
    assert job["body"] == {"order": 1234}
    assert job["headers"] == {"tenant": "acme"}
    return job


EXAMPLE_FILES = ["schedule.sh", "example.py", "example.mjs", "main.go"]


def test_every_example_is_tested():
    present = sorted(f for f in os.listdir(EXAMPLES)
                     if f.endswith((".sh", ".py", ".mjs", ".js", ".go")))
    assert present == sorted(EXAMPLE_FILES), \
        f"api/examples/ has {present}; test_examples.py knows {EXAMPLE_FILES}"


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_schedules_reads_and_cancels(service, tmp_path, name):
    svc = service()
    # With and without a trailing slash on the base URL.
    for base in (f"http://127.0.0.1:{svc.port}", f"http://127.0.0.1:{svc.port}/"):
        assert_ran(run_example(name, base, tmp_path), svc, name)
    jobs, _ = svc.list_all()
    assert len(jobs) == 2 and all(j["status"] == "cancelled" for j in jobs), jobs


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_sends_the_token_and_fails_without_it(service, tmp_path, name):
    token = "example-" + uuid.uuid4().hex
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": token})
    base = f"http://127.0.0.1:{svc.port}"
    r = run_example(name, base, tmp_path)  # no token
    assert r.returncode != 0, f"{name} exited 0 on a 401:\n{r.stdout}"
    assert "401" in r.stderr, r.stderr
    assert not r.stdout.strip(), r.stdout
    r = run_example(name, base, tmp_path, token=token)
    assert r.returncode == 0, f"{name} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert token not in r.stdout + r.stderr
    job_id = LINES[0].match(r.stdout.splitlines()[0]).group("id")
    st, _, job = svc.get(f"/jobs/{job_id}",
                         headers={"Authorization": f"Bearer {token}"})
    assert st == 200 and job["status"] == "cancelled", (st, job)


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_fails_when_nothing_answers(tmp_path, name):
    r = run_example(name, f"http://127.0.0.1:{free_port()}", tmp_path)
    assert r.returncode != 0, f"{name} exited 0 with no service:\n{r.stdout}"
    assert not r.stdout.strip(), r.stdout
    assert r.stderr.strip(), f"{name} failed without saying why"


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_fails_on_an_unexpected_answer(service, tmp_path, name):
    # --allow-exchanges without "": the example's job is refused (403).
    svc = service("--allow-exchanges", "only-this-one")
    r = run_example(name, f"http://127.0.0.1:{svc.port}", tmp_path)
    assert r.returncode != 0, f"{name} exited 0 on a 403:\n{r.stdout}"
    assert "403" in r.stderr, r.stderr
    assert svc.list_all()[0] == []
