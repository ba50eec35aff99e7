# shellcheck shell=bash
# deploy/lib/apt-install.sh - install Debian packages for our scripts without
# leaving a system service running that nobody asked for.
#
# Sourced by deploy/run-local.sh and tests/lib/common.sh (the only ways this
# repository installs packages on the user's machine):
#
#   rmqs_apt_missing PKG...   prints the packages that are not installed
#   rmqs_apt_install PKG...   installs those that are missing; as root, or
#                             set RMQS_APT_SUDO=sudo first
#
# Why: on a machine with systemd, `apt-get install rabbitmq-server` starts
# Debian's own RabbitMQ on every interface (5672, 25672, 4369), postgresql-15
# creates and starts a cluster on 5432, docker.io a system dockerd. Our
# scripts start private servers of their own on loopback and stop them at the
# end; a daemon that the install started would outlive them, answer on the
# ports the scripts probe, and run at every boot. So, for the length of the
# install:
#   - /usr/sbin/policy-rc.d answers 101 ("not now"), unless the machine has a
#     policy of its own (a container image usually does);
#   - postgresql-common creates no main cluster (a createcluster.d file);
#   - on systemd, units that the install enabled at boot are disabled again.
# Both files are removed afterwards, whatever happens. apt's own output goes
# to a log that is printed when a step fails, so the user sees apt's reason.
# Messages go through rmqs_apt_log, which a caller may redefine.

RMQS_APT_SUDO=${RMQS_APT_SUDO:-}
RMQS_APT_POLICY=/usr/sbin/policy-rc.d
RMQS_APT_PGCONF=/etc/postgresql-common/createcluster.d/zz-rmq-scheduler-install.conf

rmqs_apt_log() { printf 'apt-install: %s\n' "$*" >&2; }

rmqs_apt_missing() {
    local p status
    for p in "$@"; do
        status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
        [ "${status:0:2}" = "ii" ] || printf '%s\n' "$p"
    done
}

# What the running systemd enables at boot now (nothing without systemd).
rmqs_apt_enabled_units() {
    [ -d /run/systemd/system ] || return 0
    systemctl list-unit-files --state=enabled --no-legend --no-pager 2>/dev/null |
        awk '{ print $1 }' | sort
}

# A command as root: directly, or through $RMQS_APT_SUDO.
rmqs_apt_root() {
    if [ -n "$RMQS_APT_SUDO" ]; then "$RMQS_APT_SUDO" "$@"; else "$@"; fi
}

rmqs_apt_install() {
    local missing log rc=0 own_policy="" own_pgconf="" before after unit kept
    mapfile -t missing < <(rmqs_apt_missing "$@")
    [ ${#missing[@]} -gt 0 ] || return 0
    rmqs_apt_log "installing ${missing[*]}"
    log=$(mktemp /tmp/rmqs-apt.XXXXXX)
    if [ ! -e "$RMQS_APT_POLICY" ]; then
        rmqs_apt_root sh -c "printf '#!/bin/sh\n# rmq-scheduler: no service starts during its install\nexit 101\n' >$RMQS_APT_POLICY && chmod 755 $RMQS_APT_POLICY" &&
            own_policy=1
    fi
    if [ ! -e "$RMQS_APT_PGCONF" ]; then
        rmqs_apt_root sh -c "mkdir -p ${RMQS_APT_PGCONF%/*} && echo 'create_main_cluster = false' >$RMQS_APT_PGCONF" &&
            own_pgconf=1
    fi
    before=$(rmqs_apt_enabled_units)
    if ! rmqs_apt_root env DEBIAN_FRONTEND=noninteractive timeout 900 \
            apt-get update >"$log" 2>&1; then
        rc=1
        rmqs_apt_log "apt-get update failed:"
    elif ! rmqs_apt_root env DEBIAN_FRONTEND=noninteractive timeout 1200 \
            apt-get install -y --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
        rc=1
        rmqs_apt_log "apt-get install failed:"
    fi
    [ "$rc" -eq 0 ] || tail -n 40 "$log" >&2
    after=$(rmqs_apt_enabled_units)
    for unit in $(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after")); do
        rmqs_apt_log "the install enabled $unit at boot: disabling and stopping it"
        rmqs_apt_root systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
    [ -n "$own_policy" ] && rmqs_apt_root rm -f "$RMQS_APT_POLICY"
    [ -n "$own_pgconf" ] && rmqs_apt_root rm -f "$RMQS_APT_PGCONF"
    if [ "$rc" -eq 0 ]; then
        rmqs_apt_log "installed ${#missing[@]} packages (and what they depend on)"
        # invoke-rc.d's refusals (deb-systemd-invoke's on systemd) name no
        # package: the one being set up when each came is the one kept from
        # starting.
        kept=$(awk '/^Setting up / { pkg = $3 }
                    /policy-rc.d denied execution of (start|restart)|policy-rc.d returned 101, not running .(start|restart)/ {
                        if (pkg != "" && !seen[pkg]++) printf "%s%s", (n++ ? " " : ""), pkg }' "$log")
        [ -z "$kept" ] || rmqs_apt_log "kept from starting by policy-rc.d: $kept"
    fi
    rm -f "$log"
    return "$rc"
}
