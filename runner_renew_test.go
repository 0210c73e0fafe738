package rmqflow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestRunnerRenewsWhatItHolds: the Runner holds many messages at once
// (RunnerConfig.MaxHeld) — waiting behind their lite topic's head, or in a
// slow handler. None may see its invisibility run out while the runner has
// it: here the first message's handler takes longer than the invisible
// duration (10 s) while the lite topic's other messages wait behind it. Every
// message must be handled once, on its first delivery, and acked.
//
// Found by the benchmark's renewal scenario: once the Runner held up to 1024
// messages (its default MaxHeld then), a slow handler let the waiting ones expire, and they came back
// over and over (livelock).
func TestRunnerRenewsWhatItHolds(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	fake := fakeLite(t)
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	ctx := context.Background()
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second, RenewalAheadTime: 3 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "slow", Body: []byte(fmt.Sprint(i))}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	attempts := map[string]int32{}
	all := make(chan struct{})
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		mu.Lock()
		seen[m.Value]++
		attempts[m.Value] = max(attempts[m.Value], m.Meta.DeliveryAttempt)
		first, count := m.Value == "0" && seen["0"] == 1, len(seen)
		mu.Unlock()
		if first {
			// Longer than the invisible duration, while 19 messages wait.
			select {
			case <-time.After(13 * time.Second):
			case <-ctx.Done():
			}
		}
		if count == n && !first {
			select {
			case <-all:
			default:
				close(all)
			}
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Error("not every message was handled within 60 s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("runner: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < n; i++ {
		k := fmt.Sprint(i)
		if seen[k] != 1 || attempts[k] != 1 {
			t.Errorf("message %s handled %d times, last on delivery attempt %d; want once, on its first delivery", k, seen[k], attempts[k])
		}
	}
}
