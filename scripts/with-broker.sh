#!/usr/bin/env bash
# Runs a command with a real RocketMQ up: starts it when none runs (and stops
# it afterwards), exports RMQFLOW_ENDPOINT, RMQFLOW_AUTH_ENDPOINT (the proxy
# with authentication and ACLs on) and RMQFLOW_BROKER_ADDR (the broker's own
# remoting port, for admin requests), and prints the broker's logs when
# the command fails. Used by scripts/test.sh and `make bench`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=0
if ! scripts/rocketmq.sh status >/dev/null 2>&1; then
  started=1
fi
finish() {
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "failed (exit $rc); RocketMQ logs follow" >&2
    scripts/rocketmq.sh logs || true
  fi
  if [ "$started" = 1 ]; then
    scripts/rocketmq.sh down || true
  fi
  exit "$rc"
}
trap finish EXIT

scripts/rocketmq.sh up
echo "== RocketMQ up after ${SECONDS}s"
export RMQFLOW_ENDPOINT="127.0.0.1:${RMQ_GRPC_PORT:-18081}"
export RMQFLOW_AUTH_ENDPOINT="127.0.0.1:${RMQ_AUTH_GRPC_PORT:-18082}"
export RMQFLOW_BROKER_ADDR="127.0.0.1:${RMQ_BROKER_PORT:-18911}"
unset RMQFLOW_SKIP_REAL_BROKER
"$@"
