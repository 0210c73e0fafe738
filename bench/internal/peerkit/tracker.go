package peerkit

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Delivery is what the tracker needs to know of one acked delivery.
type Delivery struct {
	ID   string
	Mine bool // of the run (Flags.Mine)
	// LiteTopic is the message's lite topic ("" on a normal topic); those
	// ending "-hot" are hot, the others cold.
	LiteTopic string
	// Born is the producer's born timestamp (zero: unknown, no e2e sample).
	Born time.Time
	// Received is when the receive that brought the message returned.
	Received time.Time
}

// Tracker keeps the books of one run: the timed window, the distinct
// messages of the run acked, the RPC counters and the latencies. It is safe
// for concurrent use.
//
// The window starts when the --warmup-th distinct message of the run is acked
// (with --warmup 0: when the first message is received, Receive or Arrived)
// and ends when the --messages-th is acked, or --window after its start.
// Counters are read at both ends; their difference is the window's.
type Tracker struct {
	goal, warmup int
	window       time.Duration
	started      time.Time

	recv, empty, ack, change atomic.Int64
	ackSource                func() int64 // replaces ack when set
	changeSource             func() int64 // added to change when set
	noRecv, noAck            bool
	noAckFailures, noChanges bool
	ackFailures              atomic.Int64

	mu          sync.Mutex
	firstAt     time.Time
	winStart    time.Time
	winEnd      time.Time
	startCPU    time.Duration
	endCPU      time.Duration
	startCount  [4]int64
	endCount    [4]int64
	expired     bool
	acked       map[string]struct{}
	seen        map[string]struct{} // ids of the run received (Seen), whole run
	foreign     map[string]struct{}
	redelivered int64
	inWindow    int
	lat, e2e    []time.Duration
	cold, hot   []time.Duration
	expiry      *time.Timer
	done        chan struct{}
}

// NewTracker starts the books of a run with flags f; the consumer starts now.
func NewTracker(f Flags) *Tracker {
	return &Tracker{goal: f.Messages, warmup: f.Warmup, window: f.Window, started: time.Now(),
		acked: make(map[string]struct{}, f.Messages), seen: make(map[string]struct{}, f.Messages), foreign: map[string]struct{}{},
		lat: make([]time.Duration, 0, f.Messages), e2e: make([]time.Duration, 0, f.Messages),
		done: make(chan struct{})}
}

// Unobservable marks counters the variant cannot see; they are reported as
// -1 (empty_receives goes with receive_rpcs). Call it before the run.
func (t *Tracker) Unobservable(receives, acks bool) { t.noRecv, t.noAck = receives, acks }

// UnobservableAckFailures marks ack_failures as unknown (-1); call it before
// the run.
func (t *Tracker) UnobservableAckFailures() { t.noAckFailures = true }

// UnobservableChanges marks change_rpcs as unknown (-1); call it before the
// run.
func (t *Tracker) UnobservableChanges() { t.noChanges = true }

// ChangeRPCSource adds src (a counter of ChangeInvisibleDuration RPCs kept
// elsewhere) to the ones counted with ChangeRPC; the window's change_rpcs is
// the difference between its ends. Call it before the run.
func (t *Tracker) ChangeRPCSource(src func() int64) { t.changeSource = src }

// ChangeRPC counts one ChangeInvisibleDuration RPC sent.
func (t *Tracker) ChangeRPC() { t.change.Add(1) }

// AckFailed counts n acks (entries) the broker refused or that failed, over
// the whole run.
func (t *Tracker) AckFailed(n int64) { t.ackFailures.Add(n) }

// Seen records the receipt of a message (every delivery, before its ack):
// one of the run received before, in this run, counts in redelivered,
// whatever became of its first ack. A peer that calls Seen for its
// deliveries gets redeliveries counted at receipt; for one that does not, a
// message acked again after its first ack is counted at that ack instead.
func (t *Tracker) Seen(id string, mine bool) {
	if !mine {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, again := t.seen[id]; again {
		t.redelivered++
		return
	}
	t.seen[id] = struct{}{}
}

// AckRPCSource makes the window's ack_rpcs the difference of src between the
// window's ends (for a client that counts its own ack RPCs). Call it before
// the run.
func (t *Tracker) AckRPCSource(src func() int64) { t.ackSource = src }

// Receive records one receive RPC that returned n messages (n == 0: an empty
// receive) and returns the time it returned.
func (t *Tracker) Receive(n int) time.Time {
	now := time.Now()
	if n > 0 {
		t.arrived(now)
	} else {
		t.empty.Add(1)
	}
	t.recv.Add(1)
	return now
}

// AddReceives adds receive RPCs and empty receives counted elsewhere (either
// may be negative to correct an earlier guess).
func (t *Tracker) AddReceives(rpcs, empty int64) {
	t.recv.Add(rpcs)
	t.empty.Add(empty)
}

// Arrived records that messages arrived now without counting an RPC (for
// clients whose receive RPCs are counted through AddReceives) and returns now.
func (t *Tracker) Arrived() time.Time {
	now := time.Now()
	t.arrived(now)
	return now
}

func (t *Tracker) arrived(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.firstAt.IsZero() {
		t.firstLocked(now)
	}
}

// ReadyLine is what a peer writes to stderr when its first message arrives
// (the harness waits for it before an open-loop producer starts).
const ReadyLine = "peer: first message"

func (t *Tracker) firstLocked(at time.Time) {
	t.firstAt = at
	fmt.Fprintln(os.Stderr, ReadyLine)
	if t.warmup == 0 {
		t.startLocked(at)
	}
}

// AckRPC counts one ack RPC sent (retries included).
func (t *Tracker) AckRPC() { t.ack.Add(1) }

// AddAckRPCs counts n ack RPCs.
func (t *Tracker) AddAckRPCs(n int64) { t.ack.Add(n) }

// Ack records the successful ack of d, returned now. A message not of the
// run counts in foreign; one acked again after its first ack is not counted
// again (it counts in redelivered if its receipts were not reported by Seen).
func (t *Tracker) Ack(d Delivery) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !d.Mine {
		t.foreign[d.ID] = struct{}{}
		return
	}
	if _, dup := t.acked[d.ID]; dup {
		if _, seen := t.seen[d.ID]; !seen {
			t.redelivered++
		}
		return
	}
	if !t.winEnd.IsZero() {
		return // the run is over
	}
	t.acked[d.ID] = struct{}{}
	if t.firstAt.IsZero() { // a peer that did not report the arrival
		t.firstLocked(d.Received)
	}
	if !t.winStart.IsZero() {
		t.inWindow++
		if !d.Received.IsZero() {
			t.lat = append(t.lat, now.Sub(d.Received))
		}
		if !d.Born.IsZero() {
			e := now.Sub(d.Born)
			t.e2e = append(t.e2e, e)
			switch {
			case strings.HasSuffix(d.LiteTopic, "-hot"):
				t.hot = append(t.hot, e)
			case d.LiteTopic != "":
				t.cold = append(t.cold, e)
			}
		}
	}
	n := len(t.acked)
	if t.warmup > 0 && n == t.warmup {
		t.startLocked(now)
	}
	if n == t.goal {
		t.endLocked(now, false)
	}
}

// Acked returns the number of distinct messages of the run acked so far.
func (t *Tracker) Acked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.acked)
}

func (t *Tracker) counts() [4]int64 {
	a := t.ack.Load()
	if t.ackSource != nil {
		a = t.ackSource()
	}
	c := t.change.Load()
	if t.changeSource != nil {
		c += t.changeSource()
	}
	return [4]int64{t.recv.Load(), t.empty.Load(), a, c}
}

func (t *Tracker) startLocked(now time.Time) {
	t.winStart, t.startCPU, t.startCount = now, CPUTime(), t.counts()
	if t.window > 0 {
		t.expiry = time.AfterFunc(t.window, t.expire)
	}
}

func (t *Tracker) endLocked(now time.Time, expired bool) {
	t.winEnd, t.endCPU, t.endCount, t.expired = now, CPUTime(), t.counts(), expired
	if t.expiry != nil {
		t.expiry.Stop()
	}
	close(t.done)
}

func (t *Tracker) expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.winEnd.IsZero() {
		t.endLocked(time.Now(), true)
	}
}

// Done is closed when the window ends: the goal is met or --window expired.
func (t *Tracker) Done() <-chan struct{} { return t.done }

// Result summarises the run so far (a window still open is cut now).
func (t *Tracker) Result(peer string, f Flags) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := Result{Peer: peer, Variant: f.Variant, Mode: f.Mode, Concurrency: f.Concurrency, Warmup: f.Warmup,
		Messages: t.inWindow, RSSBytes: PeakRSS(), Redelivered: t.redelivered, AckFailures: t.ackFailures.Load(),
		Foreign:       int64(len(t.foreign)),
		WindowExpired: t.expired}
	if !t.firstAt.IsZero() {
		r.StartupSeconds = t.firstAt.Sub(t.started).Seconds()
	}
	if !t.winStart.IsZero() {
		end, endCPU, endCount := t.winEnd, t.endCPU, t.endCount
		if end.IsZero() {
			end, endCPU, endCount = time.Now(), CPUTime(), t.counts()
		}
		r.WindowStartUnixNs, r.WindowEndUnixNs = t.winStart.UnixNano(), end.UnixNano()
		r.Seconds = end.Sub(t.winStart).Seconds()
		r.CPUSeconds = (endCPU - t.startCPU).Seconds()
		r.ReceiveRPCs = endCount[0] - t.startCount[0]
		// Counters bumped by several goroutines between two samples (an RPC
		// counted, its emptiness corrected just after) can be off by one per
		// receiver at each end; never below zero.
		r.EmptyReceives = max(0, endCount[1]-t.startCount[1])
		r.AckRPCs = endCount[2] - t.startCount[2]
		r.ChangeRPCs = endCount[3] - t.startCount[3]
	}
	if t.noRecv {
		r.ReceiveRPCs, r.EmptyReceives = -1, -1
	}
	if t.noAck {
		r.AckRPCs = -1
	}
	if t.noAckFailures {
		r.AckFailures = -1
	}
	if t.noChanges {
		r.ChangeRPCs = -1
	}
	r.P50ms, r.P99ms = pcts(t.lat)
	r.E2EP50ms, r.E2EP99ms = pcts(t.e2e)
	_, r.ColdE2EP99ms = pcts(t.cold)
	_, r.HotE2EP99ms = pcts(t.hot)
	r.ColdAcked, r.HotAcked = int64(len(t.cold)), int64(len(t.hot))
	return r
}

// pcts returns the nearest-rank p50 and p99 of d in milliseconds, 0 when d is
// empty.
func pcts(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return ms(percentile(s, 50)), ms(percentile(s, 99))
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
