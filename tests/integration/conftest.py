"""Fixtures of the integration tests.

They run the real rmq-scheduler binary ($RMQS_BIN) against the test run's
own RabbitMQ node ($RMQS_TEST_AMQP_URL, $RMQS_TEST_RABBIT_NODE) with a fresh
store per service: a SQLite file, or with RMQS_TEST_STORE=postgres a new
database on the run's PostgreSQL server ($RMQS_TEST_PG_*; tests/pylib/pg.py),
dropped after the test. tests/run.sh sets all of that up and ctest runs
every file once per store (integration.<feature>, .postgres); run the tests
through it (`tests/run.sh -L integration`, `-L postgres`).

  service(*args, wait="ready"|"health", log_level=...,
          share_db_with=svc)  start a service; share_db_with (postgres
                           only): a second instance on svc's database
  store                    "sqlite" or "postgres": the store of this run
  @pytest.mark.sqlite_only("reason")  skip a test (or a module, through
                           pytestmark) on postgres; the reason is required
                           and shown by ctest's output (-rs)
  amqp                     a consumer on a unique exchange/queue/routing key
  amqp_factory(durable=)   more consumers (durable ones survive an outage)
  broker                   stop_app/start_app of the node, exchanges with no queue
  report(line)             print a measurement past pytest's capture and
                           append it to $RMQS_TEST_REPORT if set

Every answer received through helpers.http_request (Service.request, get,
post, ...) is checked against api/openapi.yaml (helpers.OpenApiContract,
from tests/pylib; hooked in as pylib.http.RESPONSE_CHECK):
an undocumented status, media type or body shape fails the test at that
request. Opt out with @pytest.mark.no_contract_check on a test, with
check_contract=False on one request, or RMQS_TEST_CONTRACT=0 for a run.

After each test every service is stopped (SIGTERM, then SIGKILL) and the
test fails if a service log shows an ASan/LSan/UBSan report or if the
service did not exit with status 0 on SIGTERM. A failing test prints the
service logs.
"""

import os
import sys

import pytest

import helpers
import pylib.http
from helpers import STORE, Broker, Consumer, Service, env
from pylib.outcome import pytest_runtest_makereport, call_failed  # noqa: F401 (the hook)

LOG_TAIL_LINES = 300


def _print_log(svc, full=False):
    text = svc.log()
    lines = text.splitlines()
    if not full and len(lines) > LOG_TAIL_LINES:
        lines = [f"... ({len(lines) - LOG_TAIL_LINES} lines before)"] + \
            lines[-LOG_TAIL_LINES:]
    print(f"----- service log {svc.log_path} -----", file=sys.stderr)
    print("\n".join(lines), file=sys.stderr)
    print("----- end of service log -----", file=sys.stderr)


class _Services:
    def __init__(self, workdir):
        self.workdir = workdir
        self.started = []

    def __call__(self, *args, wait="ready", log_level="info", timeout=20,
                 amqp_url=None, **options):
        """Start a service; options go to helpers.Service (host,
        settings_in_env, extra_env, share_db_with). wait=None: do not wait
        at all."""
        svc = Service(os.path.join(self.workdir, f"svc{len(self.started)}"),
                      amqp_url or env("RMQS_TEST_AMQP_URL"), args, log_level,
                      store=STORE, **options)
        self.started.append(svc)
        svc.start(wait, timeout)
        return svc

    def close(self, failed):
        problems = []
        for svc in self.started:
            p = svc.stop()
            if p:
                problems.append(p)
            report = svc.sanitizer_report()
            if report:
                problems.append(f"sanitizer report in {svc.log_path}")
            if svc.store == "postgres" and \
                    env("RMQS_TEST_PG_PASSWORD") in svc.log():
                problems.append(f"the database password is in {svc.log_path}")
            if failed or p or report:
                _print_log(svc, full=bool(report))
        # every instance is down before a database it may share goes
        for svc in self.started:
            try:
                svc.drop_database()
            except AssertionError as e:
                problems.append(f"dropping {svc.pg_database}: {e}")
        if problems:
            pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture
def service(request, tmp_path):
    """Factory: service("--backoff-base-ms", "50") starts a service and waits
    until it is healthy and ready (wait="health": healthy only)."""
    services = _Services(str(tmp_path))
    yield services
    services.close(call_failed(request))


@pytest.fixture(scope="module")
def module_service(request, tmp_path_factory):
    """Factory for services shared by the tests of a module (cheaper for
    data-driven tests); checked like `service` at the end of the module."""
    services = _Services(str(tmp_path_factory.mktemp("module")))
    yield services
    failed = request.session.testsfailed > 0
    services.close(failed)


@pytest.fixture
def store():
    """The store the services of this run use: "sqlite" or "postgres"."""
    return STORE


@pytest.fixture
def amqp_factory():
    consumers = []

    def make(durable=False):
        c = Consumer(env("RMQS_TEST_AMQP_URL"), durable=durable).start()
        consumers.append(c)
        return c
    yield make
    for c in consumers:
        c.stop()


@pytest.fixture
def amqp(amqp_factory):
    return amqp_factory()


@pytest.fixture
def broker():
    b = Broker()
    yield b
    b.cleanup()


@pytest.fixture(autouse=True)
def _suite_broker_up(request):
    """Every test starts and ends with the run's RabbitMQ node answering
    (Broker.ensure_up): a node left stopped or frozen is brought back and
    said so loudly, naming the test; a node that is gone fails the test
    with the node's log instead of a timeout per service start."""
    b = Broker()

    def check(when):
        found = b.ensure_up()
        if found:
            line = f"broker guard: {when} {request.node.nodeid}: the suite's node " \
                   f"was not answering: {found}"
            print(line, file=sys.stderr)
            path = os.environ.get("RMQS_TEST_REPORT")
            if path:
                with open(path, "a") as f:
                    f.write(line + "\n")
    check("before")
    yield
    check("after")


@pytest.fixture
def report(capsys):
    def write(line):
        with capsys.disabled():
            print(line, file=sys.stderr)
        path = os.environ.get("RMQS_TEST_REPORT")
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")
    return write


# --- answers checked against api/openapi.yaml ---------------------------------

def pytest_configure(config):
    config.addinivalue_line(
        "markers", "no_contract_check: do not check the answers of this test "
                   "against api/openapi.yaml")
    config.addinivalue_line(
        "markers", "sqlite_only(reason): the test cannot apply to the "
                   "PostgreSQL store (it reads the SQLite file, its lock "
                   "file, ...): skipped on postgres with that reason")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("sqlite_only"):
        reason = mark.args[0] if mark.args else mark.kwargs.get("reason")
        if not reason:
            pytest.fail(f"{item.nodeid}: sqlite_only needs a reason", pytrace=False)
        if STORE != "sqlite":
            pytest.skip(f"sqlite only: {reason}")


def _contract_enabled():
    return os.environ.get("RMQS_TEST_CONTRACT", "1") != "0"


@pytest.fixture(scope="session", autouse=True)
def _contract_check_session():
    """On for the whole run, module-scoped fixtures included."""
    if not _contract_enabled():
        yield None
        return
    contract = helpers.openapi_contract()
    pylib.http.RESPONSE_CHECK = contract.check
    yield contract
    pylib.http.RESPONSE_CHECK = None


@pytest.fixture(autouse=True)
def _contract_check_opt_out(request, _contract_check_session):
    """@pytest.mark.no_contract_check turns the check off for one test."""
    if _contract_check_session is None or \
            request.node.get_closest_marker("no_contract_check") is None:
        yield
        return
    pylib.http.RESPONSE_CHECK = None
    yield
    pylib.http.RESPONSE_CHECK = _contract_check_session.check
