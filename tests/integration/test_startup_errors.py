"""Start-up refusals: a database the service cannot use, a bad AMQP URL or a
bad setting stops the process at once with a clear message, an exit status
(1 or 2, never a signal) and no sanitizer report.

A database problem is exactly one log line with level=error naming the file
and the problem; the database is left as it was.
"""

import os

import pytest

from helpers import (SANITIZER_MARKERS, db_count, db_name, db_query, env,
                     free_port)
from pylib.startup import FAIL_WITHIN_S, assert_refused, run_binary

PASSWORD = "s3cret-pw"


# --- databases the service cannot use ------------------------------------------

def _real_database(service):
    """A database written by the real service, with one pending job; the
    service is stopped (SIGTERM, exit 0) when this returns."""
    svc = service(wait="health")
    job = svc.schedule({"exchange": "", "routing_key": "startup-errors",
                        "body": "keep me", "delay_ms": 3_600_000})
    svc.terminate()
    return svc, job


@pytest.mark.sqlite_only(
    "a file of random bytes as the SQLite database; a server's files are not the service's")
def test_random_bytes_database_is_refused(tmp_path, report):
    db = tmp_path / "random.db"
    db.write_bytes(os.urandom(64 * 1024))
    before = db.read_bytes()
    line = assert_refused(run_binary(["--db", str(db)]), (1, 2),
                          "not a database", "malformed", "corrupt",
                          must=("database", str(db)))
    assert db.read_bytes() == before, "the refused database file was modified"
    report(f"startup errors: random bytes -> {line.split('msg=', 1)[1]}")


@pytest.mark.sqlite_only(
    "corrupts the SQLite file behind its header")
def test_valid_header_then_garbage_is_refused(service, report):
    svc, _ = _real_database(service)
    data = bytearray(open(svc.db, "rb").read())
    assert data[:16] == b"SQLite format 3\x00"
    data[100:] = os.urandom(len(data) - 100)  # keep the header, garbage after
    with open(svc.db, "wb") as f:
        f.write(data)
    line = assert_refused(run_binary(["--db", svc.db]), (1, 2),
                          "malformed", "not a database", "corrupt",
                          must=("database", svc.db))
    report(f"startup errors: valid header then garbage -> {line.split('msg=', 1)[1]}")


@pytest.mark.sqlite_only(
    "a directory as the SQLite file's path")
def test_directory_as_database_is_refused(tmp_path, report):
    d = tmp_path / "a-directory.db"
    d.mkdir()
    line = assert_refused(run_binary(["--db", str(d)]), (1, 2),
                          "unable to open", "directory",
                          must=("database", str(d)))
    assert os.listdir(d) == [], "files were created inside the directory"
    report(f"startup errors: directory as --db -> {line.split('msg=', 1)[1]}")


@pytest.mark.sqlite_only(
    "an unwritable path for the SQLite file")
def test_database_in_unwritable_place_is_refused(report):
    # root ignores file modes; /proc does not take new files from anyone
    path = f"/proc/rmqs-test-{os.getpid()}.db"
    line = assert_refused(run_binary(["--db", path]), (1, 2),
                          "unable to open", "permission", "read-only", "no such file",
                          must=("database", path))
    assert not os.path.exists(path)
    report(f"startup errors: {path} -> {line.split('msg=', 1)[1]}")


def test_unreachable_postgres_url_is_refused(tmp_path, report):
    # Nothing listens there (a free loopback port): one clear error naming
    # the server without the password, an exit within FAIL_WITHIN_S, and no
    # folder or lock file made from the URL.
    port = free_port()
    url = f"postgres://app:{PASSWORD}@127.0.0.1:{port}/appdb"
    cwd = os.getcwd()
    before = set(os.listdir(cwd))
    result = run_binary(["--db", url])
    line = assert_refused(result, (1, 2), must=(
        "cannot connect to database", f"postgres://app@127.0.0.1:{port}/appdb"))
    assert PASSWORD not in result[1], f"the password was logged:\n{result[1][-3000:]}"
    assert set(os.listdir(cwd)) == before, "files were made from the URL"
    report(f"startup errors: --db postgres://... -> {line.split('msg=', 1)[1]}")


@pytest.mark.parametrize("query, shown", [
    (f"sslpassword={PASSWORD}", "sslpassword=***"),
    (f"%70assword={PASSWORD}", "password=***"),
    (f"connect_timeout=2&PassWord={PASSWORD}", "connect_timeout=2&PassWord=***"),
])
def test_a_secret_parameter_of_a_postgres_url_is_never_shown(query, shown):
    """Whatever its case or percent-encoding, a parameter that libpq calls a
    password field is masked in the error (issue 21)."""
    port = free_port()
    url = f"postgres://app@127.0.0.1:{port}/appdb?{query}"
    result = run_binary(["--db", url])
    line = assert_refused(result, (1, 2), must=("cannot connect to database",
                                                f"127.0.0.1:{port}/appdb?{shown}"))
    assert PASSWORD not in result[1], f"the secret was logged:\n{result[1][-3000:]}"
    assert line


def test_a_postgres_password_libpq_would_misread_is_refused_unseen():
    """An unencoded '/' or '@' in the password: libpq would take part of it
    for the host or port and quote it in its error; the service refuses the
    URL first, saying how to encode it, and shows none of the password."""
    port = free_port()
    secret = "s3cr/t@pw"
    result = run_binary(["--db", f"postgres://app:{secret}@127.0.0.1:{port}/appdb"])
    line = assert_refused(result, (1, 2), "percent-encode", must=("%2F",))
    for part in ("s3cr", "t@pw", secret):
        assert part not in result[1], f"{part!r} was logged:\n{result[1][-3000:]}"
    assert line


def test_database_from_a_newer_binary_is_refused_and_left_alone(service, report):
    svc, job = _real_database(service)
    # the same migrations table on both stores (db_query)
    known = db_count(svc, "SELECT max(version) FROM schema_migrations")
    assert known < 9999
    db_query(svc, "INSERT INTO schema_migrations (version, name, applied_at) "
                  "VALUES (9999, '9999_future.sql', 0)")

    result = run_binary(["--db", svc.db])
    line = assert_refused(result, (1, 2), "newer", must=("9999", db_name(svc)))
    if svc.store == "postgres":
        assert env("RMQS_TEST_PG_PASSWORD") not in result[1], "the password was logged"

    versions = [int(v) for (v,) in db_query(
        svc, "SELECT version FROM schema_migrations ORDER BY version")]
    n_jobs = db_count(svc, "SELECT count(*) FROM jobs")
    assert versions[-1] == 9999 and 9999 not in versions[:-1], versions
    assert n_jobs == 1, f"{n_jobs} jobs after the refused start"
    db_query(svc, "DELETE FROM schema_migrations WHERE version = 9999")

    # the database was left intact: with the foreign row gone it serves again
    svc.restart(wait="health")
    again = svc.job(job["id"])
    assert again["status"] == "pending" and again["deliver_at"] == job["deliver_at"]
    report(f"startup errors: schema version 9999 -> {line.split('msg=', 1)[1]}")


# --- bad AMQP URL and bad settings ---------------------------------------------

@pytest.mark.parametrize("url", [
    "http://x",
    f"amqp://guest:{PASSWORD}@127.0.0.1:notaport/",
    f"amqp://guest:{PASSWORD}@127.0.0.1:5672/a/b",
])
def test_bad_amqp_url_exits_2_with_a_clear_message(tmp_path, url):
    result = run_binary(["--db", str(tmp_path / "db"), "--amqp-url", url])
    line = assert_refused(result, (2,), "url", must=("amqp",))
    assert PASSWORD not in result[1], "the password appears in the output"
    assert line


@pytest.mark.parametrize("args, extra_env, names", [
    (("--heartbeat-s", "abc"), None, "heartbeat-s"),
    (("--batch-size", "0"), None, "batch-size"),
    (("--sync", "sometimes"), None, "sync"),
    (("--shutdown-grace-s", "-1"), None, "shutdown-grace-s"),
    (("--max-body-bytes", "1e6"), None, "max-body-bytes"),
    (("--confirm-timeout-ms",), None, "confirm-timeout-ms"),  # value missing
    ((), {"RMQS_CONFIRM_TIMEOUT_MS": "5"}, "RMQS_CONFIRM_TIMEOUT_MS"),
    (("--listen", "127.0.0.1:99999"), None, "listen"),
    (("--listen", "not-an-address"), None, "listen"),
])
def test_invalid_setting_value_exits_2_naming_it(tmp_path, args, extra_env, names):
    # the bad value comes last: it wins over run_binary's own --listen
    code, text, secs = run_binary(["--db", str(tmp_path / "db"), *args], extra_env)
    assert code == 2, \
        f"exit status {code} for {args or extra_env}, expected 2:\n{text[-3000:]}"
    assert secs <= FAIL_WITHIN_S, f"took {secs:.1f} s to refuse"
    for marker in SANITIZER_MARKERS:
        assert marker not in text, f"sanitizer report:\n{text[-6000:]}"
    assert names in text, f"the message does not name {names}:\n{text}"


def test_an_ingest_target_outside_the_allow_list_stops_the_start(tmp_path):
    """Every message of that ingest would fail at publish time: refused at
    start-up instead, before the database is touched."""
    result = run_binary(["--db", os.path.join(tmp_path, "x.db"),
                         "--allow-exchanges", "billing",
                         "--ingest", "in.delayed=forbidden.target"])
    assert_refused(result, (1, 2), must=("--ingest", "forbidden.target"))
    assert not os.path.exists(os.path.join(tmp_path, "x.db")), \
        "the database was created for a start that was refused"
