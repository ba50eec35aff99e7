#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup/alive run from the EXIT trap
# tests/bench/run.sh - the benchmark of issue 4, one command.
#
#   tests/bench/run.sh                     # quick mode (default): backlog 1,000,000
#   tests/bench/run.sh --backlog 10000000  # the headline backlog figure
#   tests/bench/run.sh --full              # backlog 10,000,000 (same as above)
#   tests/bench/run.sh --only precision,burst   # a subset (see bench.py --help)
#   tests/bench/run.sh --wait-quiet 600      # first wait (<= 600 s) for a quiet machine
#   tests/bench/run.sh --rev HEAD            # benchmark a commit, not the work tree
#   tests/bench/run.sh -- --precision-seconds 5 # after --: options of bench.py
#
# As root (not root: it runs itself again through sudo, see
# tests/lib/as-root.sh), on Debian 12, it:
#   1. installs what it needs if missing (build deps, wrk, python3-pika,
#      rabbitmq-server, sqlite3);
#   2. builds a Release binary in build-bench/ (tests off) and the two C tools
#      tests/bench/bare_publisher.c and tests/bench/bench_consumer.c;
#   3. starts a private RabbitMQ node on free loopback ports (own name, data
#      folder and epmd), stopped at the end whatever happens;
#   4. runs the scenarios (tests/bench/bench.py: precision, burst, ingest,
#      backlog, comparisons), each bounded in time, prints a table
#      (scenario, figure, target, met?) and writes build-bench/bench-results.json;
#   5. cleans up: the node, its data folder, every process it started (by PID).
# Exit status: 0 if the run completed (targets missed are reported, not
# failures), 1 if a scenario could not run.
set -euo pipefail

# shellcheck source=tests/lib/as-root.sh
. "$(dirname "$0")/../lib/as-root.sh"
SELF=$(readlink -f "$0")
ARGS=("$@")

cd "$(dirname "$0")/../.."
ROOT=$PWD

PACKAGES=(build-essential cmake pkg-config libmicrohttpd-dev librabbitmq-dev
          libsqlite3-dev libjansson-dev rabbitmq-server python3 python3-pika
          wrk sqlite3)
PYTHON=/usr/bin/python3
BUILD=$ROOT/build-bench

log() { printf 'bench: %s\n' "$*" >&2; }

usage() {
    sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

BENCH_ARGS=()
BACKLOG=""
REV=""
MODE=quick
while [ $# -gt 0 ]; do
    case "$1" in
        --backlog) [ $# -ge 2 ] || usage; BACKLOG=$2; shift 2 ;;
        --backlog=*) BACKLOG=${1#*=}; shift ;;
        --quick) MODE=quick; shift ;;
        --full) MODE=full; shift ;;
        --only) [ $# -ge 2 ] || usage; BENCH_ARGS+=(--only "$2"); shift 2 ;;
        --wait-quiet) [ $# -ge 2 ] || usage; BENCH_ARGS+=(--wait-quiet "$2"); shift 2 ;;
        --rev) [ $# -ge 2 ] || usage; REV=$2; shift 2 ;;
        --) shift; BENCH_ARGS+=("$@"); break ;;
        -h|--help) usage ;;
        *) log "unknown argument: $1"; usage ;;
    esac
done
if [ -z "$BACKLOG" ]; then
    if [ "$MODE" = full ]; then BACKLOG=10000000; else BACKLOG=1000000; fi
fi
case "$BACKLOG" in ''|*[!0-9]*) log "--backlog wants a number"; exit 2 ;; esac

# After the arguments (so --help needs no root), with the arguments as given.
rmqs_as_root "$SELF" ${ARGS[@]+"${ARGS[@]}"}

START_S=$SECONDS

# --- 1. packages -----------------------------------------------------------
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

# --- 2. build ----------------------------------------------------------------
# The service from the work tree (build-bench/), or with --rev from a commit
# exported with git archive (build-bench/rev-src -> build-bench/rev-build).
if [ -z "$REV" ]; then
    log "building a Release binary in build-bench/ from the work tree"
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRMQS_TESTS=OFF >/dev/null
    cmake --build "$BUILD" -j2 >/dev/null
    SERVICE_BIN=$BUILD/rmq-scheduler
else
    COMMIT=$(git rev-parse --verify "$REV^{commit}")
    log "building a Release binary of $REV ($COMMIT) in build-bench/rev-build/"
    rm -rf "$BUILD/rev-src"
    mkdir -p "$BUILD/rev-src"
    git archive "$COMMIT" | tar -x -C "$BUILD/rev-src"
    cmake -S "$BUILD/rev-src" -B "$BUILD/rev-build" -DCMAKE_BUILD_TYPE=Release \
          -DRMQS_TESTS=OFF >/dev/null
    cmake --build "$BUILD/rev-build" -j2 >/dev/null
    SERVICE_BIN=$BUILD/rev-build/rmq-scheduler
    BENCH_ARGS+=(--rev "$COMMIT")
fi
mkdir -p "$BUILD"
for tool in bare_publisher bench_consumer; do
    gcc -O2 -Wall -Wextra -Werror -o "$BUILD/$tool" "tests/bench/$tool.c" -lrabbitmq
done
gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$BUILD/stall_fsync.so" \
    tests/bench/stall_fsync.c -ldl

# --- 3. a private RabbitMQ node ----------------------------------------------
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

NODE_DIR=$(mktemp -d /tmp/rmqs-bench-rabbit.XXXXXX)
WORK=$(mktemp -d /tmp/rmqs-bench-work.XXXXXX)
echo '[].' > "$NODE_DIR/enabled_plugins"
chown -R rabbitmq:rabbitmq "$NODE_DIR"

export RABBITMQ_NODENAME="rmqs-bench-$$@localhost"
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

alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

BENCH_PID=""
cleanup() {
    local rc=$?
    set +e
    trap - INT TERM
    if [ -n "$BENCH_PID" ] && alive "$BENCH_PID"; then
        # bench.py stops what it started (service, wrk, consumers) on SIGTERM
        kill -TERM "$BENCH_PID" 2>/dev/null
        local d=$((SECONDS + 30))
        while alive "$BENCH_PID" && [ "$SECONDS" -lt "$d" ]; do sleep 0.2; done
        alive "$BENCH_PID" && kill -KILL "$BENCH_PID" 2>/dev/null
    fi
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
    timeout 10 epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1
    # the service logs always (small), the node's logs if something failed
    rm -rf "$BUILD/bench-logs"
    mkdir -p "$BUILD/bench-logs"
    cp "$WORK"/*.log "$BUILD/bench-logs/" 2>/dev/null
    if [ "$rc" -ne 0 ] && [ -d "$NODE_DIR/log" ]; then
        cp -r "$NODE_DIR/log" "$BUILD/bench-logs/rabbitmq-log"
    fi
    log "logs in build-bench/bench-logs"
    rm -rf "$NODE_DIR" "$WORK"
    log "total time $((SECONDS - START_S)) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "starting RabbitMQ node $RABBITMQ_NODENAME on 127.0.0.1:$AMQP_PORT"
rabbitmq-server -detached

"$PYTHON" - "$AMQP_PORT" <<'EOF'
import socket, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + 60
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("bench: RabbitMQ did not accept connections within 60 s")
        time.sleep(0.2)
EOF

# --- 4. the scenarios ----------------------------------------------------------
"$PYTHON" "$ROOT/tests/bench/bench.py" \
    --bin "$SERVICE_BIN" --tools "$BUILD" --work "$WORK" \
    --amqp-port "$AMQP_PORT" --rabbit-pid-file "$NODE_DIR/pid" \
    --backlog "$BACKLOG" --mode "$MODE" --out "$BUILD/bench-results.json" \
    ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"} &
BENCH_PID=$!
set +e
wait "$BENCH_PID"
status=$?
set -e
BENCH_PID=""
exit "$status"
