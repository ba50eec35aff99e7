# A stand-in for the official haproxy:2.6 image, built from Debian's haproxy
# package (2.6), for machines that cannot reach a container registry
# (tests/deploy/ builds it for deploy/docker-compose.ha.yml):
#
#   docker build -f deploy/haproxy.Dockerfile -t haproxy:2.6 deploy
#
# Like the official image: the configuration is read from
# /usr/local/etc/haproxy/haproxy.cfg (mount it there), haproxy runs in the
# foreground (-W -db) as the user haproxy, and SIGUSR1 stops it gracefully
# (connections in progress are finished).
FROM debian:bookworm-slim
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
 && chmod 755 /usr/sbin/policy-rc.d \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
           /usr/sbin/policy-rc.d \
 && install -d /usr/local/etc/haproxy
USER haproxy
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
