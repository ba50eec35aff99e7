#!/usr/bin/env bash
# shellcheck disable=SC2317  # stop_node/alive run from the EXIT trap
# tests/run.sh - THE test command of rmq-scheduler.
#
#   tests/run.sh                 # everything
#   tests/run.sh -L unit         # extra arguments go to ctest
#   tests/run.sh -R delivery
#
# It needs root: not run as root, it runs itself again through sudo (same
# arguments, RMQS_* and CTEST_* variables kept; tests/lib/as-root.sh), or
# says what to do when there is no sudo. On a fresh Debian 12 machine it:
#   1. installs the packages the build and the tests need (only those missing);
#   2. builds with ASan + UBSan in build-test/;
#   3. starts private RabbitMQ nodes, one per lane (own names, ports and data
#      folders, on 127.0.0.1 only), and one private PostgreSQL 15 server
#      (likewise), and tells the tests how to reach them through RMQS_TEST_*;
#   4. runs ctest, two tests at a time, each test that needs a broker on a
#      node of its own (see 4.), and always stops the nodes and the server
#      afterwards;
#   5. exits with ctest's status.
set -euo pipefail

# shellcheck source=tests/lib/as-root.sh
. "$(dirname "$0")/lib/as-root.sh"
rmqs_as_root "$0" "$@"

cd "$(dirname "$0")/.."

# shellcheck source=tests/lib/common.sh
. tests/lib/common.sh
RMQS_LOG_PREFIX=run.sh

PACKAGES=(build-essential cmake pkg-config libmicrohttpd-dev librabbitmq-dev
          libsqlite3-dev libjansson-dev libcriterion-dev rabbitmq-server
          python3 python3-pytest python3-pika python3-yaml openssl
          curl prometheus clang libclang-rt-14-dev sudo iproute2 golang-go
          postgresql-15 libpq-dev faketime libglib2.0-dev tzdata python3-croniter
          chromium clang-format-14)
# sudo: test_root_or_sudo.py runs the scripts as a user with sudo; iproute2:
# ss, for the listening sockets of deploy/run-local.sh (test_readme_quickstart.py);
# golang-go: the Go clients of test_payload_too_large.py and test_examples.py;
# postgresql-15 (with psql): the server of the integration.*.postgres tests;
# libpq-dev: the PostgreSQL store; faketime: clock-skew tests;
# libglib2.0-dev + tzdata: the time zones of schedules (tz.c);
# python3-croniter: the reference of the cron differential test (tests/cron/);
# chromium: the browser of the dashboard's tests (tests/browser/, driven by
# Node, see 0.); clang-format-14: the C formatter of the style check
# (tests/style/check.sh).
# The tests use Debian's python3 (which has python3-pytest and python3-pika),
# not whatever python3 comes first on PATH.
PYTHON=$RMQS_PYTHON

# --tsan first: only the ThreadSanitizer stage (see 4.), with the rest of the
# arguments for its ctest. Any other arguments: only the ASan/UBSan stage,
# with those arguments. No arguments: both (RMQS_TEST_TSAN=0 skips TSan).
STAGES="asan tsan"
if [ "${1:-}" = --tsan ]; then
    STAGES=tsan
    shift
elif [ $# -gt 0 ] || [ "${RMQS_TEST_TSAN:-1}" = 0 ]; then
    STAGES=asan
fi

# --- 0. Node.js -------------------------------------------------------------
# The browser tests (playwright-core 1.61, the last line that runs on Node 18)
# and the Node clients of the integration tests (amqplib, node:http) need
# Node.js 18 or later with npm. A Node already on PATH is used as it is; a
# machine without one gets Debian's nodejs and npm (Debian 12: 18.20 and 9.2),
# first, so that a Node that cannot do is said before the long install and
# build, not after.
NODE_MIN=18
if ! command -v node >/dev/null 2>&1; then
    rmqs_log "no Node.js on PATH: installing Debian's nodejs and npm first"
    rmqs_apt_install nodejs npm
fi
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt "$NODE_MIN" ]; then
    rmqs_log "the tests need Node.js $NODE_MIN or later; $(command -v node) is $(node --version 2>&1): put a newer node first on PATH (Debian 12's nodejs package is 18.20)"
    exit 2
fi
if ! command -v npm >/dev/null 2>&1; then
    rmqs_log "$(command -v node) ($(node --version)) has no npm beside it: install npm for that Node (Debian: apt-get install npm, with Debian's nodejs)"
    exit 2
fi
rmqs_log "Node.js $(node --version) at $(command -v node), npm $(npm --version)"

# --- 1. packages ---------------------------------------------------------
rmqs_apt_install "${PACKAGES[@]}"
rmqs_log "packages ready after ${SECONDS} s"

# --- 2. build ------------------------------------------------------------
# ASan + UBSan: the service, the unit tests and the tools, in build-test/.
# TSan: the service alone (Criterion cannot run under TSan), in build-tsan/;
# only the integration tests are registered there.
case " $STAGES " in *" asan "*)
    cmake -S . -B build-test -DRMQS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
          -DPython3_EXECUTABLE="$PYTHON"
    cmake --build build-test -j2 ;;
esac
case " $STAGES " in *" tsan "*)
    cmake -S . -B build-tsan -DRMQS_TSAN=ON -DCMAKE_BUILD_TYPE=Debug \
          -DPython3_EXECUTABLE="$PYTHON"
    cmake --build build-tsan -j2 ;;
esac
# npm packages of the integration tests (amqplib), as locked; again only
# when the lock file is newer than the installed tree.
if [ ! tests/integration/node_modules/.package-lock.json -nt tests/integration/package-lock.json ]; then
    (cd tests/integration && npm ci --no-audit --no-fund)
fi
# And of the browser tests (playwright-core, axe-core), likewise.
if [ ! tests/browser/node_modules/.package-lock.json -nt tests/browser/package-lock.json ]; then
    (cd tests/browser && npm ci --no-audit --no-fund)
fi
# And the contract test's code generator and compiler (openapi-typescript,
# typescript), likewise.
if [ ! tests/contract/node_modules/.package-lock.json -nt tests/contract/package-lock.json ]; then
    (cd tests/contract && npm ci --no-audit --no-fund)
fi
# And the style check's JavaScript formatter (prettier), likewise.
if [ ! tests/style/node_modules/.package-lock.json -nt tests/style/package-lock.json ]; then
    (cd tests/style && npm ci --no-audit --no-fund)
fi

rmqs_log "build and npm packages ready after ${SECONDS} s"

# --- 3. a private RabbitMQ node and a private PostgreSQL server -----------
# Own names, ports (AMQP, distribution, a private epmd; PostgreSQL never on
# 5432) and data folders, on 127.0.0.1 only, so nothing of them outlives the
# run and other servers on the machine are not disturbed; stopped whatever
# happens, their logs kept in build-test/ when the run failed.
# Lanes: ctest runs RMQS_TEST_LANES tests at a time (2 by default: the
# machines this runs on have 2 cores, and most integration tests spend their
# time awaiting a due time or a broker, not computing). A test that uses the
# broker asks ctest for a node (RESOURCE_GROUPS "brokers:1",
# tests/CMakeLists.txt), so no test ever sees another's queues, connections
# or outages (several stop, freeze or restart their node); tests/lib/lane.sh
# gives it that node's environment, written here to $RMQS_TEST_LANES_DIR/N.env.
LANES=${RMQS_TEST_LANES:-2}
LANE_DIRS=() LANE_PIDFILES=() LANE_EPMD=()
export RMQS_TEST_LANES_DIR
RMQS_TEST_LANES_DIR=$(mktemp -d /tmp/rmqs-test-lanes.XXXXXX)
stop_node() {
    local rc=$? i dest="" started=""
    set +e
    # A node whose start failed half-way is in common.sh's globals only.
    for i in "${!LANE_DIRS[@]}"; do
        [ "${LANE_DIRS[$i]}" = "${RMQS_RABBIT_DIR:-}" ] && started=yes
    done
    if [ -n "${RMQS_RABBIT_DIR:-}" ] && [ -z "$started" ]; then
        [ "$rc" -ne 0 ] && dest=build-test/rabbitmq-log-start
        rmqs_rabbit_stop ${dest:+"$dest"}
    fi
    # Each lane's node with its own environment: rabbitmqctl finds a node
    # through the epmd of ERL_EPMD_PORT, and epmd leaves only once its node
    # has stopped (with another lane's port, the stop would miss the node,
    # kill its VM after 15 s and leave its epmd running).
    for i in "${!LANE_DIRS[@]}"; do
        # shellcheck disable=SC1090
        . "$RMQS_TEST_LANES_DIR/$i.env"
        RMQS_RABBIT_DIR=${LANE_DIRS[$i]} RMQS_RABBIT_PIDFILE=${LANE_PIDFILES[$i]}
        RMQS_RABBIT_EPMD_PORT=${LANE_EPMD[$i]}
        dest=""
        [ "$rc" -ne 0 ] && dest=build-test/rabbitmq-log-$i
        rmqs_rabbit_stop ${dest:+"$dest"}
    done
    if [ "$rc" -ne 0 ]; then
        rmqs_pg_stop build-test/postgres.log
    else
        rmqs_pg_stop
    fi
    rm -rf "$RMQS_TEST_LANES_DIR"
    exit "$rc"
}
trap stop_node EXIT
for ((i = 0; i < LANES; i++)); do
    rmqs_rabbit_start "rmqs-test-$$-$i" "$(mktemp -d /tmp/rmqs-test-rabbit.XXXXXX)"
    LANE_DIRS+=("$RMQS_RABBIT_DIR") LANE_PIDFILES+=("$RMQS_RABBIT_PIDFILE")
    LANE_EPMD+=("$RMQS_RABBIT_EPMD_PORT")
    export RMQS_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$RMQS_RABBIT_PORT/"
    export RMQS_TEST_AMQP_PORT=$RMQS_RABBIT_PORT
    export RMQS_TEST_RABBIT_NODE=$RABBITMQ_NODENAME
    for v in RMQS_TEST_AMQP_URL RMQS_TEST_AMQP_PORT RMQS_TEST_RABBIT_NODE \
             RABBITMQ_NODENAME RABBITMQ_NODE_PORT RABBITMQ_DIST_PORT ERL_EPMD_PORT \
             RABBITMQ_MNESIA_BASE RABBITMQ_LOG_BASE RABBITMQ_PID_FILE \
             RABBITMQ_ENABLED_PLUGINS_FILE RABBITMQ_CONFIG_FILE \
             RABBITMQ_ADVANCED_CONFIG_FILE RABBITMQ_CONF_ENV_FILE; do
        printf 'export %s=%q\n' "$v" "${!v}"
    done >"$RMQS_TEST_LANES_DIR/$i.env"
done
# What ctest hands out: one slot on each node.
slots=""
for ((i = 0; i < LANES; i++)); do
    slots+="${slots:+, }{\"id\": \"$i\", \"slots\": 1}"
done
printf '{"version": {"major": 1, "minor": 0}, "local": [{"brokers": [%s]}]}\n' \
    "$slots" >"$RMQS_TEST_LANES_DIR/resources.json"
# A test run outside ctest's lanes (no CTEST_RESOURCE_GROUP_*) uses lane 0.
# shellcheck disable=SC1091
. "$RMQS_TEST_LANES_DIR/0.env"

# The integration.*.postgres tests (RMQS_TEST_STORE=postgres) give each
# service a database of its own on this one server (tests/pylib/pg.py):
# created through the admin's unix socket, used by the service over TCP as
# the test role. The whole server, databases and all, goes at the end.
rmqs_pg_start "$(mktemp -d /tmp/rmqs-test-pg.XXXXXX)"
export RMQS_TEST_PG_PORT=$RMQS_PG_PORT
export RMQS_TEST_PG_USER=$RMQS_PG_USER
export RMQS_TEST_PG_PASSWORD=$RMQS_PG_PASSWORD
export RMQS_TEST_PG_ADMIN="host=$RMQS_PG_SOCKET_DIR port=$RMQS_PG_PORT user=postgres dbname=postgres"
export RMQS_TEST_PG_URL="postgres://$RMQS_PG_USER:$RMQS_PG_PASSWORD@127.0.0.1:$RMQS_PG_PORT"

# --- 4. tests --------------------------------------------------------------
# Stage asan: every test (unit, integration, fuzz, deploy) on the ASan/UBSan
# build. Stage tsan: the integration suite again, against the service built
# with ThreadSanitizer; a report in a service log, or the exit status 66 that
# TSan gives a process that reported, fails the test (tests/integration/
# conftest.py). tests/tsan.supp lists what is suppressed, each with its reason.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS="second_deadlock_stack=1 history_size=4 suppressions=$PWD/tests/tsan.supp"

# The figures the tests measure (lateness, counts, the cron differential
# test's case counts...) are appended by each test to RMQS_TEST_REPORT and
# printed after its stage: ctest shows a passing test's output nowhere else.
report() {
    if [ -s "$1" ]; then
        rmqs_log "what the tests of stage $2 measured ($1):"
        cat "$1"
    fi
}
# Where the time goes: each stage's wall time, its 15 slowest tests (from
# ctest's own "Test #N: name .... Passed 12.34 sec" lines) and the disk
# left (a full disk stops the broker and fails everything after it).
timing() {  # stage log seconds
    rmqs_log "stage $1 took $3 s; its 15 slowest tests:"
    sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) [.*]* *\([A-Za-z][A-Za-z ]*[a-z]\) *\([0-9.]*\) sec$/\3 \1 \2/p' "$2" |
        sort -rn | head -n 15 | sed 's/^/    /'
    rmqs_log "disk free after stage $1: $(df -h --output=avail . | tail -n 1 | tr -d ' ')"
}
# What each failed test said, in a few lines, printed again at the very end
# of the run (where a CI excerpt that keeps the tail sees it; the whole
# output is in ctest-output.txt and Testing/Temporary/LastTest.log): the
# assertion lines of pytest (E ...), of node:test's spec reporter (the
# failed test's cross, its Error line, actual and expected) and of
# Criterion ([----] and [FAIL]).
DIGEST=""
digest() {  # stage build-dir
    local failed log=$2/Testing/Temporary/LastTest.log
    # ctest lists the tests that failed and those that did not run
    # (skipped, disabled): the first only
    failed=$(sed -n '/(Skipped)$/d; /(Disabled)$/d; s/^[[:space:]]*[0-9]* - \([^ ]*\) (.*)$/\1/p' "$2/ctest-output.txt")
    [ -n "$failed" ] && [ -f "$log" ] || return 0
    DIGEST+=$(awk -v stage="$1" -v failed=" $(echo $failed) " '
        /^[0-9]+\/[0-9]+ Test: / { cur = $3; out = 0; n = 0; next }
        /^Output:$/ { out = index(failed, " " cur " ") > 0; if (out) printf "%s, %s:\n", stage, cur; next }
        /^<end of output>$/ { out = 0; next }
        out && n < 14 && /^(E  |FAILED|\[FAIL\]|\[----\] +[^ ]| *✖ | *[A-Za-z]*Error( \[[A-Z_]+\])?: | +(actual|expected): )/ {
            print "    " substr($0, 1, 300); n++ }
    ' "$log")$'\n'
}
# A test that fails runs once more, alone (nothing in the other lane), after
# its stage: many of ours bound time itself (lateness, a rate's spread, a
# takeover within a lease) on a 2-core machine where the other lane's test
# may be a 3-node cluster or 20,000 messages through ASan. One that passes
# alone does not fail the run but is named loudly at the end, with what it
# asserted the first time, for someone to look at; one that fails alone
# too fails the run. RMQS_TEST_RERUN=0: no second run. Of a pytest file,
# only the cases that failed run again (PYTEST_ADDOPTS -k): deploy.docker
# whole is 15 minutes, its one failed case a few.
FLAKY=""
# The pytest cases that failed in one test's output (LastTest.log), as a
# -k expression; nothing when it is not pytest's or an error came outside a
# case (then the whole test runs again).
pytest_cases() {  # LastTest.log test-name
    awk -v t="$2" '
        /^[0-9]+\/[0-9]+ Test: / { cur = $3; sec = ""; next }
        cur != t { next }
        /^=+ FAILURES =+$/ { sec = "failures"; next }
        /^=+ ERRORS =+$/ { whole = 1 }
        /^=+ .* =+$/ { sec = ""; next }
        sec != "failures" { next }
        /^_+ [A-Za-z_][A-Za-z0-9_.]*(\[[^ ]*\])? _+$/ {
            name = $2; sub(/\[.*$/, "", name); sub(/^.*\./, "", name)
            if (!(name in seen)) { seen[name] = 1; list = list (list == "" ? "" : " or ") name }
        }
        END { if (!whole && list != "") print list }
    ' "$1"
}
run_stage() {  # stage build-dir ctest-args...
    local stage=$1 dir=$2 t0=$SECONDS rc first
    shift 2
    export RMQS_TEST_REPORT=$PWD/$dir/test-report.txt
    rm -f "$RMQS_TEST_REPORT"
    ctest --test-dir "$dir" --output-on-failure -j "$LANES" \
        --resource-spec-file "$RMQS_TEST_LANES_DIR/resources.json" "$@" 2>&1 |
        tee "$dir/ctest-output.txt"
    rc=${PIPESTATUS[0]}
    report "$RMQS_TEST_REPORT" "$stage"
    timing "$stage" "$dir/ctest-output.txt" $((SECONDS - t0))
    [ "$rc" = 0 ] && return 0
    digest "$stage" "$dir"
    [ "${RMQS_TEST_RERUN:-1}" = 0 ] && return "$rc"
    first=$(sed -n '/(Skipped)$/d; /(Disabled)$/d; s/^[[:space:]]*[0-9]* - \([^ ]*\) (.*)$/\1/p' "$dir/ctest-output.txt")
    rmqs_log "stage $stage: the tests that failed run again, one at a time:" $first
    cp "$dir/ctest-output.txt" "$dir/ctest-output-first.txt"
    cp "$dir/Testing/Temporary/LastTest.log" "$dir/LastTest-first.log"
    rc=0
    for t in $first; do
        local k again
        k=$(pytest_cases "$dir/LastTest-first.log" "$t")
        [ -n "$k" ] && rmqs_log "stage $stage: $t again: the pytest cases that failed (-k '$k')"
        PYTEST_ADDOPTS=${k:+"-k '$k'"} ctest --test-dir "$dir" --output-on-failure -j 1 \
            -R "^${t//./\\.}\$" \
            --resource-spec-file "$RMQS_TEST_LANES_DIR/resources.json" "$@" 2>&1 |
            tee "$dir/ctest-output.txt"
        again=${PIPESTATUS[0]}
        cat "$dir/ctest-output.txt" >> "$dir/ctest-output-again.txt"
        if [ "$again" != 0 ]; then
            rc=$again
            digest "$stage (alone)" "$dir"
        fi
    done
    [ "$rc" = 0 ] && FLAKY+="$stage: $(echo $first)"$'\n'
    return "$rc"
}
status=0
set +e
case " $STAGES " in *" asan "*)
    rmqs_log "stage asan: ctest in build-test/"
    run_stage asan build-test "$@" || status=1 ;;
esac
case " $STAGES " in *" tsan "*)
    rmqs_log "stage tsan: the integration tests against the TSan build in build-tsan/"
    run_stage tsan build-tsan -L integration "$@" || status=1 ;;
esac
set -e
rmqs_log "tests/run.sh took ${SECONDS} s in all"
if [ -n "${DIGEST//$'\n'/}" ]; then
    rmqs_log "what the failed tests said (their whole output is above):"
    printf '%s' "$DIGEST"
fi
if [ -n "$FLAKY" ]; then
    rmqs_log "FLAKY: failed beside another test, passed alone (what they said" \
        "the first time is above; they do not fail this run):"
    printf '    %s' "$FLAKY"
fi
exit "$status"
