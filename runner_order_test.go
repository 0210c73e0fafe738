package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// orderRig runs a Runner over rmqfake's lite topic "main" and records the
// bodies its handler sees, in order.
type orderRig struct {
	t      *testing.T
	fake   *rmqfake.Server // nil on the real broker
	conn   rmqflow.Connection
	topic  string
	prefix string // of this run's lite topics
	src    *rmqflow.Source[string]

	mu   sync.Mutex
	seen []string
	cond chan struct{} // signalled on every handled message
}

// targets runs f against rmqfake and against the real broker.
func targets(t *testing.T, f func(t *testing.T, r *orderRig)) {
	for _, target := range []string{"rmqfake", "real"} {
		t.Run(target, func(t *testing.T) {
			rmqtest.CheckGoroutines(t)
			f(t, newOrderRig(t, target == "real"))
		})
	}
}

func newOrderRig(t *testing.T, real bool) *orderRig {
	t.Helper()
	r := &orderRig{t: t, cond: make(chan struct{}, 1024), prefix: rmqtest.Unique("ord")}
	group := "g"
	if real {
		r.conn, r.topic, group = conn(t), "rmqflow-lite-runner", "rmqflow-lite-runner-g"
	} else {
		r.fake = fakeLite(t)
		r.conn, r.topic = rmqflow.Connection{Endpoints: r.fake.Addr()}, "main"
	}
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: r.conn, Lite: []rmqflow.LiteBinding{{Topic: r.topic, Group: group}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	r.src = src
	return r
}

// ours reports whether m belongs to this run (the real broker's group may
// hold an earlier run's leftovers).
func (r *orderRig) ours(m *rmqflow.AckableMessage[string]) bool {
	return strings.HasPrefix(m.Meta.LiteTopic, r.prefix+"-") || strings.HasPrefix(m.Meta.MessageGroup, r.prefix+"-")
}

// settled waits, on rmqfake, until n acks of this run took effect and
// nothing is in flight or waiting; on the real broker there is no such
// view, and the handler's sequence alone is checked.
func (r *orderRig) settled(ctx context.Context, n int64) {
	r.t.Helper()
	if r.fake == nil {
		return
	}
	if err := r.fake.WaitFor(ctx, allAcked(n)); err != nil {
		r.t.Fatalf("acks: %v (seen %v)", err, r.snapshot())
	}
}

// send produces bodies, in order, to lite topic lite.
func (r *orderRig) send(ctx context.Context, lite string, bodies ...string) {
	r.t.Helper()
	lite = r.prefix + "-" + lite
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: r.conn, Topic: r.topic})
	if err != nil {
		r.t.Fatal(err)
	}
	defer sink.Close(context.Background())
	for _, b := range bodies {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: lite, Body: []byte(b)}).Wait(ctx); err != nil {
			r.t.Fatalf("send %s: %v", b, err)
		}
	}
}

func (r *orderRig) record(body string) {
	r.mu.Lock()
	r.seen = append(r.seen, body)
	r.mu.Unlock()
	select {
	case r.cond <- struct{}{}:
	default:
	}
}

func (r *orderRig) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// waitUntil waits until cond holds for what was seen, or fails the test.
func (r *orderRig) waitUntil(ctx context.Context, what string, cond func([]string) bool) {
	r.t.Helper()
	for !cond(r.snapshot()) {
		select {
		case <-r.cond:
		case <-ctx.Done():
			r.t.Fatalf("%s: not within the deadline; handler saw %v", what, r.snapshot())
		}
	}
}

// run starts a runner with handler h and config cfg; it stops at test end.
func (r *orderRig) run(h rmqflow.Handler[string], cfg rmqflow.RunnerConfig, setup func(*rmqflow.Runner[string])) {
	r.t.Helper()
	runner, err := rmqflow.NewRunner(r.src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if !r.ours(m) {
			return rmqflow.Ack(), nil
		}
		return h(ctx, m)
	}, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	if setup != nil {
		setup(runner)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	r.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("runner: %v", err)
		}
	})
}

// allAcked holds once n acks of "main" took effect and nothing of it is in
// flight or waiting.
func allAcked(n int64) func(rmqfake.Stats) bool {
	return func(st rmqfake.Stats) bool {
		c := st.Topics["main"].Counts
		return c.Acked >= n && c.InFlight == 0 && c.Backlog == 0
	}
}

func count(seen []string, body string) int {
	n := 0
	for _, s := range seen {
		if s == body {
			n++
		}
	}
	return n
}

// TestRunnerKeepsOrderAfterAFailure: m1 m2 m3 of one lite topic, the handler
// fails once on m1. The runner must not go on to m2 and m3 while m1 is
// deferred: the handler sees m1, then m1 again, then m2 and m3, each of
// those once.
func TestRunnerKeepsOrderAfterAFailure(t *testing.T) { targets(t, testKeepsOrderAfterAFailure) }

func testKeepsOrderAfterAFailure(t *testing.T, r *orderRig) {
	ctx := rmqtest.Context(t, 60*time.Second)
	r.send(ctx, "a", "m1", "m2", "m3") // a backlog: one batch
	var failed sync.Once
	r.run(func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		r.record(m.Value)
		var err error
		if m.Value == "m1" {
			failed.Do(func() { err = errors.New("first try fails") })
		}
		if err != nil {
			return rmqflow.Decision{}, err
		}
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 4, ErrorBackoff: 300 * time.Millisecond}, nil)
	r.waitUntil(ctx, "m3 handled", func(s []string) bool { return count(s, "m3") > 0 })
	// Give a wrong redelivery the time to show: the lite topic's messages are
	// all acked, so nothing may come back within a further backoff.
	r.settled(ctx, 3)
	if got, want := r.snapshot(), []string{"m1", "m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
}

// TestRunnerDeadLettersAPoisonMessage: a message whose handler always fails
// ends after the error valves in the dead-letter function, once, and its
// successors are handled once each, after it, never while it is retried.
func TestRunnerDeadLettersAPoisonMessage(t *testing.T) { targets(t, testDeadLettersAPoisonMessage) }

func testDeadLettersAPoisonMessage(t *testing.T, r *orderRig) {
	ctx := rmqtest.Context(t, 90*time.Second)
	r.send(ctx, "a", "poison", "m2", "m3") // a backlog: one batch
	var (
		mu   sync.Mutex
		dead []string
	)
	r.run(func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		r.record(m.Value)
		if m.Value == "poison" {
			return rmqflow.Decision{}, fmt.Errorf("cannot handle %s", m.Value)
		}
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 4, ErrorBackoff: 200 * time.Millisecond,
		ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 2}}, func(run *rmqflow.Runner[string]) {
		run.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
			mu.Lock()
			dead = append(dead, m.Value+": "+cause.Error())
			mu.Unlock()
			return nil
		})
	})
	r.waitUntil(ctx, "m3 handled", func(s []string) bool { return count(s, "m3") > 0 })
	r.settled(ctx, 3)
	if got, want := r.snapshot(), []string{"poison", "poison", "poison", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || dead[0] != "poison: cannot handle poison" {
		t.Fatalf("dead letters %q, want the poison message once with its cause", dead)
	}
}

// TestRunnerNoDeferralAcks: a handler that defers by zero or a negative
// duration (a retry time already past), releases, or returns the zero
// Decision never acks: each message comes back.
func TestRunnerNoDeferralAcks(t *testing.T) { targets(t, testNoDeferralAcks) }

func testNoDeferralAcks(t *testing.T, r *orderRig) {
	ctx := rmqtest.Context(t, 60*time.Second)
	first := map[string]rmqflow.Decision{
		"neg":     rmqflow.Defer(-time.Second, "retry-at-past"),
		"zero":    rmqflow.Defer(0, "now"),
		"release": rmqflow.Release(),
		"nothing": {},
	}
	var mu sync.Mutex
	tried := map[string]bool{}
	r.run(func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		r.record(m.Value)
		mu.Lock()
		defer mu.Unlock()
		if !tried[m.Value] {
			tried[m.Value] = true
			return first[m.Value], nil
		}
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 4, ErrorBackoff: 200 * time.Millisecond}, nil)
	for body := range first {
		r.send(ctx, "t-"+body, body) // one lite topic each
	}
	r.waitUntil(ctx, "every message handled twice", func(s []string) bool {
		for body := range first {
			if count(s, body) < 2 {
				return false
			}
		}
		return true
	})
}

// TestRunnerNextWaitsForTheAck: the runner acks without holding its worker,
// but a lite topic's next message starts only once its predecessor's ack
// was answered OK: with m1's ack held 300 ms on the wire, the handler sees
// m2 only after the broker acked m1.
func TestRunnerNextWaitsForTheAck(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	r := newOrderRig(t, false)
	ctx := rmqtest.Context(t, 30*time.Second)
	r.send(ctx, "a", "m1", "m2", "m3") // a backlog: one batch
	var m1 atomic.Value                // m1's message id
	r.fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			if id, _ := m1.Load().(string); id != "" && e.GetMessageId() == id {
				return rmqfake.Verdict{Delay: 300 * time.Millisecond}
			}
		}
		return rmqfake.Verdict{}
	})
	var early atomic.Int64 // messages of the lite topic acked when m2 started
	r.run(func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		switch m.Value {
		case "m1":
			m1.Store(m.Meta.MessageID)
		case "m2":
			early.Store(r.fake.Stats().Topics["main"].Counts.Acked)
		}
		r.record(m.Value)
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 4}, nil)
	r.settled(ctx, 3)
	if got, want := r.snapshot(), []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
	if early.Load() < 1 {
		t.Fatalf("m2 started while m1's ack was still on the wire (broker had %d acks)", early.Load())
	}
}

// TestRunnerFailedAckKeepsOrder: m1's ack fails (the broker refuses the
// RPC; nothing is acked). The lite topic is then blocked behind m1 exactly
// as after a failed handler: m2 and m3 do not run before m1 has come back
// (after its 10 s invisibility) and been handled and acked again.
func TestRunnerFailedAckKeepsOrder(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	r := newOrderRig(t, false)
	ctx := rmqtest.Context(t, 60*time.Second)
	r.send(ctx, "a", "m1", "m2", "m3") // a backlog: one batch
	var m1 atomic.Value
	var refused atomic.Bool
	r.fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			if id, _ := m1.Load().(string); id != "" && e.GetMessageId() == id && refused.CompareAndSwap(false, true) {
				return rmqfake.Verdict{Err: status.Error(codes.PermissionDenied, "refused once")} // not retried
			}
		}
		return rmqfake.Verdict{}
	})
	r.run(func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if m.Value == "m1" {
			m1.Store(m.Meta.MessageID)
		}
		r.record(m.Value)
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 4}, nil)
	r.waitUntil(ctx, "m3 handled", func(s []string) bool { return count(s, "m3") > 0 })
	r.settled(ctx, 3)
	if !refused.Load() {
		t.Fatal("m1's ack was never refused")
	}
	if got, want := r.snapshot(), []string{"m1", "m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
}

// TestRunnerPipelineAcksStartsNextBeforeTheAnswer: with PipelineAcks, a lite
// topic's next message starts while its predecessor's ack is still on the
// wire (m1's ack held 300 ms: m2 starts with nothing acked yet), and the
// messages still run one at a time and in order.
func TestRunnerPipelineAcksStartsNextBeforeTheAnswer(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	r := newOrderRig(t, false)
	ctx := rmqtest.Context(t, 30*time.Second)
	r.send(ctx, "a", "m1", "m2", "m3") // a backlog: one batch
	var m1 atomic.Value
	r.fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			if id, _ := m1.Load().(string); id != "" && e.GetMessageId() == id {
				return rmqfake.Verdict{Delay: 300 * time.Millisecond}
			}
		}
		return rmqfake.Verdict{}
	})
	early := atomic.Int64{}
	early.Store(-1)
	var running atomic.Int32
	var overlap atomic.Bool
	r.run(func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if running.Add(1) > 1 {
			overlap.Store(true)
		}
		defer running.Add(-1)
		switch m.Value {
		case "m1":
			m1.Store(m.Meta.MessageID)
		case "m2":
			early.Store(r.fake.Stats().Topics["main"].Counts.Acked)
		}
		r.record(m.Value)
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 4, PipelineAcks: true}, nil)
	r.settled(ctx, 3)
	if got, want := r.snapshot(), []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
	if early.Load() != 0 {
		t.Fatalf("m2 started with %d acks taken by the broker, want 0: it waited for m1's answer", early.Load())
	}
	if overlap.Load() {
		t.Fatal("two messages of one lite topic ran at once")
	}
}

// TestRunnerPipelineAcksFailedAck: with PipelineAcks, m1's ack is refused
// 300 ms after m1 ran. m2, which started meanwhile, has run; m3, which the
// handler of m2 holds until the refusal was logged, has not, and is held back
// behind m1: the handler sees m1, m2, then m1 again (back after its 10 s
// invisibility) with m2 again (the broker commits a lite topic's offset only
// up to the first unacked message of a receive, so m2's ack did not keep it
// from coming back), then m3 once — the duplicates out of order that
// PipelineAcks trades for speed, and no more.
func TestRunnerPipelineAcksFailedAck(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	r := newOrderRig(t, false)
	refusedLogged := make(chan struct{})
	var logOnce sync.Once
	conn := r.conn
	conn.Logger = slog.New(&signalHandler{match: "runner could not ack a message", fire: func() { logOnce.Do(func() { close(refusedLogged) }) }})
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: r.topic, Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	_ = r.src.Close(context.Background()) // the rig's, never started: replaced by src
	r.src = src
	ctx := rmqtest.Context(t, 60*time.Second)
	r.send(ctx, "a", "m1", "m2", "m3") // a backlog: one batch
	var m1 atomic.Value
	var refused atomic.Bool
	r.fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			if id, _ := m1.Load().(string); id != "" && e.GetMessageId() == id && refused.CompareAndSwap(false, true) {
				return rmqfake.Verdict{Delay: 300 * time.Millisecond, Err: status.Error(codes.PermissionDenied, "refused once")}
			}
		}
		return rmqfake.Verdict{}
	})
	r.run(r.m1FailsHandler(&m1, refusedLogged), rmqflow.RunnerConfig{Concurrency: 4, PipelineAcks: true}, nil)
	r.waitUntil(ctx, "m3 handled", func(s []string) bool { return count(s, "m3") > 0 })
	r.settled(ctx, 3)
	if !refused.Load() {
		t.Fatal("m1's ack was never refused")
	}
	// The broker commits a lite topic's offset only up to the first unacked
	// message of a receive: m1 comes back with m2, acked after it.
	if got, want := r.snapshot(), []string{"m1", "m2", "m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
}

// m1FailsHandler is the handler of the tests in which m1's ack fails: it
// acks every message, notes m1's message id in m1, and holds m2 until wait
// is closed (unless wait is nil), so that m3 finds its key blocked behind m1.
func (r *orderRig) m1FailsHandler(m1 *atomic.Value, wait <-chan struct{}) func(context.Context, *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
	return func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		switch m.Value {
		case "m1":
			m1.Store(m.Meta.MessageID)
		case "m2":
			if wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return rmqflow.Decision{}, ctx.Err()
				}
			}
		}
		r.record(m.Value)
		return rmqflow.Ack(), nil
	}
}

// signalHandler is a slog.Handler that calls fire for each record whose
// message contains match.
type signalHandler struct {
	match string
	fire  func()
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.fire()
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

// TestRunnerPipelineAcksTwoFailedAcks: with PipelineAcks, m1, m2 and m3 of
// one lite topic run and the acks of m1 and m2 both fail, m2's after m1's
// (in one RPC, completed in request order, or m2's RPC after m1's). The
// lite topic waits for the earliest of them, m1: when the receive comes back
// (m1 m2 m3, the broker's offset stopped at m1) they run again in order. Had
// m2's failure replaced m1's as the one to wait for, m1 would have been held
// back behind m2 and run after it.
func TestRunnerPipelineAcksTwoFailedAcks(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	r := newOrderRig(t, false)
	ctx := rmqtest.Context(t, 60*time.Second)
	r.send(ctx, "a", "m1", "m2", "m3") // a backlog: one batch
	var ids sync.Map                   // message id -> body, for m1 and m2
	var refused sync.Map               // body -> true once refused
	r.fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		// Refuse, once, each ack RPC that carries m1 or m2 not refused
		// yet (with whatever else it carries): m2's refusal comes last.
		refuse := false
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			if b, ok := ids.Load(e.GetMessageId()); ok {
				if _, done := refused.LoadOrStore(b, true); !done {
					refuse = true
				}
			}
		}
		if refuse {
			return rmqfake.Verdict{Delay: time.Second, Err: status.Error(codes.PermissionDenied, "refused once")}
		}
		return rmqfake.Verdict{}
	})
	r.run(func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if m.Value == "m1" || m.Value == "m2" {
			ids.Store(m.Meta.MessageID, m.Value)
		}
		r.record(m.Value)
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 4, PipelineAcks: true}, nil)
	r.waitUntil(ctx, "m3 handled twice", func(s []string) bool { return count(s, "m3") > 1 })
	r.settled(ctx, 3)
	for _, b := range []string{"m1", "m2"} {
		if _, ok := refused.Load(b); !ok {
			t.Fatalf("%s's ack was never refused", b)
		}
	}
	if got, want := r.snapshot(), []string{"m1", "m2", "m3", "m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
}

// TestRunnerAckAppliedButReportedFailed: m1's ack takes effect on the broker,
// but its answer is lost (the runner sees an error). m1 never comes back. The
// broker hands a lite topic (a FIFO group's message group) out in order from
// its first unacked message, so a later message of it received after the
// failure shows that m1 is done: m2 and m3 must run then. Before, the runner
// held them back again every second until InvisibleDuration had passed, and
// the broker, counting each return as a delivery, dead-lettered them
// (RetryMax 3 here).
func TestRunnerAckAppliedButReportedFailed(t *testing.T) {
	for _, mode := range []string{"lite", "fifo"} {
		for _, pipelined := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/PipelineAcks=%t", mode, pipelined), func(t *testing.T) {
				rmqtest.CheckGoroutines(t)
				fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
				r := &orderRig{t: t, cond: make(chan struct{}, 1024), prefix: rmqtest.Unique("ord"), fake: fake,
					conn: rmqflow.Connection{Endpoints: fake.Addr()}, topic: "main"}
				refusedLogged := make(chan struct{})
				var logOnce sync.Once
				conn := r.conn
				conn.Logger = slog.New(&signalHandler{match: "runner could not ack a message", fire: func() { logOnce.Do(func() { close(refusedLogged) }) }})
				cfg := rmqflow.SourceConfig{Connection: conn, AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}
				record := func(body string) rmqflow.Record {
					return rmqflow.Record{LiteTopic: r.prefix + "-a", Body: []byte(body)}
				}
				if mode == "lite" {
					must(t, fake.CreateTopic("main", rmqfake.TopicLite))
					must(t, fake.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard(), rmqfake.RetryMax(3)))
					cfg.Lite = []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}
				} else {
					must(t, fake.CreateTopic("main", rmqfake.TopicFIFO, rmqfake.Queues(1)))
					must(t, fake.CreateGroup("g", rmqfake.FIFO(), rmqfake.RetryMax(3)))
					cfg.Mode, cfg.Topic, cfg.Group = rmqflow.ModeSimple, "main", "g"
					record = func(body string) rmqflow.Record {
						return rmqflow.Record{MessageGroup: r.prefix + "-a", Body: []byte(body)}
					}
				}
				src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
				if err != nil {
					t.Fatal(err)
				}
				r.src = src
				ctx := rmqtest.Context(t, 40*time.Second)
				sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: r.conn, Topic: "main"})
				must(t, err)
				for _, b := range []string{"m1", "m2", "m3"} { // a backlog: one batch
					if _, err := sink.Write(ctx, record(b)).Wait(ctx); err != nil {
						t.Fatal(err)
					}
				}
				must(t, sink.Close(ctx))
				var m1 atomic.Value
				var lost atomic.Bool
				fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
					for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
						if id, _ := m1.Load().(string); id != "" && e.GetMessageId() == id && lost.CompareAndSwap(false, true) {
							return rmqfake.Verdict{ErrAfter: status.Error(codes.PermissionDenied, "the answer was lost")}
						}
					}
					return rmqfake.Verdict{}
				})
				var wait <-chan struct{}
				if pipelined {
					wait = refusedLogged
				}
				r.run(r.m1FailsHandler(&m1, wait), rmqflow.RunnerConfig{Concurrency: 4, PipelineAcks: pipelined}, nil)
				r.waitUntil(ctx, "m3 handled", func(s []string) bool { return count(s, "m3") > 0 })
				r.settled(ctx, 3)
				if !lost.Load() {
					t.Fatal("m1's ack answer was never lost")
				}
				if got, want := r.snapshot(), []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
					t.Fatalf("handler saw %v, want %v", got, want)
				}
				if dl := fake.Stats().Topics["main"].DeadLettered; dl != 0 {
					t.Fatalf("%d messages dead-lettered", dl)
				}
			})
		}
	}
}
