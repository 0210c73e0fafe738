package rmqflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerRunsASourceStartedByItsOwner pins NewRunner's promise that the
// owner may start the source after NewRunner to see a start failure at once:
// Start reports an unknown topic with its typed error, and Run over a source
// Start succeeded on handles its messages (it does not start it twice).
func TestRunnerRunsASourceStartedByItsOwner(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := rmqfake.NewForTest(t)
	must(t, s.CreateTopic("t", rmqfake.TopicNormal))
	must(t, s.CreateGroup("g"))
	ctx := rmqtest.Context(t, 30*time.Second)
	c := rmqflow.Connection{Endpoints: s.Addr()}
	handler := func(context.Context, *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		return rmqflow.Ack(), nil
	}

	bad, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, Mode: rmqflow.ModeSimple, Topic: "no-such-topic", Group: "g"},
		rmqflow.StringDecoder())
	must(t, err)
	if _, err := rmqflow.NewRunner(bad, handler, rmqflow.RunnerConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(ctx); !errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("Start on an unknown topic: %v, want TOPIC_NOT_FOUND", err)
	}
	_ = bad.Close(ctx)

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, Mode: rmqflow.ModeSimple, Topic: "t", Group: "g",
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	handled := make(chan string, 1)
	r, err := rmqflow.NewRunner(src, func(_ context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		handled <- m.Value
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 1})
	must(t, err)
	must(t, src.Start(ctx))
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: c, Topic: "t"})
	must(t, err)
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{Body: []byte("hello")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	select {
	case v := <-handled:
		if v != "hello" {
			t.Fatalf("handled %q", v)
		}
	case err := <-done:
		t.Fatalf("Run over a started source ended before handling anything: %v", err)
	case <-ctx.Done():
		t.Fatal("the message was never handled")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestRunnerShutdownTimeoutStillGivesBack: a handler still running when the
// ShutdownTimeout ends sees its context cancelled and returns Release; the
// runner still sends that release (a grace period past the timeout, as for
// the messages not started), so Run returns no error and the message is
// visible again at once rather than after its 60 s invisibility.
func TestRunnerShutdownTimeoutStillGivesBack(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := rmqfake.NewForTest(t)
	must(t, s.CreateTopic("t", rmqfake.TopicNormal))
	must(t, s.CreateGroup("g"))
	ctx := rmqtest.Context(t, 30*time.Second)
	c := rmqflow.Connection{Endpoints: s.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: c, Topic: "t"})
	must(t, err)
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{Body: []byte("slow")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, Mode: rmqflow.ModeSimple, Topic: "t", Group: "g",
		AwaitDuration: 5 * time.Second, InvisibleDuration: time.Minute}, rmqflow.StringDecoder())
	must(t, err)
	inHandler := make(chan struct{})
	r, err := rmqflow.NewRunner(src, func(hctx context.Context, _ *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		close(inHandler)
		<-hctx.Done() // cancelled when the shutdown times out
		return rmqflow.Release(), nil
	}, rmqflow.RunnerConfig{Concurrency: 1, ShutdownTimeout: 100 * time.Millisecond})
	must(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	select {
	case <-inHandler:
	case <-ctx.Done():
		t.Fatal("the message never reached the handler")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after a shutdown that timed out: %v, want nil (the release still sent)", err)
	}
	cl, err := client.New(client.Config{Endpoints: s.Addr()})
	must(t, err)
	defer cl.Close(context.Background())
	_, err = cl.OpenSession(ctx, client.SessionConfig{Type: client.SimpleConsumer, Group: "g", Subscriptions: []client.Subscription{{Topic: "t"}}})
	must(t, err)
	msgs, err := cl.Receive(ctx, client.ReceiveRequest{Group: "g", Topic: "t", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	must(t, err)
	if len(msgs) != 1 || string(msgs[0].Body) != "slow" {
		t.Fatalf("right after the shutdown a receive got %d messages, want the released one", len(msgs))
	}
}
