"""deploy/grafana-dashboard.json without Docker (the deploy tests run it
against a real Prometheus): a DS_PROMETHEUS data source variable, so file
provisioning (which has no import step to fill __inputs) works; the
whole-database gauges only ever taken as max by (store), never summed
across the instances that share a database; panels for the oldest overdue
job and failures by exchange; and every metric and label an expression
uses is declared by the binary's own GET /metrics."""

import json
import os
import re

from helpers import http_request_text

DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "deploy",
                         "grafana-dashboard.json")
STORE_GAUGES = ("rmqs_jobs", "rmqs_schedules", "rmqs_database_size_bytes",
                "rmqs_search_index_lag_jobs", "rmqs_overdue_jobs",
                "rmqs_oldest_overdue_job_age_seconds", "rmqs_limit_held_jobs")


def load():
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)
    panels = [p for p in dash["panels"]] + [c for p in dash["panels"]
                                            for c in p.get("panels", [])]
    exprs = [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]
    return dash, panels, exprs


def test_dashboard_has_a_datasource_variable_and_takes_max_by_store():
    dash, panels, exprs = load()
    (ds,) = [v for v in dash["templating"]["list"] if v["name"] == "DS_PROMETHEUS"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus", ds
    for p in panels:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
    for title, expr in exprs:
        for gauge in STORE_GAUGES:
            for m in re.finditer(rf"\b{gauge}\b(?!_)", expr):
                # the innermost aggregation around this use is max by (store, ...)
                head = expr[:m.start()]
                agg = re.findall(r"(\w+) by \(([^)]*)\) \($", head) or \
                    re.findall(r"(\w+)\($", head)
                assert agg, f"{title}: {gauge} not aggregated: {expr}"
                op = agg[-1]
                if isinstance(op, tuple):
                    assert op[0] == "max" and "store" in [x.strip() for x in op[1].split(",")], \
                        f"{title}: {gauge} under {op[0]} by ({op[1]}), not max by (store): {expr}"
                else:  # max(gauge): the worst database, never a sum
                    assert op == "max", f"{title}: {gauge} under {op}(): {expr}"
    titles = {p["title"]: p for p in panels}
    assert "rmqs_oldest_overdue_job_age_seconds" in \
        titles["Oldest overdue job"]["targets"][0]["expr"]
    assert "sum by (exchange)" in titles["Failed jobs by exchange"]["targets"][0]["expr"]


def test_dashboard_uses_only_metrics_and_labels_the_binary_declares(service):
    svc = service()
    svc.get("/jobs")
    text = http_request_text(svc.port, "/metrics").text
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    labels = {}
    for name, body in re.findall(r"^([a-z_:]+)\{([^}]*)\}", text, re.M):
        labels.setdefault(name, set()).update(re.findall(r'(\w+)="', body))
    _, _, exprs = load()
    for title, expr in exprs:
        for name in re.findall(r"\b(rmqs_[a-z0-9_]+)", expr):
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert family in families, f"{title}: {name} is not in GET /metrics"
            known = labels.get(name, set()) | {"instance", "job", "le"}
            if family == "rmqs_jobs_failed_total":  # a series once a job failed
                known |= {"exchange"}
            for group in re.findall(r"by \(([^)]*)\)", expr):
                for label in (x.strip() for x in group.split(",")):
                    assert label in known, f"{title}: {name} has no label {label}"
