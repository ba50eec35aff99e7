#!/usr/bin/env bash
# shellcheck disable=SC2317  # stop_node/alive run from the EXIT trap
# tests/run.sh - THE test command of rmq-scheduler.
#
#   sudo tests/run.sh                 # everything
#   sudo tests/run.sh -L unit         # extra arguments go to ctest
#   sudo tests/run.sh -R delivery
#
# On a fresh Debian 12 machine, as root, it:
#   1. installs the packages the build and the tests need (only those missing);
#   2. builds with ASan + UBSan in build-test/;
#   3. starts a private RabbitMQ node (own name, ports and data folder, on
#      127.0.0.1 only) and tells the tests how to reach it through RMQS_TEST_*;
#   4. runs ctest, and always stops the node afterwards;
#   5. exits with ctest's status.
set -euo pipefail

cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libmicrohttpd-dev librabbitmq-dev
          libsqlite3-dev libjansson-dev libcriterion-dev rabbitmq-server
          python3 python3-pytest python3-pika python3-yaml openssl
          curl prometheus clang libclang-rt-14-dev golang-go)
# The tests use Debian's python3 (which has python3-pytest and python3-pika),
# not whatever python3 comes first on PATH.
PYTHON=/usr/bin/python3

log() { printf 'run.sh: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "must run as root (it installs packages and starts a RabbitMQ node): sudo $0"
    exit 2
fi

# --- 1. packages ---------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
    [ "${status:0:2}" = "ii" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# --- 2. build ------------------------------------------------------------
cmake -S . -B build-test -DRMQS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
      -DPython3_EXECUTABLE="$PYTHON"
cmake --build build-test -j2

# --- 3. a private RabbitMQ node -------------------------------------------
# Three free loopback ports: AMQP, Erlang distribution, and a private epmd
# (so nothing of this node outlives the run, and other nodes on the machine
# are not disturbed).
read -r AMQP_PORT DIST_PORT EPMD_PORT < <("$PYTHON" - <<'EOF'
import socket
socks = []
for _ in range(3):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
EOF
)

NODE_DIR=$(mktemp -d /tmp/rmqs-test-rabbit.XXXXXX)
echo '[].' > "$NODE_DIR/enabled_plugins"
chown -R rabbitmq:rabbitmq "$NODE_DIR"

export RABBITMQ_NODENAME="rmqs-test-$$@localhost"
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT=$AMQP_PORT
export RABBITMQ_DIST_PORT=$DIST_PORT
export ERL_EPMD_PORT=$EPMD_PORT
export ERL_EPMD_ADDRESS=127.0.0.1
export RABBITMQ_MNESIA_BASE=$NODE_DIR/mnesia
export RABBITMQ_LOG_BASE=$NODE_DIR/log
export RABBITMQ_PID_FILE=$NODE_DIR/pid
export RABBITMQ_ENABLED_PLUGINS_FILE=$NODE_DIR/enabled_plugins
export RABBITMQ_CONFIG_FILE=$NODE_DIR/rabbitmq  # none: built-in defaults only
export RABBITMQ_ADVANCED_CONFIG_FILE=$NODE_DIR/advanced.config
export RABBITMQ_CONF_ENV_FILE=$NODE_DIR/rabbitmq-env.conf

# A process that exists and is not a zombie waiting to be reaped.
alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

stop_node() {
    local rc=$?
    set +e
    log "stopping RabbitMQ node $RABBITMQ_NODENAME"
    local pid=""
    [ -s "$NODE_DIR/pid" ] && pid=$(cat "$NODE_DIR/pid")
    timeout 60 rabbitmqctl -n "$RABBITMQ_NODENAME" stop >/dev/null 2>&1
    if [ -n "$pid" ]; then
        local deadline=$((SECONDS + 15))
        while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
        if alive "$pid"; then
            log "node still alive: killing beam pid $pid"
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    # The private epmd was started by this node; it leaves once asked.
    timeout 10 epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1
    if [ "$rc" -ne 0 ] && [ -d "$NODE_DIR/log" ]; then
        rm -rf build-test/rabbitmq-log
        cp -r "$NODE_DIR/log" build-test/rabbitmq-log
        log "RabbitMQ node logs copied to build-test/rabbitmq-log"
    fi
    rm -rf "$NODE_DIR"
    exit "$rc"
}
trap stop_node EXIT

log "starting RabbitMQ node $RABBITMQ_NODENAME on 127.0.0.1:$AMQP_PORT"
rabbitmq-server -detached

# Ready when the AMQP port accepts a connection (await_startup polls every 10 s).
"$PYTHON" - "$AMQP_PORT" <<'EOF'
import socket, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + 60
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("run.sh: RabbitMQ did not accept connections within 60 s")
        time.sleep(0.2)
EOF
# The tests drive the node with rabbitmqctl (outages): make sure that works
# (right after the port opens it may still say the app is starting).
deadline=$((SECONDS + 60))
until rabbitmqctl -n "$RABBITMQ_NODENAME" status >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        rabbitmqctl -n "$RABBITMQ_NODENAME" status  # show why
        exit 1
    fi
    sleep 1
done

export RMQS_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/"
export RMQS_TEST_AMQP_PORT=$AMQP_PORT
export RMQS_TEST_RABBIT_NODE=$RABBITMQ_NODENAME

# --- 4. tests --------------------------------------------------------------
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

set +e
ctest --test-dir build-test --output-on-failure "$@"
status=$?
set -e
exit "$status"
