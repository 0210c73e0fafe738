package rmqflow

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// leaseEntries is the number of entries of src's lease table, live or ended.
func leaseEntries(src *Source[string]) int {
	src.leases.mu.Lock()
	defer src.leases.mu.Unlock()
	return len(src.leases.leases)
}

// unrenewedSource is leasedSource with a 60 s invisibility renewed 2 s
// ahead: nothing is renewed while a short test runs.
func unrenewedSource(t *testing.T, s *rmqfake.Server) *Source[string] {
	t.Helper()
	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: s.Addr()}, Mode: ModeSimple, Topic: fakeTopic, Group: fakeGroup,
		InvisibleDuration: time.Minute, RenewalAheadTime: 2 * time.Second, AwaitDuration: 5 * time.Second,
		Leases: LeaseConfig{Enabled: true}}, StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(rmqtest.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

// TestMemLeaseTableForgetsEndedDeliveries (issue 9, memory): a lease that
// ended before any renewal keeps nothing in the table — its newest handle is
// the one every copy of the handle carries, so a later ack needs no
// tombstone. Before, every ended lease stayed until its invisibility passed
// (60 s at 9,000 msg/s: about 540,000 leases of ~700 B, the Runner peer's
// 415 MB RSS in the lite drain against 76 MB for the loop). Every way a
// lease ends is covered: Ack, AckAsync, Release, ChangeInvisibleDuration,
// Leave, and a hand-off by encoding the handle.
func TestMemLeaseTableForgetsEndedDeliveries(t *testing.T) {
	s := fakeNormal(t)
	src := unrenewedSource(t, s)
	const n = 60
	send(t, s, n)
	ctx := rmqtest.Context(t, 20*time.Second)
	ms := make([]*AckableMessage[string], n)
	for i := range ms {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	if e := leaseEntries(src); e != n {
		t.Fatalf("%d lease entries after %d emitted messages, want %d", e, n, n)
	}
	acker := src.Acker()
	var futs []*AckFuture
	for i, m := range ms {
		var err error
		switch i % 6 {
		case 0:
			err = acker.Ack(ctx, m.Handle)
		case 1:
			futs = append(futs, acker.AckAsync(ctx, m.Handle))
		case 2:
			err = acker.Release(ctx, m.Handle)
		case 3:
			_, err = acker.ChangeInvisibleDuration(ctx, m.Handle, time.Minute)
		case 4:
			acker.Leave(m.Handle)
		case 5:
			_, err = m.Handle.MarshalBinary()
		}
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for _, f := range futs {
		if err := f.wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if l := leaseCount(src); l != 0 {
		t.Errorf("%d live leases after every delivery ended, want 0", l)
	}
	if e := leaseEntries(src); e != 0 {
		t.Errorf("%d lease entries (tombstones) after %d deliveries ended unrenewed, want 0", e, n)
	}
}

// TestMemLateAckAfterRenewalUsesNewestHandle: a renewed lease whose ack
// failed stays known (as a tombstone, until its invisibility passes), so
// that acking again with the handle the message was emitted with sends the
// newest handle and takes (on a normal topic an ack of a superseded handle
// would answer OK without taking effect). The guarantee the tombstones are
// kept for.
func TestMemLateAckAfterRenewalUsesNewestHandle(t *testing.T) {
	s := fakeNormal(t)
	ren := renewals(s, 0)
	var failAcks atomic.Bool
	failAcks.Store(true)
	s.Intercept("AckMessage", func(rmqfake.Call) rmqfake.Verdict {
		if failAcks.Load() {
			return rmqfake.Verdict{Err: status.Error(codes.PermissionDenied, "refused by the test")}
		}
		return rmqfake.Verdict{}
	})
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 1)
	ctx := rmqtest.Context(t, 20*time.Second)
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, ren, "lease renewal")
	if newestHandle(src, m.Handle) == m.Handle.Handle { // waits for the renewal on the wire
		t.Fatal("the renewal did not change the handle")
	}
	if err := src.Acker().Ack(ctx, m.Handle); err == nil {
		t.Fatal("the refused ack returned nil")
	}
	if l := leaseCount(src); l != 0 {
		t.Errorf("%d live leases after the ack, want 0", l)
	}
	failAcks.Store(false)
	if err := src.Acker().Ack(ctx, m.Handle); err != nil {
		t.Fatalf("second ack: %v", err)
	}
	if n := acked(s); n != 1 {
		t.Errorf("the second ack with the emitted handle did not take (acked %d): it sent a superseded handle", n)
	}
}
