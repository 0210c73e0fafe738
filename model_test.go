package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The model test drives a Runner (with a Throttle and the source's Acker)
// over rmqfake on a manual clock, with random lite topics, random handler
// outcomes (ack, defer by any duration including zero and negative, release,
// leave, error, panic, the zero Decision, a handler that acks by itself,
// slow handlers), PipelineAcks on or off, random ack and deferral faults
// (acks failing before they are handled, and after: an answer lost) and
// random broker restarts, and checks after every run:
//
//   - a lite topic's messages never run two at once, and a message starts
//     only once every earlier message of its lite topic was decided (acked
//     or dead-lettered): send order;
//   - nothing is acked on the broker that was not decided so: no message is
//     acked or dropped unless its handler decided Ack, or its own failures
//     reached a valve and the user chose to drop (ValveAck, in a third of
//     the runs; the others park it with a dead-letter function). Hold-backs
//     behind a lite topic's head and failed acks never bring a message to a
//     valve;
//   - the broker dead-letters nothing: the group's retry limit is sized as
//     docs/grpc-connector.md says ("Sizing a lite group's retry limit");
//   - every message ends acked or dead-lettered, and the broker holds
//     nothing of the run;
//   - duplicates (a message handled again after its ack was decided) happen
//     only in runs with faults or restarts, and stay within the bound those
//     allow.
//
// RMQFLOW_MODEL_RUNS sets the number of runs (default 1000) and
// RMQFLOW_MODEL_FIRST the first seed (default 1); RMQFLOW_MODEL_SEED replays
// one seed; RMQFLOW_MODEL_TRACE=1 logs the handler's calls and
// decisions, the runner's log and the broker's to stderr.
func TestModelRunner(t *testing.T) {
	t.Parallel() // runs beside the other long one at the end, not on the serial path of the package
	runs, first := 1000, uint64(1)
	if v := os.Getenv("RMQFLOW_MODEL_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("RMQFLOW_MODEL_RUNS: %v", err)
		}
		runs = n
	}
	if v := os.Getenv("RMQFLOW_MODEL_FIRST"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RMQFLOW_MODEL_FIRST: %v", err)
		}
		first = n
	}
	if v := os.Getenv("RMQFLOW_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RMQFLOW_MODEL_SEED: %v", err)
		}
		runs, first = 1, n
	}
	var (
		total modelTotals
		mu    sync.Mutex
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 8) // runs wait on each other's I/O, not the CPU
	)
	for seed := first; seed < first+uint64(runs); seed++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := runModel(t, seed)
			if err != nil {
				t.Errorf("seed %d: %v", seed, err)
			}
			mu.Lock()
			defer mu.Unlock()
			total.add(res)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.Logf("replay a failed seed with RMQFLOW_MODEL_SEED=<seed>")
	}
	t.Logf("model: %d runs, %d messages, %d handler calls, %d dead-lettered, %d dropped by a chosen valve, %d duplicates (%d runs with faults, %d broker restarts, %d fault periods), %d clock steps",
		runs, total.messages, total.calls, total.dead, total.dropped, total.dups, total.faultyRuns, total.restarts, total.injected, total.steps)
}

type modelTotals struct {
	messages, calls, dead, dropped, dups, faultyRuns, restarts, injected, steps int
}

func (a *modelTotals) add(r modelResult) {
	a.messages += r.messages
	a.calls += r.calls
	a.dead += r.dead
	a.dropped += r.dropped
	a.dups += r.dups
	a.restarts += r.restarts
	a.injected += r.injected
	a.steps += r.steps
	if r.faulty {
		a.faultyRuns++
	}
}

type modelResult struct {
	messages, calls, dead, dropped, dups, restarts, injected, steps int
	faulty                                                          bool
}

// modelState is what the handlers observed in one run.
type modelState struct {
	t    *testing.T
	seed uint64

	mu       sync.Mutex
	rng      *rand.Rand
	index    map[string]int // body -> index within its lite topic
	lite     map[string]string
	running  map[string]string // lite topic -> body running
	decided  map[string]bool   // body -> ack decided (or dead-lettered)
	ackIDs   map[string]string // message id -> body, once its ack was decided
	byLite   map[string][]string
	attempts map[string]int
	own      map[string]int    // body -> returns its handler decided (not Ack)
	idBody   map[string]string // message id -> body
	dropOK   int               // ValveAck runs: own returns at which a drop is allowed; 0: never
	dropped  int
	calls    int
	dups     int
	dead     int
	acksSeen map[string]bool // message ids seen in AckMessage requests
	bad      []string
	log      *slog.Logger
	now      func() time.Time
}

func (s *modelState) failf(format string, args ...any) {
	s.bad = append(s.bad, fmt.Sprintf(format, args...))
}

func runModel(t *testing.T, seed uint64) (modelResult, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	clk := rmqfake.NewManualClock(time.Now())
	logOut := io.Discard
	if os.Getenv("RMQFLOW_MODEL_TRACE") != "" {
		logOut = os.Stderr
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fake, err := rmqfake.New(rmqfake.WithClock(clk), rmqfake.FastLiteDispatch(), rmqfake.Logger(logger))
	if err != nil {
		return modelResult{}, err
	}
	defer fake.Stop()
	if err := fake.CreateTopic("main", rmqfake.TopicLite); err != nil {
		return modelResult{}, err
	}
	// A lite message is delivered again with every return of an earlier one
	// of its batch: up to 7 predecessors × (5 handler + 2 throttle returns),
	// its own 7, and returns after failed acks and deferrals.
	if err := fake.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard(), rmqfake.RetryMax(100)); err != nil {
		return modelResult{}, err
	}
	conn := rmqflow.Connection{Endpoints: fake.Addr(), Logger: logger}
	st := &modelState{t: t, seed: seed, rng: rng, log: logger, now: clk.Now, index: map[string]int{}, lite: map[string]string{}, running: map[string]string{},
		decided: map[string]bool{}, ackIDs: map[string]string{}, byLite: map[string][]string{}, attempts: map[string]int{}, acksSeen: map[string]bool{},
		own: map[string]int{}, idBody: map[string]string{}}

	// Every message id in an AckMessage request must have been decided.
	fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		req := c.Request.(*v2.AckMessageRequest)
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, e := range req.GetEntries() {
			if _, ok := st.ackIDs[e.GetMessageId()]; !ok {
				body := st.idBody[e.GetMessageId()]
				switch {
				case st.dropOK > 0 && st.own[body] >= st.dropOK:
					// Dropped by a valve the user chose (ValveAck), after
					// failures of its own.
					st.decided[body] = true
					st.ackIDs[e.GetMessageId()] = body
					st.dropped++
				case st.dropOK > 0:
					st.failf("AckMessage for %s (%s), never decided, dropped after %d returns of its own (valve at %d)", e.GetMessageId(), body, st.own[body], st.dropOK)
				default:
					st.failf("AckMessage for %s, which was never decided", e.GetMessageId())
				}
			}
			st.acksSeen[e.GetMessageId()] = true
		}
		return rmqfake.Verdict{}
	})

	// The workload.
	nLite, nMsg := 1+rng.IntN(4), 4+rng.IntN(14)
	for i := 0; i < nMsg; i++ {
		l := fmt.Sprintf("l%d", rng.IntN(nLite))
		body := fmt.Sprintf("%s-%d", l, len(st.byLite[l]))
		st.index[body] = len(st.byLite[l])
		st.lite[body] = l
		st.byLite[l] = append(st.byLite[l], body)
	}
	faulty := rng.IntN(4) == 0
	res := modelResult{messages: nMsg, faulty: faulty}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	if err != nil {
		return res, err
	}
	for l, bodies := range st.byLite {
		for _, b := range bodies {
			if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: l, Body: []byte(b)}).Wait(ctx); err != nil {
				_ = sink.Close(ctx)
				return res, fmt.Errorf("send %s: %w", b, err)
			}
		}
	}
	_ = sink.Close(ctx)

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second,
		MaxMessageNum: 1 + rng.IntN(8)}, rmqflow.StringDecoder())
	if err != nil {
		return res, err
	}
	rmqflow.SetSourceClock(src, clk.Now, func(d time.Duration, f func()) func() bool { return clk.AfterFunc(d, f).Stop })
	cfg := rmqflow.RunnerConfig{Concurrency: 1 + rng.IntN(4), ErrorBackoff: 200 * time.Millisecond, ErrorBackoffMax: 2 * time.Second,
		ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 2 + rng.IntN(4)}, ShutdownTimeout: 10 * time.Second}
	if rng.IntN(3) == 0 {
		cfg.OnError = rmqflow.ErrorLeave
	}
	cfg.PipelineAcks = rng.IntN(2) == 0
	drop := rng.IntN(3) == 0
	if drop {
		cfg.ErrorValves.OnValve = rmqflow.ValveAck
	}
	runner, err := rmqflow.NewRunner(src, st.handler(src), cfg)
	if err != nil {
		return res, err
	}
	rmqflow.SetRunnerClock(runner, clk.Now)
	if drop {
		// The user chose to drop what its valves give up on.
		st.dropOK = cfg.ErrorValves.MaxDefers
	} else {
		runner.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.own[m.Value] < cfg.ErrorValves.MaxDefers {
				st.failf("%s dead-lettered after %d returns of its own (valve at %d): %v", m.Value, st.own[m.Value], cfg.ErrorValves.MaxDefers, cause)
			}
			st.decided[m.Value] = true
			st.ackIDs[m.Meta.MessageID] = m.Value
			st.dead++
			return nil
		})
	}
	if rng.IntN(2) == 0 {
		var pmu sync.Mutex
		prng := rand.New(rand.NewPCG(seed+1, seed))
		th, err := rmqflow.NewThrottle(src.Acker(), rmqflow.ThrottlePolicyFunc[string](func(m *rmqflow.AckableMessage[string]) rmqflow.Decision {
			pmu.Lock()
			defer pmu.Unlock()
			if prng.IntN(6) == 0 {
				return rmqflow.Defer(time.Duration(prng.IntN(2000))*time.Millisecond, "model")
			}
			return rmqflow.Ack()
		}), rmqflow.ThrottleConfig{MaxDefers: 2})
		if err != nil {
			return res, err
		}
		runner.SetThrottle(th)
	}

	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(rctx) }()

	quiet := func() bool {
		if src.QueueLen() != 0 || rmqflow.RunnerHeld(runner) != 0 {
			return false
		}
		st := fake.Stats()
		return st.Pollers >= 1
	}
	allDone := func() bool {
		st.mu.Lock()
		n := len(st.decided)
		st.mu.Unlock()
		if n < nMsg {
			return false
		}
		c := fake.Stats().Topics["main"].Counts
		return c.InFlight == 0 && c.Backlog == 0
	}
	faultsOn := false
	step := 0
	for ; !allDone(); step++ {
		if ctx.Err() != nil || step > 5000 {
			counts := fake.Stats().Topics["main"].Counts
			st.mu.Lock()
			t.Errorf("seed %d: not done after %d steps: decided %d of %d, stats %+v, held %d, queue %d",
				seed, step, len(st.decided), nMsg, counts, rmqflow.RunnerHeld(runner), src.QueueLen())
			st.mu.Unlock()
			break
		}
		// Wait until nothing moves: every fetcher parked in a long poll,
		// nothing queued or held. Two looks 1 ms apart guard against a
		// message between the broker's answer and the queue.
		for stable := 0; stable < 2; {
			if quiet() {
				stable++
			} else {
				stable = 0
			}
			time.Sleep(time.Millisecond)
			if ctx.Err() != nil {
				break
			}
		}
		if faulty {
			// The handler draws from rng under st.mu while it runs; so do we.
			roll := func(n int) int {
				st.mu.Lock()
				defer st.mu.Unlock()
				return rng.IntN(n)
			}
			switch {
			case roll(8) == 0:
				fake.Restart()
				res.restarts++
			case !faultsOn && roll(3) == 0:
				// Some acks fail before they are handled, some after: the
				// broker acked, the runner sees an error (an answer lost).
				fake.SetFault("AckMessage", rmqfake.Fault{ErrorRate: 0.2, LostAnswerRate: 0.1})
				fake.SetFault("ChangeInvisibleDuration", rmqfake.Fault{ErrorRate: 0.2})
				faultsOn = true
				res.injected++
			case faultsOn && roll(2) == 0:
				fake.ClearFaults()
				faultsOn = false
			}
		}
		if !allDone() {
			clk.Advance(500 * time.Millisecond)
		}
	}
	fake.ClearFaults()
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("seed %d: runner: %v", seed, err)
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range st.bad {
		t.Errorf("seed %d: %s", seed, b)
	}
	for body := range st.index {
		if !st.decided[body] {
			t.Errorf("seed %d: %s never ended (acked or dead-lettered)", seed, body)
		}
	}
	for id, body := range st.ackIDs {
		if !st.acksSeen[id] {
			t.Errorf("seed %d: %s was decided but never acked on the broker", seed, body)
		}
	}
	if n := fake.Stats().Groups["g"].DeadLettered; n != 0 {
		t.Errorf("seed %d: the broker dead-lettered %d messages", seed, n)
	}
	if !faulty && st.dups > 0 {
		t.Errorf("seed %d: %d duplicates in a run without faults or restarts", seed, st.dups)
	}
	res.calls, res.dead, res.dropped, res.dups, res.steps = st.calls, st.dead, st.dropped, st.dups, step
	return res, nil
}

// handler returns the model's handler: a random outcome per call, every
// observation checked against the invariants.
func (s *modelState) handler(src *rmqflow.Source[string]) rmqflow.Handler[string] {
	return func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		body := m.Value
		s.mu.Lock()
		l := s.lite[body]
		s.calls++
		if other := s.running[l]; other != "" {
			s.failf("%s started while %s of the same lite topic runs", body, other)
		}
		s.running[l] = body
		if s.decided[body] {
			s.dups++
		}
		for _, earlier := range s.byLite[l][:s.index[body]] {
			// In a run that drops what a valve gave up on, the drop is
			// seen only when its ack reaches the broker, which may be
			// after the next message started (an ack is sent, not
			// awaited, under PipelineAcks): its own failures reaching the
			// valve are what decided it (the AckMessage check asserts the
			// drop).
			if !s.decided[earlier] && (s.dropOK == 0 || s.own[earlier] < s.dropOK) {
				s.failf("%s started before %s (earlier in its lite topic) was decided", body, earlier)
			}
		}
		s.attempts[body]++
		s.idBody[m.Meta.MessageID] = body
		roll := s.rng.IntN(100)
		if s.attempts[body] > 6 {
			roll = 0 // the handler recovers, in the end
		}
		slow := time.Duration(s.rng.IntN(3)) * time.Millisecond
		deferBy := time.Duration(s.rng.IntN(3000)-1000) * time.Millisecond
		s.mu.Unlock()
		s.log.Debug("model: handler call", "body", body, "id", m.Meta.MessageID, "attempt", m.Meta.DeliveryAttempt,
			"roll", roll, "defer_by", deferBy, "now", s.now().Format("15:04:05.000"))

		finish := func(acked bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.running[l] = ""
			if acked {
				s.decided[body] = true
				s.ackIDs[m.Meta.MessageID] = body
			} else {
				s.own[body]++
			}
		}
		switch {
		case roll < 45:
			time.Sleep(slow)
			finish(true)
			return rmqflow.Ack(), nil
		case roll < 55:
			finish(false)
			return rmqflow.Defer(deferBy, "model"), nil
		case roll < 62:
			finish(false)
			return rmqflow.Release(), nil
		case roll < 68:
			finish(false)
			return rmqflow.Leave(), nil
		case roll < 78:
			finish(false)
			return rmqflow.Decision{}, errors.New("model failure")
		case roll < 84:
			finish(false)
			panic("model panic")
		case roll < 90:
			finish(false)
			return rmqflow.Decision{}, nil // no decision: a handler error
		default:
			// The handler acks by itself and says so.
			finish(true)
			// If this ack fails (an injected fault), the message comes
			// back and is handled again: a duplicate of a faulty run.
			_ = src.Acker().Ack(ctx, m.Handle)
			return rmqflow.Settled(), nil
		}
	}
}
