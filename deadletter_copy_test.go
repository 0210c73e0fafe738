package rmqflow_test

import (
	"context"
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
	rig := newParkRig(t, ctx, fake)
	rig.write(t, ctx, "poison")

	// A previous process: received twice and never acked (released here to
	// be quick); the broker's retry limit (1) moves it to %DLQ%g.
	pre := rig.source(t)
	must(t, pre.Start(ctx))
	for range 2 {
		m, err := pre.Next(ctx)
		must(t, err)
		must(t, pre.Acker().Release(ctx, m.Handle))
	}
	must(t, pre.Close(ctx))

	var (
		mu     sync.Mutex
		trace  []string
		parked int
	)
	r := rig.failingRunner(t, rmqflow.RunnerConfig{ErrorBackoff: 10 * time.Millisecond}, func(m *rmqflow.AckableMessage[string]) {
		mu.Lock()
		trace = append(trace, m.Meta.Topic)
		mu.Unlock()
	}, func() {
		mu.Lock()
		parked++
		mu.Unlock()
	})
	rctx, stop := context.WithTimeout(ctx, 35*time.Second)
	defer stop()
	must(t, r.Run(rctx))
	mu.Lock()
	defer mu.Unlock()
	t.Logf("handler runs (topic): %v", trace)
	if parked != 1 {
		t.Errorf("one message written to the dead-letter sink %d times in 35 s, want once", parked)
	}
}
