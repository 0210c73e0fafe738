// Command official is the benchmark peer built on the official RocketMQ Go
// client, github.com/apache/rocketmq-clients/golang/v5 v5.1.4, in four
// variants (--variant; bench/README.md says how each is tuned and why):
//
//   - simple (normal): SimpleConsumer, --concurrency goroutines receiving up
//     to --batch messages (--invisible), each message handed to a bounded
//     pool of ack goroutines (--ack-workers, default 16 × --concurrency) so
//     that many acks are in flight;
//   - simple-plain (normal): the client's example loop, each message acked
//     in turn by the goroutine that received it;
//   - push (normal): PushConsumer, max(--concurrency, 20) consumption
//     goroutines (20 is the client's default; each blocks on the ack RPC of
//     its message), a listener returning SUCCESS, after which the client acks;
//   - lite-push (lite): LitePushConsumer bound to the LITE main topic
//     (wildcard group), max(--concurrency, 20) consumption goroutines, the FIFO
//     consume accelerator on; no SubscribeLite (the wildcard group delivers
//     every lite topic, and the broker refuses SubscribeLite on it); on a
//     non-wildcard group --subscribe-lite makes it SubscribeLite the run's
//     "<run>-0".."<run>-K-1" (--lite-topics K), without which it receives
//     nothing.
//
// Counters come from the client's gRPC connection (see wire). It prints one
// JSON line on stdout (see bench/README.md); the client's own log goes to a
// temporary directory, removed at exit, or to $RMQFLOW_PEER_LOGS when set.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
)

var (
	ackWorkers    int
	subscribeLite bool
	accelerator   bool
	cacheMessages int
)

func main() {
	normal, lite := []string{"normal"}, []string{"lite"}
	peerkit.Main(peerkit.Peer{Name: "official",
		Variants: []peerkit.Variant{
			{Name: "simple", Modes: normal, Consume: simple},
			{Name: "lite-push", Modes: lite, Consume: litePush},
			{Name: "simple-plain", Modes: normal, Consume: simplePlain},
			{Name: "push", Modes: normal, Consume: push},
		},
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&ackWorkers, "ack-workers", 0, "official simple: ack goroutines (0: 16 × --concurrency)")
			fs.IntVar(&cacheMessages, "cache-messages", 0, "official push, lite-push: WithPushMaxCacheMessageCount (0: push 4096, lite-push 1024)")
			fs.BoolVar(&accelerator, "fifo-accelerator", true, "official lite-push: WithPushEnableFifoConsumeAccelerator")
			fs.BoolVar(&subscribeLite, "subscribe-lite", false, "official lite-push: SubscribeLite the run's --lite-topics (needed on a non-wildcard group; refused on a wildcard one)")
		},
	})
}

// setup points the client's log away from stdout and plaintext-enables it,
// and installs the wire watcher before any client exists. It returns a
// function that removes the temporary log directory.
func setup(f peerkit.Flags, t *peerkit.Tracker) (func(), error) {
	cleanup := func() {}
	logs := os.Getenv("RMQFLOW_PEER_LOGS") // a directory to keep the logs in
	if logs == "" {
		tmp, err := os.MkdirTemp("", "rmqflow-bench-official-logs-")
		if err != nil {
			return cleanup, err
		}
		cleanup = func() { _ = os.RemoveAll(tmp) }
		logs = tmp
	}
	// The client set its logger up in init(), before main; point it here now.
	os.Setenv("rocketmq.client.logRoot", logs)
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	rmq.EnableSsl = false
	newWire(f, t)
	return cleanup, nil
}

func config(f peerkit.Flags) *rmq.Config {
	return &rmq.Config{Endpoint: f.Endpoint, ConsumerGroup: f.Group, Credentials: &credentials.SessionCredentials{}}
}

// stopWithin runs stop, waiting at most d (the push consumers' GracefulStop
// waits out in-flight long polls).
func stopWithin(stop func() error, d time.Duration) {
	stopped := make(chan struct{})
	go func() { _ = stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(d):
	}
}

func newSimple(f peerkit.Flags) (rmq.SimpleConsumer, error) {
	sc, err := rmq.NewSimpleConsumer(config(f),
		rmq.WithSimpleAwaitDuration(f.Await),
		// at most this many Receive calls at once (default 20): one per receiver
		rmq.WithSimpleReceiveRateLimit(f.Concurrency),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{f.Topic: rmq.SUB_ALL}))
	if err != nil {
		return nil, err
	}
	if err := sc.Start(); err != nil {
		return nil, fmt.Errorf("start simple consumer %s/%s: %w", f.Topic, f.Group, err)
	}
	return sc, nil
}

// receiveLoop runs --concurrency receivers, each handing every message it
// received to handle (in its own goroutine, so a slow handle holds the
// receiver: the concurrency slot).
func receiveLoop(ctx context.Context, f peerkit.Flags, sc rmq.SimpleConsumer, handle func(*rmq.MessageView)) {
	var wg sync.WaitGroup
	for i := 0; i < f.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				mvs, err := sc.Receive(ctx, int32(f.Batch), f.Invisible)
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
					f.Delay(ctx)
					handle(mv)
				}
			}
		}()
	}
	wg.Wait()
}

func ack(ctx context.Context, sc rmq.SimpleConsumer, mv *rmq.MessageView) {
	if err := sc.Ack(ctx, mv); err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "official: ack %s: %v\n", mv.GetMessageId(), err)
	}
}

// simple: receivers hand acks to a bounded pool of ack goroutines.
func simple(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	cleanup, err := setup(f, t)
	defer cleanup()
	if err != nil {
		return err
	}
	sc, err := newSimple(f)
	if err != nil {
		return err
	}
	defer stopWithin(sc.GracefulStop, 5*time.Second)
	n := ackWorkers
	if n <= 0 {
		n = 16 * f.Concurrency
	}
	// A full queue holds the receivers back: the acks are the bottleneck.
	queue := make(chan *rmq.MessageView, n)
	var acks sync.WaitGroup
	for range n {
		acks.Add(1)
		go func() {
			defer acks.Done()
			for mv := range queue {
				ack(ctx, sc, mv)
			}
		}()
	}
	receiveLoop(ctx, f, sc, func(mv *rmq.MessageView) {
		select {
		case queue <- mv:
		case <-ctx.Done():
		}
	})
	close(queue)
	acks.Wait()
	return nil
}

// simplePlain: the example loop, each message acked in turn.
func simplePlain(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	cleanup, err := setup(f, t)
	defer cleanup()
	if err != nil {
		return err
	}
	sc, err := newSimple(f)
	if err != nil {
		return err
	}
	defer stopWithin(sc.GracefulStop, 5*time.Second)
	receiveLoop(ctx, f, sc, func(mv *rmq.MessageView) { ack(ctx, sc, mv) })
	return nil
}

func listener(ctx context.Context, f peerkit.Flags) rmq.PushConsumerOption {
	return rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(*rmq.MessageView) rmq.ConsumerResult {
		f.Delay(ctx)
		return rmq.SUCCESS
	}})
}

// pushThreads is the push consumers' consumption goroutines: --concurrency,
// but never below the client's own default of 20. The client acks inside the
// consumption goroutine and waits for the RPC (process_queue.go), so N
// goroutines allow at most N acks in flight; fewer than its default would
// run the client below its own configuration.
func pushThreads(f peerkit.Flags) int32 { return int32(max(f.Concurrency, 20)) }

// pushOptions are the tuning of both push consumers: pushThreads
// consumption goroutines (the client acks inside them, one RPC each), and a
// cache of defCache messages (--cache-messages overrides it) and 64 MiB over
// all queues (bench/README.md: the A/B behind them).
func pushOptions(ctx context.Context, f peerkit.Flags, defCache int) []rmq.PushConsumerOption {
	n := cacheMessages
	if n <= 0 {
		n = defCache
	}
	return []rmq.PushConsumerOption{
		rmq.WithPushConsumptionThreadCount(pushThreads(f)),
		rmq.WithPushMaxCacheMessageCount(int32(n)),
		rmq.WithPushMaxCacheMessageSizeInBytes(64 << 20),
		listener(ctx, f),
	}
}

func push(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	cleanup, err := setup(f, t)
	defer cleanup()
	if err != nil {
		return err
	}
	opts := append(pushOptions(ctx, f, 4096), rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{f.Topic: rmq.SUB_ALL}))
	pc, err := rmq.NewPushConsumer(config(f), opts...)
	if err != nil {
		return err
	}
	if err := pc.Start(); err != nil {
		return fmt.Errorf("start push consumer %s/%s: %w", f.Topic, f.Group, err)
	}
	<-ctx.Done()
	stopWithin(pc.GracefulStop, 5*time.Second)
	return nil
}

func litePush(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	cleanup, err := setup(f, t)
	defer cleanup()
	if err != nil {
		return err
	}
	opts := append(pushOptions(ctx, f, 1024),
		// consume a received batch's lite topics in parallel, each in order
		rmq.WithPushEnableFifoConsumeAccelerator(accelerator))
	lc, err := rmq.NewLitePushConsumer(config(f), rmq.NewLitePushConsumerConfig(f.Topic, f.Invisible), opts...)
	if err != nil {
		return err
	}
	if err := lc.Start(); err != nil {
		return fmt.Errorf("start lite push consumer %s/%s: %w", f.Topic, f.Group, err)
	}
	for i := 0; subscribeLite && i < f.LiteTopics; i++ {
		if err := lc.SubscribeLite(fmt.Sprintf("%s-%d", f.Run, i)); err != nil {
			stopWithin(lc.GracefulStop, 5*time.Second)
			return fmt.Errorf("SubscribeLite %s-%d: %w", f.Run, i, err)
		}
	}
	<-ctx.Done()
	stopWithin(lc.GracefulStop, 5*time.Second)
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
