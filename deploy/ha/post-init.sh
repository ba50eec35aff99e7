#!/bin/sh
# Patroni's bootstrap.post_init (deploy/ha/patroni.yml), mounted as
# /etc/patroni/post-init.sh on each database node: run once, on the node
# that makes a new cluster, after initdb and before it takes the leader key
# (so nothing reaches the cluster before this has run). It makes the
# service's login role POSTGRES_USER (default rmqs) with POSTGRES_PASSWORD
# and its database POSTGRES_DB (default: the user's name), like the
# official postgres image does. A later change of POSTGRES_PASSWORD does not
# change the role's password (ALTER ROLE does).
#
# $1 is the superuser's connection string Patroni passes (its password in
# the PGPASSFILE Patroni sets).
set -eu
: "${POSTGRES_PASSWORD:?must be set for a new cluster}"
user=${POSTGRES_USER:-rmqs}
db=${POSTGRES_DB:-$user}
# psql's :"name" and :'value' quote what they insert.
/usr/lib/postgresql/15/bin/psql -X -q -v ON_ERROR_STOP=1 -v user="$user" \
    -v pw="$POSTGRES_PASSWORD" -v db="$db" -d "$1" <<'SQL'
CREATE ROLE :"user" LOGIN PASSWORD :'pw';
CREATE DATABASE :"db" OWNER :"user";
SQL
echo "post-init: role '$user' and database '$db' created" >&2
