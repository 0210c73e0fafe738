//go:build unix

package rmqflow_test

// BenchmarkScaleLiteTopics runs a Runner with the FairShare throttle over
// rmqfake, client, Runner and emulator in this process: a backlog of
// max(b.N, lite topics) 256-byte messages spread round-robin over 100 or
// 1,000,000 lite topics of one LITE main topic (wildcard group, fast lite
// dispatch), so that every lite topic holds at least one message, is
// produced untimed; then a Runner (16 workers, handler returns Ack() at once)
// with Runner.SetThrottle(NewThrottle(acker, FairShare(default
// FairShareConfig), default ThrottleConfig)) consumes it. The clock runs from
// Run until the ack pool completed b.N acks: with -benchtime 1000000x every
// message of the 1,000,000 lite topics goes through; with fewer, the
// emulator still holds all 1,000,000 lite topics while the first b.N
// messages (b.N distinct lite topics) are timed. Issue 9 asks for the
// 1,000,000-lite-topic run within 20% of the 100-lite-topic one.
//
// It reports msg/s, the process's CPU per message (client, Runner and
// emulator), the heap in use while the backlog is stored (MB-backlog) and the
// throttle's deferrals:
//
//	go test -run '^$' -bench ScaleLiteTopics -benchtime 100000x -timeout 60m .

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

func BenchmarkScaleLiteTopics(b *testing.B) {
	for _, lites := range []int{100, 1_000_000} {
		b.Run(fmt.Sprintf("lite=%d", lites), func(b *testing.B) { scaleRun(b, lites) })
	}
}

var scaleQuiet = slog.New(slog.DiscardHandler)

func scaleMust(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// scaleCPU is the CPU time (user and system) this process has used.
func scaleCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scaleProduce sends n 256-byte messages round-robin over lites lite topics
// of topic, one per RPC (lite messages cannot be batched) from 16 goroutines.
func scaleProduce(b *testing.B, endpoint, topic string, lites, n int) {
	ctx := context.Background()
	c, err := client.New(client.Config{Endpoints: endpoint, Logger: scaleQuiet})
	scaleMust(b, err)
	defer c.Close(ctx)
	_, err = c.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{topic}})
	scaleMust(b, err)
	body := make([]byte, 256)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				res, err := c.Send(ctx, &client.Message{Topic: topic, LiteTopic: fmt.Sprintf("s%07d", i%lites), Body: body})
				if err == nil && res[0].Err != nil {
					err = res[0].Err
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

func scaleRun(b *testing.B, lites int) {
	n := b.N
	if n == 1 {
		return // the framework's probe run; -benchtime Nx sets the real one
	}
	s := rmqfake.NewForTest(b, rmqfake.FastLiteDispatch(), rmqfake.Logger(scaleQuiet))
	scaleMust(b, s.CreateTopic("main", rmqfake.TopicLite))
	scaleMust(b, s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapInuse
	scaleProduce(b, s.Addr(), "main", lites, max(n, lites))
	runtime.GC()
	runtime.ReadMemStats(&ms)
	backlogMB := float64(int64(ms.HeapInuse)-int64(heap0)) / (1 << 20)

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), Logger: scaleQuiet},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, FetchConcurrency: 4,
		AwaitDuration: 5 * time.Second, InvisibleDuration: time.Minute}, rmqflow.BytesDecoder())
	scaleMust(b, err)
	defer src.Close(context.Background())
	acker := src.Acker()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()

	h := func(ctx context.Context, m *rmqflow.AckableMessage[[]byte]) (rmqflow.Decision, error) {
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 16})
	scaleMust(b, err)
	fair, err := rmqflow.FairShare[[]byte](rmqflow.FairShareConfig{})
	scaleMust(b, err)
	var defers atomic.Int64
	counted := rmqflow.ThrottlePolicyFunc[[]byte](func(m *rmqflow.AckableMessage[[]byte]) rmqflow.Decision {
		d := fair.Decide(m)
		if d.Kind() == rmqflow.DecisionDefer {
			defers.Add(1)
		}
		return d
	})
	th, err := rmqflow.NewThrottle(acker, counted, rmqflow.ThrottleConfig{})
	scaleMust(b, err)
	r.SetThrottle(th)

	b.ResetTimer()
	stopProfile := rmqtest.TimedCPUProfile(b)
	t0, cpu0 := time.Now(), scaleCPU()
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	tick := time.NewTicker(time.Millisecond)
	for acker.Stats().Acks < int64(n) && ctx.Err() == nil {
		select {
		case <-tick.C:
		case err := <-ran:
			b.Fatalf("the runner returned after %d acks of %d: %v", acker.Stats().Acks, n, err)
		case <-ctx.Done():
		}
	}
	tick.Stop()
	elapsed, cpu := time.Since(t0), scaleCPU()-cpu0
	stopProfile()
	stop()
	scaleMust(b, <-ran)
	b.StopTimer()
	if ctx.Err() != nil {
		b.Fatalf("timed out: %d acks of %d", acker.Stats().Acks, n)
	}
	if c := s.Stats().Groups["g"].Counts; c.Acked < int64(n) {
		b.Fatalf("the emulator counts %d acks of %d (%+v)", c.Acked, n, c)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/msg")
	b.ReportMetric(backlogMB, "MB-backlog")
	b.ReportMetric(float64(defers.Load()), "defers")
}
