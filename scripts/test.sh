#!/usr/bin/env bash
# The one command that runs every test (`make test` calls it; so does CI):
# fetches and starts a real RocketMQ when none runs (scripts/with-broker.sh),
# runs the whole Go test suite of every module against it (with go vet's
# checks), and
# stops the broker again if it started it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" != "--inner" ]; then
  exec scripts/with-broker.sh "$0" --inner "$@"
fi
shift
# Each step's wall time, printed as it ends and listed again on exit (CI's
# budget is 45 minutes on a fresh machine: this says where they go).
step_name="" step_start=$SECONDS steps=""
step() {
  if [ -n "$step_name" ]; then
    steps+="$(printf '%5ds  %s' $((SECONDS - step_start)) "$step_name")"$'\n'
  fi
  step_name="$1" step_start=$SECONDS
  [ -n "$1" ] && echo "== $1"
  return 0
}
report_steps() { # [EXIT_STATUS]: the status to report, else that of the last command
  rc=${1:-$?}
  step ""
  printf '== time per step (total %ds, exit %d)\n%s' "$SECONDS" "$rc" "$steps"
}
trap report_steps EXIT
# The official RocketMQ Go and Java clients' flows against rmqfake and the real
# broker: a module of its own, so that the official client's dependencies stay
# out of rmqflow's go.mod. Not under -race: the official Go client v5.1.4 races
# with itself (its Telemetry goroutine applies the settings command while Send
# reads the retry policy: producer_options.go:155 vs producer.go:170), which
# fails the run on code that is not ours; rmqfake's own tests run under -race.
official_tests() { (cd rmqfake/officialclient_test && go test -vet=all -count=1 ./...); }
# The Benthos integration (its own module, so that Benthos stays out of the
# core's go.mod): the examples end to end on rmqfake (one on the real broker
# too), per-message nacks, rmqflow-connect's lint and list, and a SIGKILL
# mid-stream.
benthos_tests() { (cd integrations/benthos && go test -race -vet=all -count=1 -timeout 15m ./...); }
# The Watermill Pub/Sub (its own module too): Watermill's own Pub/Sub suite
# on rmqfake (lite and simple mode) and on the real broker (lite mode),
# nack/close/dead-letter semantics, and a Router with Retry and PoisonQueue.
watermill_tests() { (cd integrations/watermill && go test -race -vet=all -count=1 -timeout 15m ./...); }
# The Beam IO (its own module: Beam is heavy): every pipeline on Prism, Beam's
# Go runner, in process, against rmqfake and the real broker: read/ack, a job
# that dies mid-stream and its rerun, self-checkpointing under a stream, ack
# failures as a PCollection, throttle, write-then-ack, and the examples.
# TestCrashMidStreamLosesNothing fails a job on purpose, and a failed job
# trips a data race inside Beam's own harness (v2.77.0 harness.go:195 closes
# the channel harness.go:213 may still send on), so that test runs without
# -race; every other test of the module runs under it.
beam_tests() {
  (cd integrations/beam && go test -race -vet=all -count=1 -timeout 15m -skip TestCrashMidStreamLosesNothing ./... &&
    go test -count=1 -timeout 10m -run TestCrashMidStreamLosesNothing ./...)
}
# The eKuiper integration (its own module: eKuiper is heavy): rmqflow-sql,
# built once with -tags core (CGO_ENABLED=0), runs each rule as a subprocess
# on 127.0.0.1 against rmqfake and the real broker (the rmqflow-sql-* fixtures):
# a projection, a filter whose dropped rows are acked by progress, a tumbling
# window written back, a webhook failing for a while behind rocketmq_ack, a
# SIGKILL mid-stream and restart (of a projection and of a window rule), a rule
# refused for its options, a rule whose rows are all dropped settled by the
# idle check, HAVING, count and session windows, simple mode with a tag filter,
# secrets kept out of the log. About 2 min (the tests run in
# parallel), most of it the real broker's redelivery waits. Not under -race: the server
# under test is a subprocess (a race build would need cgo), so -race would
# cover only the in-process unit tests.
ekuiper_tests() { (cd integrations/ekuiper && CGO_ENABLED=0 go test -tags core -vet=all -count=1 -timeout 10m ./...); }
# The bench module: the harness's own unit tests (statistics, report, plan)
# run; the peer tests need RMQFLOW_BENCH=1 (make bench), so the rest is only
# built and vetted here.
bench_tests() { (cd bench && go test -vet=all -count=1 ./harness/ ./internal/peerkit/ ./peer/... && go test -vet=all -count=1 -run XXX ./...); }

# On an empty build cache (a fresh machine) the lanes spend minutes compiling
# before their first test: Beam, eKuiper and Benthos, each under -race, and
# Beam again without it (lane a 273 s and lane b 86 s of compiling on 2 cores,
# after what the main suite builds, measured 2026-12-04). The main suite
# meanwhile mostly waits on the broker (the test processes of a warm run used
# 34% of one core, the broker's JVMs not counted). So the lanes' own commands
# run now in the background at the lowest CPU priority with -exec true, which
# compiles and vets each test binary and runs none; the lanes later find them
# in the build cache. In a new clone it took 255 s with the dependencies
# already in the cache (the modules' own packages build again: the cache keys
# hold their directory), seconds in a checkout that built them before. Its
# failures are the lanes' to report.
warm_lanes() {
  local f
  export GOFLAGS="${GOFLAGS:+$GOFLAGS }-exec=$(type -P true)"
  for f in beam_tests official_tests benthos_tests ekuiper_tests watermill_tests bench_tests; do
    "$f" >/dev/null 2>&1 || echo "warm-up: $f failed (the lane will say why)"
  done
}
warm_time=$(mktemp)
set -m # its own process group, stopped with it if the run ends early
renice_self() { renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true; }
(renice_self; t=$SECONDS; warm_lanes; echo $((SECONDS - t)) >"$warm_time") &
warm_pid=$!
set +m
trap 'st=$?; kill -- -"$warm_pid" 2>/dev/null || true; report_steps "$st"' EXIT
trap 'exit 130' INT TERM
# go vet's full set of checks runs inside each module's go test (-vet=all),
# on the packages that build compiled for the test, rather than as a go vet
# of its own first: a separate go vet compiles every dependency a second time
# (without -race): the seven go vet steps took 1152 s of a run with an empty
# build cache on 2026-12-03, before its first test.
step "go test (real broker at $RMQFLOW_ENDPOINT)"
go test -race -vet=all -count=1 -timeout 25m ./... "$@"
# The proof suites (proof/, build tag proof): the crash suite (emulator and
# real broker), the four-process group and the proxy restart. They run after
# the main suite, alone, because they restart the real broker's proxy, which
# would cut the tests running beside them. -v prints their figures; the
# children's own logs are in files (kept and named when a test fails).
# They start on a fresh store: after the main suite (since conformance p, q, r
# and the official clients' fixtures came, 2026-12-01) the real-broker crash
# suite's consumer got nothing for 90 s in 2 of 3 runs, on a fresh broker in 0
# of 4 (open question: which earlier scenario leaves the broker so). Only the
# broker scripts/rocketmq.sh runs is restarted.
if scripts/rocketmq.sh status >/dev/null 2>&1; then
  step "restarting the broker for the proof suites (fresh store)"
  # (without the auth proxy: only conformance scenario t uses it)
  # The 5.5.0 defaults of the lite TTL scan, as before scenario u came: the
  # scan every 20 s also deletes lite topics it finds empty, TTL or not, and
  # no suite from here on needs it (nor the auth proxy).
  scripts/rocketmq.sh down >/dev/null && RMQ_AUTH_PROXY=0 RMQ_MIN_LITE_TTL_MS=900000 RMQ_LITE_TTL_CHECK_MS=120000 scripts/rocketmq.sh up >/dev/null
fi
step "go test -tags proof ./proof (crash suite, multi-process group, proxy restart)"
go test -race -vet=all -count=1 -tags proof -timeout 20m -v ./proof/ 2>&1 | grep -v '^=== \(RUN\|PAUSE\|CONT\)'
# The warm-up ends before the main suite does (with an empty build cache on
# 2026-12-04 it was over by the end of the main suite's 12 minutes).
wait "$warm_pid" || true
echo "== the lanes' warm-up compile (background) took $(cat "$warm_time")s"
rm -f "$warm_time"
# The modules above run in two lanes at once, each its steps in order: they
# spend most of their time waiting on the broker (redeliveries, dispatch
# ticks), they use topics and groups of their own (scripts/rocketmq/fixtures.txt),
# and none restarts the broker. One after another they made a fresh run
# longer than CI's 45-minute budget (2862 s on 2026-12-03). Each lane's output
# is shown when both have ended, and its steps' times are in the list.
step "the integrations, the official clients and the bench module, in two lanes"
lanes=$(mktemp -d)
run_lane() { # NAME FUNCTION...: runs them in order; stops at the first failure
  local name=$1 f t
  shift
  (
    set -e
    for f in "$@"; do
      t=$SECONDS
      echo "== $f (lane $name)"
      "$f"
      printf '%5ds    %s (lane %s)\n' $((SECONDS - t)) "$f" "$name" >>"$lanes/$name.times"
    done
  ) >"$lanes/$name.log" 2>&1
}
run_lane a beam_tests watermill_tests bench_tests &
lane_a=$!
run_lane b official_tests benthos_tests ekuiper_tests &
lane_b=$!
# Interrupted (CI's timeout, ^C): stop the lanes and show what they printed.
trap 'kill -- "$lane_a" "$lane_b" 2>/dev/null; cat "$lanes"/*.log 2>/dev/null; exit 130' INT TERM
rc_a=0 rc_b=0
wait "$lane_a" || rc_a=$?
wait "$lane_b" || rc_b=$?
cat "$lanes/a.log" "$lanes/b.log"
steps+="$(cat "$lanes"/*.times 2>/dev/null || true)"$'\n'
rm -rf "$lanes"
if [ "$rc_a" != 0 ] || [ "$rc_b" != 0 ]; then
  echo "== a lane failed (lane a exit $rc_a, lane b exit $rc_b)"
  exit 1
fi
