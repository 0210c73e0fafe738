package rmqflow_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// teeHandler writes every record through h and then calls fire for each
// whose message contains match (after: a test woken by fire reads the line).
type teeHandler struct {
	slog.Handler
	match string
	fire  func()
}

func (h *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if strings.Contains(r.Message, h.match) {
		h.fire()
	}
	return err
}

// TestLeaseRenewalOverrunIsCountedAndLogged (issue 24, point 3): a lease
// renewal answered after the invisibility it was to extend had ended (here
// the broker holds it 3 s, sent 2 s before the end) is counted in
// rmqflow.renewals.late{kind=lease} and logged once at WARN with the
// handle's short form, never the body or the broker's receipt handle. The
// broker refused it as an expired handle: the lease ends, and is not sent
// again on every later tick. On the source's manual clock (the fake's).
func TestLeaseRenewalOverrunIsCountedAndLogged(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	mc := rmqfake.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := fakeNormal(t, rmqfake.WithClock(mc))
	var cids atomic.Int64
	arrived := make(chan struct{}, 8)
	s.Intercept("ChangeInvisibleDuration", func(rmqfake.Call) rmqfake.Verdict {
		if cids.Add(1) > 1 {
			return rmqfake.Verdict{} // a renewal after the first, or Close's release at cleanup
		}
		arrived <- struct{}{}
		return rmqfake.Verdict{Delay: 3 * time.Second}
	})
	meter := newRecMeter()
	logs := &syncBuffer{}
	overran := make(chan struct{}, 8)
	lost := make(chan struct{}, 8)
	logger := slog.New(&teeHandler{Handler: &teeHandler{Handler: slog.NewTextHandler(logs, nil), match: "overran RenewalAheadTime",
		fire: func() { overran <- struct{}{} }}, match: "lease lost", fire: func() { lost <- struct{}{} }})
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), Meter: meter, Logger: logger},
		Mode: rmqflow.ModeSimple, Topic: "t", Group: "g", InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second,
		AwaitDuration: 5 * time.Second, DisableQueueRenewal: true, Leases: rmqflow.LeaseConfig{Enabled: true}}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	tc := attachClock(src, mc, 500*time.Millisecond) // only the lease renewer arms timers: no queue renewal
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	tc.waitArmed(t)
	sendBodies(t, ctx, s.Addr(), "t", false, "secret-body")
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Invisible until T0+10 s; due 2 s ahead, at T0+8 s (16 ticks).
	tc.steps(t, 16)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatalf("no renewal sent at %v", mc.Now())
	}
	// The broker answers 3 s later on its clock, past T0+10 s; its hold
	// starts on the clock only after the interceptor returned, and the answer
	// is handled in its own goroutine: step on until both lines are logged
	// (a fixed number of steps could end before the hold began, and the RPC
	// would then run into its own deadline instead).
	deadline := time.Now().Add(20 * time.Second)
	for len(overran) == 0 || len(lost) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no overrun and lost lease logged by %v:\n%s", mc.Now(), logs)
		}
		tc.steps(t, 1)
	}
	// Ten more seconds of ticks: the lost lease is not renewed again.
	tc.steps(t, 20)
	out := logs.String()
	if got := meter.get(rmqflow.MetricRenewalsLate + "{kind=lease}"); got != 1 {
		t.Errorf("%s{kind=lease} = %d, want 1", rmqflow.MetricRenewalsLate, got)
	}
	if n := strings.Count(out, "overran RenewalAheadTime"); n != 1 || !strings.Contains(out, "level=WARN") ||
		!strings.Contains(out, "kind=lease late=1 handle="+m.Handle.String()) {
		t.Errorf("want one WARN naming kind=lease, late=1 and the handle %s; got:\n%s", m.Handle, out)
	}
	if !strings.Contains(out, "lease lost") {
		t.Errorf("the lease lost to the expired handle was not logged:\n%s", out)
	}
	if strings.Contains(out, "secret-body") || strings.Contains(out, m.Handle.Handle) {
		t.Errorf("a log line carries the body or the broker's receipt handle:\n%s", out)
	}
	if got := cids.Load(); got != 1 {
		t.Errorf("%d renewals; a lease whose handle the broker refused as expired must not be renewed again", got)
	}
}

// TestQueueRenewalOverrunIsCountedAndLogged: the same for a queued message:
// its renewal, sent 2 s before its invisibility ends and held 3 s by the
// broker, is counted in rmqflow.renewals.late{kind=queue} and logged once.
func TestQueueRenewalOverrunIsCountedAndLogged(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	meter := newRecMeter()
	logs := &syncBuffer{}
	overran := make(chan struct{}, 8)
	logger := slog.New(&teeHandler{Handler: slog.NewTextHandler(logs, nil), match: "overran RenewalAheadTime",
		fire: func() { overran <- struct{}{} }})
	s, src, tc := manualSource(t, ctx, func(c *rmqflow.SourceConfig) {
		c.Meter, c.Logger = meter, logger
	})
	arrived := make(chan struct{}, 8)
	var cids atomic.Int64
	s.Intercept("ChangeInvisibleDuration", func(rmqfake.Call) rmqfake.Verdict {
		if cids.Add(1) > 1 {
			return rmqfake.Verdict{}
		}
		arrived <- struct{}{}
		return rmqfake.Verdict{Delay: 3 * time.Second}
	})
	sendBodies(t, ctx, s.Addr(), "t", false, "queued")
	waitFor(t, 10*time.Second, func() bool { return src.QueueLen() == 1 })
	// Invisible until T0+10 s; renewed once less than 2 s is left, at
	// T0+8.5 s (the 17th tick). The renewer waits for the answer before it
	// arms its next tick: advance the clock past the broker's hold without
	// waiting for it.
	tc.steps(t, 16)
	tc.mc.Advance(tc.tick)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatalf("no renewal sent at %v", tc.mc.Now())
	}
	for i := 0; i < 6; i++ {
		tc.mc.Advance(tc.tick)
	}
	select {
	case <-overran:
	case <-time.After(10 * time.Second):
		t.Fatalf("no overrun logged by %v:\n%s", tc.mc.Now(), logs)
	}
	tc.waitArmed(t)
	if got := meter.get(rmqflow.MetricRenewalsLate + "{kind=queue}"); got != 1 {
		t.Errorf("%s{kind=queue} = %d, want 1", rmqflow.MetricRenewalsLate, got)
	}
	if out := logs.String(); strings.Count(out, "overran RenewalAheadTime") != 1 || !strings.Contains(out, "kind=queue late=1 handle=g/t@") {
		t.Errorf("want one WARN naming kind=queue, late=1 and the handle; got:\n%s", out)
	}
}
