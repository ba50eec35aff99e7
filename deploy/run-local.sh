#!/usr/bin/env bash
# Build rmq-scheduler and run it against a local RabbitMQ, on Debian 12 or
# Ubuntu 22.04+. Installs missing packages (as root, or via sudo), builds a
# release binary in build/, starts a RabbitMQ node of its own on
# 127.0.0.1:5672 when nothing answers there (data in ./data/rabbitmq), then
# runs the service in the foreground on 127.0.0.1:8080. Extra arguments go to
# rmq-scheduler (see --help). Ctrl-C stops the service; a RabbitMQ node this
# script started is stopped too.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="build-essential cmake pkg-config libmicrohttpd-dev librabbitmq-dev
      libsqlite3-dev libjansson-dev libcriterion-dev rabbitmq-server"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "run-local: installing$missing"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRMQS_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

NODE=""
if ! port_open 5672; then
  data="$PWD/data/rabbitmq"
  mkdir -p "$data"
  [ -f "$data/enabled_plugins" ] || echo '[rabbitmq_management].' > "$data/enabled_plugins"
  NODE="rmqs-local@localhost"
  export RABBITMQ_NODENAME=$NODE RABBITMQ_NODE_PORT=5672 RABBITMQ_DIST_PORT=25672 \
         RABBITMQ_MNESIA_BASE=$data/mnesia RABBITMQ_LOG_BASE=$data/log \
         RABBITMQ_PID_FILE=$data/pid RABBITMQ_ENABLED_PLUGINS_FILE=$data/enabled_plugins
  if [ "$(id -u)" -eq 0 ]; then
    chown -R rabbitmq:rabbitmq "$data"
    rabbitmq-server -detached
  else
    $SUDO -E rabbitmq-server -detached
  fi
  echo "run-local: started RabbitMQ node $NODE (management UI on http://127.0.0.1:15672, guest/guest)"
  for _ in $(seq 1 120); do port_open 5672 && break; sleep 0.5; done
  port_open 5672 || { echo "run-local: RabbitMQ did not start; see $data/log" >&2; exit 1; }
  trap '$SUDO -E rabbitmqctl -n "$NODE" stop >/dev/null 2>&1 || true' EXIT
fi

export RMQS_DB="${RMQS_DB:-./data/scheduler.db}"
./build/rmq-scheduler "$@"
