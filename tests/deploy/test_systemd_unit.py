"""deploy/rmq-scheduler.service: systemd accepts it (systemd-analyze verify,
offline), it has the settings the deployment relies on, and its exposure
score (systemd-analyze security --offline) stays low.

ExecStart names /usr/local/bin/rmq-scheduler, where an installation puts
the binary; verify checks that the file exists, so a copy of the unit is
verified with ExecStart pointing at $RMQS_BIN (the build's binary) instead.
"""

import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNIT = os.path.join(REPO, "deploy", "rmq-scheduler.service")


def settings():
    out = {}
    section = None
    with open(UNIT, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, _, value = line.partition("=")
            out.setdefault((section, key), []).append(value)
    return out


@pytest.fixture
def analyze():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.fail("systemd-analyze is missing (apt-get install systemd)")
    return tool


@pytest.fixture
def unit_copy(tmp_path):
    binary = os.environ.get("RMQS_BIN") or shutil.which("true")
    with open(UNIT, encoding="utf-8") as f:
        text = f.read()
    assert "\nExecStart=/usr/local/bin/rmq-scheduler\n" in text
    path = tmp_path / "rmq-scheduler.service"
    path.write_text(text.replace("\nExecStart=/usr/local/bin/rmq-scheduler\n",
                                 f"\nExecStart={binary}\n"))
    return str(path)


def test_systemd_accepts_the_unit(analyze, unit_copy):
    p = subprocess.run([analyze, "verify", "--man=no", unit_copy],
                       capture_output=True, text=True, timeout=60)
    # Unknown or misspelled settings are only warnings: any output fails.
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", p.stdout + p.stderr


def test_the_unit_has_the_deployment_settings():
    s = settings()

    def one(key):
        values = s.get(("Service", key))
        assert values, f"{key}= missing"
        return values[-1]

    assert one("Type") == "simple"
    assert one("ExecStart") == "/usr/local/bin/rmq-scheduler"
    assert one("DynamicUser") == "yes"
    assert one("StateDirectory") == "rmq-scheduler"
    assert "RMQS_DB=/var/lib/rmq-scheduler/scheduler.db" in s[("Service", "Environment")]
    assert one("EnvironmentFile") == "-/etc/rmq-scheduler/env"
    assert one("Restart") == "on-failure"
    # Above the service's own shutdown grace (RMQS_SHUTDOWN_GRACE_S, 10 s).
    assert int(one("TimeoutStopSec").rstrip("s")) > 10
    for key, value in {
            "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
            "PrivateTmp": "yes", "PrivateDevices": "yes",
            "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
            "ProtectControlGroups": "yes", "LockPersonality": "yes",
            "MemoryDenyWriteExecute": "yes", "CapabilityBoundingSet": "",
            "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX"}.items():
        assert one(key) == value, key
    assert "@system-service" in s[("Service", "SystemCallFilter")]
    assert s[("Install", "WantedBy")] == ["multi-user.target"]


def test_the_unit_exposure_is_low(analyze, unit_copy):
    p = subprocess.run([analyze, "security", "--offline=yes", unit_copy],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", p.stdout)
    assert m, p.stdout + p.stderr
    print(f"\n[deploy] systemd-analyze security: exposure {m.group(1)}")
    assert float(m.group(1)) <= 2.0
