# rmqflow: `make test` is the one command that runs all tests.
.PHONY: test unit bench rocketmq-up rocketmq-down rocketmq-status rocketmq-logs vet fmt

# Every test, against a real RocketMQ that this starts (and stops) itself.
test:
	scripts/test.sh

# Only the tests that need no broker (real-broker tests are skipped, loudly).
unit:
	RMQFLOW_SKIP_REAL_BROKER=1 go test -count=1 ./...

# The benchmark harness on a real broker it starts: rmqflow against the raw
# ceiling, the official Go client and the official Java client, ratios
# printed (rmqflow bench), then the RSS with 10,000 messages in flight.
bench:
	scripts/with-broker.sh sh -c 'go run ./cmd/rmqflow bench -endpoint "$$RMQFLOW_ENDPOINT" -report .cache/bench/report.md -chart .cache/bench/benchmarks.svg && cd bench && RMQFLOW_BENCH=1 go test -count=1 -run TestRSS10kInFlight -v ./... | grep -v "^=== "'

# Start (idempotent) / stop the real broker by hand; `up` prints the endpoint.
rocketmq-up:
	scripts/rocketmq.sh up

rocketmq-down:
	scripts/rocketmq.sh down

rocketmq-status:
	scripts/rocketmq.sh status

rocketmq-logs:
	scripts/rocketmq.sh logs

vet:
	go vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
