package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// peerRun is one run of one peer binary.
type peerRun struct {
	peer    string // program: rmqflow, raw, official
	variant string
	mode    string
	topic   string
	group   string
	run     string
	n       int
	extra   []string // more flags
}

func (r peerRun) name() string { return r.peer + "-" + r.variant + "-" + r.mode }

// goVariants are every variant of the Go peers, with the mode(s) it runs in.
var goVariants = []peerRun{
	{peer: "rmqflow", variant: "loop", mode: "normal"},
	{peer: "rmqflow", variant: "loop", mode: "lite"},
	{peer: "rmqflow", variant: "runner", mode: "normal"},
	{peer: "rmqflow", variant: "runner", mode: "lite"},
	{peer: "rmqflow", variant: "runner-throttle", mode: "normal"},
	{peer: "rmqflow", variant: "runner-throttle", mode: "lite"},
	{peer: "raw", variant: "raw", mode: "normal"},
	{peer: "raw", variant: "raw", mode: "lite"},
	{peer: "official", variant: "simple", mode: "normal"},
	{peer: "official", variant: "simple-plain", mode: "normal"},
	{peer: "official", variant: "push", mode: "normal"},
	{peer: "official", variant: "lite-push", mode: "lite"},
}

const peersLiteTopics = 50

// TestPeers builds the Go benchmark peers (bench/peer/rmqflow, raw,
// official), creates a fresh topic and group per run on the broker
// (scripts/rocketmq.sh apply), produces a backlog of 2,000 1-KiB messages
// (or $RMQFLOW_PEERS_MESSAGES) per run and runs every Go variant on its own,
// checking the contract of its JSON line (bench/README.md); then the exit
// codes of bad variants, foreign messages, --warmup and --window.
//
//	RMQFLOW_ENDPOINT=127.0.0.1:18081 RMQFLOW_BENCH=1 go test -count=1 -run TestPeers -v .
func TestPeers(t *testing.T) {
	ep := endpoint(t)
	n := 2000
	if v := os.Getenv("RMQFLOW_PEERS_MESSAGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("RMQFLOW_PEERS_MESSAGES=%q: want a positive integer", v)
		}
	}
	bins := buildGoPeers(t)

	// Fresh topics: the variants, then the foreign, warm-up and window checks.
	prefix := rmqtest.Unique("peers")
	runs := make([]peerRun, 0, len(goVariants)+3)
	for i, v := range goVariants {
		v.topic, v.group, v.run, v.n = fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s-%d-g", prefix, i), rmqtest.Unique("r"), n
		runs = append(runs, v)
	}
	foreign := peerRun{peer: "raw", variant: "raw", mode: "normal", topic: prefix + "-foreign", group: prefix + "-foreign-g", run: rmqtest.Unique("r"), n: n}
	warm := peerRun{peer: "raw", variant: "raw", mode: "normal", topic: prefix + "-warm", group: prefix + "-warm-g", run: rmqtest.Unique("r"), n: n,
		extra: []string{"--warmup=" + strconv.Itoa(n/4)}}
	window := peerRun{peer: "raw", variant: "raw", mode: "normal", topic: prefix + "-window", group: prefix + "-window-g", run: rmqtest.Unique("r"), n: n,
		extra: []string{"--window=1ms", "--batch=1", "--concurrency=1"}}
	applyFixtures(t, append(runs, foreign, warm, window))

	ctx := rmqtest.Context(t, 10*time.Minute)
	for _, r := range runs {
		producePeerBacklog(t, ctx, ep, r.topic, r.run, r.n, r.mode)
	}
	producePeerBacklog(t, ctx, ep, foreign.topic, rmqtest.Unique("other"), 3, "normal") // not of the run
	producePeerBacklog(t, ctx, ep, foreign.topic, foreign.run, foreign.n, "normal")
	producePeerBacklog(t, ctx, ep, warm.topic, warm.run, warm.n, "normal")
	producePeerBacklog(t, ctx, ep, window.topic, window.run, window.n, "normal")

	var results []peerkit.Result
	for _, r := range runs {
		t.Run(r.name(), func(t *testing.T) {
			res, code, stderr := runPeer(t, ep, bins[r.peer], r, 3*time.Minute)
			if code != 0 || res.Error != "" {
				t.Fatalf("exit %d, error %q\nstderr:\n%s", code, res.Error, tail(stderr, 4000))
			}
			checkResult(t, r, res, stderr)
			results = append(results, res)
		})
	}

	t.Run("bad-variants-exit-2", func(t *testing.T) {
		r := runs[0]
		for _, c := range []struct {
			peer, variant, mode string
		}{
			{"rmqflow", "no-such-variant", "normal"},
			{"raw", "loop", "normal"},
			{"official", "simple", "lite"},
			{"official", "simple-plain", "lite"},
			{"official", "push", "lite"},
			{"official", "lite-push", "normal"},
		} {
			bad := r
			bad.peer, bad.variant, bad.mode = c.peer, c.variant, c.mode
			res, code, _ := runPeer(t, ep, bins[c.peer], bad, time.Minute)
			if code != peerkit.ExitUsage || res.Error == "" || res.Mode != c.mode || res.Peer != c.peer {
				t.Errorf("%s --variant %s --mode %s: exit %d, %+v; want exit %d with an error line", c.peer, c.variant, c.mode, code, res, peerkit.ExitUsage)
			}
		}
	})
	t.Run("foreign-exit-1", func(t *testing.T) {
		res, code, stderr := runPeer(t, ep, bins[foreign.peer], foreign, 3*time.Minute)
		if code != peerkit.ExitFailed || res.Foreign < 1 || !strings.Contains(res.Error, "foreign messages") {
			t.Errorf("3 messages of another run in the group: exit %d, foreign %d, error %q; want exit 1, foreign >= 1, \"N foreign messages\"\nstderr:\n%s",
				code, res.Foreign, res.Error, tail(stderr, 2000))
		}
		if res.Messages != foreign.n {
			t.Errorf("messages %d, want %d (the foreign ones are not counted)", res.Messages, foreign.n)
		}
	})
	t.Run("warmup", func(t *testing.T) {
		res, code, stderr := runPeer(t, ep, bins[warm.peer], warm, 3*time.Minute)
		if code != 0 {
			t.Fatalf("exit %d, error %q\nstderr:\n%s", code, res.Error, tail(stderr, 4000))
		}
		if w := warm.n / 4; res.Warmup != w || res.Messages != warm.n-w {
			t.Errorf("warmup %d, messages %d; want %d and %d (the window holds the acks after the warm-up)", res.Warmup, res.Messages, w, warm.n-w)
		}
	})
	t.Run("window-expires", func(t *testing.T) {
		res, code, stderr := runPeer(t, ep, bins[window.peer], window, 3*time.Minute)
		if code != 0 || res.Error != "" {
			t.Fatalf("exit %d, error %q\nstderr:\n%s", code, res.Error, tail(stderr, 4000))
		}
		if !res.WindowExpired || res.Messages >= window.n || res.WindowEndUnixNs <= res.WindowStartUnixNs {
			t.Errorf("--window=1ms: window_expired %v, messages %d (of %d), window %d..%d ns; want expired, fewer, a window",
				res.WindowExpired, res.Messages, window.n, res.WindowStartUnixNs, res.WindowEndUnixNs)
		}
	})

	fmt.Printf("\n%-9s %-16s %-6s %7s %9s %9s %9s %9s %10s %7s %8s %8s %9s %8s\n", "peer", "variant", "mode", "msgs", "msgs/s",
		"recv/msg", "empty", "ack/msg", "CPU µs/msg", "RSS MB", "p50 ms", "p99 ms", "e2e p99", "start s")
	for _, r := range results {
		m := float64(r.Messages)
		fmt.Printf("%-9s %-16s %-6s %7d %9.0f %9.3f %9d %9.3f %10.1f %7.1f %8.1f %8.1f %9.1f %8.1f\n", r.Peer, r.Variant, r.Mode, r.Messages,
			m/r.Seconds, float64(r.ReceiveRPCs)/m, r.EmptyReceives, float64(r.AckRPCs)/m, r.CPUSeconds*1e6/m,
			float64(r.RSSBytes)/(1<<20), r.P50ms, r.P99ms, r.E2EP99ms, r.StartupSeconds)
	}
}

// checkResult checks the JSON line of a successful run of r.
func checkResult(t *testing.T, r peerRun, res peerkit.Result, stderr string) {
	t.Helper()
	if res.Peer != r.peer || res.Variant != r.variant || res.Mode != r.mode || res.Concurrency != 4 {
		t.Errorf("peer/variant/mode/concurrency %q/%q/%q/%d, want %q/%q/%q/4", res.Peer, res.Variant, res.Mode, res.Concurrency, r.peer, r.variant, r.mode)
	}
	if res.Messages != r.n || res.Foreign != 0 || res.WindowExpired {
		t.Errorf("messages %d, foreign %d, window_expired %v; want %d, 0, false", res.Messages, res.Foreign, res.WindowExpired, r.n)
	}
	if res.WindowStartUnixNs <= 0 || res.WindowEndUnixNs <= res.WindowStartUnixNs ||
		math.Abs(float64(res.WindowEndUnixNs-res.WindowStartUnixNs)/1e9-res.Seconds) > 1e-3 {
		t.Errorf("window %d..%d ns, seconds %v: want a window of that length", res.WindowStartUnixNs, res.WindowEndUnixNs, res.Seconds)
	}
	if res.Seconds <= 0 || res.CPUSeconds <= 0 || res.RSSBytes <= 0 {
		t.Errorf("seconds %v, cpu_seconds %v, rss_bytes %d: want all positive", res.Seconds, res.CPUSeconds, res.RSSBytes)
	}
	if res.P50ms <= 0 || res.P99ms < res.P50ms || res.E2EP50ms <= 0 || res.E2EP99ms < res.E2EP50ms {
		t.Errorf("p50/p99 %v/%v ms, e2e %v/%v ms: want 0 < p50 <= p99", res.P50ms, res.P99ms, res.E2EP50ms, res.E2EP99ms)
	}
	if r.mode == "lite" && (res.ColdE2EP99ms <= 0 || res.HotE2EP99ms != 0) {
		t.Errorf("lite: cold/hot e2e p99 %v/%v ms; want > 0 (every lite topic is cold) and 0", res.ColdE2EP99ms, res.HotE2EP99ms)
	}
	if r.mode == "normal" && (res.ColdE2EP99ms != 0 || res.HotE2EP99ms != 0) {
		t.Errorf("normal: cold/hot e2e p99 %v/%v ms; want 0 (no lite topics)", res.ColdE2EP99ms, res.HotE2EP99ms)
	}
	// Every variant observes its receive RPCs: at least one per batch of 32.
	if res.ReceiveRPCs*32 < int64(r.n)-32 || res.EmptyReceives < 0 || res.EmptyReceives > res.ReceiveRPCs {
		t.Errorf("receive_rpcs %d, empty_receives %d for %d messages: want >= 1 per 32 (minus the first), 0 <= empty <= receives", res.ReceiveRPCs, res.EmptyReceives, r.n)
	}
	switch r.peer {
	case "official": // one AckMessage per message: the client has no batch ack
		if res.AckRPCs < int64(r.n) {
			t.Errorf("ack_rpcs %d for %d messages, want >= 1 per message", res.AckRPCs, r.n)
		}
	case "raw": // one multi-entry ack per received batch
		if res.AckRPCs < 1 || res.AckRPCs > res.ReceiveRPCs+3 {
			t.Errorf("ack_rpcs %d, receive_rpcs %d: want one ack per non-empty receive", res.AckRPCs, res.ReceiveRPCs)
		}
	default: // the pool coalesces: fewer RPCs than messages
		if res.AckRPCs < 1 || res.AckRPCs >= int64(r.n) {
			t.Errorf("ack_rpcs %d for %d messages, want 1..n-1 (coalesced)", res.AckRPCs, r.n)
		}
	}
	if !strings.Contains(stderr, peerkit.ReadyLine) {
		t.Errorf("stderr lacks the readiness line %q", peerkit.ReadyLine)
	}
}

// buildGoPeers builds the Go peers into a temporary directory.
func buildGoPeers(t *testing.T) map[string]string {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./peer/rmqflow", "./peer/raw", "./peer/official")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build peers: %v\n%s", err, out)
	}
	return map[string]string{"rmqflow": filepath.Join(bin, "rmqflow"), "raw": filepath.Join(bin, "raw"), "official": filepath.Join(bin, "official")}
}

// applyFixtures creates each run's topic and group on the broker
// (scripts/rocketmq.sh apply, one JVM for all).
func applyFixtures(t *testing.T, runs []peerRun) {
	t.Helper()
	var b strings.Builder
	for _, r := range runs {
		if r.mode == "lite" {
			fmt.Fprintf(&b, "topic %s lite\ngroup %s bind=%s wildcard\n", r.topic, r.group, r.topic)
		} else {
			fmt.Fprintf(&b, "topic %s normal queues=8\ngroup %s\n", r.topic, r.group)
		}
	}
	file := filepath.Join(t.TempDir(), "fixtures.txt")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "rocketmq.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, "apply", file).CombinedOutput(); err != nil {
		t.Fatalf("scripts/rocketmq.sh apply: %v\n%s", err, out)
	}
}

// runPeer runs one peer and parses the one line it prints on stdout.
func runPeer(t *testing.T, ep, bin string, r peerRun, timeout time.Duration) (peerkit.Result, int, string) {
	t.Helper()
	args := []string{}
	for _, kv := range [][2]string{{"endpoint", ep}, {"topic", r.topic}, {"group", r.group}, {"mode", r.mode}, {"variant", r.variant},
		{"run", r.run}, {"messages", fmt.Sprint(r.n)}, {"concurrency", "4"}, {"timeout", timeout.String()}} {
		args = append(args, "--"+kv[0]+"="+kv[1])
	}
	if r.mode == "lite" {
		args = append(args, fmt.Sprintf("--lite-topics=%d", peersLiteTopics))
	}
	args = append(args, r.extra...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("%s: %v\nstderr:\n%s", r.name(), err, tail(stderr.String(), 4000))
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("%s printed %d lines on stdout, want exactly 1:\n%s\nstderr:\n%s", r.name(), len(lines), stdout.String(), tail(stderr.String(), 4000))
	}
	var res peerkit.Result
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("%s: stdout is not the JSON line: %v\n%s", r.name(), err, lines[0])
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &raw)
	for _, k := range []string{"peer", "variant", "mode", "concurrency", "messages", "warmup", "seconds", "window_start_unix_ns",
		"window_end_unix_ns", "cpu_seconds", "rss_bytes", "receive_rpcs", "empty_receives", "ack_rpcs", "p50_ms", "p99_ms",
		"e2e_p50_ms", "e2e_p99_ms", "cold_e2e_p99_ms", "hot_e2e_p99_ms", "startup_seconds", "redelivered", "foreign", "window_expired"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("%s: JSON line lacks %q: %s", r.name(), k, lines[0])
		}
	}
	t.Logf("%s", lines[0])
	return res, code, stderr.String()
}

// producePeerBacklog sends n 1-KiB messages of run to topic: keyed with run
// in normal mode, to lite topics "<run>-<i % peersLiteTopics>" in lite mode.
func producePeerBacklog(t *testing.T, ctx context.Context, ep, topic, run string, n int, mode string) {
	t.Helper()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: ep}, Topic: topic, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	body := []byte(strings.Repeat("x", bodySize))
	fs := make([]*rmqflow.SendFuture, n)
	for i := range fs {
		rec := rmqflow.Record{Body: body}
		if mode == "lite" {
			rec.LiteTopic = fmt.Sprintf("%s-%d", run, i%peersLiteTopics)
		} else {
			rec.Keys = []string{run}
		}
		fs[i] = sink.Write(ctx, rec)
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// buildJavaPeer builds bench/java with Maven into .cache/bench-java (outside
// git) unless the jar there was built from the same sources, and returns the
// jar's path.
func buildJavaPeer(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs("java")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := filepath.Abs(filepath.Join("..", ".cache", "bench-java"))
	if err != nil {
		t.Fatal(err)
	}
	jar := filepath.Join(cache, "target", "rmqflow-bench-peer.jar")
	sum := sourceHash(t, src)
	stamp := filepath.Join(cache, "sources.sha256")
	if old, err := os.ReadFile(stamp); err == nil && string(old) == sum {
		if _, err := os.Stat(jar); err == nil {
			return jar
		}
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	mvn := exec.Command("mvn", "-q", "-B", "-f", filepath.Join(src, "pom.xml"), "-Dpeer.buildDir="+filepath.Join(cache, "target"), "package")
	if out, err := mvn.CombinedOutput(); err != nil {
		t.Fatalf("mvn package bench/java: %v\n%s", err, tail(string(out), 8000))
	}
	if err := os.WriteFile(stamp, []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %s", jar, time.Since(t0).Round(time.Millisecond))
	return jar
}

// sourceHash hashes pom.xml and everything under src/ of the Java project.
func sourceHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	add := func(path string) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "%s\x00", rel)
		if _, err := io.Copy(h, f); err != nil {
			t.Fatal(err)
		}
	}
	add(filepath.Join(dir, "pom.xml"))
	err := filepath.WalkDir(filepath.Join(dir, "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			add(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
