"""deploy/prometheus-alerts.yml: promtool accepts the rules, its unit tests
(deploy/prometheus-alerts.test.yml: each alert firing and not firing) pass,
and every metric the rules name is one the binary really exports, in a
scrape promtool accepts too."""

import os
import re
import shutil
import subprocess

import pytest
import yaml

from helpers import http_request_text

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")
RULES = os.path.join(DEPLOY, "prometheus-alerts.yml")
RULE_TESTS = os.path.join(DEPLOY, "prometheus-alerts.test.yml")


def promtool(*args, stdin=None):
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is missing: apt-get install prometheus (tests/run.sh does)")
    r = subprocess.run([tool, *args], input=stdin, capture_output=True, text=True,
                       timeout=120, cwd=DEPLOY)
    assert r.returncode == 0, f"promtool {' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r.stdout


def test_rules_pass_promtool_check_and_their_unit_tests():
    assert "SUCCESS: 5 rules found" in promtool("check", "rules", RULES)
    out = promtool("test", "rules", RULE_TESTS)
    assert "SUCCESS" in out, out
    with open(RULES) as f:
        rules = yaml.safe_load(f)["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {"RmqsJobsOverdue", "RmqsJobsFailing",
                                           "RmqsBrokerDown", "RmqsDatabaseDown",
                                           "RmqsInstanceMissing"}
    with open(RULE_TESTS) as f:
        tests = yaml.safe_load(f)["tests"]
    # every alert is tested both ways: some evaluation expects it, one none
    for r in rules:
        evals = [e for t in tests for e in t["alert_rule_test"]
                 if e["alertname"] == r["alert"]]
        assert any(e["exp_alerts"] for e in evals), f"{r['alert']} never expected to fire"
        assert any(not e["exp_alerts"] for e in evals), f"{r['alert']} never expected quiet"


def test_the_rules_name_metrics_the_binary_exports(service):
    svc = service()
    text = http_request_text(svc.port, "/metrics").text
    promtool("check", "metrics", stdin=text)
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    with open(RULES) as f:
        rules = yaml.safe_load(f)["groups"][0]["rules"]
    named = {n for r in rules for n in re.findall(r"\b(rmqs_[a-z0-9_]+)", r["expr"])}
    assert named, rules
    assert named <= families, f"not exported: {sorted(named - families)}"
    for r in rules:  # whole-database gauges are taken once per store
        if "rmqs_oldest_overdue_job_age_seconds" in r["expr"]:
            assert "max by (store)" in r["expr"], r
