# shellcheck shell=bash
# tests/lib/as-root.sh - root for the test scripts, the same way everywhere.
#
# tests/run.sh, tests/bench/run.sh and tests/deploy/run.sh install packages
# and start a RabbitMQ node (or dockerd), so they need root. A fresh Debian 12
# root shell has no sudo, and a developer's account usually has sudo but is
# not root: the README's `tests/run.sh` must work as written in both.
#
#   . "$(dirname "$0")/lib/as-root.sh"     # before any cd
#   rmqs_as_root "$0" "$@"
#
# As root it returns. Otherwise, when sudo exists, it re-executes the script
# through sudo with the same arguments, keeping the variables the scripts
# read (RMQS_*, CTEST_*, DOCKER); sudo asks for a password as usual. Without
# sudo it says what to do and exits 2.

# Variables of the caller's environment that the re-executed script keeps.
rmqs_kept_env() {
    compgen -e | grep -E '^(RMQS_|CTEST_|DOCKER$)' | paste -sd, -
}

rmqs_as_root() {
    local script=$1
    shift
    [ "$(id -u)" -eq 0 ] && return 0
    local name keep
    name=${script#"${PWD}"/}
    if ! command -v sudo >/dev/null 2>&1; then
        printf '%s: needs root (it installs packages and starts services); this user (uid %s) is not root and there is no sudo: run it from a root shell (su -), or install sudo\n' \
            "$name" "$(id -u)" >&2
        exit 2
    fi
    printf '%s: not root: running it again with sudo\n' "$name" >&2
    script=$(readlink -f "$script")
    keep=$(rmqs_kept_env)
    if [ -n "$keep" ]; then
        exec sudo --preserve-env="$keep" -- bash "$script" "$@"
    fi
    exec sudo -- bash "$script" "$@"
}
