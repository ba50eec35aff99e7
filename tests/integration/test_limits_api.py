"""Flow limits (issue 23), the resource: PUT, GET, PATCH, DELETE
/limits/{name} and GET /limits against the real binary and the real store
(SQLite file or PostgreSQL database: the store fixture; every test runs on
both). What limits do to jobs comes with the dispatcher's work; this file
proves the resource.

What each test proves:
- PUT creates (201) and replaces (200); the same limit again, written
  another way (key order, 500.0 for 500, a default spelled out), changes
  nothing (200, generation and updated_at kept); GET one answers what PUT
  did, HEAD the same without a body; GET /limits lists every limit in name
  order;
- PATCH merges (a new rate keeps the rest, null removes a member and its
  default returns, match is replaced whole), a PATCH that changes nothing
  keeps the generation, and concurrent PATCHes are a compare-and-set: each
  change answered 200 has a generation of its own, none is lost;
- DELETE is 204, then 404 for GET, PATCH and DELETE;
- every invalid request, as a hostile client sends them (wrong types, huge
  and NaN-ish numbers, unknown members, bad topic patterns, bad names: a
  %0A newline, 201 bytes; a body that is not an object or not JSON, the
  wrong media type), is a 400 naming the field (415 for the media type)
  and changes nothing;
- with a token set, every limit route needs it;
- --max-limits caps creation (409), never a replace;
- a limit survives a restart of the service on the same store.

Every answer is also checked against api/openapi.yaml (conftest.py).
"""

import json
import threading
import urllib.error
import urllib.request
import uuid

from helpers import assert_error, ts_ms

TENANT = {"match": {"exchange": "orders.*", "routing_key": "eu.#"},
          "rate_per_s": 500, "burst": 50, "key": "header:tenant"}
HOLD = {"match": {"exchange": "billing"},
        "hold_when_queue_ready_over": {"queue": "invoices", "messages": 10000}}


def name_of(prefix="l"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def put(svc, name, body, headers=None):
    return svc.request("PUT", f"/limits/{name}", body, headers=headers)


def spec_of(limit):
    """A limit as kept, without its stats: what the dispatcher did under it
    moves on its own (test_flow_control.py checks the stats); every answer
    carries them, null or an object."""
    assert "stats" in limit, limit
    assert limit["stats"] is None or isinstance(limit["stats"], dict), limit
    return {k: v for k, v in limit.items() if k != "stats"}


def put_ok(svc, name, body, expect=201):
    st, _, got = put(svc, name, body)
    assert st == expect, f"PUT /limits/{name} {body!r} -> {st} {got!r}"
    return spec_of(got)


def get_ok(svc, name):
    st, _, got = svc.get(f"/limits/{name}")
    assert st == 200, f"GET /limits/{name} -> {st} {got!r}"
    return spec_of(got)


def listed(svc):
    st, _, got = svc.get("/limits")
    assert st == 200, got
    assert set(got) == {"limits"}, got
    return [spec_of(x) for x in got["limits"]]


# --- create, replace, read ------------------------------------------------------

def test_put_creates_replaces_and_the_same_limit_twice_is_one(service):
    svc = service()
    name = name_of("orders")
    created = put_ok(svc, name, TENANT)
    assert created["name"] == name and created["generation"] == 1
    assert created["match"] == TENANT["match"]
    assert created["rate_per_s"] == 500 and created["burst"] == 50
    assert created["key"] == "header:tenant"
    assert created["max_buckets"] == 10000, "the default is filled in"
    assert "hold_when_queue_ready_over" not in created
    assert created["created_at"] == created["updated_at"]
    assert get_ok(svc, name) == created, "PUT answers the limit as GET does"
    head = svc.request("HEAD", f"/limits/{name}")
    assert head.status == 200 and head.raw == b"", head

    # the same limit written another way: nothing changes
    same = {"key": "header:tenant", "max_buckets": 10000, "burst": 50,
            "rate_per_s": 500.0,
            "match": {"routing_key": "eu.#", "exchange": "orders.*"}}
    again = put_ok(svc, name, same, expect=200)
    assert again == created, "the same limit twice changes nothing"

    # another limit: replaced, generation + 1, created_at kept
    replaced = put_ok(svc, name, dict(TENANT, rate_per_s=0.5, burst=1), expect=200)
    assert replaced["generation"] == 2 and replaced["rate_per_s"] == 0.5
    assert replaced["created_at"] == created["created_at"]
    assert ts_ms(replaced["updated_at"]) >= ts_ms(created["updated_at"])
    # replaced whole: the hold of a PUT body goes with the next PUT
    held = put_ok(svc, name, HOLD, expect=200)
    assert held["generation"] == 3
    assert set(held) == {"name", "match", "hold_when_queue_ready_over", "generation",
                         "created_at", "updated_at"}, held


def test_get_and_list_in_name_order(service):
    svc = service()
    assert listed(svc) == []
    names = ["b-limit", "A-limit", "a.limit", "a-limit", "a:limit", "0-limit"]
    bodies = {}
    for n in names:
        bodies[n] = put_ok(svc, n, HOLD if n.startswith("a") else TENANT)
    got = listed(svc)
    assert [x["name"] for x in got] == sorted(names, key=lambda s: s.encode()), got
    for x in got:
        assert x == bodies[x["name"]] == get_ok(svc, x["name"])
    assert [spec_of(x) for x in svc.get("/limits/").body["limits"]] == got, \
        "/limits/ is /limits"
    assert_error(svc.get(f"/limits/{name_of('nope')}"), 404, "not_found")
    # urllib, as a client in the standard library sees them
    base = f"http://127.0.0.1:{svc.port}"
    with urllib.request.urlopen(f"{base}/limits/b-limit", timeout=15) as resp:
        assert resp.status == 200
        assert resp.headers.get_content_type() == "application/json"
        assert json.load(resp)["rate_per_s"] == 500
    req = urllib.request.Request(f"{base}/limits/u-limit", method="PUT",
                                 data=json.dumps(HOLD).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=15) as resp:
        assert resp.status == 201 and json.load(resp)["name"] == "u-limit"
    try:
        urllib.request.urlopen(f"{base}/limits/none-such", timeout=15)
        raise AssertionError("GET of a missing limit answered 2xx")
    except urllib.error.HTTPError as e:
        assert e.code == 404 and json.load(e)["error"]["code"] == "not_found"


# --- PATCH and DELETE -------------------------------------------------------------

def test_patch_merges_members_and_null_removes_one(service):
    svc = service()
    name = name_of("p")
    put_ok(svc, name, dict(TENANT, **HOLD))
    st, _, got = svc.patch(f"/limits/{name}", {"rate_per_s": 200})
    assert st == 200, got
    got = spec_of(got)
    assert got["rate_per_s"] == 200 and got["generation"] == 2
    assert got["burst"] == 50 and got["key"] == "header:tenant", "the rest is kept"
    assert got["hold_when_queue_ready_over"] == HOLD["hold_when_queue_ready_over"]
    assert get_ok(svc, name) == got

    # null removes a member; its default applies again
    st, _, got = svc.patch(f"/limits/{name}", {"burst": None, "key": None})
    assert st == 200, got
    assert got["burst"] == 1 and "key" not in got and "max_buckets" not in got, got
    assert got["generation"] == 3
    # match is replaced whole, not merged
    st, _, got = svc.patch(f"/limits/{name}", {"match": {"routing_key": "us.*"}})
    assert st == 200 and got["match"] == {"routing_key": "us.*"}, got
    # removing the rate takes the default burst with it: the hold is left
    st, _, got = svc.patch(f"/limits/{name}", {"rate_per_s": None, "match": None})
    assert st == 200, got
    got = spec_of(got)
    assert set(got) == {"name", "hold_when_queue_ready_over", "generation",
                        "created_at", "updated_at"}, got
    assert got["generation"] == 5

    # nothing to change: 200, generation kept
    st, _, same = svc.patch(f"/limits/{name}", {"hold_when_queue_ready_over":
                                                HOLD["hold_when_queue_ready_over"]})
    assert st == 200 and spec_of(same) == got, same
    st, _, same = svc.patch(f"/limits/{name}", {})
    assert st == 200 and spec_of(same) == got, same
    # the merge is checked as a PUT: nothing would be left
    assert_error(svc.patch(f"/limits/{name}", {"hold_when_queue_ready_over": None}),
                 400, "invalid_argument", "rate_per_s")
    # a burst without its rate
    assert_error(svc.patch(f"/limits/{name}", {"burst": 5}), 400,
                 "invalid_argument", "burst")
    assert get_ok(svc, name) == got, "a refused PATCH changes nothing"
    assert_error(svc.patch(f"/limits/{name_of('nope')}", {"rate_per_s": 1}), 404,
                 "not_found")


def test_concurrent_patches_are_a_compare_and_set(service):
    """Each PATCH reads the generation and writes only if it is still the
    one read (else it reads again): every change answered 200 has its own
    generation, and the last one is what is kept."""
    svc = service()
    name = name_of("cas")
    put_ok(svc, name, {"rate_per_s": 1000})
    answers = []
    lock = threading.Lock()

    def patch(burst):
        resp = svc.patch(f"/limits/{name}", {"burst": burst})
        with lock:
            answers.append((burst, resp))

    threads = [threading.Thread(target=patch, args=(b,)) for b in range(2, 14)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 12
    done = []
    for burst, resp in answers:
        if resp.status == 409:  # kept changing under it for every retry
            assert_error(resp, 409, "conflict")
            continue
        assert resp.status == 200, resp
        assert resp.body["burst"] == burst, resp.body
        done.append((resp.body["generation"], burst))
    assert done, "no PATCH went through"
    generations = sorted(g for g, _ in done)
    assert generations == list(range(2, 2 + len(done))), \
        f"each change its own generation, none lost: {generations}"
    final = get_ok(svc, name)
    assert final["generation"] == 1 + len(done)
    assert final["burst"] == max(done)[1], (final, done)


def test_delete_is_204_then_404(service):
    svc = service()
    name = name_of("d")
    put_ok(svc, name, TENANT)
    st, _, body = svc.delete(f"/limits/{name}")
    assert st == 204 and body is None
    assert_error(svc.get(f"/limits/{name}"), 404, "not_found")
    assert_error(svc.delete(f"/limits/{name}"), 404, "not_found")
    assert_error(svc.patch(f"/limits/{name}", {"rate_per_s": 1}), 404, "not_found")
    assert listed(svc) == []
    again = put_ok(svc, name, TENANT)
    assert again["generation"] == 1, "created again: a new limit"


# --- hostile clients ----------------------------------------------------------------

GOOD = {"rate_per_s": 10}
BAD_BODIES = [
    # (why, body: dict or raw text, field the error names; None: no field)
    ("neither rate nor hold", {}, "rate_per_s"),
    ("rate a string", {"rate_per_s": "10"}, "rate_per_s"),
    ("rate a boolean", {"rate_per_s": True}, "rate_per_s"),
    ("rate null", {"rate_per_s": None}, "rate_per_s"),
    ("rate 0", {"rate_per_s": 0}, "rate_per_s"),
    ("rate -0", '{"rate_per_s": -0}', "rate_per_s"),
    ("rate negative", {"rate_per_s": -5}, "rate_per_s"),
    ("rate above 1e6", {"rate_per_s": 1000000.5}, "rate_per_s"),
    ("rate 1e300", '{"rate_per_s": 1e300}', "rate_per_s"),
    ("rate that underflows to 0", '{"rate_per_s": 1e-400}', "rate_per_s"),
    ("rate int64 max", {"rate_per_s": 2**63 - 1}, "rate_per_s"),
    ("rate NaN", '{"rate_per_s": NaN}', None),
    ("rate Infinity", '{"rate_per_s": Infinity}', None),
    ("rate -Infinity", '{"rate_per_s": -Infinity}', None),
    ("rate 1e999", '{"rate_per_s": 1e999}', None),
    ("burst beyond int64", '{"rate_per_s": 1, "burst": 99999999999999999999}', None),
    ("burst 0", {"rate_per_s": 1, "burst": 0}, "burst"),
    ("burst above 1e6", {"rate_per_s": 1, "burst": 1000001}, "burst"),
    ("burst a fraction", {"rate_per_s": 1, "burst": 2.5}, "burst"),
    ("burst a string", {"rate_per_s": 1, "burst": "5"}, "burst"),
    ("burst without a rate", dict(HOLD, burst=5), "burst"),
    ("key unknown", {"rate_per_s": 1, "key": "tenant"}, "key"),
    ("key header: without a name", {"rate_per_s": 1, "key": "header:"}, "key"),
    ("key Header:", {"rate_per_s": 1, "key": "Header:x"}, "key"),
    ("key control character", {"rate_per_s": 1, "key": "header:a\u0001b"}, "key"),
    ("key header name of 256 bytes", {"rate_per_s": 1, "key": "header:" + "h" * 256},
     "key"),
    ("key a number", {"rate_per_s": 1, "key": 7}, "key"),
    ("key without a rate", dict(HOLD, key="exchange"), "key"),
    ("max_buckets without a key", {"rate_per_s": 1, "max_buckets": 5}, "max_buckets"),
    ("max_buckets 0", {"rate_per_s": 1, "key": "exchange", "max_buckets": 0},
     "max_buckets"),
    ("max_buckets above 1e6", {"rate_per_s": 1, "key": "exchange",
                               "max_buckets": 1000001}, "max_buckets"),
    ("match a string", dict(GOOD, match="orders"), "match"),
    ("match a list", dict(GOOD, match=["orders"]), "match"),
    ("match null", dict(GOOD, match=None), "match"),
    ("match unknown member", dict(GOOD, match={"queue": "q"}), "match.queue"),
    ("exchange a number", dict(GOOD, match={"exchange": 5}), "match.exchange"),
    ("exchange with * inside", dict(GOOD, match={"exchange": "a*b"}), "match.exchange"),
    ("exchange **", dict(GOOD, match={"exchange": "**"}), "match.exchange"),
    ("exchange with a newline", dict(GOOD, match={"exchange": "a\nb"}), "match.exchange"),
    ("exchange of 256 bytes", dict(GOOD, match={"exchange": "x" * 256}),
     "match.exchange"),
    ("topic word a*", dict(GOOD, match={"routing_key": "a.b*"}), "match.routing_key"),
    ("topic word #a", dict(GOOD, match={"routing_key": "#a"}), "match.routing_key"),
    ("topic word **", dict(GOOD, match={"routing_key": "a.**"}), "match.routing_key"),
    ("topic word *#", dict(GOOD, match={"routing_key": "*#.b"}), "match.routing_key"),
    ("topic of 256 bytes", dict(GOOD, match={"routing_key": "a." * 128}),
     "match.routing_key"),
    ("topic a list", dict(GOOD, match={"routing_key": ["a"]}), "match.routing_key"),
    ("hold a string", {"hold_when_queue_ready_over": "q"}, "hold_when_queue_ready_over"),
    ("hold without queue", {"hold_when_queue_ready_over": {"messages": 1}},
     "hold_when_queue_ready_over.queue"),
    ("hold empty queue", {"hold_when_queue_ready_over": {"queue": "", "messages": 1}},
     "hold_when_queue_ready_over.queue"),
    ("hold queue a number", {"hold_when_queue_ready_over": {"queue": 1, "messages": 1}},
     "hold_when_queue_ready_over.queue"),
    ("hold without messages", {"hold_when_queue_ready_over": {"queue": "q"}},
     "hold_when_queue_ready_over.messages"),
    ("hold messages -1", {"hold_when_queue_ready_over": {"queue": "q", "messages": -1}},
     "hold_when_queue_ready_over.messages"),
    ("hold messages above 1e9",
     {"hold_when_queue_ready_over": {"queue": "q", "messages": 10**9 + 1}},
     "hold_when_queue_ready_over.messages"),
    ("hold messages a fraction",
     {"hold_when_queue_ready_over": {"queue": "q", "messages": 1.5}},
     "hold_when_queue_ready_over.messages"),
    ("hold unknown member",
     {"hold_when_queue_ready_over": {"queue": "q", "messages": 1, "vhost": "/"}},
     "hold_when_queue_ready_over.vhost"),
    ("unknown member", dict(GOOD, colour="red"), "colour"),
    ("unknown member differing by case", dict(GOOD, Rate_per_s=1), "Rate_per_s"),
    ("body a list", [GOOD], None),
    ("body a string", '"rate_per_s"', None),
    ("body a number", "5", None),
    ("body empty", "", None),
    ("body not JSON", "{rate_per_s: 1}", None),
    ("body cut short", '{"rate_per_s": ', None),
    ("duplicate member", '{"rate_per_s": 1, "rate_per_s": 2}', None),
    ("NUL byte", '{"rate_per_s": 1}\u0000', None),
    ("escaped NUL", '{"rate_per_s": 1, "key": "header:a\\u0000b"}', None),
]
# Bodies that are fine as a PATCH of the limit kept below (it has a rate, a
# key and a hold): {} changes nothing, null removes a member, the others
# complete it.
NOT_A_BAD_PATCH = {"neither rate nor hold", "rate null", "match null",
                   "burst without a rate", "key without a rate",
                   "max_buckets without a key"}


def test_every_bad_request_is_a_400_naming_the_field_and_changes_nothing(service):
    svc = service()
    keep = name_of("keep")
    kept = put_ok(svc, keep, dict(TENANT, **HOLD))
    failures = []
    for why, body, field in BAD_BODIES:
        # a new name and an existing one, by PUT; the existing one by PATCH
        # too, where the merge is checked as a PUT (a {} patch is valid)
        attempts = [("PUT", name_of("new")), ("PUT", keep)]
        if why not in NOT_A_BAD_PATCH:
            attempts.append(("PATCH", keep))
        for method, target in attempts:
            resp = svc.request(method, f"/limits/{target}", body)
            try:
                err = assert_error(resp, 400, "invalid_argument", field)
                if field is None:
                    assert "field" not in err, err
            except AssertionError as e:
                failures.append(f"{why}: {method} {target} -> {resp!r}: {e}")
    assert not failures, "\n".join(failures)
    assert listed(svc) == [kept], "nothing was created or changed"


def test_bad_names_and_media_types(service):
    svc = service()
    for bad in ("a%0Ab", "a%0A", "%0A", "a" * 201, "bad*name", "caf%C3%A9", "a%20b",
                "a%00b", "a%09b"):
        for method, body in (("PUT", GOOD), ("GET", None), ("PATCH", GOOD),
                             ("DELETE", None)):
            err = assert_error(svc.request(method, f"/limits/{bad}", body), 400,
                               "invalid_argument", "name")
            assert "1 to 200" in err["message"], err
    longest = "a" * 200
    put_ok(svc, longest, GOOD)
    assert get_ok(svc, longest)["name"] == longest
    assert svc.delete(f"/limits/{longest}").status == 204

    name = name_of("media")
    for ctype in ("text/plain", "application/x-www-form-urlencoded",
                  "application/xml", "application/merge-patch+json",
                  "application/jsonx", None):
        for method in ("PUT", "PATCH"):
            resp = svc.request(method, f"/limits/{name}", json.dumps(GOOD),
                               headers={"Content-Type": ctype})
            assert_error(resp, 415, "unsupported_media_type")
    ok = svc.request("PUT", f"/limits/{name}", json.dumps(GOOD),
                     headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert ok.status == 201, ok
    # methods the routes do not have, with the Allow of the contract
    for method in ("POST", "OPTIONS"):
        resp = svc.request(method, f"/limits/{name}", GOOD if method == "POST" else None)
        assert_error(resp, 405, "method_not_allowed")
        assert resp.headers["Allow"] == "PUT, GET, PATCH, DELETE"
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        resp = svc.request(method, "/limits", GOOD if method != "DELETE" else None)
        assert_error(resp, 405, "method_not_allowed")
        assert resp.headers["Allow"] == "GET"
    assert_error(svc.get("/limits?limit=5"), 400, "invalid_argument", "limit")
    assert_error(svc.get(f"/limits/{name}?count=1"), 400, "invalid_argument", "count")
    assert [x["name"] for x in listed(svc)] == [name]


# --- auth, the cap, restarts ----------------------------------------------------------

def test_the_token_guards_every_limit_route(service):
    token = "limits-token-" + uuid.uuid4().hex
    svc = service(extra_env={"RMQS_API_TOKEN": token}, wait="health")
    auth = {"Authorization": f"Bearer {token}"}
    wrong = {"Authorization": f"Bearer {token}x"}
    name = name_of("tok")
    for headers in (None, wrong):
        for method, path, body in (("PUT", f"/limits/{name}", GOOD),
                                   ("GET", "/limits", None),
                                   ("GET", f"/limits/{name}", None),
                                   ("PATCH", f"/limits/{name}", {"rate_per_s": 2}),
                                   ("DELETE", f"/limits/{name}", None)):
            assert_error(svc.request(method, path, body, headers=headers), 401,
                         "unauthorized")
    st, _, body = put(svc, name, GOOD, headers=auth)
    assert st == 201, body
    assert_error(svc.patch(f"/limits/{name}", {"rate_per_s": 2}), 401, "unauthorized")
    assert svc.get(f"/limits/{name}", headers=auth).body["generation"] == 1, \
        "a refused PATCH changed the limit"
    assert svc.patch(f"/limits/{name}", {"rate_per_s": 2}, headers=auth).status == 200
    assert svc.get("/limits", headers=auth).body["limits"][0]["rate_per_s"] == 2
    assert svc.delete(f"/limits/{name}", headers=auth).status == 204


def test_max_limits_caps_creation_not_replacement(service):
    svc = service("--max-limits", "2")
    names = [name_of("cap") for _ in range(2)]
    for n in names:
        put_ok(svc, n, GOOD)
    extra = name_of("cap")
    err = assert_error(put(svc, extra, GOOD), 409, "conflict")
    assert "--max-limits" in err["message"] and "2" in err["message"], err
    assert_error(svc.get(f"/limits/{extra}"), 404, "not_found")
    # at the cap: a replace and the same limit again still work
    replaced = put_ok(svc, names[0], HOLD, expect=200)
    assert replaced["generation"] == 2
    put_ok(svc, names[0], HOLD, expect=200)
    st, _, patched = svc.patch(f"/limits/{names[1]}", {"rate_per_s": 3})
    assert st == 200 and patched["generation"] == 2, patched
    # room again after a delete
    assert svc.delete(f"/limits/{names[1]}").status == 204
    put_ok(svc, extra, GOOD)
    assert_error(put(svc, name_of("cap"), GOOD), 409, "conflict")
    assert sorted(x["name"] for x in listed(svc)) == sorted([names[0], extra])


def test_limits_survive_a_restart(service):
    svc = service()
    a, b = name_of("kept"), name_of("gone")
    put_ok(svc, a, TENANT)
    st, _, before = svc.patch(f"/limits/{a}", {"rate_per_s": 0.25, "key": None})
    assert st == 200, before
    put_ok(svc, b, HOLD)
    assert svc.delete(f"/limits/{b}").status == 204
    svc.terminate()
    svc.restart()
    assert listed(svc) == [spec_of(before)], \
        "the limit is as it was, the deleted one gone"
    # and it goes on from its generation
    st, _, after = svc.patch(f"/limits/{a}", {"burst": 4})
    assert st == 200 and after["generation"] == before["generation"] + 1, after
    assert after["created_at"] == before["created_at"]
