"""Health and readiness, and a clean exit on SIGTERM."""

import subprocess

from helpers import env, free_port, wait_until


def test_healthz_and_readyz_answer_ok_when_ready(service):
    svc = service()
    status, headers, body = svc.get("/healthz")
    assert status == 200
    assert headers.get_content_type() == "application/json"
    assert body == {"status": "ok"}
    status, _, body = svc.get("/readyz")
    assert status == 200
    assert body == {"status": "ready", "database": "up", "broker": "up"}


def test_readyz_is_503_naming_the_broker_when_it_cannot_be_reached(service):
    # A port where nothing listens: the service must come up (healthy) and
    # say it is not ready because of the broker.
    svc = service(amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F",
                  wait="health")
    status, _, body = svc.get("/healthz")
    assert (status, body) == (200, {"status": "ok"})

    def not_ready():
        st, _, b = svc.get("/readyz")
        return (st, b) if st == 503 else None
    status, body = wait_until(not_ready, 20, "/readyz to answer 503")
    assert body["status"] == "unavailable"
    assert body["database"] == "up"
    assert body["broker"] == "down"
    assert body["error"]["code"] == "unavailable"
    assert body["error"]["message"]
    # Scheduling still works without a broker: the job waits, pending.
    job = svc.schedule({"exchange": "", "routing_key": "q", "body": "x",
                        "delay_ms": 0})
    assert svc.job(job["id"])["status"] == "pending"
    # The log says so too, and never that it is ready.
    wait_until(lambda: "serving, not ready" in svc.log(), 10,
               "the 'serving, not ready' line")
    assert 'msg="ready"' not in svc.log(), svc.log()


def test_ready_is_logged_once_when_the_broker_answers_after_the_start(
        service, broker):
    """Started while the broker is down: "ready" comes once the broker
    answers, not before, and only once."""
    broker.stop_app()
    svc = service(wait="health")
    wait_until(lambda: "serving, not ready" in svc.log(), 20,
               "the 'serving, not ready' line")
    assert 'msg="ready"' not in svc.log()
    broker.start_app()
    wait_until(lambda: svc.get("/readyz").status == 200, 60, "/readyz 200")
    wait_until(lambda: 'msg="ready"' in svc.log(), 10, "the ready line")
    assert svc.log().count('msg="ready"') == 1


def test_sigterm_exits_0_and_pending_jobs_survive(service):
    svc = service()
    job = svc.schedule({"exchange": "", "routing_key": "nowhere", "body": "x",
                        "delay_ms": 3_600_000})
    svc.terminate()
    svc.restart()
    again = svc.job(job["id"])
    assert again["status"] == "pending"
    assert again["deliver_at"] == job["deliver_at"]


def _healthcheck(listen):
    """rmq-scheduler --healthcheck against listen; its exit status."""
    return subprocess.run([env("RMQS_BIN"), "--healthcheck", "--listen", listen],
                          stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=15).returncode


def test_healthcheck_exits_0_for_a_running_service_and_1_without_one(service):
    svc = service()
    assert _healthcheck(svc.listen()) == 0
    # A wildcard --listen, as in the container image, is probed too.
    assert _healthcheck(f"0.0.0.0:{svc.port}") == 0
    assert _healthcheck(f"127.0.0.1:{free_port()}") == 1
    svc.terminate()
    assert _healthcheck(svc.listen()) == 1
