#!/usr/bin/env bash
# run_fuzzer.sh - one bounded libFuzzer run, as ctest's fuzz.* tests do it.
#
#   run_fuzzer.sh NAME FUZZER SEED_DIR WORK_DIR [libFuzzer options...]
#
# Copies the seed corpus (tests/fuzz/corpus/NAME, read only) to
# WORK_DIR/corpus in the build tree, so whatever libFuzzer adds stays out of
# the repository, then fuzzes for ${RMQS_FUZZ_SECONDS:-60} seconds (at most
# ${RMQS_FUZZ_MAX_SECONDS}, when the test sets it). Exits
# with libFuzzer's status: non-zero on a crash, a sanitizer report, a leak
# or a timeout; the input that did it is in WORK_DIR/artifacts (reproduce
# with: FUZZER WORK_DIR/artifacts/crash-...). Prints the tail of the log
# (the full log is WORK_DIR/fuzz.log) and one summary line with the number
# of executions.
set -uo pipefail

if [ $# -lt 4 ]; then
    echo "usage: $0 NAME FUZZER SEED_DIR WORK_DIR [libFuzzer options...]" >&2
    exit 2
fi
name=$1 fuzzer=$2 seeds=$3 work=$4
shift 4
seconds=${RMQS_FUZZ_SECONDS:-60}
if [ -n "${RMQS_FUZZ_MAX_SECONDS:-}" ] && [ "$seconds" -gt "$RMQS_FUZZ_MAX_SECONDS" ]; then
    seconds=$RMQS_FUZZ_MAX_SECONDS
fi

rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts" || exit 1
cp "$seeds"/* "$work/corpus/" || exit 1
nseeds=$(find "$work/corpus" -type f | wc -l)

echo "fuzz.$name: $fuzzer for $seconds s from $nseeds seed inputs"
"$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -timeout=25 \
    -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?

if [ "$rc" -eq 0 ]; then
    tail -n 12 "$work/fuzz.log"
else
    tail -n 120 "$work/fuzz.log"
    echo "fuzz.$name: FAILED (libFuzzer exit $rc); inputs in $work/artifacts:"
    ls -l "$work/artifacts"
fi
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -n 1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/fuzz.log" | tail -n 1)
ncorpus=$(find "$work/corpus" -type f | wc -l)
echo "fuzz.$name: ${execs:-?} executions in $seconds s (${rate:-?}/s), corpus $nseeds -> $ncorpus inputs, exit $rc"
exit "$rc"
