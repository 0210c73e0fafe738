#!/usr/bin/env bash
# The one command that runs every test (`make test` calls it; so does CI):
# fetches and starts a real RocketMQ when none runs, runs go vet and the whole
# Go test suite against it, prints the broker's logs when something fails, and
# stops the broker again if it started it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=0
if ! scripts/rocketmq.sh status >/dev/null 2>&1; then
  started=1
fi
finish() {
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "tests failed (exit $rc); RocketMQ logs follow" >&2
    scripts/rocketmq.sh logs || true
  fi
  if [ "$started" = 1 ]; then
    scripts/rocketmq.sh down || true
  fi
  exit "$rc"
}
trap finish EXIT

scripts/rocketmq.sh up
export RMQFLOW_ENDPOINT="127.0.0.1:${RMQ_GRPC_PORT:-18081}"
unset RMQFLOW_SKIP_REAL_BROKER

echo "== go vet"
go vet ./...
echo "== go test (real broker at $RMQFLOW_ENDPOINT)"
go test -race -count=1 -timeout 25m ./... "$@"
