package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
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

// handlerTrace records the handler starts and ends of one lite topic, over
// every consumer of its group, in the order they happened.
type handlerTrace struct {
	mu      sync.Mutex
	ev      []handlerEvent
	running map[int]int // copies of message i being handled
}

type handlerEvent struct {
	who     string // the consumer
	start   bool
	i       int   // the message's index in its lite topic (m<i>)
	attempt int32 // Metadata.DeliveryAttempt
	handle  string
	// faults found when this event was recorded
	fault string
}

func (e handlerEvent) String() string {
	kind := "end"
	if e.start {
		kind = "start"
	}
	s := fmt.Sprintf("%s:%s m%d@%d h=%s", e.who, kind, e.i, e.attempt, e.handle)
	if e.fault != "" {
		s += " <- " + e.fault
	}
	return s
}

// shortHandle names a broker receipt handle in a trace.
func shortHandle(h string) string {
	f := fnv.New32a()
	f.Write([]byte(h))
	return fmt.Sprintf("%04x", f.Sum32()&0xffff)
}

// start records a start of message i and names what it breaks: (a) another
// copy of i being handled at the same time, (b) an earlier message being
// handled still, (c) i handled again after a later message was started.
func (tr *handlerTrace) start(who string, i int, attempt int32, handle string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var faults []string
	if tr.running[i] > 0 {
		faults = append(faults, fmt.Sprintf("(a) another copy of m%d is being handled", i))
	}
	for j, n := range tr.running {
		if j < i && n > 0 {
			faults = append(faults, fmt.Sprintf("(b) m%d is still being handled", j))
		}
	}
	for _, e := range tr.ev {
		if e.start && e.i > i {
			faults = append(faults, fmt.Sprintf("(c) m%d started before", e.i))
			break
		}
	}
	tr.running[i]++
	tr.ev = append(tr.ev, handlerEvent{who: who, start: true, i: i, attempt: attempt, handle: shortHandle(handle), fault: strings.Join(faults, ", ")})
}

func (tr *handlerTrace) end(who string, i int, attempt int32, handle string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.running[i]--
	tr.ev = append(tr.ev, handlerEvent{who: who, i: i, attempt: attempt, handle: shortHandle(handle)})
}

func (tr *handlerTrace) events() []handlerEvent {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]handlerEvent(nil), tr.ev...)
}

// starts lists the starts as "who:m<i>@<attempt>".
func (tr *handlerTrace) starts() []string {
	var out []string
	for _, e := range tr.events() {
		if e.start {
			out = append(out, fmt.Sprintf("%s:m%d@%d", e.who, e.i, e.attempt))
		}
	}
	return out
}

func (tr *handlerTrace) String() string {
	var b strings.Builder
	for _, e := range tr.events() {
		b.WriteString("\n  " + e.String())
	}
	return b.String()
}

// TestRunnerSkipsALostDelivery: a Runner holds a lite topic's batch m0..m4,
// m0 in its handler, the others waiting behind it. The renewals of m1..m4
// come too late (the broker takes 3 s over each, past their invisibility)
// and the broker refuses them as expired handles: those deliveries are no
// longer the runner's, and the broker hands m1..m4 out again once m0 is
// acked. The runner must not start its stale copies: run alone, it would
// handle m1 twice (the stale copy's ack fails, so the lite topic still keeps
// its order); with a second consumer of the group, which receives the new
// copies, the stale m1 would run while the other consumer handles m1 and its
// successors. On rmqfake, on a manual clock.
func TestRunnerSkipsALostDelivery(t *testing.T) {
	for _, consumers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d consumers", consumers), func(t *testing.T) {
			testRunnerSkipsALostDelivery(t, consumers)
		})
	}
}

func testRunnerSkipsALostDelivery(t *testing.T, consumers int) {
	rmqtest.CheckGoroutines(t)
	ctx := rmqtest.Context(t, time.Minute)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mc := rmqfake.NewManualClock(t0)
	s := rmqfake.NewForTest(t, rmqfake.WithClock(mc), rmqfake.FastLiteDispatch())
	must(t, s.CreateTopic("main", rmqfake.TopicLite))
	must(t, s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()))
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "main"})
	must(t, err)
	const n = 5
	index := map[string]int{} // message id -> i
	for i := range n {
		id, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "k", Body: []byte(fmt.Sprint(i))}).Wait(ctx)
		must(t, err)
		index[id] = i
	}
	must(t, sink.Close(ctx))

	// The renewals of m1..m4 are held 3 s by the broker once late is set:
	// sent 2 s before the invisibility ends, they reach it 1 s after.
	var (
		late    atomic.Bool
		arrived atomic.Int64 // renewals of m1..m4 held; of m0, let through
		m0Once  atomic.Bool
	)
	s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		req := c.Request.(*v2.ChangeInvisibleDurationRequest)
		if !late.Load() || req.GetInvisibleDuration().AsDuration() != 10*time.Second {
			return rmqfake.Verdict{}
		}
		if index[req.GetMessageId()] == 0 {
			if m0Once.CompareAndSwap(false, true) {
				arrived.Add(1)
			}
			return rmqfake.Verdict{}
		}
		arrived.Add(1)
		return rmqfake.Verdict{Delay: 3 * time.Second}
	})
	// With a second consumer, the runner's own receives are refused once
	// its batch is held, so that the other consumer gets the new copies.
	var (
		refuseA atomic.Bool
		idsMu   sync.Mutex
		idsA    = map[string]bool{}
	)
	s.Intercept("ReceiveMessage", func(c rmqfake.Call) rmqfake.Verdict {
		idsMu.Lock()
		defer idsMu.Unlock()
		if refuseA.Load() && idsA[c.ClientID] {
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "test: this consumer is cut off")}
		}
		if !refuseA.Load() {
			idsA[c.ClientID] = true
		}
		return rmqfake.Verdict{}
	})

	logs := &syncBuffer{}
	lost := make(chan struct{}, 16)
	logger := slog.New(&teeHandler{Handler: slog.NewTextHandler(logs, nil), match: "lease lost", fire: func() { lost <- struct{}{} }})
	conn := rmqflow.Connection{Endpoints: s.Addr(), Logger: logger}
	scfg := rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second, AwaitDuration: 5 * time.Second, MaxMessageNum: 16}
	srcA, err := rmqflow.NewSource(scfg, rmqflow.StringDecoder())
	must(t, err)
	attachClock(srcA, mc, 500*time.Millisecond)

	tr := &handlerTrace{running: map[int]int{}}
	gate := make(chan struct{})      // m0's first handling waits for it
	m0Started := make(chan struct{}) // m0's first handling began
	startedM0 := sync.OnceFunc(func() { close(m0Started) })
	otherDone := make(chan struct{}) // the other consumer handled m1..m4
	idx := func(m *rmqflow.AckableMessage[string]) int {
		var i int
		fmt.Sscan(m.Value, &i)
		return i
	}
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		i := idx(m)
		tr.start("A", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
		defer tr.end("A", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
		switch {
		case i == 0 && m.Meta.DeliveryAttempt == 1:
			startedM0()
			select {
			case <-gate:
			case <-ctx.Done():
			}
		case consumers == 2 && m.Meta.DeliveryAttempt == 1:
			// A stale copy, if the runner starts one, takes as long as
			// the other consumer takes over the new ones.
			select {
			case <-otherDone:
			case <-ctx.Done():
			}
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(srcA, h, rmqflow.RunnerConfig{Concurrency: 2})
	must(t, err)
	rmqflow.SetRunnerClock(r, mc.Now)
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	stopped := false
	stopA := func() {
		if stopped {
			return
		}
		stopped = true
		select {
		case <-gate:
		default:
			close(gate)
		}
		stop()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("runner A: %v", err) // a release of a stale copy may fail; not the point here
		}
	}
	defer stopA()
	waitHeld(t, ctx, r, func(n int64) bool { return n == 5 })
	// The runner counts a message held when it receives it; its handler
	// starts a moment later, on a worker.
	select {
	case <-m0Started:
	case <-ctx.Done():
		t.Fatalf("m0's handler never started; started %v", tr.starts())
	}
	if got := tr.starts(); fmt.Sprint(got) != "[A:m0@1]" {
		t.Fatalf("started %v, want [A:m0@1]", got)
	}

	if consumers == 2 {
		refuseA.Store(true)
		srcB, err := rmqflow.NewSource(scfg, rmqflow.StringDecoder())
		must(t, err)
		attachClock(srcB, mc, 500*time.Millisecond)
		must(t, srcB.Start(ctx))
		defer srcB.Close(context.Background())
		go func() {
			handled := 0
			for handled < n-1 {
				m, err := srcB.Next(ctx)
				if err != nil {
					return
				}
				i := idx(m)
				tr.start("B", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
				err = srcB.Acker().Ack(ctx, m.Handle)
				tr.end("B", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
				if err != nil {
					t.Errorf("B: ack m%d: %v", i, err)
				}
				if i > 0 {
					handled++
				}
			}
			close(otherDone)
		}()
	}

	// On to T0+11.5 s: m0's renewal (due at T0+8 s) gets through, those of
	// m1..m4 reach the broker at T0+11 s, 1 s after their invisibility
	// ended, and are refused.
	late.Store(true)
	for mc.Now().Before(t0.Add(8 * time.Second)) {
		mc.Advance(500 * time.Millisecond)
		time.Sleep(2 * time.Millisecond) // let the renewers take each tick
	}
	// Due at T0+8 s: the five renewals reach the broker before T0+9.5 s.
	for arrived.Load() < n {
		if mc.Now().After(t0.Add(9500 * time.Millisecond)) {
			t.Fatalf("%d of %d renewals reached the broker by %v", arrived.Load(), n, mc.Now().Sub(t0))
		}
		time.Sleep(20 * time.Millisecond)
		mc.Advance(100 * time.Millisecond)
	}
	for mc.Now().Before(t0.Add(11500 * time.Millisecond)) {
		mc.Advance(500 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	// A renewal that reached the broker late under load waits for more of
	// the clock: go on in small steps (m0 stays invisible until T0+18 s).
	for k := 0; k < n-1; {
		select {
		case <-lost:
			k++
		case <-time.After(50 * time.Millisecond):
			if mc.Now().After(t0.Add(15 * time.Second)) {
				t.Fatalf("%d of %d leases lost by %v; logs:\n%s", k, n-1, mc.Now().Sub(t0), logs)
			}
			mc.Advance(250 * time.Millisecond)
		}
	}
	late.Store(false)

	// m0's handler acks (its own lease held); the broker then hands out
	// m1..m4 again.
	close(gate)
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Groups["g"].Acked < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acked on the broker; handler trace:%s", s.Stats().Groups["g"].Acked, n, tr)
		}
		time.Sleep(20 * time.Millisecond)
		mc.Advance(100 * time.Millisecond) // the long polls' and hold-backs' time
	}
	if consumers == 2 {
		select {
		case <-otherDone:
		case <-time.After(10 * time.Second):
			t.Fatalf("the other consumer did not handle m1..m4; trace:%s", tr)
		}
	}
	stopA()
	t.Logf("handler trace (who:start|end m<i>@<attempt> h=<receipt handle>):%s", tr)

	for _, e := range tr.events() {
		if e.who == "A" && e.start && e.i > 0 && e.attempt == 1 {
			t.Errorf("runner started m%d@1, a delivery the broker had refused to renew as expired (it had handed it out again)", e.i)
		}
		if e.fault != "" {
			t.Errorf("%s", e)
		}
	}
	want := "[A:m0@1 A:m1@2 A:m2@2 A:m3@2 A:m4@2]"
	if consumers == 2 {
		want = "[A:m0@1 B:m1@2 B:m2@2 B:m3@2 B:m4@2]"
	}
	if got := fmt.Sprint(tr.starts()); got != want {
		t.Errorf("handler starts %s, want %s", got, want)
	}
}

// TestRunnerTakesTheNewCopyOfAStaleHead: every renewal of a held batch
// m0..m4 fails (the broker is unreachable for them) until its invisibility
// has ended, m0 still in its handler: the broker hands the batch out again
// and the runner, which has room, holds both copies of each message. The
// stale copies are superseded: m0's stale ack fails, and the runner must go
// on with the new copies it holds, in order, without running the stale
// m1..m4 and without sending the new copies back to the broker first
// (before: hold-backs of the new copies, a third delivery of the batch).
func TestRunnerTakesTheNewCopyOfAStaleHead(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	ctx := rmqtest.Context(t, time.Minute)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mc := rmqfake.NewManualClock(t0)
	s := rmqfake.NewForTest(t, rmqfake.WithClock(mc), rmqfake.FastLiteDispatch())
	must(t, s.CreateTopic("main", rmqfake.TopicLite))
	must(t, s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()))
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "main"})
	must(t, err)
	const n = 5
	for i := range n {
		_, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "k", Body: []byte(fmt.Sprint(i))}).Wait(ctx)
		must(t, err)
	}
	must(t, sink.Close(ctx))
	var late atomic.Bool
	var holdBacks atomic.Int64
	var (
		ackMu sync.Mutex
		acks  []string // short receipt handles of the ack entries the broker received
	)
	s.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		ackMu.Lock()
		defer ackMu.Unlock()
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			acks = append(acks, shortHandle(e.GetReceiptHandle()))
		}
		return rmqfake.Verdict{}
	})
	s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		d := c.Request.(*v2.ChangeInvisibleDurationRequest).GetInvisibleDuration().AsDuration()
		if late.Load() && d == 10*time.Second {
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "test: renewal lost")}
		}
		if d != 10*time.Second {
			holdBacks.Add(1)
		}
		return rmqfake.Verdict{}
	})
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), Logger: slog.New(slog.DiscardHandler)},
		Lite:              []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second, AwaitDuration: 5 * time.Second, MaxMessageNum: 16},
		rmqflow.StringDecoder())
	must(t, err)
	attachClock(src, mc, 500*time.Millisecond)
	tr := &handlerTrace{running: map[int]int{}}
	gate := make(chan struct{})
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		var i int
		fmt.Sscan(m.Value, &i)
		tr.start("A", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
		defer tr.end("A", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
		if i == 0 && m.Meta.DeliveryAttempt == 1 {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 2})
	must(t, err)
	rmqflow.SetRunnerClock(r, mc.Now)
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		stop()
		<-ran
	}()
	waitHeld(t, ctx, r, func(n int64) bool { return n == 5 })
	late.Store(true)
	for mc.Now().Before(t0.Add(10500 * time.Millisecond)) {
		mc.Advance(500 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	// The broker hands the batch out again once it is visible; the clock
	// goes on in small steps meanwhile, so that no long poll waits for it.
	for rmqflow.RunnerHeld(r) < 2*n {
		if mc.Now().After(t0.Add(25 * time.Second)) {
			t.Fatalf("runner holds %d messages at %v, want %d: the stale copies and the new ones", rmqflow.RunnerHeld(r), mc.Now().Sub(t0), 2*n)
		}
		time.Sleep(20 * time.Millisecond)
		mc.Advance(100 * time.Millisecond)
	}
	late.Store(false)
	close(gate)
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Groups["g"].Acked < n || rmqflow.RunnerHeld(r) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acked on the broker, runner holds %d; handler trace:%s", s.Stats().Groups["g"].Acked, n, rmqflow.RunnerHeld(r), tr)
		}
		time.Sleep(20 * time.Millisecond)
		mc.Advance(100 * time.Millisecond)
	}
	t.Logf("handler trace:%s\nhold-backs and other changes sent: %d", tr, holdBacks.Load())
	for _, e := range tr.events() {
		if e.fault != "" {
			t.Errorf("%s", e)
		}
	}
	// The new copies are attempt 2 (3 if a receive's answer was lost
	// under load and the broker handed the batch out once more).
	starts := tr.starts()
	want := "[A:m0@1 A:m0@2 A:m1@2 A:m2@2 A:m3@2 A:m4@2]"
	if len(starts) == 6 && strings.HasPrefix(starts[1], "A:m0@3") {
		want = strings.ReplaceAll(want, "@2", "@3")
	}
	if got := fmt.Sprint(starts); got != want {
		t.Errorf("handler starts %s, want %s", got, want)
	}
	if got := holdBacks.Load(); got != 0 {
		t.Errorf("%d copies held back or released; want none: the new copies are the ones to run", got)
	}
	// Each ack carries the handle of the copy its handler ran, once: the
	// stale m0's its own (refused), never a new copy's, and no stale
	// m1..m4's.
	var handled []string
	for _, e := range tr.events() {
		if e.start {
			handled = append(handled, e.handle)
		}
	}
	ackMu.Lock()
	defer ackMu.Unlock()
	if fmt.Sprint(acks) != fmt.Sprint(handled) {
		t.Errorf("acks sent with handles %v, want those of the copies handled, in order: %v", acks, handled)
	}
}

// TestRunnerSkipsALostDeliveryBothTargets is TestRunnerSkipsALostDelivery's
// one-consumer case on the wall clock, on rmqfake and on RocketMQ 5.5.0: the
// renewals of m1..m4 are held in this process (a test hook) until 1.5 s
// after their invisibility ended, so the broker refuses them as expired and,
// once m0 is acked, hands m1..m4 out again. The runner must start none of
// the copies whose renewal was refused, and handle the new ones in order.
func TestRunnerSkipsALostDeliveryBothTargets(t *testing.T) {
	for _, target := range []string{"rmqfake", "real"} {
		t.Run(target, func(t *testing.T) {
			rmqtest.CheckGoroutines(t)
			var c rmqflow.Connection
			topic, group := "rmqflow-lite-lost", "rmqflow-lite-lost-g"
			if target == "real" {
				c = conn(t)
			} else {
				s := fakeLite(t)
				c, topic, group = rmqflow.Connection{Endpoints: s.Addr()}, "main", "g"
			}
			testLostDeliveryWallClock(t, c, topic, group)
		})
	}
}

func testLostDeliveryWallClock(t *testing.T, c rmqflow.Connection, topic, group string) {
	ctx := rmqtest.Context(t, 90*time.Second)
	lite := rmqtest.Unique("lost")
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: c, Topic: topic})
	must(t, err)
	const n = 5
	index := map[string]int{}
	for i := range n {
		id, err := sink.Write(ctx, rmqflow.Record{LiteTopic: lite, Body: []byte(fmt.Sprint(i))}).Wait(ctx)
		must(t, err)
		index[id] = i
	}
	must(t, sink.Close(ctx))

	logs := &syncBuffer{}
	lostLog := make(chan struct{}, 16)
	c.Logger = slog.New(&teeHandler{Handler: slog.NewTextHandler(logs, nil), match: "lease lost", fire: func() { lostLog <- struct{}{} }})
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second, AwaitDuration: 5 * time.Second, MaxMessageNum: 16},
		rmqflow.StringDecoder())
	must(t, err)
	tr := &handlerTrace{running: map[int]int{}}
	var (
		mu        sync.Mutex
		lostHands = map[string]bool{} // the receipt handles whose renewal is made late
		done      = make(chan struct{})
		doneOnce  sync.Once
	)
	allLost := make(chan struct{})
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if m.Meta.LiteTopic != lite {
			return rmqflow.Release(), nil // not this run's (an earlier run's leftover)
		}
		i, ok := index[m.Meta.MessageID]
		if !ok {
			return rmqflow.Release(), nil
		}
		tr.start("A", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
		defer tr.end("A", i, m.Meta.DeliveryAttempt, m.Handle.Handle)
		if i == 0 {
			select {
			case <-allLost:
			case <-ctx.Done():
			}
		}
		mu.Lock()
		stale := lostHands[m.Handle.Handle]
		mu.Unlock()
		if i == n-1 && !stale {
			doneOnce.Do(func() { close(done) })
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 2})
	must(t, err)
	rmqflow.SetLeaseRenewHook(src, func(rh rmqflow.ReceiptHandle, visibleAt time.Time) {
		if i, ok := index[rh.MessageID]; !ok || i == 0 || rh.DeliveryAttempt > 1 {
			return
		}
		mu.Lock()
		lostHands[rh.Handle] = true
		mu.Unlock()
		// The injected lateness: this renewal reaches the broker 1.5 s after
		// the invisibility it was to extend ended.
		select {
		case <-time.After(time.Until(visibleAt.Add(1500 * time.Millisecond))):
		case <-ctx.Done():
		}
	})
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Logf("runner: %v", err)
		}
	}()
	for k := 0; k < n-1; k++ {
		select {
		case <-lostLog:
		case <-ctx.Done():
			t.Fatalf("%d of %d leases lost; trace:%s\nlogs:\n%s", k, n-1, tr, logs)
		}
	}
	close(allLost)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("m%d's new copy not handled; trace:%s\nlogs:\n%s", n-1, tr, logs)
	}
	t.Logf("handler trace:%s", tr)
	var order []int
	for _, e := range tr.events() {
		if e.fault != "" {
			t.Errorf("%s", e)
		}
		if !e.start {
			continue
		}
		mu.Lock()
		for hd := range lostHands {
			if shortHandle(hd) == e.handle {
				t.Errorf("runner started m%d with a handle whose renewal the broker refused as expired (%s)", e.i, e)
			}
		}
		mu.Unlock()
		order = append(order, e.i)
	}
	if got := fmt.Sprint(order); got != "[0 1 2 3 4]" {
		t.Errorf("handled %s, want [0 1 2 3 4], each once", got)
	}
}
