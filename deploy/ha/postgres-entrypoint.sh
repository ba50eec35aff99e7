#!/bin/sh
# The entrypoint of deploy/postgres.Dockerfile (the postgres:15 stand-in):
# on an empty PGDATA, make the cluster the way the official image does
# (superuser POSTGRES_USER with POSTGRES_PASSWORD, database POSTGRES_DB,
# password logins from any address with scram-sha-256), then run the
# command (`postgres -c ...`) in the foreground as PID 1.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}

if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "docker-entrypoint: POSTGRES_PASSWORD must be set for a new database" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --encoding=UTF8 \
        --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >&2
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        # Single-user mode: no listener, nothing can connect before the
        # database exists.
        printf 'CREATE DATABASE "%s" OWNER "%s"\n' "$db" "$user" |
            postgres --single -D "$PGDATA" postgres >/dev/null
    fi
    echo "docker-entrypoint: database '$db' of user '$user' created in $PGDATA" >&2
fi
exec "$@"
