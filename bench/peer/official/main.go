// Command official is the benchmark peer built on the official RocketMQ Go
// client, github.com/apache/rocketmq-clients/golang/v5 v5.1.4: its
// SimpleConsumer, --concurrency goroutines each receiving up to 32 messages
// (invisible 60 s) and then acking them one by one, one AckMessage RPC per
// message. Normal mode only: v5.1.4 has no lite consumer; --mode lite exits
// with code 2.
//
//	official --endpoint 127.0.0.1:18081 --topic T --group G --run R --messages N
//
// It prints one JSON line on stdout (see bench/README.md); the client's own
// log goes to a temporary directory, removed at exit, or to
// $RMQFLOW_PEER_LOGS when set.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
)

const (
	batchSize   = 32
	invisible   = 60 * time.Second
	longPolling = 5 * time.Second
)

func main() {
	peerkit.Main("official", []string{"normal"}, consume)
}

func consume(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	logs := os.Getenv("RMQFLOW_PEER_LOGS") // a directory to keep the logs in
	if logs == "" {
		tmp, err := os.MkdirTemp("", "rmqflow-bench-official-logs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		logs = tmp
	}
	// The client set its logger up in init(), before main; point it here now.
	os.Setenv("rocketmq.client.logRoot", logs)
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	rmq.EnableSsl = false

	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: f.Endpoint, ConsumerGroup: f.Group, Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(longPolling),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{f.Topic: rmq.SUB_ALL}))
	if err != nil {
		return err
	}
	if err := sc.Start(); err != nil {
		return fmt.Errorf("start simple consumer %s/%s: %w", f.Topic, f.Group, err)
	}
	defer func() {
		stopped := make(chan struct{})
		go func() { _ = sc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < f.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				mvs, err := sc.Receive(ctx, batchSize, invisible)
				at := t.Received(len(mvs))
				if err != nil {
					// The client reports an empty long poll as an error too;
					// only a fast failure is worth a pause.
					if ctx.Err() == nil && time.Since(t0) < time.Second {
						fmt.Fprintf(os.Stderr, "official: receive: %v\n", err)
						sleep(ctx, 200*time.Millisecond)
					}
					continue
				}
				for _, mv := range mvs {
					t.AckRPC()
					if err := sc.Ack(ctx, mv); err != nil {
						if ctx.Err() == nil {
							fmt.Fprintf(os.Stderr, "official: ack %s: %v\n", mv.GetMessageId(), err)
						}
						continue
					}
					t.Acked(mv.GetMessageId(), f.Mine(mv.GetKeys(), ""), at)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
