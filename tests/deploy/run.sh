#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup runs from the EXIT trap
# tests/deploy/run.sh - the deployment test: the container image, the compose
# stack, the systemd unit and the Grafana dashboard (tests/deploy/test_*.py).
#
#   tests/run.sh -L deploy            # the usual way: ctest runs this
#   RMQS_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ tests/deploy/run.sh [pytest args]
#   RMQS_TEST_DEPLOY=0 tests/run.sh   # skip it (exit 77: ctest "skipped")
#
# As root (not root: it runs itself again through sudo, see
# tests/lib/as-root.sh) it:
#   1. installs what is missing: docker.io, docker-compose, debootstrap,
#      python3-pytest, python3-pika, python3-yaml, curl, prometheus (promtool);
#   2. uses the Docker engine that answers, or starts one (no iptables, no
#      bridge, vfs storage: containers use the host's network, loopback only)
#      and stops it at the end, only if it started it;
#   3. makes the base image debian:bookworm-slim with debootstrap if it is
#      missing (kept cached: no registry can be reached here);
#   4. runs pytest on tests/deploy/test_deploy.py and test_ha_compose.py
#      (deploy/docker-compose.ha.yml; extra arguments go to pytest) and exits
#      with its status.
# The image under test, its containers, volumes and compose project are
# removed by the tests themselves; the cached base images (debian:bookworm-
# slim, the stand-ins rabbitmq:3-management and haproxy:2.6, and the HA
# stack's database and etcd images rmq-scheduler-patroni, rmq-scheduler-etcd)
# stay. With RMQS_DEPLOY_KEEP_CACHE=1 the build layers of the image stay too
# (reruns then build in seconds instead of minutes).
# The container tests use the suite's RabbitMQ (RMQS_TEST_AMQP_URL, set by
# tests/run.sh); the compose tests run their own brokers (the HA one a 3-node
# cluster, and PostgreSQL under Patroni over etcd) on free loopback ports.
set -euo pipefail

# shellcheck source=tests/lib/as-root.sh
. "$(dirname "$0")/../lib/as-root.sh"
rmqs_as_root "$0" "$@"

cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib/common.sh
. tests/lib/common.sh
RMQS_LOG_PREFIX=deploy/run.sh

PYTHON=$RMQS_PYTHON
PACKAGES=(docker.io docker-compose debootstrap python3-pytest python3-pika
          python3-yaml curl prometheus)
STARTED_DOCKERD=""
DOCKERD_DIR=""

if [ "${RMQS_TEST_DEPLOY:-1}" = 0 ]; then
    rmqs_log "skipped (RMQS_TEST_DEPLOY=0)"
    exit 77  # ctest: SKIP_RETURN_CODE
fi
if [ -z "${RMQS_TEST_AMQP_URL:-}" ]; then
    rmqs_log "RMQS_TEST_AMQP_URL is not set: run it through 'tests/run.sh -L deploy'"
    exit 2
fi

# --- 1. packages ------------------------------------------------------------
rmqs_apt_install "${PACKAGES[@]}"

# --- 2. a Docker engine -------------------------------------------------------
cleanup() {
    local rc=$?
    set +e
    if [ -n "$STARTED_DOCKERD" ]; then
        rmqs_log "stopping the dockerd this run started (pid $STARTED_DOCKERD)"
        kill -TERM "$STARTED_DOCKERD" 2>/dev/null
        local deadline=$((SECONDS + 30))
        while rmqs_alive "$STARTED_DOCKERD" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
        if rmqs_alive "$STARTED_DOCKERD"; then
            rmqs_log "dockerd still alive: killing pid $STARTED_DOCKERD"
            kill -KILL "$STARTED_DOCKERD" 2>/dev/null
        fi
        if [ "$rc" -ne 0 ] && [ -f "$DOCKERD_DIR/dockerd.log" ]; then
            rmqs_log "last lines of dockerd's log:"
            tail -n 20 "$DOCKERD_DIR/dockerd.log" >&2
        fi
    fi
    [ -n "$DOCKERD_DIR" ] && rm -rf "$DOCKERD_DIR"
    exit "$rc"
}
trap cleanup EXIT

if timeout 20 docker info >/dev/null 2>&1; then
    rmqs_log "using the running Docker engine"
else
    DOCKERD_DIR=$(mktemp -d /tmp/rmqs-deploy-dockerd.XXXXXX)
    rmqs_log "starting dockerd (log: $DOCKERD_DIR/dockerd.log)"
    dockerd --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs \
        >"$DOCKERD_DIR/dockerd.log" 2>&1 &
    STARTED_DOCKERD=$!
    deadline=$((SECONDS + 60))
    until timeout 10 docker info >/dev/null 2>&1; do
        if ! rmqs_alive "$STARTED_DOCKERD" || [ "$SECONDS" -ge "$deadline" ]; then
            rmqs_log "dockerd did not answer within 60 s"
            tail -n 30 "$DOCKERD_DIR/dockerd.log" >&2
            exit 1
        fi
        sleep 0.5
    done
fi

# --- 3. the base image ----------------------------------------------------------
bash tests/deploy/make-base-image.sh debian:bookworm-slim

# --- 4. tests -------------------------------------------------------------------
set +e
timeout -s INT -k 60 3000 "$PYTHON" -m pytest -q -p no:cacheprovider -rA tests/deploy/test_deploy.py \
    tests/deploy/test_ha_compose.py tests/deploy/test_fresh_machine.py "$@"
status=$?
set -e
exit "$status"
