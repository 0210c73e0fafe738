package rmqflow

import (
	"context"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestAckPoolJoinsNoGroup: docs/grpc-connector.md says ack clients ack with
// no session at all, open a producer session (no group) only when they first
// change an invisible duration, and never join the wildcard dispatch. The
// pool's client is watched on the wire: acks alone send no Telemetry; the
// first ChangeInvisibleDuration is preceded by one Producer settings naming
// no group and no subscription, the second by none; no
// SyncLiteSubscription, ever.
func TestAckPoolJoinsNoGroup(t *testing.T) {
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, 4)
	var (
		mu    sync.Mutex
		calls []rmqfake.Call
	)
	s.Intercept("*", func(c rmqfake.Call) rmqfake.Verdict {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		return rmqfake.Verdict{}
	})
	// take returns the calls since the last take, in order.
	take := func() []rmqfake.Call {
		mu.Lock()
		defer mu.Unlock()
		out := calls
		calls = nil
		return out
	}
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 20*time.Second)

	for _, h := range hs[:2] {
		if err := pool.Ack(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // a session opened on the side would show by now
	var poolID string
	for _, c := range take() {
		switch {
		case c.Method == "AckMessage" && (poolID == "" || poolID == c.ClientID):
			poolID = c.ClientID
		default:
			t.Errorf("after acks alone the pool's client sent %s (client %s), want AckMessage only", c.Method, c.ClientID)
		}
	}
	if poolID == "" {
		t.Fatal("no AckMessage seen")
	}

	settings := func(cs []rmqfake.Call) (n int) {
		for _, c := range cs {
			if c.ClientID != poolID {
				t.Errorf("%s from client %s, not the pool's (%s)", c.Method, c.ClientID, poolID)
			}
			switch c.Method {
			case "SyncLiteSubscription":
				t.Errorf("the pool's client sent SyncLiteSubscription: %v", c.Request)
			case "Telemetry":
				st := c.Request.(*v2.TelemetryCommand).GetSettings()
				if st == nil {
					continue
				}
				n++
				if st.GetClientType() != v2.ClientType_PRODUCER || st.GetSubscription() != nil {
					t.Errorf("the pool's client sent settings %v, want a Producer with no group or subscription", st)
				}
			}
		}
		return n
	}
	h, err := pool.ChangeInvisibleDuration(ctx, hs[2], time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n := settings(take()); n != 1 {
		t.Errorf("the first ChangeInvisibleDuration came with %d Telemetry settings, want 1 (the producer session)", n)
	}
	if _, err := pool.ChangeInvisibleDuration(ctx, hs[3], time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ack(ctx, h); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := settings(take()); n != 0 {
		t.Errorf("a second ChangeInvisibleDuration and an ack sent %d more settings, want 0 (one session)", n)
	}
	if st := s.Stats(); st.LiteSubscriptions != 0 {
		t.Errorf("%d lite subscriptions held, want 0", st.LiteSubscriptions)
	}
}
