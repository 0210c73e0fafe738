package rmqflow

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// ackRPCs records, per AckMessage RPC s receives, its key
// (namespace/group/topic) and its entry count.
func ackRPCs(s *rmqfake.Server) func() []string {
	var mu sync.Mutex
	var rpcs []string
	s.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		r := c.Request.(*v2.AckMessageRequest)
		mu.Lock()
		rpcs = append(rpcs, fmt.Sprintf("%s/%s/%s:%d", r.GetGroup().GetResourceNamespace(), r.GetGroup().GetName(), r.GetTopic().GetName(), len(r.GetEntries())))
		mu.Unlock()
		return rmqfake.Verdict{}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(rpcs))
	}
}

// TestAckCoalescingByKey pins docs/grpc-connector.md's ack coalescing: a
// pool batches acks per (endpoints, namespace, group, topic) — acks with the
// same four share an AckMessage RPC, acks differing in any one go in RPCs of
// their own — and each caller gets its own entry's result (an unknown
// namespace's or topic's refusal and a broken broker handle fail only their
// caller; an ack under an unknown group is answered OK and acks nothing, as
// the broker answers it).
func TestAckCoalescingByKey(t *testing.T) {
	s := fakeNormal(t)
	other := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, 4)
	ho := received(t, other, client.Credentials{}, 1)[0]
	rpcs, otherRPCs := ackRPCs(s), ackRPCs(other)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()},
		AllowedEndpoints: []string{s.Addr(), other.Addr()}, Linger: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	broken, group, topic, ns := hs[0], hs[0], hs[0], hs[0]
	broken.Handle = "garbage-handle"
	group.Group = "no-such-group"
	topic.Topic = "no-such-topic"
	ns.Namespace = "no-such-namespace"
	ctx := rmqtest.Context(t, 20*time.Second)
	calls := []struct {
		name string
		h    ReceiptHandle
		ok   bool
	}{
		{"valid 1", hs[1], true}, {"valid 2", hs[2], true}, {"valid 3", hs[3], true},
		{"broken handle", broken, false}, {"other group", group, true}, // OK and nothing acked, as on the broker (conformance p)
		{"other topic", topic, false}, {"other namespace", ns, false}, {"other endpoints", ho, true},
	}
	futures := make([]*AckFuture, len(calls))
	for i, c := range calls { // all within one Linger: they coalesce where they may
		futures[i] = pool.AckAsync(ctx, c.h)
	}
	for i, c := range calls {
		if err := futures[i].wait(ctx); (err == nil) != c.ok {
			t.Errorf("%s: ack %v, want ok=%v", c.name, err, c.ok)
		}
	}
	want := []string{"/gn/tn:4", "/gn/no-such-topic:1", "/no-such-group/tn:1", "no-such-namespace/gn/tn:1"}
	slices.Sort(want)
	if got := rpcs(); !slices.Equal(got, want) {
		t.Errorf("AckMessage RPCs (namespace/group/topic:entries) %v, want %v", got, want)
	}
	if got := otherRPCs(); !slices.Equal(got, []string{"/gn/tn:1"}) {
		t.Errorf("the other endpoints' AckMessage RPCs %v, want one of 1 entry", got)
	}
	if acked(s) != 3 || acked(other) != 1 {
		t.Errorf("acked %d and %d, want 3 and 1", acked(s), acked(other))
	}
}

// TestAckCoalescingMaxBatch: MaxBatch caps the entries of one RPC; acks
// beyond it go in the next, every caller answered.
func TestAckCoalescingMaxBatch(t *testing.T) {
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, 5)
	rpcs := ackRPCs(s)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, MaxBatch: 2, MaxInFlight: 1, Linger: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 20*time.Second)
	var futures []*AckFuture
	for _, h := range hs {
		futures = append(futures, pool.AckAsync(ctx, h))
	}
	for i, f := range futures {
		if err := f.wait(ctx); err != nil {
			t.Errorf("ack %d: %v", i, err)
		}
	}
	if got, want := rpcs(), []string{"/gn/tn:1", "/gn/tn:2", "/gn/tn:2"}; !slices.Equal(got, want) {
		t.Errorf("AckMessage RPCs %v, want %v", got, want)
	}
	if acked(s) != 5 {
		t.Errorf("acked %d, want 5", acked(s))
	}
}
