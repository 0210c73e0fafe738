package rmqflow_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// rejoinRig is a lite source on a fake with a manual clock, the fake's
// SyncLiteSubscription actions (with the manual time each came at) and its
// ReceiveMessage count.
type rejoinRig struct {
	mc       *rmqfake.ManualClock
	src      *rmqflow.Source[string]
	addr     string
	fake     *rmqfake.Server
	mu       sync.Mutex
	receives int64         // ReceiveMessage calls so far
	received chan struct{} // closed and replaced on each ReceiveMessage
	syncs    []string      // "REMOVE@35s", "ADD@35s", ...
	t0       time.Time
}

func newRejoinRig(t *testing.T, ctx context.Context, tweak func(*rmqflow.SourceConfig)) *rejoinRig {
	t.Helper()
	r := &rejoinRig{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), received: make(chan struct{})}
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
		r.mu.Lock()
		r.receives++
		close(r.received)
		r.received = make(chan struct{})
		r.mu.Unlock()
		return rmqfake.Verdict{}
	})
	cfg := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second, InvisibleDuration: time.Minute,
	}
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
	r.src, r.addr, r.fake = src, s.Addr(), s
	return r
}

// advance moves the clock by d once the fetcher's long poll is parked on it,
// and waits until the fetcher has seen the new time: its poll ended empty and
// it sent the next one (a re-join comes between the two).
func (r *rejoinRig) advance(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.fake.WaitFor(ctx, func(st rmqfake.Stats) bool { return st.Pollers == 1 }); err != nil {
		t.Fatalf("at %v: no long poll parked: %v", r.mc.Now().Sub(r.t0), err)
	}
	r.mu.Lock()
	n := r.receives
	r.mu.Unlock()
	r.mc.Advance(d)
	for {
		r.mu.Lock()
		got, ch := r.receives, r.received
		r.mu.Unlock()
		if got > n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("at %v: no poll after the clock moved", r.mc.Now().Sub(r.t0))
		}
	}
}

// advanceTo advances in steps of the poll's window (AwaitDuration, 5 s)
// until the clock is at t0 + at. A longer step would end the poll mid-step:
// ManualClock.Set stops at each timer it runs, so the fetcher could read the
// clock at the poll's end and again at the step's end when it sends the next
// poll, which looks like a pause of more than rejoinGap between the two and
// starts the idle run over (CI failed on this once in about 60 runs).
func (r *rejoinRig) advanceTo(t *testing.T, at time.Duration) {
	t.Helper()
	for r.mc.Now().Sub(r.t0) < at {
		r.advance(t, min(5*time.Second, at-r.mc.Now().Sub(r.t0)))
	}
}

// removes returns the clock times of the COMPLETE_REMOVEs so far; each must
// be followed by a COMPLETE_ADD at the same time.
func (r *rejoinRig) removes(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, s := range r.syncs {
		at, ok := strings.CutPrefix(s, "REMOVE@")
		if !ok {
			continue
		}
		if i+1 >= len(r.syncs) || r.syncs[i+1] != "ADD@"+at {
			t.Fatalf("a COMPLETE_REMOVE without its COMPLETE_ADD: %v", r.syncs)
		}
		out = append(out, at)
	}
	return out
}

// TestLiteSourceRejoinsWhenIdle pins SourceConfig.LiteRejoinAfter (set to
// 30 s): a wildcard binding whose receives came back empty for 30 s re-joins its group
// (COMPLETE_REMOVE, then COMPLETE_ADD), which makes RocketMQ 5.5.0 sweep the
// group's lite topics for a backlog again; while nothing comes it waits twice
// as long each time, 4 times in all (30 s, 90 s, 210 s, 450 s), and then
// waits for a message, which starts over.
func TestLiteSourceRejoinsWhenIdle(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	r := newRejoinRig(t, ctx, func(c *rmqflow.SourceConfig) { c.LiteRejoinAfter = 30 * time.Second })
	check := func(want ...string) {
		t.Helper()
		if got := r.removes(t); !slices.Equal(got, want) {
			t.Fatalf("at %v: re-joins at %v, want %v", r.mc.Now().Sub(r.t0), got, want)
		}
	}
	r.advanceTo(t, 20*time.Second)
	check()
	r.advanceTo(t, 30*time.Second)
	check("30s")
	r.advanceTo(t, 80*time.Second)
	check("30s")
	r.advanceTo(t, 90*time.Second)
	check("30s", "1m30s")
	r.advanceTo(t, 1000*time.Second)
	check("30s", "1m30s", "3m30s", "7m30s")

	// A message: the run starts over.
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
	back := r.mc.Now().Sub(r.t0)
	r.advanceTo(t, back+20*time.Second)
	check("30s", "1m30s", "3m30s", "7m30s")
	r.advanceTo(t, back+30*time.Second)
	if got := r.removes(t); len(got) != 5 {
		t.Fatalf("re-joins %v: want a fifth 30 s after the message (%v)", got, back)
	}
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
			r.advanceTo(t, 1000*time.Second)
			if got := r.removes(t); len(got) != 0 {
				t.Fatalf("re-joined: %v", got)
			}
		})
	}
}

// TestLiteSourceRejoinAfterInvisible: by default a wildcard binding first
// re-joins its group one InvisibleDuration (here 15 s) into a run of empty
// receives, which is when the batches of consumers of the group that stopped
// before it started come free (conformance x), then 30, 60 and 120 s later;
// each re-join counts in rmqflow.source.lite_rejoins.
func TestLiteSourceRejoinAfterInvisible(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	reader := sdkmetric.NewManualReader()
	r := newRejoinRig(t, ctx, func(c *rmqflow.SourceConfig) {
		c.InvisibleDuration = 15 * time.Second
		c.LiteRejoinAfter = c.InvisibleDuration // as scenario x sets it
		c.Meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	})
	// In steps of the poll's window (5 s), so that a re-join is seen when
	// it is due.
	for r.mc.Now().Sub(r.t0) < 300*time.Second {
		r.advance(t, 5*time.Second)
		if got := r.removes(t); len(got) > 0 && got[0] != "15s" {
			t.Fatalf("the first re-join at %v, want one InvisibleDuration (15s) into the idle run", got[0])
		}
	}
	if got, want := r.removes(t), []string{"15s", "45s", "1m45s", "3m45s"}; !slices.Equal(got, want) {
		t.Fatalf("re-joins at %v, want %v", got, want)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range rm.ScopeMetrics {
		for _, m := range s.Metrics {
			if m.Name != rmqflow.MetricLiteRejoins {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				n += p.Value
			}
		}
	}
	if n != 4 {
		t.Fatalf("%s = %d, want 4", rmqflow.MetricLiteRejoins, n)
	}
}
