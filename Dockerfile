# rmq-scheduler container image.
#
#   docker build -t rmq-scheduler .
#   docker run -d -p 8080:8080 -v rmqs-data:/data \
#       -e RMQS_AMQP_URL=amqp://user:pass@rabbitmq:5672/ \
#       -e RMQS_API_TOKEN=change-me-to-a-long-random-string rmq-scheduler
#
# The same image runs N instances on one PostgreSQL: set RMQS_DB to a
# postgres:// URL (deploy/docker-compose.ha.yml); /data is then unused.
# Configured only through RMQS_* environment variables (`docker run --rm
# rmq-scheduler --help` lists them). The database lives in the /data volume;
# the process runs as the unprivileged user rmqs (uid 10001) and stops
# gracefully on SIGTERM (`docker stop`), within RMQS_SHUTDOWN_GRACE_S (10 s):
# give `docker stop -t` / stop_grace_period a few seconds more than that.
#
# OCI labels: the version, the commit and the source repository come from
# build arguments, e.g.
#   docker build --build-arg RMQS_REVISION="$(git rev-parse HEAD)" \
#       --build-arg RMQS_SOURCE="$(git remote get-url origin)" -t rmq-scheduler .
# RMQS_VERSION defaults to CMakeLists.txt's project(VERSION) (a test keeps
# the two equal); RMQS_REVISION to "unknown"; RMQS_SOURCE to empty.

# --- build ---------------------------------------------------------------
FROM debian:bookworm-slim AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config \
        libmicrohttpd-dev librabbitmq-dev libsqlite3-dev libjansson-dev libpq-dev libglib2.0-dev \
 && rm -rf /var/lib/apt/lists/*
# Only what the build reads: .dockerignore lets in CMakeLists.txt,
# migrations/, service/ and ui/ (the dashboard: plain files embedded in the
# binary by CMake, so neither stage needs Node), so edits elsewhere keep the
# cache.
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DRMQS_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" \
 && cmake --install /build --strip --prefix /out \
 && /out/bin/rmq-scheduler --version

# --- runtime -------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12 librabbitmq4 libsqlite3-0 libjansson4 libpq5 libglib2.0-0 tzdata \
        ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
 && groupadd --system --gid 10001 rmqs \
 && useradd --system --uid 10001 --gid rmqs --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin rmqs \
 && install -d -o rmqs -g rmqs -m 0750 /data
COPY --from=build /out/bin/rmq-scheduler /usr/local/bin/rmq-scheduler

ARG RMQS_VERSION=0.1.0
ARG RMQS_REVISION=unknown
ARG RMQS_SOURCE=
LABEL org.opencontainers.image.title="rmq-scheduler" \
      org.opencontainers.image.description="Delayed messages for RabbitMQ over HTTP, stored in SQLite or PostgreSQL" \
      org.opencontainers.image.version="${RMQS_VERSION}" \
      org.opencontainers.image.revision="${RMQS_REVISION}" \
      org.opencontainers.image.source="${RMQS_SOURCE}" \
      org.opencontainers.image.licenses="MIT"

ENV RMQS_DB=/data/scheduler.db \
    RMQS_LISTEN=0.0.0.0:8080
VOLUME ["/data"]
EXPOSE 8080
USER 10001:10001
WORKDIR /data
STOPSIGNAL SIGTERM
# Probes GET /healthz at RMQS_LISTEN (a wildcard address through loopback):
# set the listen address through RMQS_LISTEN, not a --listen flag, or the
# probe looks in the wrong place.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["rmq-scheduler", "--healthcheck"]
ENTRYPOINT ["rmq-scheduler"]
