package rmqio

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// Prism, Beam's Go runner, runs every pipeline of these tests in this
// process (loopback), so DoFns and tests share package state.
func TestMain(m *testing.M) { ptest.Main(m) }

// target is where a test runs: rmqfake (fake set) or the real broker of
// `make test`, both with the fixtures of scripts/rocketmq/fixtures.txt.
type target struct {
	name     string
	endpoint string
	fake     *rmqfake.Server
	// idle is how long a read waits for its first message and, after the
	// last one, before it ends: the real broker takes 5 to 15 s to dispatch
	// a lite backlog to a wildcard group that just subscribed (observed up
	// to 14.8 s), and a loaded machine adds the read's own start: 30 s.
	idle time.Duration
}

func (tg target) conn() Connection { return Connection{Endpoints: tg.endpoint} }

// eachTarget runs f on rmqfake and on the real broker (which must be there:
// rmqtest.Endpoint fails the test without one).
func eachTarget(t *testing.T, f func(t *testing.T, tg target)) {
	t.Run("rmqfake", func(t *testing.T) {
		s := rmqfakeServer(t)
		f(t, target{name: "rmqfake", endpoint: s.Addr(), fake: s, idle: 3 * time.Second})
	})
	t.Run("broker", func(t *testing.T) {
		f(t, target{name: "broker", endpoint: rmqtest.Endpoint(t), idle: 30 * time.Second})
	})
}

// rmqfakeServer is rmqfake with the project's fixtures, for the tests that
// look inside the broker.
func rmqfakeServer(t *testing.T) *rmqfake.Server {
	t.Helper()
	return rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.FastLiteDispatch())
}

// closeReaders ends what the test's pipelines shared in this process, as a
// worker's exit would: the readers' sources (giving back what they had not
// emitted), Write's sinks, the ack pools.
func closeReaders(t *testing.T) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := closeShared(ctx); err != nil {
			t.Errorf("closing what the pipelines shared: %v", err)
		}
	})
}

// produce sends n messages, body "<prefix>-<i>", over lites lite topics
// "<prefix>-l<i%lites>" of the LITE main topic, and returns the bodies.
func produce(t *testing.T, endpoint, topic, prefix string, n, lites int) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: endpoint}, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	bodies := make(map[string]bool, n)
	fs := make([]*rmqflow.SendFuture, n)
	for i := range fs {
		body := fmt.Sprintf("%s-%d", prefix, i)
		bodies[body] = true
		fs[i] = sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-l%d", prefix, i%lites), Body: []byte(body)})
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return bodies
}

// seen records the bodies that reached a point of a pipeline, per label,
// with how many times each did (a redelivery counts again).
var seen = struct {
	sync.Mutex
	m map[string]map[string]int
}{m: map[string]map[string]int{}}

func seenBodies(label string) map[string]int {
	seen.Lock()
	defer seen.Unlock()
	out := map[string]int{}
	for b, n := range seen.m[label] {
		out[b] = n
	}
	return out
}

func resetSeen(label string) {
	seen.Lock()
	delete(seen.m, label)
	seen.Unlock()
	crashCounts.Lock()
	delete(crashCounts.m, label) // a test run again (-count) starts a fresh worker
	crashCounts.Unlock()
}

// recordFn notes each message's body under Label and passes it on.
type recordFn struct{ Label string }

func (fn *recordFn) ProcessElement(m AckableMessage, emit func(AckableMessage)) {
	seen.Lock()
	if seen.m[fn.Label] == nil {
		seen.m[fn.Label] = map[string]int{}
	}
	seen.m[fn.Label][string(m.Payload)]++
	seen.Unlock()
	emit(m)
}

// crashFn stands for a worker that dies: it passes on the first After
// messages it sees (counted in the process, across bundles) and fails every
// bundle after that, which fails the job.
type crashFn struct {
	Label string
	After int
}

var crashCounts = struct {
	sync.Mutex
	m map[string]int
}{m: map[string]int{}}

func (fn *crashFn) ProcessElement(m AckableMessage, emit func(AckableMessage)) error {
	crashCounts.Lock()
	crashCounts.m[fn.Label]++
	n := crashCounts.m[fn.Label]
	crashCounts.Unlock()
	if n > fn.After {
		return fmt.Errorf("crashFn %s: the worker died at message %d", fn.Label, n)
	}
	emit(m)
	return nil
}

// missing lists the bodies of want that got is without.
func missing(want map[string]bool, got map[string]int) []string {
	var out []string
	for b := range want {
		if got[b] == 0 {
			out = append(out, b)
		}
	}
	return out
}

// duplicates counts the extra deliveries in got.
func duplicates(got map[string]int) int {
	d := 0
	for _, n := range got {
		d += n - 1
	}
	return d
}

// failureID is an AckFailure's message id (marked when it has no error, and
// when it is a dead-lettered copy).
func failureID(f AckFailure) string {
	id := f.MessageID
	if f.Error == "" {
		id += " without an error"
	}
	if f.DeadLettered {
		id += " dead-lettered"
	}
	return id
}

// answerOf is the record answering m, carrying m's handle.
func answerOf(m AckableMessage) Record {
	return Record{LiteTopic: "answer-" + m.LiteTopic, Body: append([]byte("re:"), m.Payload...), AckHandles: [][]byte{m.Handle}}
}

// refusedRecordOf is a record the broker refuses for good (a property name
// it reserves), carrying m's handle.
func refusedRecordOf(m AckableMessage) Record {
	return Record{LiteTopic: "x", Properties: map[string]string{"TRAN_MSG": "true"}, Body: m.Payload, AckHandles: [][]byte{m.Handle}}
}

// refusedID emits the message id of a failure that says its record was not
// written because of the refused property, and nothing for any other.
func refusedID(f AckFailure, emit func(string)) {
	if f.MessageID != "" && strings.Contains(f.Error, "not written") && strings.Contains(f.Error, "TRAN_MSG") {
		emit(f.MessageID)
	}
}

func init() {
	register.Function2x0(refusedID)
	register.Emitter1[string]()
	register.Function1x1(failureID)
	register.Function1x1(answerOf)
	register.Function1x1(refusedRecordOf)
	register.DoFn2x0[AckableMessage, func(AckableMessage)](&recordFn{})
	register.DoFn2x1[AckableMessage, func(AckableMessage), error](&crashFn{})
}
