package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// result is a peer's JSON line (contract v2, bench/README.md).
type result struct {
	Peer          string  `json:"peer"`
	Variant       string  `json:"variant"`
	Mode          string  `json:"mode"`
	Concurrency   int     `json:"concurrency"`
	Messages      int     `json:"messages"`
	Warmup        int     `json:"warmup"`
	Seconds       float64 `json:"seconds"`
	WindowStartNs int64   `json:"window_start_unix_ns"`
	WindowEndNs   int64   `json:"window_end_unix_ns"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	RSSBytes      int64   `json:"rss_bytes"`
	ReceiveRPCs   int64   `json:"receive_rpcs"`
	EmptyReceives int64   `json:"empty_receives"`
	AckRPCs       int64   `json:"ack_rpcs"`
	P50ms         float64 `json:"p50_ms"`
	P99ms         float64 `json:"p99_ms"`
	E2EP50ms      float64 `json:"e2e_p50_ms"`
	E2EP99ms      float64 `json:"e2e_p99_ms"`
	ColdE2EP99ms  float64 `json:"cold_e2e_p99_ms"`
	HotE2EP99ms   float64 `json:"hot_e2e_p99_ms"`
	ColdAcked     int64   `json:"cold_acked"`
	HotAcked      int64   `json:"hot_acked"`
	Startup       float64 `json:"startup_seconds"`
	Redelivered   int64   `json:"redelivered"`
	AckFailures   int64   `json:"ack_failures"`
	ChangeRPCs    int64   `json:"change_rpcs"`
	Foreign       int64   `json:"foreign"`
	WindowExpired bool    `json:"window_expired"`
	Error         string  `json:"error,omitempty"`
}

func (r result) rate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Seconds
}

// perMsg is x per message of the window; -1 stays -1 (not observable).
func (r result) perMsg(x float64) float64 {
	if x < 0 {
		return -1
	}
	return x / float64(max(r.Messages, 1))
}

// readyLine is what a peer writes to stderr when its first message arrives.
const readyLine = "peer: first message"

// peerBins builds the peers and returns each program's command line.
func peerBins(ctx context.Context, repo string, programs []string, logw io.Writer) (map[string][]string, error) {
	out := map[string][]string{}
	binDir := filepath.Join(repo, ".cache", "bench", "bin")
	var goPeers []string
	for _, p := range programs {
		switch p {
		case "rmqflow", "raw", "official":
			goPeers = append(goPeers, "./peer/"+p)
			out[p] = []string{filepath.Join(binDir, p)}
		case "java":
			buildDir := filepath.Join(repo, ".cache", "bench", "java", "target")
			fmt.Fprintln(logw, "harness: building the Java peer with Maven ...")
			mvn := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", filepath.Join(repo, "bench", "java", "pom.xml"),
				"-Dpeer.buildDir="+buildDir, "package")
			if b, err := mvn.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building the Java peer: %v\n%s", err, b)
			}
			out[p] = []string{"java", "-Xmx512m", "-jar", filepath.Join(buildDir, "rmqflow-bench-peer.jar")}
		default:
			return nil, fmt.Errorf("unknown peer program %q", p)
		}
	}
	if len(goPeers) > 0 {
		fmt.Fprintln(logw, "harness: building the Go peers ...")
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", binDir + string(filepath.Separator)}, goPeers...)...)
		cmd.Dir = filepath.Join(repo, "bench")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the Go peers: %v\n%s", err, b)
		}
	}
	return out, nil
}

// startedPeer is a running peer process.
type startedPeer struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	ready  chan struct{}
	done   chan struct{}
	logf   *os.File
	err    error
}

// startPeer starts the peer of r; its stderr goes to r.LogPath.
func startPeer(ctx context.Context, argv []string, r *run, endpoint, brokerAddr string, timeout time.Duration) (*startedPeer, error) {
	args := append([]string{}, argv[1:]...)
	args = append(args, r.Peer.flags()...)
	if r.Peer.kicks() {
		args = append(args, "--lite-dispatch-broker="+brokerAddr)
	}
	args = append(args,
		"--endpoint="+endpoint, "--topic="+r.Topic, "--group="+r.Group, "--mode="+r.Mode,
		"--variant="+r.Peer.Variant, "--run="+r.ID,
		fmt.Sprintf("--messages=%d", r.Messages), fmt.Sprintf("--warmup=%d", r.Warmup),
		fmt.Sprintf("--concurrency=%d", r.Concurrency), "--timeout="+timeout.String())
	if r.Window > 0 {
		args = append(args, "--window="+r.Window.String())
	}
	if r.HandlerDelay > 0 {
		args = append(args, "--handler-delay="+r.HandlerDelay.String())
	}
	if r.Invisible > 0 {
		args = append(args, "--invisible="+r.Invisible.String())
	}
	if r.Mode == "lite" {
		args = append(args, fmt.Sprintf("--lite-topics=%d", r.LiteTopics))
	}
	logf, err := os.Create(r.LogPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "$ %s %s\n", argv[0], strings.Join(args, " "))
	sp := &startedPeer{logf: logf, ready: make(chan struct{}), done: make(chan struct{})}
	sp.cmd = exec.CommandContext(ctx, argv[0], args...)
	sp.cmd.Stdout = &sp.stdout
	stderr, err := sp.cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := sp.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	var once sync.Once
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if strings.Contains(line, readyLine) {
				once.Do(func() { close(sp.ready) })
			}
		}
		_, _ = io.Copy(logf, stderr)
	}()
	go func() {
		<-copied
		sp.err = sp.cmd.Wait()
		close(sp.done)
	}()
	return sp, nil
}

// wait waits for the peer to exit and parses its line.
func (sp *startedPeer) wait(r *run) result {
	<-sp.done
	defer sp.logf.Close()
	line := strings.TrimSpace(sp.stdout.String())
	fmt.Fprintf(sp.logf, "== stdout: %s\n== exit: %v\n", line, sp.err)
	var res result
	if jerr := json.Unmarshal([]byte(line), &res); jerr != nil {
		return result{Peer: r.Peer.Program, Variant: r.Peer.Variant, Mode: r.Mode,
			Error: fmt.Sprintf("no result line (%v): %q", errors.Join(sp.err, jerr), line)}
	}
	if res.Error == "" && sp.err != nil {
		res.Error = fmt.Sprintf("exit %v without an error in its line", sp.err)
	}
	if res.Error == "" && res.Foreign > 0 {
		res.Error = fmt.Sprintf("%d foreign messages", res.Foreign)
	}
	return res
}
