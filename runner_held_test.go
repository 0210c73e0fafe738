package rmqflow_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestRunnerHoldsABatchOfEveryLiteTopic: a Runner with the default config
// over a backlog spread on 100 lite topics (a receive batch, 32, each) holds
// a popped batch of every one of them at once. The broker hands out one batch
// of a lite topic at a time and nothing more of it until that batch is acked
// (docs/broker-semantics.md, scenario e), and the runner takes a message from
// its source only with a free MaxHeld token; once the tokens are used up the
// source's queue (2 × MaxMessageNum) fills, its receives stop, and the lite
// topics not yet handed out wait on the broker while the workers have only
// the lite topics held to run, one message at a time each. So the default
// MaxHeld must be at least MaxMessageNum × the lite topics the source serves:
// 32 × 100 = 3,200. With 1,024 (what it was), a drain over 100 lite topics
// kept the source's queue full and asked the broker for small batches, 0.045
// receive RPCs a message against the loop's 0.031 (issue 25, point 5).
//
// The handlers block until the test ends, so nothing is acked and what the
// broker handed out stays out: the runner's intake settles either at MaxHeld
// or with every lite topic held.
func TestRunnerHoldsABatchOfEveryLiteTopic(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	const lites, batch = 100, rmqflow.DefaultMaxMessageNum
	fake := fakeLite(t)
	c := rmqflow.Connection{Endpoints: fake.Addr()}
	ctx := rmqtest.Context(t, 60*time.Second)
	prefix := rmqtest.Unique("every")

	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: c, Topic: "main", Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	futs := make([]*rmqflow.SendFuture, 0, lites*batch)
	for i := 0; i < lites*batch; i++ {
		futs = append(futs, sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-%d", prefix, i%lites), Body: []byte(fmt.Sprint(i))}))
	}
	for i, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	maxHeld := rmqflow.RunnerMaxHeld(r)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		close(release)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
	}()

	// held lite topics: those with messages in flight in the group; every
	// message in flight is in the runner once held equals the group's count.
	var held, inFlight int64
	var covered int
	look := func(int64) bool {
		held = rmqflow.RunnerHeld(r)
		g := fake.Stats().Groups["g"]
		inFlight, covered = g.InFlight, 0
		for name, n := range g.LiteTopics {
			if strings.HasPrefix(name, prefix+"-") && n.InFlight > 0 {
				covered++
			}
		}
		return held >= int64(maxHeld) || (covered == lites && held == inFlight)
	}
	waitHeld(t, ctx, r, look)
	t.Logf("MaxHeld %d: the runner holds %d messages, %d in flight on the broker, %d of %d lite topics; queued in the source: %d",
		maxHeld, held, inFlight, covered, lites, src.QueueLen())
	if covered != lites || held != inFlight {
		t.Errorf("the runner stopped taking messages at %d (MaxHeld %d) with %d of the %d lite topics handed out (%d messages in flight, %d in the source's queue); want a batch of every lite topic held at once: MaxHeld ≥ %d × %d",
			held, maxHeld, covered, lites, inFlight, src.QueueLen(), lites, batch)
	}
}
