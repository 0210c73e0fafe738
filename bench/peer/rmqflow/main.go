// Command rmqflow is rmqflow's own contender in the benchmark: an rmqflow
// Source (FetchConcurrency = --concurrency, MaxMessageNum 32, invisible 60 s)
// whose messages are acked through the pooled, batched Acker without waiting
// for each ack. Both modes. It prints one JSON line on stdout (see
// bench/README.md).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
)

func main() {
	peerkit.Main("rmqflow", []string{"normal", "lite"}, consume)
}

func consume(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := rmqflow.SourceConfig{
		Connection:       rmqflow.Connection{Endpoints: f.Endpoint, Logger: log},
		FetchConcurrency: f.Concurrency, AwaitDuration: 5 * time.Second, InvisibleDuration: 60 * time.Second,
	}
	if f.Lite() {
		cfg.Lite = []rmqflow.LiteBinding{{Topic: f.Topic, Group: f.Group}}
	} else {
		cfg.Mode, cfg.Topic, cfg.Group = rmqflow.ModeSimple, f.Topic, f.Group
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.BytesDecoder())
	if err != nil {
		return err
	}
	if err := src.Start(ctx); err != nil {
		_ = src.Close(context.Background())
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = src.Close(cctx)
	}()
	acker := src.Acker()
	// The pool counts its AckMessage RPCs; hand them to the tracker before
	// each ack is recorded, so the count is complete when the goal is met.
	var rpcMu sync.Mutex
	counted := acker.Stats().AckRPCs
	syncRPCs := func() {
		rpcMu.Lock()
		defer rpcMu.Unlock()
		now := acker.Stats().AckRPCs
		for ; counted < now; counted++ {
			t.AckRPC()
		}
	}
	var wg sync.WaitGroup
	for {
		m, err := src.Next(ctx)
		if err != nil {
			break // the tracker reached its goal (ctx cancelled) or the run timed out
		}
		at := t.Received(1)
		mine := f.Mine(m.Meta.Keys, m.Meta.LiteTopic)
		fut := acker.AckAsync(ctx, m.Handle)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-fut.Done()
			if fut.Err() != nil {
				fmt.Fprintf(os.Stderr, "rmqflow: ack %s: %v\n", m.Handle.String(), fut.Err())
				return
			}
			syncRPCs()
			t.Acked(m.Meta.MessageID, mine, at)
		}()
	}
	wg.Wait()
	return nil
}
