package rmqflow_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerDeferReasons pins the reasons docs/metrics.md lists for
// rmqflow.throttle.defers from a Runner and a Throttle: a handler error and a
// handler panic count as handler-error, a handler's Defer under its own
// reason (handler when it gave none), a handler's Release as release, and a
// throttle policy's Defer without a reason as policy. Each message is in a
// lite topic of its own, so nothing is held back (hold-back stays 0).
func TestRunnerDeferReasons(t *testing.T) {
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
	throttle, err := rmqflow.NewThrottle(src.Acker(), rmqflow.ThrottlePolicyFunc[string](func(*rmqflow.AckableMessage[string]) rmqflow.Decision {
		return rmqflow.Defer(100*time.Millisecond, "")
	}), rmqflow.ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bodies := []string{"mine", "none", "error", "panic", "release", "policy"}
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		acked = make(chan string, len(bodies))
	)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		mu.Lock()
		again := seen[m.Value]
		seen[m.Value] = true
		mu.Unlock()
		if again {
			acked <- m.Value
			return rmqflow.Ack(), nil
		}
		switch m.Value {
		case "mine":
			return rmqflow.Defer(100*time.Millisecond, "mine"), nil
		case "none":
			return rmqflow.Defer(100*time.Millisecond, ""), nil
		case "error":
			return rmqflow.Decision{}, errors.New("fails once")
		case "panic":
			panic("fails once")
		case "release":
			return rmqflow.Release(), nil
		default:
			if _, err := throttle.Process(ctx, m); err != nil {
				return rmqflow.Decision{}, err
			}
			return rmqflow.Settled(), nil
		}
	}, rmqflow.RunnerConfig{ErrorBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	for _, b := range bodies {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "lt-" + b, Body: []byte(b)}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range bodies {
		select {
		case <-acked:
		case <-ctx.Done():
			t.Fatalf("not every message came back after its deferral: %v", seen)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for reason, want := range map[string]int64{"mine": 1, "handler": 1, "handler-error": 2, "release": 1, "policy": 1, "hold-back": 0} {
		if n := meter.sum(rmqflow.MetricDefers, "reason", reason); n != want {
			t.Errorf("%s{reason=%s} = %d, want %d", rmqflow.MetricDefers, reason, n, want)
		}
	}
}

// TestTelemetryRefusalLogsNoReopening: docs/metrics.md says "telemetry
// stream broke; reopening" means the session reconnects by itself; a
// handshake the broker refuses for good (an unknown group) is not
// reopened, and its log line says so instead.
func TestTelemetryRefusalLogsNoReopening(t *testing.T) {
	fake := rmqfake.NewForTest(t)
	if err := fake.CreateTopic("main", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx := rmqtest.Context(t, 20*time.Second)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: fake.Addr(), Logger: log},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "no-such-group"}}}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err == nil {
		t.Fatal("Start on an unknown group succeeded")
	}
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Contains(out, "stream broke; reopening") {
		t.Errorf("a permanent refusal was logged as a stream that reopens:\n%s", out)
	}
	if !strings.Contains(out, "rocketmq: telemetry handshake refused; not reopening") {
		t.Errorf("no log line for the refused handshake:\n%s", out)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
