#!/bin/sh
# schedule.sh - schedule a job, read its status, cancel it (curl and POSIX sh).
# The HTTP calls themselves; from Node, Python or Go, use clients/ instead.
#
#   api/examples/schedule.sh [BASE_URL]          default http://127.0.0.1:8080
#   RMQS_API_TOKEN=... api/examples/schedule.sh  when the service needs a token
#
# Prints one line per step and exits non-zero on any unexpected answer:
#   scheduled id=<id> status=pending deliver_at=<time>
#   read id=<id> status=pending
#   cancelled id=<id> status=cancelled
set -eu

BASE=${1:-http://127.0.0.1:8080}
BASE=${BASE%/}
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

# call METHOD PATH [JSON]: the answer's body goes to $TMP, its status to stdout.
call() {
    method=$1 path=$2 data=${3-}
    set -- -sS -o "$TMP" -w '%{http_code}' -X "$method"
    if [ -n "$data" ]; then
        set -- "$@" -H 'Content-Type: application/json' --data-binary "$data"
    fi
    if [ -n "${RMQS_API_TOKEN:-}" ]; then
        # The token goes to curl on stdin (-H @-), not on its command line.
        printf 'Authorization: Bearer %s\n' "$RMQS_API_TOKEN" |
            curl "$@" -H @- "$BASE$path"
    else
        curl "$@" "$BASE$path"
    fi
}

# field NAME: a top-level string member of the (compact) JSON answer.
field() {
    sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" "$TMP" | head -n 1
}

fail() {
    echo "schedule.sh: $1: HTTP $2: $(cat "$TMP")" >&2
    exit 1
}

# 1. Cancel order 1234 in 10 minutes unless it is paid by then.
st=$(call POST /schedule '{"exchange": "", "routing_key": "orders.expire",
                           "body": {"order": 1234}, "delay_ms": 600000,
                           "headers": {"tenant": "acme"}}') || exit 1
if [ "$st" != 201 ]; then fail "POST /schedule" "$st"; fi
id=$(field id)
if [ -z "$id" ] || [ "$(field status)" != pending ]; then fail "POST /schedule" "$st"; fi
echo "scheduled id=$id status=pending deliver_at=$(field deliver_at)"

# 2. Read it back.
st=$(call GET "/jobs/$id") || exit 1
if [ "$st" != 200 ] || [ "$(field id)" != "$id" ]; then fail "GET /jobs/$id" "$st"; fi
echo "read id=$id status=$(field status)"

# 3. The order was paid: cancel the job.
st=$(call DELETE "/jobs/$id") || exit 1
if [ "$st" != 200 ] || [ "$(field status)" != cancelled ]; then
    fail "DELETE /jobs/$id" "$st"
fi
echo "cancelled id=$id status=cancelled"
