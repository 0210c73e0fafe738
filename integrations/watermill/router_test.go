package rmqwatermill_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/rmqflow/rmqflow"
	rmqwatermill "github.com/rmqflow/rmqflow/integrations/watermill"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRouterRetryAndPoisonQueue runs the Router of docs/watermill.md: the
// Retry middleware re-runs a failed handler in process (a transient failure
// heals without the broker), and PoisonQueue sends what still fails to a
// poison lite topic with the reason, and acks it there; a handler error
// without PoisonQueue would Nack, a deferral on the broker. Every message
// ends handled or parked: none lost, none redelivered for ever.
func TestRouterRetryAndPoisonQueue(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	tg := fakeTarget(t, rmqflow.ModeLite)
	group := tg.group(t, "router-g")
	router, pub, sub, orders, poison := poisonRouter(t, tg, group)

	var mu sync.Mutex
	runs := map[string]int{}
	handled := map[string]bool{}
	afterDone := make(chan struct{})
	router.AddNoPublisherHandler("orders", orders, sub, func(m *message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		body := string(m.Payload)
		runs[body]++
		switch {
		case body == "flaky" && runs[body] == 1:
			return errors.New("flaky: first try fails")
		case body == "bad":
			return errors.New("bad: always fails")
		}
		if body == "after" && !handled[body] {
			close(afterDone)
		}
		handled[body] = true
		return nil
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	<-router.Running()

	publish(t, pub, orders, "ok", "flaky", "bad", "after")

	psub := tg.subscriber(t, group)
	defer psub.Close()
	pch, err := psub.Subscribe(ctxT(t), poison)
	if err != nil {
		t.Fatal(err)
	}
	parked := receive(t, pch, 30*time.Second)
	if string(parked.Payload) != "bad" || parked.Metadata.Get(middleware.ReasonForPoisonedKey) == "" ||
		parked.Metadata.Get(middleware.PoisonedTopicKey) != orders {
		t.Fatalf("poison queue got %q with metadata %v", parked.Payload, parked.Metadata)
	}
	parked.Ack()
	// "after" follows "bad" on its lite topic: once it is handled, "bad" was
	// settled (parked and acked), not left to block its lite topic.
	select {
	case <-afterDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the message after the poisoned one was never handled")
	}
	cancel()
	if err := <-routerDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !handled["ok"] || !handled["flaky"] || handled["bad"] {
		t.Fatalf("handled %v", handled)
	}
	if runs["ok"] != 1 || runs["flaky"] != 2 || runs["bad"] != 3 {
		t.Fatalf("handler runs %v; want ok 1, flaky 2 (one in-process retry), bad 3 (two retries, then the poison queue)", runs)
	}
}

// TestRouterCloseDoesNotPoisonInFlight: the Router of docs/watermill.md is
// closed while its handler holds a message and waits on the message's
// context, which Close cancels (Watermill's contract). The handler returns
// the context's error; Retry gives up; PoisonQueue publishes on that
// cancelled context. The publish must store nothing (before, the Sink
// accepted the record and the publish reported the context's error: the
// message was both in the poison topic and nacked), and the message must come
// back to the group: a healthy message is neither poisoned nor lost because
// the process stopped.
func TestRouterCloseDoesNotPoisonInFlight(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	tg := fakeTarget(t, rmqflow.ModeLite)
	group := tg.group(t, "router-close-g")
	router, pub, sub, orders, poison := poisonRouter(t, tg, group)
	entered := make(chan struct{})
	var once sync.Once
	router.AddNoPublisherHandler("orders", orders, sub, func(m *message.Message) error {
		once.Do(func() { close(entered) })
		<-m.Context().Done()
		return m.Context().Err()
	})
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(context.Background()) }()
	<-router.Running()
	publish(t, pub, orders, "in-flight")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never got the message")
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-routerDone; err != nil {
		t.Fatal(err)
	}
	if lt, ok := tg.fake.Stats().Topics[wmTopic].LiteTopics[poison]; ok && lt.Stored+lt.Acked+lt.InFlight+lt.Backlog > 0 {
		t.Fatalf("the poison topic got the in-flight message: %+v", lt)
	}
	again := tg.subscriber(t, group)
	defer again.Close()
	ch, err := again.Subscribe(ctxT(t), orders)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch, 30*time.Second)
	if string(m.Payload) != "in-flight" {
		t.Fatalf("got %q, want the message the closed router held", m.Payload)
	}
	m.Ack()
}

// poisonRouter is the Router of docs/watermill.md on tg: Retry (2 retries)
// inside PoisonQueue, which publishes to a fresh poison lite topic; it
// returns the router, its publisher, a subscriber of group and the orders
// and poison topic names. The publisher and subscriber close when the test ends.
func poisonRouter(t *testing.T, tg *target, group string) (*message.Router, *rmqwatermill.Publisher, *rmqwatermill.Subscriber, string, string) {
	t.Helper()
	orders, poison := rmqtest.Unique("orders"), rmqtest.Unique("poison")
	pub := tg.publisher(t)
	t.Cleanup(func() { _ = pub.Close() })
	sub := tg.subscriber(t, group)
	t.Cleanup(func() { _ = sub.Close() })
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	pq, err := middleware.PoisonQueue(pub, poison)
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(pq, middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond}.Middleware)
	return router, pub, sub, orders, poison
}

// TestRouterDeadLetterTopicKeepsFailing uses the subscriber as a user does:
// a Router with no middleware whose handler always fails "poison" (and
// handles "next", behind it in the same lite topic), with DeadLetterTopic
// naming a lite topic whose name the broker refuses (65 bytes:
// ILLEGAL_LITE_TOPIC on RocketMQ 5.5.0 and rmqfake, conformance scenario i),
// which Subscribe's check of the topic's type cannot see. Every park fails.
// After 3 failed parks poison goes where Valves.OnValve says, the group's
// dead-letter queue; next is handled; nothing is dropped. Before, poison was
// parked, refused and deferred on every return, holding next back, until the
// broker's own retry limit moved it.
func TestRouterDeadLetterTopicKeepsFailing(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		rmqtest.CheckGoroutines(t)
		ctx := rmqtest.Context(t, 2*time.Minute)
		meter, log := newCounterMeter(), &logLines{}
		tg := &target{endpoint: endpoint, mode: rmqflow.ModeLite, tune: func(c *rmqwatermill.SubscriberConfig) {
			c.NackBackoff, c.NackBackoffMax = 10*time.Millisecond, 100*time.Millisecond
			c.Valves = rmqflow.ThrottleConfig{MaxDefers: 2}
			c.DeadLetterTopic = strings.Repeat("x", 65) // refused by the broker on every park
			c.Source.Connection.Meter, c.Source.Connection.Logger = meter, slog.New(log)
		}}
		orders := rmqtest.Unique("orders")
		pub := tg.publisher(t)
		sub := tg.subscriber(t, wmGroup)
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
		must(t, err)
		var (
			mu                  sync.Mutex
			poisonRuns, dlqRuns int
			nextRuns            int
			nextDone, back      = make(chan struct{}), make(chan struct{})
			nextOnce, backOnce  sync.Once
		)
		router.AddNoPublisherHandler("orders", orders, sub, func(m *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case string(m.Payload) == "next":
				nextRuns++
				nextOnce.Do(func() { close(nextDone) })
				return nil
			case m.Metadata.Get(rmqwatermill.MetaDeadLettered) == "true":
				dlqRuns++
				backOnce.Do(func() { close(back) })
			default:
				poisonRuns++
			}
			return errors.New("poison cannot be read")
		})
		routerDone := make(chan error, 1)
		go func() { routerDone <- router.Run(context.Background()) }()
		<-router.Running()
		publish(t, pub, orders, "poison", "next")
		for _, w := range []struct {
			what string
			ch   chan struct{}
		}{{"next handled", nextDone}, {"poison back from %DLQ%", back}} {
			select {
			case <-w.ch:
			case <-ctx.Done():
				mu.Lock()
				t.Errorf("%s: timed out; poison ran %d times, failed parks %d", w.what, poisonRuns, meter.sum(rmqflow.MetricDeadLettered, "to", "function-failed"))
				mu.Unlock()
			}
		}
		must(t, router.Close())
		must(t, <-routerDone)
		mu.Lock()
		defer mu.Unlock()
		parked, failed := meter.sum(rmqflow.MetricDeadLettered, "to", "function"), meter.sum(rmqflow.MetricDeadLettered, "to", "function-failed")
		dlq, dropped := meter.sum(rmqflow.MetricDeadLettered, "to", "broker-dlq"), meter.sum(rmqflow.MetricDeadLettered, "to", "dropped")
		t.Logf("sent 2; handled: poison %d runs, next %d; parked %d, failed parks %d; to %%DLQ%% %d (back from it %d); dropped %d",
			poisonRuns, nextRuns, parked, failed, dlq, dlqRuns, dropped)
		if poisonRuns != 2+1+3-1 || nextRuns != 1 || parked != 0 || failed != 3 || dlq != 1 || dropped != 0 {
			t.Errorf("want poison 5 runs (2 nacks, then 3 failed parks), next 1; parked 0, failed parks 3, to %%DLQ%% 1, dropped 0")
		}
		if lines := log.with("dead-letter function failed 3 times for a message"); len(lines) != 1 || !strings.Contains(lines[0], "SubscriberConfig.DeadLetterTopic") {
			t.Errorf("fallback log lines %q: want one naming SubscriberConfig.DeadLetterTopic", lines)
		}
		if fake != nil {
			if g := fake.Stats().Groups[wmGroup]; g.DeadLettered != 1 {
				t.Errorf("rmqfake group counts %+v: want poison in the DLQ", g.Counts)
			}
		}
	})
}
