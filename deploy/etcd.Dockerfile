# An etcd member for deploy/docker-compose.ha.yml (the store Patroni keeps
# its leader key in), from Debian's etcd-server package (3.4.23; no registry
# is needed):
#
#   docker build -f deploy/etcd.Dockerfile -t rmq-scheduler-etcd:3.4.23 deploy
#
# etcd runs in the foreground as the user etcd (uid and gid 998, pinned so
# that a data volume stays readable by a rebuilt image) and takes its
# settings from ETCD_* variables (the compose file sets them); data in the
# /var/lib/etcd volume. etcdctl is there for health checks.
FROM debian:bookworm-slim
RUN groupadd -r -g 998 etcd \
 && useradd -r -u 998 -g etcd -d /var/lib/etcd -s /usr/sbin/nologin etcd \
 && printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
 && chmod 755 /usr/sbin/policy-rc.d \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        etcd-server etcd-client \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
           /usr/sbin/policy-rc.d /var/lib/etcd/* \
 && install -d -o etcd -g etcd -m 0700 /var/lib/etcd
USER etcd
WORKDIR /var/lib/etcd
VOLUME ["/var/lib/etcd"]
CMD ["etcd"]
