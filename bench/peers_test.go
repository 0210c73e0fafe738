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

// Fixtures of the peers (scripts/rocketmq/fixtures.txt): a group per peer on
// the normal bench topic, a LITE main topic and wildcard group per lite peer.
const (
	rawGroup      = "rmqflow-normal-bench-raw-g"
	javaGroup     = "rmqflow-normal-bench-java-g"
	rawLiteTopic  = "rmqflow-lite-bench-raw"
	javaLiteTopic = "rmqflow-lite-bench-java"
)

// peerRun is one run of one peer binary.
type peerRun struct {
	name  string
	cmd   []string // program and leading arguments
	mode  string
	topic string
	group string
	run   string
}

// TestPeers builds the benchmark peers (bench/peer/official, bench/peer/raw,
// bench/java), produces a backlog per mode (2,000 messages, or
// $RMQFLOW_PEERS_MESSAGES) and runs each peer on it as a child process,
// checking its JSON line, then prints a table.
//
//	RMQFLOW_ENDPOINT=127.0.0.1:18081 RMQFLOW_BENCH=1 go test -run TestPeers -v .
func TestPeers(t *testing.T) {
	ep := endpoint(t)
	const liteTopics = 50
	n := 2000
	if v := os.Getenv("RMQFLOW_PEERS_MESSAGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("RMQFLOW_PEERS_MESSAGES=%q: want a positive integer", v)
		}
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./peer/official", "./peer/raw")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build peers: %v\n%s", err, out)
	}
	jar := buildJavaPeer(t)
	official, raw := filepath.Join(bin, "official"), filepath.Join(bin, "raw")
	java := []string{"java", "-Xmx512m", "-jar", jar}

	normalRun := rmqtest.Unique("peers")
	liteRun := rmqtest.Unique("peers")
	producePeerBacklog(t, ep, benchTopic, normalRun, n, 0)
	producePeerBacklog(t, ep, rawLiteTopic, liteRun, n, liteTopics)
	producePeerBacklog(t, ep, javaLiteTopic, liteRun, n, liteTopics)

	runs := []peerRun{
		{"official", []string{official}, "normal", benchTopic, officialGroup, normalRun},
		{"raw", []string{raw}, "normal", benchTopic, rawGroup, normalRun},
		{"java", java, "normal", benchTopic, javaGroup, normalRun},
		{"raw", []string{raw}, "lite", rawLiteTopic, rawLiteTopic + "-g", liteRun},
		{"java", java, "lite", javaLiteTopic, javaLiteTopic + "-g", liteRun},
	}
	var results []peerkit.Result
	for _, r := range runs {
		t.Run(r.name+"-"+r.mode, func(t *testing.T) {
			res, code, stderr := runPeer(t, ep, r, n, 3*time.Minute)
			if code != 0 || res.Error != "" {
				t.Fatalf("exit %d, error %q\nstderr:\n%s", code, res.Error, tail(stderr, 4000))
			}
			switch {
			case res.Peer != r.name || res.Mode != r.mode:
				t.Errorf("peer/mode %q/%q, want %q/%q", res.Peer, res.Mode, r.name, r.mode)
			case res.Messages != n:
				t.Errorf("messages %d, want %d", res.Messages, n)
			case res.Seconds <= 0 || res.CPUSeconds <= 0 || res.RSSBytes <= 0:
				t.Errorf("seconds %v, cpu_seconds %v, rss_bytes %d: want all positive", res.Seconds, res.CPUSeconds, res.RSSBytes)
			case res.P50ms <= 0 || res.P99ms < res.P50ms:
				t.Errorf("p50 %v ms, p99 %v ms: want 0 < p50 <= p99", res.P50ms, res.P99ms)
			}
			acked := int64(res.Messages) + res.AckedOther
			if r.name == "raw" {
				if res.AckRPCs*10 > acked {
					t.Errorf("raw sent %d ack RPCs for %d messages, want batched (< 0.1 per message)", res.AckRPCs, acked)
				}
			} else if res.AckRPCs < acked {
				t.Errorf("%s sent %d ack RPCs for %d acked messages, want one per message", r.name, res.AckRPCs, acked)
			}
			results = append(results, res)
		})
	}
	t.Run("official-lite-refused", func(t *testing.T) {
		res, code, _ := runPeer(t, ep, peerRun{"official", []string{official}, "lite", rawLiteTopic, rawLiteTopic + "-g", liteRun}, n, time.Minute)
		if code != peerkit.ExitUsage || res.Error == "" || res.Mode != "lite" {
			t.Errorf("official --mode lite: exit %d, %+v; want exit %d with an error", code, res, peerkit.ExitUsage)
		}
	})

	// Per-message figures count every acked message: messages of another run
	// left in a group (acked_other) cost the same work.
	fmt.Printf("\n%-9s %-6s %8s %6s %10s %12s %12s %9s %9s %9s %10s\n", "peer", "mode", "msgs", "other", "msgs/s", "ack RPC/msg", "CPU µs/msg", "RSS MB", "p50 ms", "p99 ms", "startup s")
	for _, r := range results {
		all := float64(int64(r.Messages) + r.AckedOther)
		fmt.Printf("%-9s %-6s %8d %6d %10.0f %12.3f %12.1f %9.1f %9.1f %9.1f %10.1f\n", r.Peer, r.Mode, r.Messages, r.AckedOther,
			all/r.Seconds, float64(r.AckRPCs)/all, r.CPUSeconds*1e6/all,
			float64(r.RSSBytes)/(1<<20), r.P50ms, r.P99ms, r.StartupSeconds)
	}
}

// runPeer runs one peer and parses the one line it prints on stdout.
func runPeer(t *testing.T, ep string, r peerRun, n int, timeout time.Duration) (peerkit.Result, int, string) {
	t.Helper()
	args := append([]string{}, r.cmd[1:]...)
	for _, kv := range [][2]string{{"endpoint", ep}, {"topic", r.topic}, {"group", r.group}, {"mode", r.mode},
		{"run", r.run}, {"messages", fmt.Sprint(n)}, {"concurrency", "4"}, {"timeout", timeout.String()}} {
		args = append(args, "--"+kv[0]+"="+kv[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.cmd[0], args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("%s: %v\nstderr:\n%s", r.name, err, tail(stderr.String(), 4000))
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("%s %s printed %d lines on stdout, want exactly 1:\n%s\nstderr:\n%s", r.name, r.mode, len(lines), stdout.String(), tail(stderr.String(), 4000))
	}
	var res peerkit.Result
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("%s %s: stdout is not the JSON line: %v\n%s", r.name, r.mode, err, lines[0])
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &raw)
	for _, k := range []string{"peer", "mode", "messages", "seconds", "cpu_seconds", "ack_rpcs", "rss_bytes", "p50_ms", "p99_ms"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("%s %s: JSON line lacks %q: %s", r.name, r.mode, k, lines[0])
		}
	}
	t.Logf("%s", lines[0])
	return res, code, stderr.String()
}

// producePeerBacklog sends n 1-KiB messages of run to topic: keyed with run
// when liteTopics is 0, otherwise to lite topics "<run>-<i % liteTopics>".
func producePeerBacklog(t *testing.T, ep, topic, run string, n, liteTopics int) {
	t.Helper()
	ctx := rmqtest.Context(t, 5*time.Minute)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: ep}, Topic: topic, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	body := []byte(strings.Repeat("x", bodySize))
	fs := make([]*rmqflow.SendFuture, n)
	for i := range fs {
		rec := rmqflow.Record{Body: body}
		if liteTopics > 0 {
			rec.LiteTopic = fmt.Sprintf("%s-%d", run, i%liteTopics)
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
