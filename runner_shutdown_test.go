package rmqflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestRunnerShutdownRelease: a runner stopped with messages still fetched
// gives them back at once (a rival consumer gets them long before their 30 s
// invisibility ends), waits for the handler in flight, and leaves no
// goroutine behind. Handler errors defer the message (ErrorDefer).
func TestRunnerShutdownRelease(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	const topic, group, n = "rmqflow-lite-runner", "rmqflow-lite-runner-g", 40
	run := rmqtest.Unique("stop")
	produce(t, topic, run, n, n)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn(t), Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		InvisibleDuration: 30 * time.Second, AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	var handled, failed atomic.Int32
	var acked, deferred atomic.Value // message ids
	started := make(chan struct{}, n)
	release := make(chan struct{})
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if !strings.HasPrefix(m.Meta.LiteTopic, run) {
			return rmqflow.Ack(), nil
		}
		started <- struct{}{}
		<-release // hold the worker until the test starts the shutdown
		if handled.Add(1) == 1 {
			failed.Add(1)
			deferred.Store(m.Meta.MessageID)
			return rmqflow.Decision{}, errors.New("first one fails") // deferred by ErrorDefer
		}
		acked.Store(m.Meta.MessageID)
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 2, ErrorBackoff: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-started
	<-started // both workers busy; the rest waits in the runner and the source
	cancel()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("runner: %v", err)
	}
	if handled.Load() != 2 {
		t.Fatalf("handled %d messages, want the 2 in flight at shutdown", handled.Load())
	}

	// Everything not handled comes back at once to another consumer.
	got := map[string]bool{}
	rival, err := client.New(client.Config{Endpoints: rmqtest.Endpoint(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close(context.Background())
	// Released messages come back long before their 30 s invisibility would
	// end (a new consumer may wait for the broker's lite dispatch, ~10 s).
	rctx := rmqtest.Context(t, 25*time.Second)
	if _, err := rival.OpenSession(rctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true}); err != nil {
		t.Fatal(err)
	}
	want := n - 2 // all but the acked one and the deferred one (back after 10 s)
	released := func() int {
		k := 0
		for id := range got {
			if id != deferred.Load() {
				k++
			}
		}
		return k
	}
	for released() < want && rctx.Err() == nil {
		msgs, err := rival.Receive(rctx, client.ReceiveRequest{Group: group, Topic: topic, Lite: true, InvisibleDuration: 30 * time.Second, LongPollingTimeout: 5 * time.Second})
		if err != nil && rctx.Err() == nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if strings.HasPrefix(m.LiteTopic, run) {
				got[m.MessageID] = true
			}
			_, _ = rival.Ack(rctx, group, m.Topic, []client.AckEntry{{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}})
		}
	}
	if released() != want {
		t.Fatalf("rival received %d released messages within 25 s, want %d", released(), want)
	}
	if got[acked.Load().(string)] {
		t.Error("the acked message came back")
	}
}
