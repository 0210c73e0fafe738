// Package bench measures rmqflow against its peers on the real broker, in the
// same run, and prints ratios (this machine is noisy: absolute numbers mean
// little, ratios measured side by side mean more). It is its own module so
// that the official client's dependencies stay out of the core module.
//
//	RMQFLOW_ENDPOINT=127.0.0.1:18081 RMQFLOW_BENCH=1 go test -run TestCompare -v ./...
//
// `make bench` runs it against a broker it starts.
package bench

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

const (
	benchTopic    = "rmqflow-normal-bench"
	oursGroup     = "rmqflow-normal-bench-ours-g"
	officialGroup = "rmqflow-normal-bench-official-g"
	bodySize      = 1024
	concurrency   = 4
)

func endpoint(t testing.TB) string {
	if os.Getenv("RMQFLOW_BENCH") != "1" {
		t.Skip("benchmark harness: set RMQFLOW_BENCH=1 (make bench does)")
	}
	return rmqtest.Endpoint(t)
}

// produceBacklog sends n 1-KiB messages keyed with run to the bench topic.
func produceBacklog(t testing.TB, ep, run string, n int) {
	ctx := rmqtest.Context(t, 5*time.Minute)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: ep}, Topic: benchTopic, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	body := []byte(strings.Repeat("x", bodySize))
	fs := make([]*rmqflow.SendFuture, n)
	for i := range fs {
		fs[i] = sink.Write(ctx, rmqflow.Record{Keys: []string{run}, Body: body})
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func isRun(keys []string, run string) bool { return len(keys) == 1 && keys[0] == run }

type result struct {
	name    string
	msgs    int
	elapsed time.Duration
	ackRPCs int64
	cpu     time.Duration
}

func (r result) rate() float64 { return float64(r.msgs) / r.elapsed.Seconds() }

// consumeOurs reads n messages of run with a SIMPLE-mode Source
// (FetchConcurrency = concurrency) and acks each through the pooled, batched
// Acker from the consuming goroutine, without waiting for each ack.
func consumeOurs(t testing.TB, ep, run string, n int) result {
	ctx := rmqtest.Context(t, 5*time.Minute)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{
		Connection: rmqflow.Connection{Endpoints: ep}, Mode: rmqflow.ModeSimple, Topic: benchTopic, Group: oursGroup,
		FetchConcurrency: concurrency, AwaitDuration: 5 * time.Second, InvisibleDuration: 60 * time.Second,
	}, rmqflow.BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	acker := src.Acker()
	before := acker.Stats().AckRPCs
	var seen int
	futures := make([]*rmqflow.AckFuture, 0, n)
	for seen < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if isRun(m.Meta.Keys, run) {
			seen++
		}
		futures = append(futures, acker.AckAsync(ctx, m.Handle))
	}
	for _, f := range futures {
		<-f.Done()
		if f.Err() != nil {
			t.Fatalf("ack: %v", f.Err())
		}
	}
	elapsed := time.Since(t0)
	rpcs := acker.Stats().AckRPCs - before
	_ = src.Close(ctx)
	return result{name: "rmqflow Source + batched acks", msgs: n, elapsed: elapsed, ackRPCs: rpcs, cpu: cpuTime() - cpu0}
}

// consumeOfficial reads n messages of run with the official Go client v5.1.4
// SimpleConsumer: concurrency goroutines, each receiving up to 32 and then
// acking each message in turn.
func consumeOfficial(t testing.TB, ep, run string, n int) result {
	rmq.EnableSsl = false
	os.Setenv("rocketmq.client.logRoot", t.TempDir())
	ctx := rmqtest.Context(t, 5*time.Minute)
	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: ep, ConsumerGroup: officialGroup, Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(5*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{benchTopic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	var seen, acks atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seen.Load() < int64(n) && ctx.Err() == nil {
				mvs, err := sc.Receive(ctx, 32, 60*time.Second)
				if err != nil {
					continue // the official client reports an empty poll as an error
				}
				for _, mv := range mvs {
					if isRun(mv.GetKeys(), run) {
						seen.Add(1)
					}
					if err := sc.Ack(ctx, mv); err != nil {
						t.Errorf("official ack: %v", err)
					}
					acks.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	_ = sc.GracefulStop()
	return result{name: "official Go SimpleConsumer, ack each", msgs: n, elapsed: elapsed, ackRPCs: acks.Load(), cpu: cpuTime() - cpu0}
}

// TestCompare runs rounds of: produce a backlog once, consume it with each
// contender (each has its own group, so each reads every message), in
// alternating order. It prints a table and the median ratio.
func TestCompare(t *testing.T) {
	ep := endpoint(t)
	const rounds, n = 3, 5000
	var ours, official []result
	for r := 0; r < rounds; r++ {
		run := rmqtest.Unique("bench")
		produceBacklog(t, ep, run, n)
		if r%2 == 0 {
			ours = append(ours, consumeOurs(t, ep, run, n))
			official = append(official, consumeOfficial(t, ep, run, n))
		} else {
			official = append(official, consumeOfficial(t, ep, run, n))
			ours = append(ours, consumeOurs(t, ep, run, n))
		}
	}
	var ratios []float64
	fmt.Printf("\n%-40s %10s %12s %14s %14s\n", "consumer (normal topic, 1 KiB, concurrency 4)", "msgs/s", "ack RPC/msg", "CPU µs/msg", "")
	for i := range ours {
		for _, x := range []result{ours[i], official[i]} {
			fmt.Printf("%-40s %10.0f %12.3f %14.1f round %d\n", x.name, x.rate(), float64(x.ackRPCs)/float64(x.msgs),
				float64(x.cpu.Microseconds())/float64(x.msgs), i+1)
		}
		ratios = append(ratios, ours[i].rate()/official[i].rate())
	}
	sort.Float64s(ratios)
	fmt.Printf("throughput ratio rmqflow / official, per round: %.2f; median %.2f\n", ratios, ratios[len(ratios)/2])
	for _, o := range ours {
		if float64(o.ackRPCs)/float64(o.msgs) >= 0.1 {
			t.Errorf("rmqflow sent %.3f ack RPCs per message, want < 0.1", float64(o.ackRPCs)/float64(o.msgs))
		}
	}
}
