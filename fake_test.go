package rmqflow_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// fakeLite starts rmqfake with one LITE main topic and a wildcard group.
func fakeLite(t *testing.T) *rmqfake.Server {
	t.Helper()
	s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	if err := s.CreateTopic("main", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	return s
}

// startPair starts a lite source on "main"/"g" and a sink to "main"; both are
// closed at test end (before the leak check, which is registered first).
func startPair(t *testing.T, ctx context.Context, conn rmqflow.Connection) (*rmqflow.Source[string], *rmqflow.Sink) {
	t.Helper()
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close(context.Background()) })
	return src, sink
}

// sendAndTake sends n messages over n lite topics named prefix-i, takes n
// messages from src and acks each; it returns the bodies taken.
func sendAndTake(t *testing.T, ctx context.Context, sink *rmqflow.Sink, src *rmqflow.Source[string], prefix string, n int) map[string]bool {
	t.Helper()
	for i := 0; i < n; i++ {
		lite := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: lite, Body: []byte(lite)}).Wait(ctx); err != nil {
			t.Fatalf("send %s: %v", lite, err)
		}
	}
	got := map[string]bool{}
	for len(got) < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("next after %d of %d: %v", len(got), n, err)
		}
		got[m.Value] = true
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Fatalf("ack %s: %v", m.Value, err)
		}
	}
	return got
}

// TestSourceSurvivesBrokerRestart: the broker restarts (connections cut,
// sessions forgotten); the source, the sink and the ack pool carry on without
// any user action, and no goroutine is left behind.
func TestSourceSurvivesBrokerRestart(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := fakeLite(t)
	ctx := rmqtest.Context(t, time.Minute)
	src, sink := startPair(t, ctx, rmqflow.Connection{Endpoints: s.Addr(), RequestTimeout: time.Second})
	if got := sendAndTake(t, ctx, sink, src, "before", 10); len(got) != 10 {
		t.Fatalf("before the restart: %d messages", len(got))
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := sendAndTake(t, ctx, sink, src, "after", 10); len(got) != 10 {
		t.Fatalf("after the restart: %d messages", len(got))
	}
	if st := s.Stats(); st.Held != 0 {
		t.Errorf("the broker still holds %d messages after all were acked", st.Held)
	}
}

// TestSourceBrokenReceiveStreams: receive streams that break mid-way make the
// source back off and retry; nothing is lost.
func TestSourceBrokenReceiveStreams(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := fakeLite(t)
	ctx := rmqtest.Context(t, time.Minute)
	src, sink := startPair(t, ctx, rmqflow.Connection{Endpoints: s.Addr()})
	s.BreakReceiveStreams(3)
	if got := sendAndTake(t, ctx, sink, src, "broken", 20); len(got) != 20 {
		t.Fatalf("got %d of 20", len(got))
	}
	if st := s.Stats(); st.Held != 0 {
		t.Errorf("the broker still holds %d messages", st.Held)
	}
}

// TestRunnerShutdownFinish: in ShutdownFinish mode a runner stopped with
// messages fetched handles all of them before Run returns.
func TestRunnerShutdownFinish(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := fakeLite(t)
	ctx := rmqtest.Context(t, time.Minute)
	conn := rmqflow.Connection{Endpoints: s.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("f-%d", i), Body: []byte("x")}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = sink.Close(ctx)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	first, release := make(chan struct{}), make(chan struct{})
	var handled atomic.Int32
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if handled.Add(1) == 1 {
			close(first)
			<-release // hold the only worker until the shutdown has begun
		}
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 1, Shutdown: rmqflow.ShutdownFinish})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	<-first
	// Wait until the source has fetched everything, then stop.
	// (The wait re-checks whenever a long poll parks, which a source with
	// nothing left to fetch does.)
	if err := s.WaitFor(ctx, func(st rmqfake.Stats) bool { return st.Groups["g"].Backlog == 0 }); err != nil {
		t.Fatal(err)
	}
	// The broker counts a message out when its receive answers; the runner
	// holds it once the answer has arrived (a receive still in transit
	// would be cut short by the shutdown).
	waitHeld(t, ctx, r, func(held int64) bool { return held == n })
	stop()
	if got := handled.Load(); got != 1 {
		t.Fatalf("%d messages handled before the shutdown began, want 1", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("runner: %v", err)
	}
	if handled.Load() != n {
		t.Fatalf("handled %d of %d fetched messages before returning", handled.Load(), n)
	}
}

// TestRunnerShutdownReleaseStartsNothingNew: once Run's context is cancelled,
// a worker that finishes its handler starts no other message, even when many
// wait in the runner; they all go back to the group. (CI caught the runner
// handling 33 of 40 queued messages after the cancel.)
func TestRunnerShutdownReleaseStartsNothingNew(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := fakeLite(t)
	ctx := rmqtest.Context(t, time.Minute)
	conn := rmqflow.Connection{Endpoints: s.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("r-%d", i), Body: []byte("x")}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = sink.Close(ctx)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	const workers = 2
	started, release := make(chan struct{}, n), make(chan struct{})
	var handled atomic.Int32
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		handled.Add(1)
		started <- struct{}{}
		<-release
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: workers})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	for i := 0; i < workers; i++ {
		<-started
	}
	// Everything fetched and waiting in the runner behind the busy workers.
	// (A receive cut short by the shutdown could lose its answer in transit:
	// those messages would come back only when their invisibility ends.)
	waitHeld(t, ctx, r, func(held int64) bool { return held == n })
	stop()
	close(release) // the workers may now take another message, and must not
	if err := <-done; err != nil {
		t.Fatalf("runner: %v", err)
	}
	if got := handled.Load(); got != workers {
		t.Fatalf("handled %d messages, want only the %d in flight when Run's context ended", got, workers)
	}
	// The rest comes back at once to another consumer (released, not left
	// to its invisibility, which is 60 s by default).
	rival, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := rival.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rival.Close(context.Background())
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	back := map[string]bool{}
	for len(back) < n-workers {
		m, err := rival.Next(rctx)
		if err != nil {
			for i := 0; i < n; i++ {
				if !back[fmt.Sprintf("r-%d", i)] {
					t.Logf("missing r-%d: %+v", i, s.Stats().Groups["g"].LiteTopics[fmt.Sprintf("r-%d", i)])
				}
			}
			t.Fatalf("%d of the %d released messages came back: %v", len(back), n-workers, err)
		}
		back[m.Meta.LiteTopic] = true
	}
}

// waitHeld polls how many messages r holds until ok, or fails the test when
// ctx ends. Nothing signals the runner's intake, so it polls.
func waitHeld[T any](t *testing.T, ctx context.Context, r *rmqflow.Runner[T], ok func(held int64) bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !ok(rmqflow.RunnerHeld(r)) {
		select {
		case <-ctx.Done():
			t.Fatalf("runner holds %d messages, still waiting: %v", rmqflow.RunnerHeld(r), ctx.Err())
		case <-tick.C:
		}
	}
}
