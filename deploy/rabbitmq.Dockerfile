# A stand-in for the official rabbitmq:3-management image, built from
# Debian's rabbitmq-server package (3.10) with the management plugin, for
# machines that cannot reach a container registry (tests/deploy/ builds it):
#
#   docker build -f deploy/rabbitmq.Dockerfile -t rabbitmq:3-management deploy
#
# It behaves like the official image where deploy/docker-compose.yml relies on
# it: the broker runs in the foreground as the user rabbitmq and logs to
# stdout, data in the /var/lib/rabbitmq volume, management UI on 15672,
# RABBITMQ_DEFAULT_USER / RABBITMQ_DEFAULT_PASS create the first user of a
# new node, guest may log in from other hosts (loopback_users.guest = false),
# the usual RABBITMQ_* variables (NODENAME, NODE_PORT, DIST_PORT,
# SERVER_ADDITIONAL_ERL_ARGS, ...) apply, and `rabbitmq-diagnostics -q ping`
# works as a health check.
FROM debian:bookworm-slim

# policy-rc.d: the package must not try to start a broker while building.
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
 && chmod 755 /usr/sbin/policy-rc.d \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        rabbitmq-server \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
           /usr/sbin/policy-rc.d /var/lib/rabbitmq/mnesia /var/log/rabbitmq/* \
 && printf '%s\n' '[rabbitmq_management].' > /etc/rabbitmq/enabled_plugins \
 && printf '%s\n' 'loopback_users.guest = false' > /etc/rabbitmq/rabbitmq.conf \
 && mkdir -p /etc/rabbitmq/conf.d \
 && printf '%s\n' \
      '#!/bin/sh' \
      '# Like the official image: RABBITMQ_DEFAULT_USER/PASS/VHOST become the' \
      '# default user and vhost of a node started on an empty data folder.' \
      'set -e' \
      'f=/etc/rabbitmq/conf.d/20-default-user.conf' \
      ': > "$f"' \
      'if [ -n "${RABBITMQ_DEFAULT_USER:-}" ]; then echo "default_user = $RABBITMQ_DEFAULT_USER" >> "$f"; fi' \
      'if [ -n "${RABBITMQ_DEFAULT_PASS:-}" ]; then echo "default_pass = $RABBITMQ_DEFAULT_PASS" >> "$f"; fi' \
      'if [ -n "${RABBITMQ_DEFAULT_VHOST:-}" ]; then echo "default_vhost = $RABBITMQ_DEFAULT_VHOST" >> "$f"; fi' \
      'exec "$@"' > /usr/local/bin/docker-entrypoint.sh \
 && chmod 755 /usr/local/bin/docker-entrypoint.sh \
 && chown -R rabbitmq:rabbitmq /etc/rabbitmq /var/lib/rabbitmq /var/log/rabbitmq

# Debian's /usr/sbin wrappers send the server's output to a log file and
# switch users; the scripts behind them run the broker in the foreground
# with Docker-friendly signal handling (SIGTERM stops it cleanly).
ENV PATH=/usr/lib/rabbitmq/bin:$PATH \
    HOME=/var/lib/rabbitmq \
    RABBITMQ_LOGS=- \
    LANG=C.UTF-8
USER rabbitmq
VOLUME ["/var/lib/rabbitmq"]
EXPOSE 4369 5671 5672 15671 15672 25672
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["rabbitmq-server"]
