package rmqfake_test

import (
	"context"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// Stop leaves no goroutine behind, even with long polls parked, sessions
// open, messages in flight and timers pending. Not parallel: the check counts
// every goroutine.
func TestNoGoroutineLeakAfterStop(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s, err := rmqfake.New(rmqfake.FastLiteDispatch(), rmqfake.WithFixtures(
		rmqfake.Fixture{Name: "t", Type: rmqfake.TopicNormal},
		rmqfake.Fixture{Group: true, Name: "g", RetryMax: -1},
		rmqfake.Fixture{Name: "lt", Type: rmqfake.TopicLite},
		rmqfake.Fixture{Group: true, Name: "lg", RetryMax: -1, Bind: "lt", Wildcard: true},
	))
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(client.Config{Endpoints: s.Addr()})
	must(t, err)
	_, err = c.OpenSession(ctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "lg", Subscriptions: []client.Subscription{{Topic: "lt"}}, LiteWildcard: true})
	must(t, err)
	p, err := client.New(client.Config{Endpoints: s.Addr()})
	must(t, err)
	_, err = p.OpenSession(ctx, client.SessionConfig{Type: client.Producer})
	must(t, err)
	_, err = p.Send(ctx, &client.Message{Topic: "lt", LiteTopic: "x", Body: []byte("in flight")})
	must(t, err)
	_, err = p.Send(ctx, &client.Message{Topic: "t", Body: []byte("stored")})
	must(t, err)
	if msgs, err := c.Receive(ctx, client.ReceiveRequest{Group: "lg", Topic: "lt", Lite: true, InvisibleDuration: time.Hour, LongPollingTimeout: 5 * time.Second}); err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	parked := make(chan error, 1)
	go func() {
		_, err := c.Receive(ctx, client.ReceiveRequest{Group: "lg", Topic: "lt", Lite: true, InvisibleDuration: time.Hour, LongPollingTimeout: 20 * time.Second})
		parked <- err
	}()
	must(t, s.WaitForPollers(ctx, 1))
	if st := s.Stats(); st.Timers == 0 {
		t.Fatal("want a pending timer (the in-flight message) before Stop")
	}
	s.Stop()
	if err := <-parked; err == nil {
		t.Error("a poll parked across Stop returned no error")
	}
	_ = c.Close(ctx)
	_ = p.Close(ctx)
	s.Stop() // idempotent
}
