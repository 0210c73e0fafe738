// Package peerkit is what the Go benchmark peers (bench/peer/...) share: the
// flags of the peer contract (v2, /work/notes/I9-PEER-CONTRACT.md and
// bench/README.md), the bookkeeping of a run (the Tracker: its timed window,
// distinct messages of the run acked, RPC counters, latencies, CPU and RSS)
// and the one JSON line each peer prints on stdout. The Java peer
// (bench/java) implements the same contract.
package peerkit

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes of a peer.
const (
	ExitOK      = 0
	ExitFailed  = 1 // timeout, broker or client error, foreign messages
	ExitUsage   = 2 // bad flags, unknown variant, or a mode the variant does not support
	DefaultMode = "normal"
)

// Flags are the flags every peer takes (Go flag style: --name value or
// --name=value).
type Flags struct {
	Endpoint     string
	Topic        string
	Group        string
	Mode         string // "normal" or "lite"
	Variant      string
	Run          string
	Messages     int
	Warmup       int
	Window       time.Duration
	Concurrency  int
	Batch        int
	Invisible    time.Duration
	Await        time.Duration
	HandlerDelay time.Duration
	Timeout      time.Duration
	// LiteTopics is the number of lite topics of the run, "<run>-0" ..
	// "<run>-K-1" (lite mode; 0: unknown). Informational: every Go variant
	// reads the whole LITE main topic through its wildcard group.
	LiteTopics int
}

// Lite tells whether the peer reads a LITE main topic.
func (f Flags) Lite() bool { return f.Mode == "lite" }

// Mine tells whether a message belongs to the run: in normal mode one of its
// keys is the run id, in lite mode its lite topic starts with "<run>-".
func (f Flags) Mine(keys []string, liteTopic string) bool {
	if f.Lite() {
		return strings.HasPrefix(liteTopic, f.Run+"-")
	}
	return slices.Contains(keys, f.Run)
}

// Delay sleeps the handler delay (--handler-delay), returning early when ctx
// ends.
func (f Flags) Delay(ctx context.Context) {
	if f.HandlerDelay <= 0 {
		return
	}
	t := time.NewTimer(f.HandlerDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Variant is one way a peer consumes: its name, the modes it supports and
// its consume function.
type Variant struct {
	Name    string
	Modes   []string
	Consume Consume
}

// Peer describes a peer program: its name, its variants (for each mode, the
// first variant that supports it is the default, so list the strongest
// first) and optional extra flags of its own.
type Peer struct {
	Name     string
	Variants []Variant
	Flags    func(fs *flag.FlagSet)
}

// Consume runs a peer's consumer until ctx ends, recording into t. It returns
// nil when ctx ended, an error when the consumer cannot run; it must release
// what it holds before returning.
type Consume func(ctx context.Context, f Flags, t *Tracker) error

// ParseFlags parses args (without the program name) and picks the variant.
// On an error, the returned Flags still carry the mode and variant as given
// (for the error line).
func ParseFlags(p Peer, args []string) (Flags, Variant, error) {
	var f Flags
	fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	def := os.Getenv("RMQFLOW_ENDPOINT")
	if def == "" {
		def = "127.0.0.1:18081"
	}
	names := make([]string, len(p.Variants))
	for i, v := range p.Variants {
		names[i] = v.Name
	}
	fs.StringVar(&f.Endpoint, "endpoint", def, "proxy gRPC endpoint host:port (default $RMQFLOW_ENDPOINT or 127.0.0.1:18081)")
	fs.StringVar(&f.Topic, "topic", "", "topic to read: the normal topic, or the LITE main topic (required)")
	fs.StringVar(&f.Group, "group", "", "consumer group; in lite mode a wildcard group bound to --topic (required)")
	fs.StringVar(&f.Mode, "mode", DefaultMode, "normal | lite")
	fs.StringVar(&f.Variant, "variant", "", "client API/configuration: "+strings.Join(names, " | ")+" (default: the first that supports --mode)")
	fs.StringVar(&f.Run, "run", "", "run id: normal messages of the run carry it as a key, lite ones have lite topics \"<run>-...\" (required)")
	fs.IntVar(&f.Messages, "messages", 0, "exit once this many distinct messages of the run are acked (required)")
	fs.IntVar(&f.Warmup, "warmup", 0, "the first W distinct acks are untimed; the window starts when the W-th returns (0: at the first message received)")
	fs.DurationVar(&f.Window, "window", 0, "if > 0, end the timed window after this long even if --messages is not reached (exit 0, \"window_expired\":true)")
	fs.IntVar(&f.Concurrency, "concurrency", 4, "the variant's concurrency knob (receivers, consumption goroutines, Runner workers)")
	fs.IntVar(&f.Batch, "batch", 32, "max messages per receive where the API has it")
	fs.DurationVar(&f.Invisible, "invisible", 60*time.Second, "invisible duration where the API has it")
	fs.DurationVar(&f.Await, "await", 5*time.Second, "long-polling await where the API has it")
	fs.DurationVar(&f.HandlerDelay, "handler-delay", 0, "sleep this long per message before acking it, inside the concurrency slot")
	fs.IntVar(&f.LiteTopics, "lite-topics", 0, "lite mode: the run's lite topics are \"<run>-0\"..\"<run>-K-1\" (informational; 0: unknown)")
	fs.DurationVar(&f.Timeout, "timeout", 5*time.Minute, "give up after this long (exit 1, JSON line with \"error\")")
	if p.Flags != nil {
		p.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return f, Variant{}, err
	}
	switch {
	case fs.NArg() > 0:
		return f, Variant{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case f.Topic == "" || f.Group == "" || f.Run == "":
		return f, Variant{}, errors.New("--topic, --group and --run are required")
	case f.Mode != "normal" && f.Mode != "lite":
		return f, Variant{}, fmt.Errorf("--mode %q: want normal or lite", f.Mode)
	case f.Messages < 1:
		return f, Variant{}, errors.New("--messages must be at least 1")
	case f.Warmup < 0 || f.Warmup >= f.Messages:
		return f, Variant{}, fmt.Errorf("--warmup %d: want 0 <= warmup < --messages (%d)", f.Warmup, f.Messages)
	case f.Window < 0:
		return f, Variant{}, errors.New("--window must not be negative")
	case f.Concurrency < 1:
		return f, Variant{}, errors.New("--concurrency must be at least 1")
	case f.Batch < 1 || f.Batch > 32:
		return f, Variant{}, errors.New("--batch must be 1..32")
	case f.Invisible <= 0 || f.Await <= 0:
		return f, Variant{}, errors.New("--invisible and --await must be positive")
	case f.HandlerDelay < 0:
		return f, Variant{}, errors.New("--handler-delay must not be negative")
	case f.LiteTopics < 0:
		return f, Variant{}, errors.New("--lite-topics must not be negative")
	case f.Timeout <= 0:
		return f, Variant{}, errors.New("--timeout must be positive")
	}
	if f.Variant == "" {
		for _, v := range p.Variants {
			if slices.Contains(v.Modes, f.Mode) {
				f.Variant = v.Name
				return f, v, nil
			}
		}
		return f, Variant{}, fmt.Errorf("%s has no variant for --mode %s", p.Name, f.Mode)
	}
	for _, v := range p.Variants {
		if v.Name != f.Variant {
			continue
		}
		if !slices.Contains(v.Modes, f.Mode) {
			return f, Variant{}, fmt.Errorf("%s --variant %s does not support --mode %s (supported: %s)", p.Name, v.Name, f.Mode, strings.Join(v.Modes, ", "))
		}
		return f, v, nil
	}
	return f, Variant{}, fmt.Errorf("%s: unknown --variant %q (known: %s)", p.Name, f.Variant, strings.Join(names, ", "))
}

// Result is the one JSON line a peer prints (contract v2; bench/README.md
// says what each field means). Counters a variant cannot observe are -1.
type Result struct {
	Peer              string  `json:"peer"`
	Variant           string  `json:"variant"`
	Mode              string  `json:"mode"`
	Concurrency       int     `json:"concurrency"`
	Messages          int     `json:"messages"`
	Warmup            int     `json:"warmup"`
	Seconds           float64 `json:"seconds"`
	WindowStartUnixNs int64   `json:"window_start_unix_ns"`
	WindowEndUnixNs   int64   `json:"window_end_unix_ns"`
	CPUSeconds        float64 `json:"cpu_seconds"`
	RSSBytes          int64   `json:"rss_bytes"`
	ReceiveRPCs       int64   `json:"receive_rpcs"`
	EmptyReceives     int64   `json:"empty_receives"`
	AckRPCs           int64   `json:"ack_rpcs"`
	P50ms             float64 `json:"p50_ms"`
	P99ms             float64 `json:"p99_ms"`
	E2EP50ms          float64 `json:"e2e_p50_ms"`
	E2EP99ms          float64 `json:"e2e_p99_ms"`
	ColdE2EP99ms      float64 `json:"cold_e2e_p99_ms"`
	HotE2EP99ms       float64 `json:"hot_e2e_p99_ms"`
	ColdAcked         int64   `json:"cold_acked"` // acks in the window on cold lite topics (the hot-tenant shape)
	HotAcked          int64   `json:"hot_acked"`  // acks in the window on the hot lite topic
	StartupSeconds    float64 `json:"startup_seconds"`
	Redelivered       int64   `json:"redelivered"`
	AckFailures       int64   `json:"ack_failures"`
	ChangeRPCs        int64   `json:"change_rpcs"`
	Foreign           int64   `json:"foreign"`
	WindowExpired     bool    `json:"window_expired"`
	Error             string  `json:"error,omitempty"`
}

// CPUTime is the process's user plus system CPU time so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PeakRSS is the process's peak resident set size (VmHWM), 0 when unknown.
func PeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Main is a peer's main: it keeps stdout for the JSON line alone (everything
// else written to stdout, by this process or a library, goes to stderr),
// parses the flags, runs the variant until the run's messages are acked, the
// window expires, the timeout passes or the consumer fails, prints the JSON
// line and exits: 0 on success, 1 on a failure or foreign messages, 2 on bad
// flags.
func Main(p Peer) {
	out := takeStdout()
	f, v, err := ParseFlags(p, os.Args[1:])
	if err != nil {
		if f.Mode == "" {
			f.Mode = DefaultMode
		}
		emit(out, Result{Peer: p.Name, Variant: f.Variant, Mode: f.Mode, Concurrency: f.Concurrency, Warmup: f.Warmup,
			ReceiveRPCs: -1, EmptyReceives: -1, AckRPCs: -1, AckFailures: -1, ChangeRPCs: -1, RSSBytes: PeakRSS(), Error: err.Error()})
		os.Exit(ExitUsage)
	}
	os.Exit(run(out, p.Name, f, v.Consume))
}

// run runs consume with a fresh tracker, writes the result line to out and
// returns the exit code.
func run(out io.Writer, peer string, f Flags, consume Consume) int {
	ctx, cancel := context.WithCancel(context.Background())
	t := NewTracker(f)
	stopped := make(chan error, 1)
	go func() { stopped <- consume(ctx, f, t) }()
	timer := time.NewTimer(f.Timeout)
	defer timer.Stop()
	code := ExitOK
	var r Result
	select {
	case <-t.Done():
		r = t.Result(peer, f)
	case <-timer.C:
		r = t.Result(peer, f)
		r.Error = fmt.Sprintf("timeout after %s: %d of %d messages of run %s acked", f.Timeout, t.Acked(), f.Messages, f.Run)
		code = ExitFailed
	case err := <-stopped:
		r = t.Result(peer, f)
		if err == nil {
			err = errors.New("consumer stopped early")
		}
		r.Error = err.Error()
		code = ExitFailed
		stopped <- nil
	}
	if r.Foreign > 0 && code == ExitOK {
		r.Error = fmt.Sprintf("%d foreign messages", r.Foreign)
		code = ExitFailed
	}
	emit(out, r)
	cancel()
	select { // let the consumer say goodbye to the broker, within bounds
	case <-stopped:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(os.Stderr, peer+": consumer did not stop within 10s")
	}
	return code
}

func emit(w io.Writer, r Result) {
	b, _ := json.Marshal(r)
	_, _ = w.Write(append(b, '\n'))
}

// takeStdout returns a handle on the real stdout and points file descriptor
// 1 (and os.Stdout) at stderr, so that stray output cannot corrupt the JSON
// line.
func takeStdout() io.Writer {
	fd, err := syscall.Dup(1)
	if err != nil {
		return os.Stdout
	}
	if err := syscall.Dup3(2, 1, 0); err != nil {
		_ = syscall.Close(fd)
		return os.Stdout
	}
	os.Stdout = os.Stderr
	return os.NewFile(uintptr(fd), "stdout")
}
