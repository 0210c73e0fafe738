package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestLeasesKeepEmittedMessages: with leases on, messages emitted but not
// acked are renewed for 2.5 invisible durations (no other consumer of the
// group gets them), and the Acker acks with the newest handle.
func TestLeasesKeepEmittedMessages(t *testing.T) {
	const topic, group, n = "rmqflow-lite-lease", "rmqflow-lite-lease-g", 5
	ep := rmqtest.Endpoint(t)
	ctx := rmqtest.Context(t, 2*time.Minute)
	run := rmqtest.Unique("lease")
	sink, err := NewSink(ctx, SinkConfig{Connection: Connection{Endpoints: ep}, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, Record{LiteTopic: fmt.Sprintf("%s-%d", run, i), Body: []byte("x")}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = sink.Close(ctx)
	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: ep}, Lite: []LiteBinding{{Topic: topic, Group: group}},
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 4 * time.Second, AwaitDuration: 5 * time.Second,
		Leases: LeaseConfig{Enabled: true}}, StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	var mine []*AckableMessage[string]
	for len(mine) < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Meta.LiteTopic) > len(run) && m.Meta.LiteTopic[:len(run)] == run {
			mine = append(mine, m)
		} else {
			_ = src.Acker().Ack(ctx, m.Handle)
		}
	}
	// A rival consumer of the group polls for 25 s and must get none of them.
	rival, err := client.New(client.Config{Endpoints: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close(context.Background())
	if _, err := rival.OpenSession(ctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(25 * time.Second)
	for time.Until(deadline) > 6*time.Second {
		msgs, err := rival.Receive(ctx, client.ReceiveRequest{Group: group, Topic: topic, Lite: true, InvisibleDuration: 30 * time.Second, LongPollingTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if len(m.LiteTopic) > len(run) && m.LiteTopic[:len(run)] == run {
				t.Fatalf("leased message %s reached another consumer (attempt %d)", m.MessageID, m.DeliveryAttempt)
			}
			_, _ = rival.Ack(ctx, group, m.Topic, []client.AckEntry{{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}})
		}
	}
	renewed := 0
	for _, m := range mine {
		if newestHandle(src, m.Handle) != m.Handle.Handle {
			renewed++
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Errorf("ack after renewals: %v", err)
		}
	}
	if renewed != n {
		t.Errorf("%d of %d leases carry a renewed handle", renewed, n)
	}
	if l := leaseCount(src); l != 0 {
		t.Errorf("%d leases left after acking", l)
	}
}

// leasedSource starts a simple source on rmqfake's tn/gn with leases on, an
// invisible duration of 10 s and renewal 9.5 s ahead (the first renewal comes
// about 0.5 s after receipt).
func leasedSource(t *testing.T, s *rmqfake.Server, dec Decoder[string]) *Source[string] {
	t.Helper()
	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: s.Addr()}, Mode: ModeSimple, Topic: fakeTopic, Group: fakeGroup,
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 9500 * time.Millisecond, AwaitDuration: 5 * time.Second,
		DisableQueueRenewal: true, Leases: LeaseConfig{Enabled: true}}, dec)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(rmqtest.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

// send puts n messages on s's tn.
func send(t *testing.T, s *rmqfake.Server, n int) {
	t.Helper()
	ctx := rmqtest.Context(t, 10*time.Second)
	sink, err := NewSink(ctx, SinkConfig{Connection: Connection{Endpoints: s.Addr()}, Topic: fakeTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, Record{Body: []byte(fmt.Sprint(i))}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// renewals signals each ChangeInvisibleDuration s receives (before handling
// it) and holds it for delay.
func renewals(s *rmqfake.Server, delay time.Duration) <-chan struct{} {
	ch := make(chan struct{}, 100)
	s.Intercept("ChangeInvisibleDuration", func(rmqfake.Call) rmqfake.Verdict {
		select {
		case ch <- struct{}{}:
		default:
		}
		return rmqfake.Verdict{Delay: delay}
	})
	return ch
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
}

// TestAckDuringRenewal (#6): on a normal topic an ack that overlaps a lease
// renewal waits for it and acks the newest handle: the broker counts it. The
// renewal is held 1 s before the broker handles it, and every ack 1.5 s: an
// ack sent while the renewal is on the wire reaches the broker after it.
func TestAckDuringRenewal(t *testing.T) {
	s := fakeNormal(t)
	ren := renewals(s, time.Second)
	stallAcks(s, 1500*time.Millisecond)
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 1)
	ctx := rmqtest.Context(t, 20*time.Second)
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, ren, "lease renewal")
	if err := src.Acker().Ack(ctx, m.Handle); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if n := acked(s); n != 1 {
		t.Errorf("ack returned nil but the broker acked %d messages", n)
	}
}

// TestLeaseEndsOnAckThroughAnyAcker (#4): an ack through another holder's
// Acker of the same pool ends the lease.
func TestLeaseEndsOnAckThroughAnyAcker(t *testing.T) {
	s := fakeNormal(t)
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 1)
	ctx := rmqtest.Context(t, 20*time.Second)
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(src); n != 1 {
		t.Fatalf("%d leases after Next, want 1", n)
	}
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	if err := NewAcker(pool).Ack(ctx, m.Handle); err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(src); n != 0 {
		t.Errorf("%d leases after an ack through another Acker, want 0", n)
	}
	if n := acked(s); n != 1 {
		t.Errorf("acked %d, want 1", n)
	}
}

// TestLeaseNotForDecodeErrors (#4): a message whose decode failed is not
// leased.
func TestLeaseNotForDecodeErrors(t *testing.T) {
	s := fakeNormal(t)
	bad := DecoderFunc[string](func([]byte, *Metadata) (string, error) { return "", errors.New("bad body") })
	src := leasedSource(t, s, bad)
	send(t, s, 1)
	m, err := src.Next(rmqtest.Context(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if m.Err == nil {
		t.Fatal("decode did not fail")
	}
	if n := leaseCount(src); n != 0 {
		t.Errorf("a message that failed to decode is leased (%d leases)", n)
	}
}

// TestLeaseHandOffAtMarshal (#4): encoding a leased handle ends its lease and
// carries the newest receipt handle: another pool's ack of the decoded handle
// takes, on a normal topic, after a renewal.
func TestLeaseHandOffAtMarshal(t *testing.T) {
	s := fakeNormal(t)
	ren := renewals(s, 0)
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 1)
	ctx := rmqtest.Context(t, 20*time.Second)
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, ren, "lease renewal")
	b, err := m.Handle.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(src); n != 0 {
		t.Errorf("%d leases after the handle was encoded, want 0", n)
	}
	var h ReceiptHandle
	if err := h.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr(), RequestTimeout: 3 * time.Second}, Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	if err := pool.Ack(ctx, h); err != nil {
		t.Fatal(err)
	}
	if n := acked(s); n != 1 {
		t.Errorf("the encoded handle's ack did not take (acked %d)", n)
	}
}

// leaseCount is the number of live leases of src.
func leaseCount(src *Source[string]) int { return src.leases.len() }

// newestHandle is the newest broker handle of h's leased delivery.
func newestHandle(src *Source[string], h ReceiptHandle) string {
	l := src.leases.lookup(h)
	if l == nil {
		return h.Handle
	}
	if err := l.acquire(context.Background()); err != nil {
		return h.Handle
	}
	defer l.unlock()
	return l.h.Handle
}

// TestAckerLeaveAndRelease (#4): Leave ends the lease without any RPC;
// Release makes the message visible at once and ends the lease; a negative
// ChangeInvisibleDuration is refused and does nothing.
func TestAckerLeaveAndRelease(t *testing.T) {
	s := fakeNormal(t)
	cids := countCalls(s, "ChangeInvisibleDuration")
	acks := countCalls(s, "AckMessage")
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 2)
	ctx := rmqtest.Context(t, 20*time.Second)
	m1, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acker := src.Acker()
	before := cids.Load()
	if _, err := acker.ChangeInvisibleDuration(ctx, m1.Handle, -time.Second); err == nil {
		t.Error("a negative invisible duration was accepted")
	}
	if cids.Load() != before || acks.Load() != 0 {
		t.Error("a negative invisible duration sent an RPC")
	}
	if n := leaseCount(src); n != 2 {
		t.Errorf("%d leases after a refused change, want 2", n)
	}
	// A copy of the handle that lost its owner still finds the lease through
	// the pool.
	bare := m1.Handle
	bare.owner = nil
	acker.Leave(bare)
	if n := leaseCount(src); n != 1 {
		t.Errorf("%d leases after Leave, want 1", n)
	}
	if err := acker.Release(ctx, m2.Handle); err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(src); n != 0 {
		t.Errorf("%d leases after Release, want 0", n)
	}
	if acks.Load() != 0 {
		t.Errorf("%d AckMessage calls; Leave and Release must never ack", acks.Load())
	}
	again, err := src.Next(ctx) // released: back at once
	if err != nil {
		t.Fatal(err)
	}
	if again.Meta.MessageID != m2.Meta.MessageID {
		t.Errorf("got %s back first, want the released %s", again.Meta.MessageID, m2.Meta.MessageID)
	}
	if err := acker.Ack(ctx, again.Handle); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseEndsOnPoolAck (#4): an ack through the pool's own method, with a
// handle rebuilt from its fields, ends the lease and uses the newest handle.
func TestLeaseEndsOnPoolAck(t *testing.T) {
	s := fakeNormal(t)
	ren := renewals(s, 0)
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 1)
	ctx := rmqtest.Context(t, 20*time.Second)
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, ren, "lease renewal") // on the wire: the ack below waits for its new handle
	h := m.Handle
	rebuilt := ReceiptHandle{Endpoints: h.Endpoints, Namespace: h.Namespace, Group: h.Group, Topic: h.Topic,
		LiteTopic: h.LiteTopic, MessageID: h.MessageID, Handle: h.Handle, DeliveryAttempt: h.DeliveryAttempt}
	if err := src.pool.Ack(ctx, rebuilt); err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(src); n != 0 {
		t.Errorf("%d leases after a pool ack, want 0", n)
	}
	if n := acked(s); n != 1 {
		t.Errorf("the pool acked a superseded handle (acked %d)", n)
	}
}

// TestCloseWaitsForAcks (#20): Close waits for the calls already made
// through the source's Acker — an ack waiting for a lease renewal on the
// wire, and a release whose RPC is on the wire — before it releases the
// pool; both take.
func TestCloseWaitsForAcks(t *testing.T) {
	s := fakeNormal(t)
	ren := renewals(s, time.Second)
	zero := make(chan struct{}, 1) // a ChangeInvisibleDuration to 0 s arrived
	s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		if r, ok := c.Request.(*v2.ChangeInvisibleDurationRequest); ok && r.GetInvisibleDuration().AsDuration() == 0 {
			zero <- struct{}{}
			return rmqfake.Verdict{Delay: time.Second} // with the 1 s above: on the wire for 2 s
		}
		return rmqfake.Verdict{}
	})
	src := leasedSource(t, s, StringDecoder())
	send(t, s, 2)
	ctx := rmqtest.Context(t, 20*time.Second)
	m1, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, ren, "lease renewal")
	f := src.Acker().AckAsync(ctx, m1.Handle) // returns at once, waits for the renewal
	released := make(chan error, 1)
	go func() { released <- src.Acker().Release(ctx, m2.Handle) }()
	wait(t, zero, "release on the wire")
	if err := src.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-f.Done():
	default:
		t.Fatal("Close returned before the ack submitted through its Acker completed")
	}
	if f.Err() != nil {
		t.Errorf("ack submitted before Close: %v", f.Err())
	}
	select {
	case err := <-released:
		if err != nil {
			t.Errorf("release on the wire at Close: %v", err)
		}
	case <-time.After(300 * time.Millisecond):
		// Release has returned when Close does; its goroutine's send may
		// come a moment later. Not waited for, the release would still be
		// on the wire for about a second.
		t.Fatal("Close returned before the release made through its Acker completed")
	}
	if n := acked(s); n != 1 {
		t.Errorf("acked %d, want 1", n)
	}
}
