#!/usr/bin/env bash
# shellcheck disable=SC2317  # stop_node runs from the EXIT trap
# deploy/run-local.sh - build rmq-scheduler and run it against a local
# RabbitMQ, on Debian 12 or Ubuntu 22.04+: the first ten minutes of a newcomer
# (README "Quick start").
#
# 1. Looks at 127.0.0.1:5672 first, and says which broker it will use: one
#    that answers there is used as it is; otherwise it will start its own.
# 2. Installs what is missing of what the build and the quick start need (as
#    root, or through sudo): compiler, cmake, the libraries, RabbitMQ, curl
#    and python3 (for rabbitmqadmin). Nothing the tests need. No daemon is
#    left running by the install (deploy/lib/apt-install.sh): Debian's own
#    RabbitMQ service is not started.
# 3. Builds a release binary in build/ (tests off); cmake's own message is
#    shown when the configure step fails.
# 4. When it starts its own node: the management plugin on, every port on
#    127.0.0.1 only (AMQP 5672, management 15672, Erlang distribution 25672,
#    and epmd 4369 when this node starts it), data in ./data/rabbitmq, or,
#    when the rabbitmq user cannot pass through a folder above it (root's
#    home is mode 0700), in /var/lib/rabbitmq/rmq-scheduler-local-<hash>/.
# 5. Runs the service in the foreground on 127.0.0.1:8080, the dashboard at
#    /ui/ (extra arguments go to rmq-scheduler, see --help). Ctrl-C stops the
#    service, then the node this script started (and the epmd it started),
#    whatever the exit.
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

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [ -n "$1" ] && [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

# Can a user who is neither the owner nor in the group (the rabbitmq user)
# pass through every folder from / down to $1?
others_can_enter() {
  local d=$1 mode
  while :; do
    mode=$(stat -c %a "$d") || return 1
    [ $((8#$mode & 1)) -eq 1 ] || { BLOCKED=$d; return 1; }
    [ "$d" = / ] && return 0
    d=$(dirname "$d")
  done
}

# --- 1. which broker: decided before anything is installed ----------------------
OWN_NODE=""
rabbit="$DATA/rabbitmq"
if port_open "$AMQP_PORT"; then
  log "using the RabbitMQ that answers on 127.0.0.1:$AMQP_PORT (not started by this script, left as it is)"
  if [ -d /run/systemd/system ] && systemctl is-active --quiet rabbitmq-server 2>/dev/null; then
    log "it is Debian's rabbitmq-server service; 'systemctl disable --now rabbitmq-server' lets this script start a node of its own on loopback"
  fi
  port_open "$MGMT_PORT" ||
    log "nothing answers on 127.0.0.1:$MGMT_PORT: rabbitmqadmin needs that broker's management plugin (rabbitmq-plugins enable rabbitmq_management)"
else
  OWN_NODE=1
  BLOCKED=""
  if ! others_can_enter "$DATA"; then
    # Root's home is mode 0700: a node started as the rabbitmq user could not
    # reach ./data. Its data goes where that user can reach it, one folder per
    # checkout; the service's database stays in $DATA.
    rabbit=/var/lib/rabbitmq/rmq-scheduler-local-$(printf '%s' "$DATA" | cksum | cut -d' ' -f1)
    log "the rabbitmq user cannot pass through $BLOCKED (mode $(stat -c %a "$BLOCKED")):" \
        "the node's data goes to $rabbit instead of $DATA/rabbitmq"
  fi
  log "nothing answers on 127.0.0.1:$AMQP_PORT: will start a RabbitMQ node of its own ($NODE, loopback only)"
fi

# --- 2. packages: the build's and the quick start's, nothing else ------------
# libpq-dev: the build always has the PostgreSQL store.
PKGS=(cmake make gcc libc6-dev pkg-config libmicrohttpd-dev librabbitmq-dev
      libsqlite3-dev libjansson-dev libglib2.0-dev libpq-dev rabbitmq-server
      curl python3)
# shellcheck source=deploy/lib/apt-install.sh
. deploy/lib/apt-install.sh
rmqs_apt_log() { log "$@"; }
RMQS_APT_SUDO=$SUDO
rmqs_apt_install "${PKGS[@]}" || exit 1

# --- 3. build ------------------------------------------------------------------
mkdir -p "$BUILD"
if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRMQS_TESTS=OFF \
     >"$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log" >&2
  log "cmake could not configure the build (its messages above, also in $BUILD/configure.log)"
  exit 1
fi
cmake --build "$BUILD" -j"$(nproc)"

# --- 4. RabbitMQ -----------------------------------------------------------------
STARTED=""      # set once this script has started a node
STARTED_EPMD="" # set when that node started epmd
stop_node() {
  local rc=$? pid=""
  set +e
  if [ -n "$STARTED" ]; then
    log "stopping the RabbitMQ node $NODE that it started"
    pid=$(as_root cat "$rabbit/pid" 2>/dev/null)
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

if [ -n "$OWN_NODE" ]; then
  if port_open "$AMQP_PORT"; then
    log "something took 127.0.0.1:$AMQP_PORT during the install: stop it, or set RMQS_LOCAL_AMQP_PORT"
    exit 1
  fi
  as_root mkdir -p "$rabbit"
  as_root chown -R rabbitmq:rabbitmq "$rabbit"
  as_root runuser -u rabbitmq -- sh -c "
    [ -f '$rabbit/enabled_plugins' ] || echo '[rabbitmq_management].' > '$rabbit/enabled_plugins'
    printf 'management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %s\n' '$MGMT_PORT' > '$rabbit/rabbitmq.conf'
    rm -f '$rabbit/pid'" || {
    log "the rabbitmq user cannot write to $rabbit: let it through every folder above (chmod o+x), or set RMQS_LOCAL_DATA"
    exit 1
  }
  export RABBITMQ_NODENAME=$NODE RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
         RABBITMQ_NODE_PORT=$AMQP_PORT RABBITMQ_DIST_PORT=$DIST_PORT \
         ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT=$EPMD_PORT \
         RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
         RABBITMQ_MNESIA_BASE=$rabbit/mnesia RABBITMQ_LOG_BASE=$rabbit/log \
         RABBITMQ_PID_FILE=$rabbit/pid RABBITMQ_ENABLED_PLUGINS_FILE=$rabbit/enabled_plugins \
         RABBITMQ_CONFIG_FILE=$rabbit/rabbitmq.conf ERL_CRASH_DUMP=$rabbit/erl_crash.dump
  port_open "$EPMD_PORT" || STARTED_EPMD=1
  STARTED=1
  trap stop_node EXIT
  as_root rabbitmq-server -detached
  for _ in $(seq 1 240); do port_open "$AMQP_PORT" && break; sleep 0.5; done
  port_open "$AMQP_PORT" || { log "RabbitMQ did not start; see $rabbit/log"; exit 1; }
  log "started RabbitMQ node $NODE on 127.0.0.1:$AMQP_PORT, management on" \
      "http://127.0.0.1:$MGMT_PORT (guest/guest, rabbitmqadmin); Ctrl-C stops it with the service"
fi

# --- 5. the service --------------------------------------------------------------
export RMQS_DB="${RMQS_DB:-$DATA/scheduler.db}"
export RMQS_AMQP_URL="${RMQS_AMQP_URL:-amqp://guest:guest@127.0.0.1:$AMQP_PORT/}"
"$(cd "$BUILD" && pwd)/rmq-scheduler" "$@"
