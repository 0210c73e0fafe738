package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerLiteRedeliveriesStayUnderBrokerDLQ: on a lite topic the broker's
// delivery attempt restarts at 1 whenever a batch holds a message never
// delivered before, but it dead-letters by its own running count, and a
// message held back behind its lite topic's deferred head is delivered again
// with it each time (scenarios e, g and o). A lite message's
// max-delivery-attempt valve counts its own returns and fires at half the
// group's deliveries, so that a head that keeps failing is given up on while
// its successors still have deliveries of their own, and the broker
// dead-letters nothing: its %DLQ% copy would come back behind later messages
// of its lite topic (which then run before it was decided) and can never be
// acked. TestModelRunner found this (seeds 2710 and 2746 of 3000).
func TestRunnerLiteRedeliveriesStayUnderBrokerDLQ(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, fake.CreateTopic("main", rmqfake.TopicLite))
	must(t, fake.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard(), rmqfake.RetryMax(3))) // 4 deliveries at most
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	must(t, err)
	defer sink.Close(context.Background())
	send := func(body string) {
		t.Helper()
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "k", Body: []byte(body)}).Wait(ctx); err != nil {
			t.Error(err)
		}
	}
	for _, b := range []string{"m0", "m1", "m2"} {
		send(b)
	}
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second, MaxMessageNum: 3}, rmqflow.StringDecoder())
	must(t, err)

	var (
		mu      sync.Mutex
		calls   []string
		decided = map[string]bool{}
		dead    []string
		done    = make(chan struct{})
	)
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		mu.Lock()
		defer mu.Unlock()
		b := m.Value
		calls = append(calls, fmt.Sprintf("%s@%d", b, m.Meta.DeliveryAttempt))
		if m.Meta.DeadLettered() {
			t.Errorf("%s came back from %s: the broker dead-lettered it", b, m.Meta.Topic)
			return rmqflow.Leave(), nil
		}
		for _, earlier := range []string{"m0", "m1", "m2", "m3"} {
			if earlier == b {
				break
			}
			if !decided[earlier] {
				t.Errorf("%s handled before %s was decided", b, earlier)
			}
		}
		n := strings.Count(strings.Join(calls, " "), b+"@")
		switch {
		case b == "m0" && n < 3:
			return rmqflow.Defer(10*time.Millisecond, "test"), nil
		case b == "m1":
			return rmqflow.Defer(10*time.Millisecond, "test"), nil
		}
		decided[b] = true
		if b == "m3" {
			close(done)
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 2})
	must(t, err)
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		mu.Lock()
		defer mu.Unlock()
		dead = append(dead, m.Value)
		decided[m.Value] = true
		if m.Value == "m0" {
			// m3 is stored now, so the lite topic's next batch holds a
			// message never delivered before: the broker's attempt restarts.
			go send("m3")
		}
		if !strings.Contains(cause.Error(), "max-delivery-attempt") {
			t.Errorf("%s dead-lettered for %v, want the max-delivery-attempt valve", m.Value, cause)
		}
		return nil
	})
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	stop()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("handler calls: %v; dead-lettered by the runner: %v", calls, dead)
	if got := fmt.Sprint(dead); got != "[m0 m1]" {
		t.Errorf("the runner dead-lettered %s, want [m0 m1] (each on its second run of its own: half the group's 4 deliveries)", got)
	}
	if n := fake.Stats().Groups["g"].DeadLettered; n != 0 {
		t.Errorf("the broker dead-lettered %d messages, want 0", n)
	}
}
