package client

import (
	"context"
	"errors"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestUnreachableBrokerFailsFast: against a port nothing listens on, every RPC
// fails (it does not hang) within a few seconds.
func TestUnreachableBrokerFailsFast(t *testing.T) {
	c := newTestClient(t, Config{Endpoints: closedPort(t), RequestTimeout: 500 * time.Millisecond})
	calls := map[string]func(context.Context) error{
		"Heartbeat": func(ctx context.Context) error { return c.Heartbeat(ctx, "g", SimpleConsumer) },
		"Ack": func(ctx context.Context) error {
			_, err := c.Ack(ctx, "g", "t", []AckEntry{{MessageID: "m", ReceiptHandle: "h"}})
			return err
		},
		"Send": func(ctx context.Context) error {
			_, err := c.Send(ctx, &Message{Topic: "t", Body: []byte("x")})
			return err
		},
		"QueryRoute": func(ctx context.Context) error {
			_, err := c.QueryRoute(ctx, "t")
			return err
		},
		"Receive": func(ctx context.Context) error {
			_, err := c.Receive(ctx, ReceiveRequest{Group: "g", Topic: "t", InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second})
			return err
		},
		"SyncLiteSubscription": func(ctx context.Context) error {
			return c.SyncLiteSubscription(ctx, LiteSyncRequest{Action: LiteCompleteAdd, Topic: "t", Group: "g"})
		},
	}
	for name, call := range calls {
		t0 := time.Now()
		err := call(context.Background())
		took := time.Since(t0)
		if err == nil {
			t.Errorf("%s against a closed port succeeded", name)
			continue
		}
		if took > 3*time.Second {
			t.Errorf("%s took %v to fail, want < 3s", name, took)
		}
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("%s: %v (gRPC code %v), want Unavailable or DeadlineExceeded", name, err, code)
		}
		if !IsRetriable(err) {
			t.Errorf("%s: transport failure %v should be retriable", name, err)
		}
	}

	t0 := time.Now()
	s, err := c.OpenSession(context.Background(), SessionConfig{Type: Producer})
	if err == nil {
		_ = s.Close(context.Background())
		t.Fatal("OpenSession against a closed port succeeded")
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("OpenSession took %v to fail, want about RequestTimeout (500ms)", took)
	}
	// The failed session is gone: the client may try again (it does not
	// count as the client's one open session).
	_, err = c.OpenSession(context.Background(), SessionConfig{Type: Producer})
	var ce *ConfigError
	if err == nil || errors.As(err, &ce) {
		t.Errorf("second OpenSession after a failed one: %v, want a handshake error, not a config error", err)
	}
}

func TestCallsAfterCloseReturnErrClosed(t *testing.T) {
	c, err := New(Config{Endpoints: closedPort(t), RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v, want nil (idempotent)", err)
	}
	calls := map[string]func() error{
		"Heartbeat":               func() error { return c.Heartbeat(ctx, "g", SimpleConsumer) },
		"NotifyClientTermination": func() error { return c.NotifyClientTermination(ctx, "g") },
		"Ack": func() error {
			_, err := c.Ack(ctx, "g", "t", []AckEntry{{MessageID: "m", ReceiptHandle: "h"}})
			return err
		},
		"Send": func() error {
			_, err := c.Send(ctx, &Message{Topic: "t", Body: []byte("x")})
			return err
		},
		"QueryRoute": func() error {
			_, err := c.QueryRoute(ctx, "t")
			return err
		},
		"Receive": func() error {
			_, err := c.Receive(ctx, ReceiveRequest{Group: "g", Topic: "t", InvisibleDuration: 10 * time.Second})
			return err
		},
		"ChangeInvisibleDuration": func() error {
			_, err := c.ChangeInvisibleDuration(ctx, ChangeInvisibleRequest{Group: "g", Topic: "t", ReceiptHandle: "h", InvisibleDuration: time.Minute})
			return err
		},
		"ForwardToDeadLetterQueue": func() error {
			return c.ForwardToDeadLetterQueue(ctx, DeadLetterRequest{Group: "g", Topic: "t", ReceiptHandle: "h"})
		},
		"SyncLiteSubscription": func() error {
			return c.SyncLiteSubscription(ctx, LiteSyncRequest{Action: LiteCompleteAdd, Topic: "t", Group: "g"})
		},
		"OpenSession": func() error {
			_, err := c.OpenSession(ctx, SessionConfig{Type: Producer})
			return err
		},
	}
	for name, call := range calls {
		t0 := time.Now()
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
		if took := time.Since(t0); took > 100*time.Millisecond {
			t.Errorf("%s after Close took %v; it should not touch the network", name, took)
		}
	}
	// Lite messages go one per RPC; each result carries ErrClosed.
	res, err := c.Send(ctx, &Message{Topic: "t", LiteTopic: "a", Body: []byte("x")}, &Message{Topic: "t", LiteTopic: "b", Body: []byte("y")})
	if err != nil || len(res) != 2 || !errors.Is(res[0].Err, ErrClosed) || !errors.Is(res[1].Err, ErrClosed) {
		t.Errorf("lite batch after Close: %+v, %v; want two results with ErrClosed", res, err)
	}
}

func TestOpenSessionRejectsBadConfig(t *testing.T) {
	c := newTestClient(t, Config{Endpoints: closedPort(t)})
	for _, tc := range []struct {
		cfg    SessionConfig
		option string
	}{
		{SessionConfig{Type: ClientType(99)}, "SessionConfig.Type"},
		{SessionConfig{Type: SimpleConsumer, Subscriptions: []Subscription{{Topic: "t"}}}, "SessionConfig.Group"},
		{SessionConfig{Type: LiteSimpleConsumer, Group: "g"}, "SessionConfig.Subscriptions"},
		{SessionConfig{Type: SimpleConsumer, Group: "g", Subscriptions: []Subscription{{Topic: "t"}}, LiteWildcard: true}, "SessionConfig.LiteWildcard"},
	} {
		_, err := c.OpenSession(t.Context(), tc.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Option != tc.option {
			t.Errorf("OpenSession(%+v): %v, want a *ConfigError naming %s", tc.cfg, err, tc.option)
		}
	}
}

// TestCloseInterruptsOpenSession: Close ends every session of the client,
// including one whose handshake is still waiting for the broker; the pending
// OpenSession should then return promptly with ErrClosed rather than wait out
// RequestTimeout.
func TestCloseInterruptsOpenSession(t *testing.T) {
	settingsSent := make(chan struct{}, 1)
	f := &fakeServer{telemetry: func(st v2.MessagingService_TelemetryServer) error {
		if _, err := st.Recv(); err != nil {
			return err
		}
		settingsSent <- struct{}{}
		<-st.Context().Done() // never answers the settings
		return nil
	}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f), RequestTimeout: 5 * time.Second})
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		t0 := time.Now()
		_, err := c.OpenSession(context.Background(), SessionConfig{Type: Producer})
		done <- result{err, time.Since(t0)}
	}()
	waitFor(t, settingsSent, 2*time.Second, "the settings on the Telemetry stream")
	closed := time.Now()
	// Close's own error is NotifyClientTermination's, unimplemented here.
	_ = c.Close(t.Context())
	r := waitFor(t, done, 10*time.Second, "OpenSession to return")
	if r.err == nil {
		t.Fatal("OpenSession succeeded on a closed client")
	}
	if waited := time.Since(closed); waited > 2*time.Second {
		t.Errorf("OpenSession returned %v after Close (%v in all): it waited out RequestTimeout (5s) instead of ending with the client", waited.Round(time.Millisecond), r.took.Round(time.Millisecond))
	}
	if !errors.Is(r.err, ErrClosed) {
		t.Errorf("OpenSession interrupted by Close: %v, want ErrClosed", r.err)
	}
}
