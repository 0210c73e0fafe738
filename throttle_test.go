package rmqflow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// counterMeter is a metric.Meter whose Int64Counters record every Add (name
// and attributes); everything else is a no-op.
type counterMeter struct {
	noop.Meter
	mu   sync.Mutex
	adds []counterAdd
}

type counterAdd struct {
	name  string
	attrs attribute.Set
	n     int64
}

type recordingCounter struct {
	noop.Int64Counter
	name string
	m    *counterMeter
}

func (c recordingCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	cfg := metric.NewAddConfig(opts)
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.adds = append(c.m.adds, counterAdd{name: c.name, attrs: cfg.Attributes(), n: n})
}

func (m *counterMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return recordingCounter{name: name, m: m}, nil
}

// sum adds up counter name's increments whose attribute key has value.
func (m *counterMeter) sum(name, key, value string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, a := range m.adds {
		if v, ok := a.attrs.Value(attribute.Key(key)); a.name == name && ok && v.AsString() == value {
			n += a.n
		}
	}
	return n
}

// oneFakeMessage starts rmqfake with a source on it and returns one message
// of lite topic "a" taken from the source.
func oneFakeMessage(t *testing.T) (*rmqfake.Server, *rmqflow.Source[string], *rmqflow.AckableMessage[string], context.Context) {
	t.Helper()
	rmqtest.CheckGoroutines(t)
	fake := fakeLite(t)
	ctx := rmqtest.Context(t, 30*time.Second)
	src, sink := startPair(t, ctx, rmqflow.Connection{Endpoints: fake.Addr()})
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "a", Body: []byte("m")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return fake, src, m, ctx
}

// TestThrottleProcessReportsAFailedDeferral: when the deferral RPC fails,
// Process says Failed (not Deferred) and returns the error.
func TestThrottleProcessReportsAFailedDeferral(t *testing.T) {
	fake, src, m, ctx := oneFakeMessage(t)
	th, err := rmqflow.NewThrottle(src.Acker(), rmqflow.ThrottlePolicyFunc[string](func(*rmqflow.AckableMessage[string]) rmqflow.Decision {
		return rmqflow.Defer(time.Minute, "test")
	}), rmqflow.ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fake.SetFault("ChangeInvisibleDuration", rmqfake.Fault{ErrorRate: 1, Code: codes.Unavailable})
	out, err := th.Process(ctx, m)
	if out != rmqflow.Failed || err == nil {
		t.Fatalf("Process with a failing deferral: %v, %v; want Failed and the error", out, err)
	}
	fake.ClearFaults()
	if out, err := th.Process(ctx, m); out != rmqflow.Deferred || err != nil {
		t.Fatalf("Process after the fault cleared: %v, %v; want Deferred", out, err)
	}
}

// TestThrottleRefusesTheZeroDecision: a policy that returns Decision{} has
// nothing acked or deferred.
func TestThrottleRefusesTheZeroDecision(t *testing.T) {
	_, src, m, ctx := oneFakeMessage(t)
	th, err := rmqflow.NewThrottle(src.Acker(), rmqflow.ThrottlePolicyFunc[string](func(*rmqflow.AckableMessage[string]) rmqflow.Decision {
		return rmqflow.Decision{}
	}), rmqflow.ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := th.Process(ctx, m); out != rmqflow.Failed || !errors.Is(err, rmqflow.ErrNoDecision) {
		t.Fatalf("Process with the zero Decision: %v, %v; want Failed, ErrNoDecision", out, err)
	}
	if st := src.Acker().Stats(); st.Acks != 0 || st.ChangeInvisible != 0 {
		t.Fatalf("the zero Decision sent something: %+v", st)
	}
}

// TestRunnerCountsHandlerErrors: a deferral after a handler error is
// counted in rmqflow.throttle.defers with reason handler-error, as
// docs/metrics.md says, and a message given up on in
// rmqflow.runner.dead_lettered by its valve.
func TestRunnerCountsHandlerErrors(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	fake := fakeLite(t)
	meter := &counterMeter{}
	conn := rmqflow.Connection{Endpoints: fake.Addr(), Meter: meter}
	ctx := rmqtest.Context(t, 30*time.Second)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	var dead = make(chan string, 1)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		return rmqflow.Decision{}, errors.New("always fails")
	}, rmqflow.RunnerConfig{ErrorBackoff: 100 * time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		dead <- m.Value
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "a", Body: []byte("m")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dead:
	case <-ctx.Done():
		t.Fatal("the failing message was not dead-lettered")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := meter.sum(rmqflow.MetricDefers, "reason", "handler-error"); n != 1 {
		t.Errorf("%s{reason=handler-error} = %d, want 1", rmqflow.MetricDefers, n)
	}
	if n := meter.sum(rmqflow.MetricDeadLettered, "valve", "max-defers"); n != 1 {
		t.Errorf("%s{valve=max-defers} = %d, want 1", rmqflow.MetricDeadLettered, n)
	}
}

// TestRunnerValveRespectsTheGroupRetryLimit: with a group that the broker
// dead-letters after 2 deliveries (retry max 1), the runner's
// max-delivery-attempt valve fires at attempt 2 even though its own
// MaxDeliveryAttempt is the default 16, so the message reaches the
// dead-letter function instead of the broker's DLQ.
func TestRunnerValveRespectsTheGroupRetryLimit(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	fake := rmqfake.NewForTest(t)
	if err := fake.CreateTopic("n", rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	if err := fake.CreateGroup("ng", rmqfake.RetryMax(1)); err != nil {
		t.Fatal(err)
	}
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	ctx := rmqtest.Context(t, 40*time.Second)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Mode: rmqflow.ModeSimple, Topic: "n", Group: "ng",
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	attempts := make(chan int32, 8)
	dead := make(chan int32, 1)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		attempts <- m.Meta.DeliveryAttempt
		return rmqflow.Decision{}, errors.New("always fails")
	}, rmqflow.RunnerConfig{ErrorBackoff: 100 * time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 100}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		dead <- m.Meta.DeliveryAttempt
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{Body: []byte("m")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-dead:
		if a != 2 {
			t.Errorf("dead-lettered at attempt %d, want 2 (the group's last delivery)", a)
		}
	case <-ctx.Done():
		t.Fatal("not dead-lettered by the runner: the broker's DLQ took it")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := fake.Stats().Groups["ng"]; st.DeadLettered != 0 || st.Acked != 1 {
		t.Errorf("group counts %+v: want the message acked by the runner, nothing in the broker's DLQ", st.Counts)
	}
}
