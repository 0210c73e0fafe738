package rmqflow_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// rejoinRig is a lite source on a fake with a manual clock, the fake's
// SyncLiteSubscription actions (with the manual time each came at) and its
// ReceiveMessage count.
type rejoinRig struct {
	mc       *rmqfake.ManualClock
	src      *rmqflow.Source[string]
	addr     string
	receives atomic.Int64
	mu       sync.Mutex
	syncs    []string // "REMOVE@35s", "ADD@35s", ...
	t0       time.Time
}

func newRejoinRig(t *testing.T, ctx context.Context, tweak func(*rmqflow.SourceConfig)) *rejoinRig {
	t.Helper()
	r := &rejoinRig{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r.mc = rmqfake.NewManualClock(r.t0)
	s := rmqfake.NewForTest(t, rmqfake.WithClock(r.mc), rmqfake.FastLiteDispatch())
	if err := s.CreateTopic("main", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("x", rmqfake.LiteBind("main")); err != nil {
		t.Fatal(err)
	}
	s.Intercept("SyncLiteSubscription", func(c rmqfake.Call) rmqfake.Verdict {
		a := c.Request.(*v2.SyncLiteSubscriptionRequest).GetAction()
		name := map[v2.LiteSubscriptionAction]string{v2.LiteSubscriptionAction_COMPLETE_ADD: "ADD",
			v2.LiteSubscriptionAction_COMPLETE_REMOVE: "REMOVE", v2.LiteSubscriptionAction_PARTIAL_ADD: "PARTIAL_ADD",
			v2.LiteSubscriptionAction_PARTIAL_REMOVE: "PARTIAL_REMOVE"}[a]
		r.mu.Lock()
		r.syncs = append(r.syncs, name+"@"+r.mc.Now().Sub(r.t0).String())
		r.mu.Unlock()
		return rmqfake.Verdict{}
	})
	s.Intercept("ReceiveMessage", func(rmqfake.Call) rmqfake.Verdict {
		r.receives.Add(1)
		return rmqfake.Verdict{}
	})
	cfg := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second, InvisibleDuration: time.Minute}
	if tweak != nil {
		tweak(&cfg)
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	rmqflow.SetSourceClock(src, r.mc.Now, func(d time.Duration, f func()) func() bool { return r.mc.AfterFunc(d, f).Stop })
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	r.src, r.addr = src, s.Addr()
	return r
}

// advance moves the clock by d and waits until the fetcher has seen the new
// time: its long poll ended empty and it sent the next one.
func (r *rejoinRig) advance(t *testing.T, d time.Duration) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool { return r.receives.Load() > 0 })
	n := r.receives.Load()
	r.mc.Advance(d)
	waitFor(t, 10*time.Second, func() bool { return r.receives.Load() > n })
}

func (r *rejoinRig) removes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, s := range r.syncs {
		if len(s) > 7 && s[:7] == "REMOVE@" {
			// each REMOVE is followed by the ADD that re-joins
			if i+1 >= len(r.syncs) || r.syncs[i+1][:4] != "ADD@" {
				return append(out, "REMOVE without ADD: "+s)
			}
			out = append(out, s[7:])
		}
	}
	return out
}

// TestLiteSourceRejoinsWhenIdle pins SourceConfig.LiteRejoinAfter: a
// wildcard binding whose receives came back empty for 30 s re-joins its group
// (COMPLETE_REMOVE, then COMPLETE_ADD), which makes RocketMQ 5.5.0 sweep the
// group's lite topics for a backlog again; while nothing comes it waits twice
// as long each time (60 s, 120 s, ...), and a message brings it back to 30 s.
func TestLiteSourceRejoinsWhenIdle(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	r := newRejoinRig(t, ctx, nil)
	for i := 0; i < 5; i++ { // 25 s of empty polls
		r.advance(t, 5*time.Second)
	}
	if got := r.removes(); len(got) != 0 {
		t.Fatalf("re-joined after 25 s idle: %v", got)
	}
	r.advance(t, 5*time.Second) // 30 s
	waitFor(t, 10*time.Second, func() bool { return len(r.removes()) == 1 })
	for i := 0; i < 11; i++ { // to 85 s: the next re-join is due 60 s after the first
		r.advance(t, 5*time.Second)
	}
	if got := r.removes(); len(got) != 1 {
		t.Fatalf("re-joins by 85 s: %v, want only the one at 30 s", got)
	}
	r.advance(t, 5*time.Second) // 90 s
	waitFor(t, 10*time.Second, func() bool { return len(r.removes()) == 2 })

	// A message: the idle time starts again, and the wait is 30 s again.
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: r.addr}, Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "a", Body: []byte("m")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := r.src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.src.Acker().Ack(ctx, m.Handle); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		r.advance(t, 5*time.Second)
	}
	if got := r.removes(); len(got) != 2 {
		t.Fatalf("re-joined within 25 s of a message: %v", got)
	}
	r.advance(t, 5*time.Second)
	r.advance(t, 5*time.Second)
	waitFor(t, 10*time.Second, func() bool { return len(r.removes()) == 3 })
}

// TestLiteSourceRejoinOff: LiteRejoinAfter < 0 never re-joins, nor does a
// binding of exact lite topics (a COMPLETE_REMOVE would drop its
// subscriptions, and the broker sweeps an exact client's topics itself).
func TestLiteSourceRejoinOff(t *testing.T) {
	for name, tweak := range map[string]func(*rmqflow.SourceConfig){
		"negative": func(c *rmqflow.SourceConfig) { c.LiteRejoinAfter = -1 },
		"exact":    func(c *rmqflow.SourceConfig) { c.Lite[0].Group, c.Lite[0].LiteTopics = "x", []string{"a"} },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := rmqtest.Context(t, time.Minute)
			r := newRejoinRig(t, ctx, tweak)
			for i := 0; i < 20; i++ {
				r.advance(t, 5*time.Second)
			}
			if got := r.removes(); len(got) != 0 {
				t.Fatalf("re-joined: %v", got)
			}
		})
	}
}
