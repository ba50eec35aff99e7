#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup runs from the EXIT trap
# tests/bench/run.sh - the benchmark of issue 4, one command.
#
#   tests/bench/run.sh                     # quick mode (default): backlog 1,000,000
#   tests/bench/run.sh --backlog 10000000  # the headline backlog figure
#   tests/bench/run.sh --full              # backlog 10,000,000 (same as above)
#   tests/bench/run.sh --only precision,burst   # a subset (see bench.py --help)
#   tests/bench/run.sh --only stores           # SQLite vs PostgreSQL 1 and 3 instances
#   tests/bench/run.sh --only schedules        # 100,000 schedules firing at one minute
#   tests/bench/run.sh --only poison           # a poison job in a burst of 20,000
#   tests/bench/run.sh --only flow             # limits, fairness, shared limits (issue 23)
#   tests/bench/run.sh --only retention        # purge and table size at a steady load, PostgreSQL
#   tests/bench/run.sh --only clients          # client libraries vs one request per job, vs BullMQ
#   tests/bench/run.sh --only backlog --store postgres  # the backlog on PostgreSQL (issue 24)
#   tests/bench/run.sh --wait-quiet 600      # first wait (<= 600 s) for a quiet machine
#   tests/bench/run.sh --rev HEAD            # benchmark a commit, not the work tree
#   tests/bench/run.sh -- --precision-seconds 5 # after --: options of bench.py
#
# As root (not root: it runs itself again through sudo, see
# tests/lib/as-root.sh), on Debian 12, it:
#   1. installs what it needs if missing (build deps, wrk, python3-pika,
#      rabbitmq-server, sqlite3; with --only clients also redis-server, and
#      golang-go and nodejs if there is no go or node, then `npm ci` of the
#      Node driver's BullMQ in tests/bench/clients/node/);
#   2. builds a Release binary in build-bench/ (tests off) and the C tools
#      tests/bench/bare_publisher.c and tests/bench/bench_consumer.c, and
#      runs tests/bench/cron_next.c (ns per next-fire computation); with
#      --only clients also the Go driver (tests/bench/clients/go, offline);
#   3. starts a private RabbitMQ node on free loopback ports (own name, data
#      folder and epmd) and a private PostgreSQL 15 server (fsync on,
#      synchronous_commit on, pg_stat_statements preloaded; for the stores
#      scenario), both stopped at the end whatever happens;
#   4. runs the scenarios (tests/bench/bench.py: precision, burst, ingest,
#      backlog, comparisons; tests/bench/stores.py: stores, SQLite against
#      PostgreSQL with 1 and 3 instances; tests/bench/schedules.py: schedules,
#      recurring schedules at scale; tests/bench/retention.py: retention, the
#      purge at a steady load on PostgreSQL), each bounded in time, prints a table
#      (scenario, figure, target, met?) and writes build-bench/bench-results.json;
#   5. cleans up: the node, its data folder, every process it started (by PID).
# Package install, free ports and the node are tests/lib/common.sh's, as
# for tests/run.sh; bench.py shares tests/pylib with the other harnesses.
# Exit status: 0 if the run completed (targets missed are reported, not
# failures), 1 if a scenario could not run.
set -euo pipefail

# shellcheck source=tests/lib/as-root.sh
. "$(dirname "$0")/../lib/as-root.sh"
SELF=$(readlink -f "$0")
ARGS=("$@")

cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=tests/lib/common.sh
. tests/lib/common.sh
RMQS_LOG_PREFIX=bench

PACKAGES=(build-essential cmake pkg-config libmicrohttpd-dev librabbitmq-dev
          libsqlite3-dev libjansson-dev libglib2.0-dev rabbitmq-server python3 python3-pika
          wrk sqlite3 postgresql-15 libpq-dev)
PYTHON=$RMQS_PYTHON
BUILD=$ROOT/build-bench

usage() {
    sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

BENCH_ARGS=()
ONLY=""
BACKLOG=""
REV=""
MODE=quick
while [ $# -gt 0 ]; do
    case "$1" in
        --backlog) [ $# -ge 2 ] || usage; BACKLOG=$2; shift 2 ;;
        --backlog=*) BACKLOG=${1#*=}; shift ;;
        --quick) MODE=quick; shift ;;
        --full) MODE=full; shift ;;
        --only) [ $# -ge 2 ] || usage; ONLY=$2; BENCH_ARGS+=(--only "$2"); shift 2 ;;
        --store) [ $# -ge 2 ] || usage; BENCH_ARGS+=(--backlog-store "$2"); shift 2 ;;
        --wait-quiet) [ $# -ge 2 ] || usage; BENCH_ARGS+=(--wait-quiet "$2"); shift 2 ;;
        --rev) [ $# -ge 2 ] || usage; REV=$2; shift 2 ;;
        --) shift; BENCH_ARGS+=("$@"); break ;;
        -h|--help) usage ;;
        *) rmqs_log "unknown argument: $1"; usage ;;
    esac
done
if [ -z "$BACKLOG" ]; then
    if [ "$MODE" = full ]; then BACKLOG=10000000; else BACKLOG=1000000; fi
fi
case "$BACKLOG" in ''|*[!0-9]*) rmqs_log "--backlog wants a number"; exit 2 ;; esac

# After the arguments (so --help needs no root), with the arguments as given.
rmqs_as_root "$SELF" ${ARGS[@]+"${ARGS[@]}"}

START_S=$SECONDS

# --- 1. packages -----------------------------------------------------------
# The clients scenario (issue 26, tests/bench/clients.py): Redis for BullMQ,
# and the toolchains of its drivers when the machine has none (Debian 12's
# golang-go is 1.19 and its nodejs 18, what the clients need).
CLIENTS=""
case ",$ONLY," in *,clients,*) CLIENTS=1 ;; esac
if [ -n "$CLIENTS" ]; then
    PACKAGES+=(redis-server)
    command -v go >/dev/null || PACKAGES+=(golang-go)
    command -v node >/dev/null || PACKAGES+=(nodejs)
    command -v npm >/dev/null || PACKAGES+=(npm)
fi
rmqs_apt_install "${PACKAGES[@]}"

# --- 2. build ----------------------------------------------------------------
# The service from the work tree (build-bench/), or with --rev from a commit
# exported with git archive (build-bench/rev-src -> build-bench/rev-build).
if [ -z "$REV" ]; then
    rmqs_log "building a Release binary in build-bench/ from the work tree"
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRMQS_TESTS=OFF >/dev/null
    cmake --build "$BUILD" -j2 >/dev/null
    SERVICE_BIN=$BUILD/rmq-scheduler
else
    COMMIT=$(git rev-parse --verify "$REV^{commit}")
    rmqs_log "building a Release binary of $REV ($COMMIT) in build-bench/rev-build/"
    # Both from scratch: git archive stamps every file with the commit's
    # time, so objects built from a later-built older commit looked newer
    # than the sources and make linked them with the new ones.
    rm -rf "$BUILD/rev-src" "$BUILD/rev-build"
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
# The cost of one next-fire computation (issue 13): the service's own cron.c
# and tz.c at -O2, no broker needed; its figures go to the log.
# shellcheck disable=SC2046  # pkg-config's flags are words
gcc -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -Iservice/util -Iservice/schedules -o "$BUILD/cron_next" \
    tests/bench/cron_next.c service/schedules/cron.c service/schedules/tz.c service/util/timeutil.c service/util/rmqs.c \
    $(pkg-config --cflags --libs glib-2.0)
rmqs_log "cron_next: ns per next-fire computation (median of 7 runs)"
"$BUILD/cron_next" 20000 7
if [ -n "$CLIENTS" ]; then
    # The Node driver's packages exactly as locked (BullMQ, ioredis; the
    # library itself is a file: link to clients/node), no install scripts;
    # the Go driver with the module of clients/go through its go.mod's
    # replace directive: standard library only, no network.
    rmqs_log "clients: npm ci in tests/bench/clients/node, go build of tests/bench/clients/go"
    (cd tests/bench/clients/node && timeout 900 npm ci --ignore-scripts --no-audit --no-fund \
        --loglevel=error >/dev/null)
    (cd tests/bench/clients/go && GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 \
        GOCACHE="$BUILD/go-cache" timeout 600 go build -o "$BUILD/clients_go_driver" .)
fi

# --- 3. a work folder and a private RabbitMQ node (tests/lib/common.sh) ---
WORK=$(mktemp -d /tmp/rmqs-bench-work.XXXXXX)

BENCH_PID=""
cleanup() {
    local rc=$?
    set +e
    trap - INT TERM
    if [ -n "$BENCH_PID" ] && rmqs_alive "$BENCH_PID"; then
        # bench.py stops what it started (service, wrk, consumers) on SIGTERM
        kill -TERM "$BENCH_PID" 2>/dev/null
        local d=$((SECONDS + 30))
        while rmqs_alive "$BENCH_PID" && [ "$SECONDS" -lt "$d" ]; do sleep 0.2; done
        rmqs_alive "$BENCH_PID" && kill -KILL "$BENCH_PID" 2>/dev/null
    fi
    # the service logs always (small), the node's logs if something failed
    rm -rf "$BUILD/bench-logs"
    mkdir -p "$BUILD/bench-logs"
    cp "$WORK"/*.log "$BUILD/bench-logs/" 2>/dev/null
    if [ "$rc" -ne 0 ]; then
        rmqs_rabbit_stop "$BUILD/bench-logs/rabbitmq-log"
        rmqs_pg_stop "$BUILD/bench-logs/postgres.log"
    else
        rmqs_rabbit_stop
        rmqs_pg_stop
    fi
    rmqs_log "logs in build-bench/bench-logs"
    rm -rf "$WORK"
    rmqs_log "total time $((SECONDS - START_S)) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rmqs_rabbit_start "rmqs-bench-$$" "$(mktemp -d /tmp/rmqs-bench-rabbit.XXXXXX)"

# The stores scenario's PostgreSQL server (tests/lib/common.sh): commits as
# in production (fsync, synchronous_commit on: the defaults, written out),
# pg_stat_statements loaded at start (a restart), a database per column
# created through tests/pylib/pg.py, which reads the RMQS_TEST_PG_* names.
rmqs_pg_start "$(mktemp -d /tmp/rmqs-bench-pg.XXXXXX)"
printf '%s\n' "synchronous_commit = on" "shared_preload_libraries = 'pg_stat_statements'" \
    "pg_stat_statements.track = top" >>"$RMQS_PG_DIR/data/postgresql.conf"
(cd "$RMQS_PG_DIR" && runuser -u postgres -- "$RMQS_PG_BIN/pg_ctl" -D "$RMQS_PG_DIR/data" \
    -l "$RMQS_PG_DIR/postgres.log" -w -t 60 restart >/dev/null)
"$RMQS_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$RMQS_PG_SOCKET_DIR" -p "$RMQS_PG_PORT" \
    -U postgres -d postgres -c "CREATE EXTENSION pg_stat_statements"
export RMQS_TEST_PG_USER=$RMQS_PG_USER RMQS_TEST_PG_PASSWORD=$RMQS_PG_PASSWORD
export RMQS_TEST_PG_ADMIN="host=$RMQS_PG_SOCKET_DIR port=$RMQS_PG_PORT user=postgres dbname=postgres"
export RMQS_TEST_PG_URL="postgres://$RMQS_PG_USER:$RMQS_PG_PASSWORD@127.0.0.1:$RMQS_PG_PORT"
export RMQS_BENCH_PG_PIDFILE=$RMQS_PG_DIR/data/postmaster.pid

# --- 4. the scenarios ----------------------------------------------------------
"$PYTHON" "$ROOT/tests/bench/bench.py" \
    --bin "$SERVICE_BIN" --tools "$BUILD" --work "$WORK" \
    --amqp-port "$RMQS_RABBIT_PORT" --rabbit-pid-file "$RMQS_RABBIT_PIDFILE" \
    --backlog "$BACKLOG" --mode "$MODE" --out "$BUILD/bench-results.json" \
    ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"} &
BENCH_PID=$!
set +e
wait "$BENCH_PID"
status=$?
set -e
BENCH_PID=""
exit "$status"
