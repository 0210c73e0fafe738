package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerShutdownRelease: a runner stopped with messages still fetched
// gives them back at once (a rival consumer gets them long before their 90 s
// invisibility ends), waits for the handler in flight, and leaves no
// goroutine behind. Handler errors defer the message (ErrorDefer).
func TestRunnerShutdownRelease(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	const topic, group, n = "rmqflow-lite-runner", "rmqflow-lite-runner-g", 40
	run := rmqtest.Unique("stop")
	produce(t, topic, run, n, n)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn(t), Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		InvisibleDuration: 90 * time.Second, AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	var handled, failed atomic.Int32
	var acked, deferred atomic.Value // message ids
	started := make(chan struct{}, n)
	release := make(chan struct{})
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if !strings.HasPrefix(m.Meta.LiteTopic, run) {
			return rmqflow.Ack(), nil
		}
		started <- struct{}{}
		<-release // hold the worker until the test starts the shutdown
		if handled.Add(1) == 1 {
			failed.Add(1)
			deferred.Store(m.Meta.MessageID)
			return rmqflow.Decision{}, errors.New("first one fails") // deferred by ErrorDefer
		}
		acked.Store(m.Meta.MessageID)
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 2, ErrorBackoff: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-started
	<-started // both workers busy; the rest waits in the runner
	// Wait until the runner has them all: a receive cut short by the
	// shutdown could lose its answer in transit, and those messages would
	// come back only when their invisibility ends. (Leftovers of other runs
	// on the topic are acked at once and may add to the count for a while.)
	waitHeld(t, rmqtest.Context(t, 20*time.Second), r, func(held int64) bool { return held >= n })
	cancel()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("runner: %v", err)
	}
	if handled.Load() != 2 {
		t.Fatalf("handled %d messages, want the 2 in flight at shutdown", handled.Load())
	}

	// Everything not handled comes back at once to another consumer.
	got := map[string]bool{}
	rival, err := client.New(client.Config{Endpoints: rmqtest.Endpoint(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close(context.Background())
	// Released messages come back long before their 90 s invisibility would
	// end (a new consumer may wait for the broker's lite dispatch, ~10 s).
	rctx := rmqtest.Context(t, 55*time.Second)
	if _, err := rival.OpenSession(rctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true}); err != nil {
		t.Fatal(err)
	}
	want := n - 2 // all but the acked one and the deferred one (back after 10 s)
	released := func() int {
		k := 0
		for id := range got {
			if id != deferred.Load() {
				k++
			}
		}
		return k
	}
	for released() < want {
		if dl, _ := rctx.Deadline(); time.Until(dl) < 7*time.Second {
			break // too little time left for a 5 s long poll (ILLEGAL_POLLING_TIME)
		}
		msgs, err := rival.Receive(rctx, client.ReceiveRequest{Group: group, Topic: topic, Lite: true, InvisibleDuration: 30 * time.Second, LongPollingTimeout: 5 * time.Second})
		if err != nil && rctx.Err() == nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if strings.HasPrefix(m.LiteTopic, run) {
				got[m.MessageID] = true
			}
			_, _ = rival.Ack(rctx, group, m.Topic, []client.AckEntry{{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}})
		}
	}
	if released() != want {
		t.Fatalf("rival received %d released messages within 48 s, want %d", released(), want)
	}
	if got[acked.Load().(string)] {
		t.Error("the acked message came back")
	}
}

// TestRunnerShutdownWaitsForAcks: a runner stopped while acks are on the
// wire (each AckMessage held 300 ms by the broker) returns only once they
// were answered: every handled message is acked on the broker when Run
// returns, and no goroutine is left behind.
func TestRunnerShutdownWaitsForAcks(t *testing.T) {
	for name, mode := range map[string]rmqflow.ShutdownMode{"release": rmqflow.ShutdownRelease, "finish": rmqflow.ShutdownFinish} {
		t.Run(name, func(t *testing.T) {
			rmqtest.CheckGoroutines(t)
			r := newOrderRig(t, false)
			ctx := rmqtest.Context(t, 30*time.Second)
			const n = 8
			for i := range n {
				r.send(ctx, fmt.Sprintf("t%d", i), "m") // one lite topic each
			}
			r.fake.Intercept("AckMessage", func(rmqfake.Call) rmqfake.Verdict {
				return rmqfake.Verdict{Delay: 300 * time.Millisecond}
			})
			var handled atomic.Int64
			all := make(chan struct{})
			runner, err := rmqflow.NewRunner(r.src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
				if handled.Add(1) == n {
					close(all)
				}
				return rmqflow.Ack(), nil
			}, rmqflow.RunnerConfig{Concurrency: 4, Shutdown: mode})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- runner.Run(rctx) }()
			select {
			case <-all:
			case <-ctx.Done():
				t.Fatalf("handled %d of %d", handled.Load(), n)
			}
			cancel() // the acks are still held by the broker
			if err := <-done; err != nil {
				t.Fatalf("runner: %v", err)
			}
			if got := r.fake.Stats().Topics["main"].Counts.Acked; got != n {
				t.Fatalf("Run returned with %d of %d acks answered", got, n)
			}
			if held := rmqflow.RunnerHeld(runner); held != 0 {
				t.Fatalf("Run returned holding %d messages", held)
			}
		})
	}
}

// TestRunnerShutdownNeverDeadLetters: while Run shuts down, a message its
// handler gives back (Release, as the Benthos and Watermill integrations do
// when they close, Defer, Leave, or an error from the cancelled context) is
// given back even if a safety valve would fire: the valve is for messages
// that keep failing, and this one was never worked. Before, the valve fired
// (here: MaxDeliveryAttempt 1, so at once) and the default dead-letter
// acked the message: lost without having been processed.
func TestRunnerShutdownNeverDeadLetters(t *testing.T) {
	for _, give := range []string{"release", "defer", "leave", "error"} {
		t.Run(give, func(t *testing.T) {
			rmqtest.CheckGoroutines(t)
			fake := fakeLite(t)
			ctx := rmqtest.Context(t, 30*time.Second)
			conn := rmqflow.Connection{Endpoints: fake.Addr()}
			sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "a", Body: []byte("m")}).Wait(ctx); err != nil {
				t.Fatal(err)
			}
			_ = sink.Close(ctx)
			src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
				AwaitDuration: 5 * time.Second, InvisibleDuration: 20 * time.Second}, rmqflow.StringDecoder())
			if err != nil {
				t.Fatal(err)
			}
			entered := make(chan struct{})
			r, err := rmqflow.NewRunner(src, func(hctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
				close(entered)
				<-hctx.Done() // the shutdown's cancel (ShutdownTimeout 0: at once)
				switch give {
				case "release":
					return rmqflow.Release(), nil
				case "defer":
					return rmqflow.Defer(time.Second, "closing"), nil
				case "leave":
					return rmqflow.Leave(), nil
				}
				return rmqflow.Decision{}, hctx.Err()
			}, rmqflow.RunnerConfig{Concurrency: 1, ShutdownTimeout: time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDeliveryAttempt: 1}})
			if err != nil {
				t.Fatal(err)
			}
			var deadLettered atomic.Int32
			r.SetDeadLetter(func(context.Context, *rmqflow.AckableMessage[string], error) error {
				deadLettered.Add(1)
				return nil
			})
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			<-entered
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("runner: %v", err)
			}
			st := fake.Stats().Topics["main"]
			if deadLettered.Load() != 0 || st.Acked != 0 {
				t.Fatalf("a message given back at shutdown: dead-lettered %d times, acked %d", deadLettered.Load(), st.Acked)
			}
			if st.InFlight+st.Backlog != 1 {
				t.Fatalf("the message is neither in flight nor waiting: %+v", st.Counts)
			}
		})
	}
}

// TestRunnerShutdownFinishKeepsItsTimeout: ShutdownFinish handles what was
// fetched only within ShutdownTimeout. Once it is used up, the runner takes
// nothing more from the source and runs no handler with a dead context; what
// it did not start is given back, not lost: a second runner handles it.
func TestRunnerShutdownFinishKeepsItsTimeout(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	ctx := rmqtest.Context(t, time.Minute)
	fake := fakeLite(t)
	c := rmqflow.Connection{Endpoints: fake.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: c, Topic: "main"})
	must(t, err)
	defer sink.Close(context.Background())
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("k%d", i), Body: []byte(fmt.Sprint(i))}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	newSource := func() *rmqflow.Source[string] {
		src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
			AwaitDuration: 5 * time.Second, InvisibleDuration: 60 * time.Second}, rmqflow.StringDecoder())
		must(t, err)
		return src
	}
	var calls, dead atomic.Int64
	started := make(chan struct{}, n)
	r, err := rmqflow.NewRunner(newSource(), func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if ctx.Err() != nil {
			dead.Add(1)
		}
		calls.Add(1)
		started <- struct{}{}
		<-ctx.Done() // slow work that honours its context
		return rmqflow.Decision{}, ctx.Err()
	}, rmqflow.RunnerConfig{Concurrency: 1, MaxHeld: 2, Shutdown: rmqflow.ShutdownFinish, ShutdownTimeout: 300 * time.Millisecond})
	must(t, err)
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	<-started
	stop()
	t0 := time.Now()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("Run: %v", err)
	}
	took := time.Since(t0)
	t.Logf("Run returned %v after its cancel; handler calls %d, %d of them with a dead context", took.Round(time.Millisecond), calls.Load(), dead.Load())
	if dead.Load() != 0 {
		t.Errorf("%d handlers ran with a context already cancelled by the shutdown timeout", dead.Load())
	}
	if took > 300*time.Millisecond+rmqflow.ReleaseDelay+6*time.Second {
		t.Errorf("Run took %v after its cancel, ShutdownTimeout 300ms", took)
	}
	// Nothing was acked; everything comes back to a second runner.
	got := map[string]bool{}
	all := make(chan struct{})
	r2, err := rmqflow.NewRunner(newSource(), func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		got[m.Value] = true // Concurrency 1: one handler at a time
		if len(got) == n {
			close(all)
		}
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 1})
	must(t, err)
	rctx2, stop2 := context.WithCancel(ctx)
	go func() { ran <- r2.Run(rctx2) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Errorf("the second runner got %d of %d", len(got), n)
	}
	stop2()
	must(t, <-ran)
}
