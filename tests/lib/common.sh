# shellcheck shell=bash
# tests/lib/common.sh - what every test script of this repo does alike:
# install the Debian packages it needs, find free loopback ports, and run a
# private RabbitMQ node and a private PostgreSQL 15 server that nothing else
# on the machine sees.
#
# tests/run.sh, tests/bench/run.sh and tests/deploy/run.sh source it (after
# tests/lib/as-root.sh); a script sets RMQS_LOG_PREFIX so messages say who
# speaks. (The Python harnesses share tests/pylib the same way.)
#
#   rmqs_apt_install PKG...      apt-get install the missing ones (bounded:
#                                update 15 min, install 20 min), starting no
#                                daemon (deploy/lib/apt-install.sh)
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
#
#   rmqs_pg_start DIR            a PostgreSQL 15 server with its data in DIR
#   rmqs_pg_stop [LOGDEST]       stop it; copy its log to LOGDEST if given;
#                                remove DIR
#
# The server: initdb as user postgres (initdb and postgres refuse root),
# TCP on 127.0.0.1 at a free port (never 5432, which may be someone else's),
# its unix socket in DIR, fsync on (the tests measure real commits). Local
# socket connections as postgres are trusted (the admin: CREATE DATABASE per
# test service); TCP needs a scram-sha-256 password, and the one login role
# RMQS_PG_USER/RMQS_PG_PASSWORD is what the service uses. rmqs_pg_start sets
# RMQS_PG_PORT, RMQS_PG_SOCKET_DIR, RMQS_PG_USER, RMQS_PG_PASSWORD and
# RMQS_PG_START_S (seconds from initdb to accepting the role's login).

RMQS_PYTHON=/usr/bin/python3  # Debian's, which has python3-pika and pytest

rmqs_log() { printf '%s: %s\n' "${RMQS_LOG_PREFIX:-tests}" "$*" >&2; }

# The install itself is deploy/lib/apt-install.sh's, shared with
# deploy/run-local.sh: no daemon that a package would start is left running.
# shellcheck source=deploy/lib/apt-install.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../deploy/lib/apt-install.sh"
rmqs_apt_log() { rmqs_log "$@"; }

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

RMQS_PG_BIN=/usr/lib/postgresql/15/bin

rmqs_pg_start() {
    local dir=$1 port t0
    read -r port < <(rmqs_free_ports 1)
    t0=$(date +%s.%N)
    mkdir -p "$dir"
    chown postgres:postgres "$dir"
    chmod 700 "$dir"
    RMQS_PG_DIR=$dir
    RMQS_PG_PORT=$port
    RMQS_PG_SOCKET_DIR=$dir
    RMQS_PG_USER=rmqs_test
    RMQS_PG_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    rmqs_log "starting PostgreSQL 15 on 127.0.0.1:$port (data in $dir/data)"
    # cd: runuser keeps the caller's folder, which postgres may not read
    (cd "$dir" && runuser -u postgres -- "$RMQS_PG_BIN/initdb" -D "$dir/data" \
        -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --no-instructions >"$dir/initdb.log" 2>&1) || {
        cat "$dir/initdb.log" >&2
        return 1
    }
    printf '%s\n' "port = $port" "listen_addresses = '127.0.0.1'" \
        "unix_socket_directories = '$dir'" "max_connections = 400" \
        "fsync = on" >>"$dir/data/postgresql.conf"
    (cd "$dir" && runuser -u postgres -- "$RMQS_PG_BIN/pg_ctl" -D "$dir/data" \
        -l "$dir/postgres.log" -w -t 60 start >/dev/null) || {
        cat "$dir/postgres.log" >&2
        return 1
    }
    "$RMQS_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres \
        -d postgres -c "CREATE ROLE $RMQS_PG_USER LOGIN PASSWORD '$RMQS_PG_PASSWORD'" \
        || return 1
    # the service's own way in: TCP with the role's password (scram)
    PGPASSWORD=$RMQS_PG_PASSWORD "$RMQS_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$port" -U "$RMQS_PG_USER" -d postgres -c "SELECT 1" \
        >/dev/null || return 1
    RMQS_PG_START_S=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    rmqs_log "PostgreSQL 15 accepts $RMQS_PG_USER on 127.0.0.1:$port (${RMQS_PG_START_S} s from initdb)"
}

rmqs_pg_stop() {
    local logdest=${1:-} pid=""
    [ -n "${RMQS_PG_DIR:-}" ] || return 0
    rmqs_log "stopping PostgreSQL on 127.0.0.1:$RMQS_PG_PORT"
    [ -s "$RMQS_PG_DIR/data/postmaster.pid" ] && pid=$(head -n1 "$RMQS_PG_DIR/data/postmaster.pid")
    (cd "$RMQS_PG_DIR" && timeout 60 runuser -u postgres -- "$RMQS_PG_BIN/pg_ctl" \
        -D "$RMQS_PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1)
    if [ -n "$pid" ] && rmqs_alive "$pid"; then
        rmqs_log "postmaster still alive: killing pid $pid"
        kill -KILL "$pid" 2>/dev/null
    fi
    if [ -n "$logdest" ] && [ -f "$RMQS_PG_DIR/postgres.log" ]; then
        mkdir -p "$(dirname "$logdest")"
        cp "$RMQS_PG_DIR/postgres.log" "$logdest"
        rmqs_log "PostgreSQL log copied to $logdest"
    fi
    rm -rf "$RMQS_PG_DIR"
    RMQS_PG_DIR=""
    return 0
}
