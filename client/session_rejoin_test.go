package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// TestSessionRejoin pins Session.Rejoin: COMPLETE_REMOVE then COMPLETE_ADD
// with no lite topics; the ADD goes out even when the REMOVE failed; a failed
// ADD is retried with backoff (as after a reconnect) until one succeeds; a
// session that is not a wildcard one, or that has exact lite topics of the
// main topic, is refused before anything is sent.
func TestSessionRejoin(t *testing.T) {
	reply := consumerReply(v2.ClientType_LITE_SIMPLE_CONSUMER)
	syncs := make(chan *v2.SyncLiteSubscriptionRequest, 64)
	var failRemove, failAdds atomic.Int32
	var blockRemove atomic.Bool // a COMPLETE_REMOVE waits until its caller gives up
	notified := make(chan struct{}, 4)
	var failed atomic.Pointer[v2.SyncLiteSubscriptionRequest] // the last request answered with a failure
	f := &fakeServer{
		telemetry: newTelemetryFake(reply).handle,
		syncLite: func(ctx context.Context, r *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
			if r.GetAction() == v2.LiteSubscriptionAction_COMPLETE_REMOVE && blockRemove.Load() {
				syncs <- r
				<-ctx.Done()
				return nil, ctx.Err()
			}
			fail := (r.GetAction() == v2.LiteSubscriptionAction_COMPLETE_REMOVE && failRemove.Add(-1) >= 0) ||
				(r.GetAction() == v2.LiteSubscriptionAction_COMPLETE_ADD && failAdds.Add(-1) >= 0)
			if fail {
				failed.Store(r)
			}
			syncs <- r
			if fail {
				return &v2.SyncLiteSubscriptionResponse{Status: &v2.Status{Code: v2.Code_INTERNAL_SERVER_ERROR, Message: "not now"}}, nil
			}
			return &v2.SyncLiteSubscriptionResponse{Status: okStatus()}, nil
		},
		heartbeat: func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
			return &v2.HeartbeatResponse{Status: okStatus()}, nil
		},
		notify: func(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
			notified <- struct{}{}
			return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
		},
	}
	ep := startFake(t, f)
	c := newTestClient(t, Config{Endpoints: ep, LiteSyncInterval: time.Hour})
	s, err := c.OpenSession(t.Context(), SessionConfig{Type: LiteSimpleConsumer, Group: "g",
		Subscriptions: []Subscription{{Topic: "main"}, {Topic: "exact"}}, LiteWildcard: true})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	for range 2 {
		waitFor(t, syncs, time.Second, "an opening COMPLETE_ADD")
	}
	next := func(want v2.LiteSubscriptionAction) {
		t.Helper()
		r := waitFor(t, syncs, 5*time.Second, want.String())
		if r.GetAction() != want || r.GetTopic().GetName() != "main" || len(r.GetLiteTopicSet()) != 0 {
			t.Fatalf("got %v, want %v of main with no lite topics", r, want)
		}
	}

	if err := s.Rejoin(t.Context(), "main"); err != nil {
		t.Fatalf("Rejoin: %v", err)
	}
	next(v2.LiteSubscriptionAction_COMPLETE_REMOVE)
	next(v2.LiteSubscriptionAction_COMPLETE_ADD)

	failRemove.Store(1)
	if err := s.Rejoin(t.Context(), "main"); err == nil {
		t.Error("Rejoin with a failed COMPLETE_REMOVE returned nil")
	}
	next(v2.LiteSubscriptionAction_COMPLETE_REMOVE)
	next(v2.LiteSubscriptionAction_COMPLETE_ADD) // sent anyway
	// The failed REMOVE may yet be applied after the ADD: the session syncs
	// again at once.
	resyncPass := func() {
		t.Helper()
		for _, topic := range []string{"main", "exact"} {
			r := waitFor(t, syncs, 10*time.Second, "a resync COMPLETE_ADD of "+topic)
			if r.GetAction() != v2.LiteSubscriptionAction_COMPLETE_ADD || r.GetTopic().GetName() != topic {
				t.Fatalf("got %v, want the resync's COMPLETE_ADD of %s", r, topic)
			}
		}
	}
	resyncPass()

	// The caller gives up during the REMOVE: Rejoin returns at once and sends
	// no ADD itself; the session's own sync puts the client back.
	blockRemove.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Rejoin(ctx, "main") }()
	next(v2.LiteSubscriptionAction_COMPLETE_REMOVE)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Rejoin whose ctx ended: %v, want context.Canceled", err)
	}
	blockRemove.Store(false)
	resyncPass()

	failAdds.Store(2)
	if err := s.Rejoin(t.Context(), "main"); err == nil {
		t.Error("Rejoin with a failed COMPLETE_ADD returned nil")
	}
	next(v2.LiteSubscriptionAction_COMPLETE_REMOVE)
	next(v2.LiteSubscriptionAction_COMPLETE_ADD) // failed
	// The session syncs every main topic again (main, then exact) until a
	// pass succeeds: the first pass's ADD of main fails (the second
	// failure), the next pass succeeds for both.
	for pass, mainOK := 0, false; !mainOK; pass++ {
		if pass == 5 {
			t.Fatal("no successful resync after 5 passes")
		}
		r := waitFor(t, syncs, 10*time.Second, "a resync COMPLETE_ADD of main")
		if r.GetAction() != v2.LiteSubscriptionAction_COMPLETE_ADD || r.GetTopic().GetName() != "main" {
			t.Fatalf("got %v, want the resync's COMPLETE_ADD of main", r)
		}
		mainOK = failed.Load() != r
		if r := waitFor(t, syncs, 10*time.Second, "a resync COMPLETE_ADD of exact"); r.GetTopic().GetName() != "exact" {
			t.Fatalf("got %v, want the resync's COMPLETE_ADD of exact", r)
		}
	}

	// Refusals, with nothing sent.
	if err := s.SubscribeLite(t.Context(), "exact", "lt", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, syncs, time.Second, "the PARTIAL_ADD")
	var ce *ConfigError
	if err := s.Rejoin(t.Context(), "exact"); !errors.As(err, &ce) {
		t.Errorf("Rejoin of a main topic with exact lite topics: %v, want a *ConfigError", err)
	}
	c2 := newTestClient(t, Config{Endpoints: ep, LiteSyncInterval: time.Hour})
	plain, err := c2.OpenSession(t.Context(), SessionConfig{Type: LiteSimpleConsumer, Group: "g", Subscriptions: []Subscription{{Topic: "main"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Rejoin(t.Context(), "main"); !errors.As(err, &ce) {
		t.Errorf("Rejoin of a session that is not LiteWildcard: %v, want a *ConfigError", err)
	}
	select {
	case r := <-syncs:
		t.Errorf("a refused Rejoin sent %v", r)
	default:
	}

	// Close during a Rejoin: the Rejoin ends with the session, and nothing
	// is synced after the NotifyClientTermination; a later Rejoin sends
	// nothing.
	if err := s.UnsubscribeLite(t.Context(), "exact", "lt"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, syncs, time.Second, "the PARTIAL_REMOVE")
	blockRemove.Store(true)
	go func() { done <- s.Rejoin(t.Context(), "main") }()
	next(v2.LiteSubscriptionAction_COMPLETE_REMOVE)
	cctx, ccancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer ccancel()
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close during a Rejoin: %v", err)
	}
	if err := <-done; err == nil {
		t.Error("a Rejoin cut by Close returned nil")
	}
	select {
	case <-notified:
	default:
		t.Fatal("Close sent no NotifyClientTermination")
	}
	if err := s.Rejoin(t.Context(), "main"); !errors.Is(err, ErrClosed) {
		t.Errorf("Rejoin after Close: %v, want ErrClosed", err)
	}
	if err := s.SubscribeLite(t.Context(), "exact", "lt2", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("SubscribeLite after Close: %v, want ErrClosed", err)
	}
	if err := s.UnsubscribeLite(t.Context(), "exact", "lt"); !errors.Is(err, ErrClosed) {
		t.Errorf("UnsubscribeLite after Close: %v, want ErrClosed", err)
	}
	select {
	case r := <-syncs:
		t.Errorf("sent after Close: %v", r)
	default:
	}
}

// TestSessionSubscribeLiteEndsWithClose: a SubscribeLite whose PARTIAL_ADD
// the broker does not answer ends when the session closes, with ErrClosed,
// and Close does not wait for it to run to RequestTimeout (a minute here;
// Close waited for it, then failed its own NotifyClientTermination).
func TestSessionSubscribeLiteEndsWithClose(t *testing.T) {
	reply := consumerReply(v2.ClientType_LITE_SIMPLE_CONSUMER)
	adds := make(chan struct{}, 1)
	f := &fakeServer{
		telemetry: newTelemetryFake(reply).handle,
		syncLite: func(ctx context.Context, r *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
			if r.GetAction() == v2.LiteSubscriptionAction_PARTIAL_ADD {
				adds <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return &v2.SyncLiteSubscriptionResponse{Status: okStatus()}, nil
		},
		heartbeat: func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
			return &v2.HeartbeatResponse{Status: okStatus()}, nil
		},
		notify: func(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
			return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
		},
	}
	ep := startFake(t, f)
	c := newTestClient(t, Config{Endpoints: ep, LiteSyncInterval: time.Hour, RequestTimeout: time.Minute})
	s, err := c.OpenSession(t.Context(), SessionConfig{Type: LiteSimpleConsumer, Group: "g", Subscriptions: []Subscription{{Topic: "main"}}})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.SubscribeLite(t.Context(), "main", "lt", nil) }()
	waitFor(t, adds, 5*time.Second, "the PARTIAL_ADD")
	cctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close during a SubscribeLite: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("SubscribeLite cut by Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SubscribeLite still running 10 s after Close returned")
	}
}
