package rmqflow_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// flowClock is a rmqfake.ManualClock that stands still until Flow, then
// moves with the wall clock (a pump sets it every millisecond), from where
// Flow put it. Standing still, it lets a test take its time to set a scene
// that, on the broker's and the source's clock, happened in an instant;
// flowing, RPC latencies injected on it (rmqfake.Verdict.Delay) and the
// source's renewal ticks take real time, as they would.
type flowClock struct {
	mc   *rmqfake.ManualClock
	stop chan struct{}
	done chan struct{}
}

func newFlowClock(start time.Time) *flowClock {
	return &flowClock{mc: rmqfake.NewManualClock(start), stop: make(chan struct{}), done: make(chan struct{})}
}

// Flow sets the clock to at, then lets it run with the wall clock.
func (c *flowClock) Flow(at time.Time) {
	c.mc.Set(at)
	go func() {
		defer close(c.done)
		t0 := time.Now()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
				c.mc.Set(at.Add(time.Since(t0)))
			}
		}
	}()
}

// Stop stops the pump (the clock stands still again); Flow must have been
// called.
func (c *flowClock) Stop() {
	close(c.stop)
	<-c.done
}

// crowdResult is what runRenewalCrowd saw.
type crowdResult struct {
	held, maxHeld int
	renewals      int64 // renewal RPCs the broker received (ChangeInvisibleDuration for InvisibleDuration)
	late          int64 // rmqflow.renewals.late, queue and lease
	fetched       int64 // rmqflow.source.fetched: more than the messages sent means redeliveries
	first, last   time.Duration
	twice         []string // messages handled more than once or past their first delivery
}

// runRenewalCrowd is issue 25's renewal risk of DefaultRunnerMaxHeld 4096:
// a Runner with the default RunnerConfig and the source's default renewal
// settings (InvisibleDuration 60 s, RenewalAheadTime 5 s,
// RenewalConcurrency 16) takes a popped batch (32) of each of 100 lite
// topics, every message at the same instant on the broker's and the
// source's clock, so that their invisibility ends at once. Handlers hold
// their messages past that (the others wait behind their lite topic's
// head), and the broker takes 40 ms over each ChangeInvisibleDuration. The
// clock stands still while the runner takes the messages, then runs with
// the wall clock from half the invisibility (25 s before the first renewal
// would be due at the default ahead time) until 10 s past its end;
// then the handlers ack, and every message must have been handled once,
// on its first delivery.
func runRenewalCrowd(t *testing.T, cfg rmqflow.RunnerConfig, tweak func(*rmqflow.SourceConfig)) crowdResult {
	rmqtest.CheckGoroutines(t)
	const (
		lites, batch = 100, rmqflow.DefaultMaxMessageNum
		n            = lites * batch
		latency      = 40 * time.Millisecond
	)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := newFlowClock(t0)
	fake := rmqfake.NewForTest(t, rmqfake.WithClock(clk.mc), rmqfake.FastLiteDispatch())
	if err := fake.CreateTopic("main", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := fake.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	ctx := rmqtest.Context(t, 4*time.Minute)
	var res crowdResult
	var renewals atomic.Int64
	var mu sync.Mutex
	fake.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		if c.Request.(*v2.ChangeInvisibleDurationRequest).GetInvisibleDuration().AsDuration() != rmqflow.DefaultInvisibleDuration {
			return rmqfake.Verdict{} // a release at the end
		}
		renewals.Add(1)
		at := clk.mc.Now().Sub(t0)
		mu.Lock()
		if res.first == 0 || at < res.first {
			res.first = at
		}
		res.last = max(res.last, at)
		mu.Unlock()
		return rmqfake.Verdict{Delay: latency}
	})

	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main", Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	futs := make([]*rmqflow.SendFuture, 0, n)
	for i := 0; i < n; i++ {
		futs = append(futs, sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("crowd-%d", i%lites), Body: []byte(fmt.Sprint(i))}))
	}
	for i, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}

	meter := newRecMeter()
	conn.Meter = meter
	conn.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) // thousands of WARNs when it fails
	scfg := rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}}
	if tweak != nil {
		tweak(&scfg)
	}
	src, err := rmqflow.NewSource(scfg, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	rmqflow.SetSourceClock(src, clk.mc.Now, func(d time.Duration, f func()) func() bool { return clk.mc.AfterFunc(d, f).Stop })
	seen := map[string]int{}
	release := make(chan struct{})
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		mu.Lock()
		seen[m.Value]++
		if seen[m.Value] > 1 || m.Meta.DeliveryAttempt > 1 {
			res.twice = append(res.twice, fmt.Sprintf("%s (seen %d, attempt %d)", m.Value, seen[m.Value], m.Meta.DeliveryAttempt))
		}
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res.maxHeld = rmqflow.RunnerMaxHeld(r)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	flowing := false
	defer func() {
		if !flowing {
			clk.Flow(clk.mc.Now())
		}
		select {
		case <-release:
		default:
			close(release)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
		clk.Stop()
	}()

	// The runner takes what it has room for, every message at t0: all of
	// them, or as many as the broker handed out once it stops handing out
	// more (a lite topic received in part, the source's queue having had
	// room for part of a batch, gets no more until that part is acked).
	want := int64(min(n, res.maxHeld))
	last, since := int64(-1), time.Now()
	waitHeld(t, ctx, r, func(held int64) bool {
		if held != last {
			last, since = held, time.Now()
		}
		all := fake.Stats().Groups["g"].InFlight == held+int64(src.QueueLen())
		return all && (held >= want || time.Since(since) > 3*time.Second)
	})
	res.held = int(rmqflow.RunnerHeld(r))
	t.Logf("the runner holds %d messages (MaxHeld %d), %d more queued in the source, all taken at t0 on the broker's clock",
		res.held, res.maxHeld, src.QueueLen())

	// From t0+30 s (half the invisibility: 25 s before the first renewal
	// at the default 5 s ahead) to t0+70 s in real time.
	end := rmqflow.DefaultInvisibleDuration + 10*time.Second
	clk.Flow(t0.Add(rmqflow.DefaultInvisibleDuration / 2))
	flowing = true
	for clk.mc.Now().Sub(t0) < end {
		select {
		case <-ctx.Done():
			t.Fatalf("out of time at t0+%v", clk.mc.Now().Sub(t0))
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.renewals = renewals.Load()
	res.late = meter.sum(rmqflow.MetricRenewalsLate)

	// The handlers ack; every message the broker handed out comes back
	// acked, each handled once.
	close(release)
	if err := fake.WaitFor(ctx, func(s rmqfake.Stats) bool { return s.Groups["g"].Acked >= int64(n) }); err != nil {
		t.Errorf("%d of %d messages acked: %v", fake.Stats().Groups["g"].Acked, n, err)
	}
	res.fetched = meter.sum(rmqflow.MetricFetched)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("held %d (MaxHeld %d): %d renewal RPCs sent between t0+%v and t0+%v (invisible until t0+%v), %d late; %d messages fetched for %d sent; %d handled twice or on a redelivery",
		res.held, res.maxHeld, res.renewals, res.first.Round(time.Millisecond), res.last.Round(time.Millisecond),
		rmqflow.DefaultInvisibleDuration, res.late, res.fetched, n, len(res.twice))
	return res
}

// TestRunnerRenewsACrowdInTime: a default Runner holding a batch of each of
// 100 lite topics, about 3,200 messages whose invisibility ends at once, with
// slow handlers and 40 ms per renewal, renews every one before its
// invisibility ends: none late, none delivered twice.
func TestRunnerRenewsACrowdInTime(t *testing.T) {
	res := runRenewalCrowd(t, rmqflow.RunnerConfig{}, nil)
	if res.held < 3000 {
		t.Fatalf("the runner took %d messages, want about 3,200 (MaxHeld %d)", res.held, res.maxHeld)
	}
	if res.late > 0 {
		t.Errorf("%d renewals answered after the invisibility they were to extend had ended (%s)", res.late, rmqflow.MetricRenewalsLate)
	}
	if res.fetched != 3200 || len(res.twice) > 0 {
		t.Errorf("%d messages fetched for 3200 sent; handled twice or on a redelivery: %d %v", res.fetched, len(res.twice), head(res.twice, 5))
	}
}

func head(s []string, n int) []string { return s[:min(len(s), n)] }

// sum adds up the counter name over all its attribute sets.
func (m *recMeter) sum(name string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, v := range m.sums {
		if k == name || strings.HasPrefix(k, name+"{") {
			n += v
		}
	}
	return n
}
