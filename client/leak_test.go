package client

import (
	"context"
	"log/slog"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// These tests must not call t.Parallel: the leak check counts every new
// rmqflow or gRPC goroutine in the process.

// TestNoGoroutineLeakFakeSession opens a lite wildcard session against the
// fake server, uses it (heartbeats, syncs, an RPC), closes the client and
// checks that every goroutine of the client and its session is gone.
func TestNoGoroutineLeakFakeSession(t *testing.T) {
	rmqtest.CheckGoroutines(t) // first: its cleanup runs after every other
	tf := newTelemetryFake(consumerReply(v2.ClientType_LITE_SIMPLE_CONSUMER))
	heartbeats, onHeartbeat := signal[*v2.HeartbeatRequest](16)
	syncs, onSync := signal[*v2.SyncLiteSubscriptionRequest](16)
	notified, onNotify := signal[*v2.NotifyClientTerminationRequest](1)
	f := &fakeServer{
		telemetry: tf.handle,
		heartbeat: func(_ context.Context, r *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
			onHeartbeat(r)
			return &v2.HeartbeatResponse{Status: okStatus()}, nil
		},
		syncLite: func(_ context.Context, r *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
			onSync(r)
			return &v2.SyncLiteSubscriptionResponse{Status: okStatus()}, nil
		},
		notify: func(_ context.Context, r *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
			onNotify(r)
			return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
		},
		ack: func(_ context.Context, r *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
			return &v2.AckMessageResponse{Status: okStatus(), Entries: []*v2.AckMessageResultEntry{
				{ReceiptHandle: r.GetEntries()[0].GetReceiptHandle(), Status: okStatus()},
			}}, nil
		},
	}
	ep := startFake(t, f)
	c, err := New(Config{
		Endpoints: ep, HeartbeatInterval: 10 * time.Millisecond, LiteSyncInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := rmqtest.Context(t, 10*time.Second)
	_, err = c.OpenSession(ctx, SessionConfig{Type: LiteSimpleConsumer, Group: "g", Subscriptions: []Subscription{{Topic: "main"}}, LiteWildcard: true})
	if err != nil {
		_ = c.Close(ctx)
		t.Fatalf("OpenSession: %v", err)
	}
	for i := 0; i < 3; i++ {
		waitFor(t, heartbeats, 2*time.Second, "a heartbeat")
		waitFor(t, syncs, 2*time.Second, "a lite sync")
	}
	res, err := c.Ack(ctx, "g", "main", []AckEntry{{MessageID: "m", ReceiptHandle: "h", LiteTopic: "lt"}})
	if err != nil || res[0].Err != nil {
		t.Errorf("Ack: %v %v", res, err)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	waitFor(t, notified, time.Second, "NotifyClientTermination")
}

// TestNoGoroutineLeakFailedSession: a session that never came up (nothing
// listens) leaves nothing running after Close either.
func TestNoGoroutineLeakFailedSession(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	c, err := New(Config{Endpoints: closedPort(t), RequestTimeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenSession(context.Background(), SessionConfig{Type: Producer}); err == nil {
		t.Error("OpenSession against a closed port succeeded")
	}
	if err := c.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}
