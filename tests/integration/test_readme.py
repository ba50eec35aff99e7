"""README.md's JSON examples are what the service takes and answers: each
```json block validates against the api/openapi.yaml schema it shows (a job,
an error, a batch error), each JSON body of a curl command in a ```sh block
against the request schema of its route, and the README's schedule request
sent to the real service answers a job with the same members as the README's
job example (so a field the server adds, like `source`, cannot be missing
from the README). The "Recurring schedules" section's curl commands are
run by test_schedules.py. The README's quick start is run by
test_readme_quickstart.py, its configuration table checked against --help by
test_configuration.py."""

import json
import os
import re
import shlex

import pytest

from helpers import OpenApiContract

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.normpath(os.path.join(HERE, "..", "..", "README.md"))


def readme_blocks(lang):
    """(line number, text) of every fenced block of README.md in lang."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    for m in re.finditer(r"^```" + lang + r"\n(.*?)^```$", text, re.S | re.M):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def answer_schema(value):
    """The component schema a README answer example shows, by its members."""
    if isinstance(value, dict) and "errors" in value:
        return "BatchError"
    if isinstance(value, dict) and "error" in value:
        return "Error"
    if isinstance(value, dict) and "jobs" in value:
        return "JobPage" if "next" in value else "JobList"
    if isinstance(value, dict) and {"id", "status", "exchange"} <= set(value):
        return "Job"
    if isinstance(value, dict) and {"name", "next_runs"} <= set(value):
        return "Schedule"
    return None


def shell_commands(block):
    """The commands of a shell block as word lists: lines joined where a
    backslash or an open quote continues them; comments dropped."""
    pending = ""
    for text in block.splitlines():
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        pending += text + "\n"
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
        if words:
            yield words
    assert not pending.strip(), f"unfinished command: {pending!r}"


def curl_requests():
    """(line, method, path, JSON body) of every curl command with -d in the
    README's sh blocks."""
    for line, block in readme_blocks("sh"):
        for words in shell_commands(block):
            if words[0] != "curl":
                continue
            method, body, url = None, None, None
            for i, w in enumerate(words):
                if w in ("-X", "--request"):
                    method = words[i + 1]
                elif w in ("-d", "--data", "--data-raw", "--data-binary"):
                    body = words[i + 1]
                elif w.startswith("http://") or w.startswith("https://"):
                    url = w
            if body is not None and url is not None and "/api/" not in url:
                path = "/" + url.split("://", 1)[1].split("/", 1)[1]
                yield line, method or "POST", path, body


REQUEST_SCHEMAS = {("POST", "/schedule"): "ScheduleRequest",
                   ("POST", "/schedule/batch"): "ScheduleBatchRequest",
                   ("PATCH", "/jobs/{id}"): "RescheduleRequest",
                   ("POST", "/jobs/{id}/retry"): "RetryRequest",
                   ("POST", "/jobs/bulk"): "BulkRequest",
                   ("PUT", "/schedules/{name}"): "ScheduleSpec",
                   ("PATCH", "/schedules/{name}"): "SchedulePatch"}


@pytest.fixture(scope="module")
def contract():
    return OpenApiContract()


def schema(name):
    return {"$ref": f"#/components/schemas/{name}"}


def test_every_json_example_of_the_readme_matches_its_schema(contract):
    checked = []
    for line, block in readme_blocks("json"):
        try:
            value = json.loads(block)
        except ValueError as e:
            raise AssertionError(f"README.md:{line}: not JSON: {e}") from None
        name = answer_schema(value)
        assert name, f"README.md:{line}: no schema of api/openapi.yaml known for {block[:80]!r}"
        errs = contract.schemas.errors(schema(name), value)
        assert not errs, f"README.md:{line} ({name}): {errs}"
        checked.append(name)
    assert {"Job", "BatchError", "Schedule"} <= set(checked), checked


def test_every_curl_body_of_the_readme_matches_its_request_schema(contract):
    checked = []
    for line, method, path, body in curl_requests():
        template = contract.path_template(path)
        name = REQUEST_SCHEMAS.get((method, template))
        assert name, f"README.md:{line}: no request schema known for {method} {path}"
        try:
            value = json.loads(body)
        except ValueError as e:
            raise AssertionError(f"README.md:{line}: body is not JSON: {e}") from None
        errs = contract.schemas.errors(schema(name), value)
        assert not errs, f"README.md:{line} ({name}): {errs}"
        checked.append(name)
    assert {"ScheduleRequest", "RescheduleRequest", "ScheduleSpec",
            "SchedulePatch"} <= set(checked), checked


def test_the_readme_job_is_what_the_service_answers_to_the_readme_request(service):
    """POST the README's "Schedule a message" request to the real service: the
    job it answers has the members of the README's job example, and the
    same values for what the request decides."""
    request = next(json.loads(b) for _, m, p, b in curl_requests()
                   if (m, p) == ("POST", "/schedule") and "billing" in b)
    example = next(json.loads(b) for _, b in readme_blocks("json")
                   if answer_schema(json.loads(b)) == "Job")
    svc = service()
    st, hdrs, job = svc.post("/schedule", request)
    assert st == 201, job
    assert hdrs["Location"] == f"/jobs/{job['id']}"
    assert sorted(job) == sorted(example), \
        f"the service answers {sorted(job)}; README.md shows {sorted(example)}"
    for k in ("status", "source", "exchange", "routing_key", "sent_at", "attempts",
              "max_attempts", "last_error", "headers", "properties", "body"):
        assert job[k] == example[k], (k, job[k], example[k])
