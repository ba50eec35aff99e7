#!/usr/bin/env bash
# shellcheck disable=SC2317  # stop_node runs from the EXIT trap
# deploy/run-local.sh - build rmq-scheduler and run it against a local
# RabbitMQ, on Debian 12 or Ubuntu 22.04+: the first ten minutes of a newcomer
# (README "Quick start").
#
# 1. Installs what is missing of what the build and the quick start need (as
#    root, or through sudo): compiler, cmake, the four libraries, RabbitMQ,
#    curl and python3 (for rabbitmqadmin). Nothing the tests need.
# 2. Builds a release binary in build/ (tests off).
# 3. When nothing answers on 127.0.0.1:5672, starts a RabbitMQ node of its own
#    with the management plugin (data in ./data/rabbitmq). Every port of that
#    node listens on 127.0.0.1 only: AMQP 5672, management 15672, Erlang
#    distribution 25672, and epmd 4369 when this node starts it.
# 4. Runs the service in the foreground on 127.0.0.1:8080 (extra arguments go
#    to rmq-scheduler, see --help). Ctrl-C stops the service, then the node
#    this script started (and the epmd it started), whatever the exit.
#
# Ports and folders, for running it next to another (the tests do):
#   RMQS_LOCAL_AMQP_PORT (5672)   RMQS_LOCAL_MANAGEMENT_PORT (15672)
#   RMQS_LOCAL_DIST_PORT (25672)  RMQS_LOCAL_EPMD_PORT (4369)
#   RMQS_LOCAL_NODE (rmqs-local@localhost)  RMQS_LOCAL_DATA (./data)
#   RMQS_LOCAL_BUILD (./build)
# and the service's own RMQS_* variables (RMQS_LISTEN, RMQS_AMQP_URL, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

AMQP_PORT=${RMQS_LOCAL_AMQP_PORT:-5672}
MGMT_PORT=${RMQS_LOCAL_MANAGEMENT_PORT:-15672}
DIST_PORT=${RMQS_LOCAL_DIST_PORT:-25672}
EPMD_PORT=${RMQS_LOCAL_EPMD_PORT:-4369}
NODE=${RMQS_LOCAL_NODE:-rmqs-local@localhost}
DATA=${RMQS_LOCAL_DATA:-$PWD/data}
BUILD=${RMQS_LOCAL_BUILD:-build}
mkdir -p "$DATA"
DATA=$(cd "$DATA" && pwd)

log() { printf 'run-local: %s\n' "$*" >&2; }

# Root's commands: as root directly, otherwise through sudo (environment kept).
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || {
    log "needs root for apt-get and RabbitMQ, and there is no sudo: run it as root"
    exit 2
  }
  SUDO="sudo"
fi
as_root() { if [ -n "$SUDO" ]; then sudo -E "$@"; else "$@"; fi; }

# --- 1. packages: the build's and the quick start's, nothing else ------------
PKGS="cmake make gcc libc6-dev pkg-config libmicrohttpd-dev librabbitmq-dev
      libsqlite3-dev libjansson-dev libglib2.0-dev rabbitmq-server curl python3"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  log "installing$missing"
  as_root apt-get update -qq
  # shellcheck disable=SC2086  # a word list
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi

# --- 2. build ------------------------------------------------------------------
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRMQS_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)"

# --- 3. RabbitMQ -----------------------------------------------------------------
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [ -n "$1" ] && [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

STARTED=""      # set once this script has started a node
STARTED_EPMD="" # set when that node started epmd
rabbit="$DATA/rabbitmq"
stop_node() {
  local rc=$? pid=""
  set +e
  if [ -n "$STARTED" ]; then
    log "stopping the RabbitMQ node $NODE that it started"
    [ -s "$rabbit/pid" ] && pid=$(cat "$rabbit/pid")
    as_root timeout 60 rabbitmqctl -n "$NODE" stop >/dev/null 2>&1
    local deadline=$((SECONDS + 20))
    while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if alive "$pid"; then
      log "node still running: killing its pid $pid"
      as_root kill -KILL "$pid"
    fi
    # epmd refuses to go while any node is registered with it.
    [ -n "$STARTED_EPMD" ] && as_root timeout 10 epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1
    log "RabbitMQ stopped"
  fi
  exit "$rc"
}

if port_open "$AMQP_PORT"; then
  log "using the RabbitMQ that answers on 127.0.0.1:$AMQP_PORT (left as it is)"
else
  mkdir -p "$rabbit"
  [ -f "$rabbit/enabled_plugins" ] || echo '[rabbitmq_management].' > "$rabbit/enabled_plugins"
  cat > "$rabbit/rabbitmq.conf" <<EOF
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
EOF
  rm -f "$rabbit/pid"
  export RABBITMQ_NODENAME=$NODE RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
         RABBITMQ_NODE_PORT=$AMQP_PORT RABBITMQ_DIST_PORT=$DIST_PORT \
         ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT=$EPMD_PORT \
         RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
         RABBITMQ_MNESIA_BASE=$rabbit/mnesia RABBITMQ_LOG_BASE=$rabbit/log \
         RABBITMQ_PID_FILE=$rabbit/pid RABBITMQ_ENABLED_PLUGINS_FILE=$rabbit/enabled_plugins \
         RABBITMQ_CONFIG_FILE=$rabbit/rabbitmq.conf ERL_CRASH_DUMP=$rabbit/erl_crash.dump
  port_open "$EPMD_PORT" || STARTED_EPMD=1
  as_root chown -R rabbitmq:rabbitmq "$rabbit"
  as_root runuser -u rabbitmq -- test -w "$rabbit" || {
    log "the rabbitmq user cannot write to $rabbit: let it through every folder above (chmod o+x)"
    exit 1
  }
  STARTED=1
  trap stop_node EXIT
  as_root rabbitmq-server -detached
  for _ in $(seq 1 240); do port_open "$AMQP_PORT" && break; sleep 0.5; done
  port_open "$AMQP_PORT" || { log "RabbitMQ did not start; see $rabbit/log"; exit 1; }
  log "started RabbitMQ node $NODE on 127.0.0.1:$AMQP_PORT, management on" \
      "http://127.0.0.1:$MGMT_PORT (guest/guest, rabbitmqadmin); Ctrl-C stops it with the service"
fi

# --- 4. the service --------------------------------------------------------------
export RMQS_DB="${RMQS_DB:-$DATA/scheduler.db}"
export RMQS_AMQP_URL="${RMQS_AMQP_URL:-amqp://guest:guest@127.0.0.1:$AMQP_PORT/}"
"$(cd "$BUILD" && pwd)/rmq-scheduler" "$@"
