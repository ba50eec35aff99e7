# The database node of deploy/docker-compose.ha.yml: PostgreSQL 15 run by
# Patroni 3.0.2, both from Debian's packages (no registry is needed):
#
#   docker build -f deploy/patroni.Dockerfile -t rmq-scheduler-patroni:3.0.2-pg15 deploy
#
# The image holds the packages only. The configuration (ha/patroni.yml, the
# same for every node; per node the PATRONI_* variables Patroni reads
# itself) and the script that makes the service's user and database at
# bootstrap (ha/patroni-post-init.sh) are mounted by the compose file, like
# the fronts' haproxy.cfg. Patroni runs in the foreground as the user
# postgres (uid and gid 999, pinned so that a data volume stays readable by
# a rebuilt image), with the data folder in the /var/lib/postgresql/data
# volume and its socket in /run/postgresql. SIGTERM (docker stop) makes
# Patroni stop PostgreSQL and hand the leader key over before it exits.
FROM debian:bookworm-slim

# No cluster at install time (Patroni makes one), no server started while
# building.
RUN groupadd -r -g 999 postgres \
 && useradd -r -u 999 -g postgres -d /var/lib/postgresql -s /bin/bash postgres \
 && printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
 && chmod 755 /usr/sbin/policy-rc.d \
 && mkdir -p /etc/postgresql-common/createcluster.d \
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/no-main.conf \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql-15 patroni \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
           /usr/sbin/policy-rc.d /var/lib/postgresql/15 /etc/postgresql/15 \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
 && install -d -o postgres -g postgres -m 2775 /run/postgresql

ENV LANG=C.UTF-8
USER postgres
WORKDIR /var/lib/postgresql
VOLUME ["/var/lib/postgresql/data"]
CMD ["patroni", "/etc/patroni/patroni.yml"]
