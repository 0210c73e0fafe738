package rmqflow

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The source benchmarks drain a pre-produced backlog of b.N 1-KiB messages
// with FetchConcurrency 4 (32 per receive) and ack each message through the
// source's Acker without waiting for it (Messages + AckAsync), the loop of
// bench/peer/rmqflow. BenchmarkRawAck* is the protocol ceiling at the same
// concurrency (bench/peer/raw: 4 receivers, 32 per receive, one multi-entry
// ack per batch in the background). Each reports msg/s and cpu-µs/msg (user
// plus system CPU of the whole process per message, from getrusage).
//
// By default the emulator runs in this process, so cpu-µs/msg counts the
// emulator too. To count the client alone, run the emulator apart and name
// it in RMQFLOW_BENCH_FAKE:
//
//	rmqflow broker -listen 127.0.0.1:18999 -fast-lite-dispatch \
//	  -topic bench:queues=8 -group bench-g -topic benchlite:lite -group benchlite-g:bind=benchlite:wildcard
//	RMQFLOW_BENCH_FAKE=127.0.0.1:18999 go test -run '^$' -bench 'SourceAck|RawAck' -benchtime 20000x .
//
// Against the real broker, set RMQFLOW_BENCH_BROKER to its endpoint; the
// topics and groups are those of testdata/srcbench-fixtures.txt
// (scripts/rocketmq.sh apply testdata/srcbench-fixtures.txt).
//
// Use -benchtime Nx (e.g. 20000x): each run produces its backlog untimed, and
// the clock (and the CPU count) starts at the first message received, so
// that a lite subscription's first dispatch is not counted.

const (
	benchConcurrency = 4
	benchLiteTopics  = 100
	benchBody        = 1024
)

var quiet = slog.New(slog.DiscardHandler)

func BenchmarkSourceAckNormal(b *testing.B) { benchSourceAck(b, false) }
func BenchmarkSourceAckLite(b *testing.B)   { benchSourceAck(b, true) }
func BenchmarkRawAckNormal(b *testing.B)    { benchRawAck(b, false) }
func BenchmarkRawAckLite(b *testing.B)      { benchRawAck(b, true) }

// benchServer returns the endpoint and the topic and group of the mode.
func benchServer(b *testing.B, lite bool) (endpoint, topic, group string) {
	topic, group = "bench", "bench-g"
	if lite {
		topic, group = "benchlite", "benchlite-g"
	}
	if ep := os.Getenv("RMQFLOW_BENCH_BROKER"); ep != "" {
		topic = "rmqflow-normal-srcbench"
		if lite {
			topic = "rmqflow-lite-srcbench"
		}
		return ep, topic, topic + "-g"
	}
	if ep := os.Getenv("RMQFLOW_BENCH_FAKE"); ep != "" {
		return ep, topic, group
	}
	s := rmqfake.NewForTest(b, rmqfake.FastLiteDispatch())
	if lite {
		benchMust(b, s.CreateTopic(topic, rmqfake.TopicLite))
		benchMust(b, s.CreateGroup(group, rmqfake.LiteBind(topic), rmqfake.Wildcard()))
	} else {
		benchMust(b, s.CreateTopic(topic, rmqfake.TopicNormal, rmqfake.Queues(8)))
		benchMust(b, s.CreateGroup(group))
	}
	return s.Addr(), topic, group
}

// benchProduce sends n messages (lite: one per RPC over benchLiteTopics lite
// topics; normal: 32 per RPC).
func benchProduce(b *testing.B, endpoint, topic string, lite bool, n int) {
	ctx := context.Background()
	c, err := client.New(client.Config{Endpoints: endpoint, Logger: quiet})
	benchMust(b, err)
	defer c.Close(ctx)
	_, err = c.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{topic}})
	benchMust(b, err)
	body := make([]byte, benchBody)
	per := 32
	if lite {
		per = 1
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(int64(per))) - per
				if i >= n {
					return
				}
				msgs := make([]*client.Message, min(per, n-i))
				for j := range msgs {
					msgs[j] = &client.Message{Topic: topic, Body: body}
					if lite {
						msgs[j].LiteTopic = fmt.Sprintf("l%03d", (i+j)%benchLiteTopics)
					}
				}
				res, err := c.Send(ctx, msgs...)
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, n int, elapsed, cpu time.Duration) {
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/msg")
}

func benchSourceAck(b *testing.B, lite bool) {
	ep, topic, group := benchServer(b, lite)
	n := b.N
	benchProduce(b, ep, topic, lite, n)
	cfg := SourceConfig{Connection: Connection{Endpoints: ep, Logger: quiet}, FetchConcurrency: benchConcurrency,
		AwaitDuration: 5 * time.Second, InvisibleDuration: time.Minute}
	if lite {
		cfg.Lite = []LiteBinding{{Topic: topic, Group: group}}
	} else {
		cfg.Mode, cfg.Topic, cfg.Group = ModeSimple, topic, group
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src, err := NewSource(cfg, BytesDecoder())
	benchMust(b, err)
	defer src.Close(context.Background())
	b.ResetTimer()
	benchMust(b, src.Start(ctx))
	var t0 time.Time
	var c0 time.Duration
	acker := src.Acker()
	futs := make(chan *AckFuture, n)
	var failed atomic.Int64
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		for f := range futs {
			<-f.Done()
			if f.Err() != nil {
				failed.Add(1)
			}
		}
	}()
	got := 0
	for m, err := range src.Messages(ctx) {
		if err != nil {
			b.Fatalf("after %d of %d: %v", got, n, err)
		}
		if got == 0 {
			t0, c0 = time.Now(), cpuTime()
		}
		futs <- acker.AckAsync(ctx, m.Handle)
		if got++; got == n {
			break
		}
	}
	close(futs)
	<-waited
	elapsed, cpu := time.Since(t0), cpuTime()-c0
	b.StopTimer()
	if failed.Load() > 0 || got < n {
		b.Fatalf("got %d of %d, %d acks failed", got, n, failed.Load())
	}
	report(b, n, elapsed, cpu)
	b.ReportMetric(float64(acker.Stats().AckRPCs)/float64(n), "ackrpc/msg")
}

func benchRawAck(b *testing.B, lite bool) {
	ep, topic, group := benchServer(b, lite)
	n := b.N
	benchProduce(b, ep, topic, lite, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(client.Config{Endpoints: ep, Logger: quiet})
	benchMust(b, err)
	defer c.Close(context.Background())
	sc := client.SessionConfig{Type: client.SimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic}}, LongPollingTimeout: 5 * time.Second}
	if lite {
		sc.Type, sc.LiteWildcard = client.LiteSimpleConsumer, true
	}
	b.ResetTimer()
	_, err = c.OpenSession(ctx, sc)
	benchMust(b, err)
	var first sync.Once
	var t0 time.Time
	var c0 time.Duration
	var acked, failed atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var acks, recvs sync.WaitGroup
	for range benchConcurrency {
		recvs.Go(func() {
			req := client.ReceiveRequest{Group: group, Topic: topic, Lite: lite, BatchSize: 32,
				InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second}
			for rctx.Err() == nil {
				msgs, err := c.Receive(rctx, req)
				if len(msgs) > 0 {
					first.Do(func() { t0, c0 = time.Now(), cpuTime() })
					acks.Go(func() {
						entries := make([]client.AckEntry, len(msgs))
						for i, m := range msgs {
							entries[i] = client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}
						}
						res, err := c.Ack(ctx, group, topic, entries)
						if err != nil {
							failed.Add(int64(len(entries)))
							return
						}
						for _, r := range res {
							if r.Err != nil {
								failed.Add(1)
							}
						}
						if acked.Add(int64(len(res))) >= int64(n) {
							once.Do(func() { close(done) })
						}
					})
				}
				if err != nil && rctx.Err() == nil {
					failed.Add(1)
					return
				}
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	elapsed, cpu := time.Since(t0), cpuTime()-c0
	b.StopTimer()
	stop()
	recvs.Wait()
	acks.Wait()
	if failed.Load() > 0 || acked.Load() < int64(n) {
		b.Fatalf("acked %d of %d, %d failed", acked.Load(), n, failed.Load())
	}
	report(b, n, elapsed, cpu)
}

func benchMust(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
