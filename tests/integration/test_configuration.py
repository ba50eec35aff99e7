"""Settings come from flags or RMQS_* environment variables (flags win); bad
settings stop the service at once with a message; IPv6 loopback works."""

import os
import re
import socket
import subprocess

import pytest

from helpers import assert_error, db_has_schema, env, wait_until
from pylib import markdown

DOCUMENTED_FLAGS = ("--listen", "--db", "--amqp-url", "--max-attempts",
                    "--backoff-base-ms", "--backoff-cap-ms", "--max-body-bytes",
                    "--max-delay-days", "--heartbeat-s", "--confirm-timeout-ms",
                    "--log-level")

JOB = {"exchange": "", "routing_key": "q", "body": "x", "delay_ms": 3_600_000}
CONFIGURATION = os.path.join(markdown.DOCS, "configuration.md")


def run_binary(*args, timeout=20):
    return subprocess.run([env("RMQS_BIN"), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_help_lists_every_flag_and_its_variable():
    r = run_binary("--help")
    assert r.returncode == 0, r.stderr
    text = r.stdout + r.stderr
    for flag in DOCUMENTED_FLAGS:
        assert flag in text, f"--help does not mention {flag}"
        var = "RMQS_" + flag[2:].upper().replace("-", "_")
        assert var in text, f"--help does not mention {var}"


def help_settings():
    """(flag, variable, default, meaning) of each setting --help prints, in
    its order; flag None for environment-only settings, default None when
    there is none."""
    r = run_binary("--help")
    assert r.returncode == 0, r.stderr
    rows = []
    for line in r.stdout.splitlines():
        m = re.match(r"^  (\S+)\s+(RMQS_\S+)\s+(.*?)(?: \(default: (.*)\))?$", line)
        if m:
            flag = None if m.group(1) == "(environment)" else m.group(1)
            rows.append((flag, m.group(2), m.group(4), m.group(3)))
    assert len(rows) >= 30, r.stdout
    return rows


def documented_settings():
    """The same four columns from the table of docs/configuration.md's
    Settings section."""
    _, section = markdown.section(CONFIGURATION, "Settings")
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("Flag", "---"):
            continue
        code = [re.fullmatch(r"`(.*)`", c) for c in cells[:3]]
        flag = code[0].group(1) if code[0] else None
        assert flag or cells[0] == "environment only", line
        assert code[1], f"docs/configuration.md: variable not in backquotes: {line}"
        default = code[2].group(1) if code[2] else None
        assert default is not None or cells[2] == "—", line
        rows.append((flag, code[1].group(1), default, cells[3]))
    return rows


def test_the_documented_configuration_table_is_the_help():
    """Every row of docs/configuration.md's table is a line of --help and
    the other way round, in the same order: flag, variable, default and
    meaning."""
    docs, helps = documented_settings(), help_settings()
    only_help = [r for r in helps if r not in docs]
    only_docs = [r for r in docs if r not in helps]
    assert not only_help and not only_docs, (
        f"--help has, docs/configuration.md lacks: {only_help}; "
        f"docs/configuration.md has, --help lacks: {only_docs}")
    assert docs == helps, "same rows, another order"


@pytest.mark.parametrize("args, option", [
    (("--max-attempts", "0"), "max-attempts"),
    (("--max-attempts", "ten"), "max-attempts"),
    (("--log-level", "loud"), "log-level"),
    (("--listen", "not-an-address"), "listen"),
    (("--no-such-flag",), "no-such-flag"),
])
def test_bad_settings_exit_nonzero_naming_the_option(tmp_path, args, option):
    r = run_binary("--db", str(tmp_path / "db"), *args)
    assert r.returncode != 0
    assert option in r.stderr, r.stderr
    assert "ERROR: AddressSanitizer" not in r.stderr
    assert "ERROR: LeakSanitizer" not in r.stderr
    assert "runtime error:" not in r.stderr


def test_settings_from_the_environment(service):
    svc = service(settings_in_env=True, extra_env={"RMQS_MAX_ATTEMPTS": "3"})
    assert "--listen" not in svc.command() and "--db" not in svc.command()
    job = svc.schedule(JOB)
    assert job["max_attempts"] == 3
    assert db_has_schema(svc), "RMQS_DB was not used"


def test_flags_win_over_the_environment(service):
    svc = service("--max-attempts", "4", extra_env={"RMQS_MAX_ATTEMPTS": "3"})
    assert svc.schedule(JOB)["max_attempts"] == 4


def test_max_delay_days_sets_the_horizon(service):
    svc = service("--max-delay-days", "1")
    assert svc.schedule(dict(JOB, delay_ms=86_400_000))["max_attempts"] >= 1
    assert_error(svc.post("/schedule", dict(JOB, delay_ms=86_400_000 + 60_000)),
                 400, "invalid_argument", "delay_ms")


def _ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_listens_on_ipv6_loopback(service):
    svc = service(host="::1")
    status, _, body = svc.get("/healthz")
    assert (status, body) == (200, {"status": "ok"})
    assert svc.schedule(JOB)["status"] == "pending"


@pytest.mark.parametrize("tail", ["", "/", "/%2F"])
def test_amqp_url_forms_of_the_default_vhost(service, tail):
    port = env("RMQS_TEST_AMQP_PORT")
    svc = service(amqp_url=f"amqp://guest:guest@127.0.0.1:{port}{tail}")
    assert svc.get("/readyz").status == 200


def test_wrong_password_is_not_ready_and_never_logged(service):
    port = env("RMQS_TEST_AMQP_PORT")
    secret = "s3cret-Pa55word"
    svc = service(amqp_url=f"amqp://guest:{secret}@127.0.0.1:{port}/",
                  wait="health", log_level="debug")

    def refused():
        status, _, body = svc.get("/readyz")
        return body if status == 503 else None
    body = wait_until(refused, 20, "/readyz to answer 503")
    assert body["broker"] == "down"
    # wait until it has logged the broker's refusal (403 ACCESS_REFUSED)
    wait_until(lambda: "ACCESS_REFUSED" in svc.log(), 20,
               "the service to log the failed login")
    svc.terminate()
    assert secret not in svc.log()
