package rmqflow

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
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// sendMany puts n messages on s's tn, all written before any is waited for.
func sendMany(t *testing.T, s *rmqfake.Server, n int) {
	t.Helper()
	ctx := rmqtest.Context(t, 30*time.Second)
	sink, err := NewSink(ctx, SinkConfig{Connection: Connection{Endpoints: s.Addr()}, Topic: fakeTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	var ws []*SendFuture
	for i := 0; i < n; i++ {
		ws = append(ws, sink.Write(ctx, Record{Body: []byte(fmt.Sprint(i))}))
	}
	for _, w := range ws {
		if _, err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeasesHoldUnderLoad (issue 24, point 3): 200 leased messages, every
// ChangeInvisibleDuration held 40 ms by the broker, invisible 10 s and
// renewed 3 s ahead. Renewed one after the other, a pass over them takes
// 8 s and every lease after the 75th or so runs out before its turn: the
// broker delivers it again while this process still holds it. None may.
//
// The test waits until every lease has had its first renewal sent (7 s after
// receipt, on the wall clock), then acks all 200 through the source's Acker
// (each ack takes the newest handle, waiting for a renewal on the wire): an
// ack refused as an expired handle is a message whose invisibility ran out
// while it was held.
func TestLeasesHoldUnderLoad(t *testing.T) {
	const n, latency = 200, 40 * time.Millisecond
	s := fakeNormal(t)
	var renewals atomic.Int64
	allSent := make(chan struct{}) // closed at the n-th renewal
	s.Intercept("ChangeInvisibleDuration", func(rmqfake.Call) rmqfake.Verdict {
		if renewals.Add(1) == n {
			close(allSent)
		}
		return rmqfake.Verdict{Delay: latency}
	})
	sendMany(t, s, n)
	var logs strings.Builder
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: s.Addr(), Logger: logger}, Mode: ModeSimple, Topic: fakeTopic, Group: fakeGroup,
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 3 * time.Second, AwaitDuration: 5 * time.Second,
		DisableQueueRenewal: true, Leases: LeaseConfig{Enabled: true}}, StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	ctx := rmqtest.Context(t, time.Minute)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	held := make([]*AckableMessage[string], 0, n)
	for len(held) < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, m)
	}
	received := time.Now()
	// Every lease's first renewal has been sent.
	select {
	case <-allSent:
	case <-ctx.Done():
		t.Fatalf("%d renewals within a minute, want %d", renewals.Load(), n)
	}
	pass := time.Since(received)
	redelivered := 0
	for _, m := range held {
		err := src.Acker().Ack(ctx, m.Handle)
		switch {
		case errors.Is(err, client.ErrInvalidReceiptHandle):
			redelivered++
		case err != nil:
			t.Errorf("ack %s: %v", m.Handle, err)
		}
	}
	t.Logf("%d held messages, %v per renewal: the first renewals were all sent %v after the last receipt; %d renewals in all; %d messages ran out of invisibility while held",
		n, latency, pass.Round(10*time.Millisecond), renewals.Load(), redelivered)
	if redelivered > 0 {
		t.Errorf("%d of %d held messages ran out of invisibility while held (the broker delivers them again)", redelivered, n)
	}
	if got := acked(s); got != n-int64(redelivered) {
		t.Errorf("the broker acked %d, want %d", got, n-redelivered)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "overran RenewalAheadTime") {
		t.Errorf("renewals overran RenewalAheadTime:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestSourceCloseReturnsByItsContext (issue 24, point 3): Close returns by
// its context's deadline even while lease renewals are on the wire (30
// leases, each renewal held 2 s by the broker), and leaves no goroutine
// behind. It took 29 s: Close waited for renewal after renewal.
func TestSourceCloseReturnsByItsContext(t *testing.T) {
	rmqtest.CheckGoroutines(t) // registered first: checked after the fake stops
	s := fakeNormal(t)
	ren := renewals(s, 2*time.Second)
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 30)
	ctx := rmqtest.Context(t, time.Minute)
	for i := 0; i < 30; i++ {
		if _, err := src.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wait(t, ren, "lease renewal") // on the wire now, for 2 s
	cctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := src.Close(cctx)
	took := time.Since(t0)
	t.Logf("Close with a 500 ms context took %v: %v", took.Round(time.Millisecond), err)
	if took > 2*time.Second {
		t.Errorf("Close with a 500 ms context took %v, want it back by its deadline", took.Round(time.Millisecond))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close cut short by its context returned %v, want an error wrapping context.DeadlineExceeded", err)
	}
}

// TestLeaseRenewalsSoonestFirstAndBounded: a look at the due leases renews
// them soonest expiry first, RenewalConcurrency (here 3) at a time. Nine
// leases are added in shuffled order, expiring 1..9 × 100 ms from now; the
// broker holds each renewal 200 ms. The first three to reach it are the
// three soonest, and the (i+3)-th reaches it at least 200 ms after the i-th:
// one of the three before it had to be answered first.
func TestLeaseRenewalsSoonestFirstAndBounded(t *testing.T) {
	const n, k, hold = 9, 3, 200 * time.Millisecond
	s := fakeNormal(t)
	var mu sync.Mutex
	var ids []string
	var at []time.Time
	s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, c.Request.(*v2.ChangeInvisibleDurationRequest).GetMessageId())
		at = append(at, time.Now())
		return rmqfake.Verdict{Delay: hold}
	})
	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: s.Addr()}, Mode: ModeSimple, Topic: fakeTopic, Group: fakeGroup,
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 5 * time.Second, RenewalConcurrency: k,
		Leases: LeaseConfig{Enabled: true}}, StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	now := time.Now()
	for _, i := range []int{4, 8, 0, 6, 2, 7, 1, 5, 3} {
		src.leases.add(ReceiptHandle{Endpoints: s.Addr(), Group: fakeGroup, Topic: fakeTopic, MessageID: fmt.Sprint(i),
			Handle: fmt.Sprintf("not-a-handle-%d", i)}, now.Add(time.Duration(i+1)*100*time.Millisecond))
	}
	due := src.leases.due(now)
	if len(due) != n {
		t.Fatalf("%d leases due, want %d", len(due), n)
	}
	if again := src.leases.due(now); len(again) != 0 {
		t.Errorf("%d leases due again while their renewals are dispatched, want 0", len(again))
	}
	src.leases.dispatch(rmqtest.Context(t, 10*time.Second), due)
	src.leases.wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("renewals reached the broker in the order %v, at %v", ids, func() (d []time.Duration) {
		for _, a := range at {
			d = append(d, a.Sub(at[0]).Round(time.Millisecond))
		}
		return d
	}())
	if len(ids) != n {
		t.Fatalf("%d renewals, want %d", len(ids), n)
	}
	first := slices.Sorted(slices.Values(ids[:k]))
	if !slices.Equal(first, []string{"0", "1", "2"}) {
		t.Errorf("the first %d renewals were of %v, want the three soonest to expire (0, 1, 2)", k, first)
	}
	for i := 0; i+k < n; i++ {
		if gap := at[i+k].Sub(at[i]); gap < hold {
			t.Errorf("renewal %d reached the broker %v after renewal %d: more than %d were on the wire", i+k, gap, i, k)
		}
	}
}

// TestLeaseCrowdDueEarly: leases whose invisibility ends at once are due
// early enough for RenewalConcurrency renewals at a time to get through
// them: the k-th soonest expiry RenewalAheadTime plus two estimated RPC
// durations for each wave of RenewalConcurrency before it, and with it
// every sooner one, so that the crowd goes soonest first. A lone lease is
// due RenewalAheadTime before its end, as ever; no lease more than half of
// InvisibleDuration before it.
func TestLeaseCrowdDueEarly(t *testing.T) {
	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: "127.0.0.1:1"}, Mode: ModeSimple, Topic: fakeTopic, Group: fakeGroup,
		Leases: LeaseConfig{Enabled: true}}, StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := t0.Add(DefaultInvisibleDuration)
	add := func(id string, at time.Time) {
		src.leases.add(ReceiptHandle{Group: fakeGroup, Topic: fakeTopic, MessageID: id, Handle: "h-" + id}, at)
	}
	add("lone", end)
	if due := src.leases.due(end.Add(-DefaultRenewalAheadTime - time.Millisecond)); len(due) != 0 {
		t.Errorf("a lone lease is due %v before its end", DefaultRenewalAheadTime+time.Millisecond)
	}
	if due := src.leases.due(end.Add(-DefaultRenewalAheadTime)); len(due) != 1 {
		t.Errorf("a lone lease is not due %v before its end", DefaultRenewalAheadTime)
	}

	// 3,200 more, ending 1 ms later: 201 waves of 16 (the lone one included),
	// 80 ms each at the 40 ms estimate. The lone lease's renewal is still
	// dispatched: it counts, and is not due again.
	const n = 3200
	for i := range n {
		add(fmt.Sprint(i), end.Add(time.Millisecond))
	}
	lead := DefaultRenewalAheadTime + (n/DefaultRenewalConcurrency)*2*renewalRTTPrior
	at := end.Add(time.Millisecond - lead)
	if due := src.leases.due(at.Add(-time.Millisecond)); len(due) != 0 {
		t.Errorf("%d leases due %v before their end, want none before %v", len(due), lead+time.Millisecond, lead)
	}
	due := src.leases.due(at)
	if len(due) != n {
		t.Fatalf("%d leases due %v before their end, want all %d", len(due), lead, n)
	}
	if got := due[n-1].visibleAt; !got.Equal(end.Add(time.Millisecond)) {
		t.Errorf("the last one due ends at %v", got)
	}

	// The estimate follows the measured RPCs (1 s each here: 20 waves would
	// need 43 s); the lead stops at half the invisibility.
	for range 100 {
		src.slots.observe(time.Second)
	}
	src2, err := NewSource(SourceConfig{Connection: Connection{Endpoints: "127.0.0.1:1"}, Mode: ModeSimple, Topic: fakeTopic, Group: fakeGroup,
		Leases: LeaseConfig{Enabled: true}}, StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close(context.Background())
	src2.leases.slots = src.slots
	const m = 20 * DefaultRenewalConcurrency
	for i := range m {
		src2.leases.add(ReceiptHandle{Group: fakeGroup, Topic: fakeTopic, MessageID: fmt.Sprint(i), Handle: fmt.Sprint("h", i)}, end)
	}
	half := DefaultInvisibleDuration / 2
	if due := src2.leases.due(end.Add(-half - time.Millisecond)); len(due) != 0 {
		t.Errorf("%d leases due more than half the invisibility before their end", len(due))
	}
	if due := src2.leases.due(end.Add(-half)); len(due) != m {
		t.Errorf("%d leases due half the invisibility before their end, want all %d", len(due), m)
	}
}
