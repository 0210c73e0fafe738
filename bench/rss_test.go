package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// rssProduceEnv makes the test binary a producer for TestRSS10kInFlight
// ("endpoint topic run n") instead of running tests.
const rssProduceEnv = "RMQFLOW_RSS_PRODUCE"

func TestMain(m *testing.M) {
	if spec := os.Getenv(rssProduceEnv); spec != "" {
		if err := produceRSS(spec); err != nil {
			fmt.Fprintln(os.Stderr, "rss producer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// produceRSS sends n 1-KiB messages keyed by run to topic.
func produceRSS(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 4 {
		return fmt.Errorf("bad %s %q", rssProduceEnv, spec)
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: f[0]}, Topic: f[1], Concurrency: 8})
	if err != nil {
		return err
	}
	defer sink.Close(context.Background())
	body := []byte(strings.Repeat("y", bodySize))
	fs := make([]*rmqflow.SendFuture, n)
	for i := range fs {
		fs[i] = sink.Write(ctx, rmqflow.Record{Keys: []string{f[2]}, Body: body})
	}
	for _, fu := range fs {
		if _, err := fu.Wait(ctx); err != nil {
			return err
		}
	}
	return sink.Close(ctx)
}

// rssLimit is the bound of issue 9: 1.5 × the payload in flight + 20 MB.
func rssLimit(n int) int64 { return int64(n)*bodySize*3/2 + 20<<20 }

// TestRSS10kInFlight holds 10,000 received 1-KiB messages unacked (in flight)
// and checks the process stays under 1.5 × their payload + 20 MB resident
// (about 34.6 MB), then acks them all. The backlog is produced by a child
// process, so that the process measured only consumes.
func TestRSS10kInFlight(t *testing.T) {
	ep := endpoint(t)
	const topic, group, n = "rmqflow-normal-rss", "rmqflow-normal-rss-g", 10_000
	run := rmqtest.Unique("rss")
	ctx := rmqtest.Context(t, 5*time.Minute)
	prod := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	prod.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d", rssProduceEnv, ep, topic, run, n))
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("producing the backlog: %v\n%s", err, out)
	}
	runtime.GC()
	rss0, file0 := rssBytes(), rssFileBytes()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)

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
	rss, file := rssBytes(), rssFileBytes()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// Where the bytes are: the binary's mapped code and data (file-backed,
	// mostly there before the source starts), and the anonymous memory, most
	// of it the Go heap — live objects (per held message: the body, the
	// AckableMessage and the strings it keeps), the partly used spans around
	// them, and freed pages the runtime has not returned yet (HeapIdle minus
	// HeapReleased).
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	perMsg := (float64(ms.HeapAlloc) - float64(ms0.HeapAlloc)) / float64(len(held))
	breakdown := fmt.Sprintf("file-backed %.1f MB (%.1f before the source), anonymous %.1f MB (%.1f before); "+
		"Go heap: live %.1f MB, in use %.1f MB, idle not returned %.1f MB, GC metadata %.1f MB; "+
		"live heap per held message %.0f B (%d B body + %.0f B)",
		mb(uint64(file)), mb(uint64(file0)), mb(uint64(rss-file)), mb(uint64(rss0-file0)),
		mb(ms.HeapAlloc), mb(ms.HeapInuse), mb(ms.HeapIdle-ms.HeapReleased), mb(ms.GCSys),
		perMsg, bodySize, perMsg-bodySize)
	fmt.Printf("\nRSS with %d 1-KiB messages in flight (%d queued): %.1f MB (%.1f MB before the source): %s\n",
		len(held), src.QueueLen(), mb(uint64(rss)), mb(uint64(rss0)), breakdown)
	if lim := rssLimit(len(held)); rss > lim {
		t.Errorf("RSS %.1f MB with %d 1-KiB messages in flight, want ≤ %.1f MB (1.5 × payload + 20 MB); %s",
			mb(uint64(rss)), len(held), mb(uint64(lim)), breakdown)
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

// rssFileBytes is the file-backed part of the process's RSS (RssFile: the
// mapped binary and libraries), 0 when unknown.
func rssFileBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "RssFile:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
