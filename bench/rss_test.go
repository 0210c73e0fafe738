package bench

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestRSS10kInFlight holds 10,000 received 1-KiB messages unacked (in flight)
// and checks the process stays under 100 MB resident, then acks them all.
func TestRSS10kInFlight(t *testing.T) {
	ep := endpoint(t)
	const topic, group, n = "rmqflow-normal-rss", "rmqflow-normal-rss-g", 10_000
	run := rmqtest.Unique("rss")
	ctx := rmqtest.Context(t, 5*time.Minute)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: ep}, Topic: topic, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("y", bodySize))
	fs := make([]*rmqflow.SendFuture, n)
	for i := range fs {
		fs[i] = sink.Write(ctx, rmqflow.Record{Keys: []string{run}, Body: body})
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = sink.Close(ctx)

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: ep}, Mode: rmqflow.ModeSimple,
		Topic: topic, Group: group, FetchConcurrency: 4, AwaitDuration: 5 * time.Second, InvisibleDuration: 5 * time.Minute}, rmqflow.BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	held := make([]*rmqflow.AckableMessage[[]byte], 0, n)
	mine := 0
	for mine < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if isRun(m.Meta.Keys, run) {
			mine++
		}
		held = append(held, m)
	}
	runtime.GC()
	rss := rssBytes()
	fmt.Printf("\nRSS with %d 1-KiB messages in flight (%d queued): %.1f MB\n", len(held), src.QueueLen(), float64(rss)/(1<<20))
	if rss > 100<<20 {
		t.Errorf("RSS %.1f MB with %d messages in flight, want < 100 MB", float64(rss)/(1<<20), len(held))
	}
	futures := make([]*rmqflow.AckFuture, len(held))
	for i, m := range held {
		futures[i] = src.Acker().AckAsync(ctx, m.Handle)
	}
	for _, f := range futures {
		<-f.Done()
		if f.Err() != nil {
			t.Fatalf("ack: %v", f.Err())
		}
	}
}
