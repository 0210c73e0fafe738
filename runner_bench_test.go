package rmqflow

// BenchmarkRunnerVsLoop compares the Runner with the loop it must keep up
// with, over rmqfake in this process: a pre-produced backlog of b.N 256-byte
// messages spread round-robin over 100, 10,000 or 100,000 lite topics of one
// LITE main topic (wildcard group, fast lite dispatch), drained by
//
//   - loop: one goroutine ranging over Source.Messages and acking each
//     message with Acker.AckAsync, never waiting for an ack (the rmqflow
//     bench peer);
//   - runner: a Runner with 16 workers whose handler returns Ack() at once;
//   - runner-pipelined: the same with RunnerConfig.PipelineAcks;
//   - runner-throttle: the runner with a FairShare throttle (default
//     FairShareConfig, default ThrottleConfig).
//
// All three read through the same SourceConfig (FetchConcurrency 4, 32 per
// receive, 60 s invisibility). The clock runs from Start until the pool has
// completed b.N acks; the backlog is produced untimed. Each sub-benchmark
// reports msg/s and, for the runner, the deferrals the throttle made.
//
// Use a fixed count (the backlog must cover the lite topics):
//
//	go test -run '^$' -bench RunnerVsLoop -benchtime 100000x -count 5 .
//
// Measured 2026-12-01 on the project's shared 2-core machine (very noisy:
// the loop alone ranged 14k-75k msg/s). A = the Runner before async acks
// (sync ack per message, Concurrency × 4 held), B = after; test binaries
// alternated A,B,B,A,A,B; 20000x for 100 and 10,000 lite topics, 100000x for
// 100,000 (A once there). msg/s, median (min-max) of 3:
//
//	lite     variant          A                      B
//	100      loop             65849 (25699-71454)    53885 (51466-74934)
//	100      runner            1734 (1691-1800)      18889 (18822-19435)
//	100      runner-throttle   1528 (1453-1547)        480 (389-1772)
//	10,000   loop             41110 (31973-76088)    32908 (27515-66071)
//	10,000   runner            2469 (2417-2537)      43179 (26907-57548)
//	10,000   runner-throttle   2603 (2445-2605)      49420 (10555-67609)
//	100,000  loop             11436                  18400 (14433-41894)
//	100,000  runner            2395                  36766 (17868-45777)
//	100,000  runner-throttle   2342                  14822 (13867-14972)
//
// Runner/loop in the same B run, median of 3: 0.35 (100), 0.87 (10,000),
// 1.24 (100,000); with the throttle 0.01-0.03 (100: the FairShare policy
// defers 18-204 messages by 10 s each while a backlog drains), 1.02
// (10,000), 0.81 (100,000). At 100 lite topics a lite topic advances one
// message per ack answer, which then waited up to the ack pool's 5 ms Linger
// (its default since a8fc92e is 0: an ack leaves at once when an RPC slot is free):
// ≈ 100 / 5 ms = 20,000 msg/s at most. With Linger 500 µs (experiment, not
// committed) runner/loop was 0.80 and 0.83 there.
//
// RunnerConfig.PipelineAcks (2026-12-01), on the real broker through the
// bench harness (drain, lite, c=4, 15 s windows, 2 repetitions on the
// shared machine while other builds ran): runner-pipelined 7,939 / 7,251
// msg/s, runner 4,866 / 5,888, loop 6,114 / 7,215; broker CPU 133 / 127
// µs/msg against 227 / 207 for the runner. In process, 30000x at 100 lite
// topics, three rounds: pipelined 38,884 / 40,883 / 21,183, runner 30,760 /
// 33,729 / 35,514, loop 45,358 / 53,595 / 64,029.
//
// After b49769c (FairShare compares rates), B again, two runs at 100 lite
// topics: loop 33288 / 36661, runner 14175 / 18218, runner-throttle 12164 /
// 18496 with 0 defers; one run at 100,000: loop 27089, runner 27915,
// runner-throttle 48892.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

const (
	rbWorkers = 16
	rbBody    = 256
	rbFetch   = 4
)

func BenchmarkRunnerVsLoop(b *testing.B) {
	for _, lites := range []int{100, 10_000, 100_000} {
		for _, kind := range []string{"loop", "runner", "runner-pipelined", "runner-throttle"} {
			b.Run(fmt.Sprintf("%s/lite=%d", kind, lites), func(b *testing.B) {
				rbRun(b, kind, lites)
			})
		}
	}
}

// rbProduce sends n 256-byte messages round-robin over lites lite topics of
// topic, one per RPC from 8 goroutines.
func rbProduce(b *testing.B, endpoint, topic string, lites, n int) {
	ctx := context.Background()
	c, err := client.New(client.Config{Endpoints: endpoint, Logger: rbQuiet})
	rbMust(b, err)
	defer c.Close(ctx)
	_, err = c.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{topic}})
	rbMust(b, err)
	body := make([]byte, rbBody)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				res, err := c.Send(ctx, &client.Message{Topic: topic, LiteTopic: fmt.Sprintf("l%06d", i%lites), Body: body})
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

func rbRun(b *testing.B, kind string, lites int) {
	n := b.N
	if n == 1 && lites > 1 {
		return // the framework's probe run; -benchtime Nx sets the real one
	}
	if n < lites {
		b.Skipf("b.N %d < %d lite topics: run with -benchtime %dx or more", n, lites, lites)
	}
	s := rmqfake.NewForTest(b, rmqfake.FastLiteDispatch(), rmqfake.Logger(rbQuiet))
	rbMust(b, s.CreateTopic("main", rmqfake.TopicLite))
	rbMust(b, s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()))
	rbProduce(b, s.Addr(), "main", lites, n)

	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: s.Addr(), Logger: rbQuiet},
		Lite: []LiteBinding{{Topic: "main", Group: "g"}}, FetchConcurrency: rbFetch,
		AwaitDuration: 5 * time.Second, InvisibleDuration: time.Minute}, BytesDecoder())
	rbMust(b, err)
	defer src.Close(context.Background())
	acker := src.Acker()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// done closes once the pool completed n acks (any outcome; failures
	// are counted apart).
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		for acker.Stats().Acks < int64(n) {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()

	var defers, failed atomic.Int64
	var elapsed time.Duration
	b.ResetTimer()
	t0 := time.Now()
	switch kind {
	case "loop":
		futs := make(chan *AckFuture, n)
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
		rbMust(b, src.Start(ctx))
		got := 0
		for m, err := range src.Messages(ctx) {
			if err != nil {
				b.Fatalf("after %d of %d: %v", got, n, err)
			}
			futs <- acker.AckAsync(ctx, m.Handle)
			if got++; got == n {
				break
			}
		}
		close(futs)
		<-done
		elapsed = time.Since(t0)
		<-waited
	default:
		h := func(ctx context.Context, m *AckableMessage[[]byte]) (Decision, error) {
			return Ack(), nil
		}
		r, err := NewRunner(src, h, RunnerConfig{Concurrency: rbWorkers, PipelineAcks: kind == "runner-pipelined"})
		rbMust(b, err)
		if kind == "runner-throttle" {
			fair, err := FairShare[[]byte](FairShareConfig{})
			rbMust(b, err)
			counted := ThrottlePolicyFunc[[]byte](func(m *AckableMessage[[]byte]) Decision {
				d := fair.Decide(m)
				if d.kind == DecisionDefer {
					defers.Add(1)
				}
				return d
			})
			th, err := NewThrottle(acker, counted, ThrottleConfig{})
			rbMust(b, err)
			r.SetThrottle(th)
		}
		rctx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- r.Run(rctx) }()
		<-done
		elapsed = time.Since(t0)
		stop()
		rbMust(b, <-ran)
	}
	b.StopTimer()
	if ctx.Err() != nil {
		b.Fatalf("timed out: %d acks of %d", acker.Stats().Acks, n)
	}
	if failed.Load() > 0 {
		b.Fatalf("%d acks failed", failed.Load())
	}
	if c := s.Stats().Topics["main"].Counts; c.Acked < int64(n) {
		b.Fatalf("the emulator counts %d acks of %d (%+v)", c.Acked, n, c)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
	if kind == "runner-throttle" {
		b.ReportMetric(float64(defers.Load()), "defers")
	}
}

var rbQuiet = slog.New(slog.DiscardHandler)

func rbMust(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
