package rmqio

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// fakeTimer is an idle close armed through afterFunc, fired by the test.
type fakeTimer struct {
	d              time.Duration
	f              func()
	stopped, fired bool
}

// fakeClock stands in for afterFunc: it records the idle closes the
// readers' sources arm, and runs one only when the test fires it.
type fakeClock struct {
	mu     sync.Mutex
	timers []*fakeTimer
}

type fakeTimerHandle struct {
	c *fakeClock
	t *fakeTimer
}

func (h fakeTimerHandle) Stop() bool {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	pending := !h.t.stopped && !h.t.fired
	h.t.stopped = true
	return pending
}

// install makes c the clock of idle closes until the test ends.
func (c *fakeClock) install(t *testing.T) {
	prev := afterFunc
	afterFunc = func(d time.Duration, f func()) idleTimer {
		c.mu.Lock()
		defer c.mu.Unlock()
		ft := &fakeTimer{d: d, f: f}
		c.timers = append(c.timers, ft)
		return fakeTimerHandle{c, ft}
	}
	t.Cleanup(func() { afterFunc = prev })
}

// pending lists the idle closes armed and neither stopped nor fired.
func (c *fakeClock) pending() []*fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*fakeTimer
	for _, ft := range c.timers {
		if !ft.stopped && !ft.fired {
			out = append(out, ft)
		}
	}
	return out
}

// fire runs ft as its time having come.
func (c *fakeClock) fire(ft *fakeTimer) {
	c.mu.Lock()
	ft.fired = true
	c.mu.Unlock()
	ft.f()
}

// TestReadIdleCloseGivesBackFetched: a worker closes a reader's shared
// source that no bundle used for IdleClose, and what it had fetched and not
// emitted goes back to the group at once: another consumer of the group
// receives it again long before its invisibility ends. The job here ends by
// failing (a stage fused behind Read fails its first bundle); the failed
// bundle lets go of the source, so that a retry on the worker can take it;
// until IdleClose has passed (the test's clock) the source keeps what it
// fetched.
func TestReadIdleCloseGivesBackFetched(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t)
	clock := &fakeClock{}
	clock.install(t)
	const topic, group, n = "rmqflow-beam-a", "rmqflow-beam-a-g", 20
	const idleClose, invisible = 7 * time.Minute, 10 * time.Minute
	label := "idleclose"
	resetSeen(label)
	// One message per lite topic: the one the pipeline takes holds only its
	// own lite topic, and the reader's first receive fetches them all.
	want := produce(t, s.Addr(), topic, label, n, n)
	cfg := ReadConfig{Connection: Connection{Endpoints: s.Addr()}, MainTopic: topic, Group: group,
		InvisibleDuration: invisible, MaxBundleTime: 200 * time.Millisecond, IdleClose: idleClose}

	p, sc := beam.NewPipelineWithRoot()
	worked := beam.ParDo(sc, &recordFn{Label: label}, Read(sc, cfg))
	beam.ParDo(sc, &crashFn{Label: label, After: 0}, worked)
	if err := ptest.Run(p); err == nil {
		t.Fatal("the job whose first bundle fails succeeded")
	}
	emitted := seenBodies(label)
	if len(emitted) == 0 || len(emitted) >= n {
		t.Fatalf("the job emitted %d of %d messages before failing: the test needs the source to hold the rest", len(emitted), n)
	}
	key := sourceKey(cfg.withDefaults(), 0)
	held := func() rmqfake.Counts { return s.Stats().Topics[topic].Counts }
	if c := held(); c.InFlight != n || c.Backlog != 0 {
		t.Fatalf("after the job: %d in flight, %d in the backlog; want the reader to have fetched all %d", c.InFlight, c.Backlog, n)
	}

	// Before IdleClose has passed, the source is kept with what it fetched,
	// and its idle close is armed.
	registered := func() *sharedSource {
		sources.mu.Lock()
		defer sources.mu.Unlock()
		return sources.m[key]
	}
	kept := registered()
	if kept == nil {
		t.Fatal("the reader's source was closed before IdleClose passed")
	}
	armedOnce := func(when string) *fakeTimer {
		t.Helper()
		armed := clock.pending()
		if len(armed) != 1 || armed[0].d != idleClose {
			ds := make([]time.Duration, len(armed))
			for i, ft := range armed {
				ds[i] = ft.d
			}
			t.Fatalf("idle closes pending %s: %v, want exactly one, of IdleClose (%v)", when, ds, idleClose)
		}
		return armed[0]
	}
	first := armedOnce("after the job ended")

	// The failed bundle let go of the source: a retry on this worker takes
	// it (within 10 s: a source still held would block it for ever), which
	// cancels the idle close; its end arms a new one.
	took := make(chan *sharedSource, 1)
	go func() {
		sh, err := acquireSource(t.Context(), cfg.withDefaults(), 0)
		if err != nil {
			t.Error(err)
		}
		took <- sh
	}()
	select {
	case sh := <-took:
		if sh != kept {
			t.Fatal("the retry did not take the worker's source of the reader")
		}
		clock.mu.Lock()
		stopped := first.stopped
		clock.mu.Unlock()
		if !stopped {
			t.Fatal("a bundle holds the source and its idle close is still pending")
		}
		sh.done()
	case <-time.After(10 * time.Second):
		t.Fatal("a retried bundle cannot take the reader's source: the failed bundle still holds it")
	}
	last := armedOnce("after the retried bundle")
	if c := held(); c.InFlight != n {
		t.Fatalf("%d of %d messages in flight before IdleClose passed: the source gave back early", c.InFlight, n)
	}

	// IdleClose passes: the source closes and gives back what it fetched.
	clock.fire(last)
	if registered() != nil {
		t.Fatal("the reader's source is still registered after its idle close")
	}

	// Another consumer of the group receives every message the pipeline did
	// not take, again (its second delivery), within 30 s of an invisibility
	// of 10 min.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	other, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
		Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}}, AwaitDuration: 5 * time.Second, InvisibleDuration: invisible},
		rmqflow.BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	again := map[string]int{}
	for len(again) < n-len(emitted) {
		m, err := other.Next(ctx)
		if err != nil {
			t.Fatalf("another consumer received %d of the %d messages the closed source held: %v", len(again), n-len(emitted), err)
		}
		body := string(m.Value)
		switch {
		case !want[body]:
			t.Fatalf("received %q, not one of the test's", body)
		case emitted[body] > 0:
			t.Fatalf("received %s, which the failed job took: it should stay invisible for %v", body, invisible)
		case m.Meta.DeliveryAttempt < 2:
			t.Fatalf("%s comes with delivery attempt %d: it was never fetched by the reader", body, m.Meta.DeliveryAttempt)
		}
		again[body]++
	}
	t.Logf("the failed job took %d message(s); the closed source gave back %d, received again by another consumer", len(emitted), len(again))
}

// TestReadTrackerRefusesDynamicSplits: Read's restriction tracker refuses
// every split but a self-checkpoint. TrySplit(f) with f > 0 returns no
// residual and the primary unchanged, and the read goes on; TrySplit(0)
// returns a primary that is done and the residual to resume (the same
// shard, one epoch later), after which the tracker claims nothing more.
func TestReadTrackerRefusesDynamicSplits(t *testing.T) {
	start := readRestriction{Shard: 3, Epoch: 5}
	for _, f := range []float64{0.5, 0.01, 0.99, 1} {
		rt := &readTracker{rest: start}
		if !rt.TryClaim(0) {
			t.Fatal("a fresh tracker refused a claim")
		}
		primary, residual, err := rt.TrySplit(f)
		if err != nil {
			t.Fatalf("TrySplit(%v): %v", f, err)
		}
		if residual != nil {
			t.Fatalf("TrySplit(%v) gave a residual %+v: a Pop read cannot be divided", f, residual)
		}
		if !reflect.DeepEqual(primary, start) {
			t.Fatalf("TrySplit(%v) changed the primary to %+v, want %+v", f, primary, start)
		}
		if rt.IsDone() || !reflect.DeepEqual(rt.GetRestriction(), start) || !rt.TryClaim(1) {
			t.Fatalf("after a refused TrySplit(%v): done %v, restriction %+v: the read must go on", f, rt.IsDone(), rt.GetRestriction())
		}
	}

	// The same through the LockRTracker the runner is given.
	fn := &readFn{Cfg: ReadConfig{Shards: 4}.withDefaults()}
	lrt := fn.CreateTracker(start)
	if _, residual, _ := lrt.TrySplit(0.5); residual != nil {
		t.Fatalf("the runner's tracker split off %+v", residual)
	}

	// A self-checkpoint.
	rt := &readTracker{rest: start}
	rt.TryClaim(0)
	primary, residual, err := rt.TrySplit(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (readRestriction{Shard: 3, Epoch: 5, Done: true}); !reflect.DeepEqual(primary, want) {
		t.Fatalf("checkpoint primary %+v, want %+v (done)", primary, want)
	}
	if want := (readRestriction{Shard: 3, Epoch: 6}); !reflect.DeepEqual(residual, want) {
		t.Fatalf("checkpoint residual %+v, want %+v (the rest of the read)", residual, want)
	}
	if fn.RestrictionSize(nil, primary.(readRestriction)) != 0 || fn.RestrictionSize(nil, residual.(readRestriction)) == 0 {
		t.Fatal("the done primary must be empty and the residual not")
	}
	if !rt.IsDone() || rt.TryClaim(1) {
		t.Fatal("the tracker still claims after its checkpoint")
	}
	if _, again, _ := rt.TrySplit(0); again != nil {
		t.Fatalf("a second checkpoint of a done tracker split off %+v", again)
	}
	// The residual resumes the read: a tracker on it claims, and is not
	// re-sharded.
	if rest := residual.(readRestriction); !(&readTracker{rest: rest}).TryClaim(0) || len(fn.SplitRestriction(nil, rest)) != 1 {
		t.Fatal("the residual does not resume the read")
	}
}

// failSends fails, with the transient UNAVAILABLE, every SendMessage call
// carrying body fail, and counts the calls per body.
type failSends struct {
	mu    sync.Mutex
	fail  string
	calls map[string]int
}

func (f *failSends) hook(c rmqfake.Call) rmqfake.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := false
	for _, m := range c.Request.(*v2.SendMessageRequest).GetMessages() {
		f.calls[string(m.GetBody())]++
		fail = fail || string(m.GetBody()) == f.fail
	}
	if fail {
		return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "injected: try again")}
	}
	return rmqfake.Verdict{}
}

func (f *failSends) count(body string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[body]
}

// TestWriteTransientFailureFailsBundle: a record that still fails with a
// transient error after MaxAttempts fails its bundle (the pipeline's run
// returns the error) instead of coming out as an AckFailure, and none of
// the messages that bundle's records were made from is acked, not even
// those whose records were stored.
func TestWriteTransientFailureFailsBundle(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t)
	const n, maxAttempts = 5, 2
	const in, out = "rmqflow-beam-d", "rmqflow-beam-out"
	produce(t, s.Addr(), in, "wt", n, n)

	// The records carry the handles of messages received by the group.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
		Lite: []rmqflow.LiteBinding{{Topic: in, Group: in + "-g"}}, AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Minute},
		rmqflow.BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	var recs []Record
	for range n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h, err := m.Handle.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, Record{LiteTopic: "answer-" + m.Meta.LiteTopic, Body: append([]byte("re:"), m.Value...), AckHandles: [][]byte{h}})
	}

	// The failing record is the bundle's last: Write waits for the records in
	// order, so every other one has its result before the bundle fails.
	failing := string(recs[n-1].Body)
	f := &failSends{fail: failing, calls: map[string]int{}}
	s.Intercept("SendMessage", f.hook)
	p, sc := beam.NewPipelineWithRoot()
	// One record per send, so that only the failing record fails.
	Write(sc, WriteConfig{Connection: Connection{Endpoints: s.Addr()}, Topic: out, MaxAttempts: maxAttempts, BatchSize: 1},
		beam.CreateList(sc, recs))
	err = ptest.Run(p)
	if err == nil || !strings.Contains(err.Error(), "rmqio: writing to "+out) {
		t.Fatalf("the run returned %v, want the bundle failed by the transient write error", err)
	}
	if got := f.count(failing); got != maxAttempts {
		t.Fatalf("the failing record was tried %d times, want MaxAttempts (%d)", got, maxAttempts)
	}
	st := s.Stats()
	if c := st.Topics[in].Counts; c.Acked != 0 || c.InFlight != n {
		t.Fatalf("after the failed bundle: %d of its %d input messages acked, %d in flight; want none acked", c.Acked, n, c.InFlight)
	}
	t.Logf("%d of the bundle's %d records were stored, none of its messages acked; the run returned: %v", st.Topics[out].Sent, n, err)
	if st.Topics[out].Sent == 0 {
		t.Fatal("no record of the bundle was stored: the test should show that stored records are not acked when their bundle fails")
	}
}
