package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerDeadLetterFailureRetries: docs/grpc-connector.md says the
// dead-letter function's message is acked when the function returns nil and
// retried later when it fails. Here it fails once, panics once (recovered:
// a failure too), then returns nil. Nothing acks the message before the nil;
// each retry comes after the deferral of min(ErrorBackoffMax,
// MaxDeferDuration) (300 ms), well before the 10 s invisibility would have
// brought it back, and after the handler failed again on the returned
// message; the message is acked once, after the nil.
func TestRunnerDeadLetterFailureRetries(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	fake := fakeLite(t)
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	ctx := rmqtest.Context(t, 30*time.Second)

	const backoffMax = 300 * time.Millisecond
	var (
		mu      sync.Mutex
		id      string      // the message's id, once the handler saw it
		calls   []time.Time // dead-letter calls
		ok      bool        // the dead-letter function is returning nil
		handled int         // handler calls
		early   int         // ack entries for id before that
		acks    int         // ack entries for id in all
		settled = make(chan struct{})
	)
	fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			if id == "" || e.GetMessageId() != id {
				continue
			}
			acks++
			if !ok {
				early++
			}
			if acks == 1 && ok {
				close(settled)
			}
		}
		return rmqfake.Verdict{}
	})

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		mu.Lock()
		id = m.Meta.MessageID
		handled++
		mu.Unlock()
		return rmqflow.Decision{}, errors.New("always fails")
	}, rmqflow.RunnerConfig{ErrorBackoff: 100 * time.Millisecond, ErrorBackoffMax: backoffMax,
		ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}})
	must(t, err)
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		mu.Lock()
		calls = append(calls, time.Now())
		n := len(calls)
		if acks > 0 {
			t.Errorf("dead-letter call %d: the message was already acked %d times", n, acks)
		}
		ok = n == 3
		mu.Unlock()
		switch n {
		case 1:
			return errors.New("parking failed")
		case 2:
			panic("parking panicked")
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	must(t, err)
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "a", Body: []byte("m")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settled:
	case <-ctx.Done():
		t.Error("the message was not acked after the dead-letter function returned nil")
	}
	time.Sleep(500 * time.Millisecond) // a second ack would come now
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Fatalf("dead-letter function called %d times, want 3 (error, panic, nil)", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); gap < backoffMax*8/10 || gap > 5*time.Second {
			t.Errorf("dead-letter call %d came %v after the one before, want about ErrorBackoffMax (%v), not the 10 s invisibility", i+1, gap, backoffMax)
		}
	}
	if handled != 4 {
		t.Errorf("handler called %d times, want 4: once deferred, then once before each dead-letter call (the message comes back through it)", handled)
	}
	if early != 0 || acks != 1 {
		t.Errorf("ack entries for the message: %d before the function returned nil, %d in all; want 0 and 1", early, acks)
	}
	if st := fake.Stats().Groups["g"]; st.Acked != 1 || st.InFlight != 0 || st.Backlog != 0 {
		t.Errorf("group counts %+v, want the one message acked", st.Counts)
	}
}

// logText records every log record as one line of text: its message and
// its attributes.
type logText struct {
	mu    sync.Mutex
	lines []string
}

func (l *logText) Enabled(context.Context, slog.Level) bool { return true }
func (l *logText) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	return nil
}
func (l *logText) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logText) WithGroup(string) slog.Handler      { return l }

// with returns the lines that contain s.
func (l *logText) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// TestRunnerDeadLetterKeepsFailing: a dead-letter function that fails for
// every message (a park topic that refuses every copy) must not keep a
// message, and its lite topic, coming back for ever. The handler always
// fails; after its first failure a valve fires (MaxDefers 1), and the
// function fails each time. After DefaultMaxDeadLetterFailures (3) failed
// parks the message goes where ErrorValves.OnValve says: by default the
// group's dead-letter queue on the broker (ForwardMessageToDeadLetterQueue),
// counted as to=broker-dlq, logged with its handle (never its body), and
// nothing dropped. Before, the runner deferred it and called the function
// again on every return, until the broker's own retry limit moved it, and
// then again for the copy the dead-letter queue dispatches back into the
// lite topic.
//
// It runs on the valve targets (retry limit 3) and on rmqfake with the
// default retry limit 16, where before the fix the broker's own limit took
// 16 deliveries to end the loop.
func TestRunnerDeadLetterKeepsFailing(t *testing.T) {
	valveTargets(t, runDeadLetterKeepsFailing)
	t.Run("rmqfake-retry16", func(t *testing.T) {
		fake := fakeLite(t)
		runDeadLetterKeepsFailing(t, valveTarget{conn: rmqflow.Connection{Endpoints: fake.Addr()}, topic: "main", group: "g", fake: fake})
	})
}

func runDeadLetterKeepsFailing(t *testing.T, tg valveTarget) {
	{
		ctx := rmqtest.Context(t, 2*time.Minute)
		lite := rmqtest.Unique("dlfail")
		const body = "secret-body-dlfail"
		sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: tg.conn, Topic: tg.topic})
		must(t, err)
		defer sink.Close(context.Background())
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: lite, Body: []byte(body)}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		meter, log := &counterMeter{}, &logText{}
		conn := tg.conn
		conn.Meter, conn.Logger = meter, slog.New(log)
		src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: tg.topic, Group: tg.group}},
			AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
		must(t, err)
		var (
			mu                   sync.Mutex
			runs, parks, fromDLQ int
			id                   string
			back                 = make(chan struct{})
			backOnce             sync.Once
		)
		r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
			if m.Meta.LiteTopic != lite {
				return rmqflow.Ack(), nil // an earlier run's leftovers on the real broker
			}
			mu.Lock()
			defer mu.Unlock()
			if m.Meta.DeadLettered() {
				fromDLQ++
				backOnce.Do(func() { close(back) }) // the copy in %DLQ%<group>, dispatched back
				return rmqflow.Leave(), nil
			}
			runs++
			id = m.Meta.MessageID
			return rmqflow.Decision{}, errors.New("cannot parse")
		}, rmqflow.RunnerConfig{ErrorBackoff: 100 * time.Millisecond, ErrorBackoffMax: 300 * time.Millisecond,
			ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}})
		must(t, err)
		r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
			mu.Lock()
			defer mu.Unlock()
			parks++
			return errors.New("test: the park topic refuses every copy")
		})
		rctx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- r.Run(rctx) }()
		// Bounded: before the fix the parks went on for as long as it ran.
		deadline := time.NewTimer(40 * time.Second)
		defer deadline.Stop()
		select {
		case <-back:
		case <-deadline.C:
		case <-ctx.Done():
		}
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("handler runs %d, failed parks %d, deliveries back from %%DLQ%% %d; dead-lettered to=broker-dlq %d, to=function-failed %d, to=function %d, to=left %d, to=dropped %d",
			runs, parks, fromDLQ, meter.sum(rmqflow.MetricDeadLettered, "to", "broker-dlq"), meter.sum(rmqflow.MetricDeadLettered, "to", "function-failed"),
			meter.sum(rmqflow.MetricDeadLettered, "to", "function"), meter.sum(rmqflow.MetricDeadLettered, "to", "left"), meter.sum(rmqflow.MetricDeadLettered, "to", "dropped"))
		if parks != rmqflow.DefaultMaxDeadLetterFailures {
			t.Errorf("the dead-letter function was called %d times, want %d (then the message goes where OnValve says)", parks, rmqflow.DefaultMaxDeadLetterFailures)
		}
		if runs != 1+rmqflow.DefaultMaxDeadLetterFailures {
			t.Errorf("the handler ran %d times, want %d: one deferral, then once before each failed park", runs, 1+rmqflow.DefaultMaxDeadLetterFailures)
		}
		if fromDLQ == 0 {
			t.Errorf("the message never came back from %%DLQ%%<group>")
		}
		for _, c := range []struct {
			to   string
			want int64
		}{{"broker-dlq", 1}, {"function-failed", int64(rmqflow.DefaultMaxDeadLetterFailures)}, {"function", 0}, {"left", 0}, {"dropped", 0}} {
			if n := meter.sum(rmqflow.MetricDeadLettered, "to", c.to); n != c.want {
				t.Errorf("%s{to=%s} = %d, want %d", rmqflow.MetricDeadLettered, c.to, n, c.want)
			}
		}
		lines := log.with("dead-letter function failed " + fmt.Sprint(rmqflow.DefaultMaxDeadLetterFailures) + " times for a message")
		if len(lines) != 1 || !strings.Contains(lines[0], id) || !strings.Contains(lines[0], "handle=") {
			t.Errorf("fallback log lines %q: want one, with the message's handle", lines)
		}
		if leaked := log.with(body); len(leaked) > 0 {
			t.Errorf("the body was logged: %q", leaked)
		}
		if tg.fake != nil {
			if st := tg.fake.Stats().Groups[tg.group]; st.DeadLettered != 1 {
				t.Errorf("rmqfake dead-lettered %d messages, want 1", st.DeadLettered)
			}
		}
	}
}
