package peerkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func flags(n, w int) Flags {
	return Flags{Mode: "lite", Variant: "v", Run: "r", Messages: n, Warmup: w, Concurrency: 4}
}

func del(i int, lite string, recv time.Time) Delivery {
	return Delivery{ID: fmt.Sprint("m", i), Mine: true, LiteTopic: lite, Born: recv.Add(-time.Second), Received: recv}
}

// The window starts at the first message when there is no warm-up, and ends
// at the N-th distinct ack; RPCs before the window are not in it.
func TestTrackerWindowWithoutWarmup(t *testing.T) {
	tr := NewTracker(flags(3, 0))
	tr.Receive(0) // an empty receive before the first message: not in the window
	tr.AckRPC()
	at := tr.Receive(3)
	tr.AckRPC()
	for i := range 3 {
		tr.Ack(del(i, "r-1", at))
	}
	select {
	case <-tr.Done():
	default:
		t.Fatal("Done not closed after the 3rd distinct ack")
	}
	r := tr.Result("p", flags(3, 0))
	if r.Messages != 3 || r.ReceiveRPCs != 1 || r.EmptyReceives != 0 || r.AckRPCs != 1 {
		t.Errorf("messages %d, receives %d, empty %d, acks %d; want 3, 1, 0, 1", r.Messages, r.ReceiveRPCs, r.EmptyReceives, r.AckRPCs)
	}
	if r.WindowStartUnixNs != at.UnixNano() || r.WindowEndUnixNs < r.WindowStartUnixNs || r.Seconds < 0 {
		t.Errorf("window %d..%d, want it to start at the first message (%d)", r.WindowStartUnixNs, r.WindowEndUnixNs, at.UnixNano())
	}
	if r.E2EP99ms < 1000 || r.ColdE2EP99ms != r.E2EP99ms || r.HotE2EP99ms != 0 {
		t.Errorf("e2e p99 %v, cold %v, hot %v; want >= 1000 ms, all cold", r.E2EP99ms, r.ColdE2EP99ms, r.HotE2EP99ms)
	}
}

// With a warm-up of W, the window starts when the W-th distinct ack returns
// and holds the N-W acks after it; duplicates and foreign messages are
// counted apart.
func TestTrackerWarmupRedeliveredForeign(t *testing.T) {
	tr := NewTracker(flags(5, 2))
	at := tr.Receive(8)
	tr.Ack(del(0, "r-1", at))
	tr.Ack(del(0, "r-1", at)) // again: redelivered, not counted
	tr.Ack(Delivery{ID: "x", Mine: false, Received: at})
	tr.Ack(Delivery{ID: "x", Mine: false, Received: at}) // the same foreign one
	tr.AddReceives(2, 1)                                 // before the window: not in it
	tr.Ack(del(1, "r-hot", at))                          // the W-th: the window starts after it
	tr.AddReceives(3, 1)
	tr.AddAckRPCs(2)
	tr.Ack(del(2, "r-hot", at))
	tr.Ack(del(3, "r-2", at))
	tr.Ack(del(4, "r-2", at))
	tr.Ack(del(5, "r-2", at)) // after the end: ignored
	r := tr.Result("p", flags(5, 2))
	if r.Messages != 3 || r.Redelivered != 1 || r.Foreign != 1 {
		t.Errorf("messages %d, redelivered %d, foreign %d; want 3, 1, 1", r.Messages, r.Redelivered, r.Foreign)
	}
	if r.ReceiveRPCs != 3 || r.EmptyReceives != 1 || r.AckRPCs != 2 {
		t.Errorf("receives %d, empty %d, acks %d; want the window's 3, 1, 2", r.ReceiveRPCs, r.EmptyReceives, r.AckRPCs)
	}
	if r.HotE2EP99ms <= 0 || r.ColdE2EP99ms <= 0 {
		t.Errorf("hot %v, cold %v: want both (one hot ack in the window, two cold)", r.HotE2EP99ms, r.ColdE2EP99ms)
	}
}

// --window ends the window by itself.
func TestTrackerWindowExpires(t *testing.T) {
	f := flags(100, 0)
	f.Window = 20 * time.Millisecond
	tr := NewTracker(f)
	at := tr.Receive(1)
	tr.Ack(del(0, "", at))
	select {
	case <-tr.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the window did not expire")
	}
	r := tr.Result("p", f)
	if !r.WindowExpired || r.Messages != 1 || r.Seconds < 0.02 {
		t.Errorf("expired %v, messages %d, seconds %v; want true, 1, >= 0.02", r.WindowExpired, r.Messages, r.Seconds)
	}
}

func TestTrackerUnobservable(t *testing.T) {
	tr := NewTracker(flags(1, 0))
	tr.Unobservable(true, true)
	at := tr.Arrived()
	tr.Ack(del(0, "", at))
	r := tr.Result("p", flags(1, 0))
	if r.ReceiveRPCs != -1 || r.EmptyReceives != -1 || r.AckRPCs != -1 {
		t.Errorf("receives %d, empty %d, acks %d; want -1 each", r.ReceiveRPCs, r.EmptyReceives, r.AckRPCs)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(i+1) * time.Millisecond
	}
	if p50, p99 := pcts(d); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %v, p99 %v of 1..100 ms; want 50, 99", p50, p99)
	}
	if p50, p99 := pcts(d[:1]); p50 != 1 || p99 != 1 {
		t.Errorf("one sample: p50 %v, p99 %v; want 1, 1", p50, p99)
	}
}

func testPeer() Peer {
	nop := func(context.Context, Flags, *Tracker) error { return nil }
	return Peer{Name: "p", Variants: []Variant{
		{Name: "a", Modes: []string{"normal"}, Consume: nop},
		{Name: "b", Modes: []string{"lite"}, Consume: nop},
	}}
}

func TestParseFlagsVariants(t *testing.T) {
	base := []string{"--topic=T", "--group=G", "--run=R", "--messages=10"}
	for _, c := range []struct {
		args    []string
		variant string
		err     string
	}{
		{nil, "a", ""},
		{[]string{"--mode=lite"}, "b", ""},
		{[]string{"--variant=c"}, "", "unknown --variant"},
		{[]string{"--variant=a", "--mode=lite"}, "", "does not support --mode lite"},
		{[]string{"--warmup=10"}, "", "--warmup"},
		{[]string{"--lite-topics=50", "--mode=lite", "--window=30s", "--handler-delay=5ms"}, "b", ""},
	} {
		f, v, err := ParseFlags(testPeer(), append(append([]string{}, base...), c.args...))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want one with %q", c.args, err, c.err)
		case c.err == "" && (err != nil || v.Name != c.variant || f.Variant != c.variant):
			t.Errorf("%v: variant %q/%q, error %v; want %q", c.args, v.Name, f.Variant, err, c.variant)
		}
	}
}

// A run that sees a foreign message ends with exit 1 and the error, after
// its goal; the line is the only output.
func TestRunForeignExitsOne(t *testing.T) {
	f := flags(2, 0)
	f.Timeout = time.Minute
	consume := func(ctx context.Context, f Flags, tr *Tracker) error {
		at := tr.Receive(3)
		tr.Ack(Delivery{ID: "x", Mine: false, Received: at})
		tr.Ack(del(0, "", at))
		tr.Ack(del(1, "", at))
		<-ctx.Done()
		return nil
	}
	var out bytes.Buffer
	code := run(&out, "p", f, consume)
	var r Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("output %q: want one JSON line (%v)", out.String(), err)
	}
	if code != ExitFailed || r.Foreign != 1 || r.Error != "1 foreign messages" || r.Messages != 2 {
		t.Errorf("exit %d, %+v; want exit 1, foreign 1, error \"1 foreign messages\", messages 2", code, r)
	}
}

// A message received again after its first receipt counts in redelivered,
// whatever became of its first ack: here the first ack failed (expired
// handle), so the redelivered copy's ack is the message's first successful
// ack. Counted once per extra receipt, over the whole run, not again at the
// ack; foreign receipts are not counted.
func TestTrackerRedeliveredAtReceipt(t *testing.T) {
	tr := NewTracker(flags(2, 0))
	at := tr.Receive(2)
	tr.Seen("m0", true)
	tr.Seen("m1", true)
	tr.AckFailed(1) // m0's ack failed
	tr.Ack(del(1, "r-1", at))
	tr.Seen("m0", true) // m0 comes back
	tr.Seen("x", false)
	tr.Seen("x", false)
	tr.Ack(del(0, "r-1", at))
	tr.Seen("m1", true) // after the window: still counted (whole run)
	tr.Ack(del(1, "r-1", at))
	r := tr.Result("p", flags(2, 0))
	if r.Messages != 2 || r.Redelivered != 2 || r.AckFailures != 1 {
		t.Errorf("messages %d, redelivered %d, ack failures %d; want 2, 2, 1", r.Messages, r.Redelivered, r.AckFailures)
	}
}

// ack_failures counts the whole run, before the window too.
func TestTrackerAckFailuresWholeRun(t *testing.T) {
	tr := NewTracker(flags(3, 1))
	at := tr.Receive(3)
	tr.AckFailed(2) // before the window
	tr.Ack(del(0, "r-1", at))
	tr.AckFailed(1)
	r := tr.Result("p", flags(3, 1))
	if r.AckFailures != 3 {
		t.Errorf("ack failures %d, want 3", r.AckFailures)
	}
	u := NewTracker(flags(3, 0))
	u.UnobservableAckFailures()
	u.UnobservableChanges()
	if r := u.Result("p", flags(3, 0)); r.AckFailures != -1 || r.ChangeRPCs != -1 {
		t.Errorf("unobservable: ack failures %d, change rpcs %d; want -1, -1", r.AckFailures, r.ChangeRPCs)
	}
}

// change_rpcs covers the window only: counted ones plus a source's.
func TestTrackerChangeRPCsInWindow(t *testing.T) {
	var ext int64
	tr := NewTracker(flags(3, 1))
	tr.ChangeRPCSource(func() int64 { return ext })
	tr.ChangeRPC() // before the window
	ext = 5
	at := tr.Receive(3)
	tr.Ack(del(0, "r-1", at)) // the window starts
	tr.ChangeRPC()
	tr.ChangeRPC()
	ext = 8
	tr.Ack(del(1, "r-1", at))
	tr.Ack(del(2, "r-1", at)) // the window ends
	tr.ChangeRPC()
	ext = 20
	r := tr.Result("p", flags(3, 1))
	if r.ChangeRPCs != 5 {
		t.Errorf("change rpcs %d, want the window's 2 + 3", r.ChangeRPCs)
	}
	b, _ := json.Marshal(r)
	for _, k := range []string{`"ack_failures":0`, `"change_rpcs":5`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON %s lacks %s", b, k)
		}
	}
}
