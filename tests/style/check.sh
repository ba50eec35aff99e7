#!/usr/bin/env bash
# tests/style/check.sh - the code is as its formatters write it: C as
# clang-format 14 does with .clang-format, JavaScript (and tests/contract's
# TypeScript fixtures, clients/node's types) as prettier does with
# .prettierrc.json (the version locked in tests/style/package-lock.json,
# installed by tests/run.sh), Go as gofmt does.
# Formatting is then nobody's review comment and no diff mixes it with a
# change.
#
#   tests/style/check.sh          # lists every file that differs; exit 1 if any
#   tests/style/check.sh --fix    # rewrites them in place
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

CLANG_FORMAT=clang-format-14  # another major version formats differently
PRETTIER=tests/style/node_modules/.bin/prettier
fix=0
[ "${1:-}" = --fix ] && fix=1

command -v "$CLANG_FORMAT" >/dev/null || {
    echo "check.sh: $CLANG_FORMAT is missing (apt-get install clang-format-14)" >&2
    exit 2
}
command -v gofmt >/dev/null || {
    echo "check.sh: gofmt is missing (apt-get install golang-go)" >&2
    exit 2
}
[ -x "$PRETTIER" ] || {
    echo "check.sh: $PRETTIER is missing (cd tests/style && npm ci)" >&2
    exit 2
}

# Our own sources only: no build trees, no node_modules.
mapfile -t c_files < <(find service tests/unit tests/fuzz tests/bench tests/cron \
    tests/integration -name node_modules -prune -o -type f -name '*.[ch]' -print | sort)
mapfile -t js_files < <(find ui tests/browser tests/integration tests/contract api/examples clients/node \
    -name node_modules -prune -o -type f \( -name '*.js' -o -name '*.mjs' -o -name '*.ts' \) -print | sort)

mapfile -t go_files < <(find clients/go api/examples tests -name node_modules -prune -o \
    -type f -name '*.go' -print | sort)

status=0
if [ "$fix" = 1 ]; then
    "$CLANG_FORMAT" -i "${c_files[@]}" || status=1
    "$PRETTIER" --log-level warn --write "${js_files[@]}" || status=1
    gofmt -w "${go_files[@]}" || status=1
    exit "$status"
fi
bad=0
for f in "${c_files[@]}"; do
    if ! "$CLANG_FORMAT" --dry-run --Werror "$f" 2>/dev/null; then
        echo "not formatted (C): $f" >&2
        "$CLANG_FORMAT" "$f" | diff -u "$f" - | head -n 20 >&2
        bad=$((bad + 1))
    fi
done
if ! "$PRETTIER" --log-level warn --check "${js_files[@]}"; then
    bad=$((bad + 1))
fi
if unformatted=$(gofmt -l "${go_files[@]}") && [ -n "$unformatted" ]; then
    echo "not formatted (Go): $unformatted" >&2
    bad=$((bad + 1))
fi
# One way to name a log line's module (service/util/log.h): each file
# defines MOD once and passes it; a string at a call is a second way.
if grep -rnE --include='*.c' --include='*.h' \
        'log_(debug|info|warn|error)\([[:space:]]*"|#define MODULE\b' service >&2; then
    echo "check.sh: a log module written at the call (use MOD, see log.h)" >&2
    bad=$((bad + 1))
fi
echo "check.sh: ${#c_files[@]} C files, ${#js_files[@]} JavaScript files, ${#go_files[@]} Go files; $bad not formatted"
[ "$bad" = 0 ] || { echo "check.sh: tests/style/check.sh --fix formats them" >&2; exit 1; }
