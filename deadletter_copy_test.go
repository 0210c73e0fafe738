package rmqflow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestDeadLetterToSinkParksDLQCopyOnce: a lite message the broker already
// moved to %DLQ%<group> (its retries spent before a restart, the runner's
// own count lost) comes back as a DLQ copy (scenario g). A Runner with
// DeadLetterToSink parks it once and acks it; the ack cannot take on a DLQ
// copy, so it comes back, and it is acked again, not parked again (a first
// version filled the sink with copies of one message for ever and never let
// its lite topic move).
func TestDeadLetterToSinkParksDLQCopyOnce(t *testing.T) {
	t.Parallel() // its own emulator; mostly waiting
	ctx := rmqtest.Context(t, 2*time.Minute)
	fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, fake.CreateTopic("main", rmqfake.TopicLite))
	must(t, fake.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard(), rmqfake.RetryMax(1)))
	must(t, fake.CreateTopic("parked", rmqfake.TopicNormal))
	must(t, fake.CreateGroup("parked-g"))
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	must(t, err)
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "k", Body: []byte("poison")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// A previous process: received twice and never acked (released here to
	// be quick); the broker's retry limit (1) moves it to %DLQ%g.
	pre, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	must(t, pre.Start(ctx))
	for range 2 {
		m, err := pre.Next(ctx)
		must(t, err)
		must(t, pre.Acker().Release(ctx, m.Handle))
	}
	must(t, pre.Close(ctx))

	dlq, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "parked"})
	must(t, err)
	defer dlq.Close(context.Background())
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	var (
		mu    sync.Mutex
		trace []string
	)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		mu.Lock()
		trace = append(trace, m.Meta.Topic)
		mu.Unlock()
		return rmqflow.Decision{}, errors.New("cannot parse")
	}, rmqflow.RunnerConfig{ErrorBackoff: 10 * time.Millisecond})
	must(t, err)
	parked := 0
	var pmu sync.Mutex
	park := rmqflow.DeadLetterToSink[string](dlq)
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		err := park(ctx, m, cause)
		if err == nil {
			pmu.Lock()
			parked++
			pmu.Unlock()
		}
		return err
	})
	rctx, stop := context.WithTimeout(ctx, 35*time.Second)
	defer stop()
	must(t, r.Run(rctx))
	mu.Lock()
	defer mu.Unlock()
	pmu.Lock()
	defer pmu.Unlock()
	t.Logf("handler runs (topic): %v", trace)
	if parked != 1 {
		t.Errorf("one message written to the dead-letter sink %d times in 35 s, want once", parked)
	}
}
