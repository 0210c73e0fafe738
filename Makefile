# rmqflow: `make test` is the one command that runs all tests.
.PHONY: test unit fuzz crash bench bench-resume bench-quick rocketmq-up rocketmq-down rocketmq-status rocketmq-logs vet fmt

# Every test, against a real RocketMQ that this starts (and stops) itself.
test:
	scripts/test.sh

# Only the tests that need no broker (real-broker tests are skipped, loudly).
unit:
	RMQFLOW_SKIP_REAL_BROKER=1 go test -count=1 ./...

# The proof suites (proof/, build tag proof) bigger than `make test` runs them:
# the crash suite through the emulator (CRASH_MESSAGES) and on the real broker
# with a proxy restart (CRASH_REAL_MESSAGES), and the four-process group
# (GROUP_MESSAGES), on a real broker this starts when none runs.
CRASH_MESSAGES ?= 1000000
CRASH_REAL_MESSAGES ?= 20000
GROUP_MESSAGES ?= 20000
crash:
	RMQFLOW_CRASH_MESSAGES=$(CRASH_MESSAGES) RMQFLOW_CRASH_REAL_MESSAGES=$(CRASH_REAL_MESSAGES) \
	RMQFLOW_GROUP_MESSAGES=$(GROUP_MESSAGES) scripts/with-broker.sh \
	go test -race -count=1 -tags proof -timeout 60m -v ./proof/

# Every fuzz target for FUZZTIME each (default 60s); their seeds (f.Add and
# testdata/fuzz) already run as ordinary tests in `make test` / `make unit`.
# FUZZFLAGS passes more flags, e.g. FUZZFLAGS=-parallel=1 on a shared machine.
FUZZTIME ?= 60s
FUZZFLAGS ?=
FUZZ_TARGETS = .:FuzzReceiptHandleUnmarshal .:FuzzReceiptHandleBinaryCrossForm .:FuzzReceiptHandleJSON \
	./client:FuzzParseEndpoints ./client:FuzzReceivedMessageFromProto \
	./rmqfake:FuzzParseFixtures ./rmqfake:FuzzParseFixture ./rmqfake:FuzzHandle ./rmqfake:FuzzFilter ./rmqfake:FuzzSQL92 \
	./rmqfake:FuzzNames ./rmqfake:FuzzRequestProto ./cmd/rmqflow:FuzzBrokerSpecs
# A run that ends in "context deadline exceeded" with no failing input written
# is Go's -fuzztime race (go.dev/issue/75804, fixed in Go 1.27), not a crash.
fuzz:
	@log=$$(mktemp); trap 'rm -f $$log' EXIT; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; dir=$$pkg/testdata/fuzz/$$fn; \
		before=$$(ls $$dir 2>/dev/null | wc -l); \
		echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg >$$log 2>&1; rc=$$?; \
		grep '^fuzz: elapsed' $$log | tail -1; grep -v '^fuzz: elapsed' $$log; \
		if [ $$rc -ne 0 ]; then \
			if [ "$$(ls $$dir 2>/dev/null | wc -l)" -eq "$$before" ] && grep -q '^    context deadline exceeded$$' $$log; then \
				echo "== $$fn: stopped by Go's -fuzztime race (go.dev/issue/75804), no failing input: not a crash"; \
			else echo "== $$fn FAILED"; exit 1; fi; \
		fi; \
	done

# The benchmark harness (bench/harness) on a real broker it starts: every
# peer at its strongest, every scenario, repetitions in a random order, the
# broker's CPU per window; it writes docs/benchmarks.md and its charts. It
# plans about 250 runs of about a minute each on 2 cores (start-up, the broker
# settling, warm-up and a 30 s window): about four hours. Its lite-topic-count
# runs go once more at the end under the many-lite-topics profile of
# docs/operations-lite.md, for which it restarts the broker (and once more
# after them, with the profile it found: -lite-profiles). A run
# that was interrupted continues with `make bench-resume DIR=.cache/bench/<dir>`
# (its own flags and seed; the runs it recorded are kept). `make bench-quick`
# is a 2-minute smoke run (report in .cache/bench/). BENCHFLAGS passes more
# harness flags (go run ./harness -help). The broker it starts keeps the 5.5.0
# defaults of the lite topic TTL scan (scripts/rocketmq.sh lowers them for
# conformance scenario u; a scan every 20 s over 100,000 lite topics would be
# broker CPU the benchmark charges to the peers) and runs no auth proxy (a
# fourth JVM the harness does not sample).
BENCHFLAGS ?=
bench:
	RMQ_AUTH_PROXY=0 RMQ_MIN_LITE_TTL_MS=900000 RMQ_LITE_TTL_CHECK_MS=120000 scripts/with-broker.sh sh -c 'cd bench && go run ./harness -endpoint "$$RMQFLOW_ENDPOINT" -report ../docs/benchmarks.md $(BENCHFLAGS)'

bench-resume:
	@test -n "$(DIR)" || { echo "usage: make bench-resume DIR=.cache/bench/<dir of the interrupted run>"; exit 2; }
	RMQ_AUTH_PROXY=0 RMQ_MIN_LITE_TTL_MS=900000 RMQ_LITE_TTL_CHECK_MS=120000 scripts/with-broker.sh sh -c 'cd bench && go run ./harness -resume "$(abspath $(DIR))"'

bench-quick:
	RMQ_AUTH_PROXY=0 RMQ_MIN_LITE_TTL_MS=900000 RMQ_LITE_TTL_CHECK_MS=120000 scripts/with-broker.sh sh -c 'cd bench && go run ./harness -endpoint "$$RMQFLOW_ENDPOINT" -quick $(BENCHFLAGS)'

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
