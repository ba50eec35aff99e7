# A stand-in for the official postgres:15 image, built from Debian's
# postgresql-15 package, for machines that cannot reach a container registry
# (tests/deploy/ builds it for deploy/docker-compose.ha.yml):
#
#   docker build -f deploy/postgres.Dockerfile -t postgres:15 deploy
#
# It behaves like the official image where docker-compose.ha.yml relies on
# it: POSTGRES_USER (default postgres), POSTGRES_PASSWORD (required) and
# POSTGRES_DB (default: the user's name) make the superuser and database of
# a new data folder (PGDATA, the /var/lib/postgresql/data volume); the server
# runs in the foreground as the user postgres, logs to stderr, takes
# `postgres -c name=value` arguments, and answers `pg_isready`. Password
# logins use scram-sha-256; fsync and synchronous_commit keep their defaults
# (on).
FROM debian:bookworm-slim

# No cluster at install time (the entrypoint makes one in PGDATA), and no
# server started while building.
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
 && chmod 755 /usr/sbin/policy-rc.d \
 && mkdir -p /etc/postgresql-common/createcluster.d \
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/no-main.conf \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql-15 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
           /usr/sbin/policy-rc.d /var/lib/postgresql/15 /etc/postgresql/15 \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
 && install -d -o postgres -g postgres -m 2775 /run/postgresql
COPY ha/postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh

ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
USER postgres
VOLUME ["/var/lib/postgresql/data"]
EXPOSE 5432
# Like the official image: SIGINT is PostgreSQL's "fast" shutdown.
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
