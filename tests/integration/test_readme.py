"""The documentation's examples are what the service takes and answers,
and its links lead somewhere. For README.md and every docs/*.md: each
```json block validates against the api/openapi.yaml schema it shows (a
job, an error, a batch error, a schedule, a limit), each JSON body of a curl command
in a ```sh block against the request schema of its route, and the "Schedule
a message" request sent to the real service answers a job with the same
members as the job example (so a field the server adds, like `source`,
cannot be missing from the docs). Every relative link points to a file of
the repository and every #anchor to a heading of its page, by GitHub's
anchor rules. The recurring schedules' curl commands (docs/schedules.md)
are run by test_schedules.py, the README's quick start by
test_readme_quickstart.py, the configuration table (docs/configuration.md)
is checked against --help by test_configuration.py; all read the Markdown
through pylib.markdown."""

import json
import os

import pytest

from helpers import OpenApiContract
from pylib import markdown


def doc_blocks(lang):
    """(place, text) of every fenced block in lang of the README and the
    docs, place being "file:line"."""
    for page in markdown.pages():
        for line, block in markdown.blocks(page, lang):
            yield f"{markdown.rel(page)}:{line}", block


def answer_schema(value):
    """The component schema an answer example shows, by its members."""
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
    if isinstance(value, dict) and {"name", "generation"} <= set(value):
        return "Limit"
    if isinstance(value, dict) and "limits" in value:
        return "LimitList"
    return None


def curl_requests():
    """(place, method, path, JSON body) of every curl command with -d in the
    sh blocks of the README and the docs."""
    for place, block in doc_blocks("sh"):
        for words in markdown.shell_commands(block):
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
                yield place, method or "POST", path, body


REQUEST_SCHEMAS = {("POST", "/schedule"): "ScheduleRequest",
                   ("POST", "/schedule/batch"): "ScheduleBatchRequest",
                   ("PATCH", "/jobs/{id}"): "RescheduleRequest",
                   ("POST", "/jobs/{id}/retry"): "RetryRequest",
                   ("POST", "/jobs/bulk"): "BulkRequest",
                   ("PUT", "/schedules/{name}"): "ScheduleSpec",
                   ("PATCH", "/schedules/{name}"): "SchedulePatch",
                   ("PUT", "/limits/{name}"): "LimitRequest",
                   ("PATCH", "/limits/{name}"): "LimitPatch"}


@pytest.fixture(scope="module")
def contract():
    return OpenApiContract()


def schema(name):
    return {"$ref": f"#/components/schemas/{name}"}


def test_every_json_example_of_the_docs_matches_its_schema(contract):
    checked = []
    for place, block in doc_blocks("json"):
        try:
            value = json.loads(block)
        except ValueError as e:
            raise AssertionError(f"{place}: not JSON: {e}") from None
        name = answer_schema(value)
        assert name, f"{place}: no schema of api/openapi.yaml known for {block[:80]!r}"
        errs = contract.schemas.errors(schema(name), value)
        assert not errs, f"{place} ({name}): {errs}"
        checked.append(name)
    assert {"Job", "BatchError", "Schedule", "Limit"} <= set(checked), checked


def test_every_curl_body_of_the_docs_matches_its_request_schema(contract):
    checked = []
    for place, method, path, body in curl_requests():
        template = contract.path_template(path)
        name = REQUEST_SCHEMAS.get((method, template))
        assert name, f"{place}: no request schema known for {method} {path}"
        try:
            value = json.loads(body)
        except ValueError as e:
            raise AssertionError(f"{place}: body is not JSON: {e}") from None
        errs = contract.schemas.errors(schema(name), value)
        assert not errs, f"{place} ({name}): {errs}"
        checked.append(name)
    assert {"ScheduleRequest", "RescheduleRequest", "ScheduleSpec",
            "SchedulePatch", "LimitRequest", "LimitPatch"} <= set(checked), checked


def test_the_docs_job_is_what_the_service_answers_to_the_docs_request(service):
    """POST the "Schedule a message" request of the API page to the real
    service: the job it answers has the members of the page's job example,
    and the same values for what the request decides."""
    request = next(json.loads(b) for _, m, p, b in curl_requests()
                   if (m, p) == ("POST", "/schedule") and "billing" in b)
    example = next(json.loads(b) for _, b in doc_blocks("json")
                   if answer_schema(json.loads(b)) == "Job")
    svc = service()
    st, hdrs, job = svc.post("/schedule", request)
    assert st == 201, job
    assert hdrs["Location"] == f"/jobs/{job['id']}"
    assert sorted(job) == sorted(example), \
        f"the service answers {sorted(job)}; the docs show {sorted(example)}"
    for k in ("status", "source", "exchange", "routing_key", "sent_at", "attempts",
              "max_attempts", "last_error", "headers", "properties", "body"):
        assert job[k] == example[k], (k, job[k], example[k])


def test_every_relative_link_of_the_docs_resolves():
    """Each relative link and image of README.md and docs/*.md names a file
    or folder of the repository, and its #anchor (or a bare #anchor) a
    heading of that page as GitHub numbers them."""
    bad, checked = [], 0
    for page in markdown.pages():
        for line, target in markdown.links(page):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = (os.path.normpath(os.path.join(os.path.dirname(page), path))
                    if path else page)
            place = f"{markdown.rel(page)}:{line}: {target}"
            checked += 1
            if not dest.startswith(markdown.ROOT + os.sep) or not os.path.exists(dest):
                bad.append(f"{place}: no such file")
            elif anchor and not dest.endswith(".md"):
                bad.append(f"{place}: an anchor in a file that is not Markdown")
            elif anchor and anchor not in markdown.anchors(dest):
                bad.append(f"{place}: no heading of {markdown.rel(dest)} has this anchor")
    assert not bad, "\n".join(bad)
    assert checked >= 20, checked


def test_the_anchors_follow_githubs_rules():
    """The anchor rules the link test relies on, on headings like ours."""
    assert markdown.anchor("Quick start (Debian 12 / Ubuntu 22.04+)") == \
        "quick-start-debian-12--ubuntu-2204"
    assert markdown.anchor("x-delay: what each type does") == "x-delay-what-each-type-does"
    assert markdown.anchor("From `POST /schedule` to `201`") == "from-post-schedule-to-201"
    assert markdown.anchor("Search at 10,000,000 jobs") == "search-at-10000000-jobs"
