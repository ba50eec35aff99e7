#!/usr/bin/env bash
# tests/deploy/make-base-image.sh - make the base image debian:bookworm-slim
# locally when no container registry can be reached.
#
#   tests/deploy/make-base-image.sh [TAG]     # default TAG: debian:bookworm-slim
#
# Does nothing when TAG already exists. Otherwise builds a minimal Debian 12
# root file system with debootstrap (--variant=minbase) from the Debian mirror
# this machine's apt already uses (read from /etc/apt/sources.list.d/*.sources,
# *.list, then /etc/apt/sources.list), trims it like the official slim image
# (no documentation, man pages or locales, no apt lists or cached packages),
# and imports it with `docker import`. About a minute; the image is kept
# cached for later runs. Needs root, debootstrap and a running Docker engine.
set -euo pipefail

TAG=${1:-debian:bookworm-slim}
SUITE=bookworm

log() { printf 'make-base-image: %s\n' "$*" >&2; }

if docker image inspect "$TAG" >/dev/null 2>&1; then
    log "$TAG exists"
    exit 0
fi

# The first Debian mirror (not the security archive) that apt uses for $SUITE.
find_mirror() {
    local f
    shopt -s nullglob
    # deb822 files: a stanza's URIs applies to its Suites.
    for f in /etc/apt/sources.list.d/*.sources; do
        awk -v suite="$SUITE" '
            function flush() {
                if (uris != "" && types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " "))
                    { split(uris, u, " "); print u[1]; found = 1; exit }
                uris = ""; suites = ""; types = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            tolower($1) == "uris:"   { $1 = ""; uris = $0; sub(/^ +/, "", uris) }
            tolower($1) == "suites:" { $1 = ""; suites = $0; sub(/^ +/, "", suites) }
            tolower($1) == "types:"  { $1 = ""; types = $0; sub(/^ +/, "", types) }
            END { if (!found) flush() }
        ' "$f"
    done
    # one-line format: deb [options] URI SUITE COMPONENTS...
    for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
        [ -f "$f" ] || continue
        awk -v suite="$SUITE" '
            $1 != "deb" { next }
            { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } }
            $(i + 1) == suite { print $i; exit }
        ' "$f"
    done
}

MIRROR=$(find_mirror | head -n1)
if [ -z "$MIRROR" ]; then
    log "no Debian mirror for $SUITE found in /etc/apt/sources.list{,.d}"
    exit 1
fi
command -v debootstrap >/dev/null || {
    log "debootstrap is missing: apt-get install -y debootstrap"
    exit 1
}

WORK=$(mktemp -d /tmp/rmqs-base-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOTFS=$WORK/rootfs

log "debootstrap --variant=minbase $SUITE from $MIRROR (about a minute)"
if ! timeout 900 debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" \
        >"$WORK/debootstrap.log" 2>&1; then
    tail -n 30 "$WORK/debootstrap.log" >&2
    [ -f "$ROOTFS/debootstrap/debootstrap.log" ] &&
        tail -n 30 "$ROOTFS/debootstrap/debootstrap.log" >&2
    log "debootstrap failed"
    exit 1
fi

# apt inside the image uses the same archives as this machine: the main
# mirror for $SUITE and $SUITE-updates, plus the security archive if this
# machine has one (deb822, like the official image).
security=$(grep -hs -A3 -E '^URIs:.*-security' /etc/apt/sources.list.d/*.sources \
           | awk 'tolower($1) == "uris:" { print $2; exit }')
[ -n "$security" ] || security=$(awk '$1 == "deb" && $3 ~ /-security$/ { print $2; exit }' \
                                 /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
rm -f "$ROOTFS/etc/apt/sources.list"
{
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' \
        "$MIRROR" "$SUITE" "$SUITE"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if [ -n "$security" ]; then
        printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' \
            "$security" "$SUITE"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
} >"$ROOTFS/etc/apt/sources.list.d/debian.sources"

# Trim like the official slim image: later installs skip docs, man pages and
# locales, and apt keeps neither package lists nor downloaded packages.
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
cat >"$ROOTFS/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$ROOTFS/etc/apt/apt.conf.d/docker-no-languages"
find "$ROOTFS/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$ROOTFS/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/usr/share/locale/* \
       "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb \
       "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log "$ROOTFS"/var/log/apt/* \
       "$ROOTFS"/debootstrap
# The host's name and resolver are bind-mounted by the engine at run time.
: >"$ROOTFS/etc/hostname"
: >"$ROOTFS/etc/resolv.conf"

log "importing as $TAG"
tar --numeric-owner -C "$ROOTFS" -c . |
    docker import -c 'CMD ["bash"]' -m "debootstrap --variant=minbase $SUITE $MIRROR" - "$TAG" >/dev/null
docker image ls "$TAG" >&2
