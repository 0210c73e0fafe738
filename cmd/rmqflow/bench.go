package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/demo"
	"github.com/rmqflow/rmqflow/rmqfake"
)

const benchUsage = `Usage: rmqflow bench [flags]

Measures rmqflow against its peers in one run, on one broker, and prints the
ratios. It must run in a checkout of rmqflow (it builds the peers in bench/):

  rmqflow  rmqflow's Source + pooled, batched acks
  raw      a minimal loop on rmqflow's client: batch 32, one ack RPC per batch
           (the ceiling)
  official the official Go client v5.1.4 SimpleConsumer: receive, ack each
           (normal topics only: it has no lite consumer)
  java     the official Java client 5.2.0: SimpleConsumer (normal) and
           LitePushConsumer (lite), acking each; built with Maven

For each mode it produces N messages of -size bytes (lite: over -lite-topics
lite topics), then runs each peer as a child process on its own group and
reads its one-line JSON result: messages/s, CPU time per message (whole peer
process), ack RPCs per message, p50/p99 receive→ack latency, peak RSS.

Topics and groups follow scripts/rocketmq/fixtures.txt: rmqflow-normal-bench
with group rmqflow-normal-bench-<peer>-g, and rmqflow-lite-bench-<peer> with
wildcard group rmqflow-lite-bench-<peer>-g. With -emulator it runs on an
in-process rmqfake instead (created with those resources).

Flags:
`

var benchExamples = []example{
	{"-endpoint 127.0.0.1:18081", "all peers, both modes, on a real broker (make bench starts one)"},
	{"-emulator -peers rmqflow,raw -messages 5000", "on the embedded emulator, no Java"},
	{"-endpoint 127.0.0.1:18081 -report docs/benchmarks.md -chart docs/benchmarks.svg", "write the report and chart"},
}

type benchFlags struct {
	conn        connFlags
	emulator    bool
	peers       string
	modes       string
	messages    int
	size        int
	liteTopics  int
	concurrency int
	repo        string
	timeout     time.Duration
	report      string
	chart       string
	json        bool
}

// peerResult is a peer's JSON line (bench/README.md).
type peerResult struct {
	Peer       string  `json:"peer"`
	Mode       string  `json:"mode"`
	Messages   int     `json:"messages"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	AckRPCs    int64   `json:"ack_rpcs"`
	RSSBytes   int64   `json:"rss_bytes"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	Error      string  `json:"error,omitempty"`
}

func (r peerResult) rate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Seconds
}

func runBench(args []string, stdout, stderr io.Writer) int {
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.conn.register(fs, "the broker's gRPC `host:port` (or -emulator)")
	fs.BoolVar(&f.emulator, "emulator", false, "run on an in-process rmqfake instead of -endpoint")
	fs.StringVar(&f.peers, "peers", "rmqflow,raw,official,java", "comma-separated `peers` to run")
	fs.StringVar(&f.modes, "modes", "lite,normal", "comma-separated `modes`: lite, normal")
	fs.IntVar(&f.messages, "messages", 10000, "messages per mode (`N`)")
	fs.IntVar(&f.size, "size", 1024, "message size in `bytes`")
	fs.IntVar(&f.liteTopics, "lite-topics", 100, "lite topics the lite backlog spreads over (`K`)")
	fs.IntVar(&f.concurrency, "concurrency", 4, "receive concurrency of every peer")
	fs.StringVar(&f.repo, "repo", "", "rmqflow checkout `dir` (default: found from the working directory)")
	fs.DurationVar(&f.timeout, "peer-timeout", 2*time.Minute, "give up on a peer after this long")
	fs.StringVar(&f.report, "report", "", "also write a Markdown report to `path`")
	fs.StringVar(&f.chart, "chart", "", "also write an SVG chart of messages/s to `path`")
	fs.BoolVar(&f.json, "json", false, "JSON lines (one per peer and mode) instead of a table")
	if done, code := parseFlags(fs, args, stdout, benchUsage, benchExamples); done {
		return code
	}
	if f.conn.endpoint == "" && !f.emulator {
		fmt.Fprintln(stderr, "rmqflow bench: give -endpoint (or RMQFLOW_ENDPOINT) or -emulator")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := bench(ctx, f, stderr)
	if err != nil {
		return fail(stderr, "bench", err)
	}
	if f.json {
		for _, r := range results {
			jsonLine(stdout, r)
		}
	} else {
		writeBenchTable(stdout, results)
	}
	if f.report != "" {
		if err := writeBenchReport(f, results); err != nil {
			return fail(stderr, "bench", err)
		}
	}
	if f.chart != "" {
		if err := writeBenchChart(f.chart, results); err != nil {
			return fail(stderr, "bench", err)
		}
	}
	for _, r := range results {
		if r.Error != "" {
			return exitFailure
		}
	}
	return exitOK
}

func findRepo(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bench", "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("not in an rmqflow checkout (no bench/go.mod above " + dir + "); use -repo")
		}
	}
}

func bench(ctx context.Context, f benchFlags, log io.Writer) ([]peerResult, error) {
	repo, err := findRepo(f.repo)
	if err != nil {
		return nil, err
	}
	peers := strings.Split(f.peers, ",")
	bins, err := buildPeers(ctx, repo, peers, log)
	if err != nil {
		return nil, err
	}
	endpoint := f.conn.endpoint
	if f.emulator {
		fake, err := benchEmulator(peers)
		if err != nil {
			return nil, err
		}
		defer fake.Stop()
		endpoint = fake.Addr()
	}
	conn := f.conn.connection()
	conn.Endpoints = endpoint
	var results []peerResult
	for _, mode := range strings.Split(f.modes, ",") {
		run := fmt.Sprintf("b%d", time.Now().UnixNano()%1_000_000_000)
		var runnable []string
		for _, p := range peers {
			if p == "official" && mode == "lite" {
				continue // the official Go client has no lite consumer
			}
			runnable = append(runnable, p)
		}
		// On a real broker every group reads the whole topic, so one backlog
		// serves all peers. rmqfake frees a message once the groups that
		// were reading it acked it, so there each peer gets its own.
		perPeer := f.emulator && mode == "normal"
		if !perPeer {
			fmt.Fprintf(log, "bench: producing %d × %d B (%s) ...\n", f.messages, f.size, mode)
			if err := produceBench(ctx, conn, mode, run, runnable, f); err != nil {
				return results, err
			}
		}
		for _, p := range runnable {
			if perPeer {
				if err := produceBench(ctx, conn, mode, run, []string{p}, f); err != nil {
					return results, err
				}
			}
			fmt.Fprintf(log, "bench: running %s (%s) ...\n", p, mode)
			r := runPeer(ctx, bins[p], p, mode, run, endpoint, f, log)
			results = append(results, r)
		}
	}
	return results, nil
}

func benchTopic(mode, peer string) (topic, group string) {
	if mode == "lite" {
		return "rmqflow-lite-bench-" + peer, "rmqflow-lite-bench-" + peer + "-g"
	}
	return "rmqflow-normal-bench", "rmqflow-normal-bench-" + peer + "-g"
}

// benchEmulator starts rmqfake with the bench topics and groups.
func benchEmulator(peers []string) (*rmqfake.Server, error) {
	s, err := rmqfake.New(rmqfake.Addr("127.0.0.1:0"))
	if err != nil {
		return nil, err
	}
	if err := s.CreateTopic("rmqflow-normal-bench", rmqfake.TopicNormal, rmqfake.Queues(8)); err != nil {
		s.Stop()
		return nil, err
	}
	for _, p := range peers {
		_, g := benchTopic("normal", p)
		lt, lg := benchTopic("lite", p)
		errs := errors.Join(s.CreateGroup(g), s.CreateTopic(lt, rmqfake.TopicLite), s.CreateGroup(lg, rmqfake.LiteBind(lt), rmqfake.Wildcard()))
		if errs != nil {
			s.Stop()
			return nil, errs
		}
	}
	return s, nil
}

// produceBench produces the backlog: normal, once (every peer's group reads
// the whole topic); lite, once per peer's main topic.
func produceBench(ctx context.Context, conn rmqflow.Connection, mode, run string, peers []string, f benchFlags) error {
	body := bytes.Repeat([]byte("x"), max(f.size, 1))
	topics := []string{"rmqflow-normal-bench"}
	if mode == "lite" {
		topics = topics[:0]
		for _, p := range peers {
			t, _ := benchTopic(mode, p)
			topics = append(topics, t)
		}
	}
	for _, topic := range topics {
		sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: topic, Concurrency: 16})
		if err != nil {
			return err
		}
		fs := make([]*rmqflow.SendFuture, f.messages)
		for i := range fs {
			rec := rmqflow.Record{Keys: []string{run}, Body: body}
			if mode == "lite" {
				rec.LiteTopic = fmt.Sprintf("%s-%d", run, i%max(f.liteTopics, 1))
			}
			fs[i] = sink.Write(ctx, rec)
		}
		for _, fu := range fs {
			if _, err := fu.Wait(ctx); err != nil {
				_ = sink.Close(context.WithoutCancel(ctx))
				return fmt.Errorf("producing to %s: %w", topic, err)
			}
		}
		if err := sink.Close(ctx); err != nil {
			return err
		}
	}
	return nil
}

// buildPeers builds the Go peers with go build and the Java peer with Maven,
// into .cache/bench under the checkout; it returns each peer's command line.
func buildPeers(ctx context.Context, repo string, peers []string, log io.Writer) (map[string][]string, error) {
	out := map[string][]string{}
	binDir := filepath.Join(repo, ".cache", "bench", "bin")
	var goPeers []string
	for _, p := range peers {
		switch p {
		case "rmqflow", "raw", "official":
			goPeers = append(goPeers, "./peer/"+p)
			exe := filepath.Join(binDir, p)
			if runtime.GOOS == "windows" {
				exe += ".exe"
			}
			out[p] = []string{exe}
		case "java":
			jar := filepath.Join(repo, ".cache", "bench", "java", "target", "rmqflow-bench-peer.jar")
			fmt.Fprintln(log, "bench: building the Java peer with Maven ...")
			mvn := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", filepath.Join(repo, "bench", "java", "pom.xml"),
				"-Dpeer.buildDir="+filepath.Dir(jar), "package")
			if b, err := mvn.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building the Java peer: %v\n%s", err, b)
			}
			out[p] = []string{"java", "-Xmx512m", "-jar", jar}
		default:
			return nil, fmt.Errorf("unknown peer %q (want rmqflow, raw, official, java)", p)
		}
	}
	if len(goPeers) > 0 {
		fmt.Fprintln(log, "bench: building the Go peers ...")
		args := append([]string{"build", "-o", binDir + string(filepath.Separator)}, goPeers...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(repo, "bench")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the Go peers: %v\n%s", err, b)
		}
	}
	return out, nil
}

func runPeer(ctx context.Context, argv []string, peer, mode, run, endpoint string, f benchFlags, log io.Writer) peerResult {
	topic, group := benchTopic(mode, peer)
	args := append(append([]string{}, argv[1:]...),
		"--endpoint="+endpoint, "--topic="+topic, "--group="+group, "--mode="+mode, "--run="+run,
		fmt.Sprintf("--messages=%d", f.messages), fmt.Sprintf("--concurrency=%d", f.concurrency),
		"--timeout="+f.timeout.String())
	cmd := exec.CommandContext(ctx, argv[0], args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.Discard
	err := cmd.Run()
	var r peerResult
	line := strings.TrimSpace(stdout.String())
	if jerr := json.Unmarshal([]byte(line), &r); jerr != nil {
		r = peerResult{Peer: peer, Mode: mode, Error: fmt.Sprintf("no result line (%v): %q", errors.Join(err, jerr), line)}
	}
	if r.Error != "" {
		fmt.Fprintf(log, "bench: %s (%s): %s\n", peer, mode, r.Error)
	}
	return r
}

func writeBenchTable(w io.Writer, results []peerResult) {
	fmt.Fprintf(w, "\n%-9s %-7s %9s %9s %8s %11s %10s %10s %8s\n", "peer", "mode", "msgs/s", "vs rmqflow", "CPU µs", "ack RPC/msg", "p50 ms", "p99 ms", "RSS MB")
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(w, "%-9s %-7s failed: %s\n", r.Peer, r.Mode, r.Error)
			continue
		}
		fmt.Fprintf(w, "%-9s %-7s %9.0f %9.2fx %8.1f %11.3f %10.1f %10.1f %8.1f\n", r.Peer, r.Mode, r.rate(), ratio(results, r),
			r.CPUSeconds*1e6/float64(max(r.Messages, 1)), float64(r.AckRPCs)/float64(max(r.Messages, 1)), r.P50, r.P99, float64(r.RSSBytes)/(1<<20))
	}
}

// ratio is r's throughput relative to rmqflow's in the same mode.
func ratio(results []peerResult, r peerResult) float64 {
	for _, o := range results {
		if o.Peer == "rmqflow" && o.Mode == r.Mode && o.rate() > 0 {
			return r.rate() / o.rate()
		}
	}
	return 0
}

func writeBenchChart(path string, results []peerResult) error {
	var bars []demo.Bar
	colors := map[string]string{"rmqflow": "#337ab7", "raw": "#5bc0de", "official": "#d9534f", "java": "#f0ad4e"}
	for _, r := range results {
		if r.Error == "" {
			bars = append(bars, demo.Bar{Label: r.Peer + " (" + r.Mode + ")", Value: r.rate(), Color: colors[r.Peer]})
		}
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := demo.WriteBarChart(file, "Messages acked per second (same broker, same run)", "msg/s", bars); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

func writeBenchReport(f benchFlags, results []peerResult) error {
	var b bytes.Buffer
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Run on %s: %s/%s, %d CPUs, %s; %d messages of %d B per mode, %d lite topics, receive concurrency %d; %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(),
		f.messages, f.size, f.liteTopics, f.concurrency, map[bool]string{true: "embedded emulator", false: "real broker at " + f.conn.endpoint + " (host " + host + ")"}[f.emulator])
	fmt.Fprintln(&b, "| peer | mode | msgs/s | vs rmqflow | CPU µs/msg | ack RPC/msg | p50 ms | p99 ms | peak RSS MB |")
	fmt.Fprintln(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(&b, "| %s | %s | failed: %s |||||||\n", r.Peer, r.Mode, r.Error)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f× | %.1f | %.3f | %.1f | %.1f | %.1f |\n", r.Peer, r.Mode, r.rate(), ratio(results, r),
			r.CPUSeconds*1e6/float64(max(r.Messages, 1)), float64(r.AckRPCs)/float64(max(r.Messages, 1)), r.P50, r.P99, float64(r.RSSBytes)/(1<<20))
	}
	return os.WriteFile(f.report, b.Bytes(), 0o644)
}
