package rmqfake_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// BenchmarkProduceReceiveAck measures produce -> receive -> batched ack of
// 1 KiB messages through the project's client, client and emulator in one
// process: producers send batches of 32 messages per SendMessage, consumers
// long-poll batches of 32 and ack each batch in one AckMessage. It reports
// msg/s (each message produced, received and acked once) and the process's
// CPU time per message.
func BenchmarkProduceReceiveAck(b *testing.B) {
	benchmarkPipeline(b, 0)
}

// BenchmarkProduceReceiveAckLite is the same through a LITE main topic with
// 64 lite topics and a wildcard group. Lite messages are sent one per RPC
// (docs/broker-semantics.md, scenario k), so producing costs more; acks
// still go 32 to an AckMessage.
func BenchmarkProduceReceiveAckLite(b *testing.B) {
	benchmarkPipeline(b, 64)
}

// BenchmarkProduceReceiveAckLiteTopics is the lite pipeline with its
// messages spread over 100, 200,000 or 1,000,000 lite topics, round-robin:
// with many lite topics each holds a message or two at a time, and the
// emulator keeps (and frees) state for every one of them.
//
//	go test -run '^$' -bench ProduceReceiveAckLiteTopics -benchtime 200000x ./rmqfake
func BenchmarkProduceReceiveAckLiteTopics(b *testing.B) {
	for _, n := range []int{100, 200_000, 1_000_000} {
		b.Run(fmt.Sprintf("lite=%d", n), func(b *testing.B) { benchmarkPipeline(b, n) })
	}
}

// benchmarkPipeline runs the pipeline on a normal topic (liteTopics 0) or a
// LITE topic with that many lite topics.
func benchmarkPipeline(b *testing.B, liteTopics int) {
	lite := liteTopics > 0
	const (
		topic, group = "bench", "bench-g"
		batch        = 32
		producers    = 2
		consumers    = 4
	)
	s := rmqfake.NewForTest(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Producers keep their own context: the last acks can come before the
	// response to the last send, and cancel (which ends the consumers' long
	// polls) must not fail that send.
	sendCtx, sendCancel := context.WithCancel(context.Background())
	defer sendCancel()
	if lite {
		must(b, s.CreateTopic(topic, rmqfake.TopicLite))
		must(b, s.CreateGroup(group, rmqfake.LiteBind(topic), rmqfake.Wildcard()))
	} else {
		must(b, s.CreateTopic(topic, rmqfake.TopicNormal, rmqfake.Queues(8)))
		must(b, s.CreateGroup(group))
	}
	newClient := func(cfg client.SessionConfig) *client.Client {
		c, err := client.New(client.Config{Endpoints: s.Addr(), Logger: slog.New(slog.DiscardHandler)})
		must(b, err)
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		_, err = c.OpenSession(ctx, cfg)
		must(b, err)
		return c
	}
	typ := client.SimpleConsumer
	if lite {
		typ = client.LiteSimpleConsumer
	}
	var recvs []*client.Client
	for i := 0; i < consumers; i++ {
		recvs = append(recvs, newClient(client.SessionConfig{Type: typ, Group: group,
			Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: lite}))
	}
	prod := newClient(client.SessionConfig{Type: client.Producer, Topics: []string{topic}})
	body := make([]byte, 1024)
	total := int64(b.N)
	var produced, acked atomic.Int64
	b.SetBytes(1024)
	b.ResetTimer()
	stopProfile := rmqtest.TimedCPUProfile(b)
	t0, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	errs := make(chan error, producers+consumers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := produced.Add(batch) - batch
				n := min(batch, total-start)
				if n <= 0 {
					return
				}
				msgs := make([]*client.Message, n)
				for i := range msgs {
					msgs[i] = &client.Message{Topic: topic, Body: body}
					if lite {
						msgs[i].LiteTopic = fmt.Sprintf("l%02d", (start+int64(i))%int64(liteTopics))
					}
				}
				res, err := prod.Send(sendCtx, msgs...)
				if err == nil && res[0].Err != nil {
					err = res[0].Err
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, c := range recvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for acked.Load() < total && ctx.Err() == nil {
				msgs, err := c.Receive(ctx, client.ReceiveRequest{Group: group, Topic: topic, Lite: lite,
					BatchSize: batch, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if len(msgs) == 0 {
					continue
				}
				entries := make([]client.AckEntry, len(msgs))
				for i, m := range msgs {
					entries[i] = client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}
				}
				res, err := c.Ack(ctx, group, topic, entries)
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
							break
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
				if acked.Add(int64(len(msgs))) >= total {
					cancel() // wake the other consumers' long polls
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), processCPU()-cpu0
	stopProfile()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	if got := acked.Load(); got < total {
		b.Fatalf("acked %d of %d", got, total)
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "msg/s")
	// CPU of the whole process (client and emulator) per message: less
	// sensitive than msg/s to other processes on a shared machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu-µs/msg")
	st := s.Stats()
	if g := st.Groups[group]; g.InFlight != 0 || g.Backlog != 0 {
		b.Fatalf("after the run: %+v, want nothing in flight or left", g.Counts)
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
