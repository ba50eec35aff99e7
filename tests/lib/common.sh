# shellcheck shell=bash
# tests/lib/common.sh - what every test script of this repo does alike:
# install the Debian packages it needs, find free loopback ports, and run a
# private RabbitMQ node that nothing else on the machine sees.
#
# tests/run.sh, tests/bench/run.sh and tests/deploy/run.sh source it (after
# tests/lib/as-root.sh); a script sets RMQS_LOG_PREFIX so messages say who
# speaks. (The Python harnesses share tests/pylib the same way.)
#
#   rmqs_install PKG...          apt-get install the missing ones (bounded:
#                                update 15 min, install 20 min)
#   rmqs_free_ports N            N free loopback TCP ports, on one line
#   rmqs_alive PID               the process exists and is not a zombie
#   rmqs_rabbit_start NAME DIR   a node NAME@localhost with its data in DIR
#   rmqs_rabbit_stop [LOGDEST]   stop it (and its epmd); copy its logs to
#                                LOGDEST if given; remove DIR
#
# The node: AMQP on 127.0.0.1 at a free port, Erlang distribution and a
# private epmd on free ports bound to loopback, no plugins, built-in
# defaults. rmqs_rabbit_start exports RABBITMQ_NODENAME and the rest (so
# rabbitmqctl -n "$RABBITMQ_NODENAME" reaches it) and sets RMQS_RABBIT_PORT
# and RMQS_RABBIT_PIDFILE. It returns once the AMQP port accepts connections
# and rabbitmqctl answers, or fails after 60 s.

RMQS_PYTHON=/usr/bin/python3  # Debian's, which has python3-pika and pytest

rmqs_log() { printf '%s: %s\n' "${RMQS_LOG_PREFIX:-tests}" "$*" >&2; }

rmqs_install() {
    local p status missing=()
    for p in "$@"; do
        status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
        [ "${status:0:2}" = "ii" ] || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    rmqs_log "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get update
    DEBIAN_FRONTEND=noninteractive timeout 1200 \
        apt-get install -y --no-install-recommends "${missing[@]}"
}

rmqs_free_ports() {
    "$RMQS_PYTHON" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
EOF
}

rmqs_alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

rmqs_rabbit_start() {
    local name=$1 dir=$2 amqp dist epmd
    read -r amqp dist epmd < <(rmqs_free_ports 3)
    mkdir -p "$dir"
    echo '[].' > "$dir/enabled_plugins"
    chown -R rabbitmq:rabbitmq "$dir"
    RMQS_RABBIT_DIR=$dir
    RMQS_RABBIT_PORT=$amqp
    RMQS_RABBIT_EPMD_PORT=$epmd
    RMQS_RABBIT_PIDFILE=$dir/pid
    export RABBITMQ_NODENAME="$name@localhost"
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT=$amqp
    export RABBITMQ_DIST_PORT=$dist
    export ERL_EPMD_PORT=$epmd
    export ERL_EPMD_ADDRESS=127.0.0.1
    export RABBITMQ_MNESIA_BASE=$dir/mnesia
    export RABBITMQ_LOG_BASE=$dir/log
    export RABBITMQ_PID_FILE=$dir/pid
    export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
    export RABBITMQ_CONFIG_FILE=$dir/rabbitmq  # none: built-in defaults only
    export RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config
    export RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf
    export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"

    rmqs_log "starting RabbitMQ node $RABBITMQ_NODENAME on 127.0.0.1:$amqp"
    rabbitmq-server -detached
    # Ready when the AMQP port accepts a connection (await_startup polls
    # every 10 s) ...
    "$RMQS_PYTHON" - "$amqp" <<'EOF' || return 1
import socket, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + 60
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("RabbitMQ did not accept connections within 60 s")
        time.sleep(0.2)
EOF
    # ... and rabbitmqctl works (tests drive outages with it; right after the
    # port opens it may still say the app is starting).
    local deadline=$((SECONDS + 60))
    until rabbitmqctl -n "$RABBITMQ_NODENAME" status >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            rabbitmqctl -n "$RABBITMQ_NODENAME" status  # show why
            return 1
        fi
        sleep 1
    done
}

rmqs_rabbit_stop() {
    local logdest=${1:-} pid=""
    [ -n "${RMQS_RABBIT_DIR:-}" ] || return 0
    rmqs_log "stopping RabbitMQ node $RABBITMQ_NODENAME"
    [ -s "$RMQS_RABBIT_PIDFILE" ] && pid=$(cat "$RMQS_RABBIT_PIDFILE")
    timeout 60 rabbitmqctl -n "$RABBITMQ_NODENAME" stop >/dev/null 2>&1
    if [ -n "$pid" ]; then
        local deadline=$((SECONDS + 15))
        while rmqs_alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
        if rmqs_alive "$pid"; then
            rmqs_log "node still alive: killing beam pid $pid"
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    # The private epmd was started by this node; it leaves once asked.
    timeout 10 epmd -port "$RMQS_RABBIT_EPMD_PORT" -kill >/dev/null 2>&1
    if [ -n "$logdest" ] && [ -d "$RMQS_RABBIT_DIR/log" ]; then
        rm -rf "$logdest"
        mkdir -p "$(dirname "$logdest")"
        cp -r "$RMQS_RABBIT_DIR/log" "$logdest"
        rmqs_log "RabbitMQ node logs copied to $logdest"
    fi
    rm -rf "$RMQS_RABBIT_DIR"
    RMQS_RABBIT_DIR=""
    return 0
}
