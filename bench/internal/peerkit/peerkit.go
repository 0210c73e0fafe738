// Package peerkit is what the benchmark peers (bench/peer/...) share: their
// common flags, the bookkeeping of a run (distinct messages of the run acked,
// ack RPCs, receive→ack latency, CPU and RSS) and the one JSON line each peer
// prints on stdout. The Java peer (bench/java) implements the same contract;
// bench/README.md describes it.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Exit codes of a peer.
const (
	ExitOK      = 0
	ExitFailed  = 1 // timeout, broker or client error
	ExitUsage   = 2 // bad flags or a mode the peer does not support
	DefaultMode = "normal"
)

// Flags are the flags every peer takes (Go flag style: --name value or
// --name=value).
type Flags struct {
	Endpoint    string
	Topic       string
	Group       string
	Mode        string // "normal" or "lite"
	Run         string
	Messages    int
	Concurrency int
	Timeout     time.Duration
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

// ParseFlags parses args (without the program name).
func ParseFlags(peer string, args []string) (Flags, error) {
	var f Flags
	fs := flag.NewFlagSet(peer, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	def := os.Getenv("RMQFLOW_ENDPOINT")
	if def == "" {
		def = "127.0.0.1:18081"
	}
	fs.StringVar(&f.Endpoint, "endpoint", def, "proxy gRPC endpoint host:port (default $RMQFLOW_ENDPOINT or 127.0.0.1:18081)")
	fs.StringVar(&f.Topic, "topic", "", "topic to read: the normal topic, or the LITE main topic (required)")
	fs.StringVar(&f.Group, "group", "", "consumer group; in lite mode a wildcard group bound to --topic (required)")
	fs.StringVar(&f.Mode, "mode", DefaultMode, "normal | lite")
	fs.StringVar(&f.Run, "run", "", "run id: normal messages of the run carry it as a key, lite ones have lite topics \"<run>-...\" (required)")
	fs.IntVar(&f.Messages, "messages", 0, "stop once this many distinct messages of the run are acked (required)")
	fs.IntVar(&f.Concurrency, "concurrency", 4, "receive concurrency")
	fs.DurationVar(&f.Timeout, "timeout", 5*time.Minute, "give up after this long (exit 1, JSON line with \"error\")")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case fs.NArg() > 0:
		return f, fmt.Errorf("unexpected arguments %q", fs.Args())
	case f.Topic == "" || f.Group == "" || f.Run == "":
		return f, errors.New("--topic, --group and --run are required")
	case f.Mode != "normal" && f.Mode != "lite":
		return f, fmt.Errorf("--mode %q: want normal or lite", f.Mode)
	case f.Messages < 1:
		return f, errors.New("--messages must be at least 1")
	case f.Concurrency < 1:
		return f, errors.New("--concurrency must be at least 1")
	case f.Timeout <= 0:
		return f, errors.New("--timeout must be positive")
	}
	return f, nil
}

// Result is the one JSON line a peer prints. The fields up to P99ms are the
// contract; StartupSeconds and AckedOther are informational extras.
type Result struct {
	Peer     string `json:"peer"`
	Mode     string `json:"mode"`
	Messages int    `json:"messages"`
	// Seconds runs from the first message received to the return of the ack
	// that completed the run.
	Seconds float64 `json:"seconds"`
	// CPUSeconds is the process's user+system CPU over the same span.
	CPUSeconds float64 `json:"cpu_seconds"`
	AckRPCs    int64   `json:"ack_rpcs"`
	// RSSBytes is the process's peak resident set size (VmHWM).
	RSSBytes int64   `json:"rss_bytes"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	// StartupSeconds runs from the start of the consumer to the first
	// message received.
	StartupSeconds float64 `json:"startup_seconds"`
	// AckedOther counts acked messages that were not of the run.
	AckedOther int64  `json:"acked_other"`
	Error      string `json:"error,omitempty"`
}

// Tracker keeps the books of one run. It is safe for concurrent use.
type Tracker struct {
	goal    int
	started time.Time

	ackRPCs atomic.Int64
	other   atomic.Int64

	mu       sync.Mutex
	firstAt  time.Time
	firstCPU time.Duration
	acked    map[string]struct{}
	lat      []time.Duration
	endAt    time.Time
	endCPU   time.Duration
	done     chan struct{}
}

// NewTracker starts the books; the consumer starts now.
func NewTracker(goal int) *Tracker {
	return &Tracker{goal: goal, started: time.Now(), acked: make(map[string]struct{}, goal), lat: make([]time.Duration, 0, goal), done: make(chan struct{})}
}

// Received is called when a receive returned n > 0 messages; it returns the
// receive time to pass to Acked. The first call starts the measured span.
func (t *Tracker) Received(n int) time.Time {
	now := time.Now()
	if n == 0 {
		return now
	}
	t.mu.Lock()
	if t.firstAt.IsZero() {
		t.firstAt, t.firstCPU = now, CPUTime()
	}
	t.mu.Unlock()
	return now
}

// AckRPC counts one ack RPC sent.
func (t *Tracker) AckRPC() { t.ackRPCs.Add(1) }

// Acked records a successful ack of message id received at receivedAt. mine
// tells whether it is a message of the run; only distinct ones count.
func (t *Tracker) Acked(id string, mine bool, receivedAt time.Time) {
	now := time.Now()
	if !mine {
		t.other.Add(1)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.acked[id]; dup || !t.endAt.IsZero() {
		return
	}
	t.acked[id] = struct{}{}
	t.lat = append(t.lat, now.Sub(receivedAt))
	if len(t.acked) == t.goal {
		t.endAt, t.endCPU = now, CPUTime()
		close(t.done)
	}
}

// Done is closed when goal distinct messages of the run are acked.
func (t *Tracker) Done() <-chan struct{} { return t.done }

// Result summarises the run so far.
func (t *Tracker) Result(peer, mode string) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := Result{Peer: peer, Mode: mode, Messages: len(t.acked), AckRPCs: t.ackRPCs.Load(), AckedOther: t.other.Load(), RSSBytes: PeakRSS()}
	if !t.firstAt.IsZero() {
		end, endCPU := t.endAt, t.endCPU
		if end.IsZero() {
			end, endCPU = time.Now(), CPUTime()
		}
		r.Seconds = end.Sub(t.firstAt).Seconds()
		r.CPUSeconds = (endCPU - t.firstCPU).Seconds()
		r.StartupSeconds = t.firstAt.Sub(t.started).Seconds()
	}
	if len(t.lat) > 0 {
		l := slices.Clone(t.lat)
		slices.Sort(l)
		r.P50ms = ms(percentile(l, 50))
		r.P99ms = ms(percentile(l, 99))
	}
	return r
}

// percentile is the nearest-rank percentile of sorted d.
func percentile(d []time.Duration, p int) time.Duration {
	i := (len(d)*p + 99) / 100 // ceil(len*p/100), 1-based
	if i < 1 {
		i = 1
	}
	return d[i-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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

// Consume runs a peer's consumer until ctx ends, recording into t. It returns
// nil when ctx ended, an error when the consumer cannot run; it must release
// what it holds before returning.
type Consume func(ctx context.Context, f Flags, t *Tracker) error

// Main is a peer's main: it keeps stdout for the JSON line alone (everything
// else written to stdout, by this process or a library, goes to stderr),
// parses the flags, runs consume until the run's messages are acked, the
// timeout passes or consume fails, prints the JSON line and exits.
// supported lists the modes the peer can run.
func Main(peer string, supported []string, consume Consume) {
	out := takeStdout()
	fail := func(code int, f Flags, err error) {
		emit(out, Result{Peer: peer, Mode: f.Mode, RSSBytes: PeakRSS(), Error: err.Error()})
		os.Exit(code)
	}
	f, err := ParseFlags(peer, os.Args[1:])
	if err != nil {
		if f.Mode == "" {
			f.Mode = DefaultMode
		}
		fail(ExitUsage, f, err)
	}
	if !slices.Contains(supported, f.Mode) {
		fail(ExitUsage, f, fmt.Errorf("%s does not support --mode %s (supported: %s)", peer, f.Mode, strings.Join(supported, ", ")))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := NewTracker(f.Messages)
	stopped := make(chan error, 1)
	go func() { stopped <- consume(ctx, f, t) }()
	timer := time.NewTimer(f.Timeout)
	code := ExitOK
	var r Result
	select {
	case <-t.Done():
		r = t.Result(peer, f.Mode)
	case <-timer.C:
		r = t.Result(peer, f.Mode)
		r.Error = fmt.Sprintf("timeout after %s: %d of %d messages of run %s acked", f.Timeout, r.Messages, f.Messages, f.Run)
		code = ExitFailed
	case err := <-stopped:
		r = t.Result(peer, f.Mode)
		if err == nil {
			err = errors.New("consumer stopped early")
		}
		r.Error = err.Error()
		code = ExitFailed
		stopped <- nil
	}
	emit(out, r)
	cancel()
	select { // let the consumer say goodbye to the broker, within bounds
	case <-stopped:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(os.Stderr, peer+": consumer did not stop within 10s")
	}
	os.Exit(code)
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
