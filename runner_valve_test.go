package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// valveTarget is a broker a valve test runs on: rmqfake or the real one, with
// a LITE main topic and a wildcard group of retry limit 3 (4 deliveries).
type valveTarget struct {
	conn         rmqflow.Connection
	topic, group string
	fake         *rmqfake.Server // nil on the real broker
}

func valveTargets(t *testing.T, f func(t *testing.T, tg valveTarget)) {
	t.Run("rmqfake", func(t *testing.T) {
		fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
		must(t, fake.CreateTopic("w", rmqfake.TopicLite))
		must(t, fake.CreateGroup("w-g", rmqfake.LiteBind("w"), rmqfake.Wildcard(), rmqfake.RetryMax(3)))
		f(t, valveTarget{conn: rmqflow.Connection{Endpoints: fake.Addr()}, topic: "w", group: "w-g", fake: fake})
	})
	t.Run("real", func(t *testing.T) {
		ep := rmqtest.Endpoint(t)
		f(t, valveTarget{conn: rmqflow.Connection{Endpoints: ep}, topic: rmqtest.LiteTopic("w"), group: rmqtest.LiteGroup("w")})
	})
}

// TestRunnerJudgesByOwnFailures is issue 24's core scenario: lite topic L
// holds A then B on a group of retry limit 3; A always fails, B fails once
// and then succeeds. B was dead-lettered — by default acked and dropped —
// after one handler run of its own, because the valve read the delivery
// count B had spent waiting behind A. Now the valves count A's own
// failures only, A goes to the group's dead-letter queue on the broker (not
// acked by the runner) early enough for B to keep deliveries of its own,
// and B is handled successfully once its own failure passed: 0 dropped.
func TestRunnerJudgesByOwnFailures(t *testing.T) {
	valveTargets(t, func(t *testing.T, tg valveTarget) {
		ctx := rmqtest.Context(t, 2*time.Minute)
		lite := rmqtest.Unique("ab")
		sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: tg.conn, Topic: tg.topic})
		must(t, err)
		defer sink.Close(context.Background())
		for _, b := range []string{"A", "B"} {
			if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: lite, Body: []byte(b)}).Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		meter := &counterMeter{}
		conn := tg.conn
		conn.Meter = meter
		src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: tg.topic, Group: tg.group}},
			AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
		must(t, err)
		var (
			mu       sync.Mutex
			runs     = map[string]int{}
			trace    []string
			bDone    = make(chan struct{})
			aBack    = make(chan struct{})
			backOnce sync.Once
		)
		h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
			if m.Meta.LiteTopic != lite {
				return rmqflow.Ack(), nil // an earlier run's leftovers on the real broker
			}
			mu.Lock()
			defer mu.Unlock()
			trace = append(trace, fmt.Sprintf("%s@%d%s", m.Value, m.Meta.DeliveryAttempt, map[bool]string{true: "(dlq)"}[m.Meta.DeadLettered()]))
			if m.Meta.DeadLettered() {
				if m.Value == "A" {
					backOnce.Do(func() { close(aBack) }) // readable back from %DLQ%<group>
				} else {
					t.Errorf("%s came back from the dead-letter queue %s", m.Value, m.Meta.Topic)
				}
				return rmqflow.Leave(), nil
			}
			runs[m.Value]++
			switch {
			case m.Value == "A":
				return rmqflow.Decision{}, errors.New("A always fails")
			case runs["B"] == 1:
				return rmqflow.Decision{}, errors.New("B fails once")
			}
			close(bDone)
			return rmqflow.Ack(), nil
		}
		r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 2, ErrorBackoff: 100 * time.Millisecond})
		must(t, err)
		rctx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- r.Run(rctx) }()
		for _, c := range []struct {
			what string
			ch   chan struct{}
		}{{"B handled successfully", bDone}, {"A delivered back from the dead-letter queue", aBack}} {
			select {
			case <-c.ch:
			case <-ctx.Done():
				mu.Lock()
				t.Errorf("%s: timed out; handler runs %v", c.what, trace)
				mu.Unlock()
			}
		}
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("handler runs: %v", trace)
		if runs["B"] != 2 {
			t.Errorf("B ran %d times, want 2 (fails once, then acked)", runs["B"])
		}
		if n := meter.sum(rmqflow.MetricDeadLettered, "to", "broker-dlq"); n != 1 {
			t.Errorf("%s{to=broker-dlq} = %d, want 1 (A)", rmqflow.MetricDeadLettered, n)
		}
		if n := meter.sum(rmqflow.MetricDeadLettered, "to", "dropped"); n != 0 {
			t.Errorf("%s{to=dropped} = %d, want 0", rmqflow.MetricDeadLettered, n)
		}
		if tg.fake != nil {
			st := tg.fake.Stats().Groups[tg.group]
			t.Logf("rmqfake group counts: %+v", st.Counts)
			if st.DeadLettered != 1 {
				t.Errorf("rmqfake dead-lettered %d messages, want 1 (A)", st.DeadLettered)
			}
		}
	})
}

// TestDeadLetterToSink: a message given up on is written to a topic of the
// user's own, with where it came from and why, and acked only once stored:
// the lite topic's next message then runs, and nothing is left anywhere.
func TestDeadLetterToSink(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	ctx := rmqtest.Context(t, time.Minute)
	rig := newParkRig(t, ctx, fakeLite(t))
	for _, b := range []string{"poison", "fine"} {
		rig.write(t, ctx, b, "key-"+b)
	}
	fine := make(chan struct{})
	r, err := rmqflow.NewRunner(rig.source(t), func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if m.Value == "poison" {
			return rmqflow.Decision{}, errors.New("cannot parse")
		}
		close(fine)
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{ErrorBackoff: 10 * time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 2}})
	must(t, err)
	r.SetDeadLetter(rmqflow.DeadLetterToSink[string](rig.dlq))
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	select {
	case <-fine:
	case <-ctx.Done():
		t.Fatal("the message behind the poisoned one never ran")
	}
	stop()
	must(t, <-ran)

	m := rig.readParked(t, ctx)
	p := m.Meta.Properties
	if m.Value != "poison" || p[rmqflow.PropertyDeadLetterLiteTopic] != "k" || p[rmqflow.PropertyDeadLetterOrigin] != "main" ||
		p[rmqflow.PropertyDeadLetterCause] != "cannot parse" || p[rmqflow.PropertyDeadLetterMessageID] == "" || fmt.Sprint(m.Meta.Keys) != "[key-poison]" {
		t.Errorf("parked copy: body %q keys %v properties %v", m.Value, m.Meta.Keys, p)
	}
	if c := rig.fake.Stats().Topics["main"].Counts; c.Backlog != 0 || c.InFlight != 0 || c.DeadLettered != 0 || c.Acked != 2 {
		t.Errorf("main topic counts %+v: want both acked, nothing in the broker's DLQ", c)
	}
}
