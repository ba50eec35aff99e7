#!/usr/bin/env bash
# tests/lib/lane.sh - runs one test (the rest of the command line) on the
# RabbitMQ node ctest gave it.
#
# tests/run.sh starts a node per lane and writes each node's environment
# (RMQS_TEST_AMQP_URL, the node's name, pid file, epmd port...) to
# $RMQS_TEST_LANES_DIR/<id>.env; a test that needs a broker asks ctest for
# one (RESOURCE_GROUPS "brokers:1" in tests/CMakeLists.txt), and ctest names
# the node it allocated in CTEST_RESOURCE_GROUP_0_BROKERS ("id:1,slots:1").
# Without that variable (ctest run by hand, without tests/run.sh's resource
# file), the environment is left as it is: lane 0's, or the caller's.
set -euo pipefail
alloc=${CTEST_RESOURCE_GROUP_0_BROKERS:-}
if [ -n "$alloc" ]; then
    id=${alloc#id:}
    id=${id%%,*}
    # shellcheck disable=SC1090
    . "${RMQS_TEST_LANES_DIR:?tests/run.sh sets it}/$id.env"
fi
exec "$@"
