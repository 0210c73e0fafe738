// Command raw is the benchmark's ceiling: a minimal consume loop on rmqflow's
// own gRPC client (github.com/rmqflow/rmqflow/client) and nothing else.
// --concurrency goroutines share one client and one consumer session; each
// receives a batch of up to --batch (--invisible, long polling --await),
// sleeps --handler-delay per message, and acks the whole batch with one
// multi-entry AckMessage in the background, so that its next receive is not
// delayed. One variant, "raw"; both modes: normal (SIMPLE_CONSUMER) and lite
// (a wildcard lite consumer session).
//
//	raw --endpoint 127.0.0.1:18081 --topic T --group G --mode normal --run R --messages N
//
// It prints one JSON line on stdout (see bench/README.md).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
	"github.com/rmqflow/rmqflow/client"
)

const ackAttempts = 3

func main() {
	peerkit.Main(peerkit.Peer{Name: "raw", Variants: []peerkit.Variant{
		{Name: "raw", Modes: []string{"normal", "lite"}, Consume: consume},
	}})
}

func consume(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.New(client.Config{Endpoints: f.Endpoint, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	sc := client.SessionConfig{Type: client.SimpleConsumer, Group: f.Group,
		Subscriptions: []client.Subscription{{Topic: f.Topic}}, LongPollingTimeout: f.Await}
	if f.Lite() {
		sc.Type, sc.LiteWildcard = client.LiteSimpleConsumer, true
	}
	if _, err := c.OpenSession(ctx, sc); err != nil {
		return fmt.Errorf("open %s session for %s/%s: %w", sc.Type, f.Topic, f.Group, err)
	}
	var receivers, acks sync.WaitGroup
	for i := 0; i < f.Concurrency; i++ {
		receivers.Add(1)
		go func() {
			defer receivers.Done()
			receive(ctx, c, f, t, &acks)
		}()
	}
	receivers.Wait()
	acks.Wait()
	return nil
}

// receive is one receiving goroutine: one concurrency slot.
func receive(ctx context.Context, c *client.Client, f peerkit.Flags, t *peerkit.Tracker, acks *sync.WaitGroup) {
	req := client.ReceiveRequest{Group: f.Group, Topic: f.Topic, Lite: f.Lite(),
		BatchSize: f.Batch, InvisibleDuration: f.Invisible, LongPollingTimeout: f.Await}
	for ctx.Err() == nil {
		msgs, err := c.Receive(ctx, req)
		if err != nil && len(msgs) == 0 && ctx.Err() != nil {
			return
		}
		at := t.Receive(len(msgs))
		for _, m := range msgs {
			t.Seen(m.MessageID, f.Mine(m.Keys, m.LiteTopic))
		}
		for range msgs {
			f.Delay(ctx)
		}
		if len(msgs) > 0 {
			acks.Add(1)
			go func() {
				defer acks.Done()
				ack(ctx, c, f, t, msgs, at)
			}()
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "raw: receive: %v\n", err)
			sleep(ctx, 200*time.Millisecond)
		}
	}
}

// ack acks one received batch with one AckMessage, retrying the RPC (not
// entries the broker refused) a few times.
func ack(ctx context.Context, c *client.Client, f peerkit.Flags, t *peerkit.Tracker, msgs []*client.ReceivedMessage, at time.Time) {
	entries := make([]client.AckEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}
	}
	for attempt := 1; attempt <= ackAttempts; attempt++ {
		t.AckRPC()
		results, err := c.Ack(ctx, f.Group, f.Topic, entries)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fmt.Fprintf(os.Stderr, "raw: ack of %d (attempt %d): %v\n", len(entries), attempt, err)
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		for i, r := range results {
			if r.Err != nil {
				t.AckFailed(1)
				fmt.Fprintf(os.Stderr, "raw: ack %s: %v\n", r.MessageID, r.Err)
				continue
			}
			m := msgs[i]
			t.Ack(peerkit.Delivery{ID: m.MessageID, Mine: f.Mine(m.Keys, m.LiteTopic), LiteTopic: m.LiteTopic, Born: m.BornTime, Received: at})
		}
		return
	}
	if ctx.Err() == nil {
		t.AckFailed(int64(len(entries)))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
