package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// step is one unit of the plan: a drain batch (several peers reading one
// backlog, each on its own group) or one open-loop run.
type step struct {
	runs    []*run
	backlog *backlog // drain
	// open loop: the run's offered load is fixed when the step starts, from
	// the drained capacity measured before it (fraction of it) or a rate.
	fraction float64
	profile  string // the lite dispatch profile its runs need (-lite-profiles)
}

func (b *bench) runAll(ctx context.Context) error {
	steps := b.plan()
	total := 0
	for _, s := range steps {
		total += len(s.runs)
	}
	done := 0
	warm := false
	// The plan lists the steps of each lite dispatch profile together, the
	// first profile's first: the target changes profile at most once per
	// profile, and each profile's fixtures are created once it is in place
	// (a broker restarted for a profile has a fresh store).
	for i := 0; i < len(steps); {
		j := i
		for j < len(steps) && steps[j].profile == steps[i].profile {
			j++
		}
		group := steps[i:j]
		i = j
		if b.saved != nil && allRestored(group, b.saved) {
			if want, err := profileSettings(b.cfg.repo, group[0].profile); err == nil {
				b.noteProfile(group[0].profile, want)
			}
			for _, s := range group {
				restore(s, b.saved)
				b.runs = append(b.runs, s.runs...)
				done += len(s.runs)
				b.restored += len(s.runs)
			}
			continue
		}
		changed, err := b.useProfile(ctx, group[0].profile)
		if err != nil {
			return err
		}
		if changed {
			warm = false // a new JVM's JIT is cold again
		}
		if err := b.createFixtures(group); err != nil {
			return err
		}
		for _, s := range group {
			if err := ctx.Err(); err != nil {
				return err
			}
			if b.saved != nil && restore(s, b.saved) {
				b.runs = append(b.runs, s.runs...)
				done += len(s.runs)
				b.restored += len(s.runs)
				continue
			}
			if !warm {
				warm = true
				if err := b.warmBroker(ctx); err != nil {
					return err
				}
			}
			if s.backlog != nil {
				if err := b.drainStep(ctx, s, &done, total); err != nil {
					return err
				}
				continue
			}
			if err := b.openStep(ctx, s, &done, total); err != nil {
				return err
			}
		}
	}
	if err := b.restoreProfile(ctx); err != nil {
		return err
	}
	if b.has(scEmu) {
		if err := b.goBenchmarks(ctx); err != nil {
			return err
		}
	}
	return nil
}

// allRestored reports whether every run of steps is recorded in prev.
func allRestored(steps []*step, prev map[string]saved) bool {
	for _, s := range steps {
		for _, r := range s.runs {
			if _, ok := prev[savedKey(r.ID, r.Peer.Name())]; !ok {
				return false
			}
		}
	}
	return true
}

// warmBroker runs an untimed lite load through a real broker before the
// first measured step: a freshly started broker's JIT is cold, and the first
// open-loop run of `-scenarios hot` on one fell 7.8 s behind its schedule
// where the later ones kept to it (2026-12-01). With the drain scenario first
// the backlog producers warmed it; a plan without it was measured cold.
func (b *bench) warmBroker(ctx context.Context) error {
	if b.cfg.emulator {
		return nil // no JIT
	}
	n := 30000
	if b.cfg.quick {
		n = 3000
	}
	id := fmt.Sprintf("bhwarm%d", time.Now().UnixNano())
	if err := b.tgt.create([]fixture{{Topic: id, Lite: true, Groups: []string{id + "-g"}}}, b.cfg.out); err != nil {
		return err
	}
	fmt.Fprintf(b.log, "harness: warming the broker up (untimed): %d lite messages over 100 lite topics produced and drained ...\n", n)
	rate, err := b.tgt.produceBacklog(ctx, id, "lite", id, n, 100, b.cfg.size)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	took, err := b.tgt.drain(wctx, id, id+"-g", n)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	fmt.Fprintf(b.log, "harness: warm-up produced at %.0f msg/s, drained in %s\n", rate, took.Round(time.Millisecond))
	return nil
}

// plan lays out every step; randomness only orders peers within a batch
// (and batches of one kind), with the printed seed.
func (b *bench) plan() []*step {
	c := b.cfg
	var steps []*step
	// profile is the lite dispatch profile of the steps drain adds: the
	// first of -lite-profiles but for the topics scenario's later ones.
	profile := c.liteProfiles[0]
	var drain func(scenario, mode string, conc, rep, k int, peers []peer, window time.Duration, msgs int, delay, invisible time.Duration)
	drain = func(scenario, mode string, conc, rep, k int, peers []peer, window time.Duration, msgs int, delay, invisible time.Duration) {
		if len(peers) == 0 {
			return
		}
		if b.cfg.emulator && len(peers) > 1 {
			// rmqfake frees a message once the groups reading it acked it,
			// so on the emulator every peer gets a backlog of its own.
			for _, p := range shuffled(b.rng, peers) {
				drain(scenario, mode, conc, rep, k, []peer{p}, window, msgs, delay, invisible)
			}
			return
		}
		id := b.newID()
		bl := &backlog{Topic: id, Mode: mode, RunID: id, LiteTopics: k}
		s := &step{backlog: bl, profile: profile}
		warm := 0
		for _, p := range shuffled(b.rng, peers) {
			w := b.warmupFor(p)
			if delay >= 100*time.Millisecond {
				w = 0 // a slow handler: a warm-up would take minutes; the window is the point
			}
			warm = max(warm, w)
			s.runs = append(s.runs, &run{Scenario: scenario, Peer: p, Mode: mode, Concurrency: conc, Rep: rep, LiteTopics: k,
				Warmup: w, Window: window, HandlerDelay: delay, Invisible: invisible, Backlog: bl, ID: id, Topic: id,
				Group: id + "-" + p.slug(), Profile: profile})
		}
		// Each peer stops at its own warm-up plus the window's messages; the
		// backlog holds the largest of those plus slack for what a peer
		// prefetches (a push consumer's cache: 4,096 messages), so that no
		// peer's window ends by running out of messages.
		for i, r := range s.runs {
			r.Messages = r.Warmup + msgs
			r.Pos = i + 1
		}
		bl.Messages = warm + msgs + msgs/10 + 5000
		if mode == "lite" {
			// A step of k lite topics has a message in each of them,
			// even when its window reads fewer (the topics scenario's
			// 1,000,000: a window's backlog is about 120,000).
			bl.Messages = max(bl.Messages, k)
		}
		steps = append(steps, s)
	}
	modes := []string{"lite", "normal"}
	if b.has(scDrain) {
		for rep := 1; rep <= c.reps; rep++ {
			for _, mode := range shuffledStrings(b, modes) {
				drain(scDrain, mode, c.concurrency, rep, c.liteTopics, b.peersFor(mode), c.window, c.windowMsgs, 0, 0)
			}
		}
	}
	if b.has(scSweep) {
		for rep := 1; rep <= c.sweepReps; rep++ {
			for _, conc := range shuffledInts(b, c.sweep) {
				for _, mode := range shuffledStrings(b, modes) {
					drain(scSweep, mode, conc, rep, c.liteTopics, b.peersFor(mode), c.window/3, c.windowMsgs/3, 0, 0)
				}
			}
		}
	}
	// The topics scenario's steps under the later profiles go to the end of
	// the plan (appended below), so that the broker changes profile once.
	var later []*step
	if b.has(scTopics) {
		for i, prof := range c.liteProfiles {
			n := len(steps)
			profile = prof
			for _, k := range c.topicCounts {
				drain(scTopics, "lite", c.concurrency, 1, k, b.peersFor("lite", "rmqflow/loop", "rmqflow/runner", "rmqflow/runner-throttle", "raw/raw"),
					c.window, c.windowMsgs/2, 0, 0)
			}
			if i > 0 {
				later = append(later, steps[n:]...)
				steps = steps[:n]
			}
		}
		profile = c.liteProfiles[0]
	}
	if b.has(scHandler) {
		for _, mode := range modes {
			drain(scHandler, mode, 16, 1, c.liteTopics, b.peersFor(mode), c.window*2/3, 16*200*int((c.window*2/3).Seconds()), 5*time.Millisecond, 0)
		}
	}
	if b.has(scRenewal) {
		// 400 ms per message, batches of 32 per receive: a message can wait
		// 32 × 0.4 s = 12.8 s before its turn, past a 10 s invisibility.
		for _, mode := range modes {
			drain(scRenewal, mode, c.concurrency, 1, c.liteTopics, b.peersFor(mode), 45*time.Second, 1000, 400*time.Millisecond, 10*time.Second)
		}
	}
	if b.has(scOpen) {
		for _, frac := range []float64{0.5, 0.9} {
			for _, mode := range modes {
				for _, p := range shuffled(b.rng, b.peersFor(mode)) {
					id := b.newID()
					steps = append(steps, &step{fraction: frac, profile: profile, runs: []*run{{Scenario: scOpen, Peer: p, Mode: mode, Profile: profile,
						Concurrency: c.concurrency, Rep: 1, LiteTopics: c.liteTopics, Window: c.window, Shape: "even",
						ID: id, Topic: id, Group: id + "-" + p.slug()}}})
				}
			}
		}
	}
	if b.has(scHot) {
		// 99 cold lite topics at 10 msg/s each and one hot at 100 msg/s (the
		// hot one is twice the 50 msg/s one lite topic can do with a 20 ms
		// handler, one message at a time), 32 workers: 1,090 msg/s offered
		// of about 1,600 the workers can do; "cold" is the same load with
		// no hot topic. (Until 2026-12-01: 30 and 300 msg/s with a 5 ms
		// handler, 3,270 msg/s offered: more than this machine's broker
		// takes in single lite sends beside a consumer: every such run's
		// producer fell behind its schedule. The harness's own backlog
		// producer, Unordered with 32 senders, logs its rate ("produced at
		// N msg/s"): 2,646 msg/s for lite in a -quick run on 2026-12-02.)
		for i := 0; i < c.otherReps*2; i++ {
			shape := []string{"cold", "hot"}[(i+i/2)%2] // cold hot hot cold cold hot ...
			for _, p := range shuffled(b.rng, b.peersFor("lite", "rmqflow/runner", "rmqflow/runner-throttle")) {
				id := b.newID()
				rate := 99 * hotColdRate
				if shape == "hot" {
					rate += 10 * hotColdRate
				}
				steps = append(steps, &step{profile: profile, runs: []*run{{Scenario: scHot, Peer: p, Mode: "lite", Concurrency: 32, Rep: i/2 + 1, Profile: profile,
					LiteTopics: 100, Window: c.window, Shape: shape, Offered: rate, HandlerDelay: hotHandler,
					ID: id, Topic: id, Group: id + "-" + p.slug()}}})
			}
		}
	}
	return append(steps, later...)
}

// The hot-tenant scenario's load: each cold lite topic's rate (the hot one
// has 10×) and the handler's time per message.
const (
	hotColdRate = 10.0
	hotHandler  = 20 * time.Millisecond
)

func shuffledInts(b *bench, s []int) []int {
	out := slices.Clone(s)
	b.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func shuffledStrings(b *bench, s []string) []string {
	out := slices.Clone(s)
	b.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// createFixtures makes every topic and group of the plan up front.
func (b *bench) createFixtures(steps []*step) error {
	var fs []fixture
	for _, s := range steps {
		f := fixture{Topic: s.runs[0].Topic, Lite: s.runs[0].Mode == "lite"}
		for _, r := range s.runs {
			f.Groups = append(f.Groups, r.Group)
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return nil
	}
	fmt.Fprintf(b.log, "harness: creating %d topics and their groups ...\n", len(fs))
	return b.tgt.create(fs, b.cfg.out)
}

func (b *bench) drainStep(ctx context.Context, s *step, done *int, total int) error {
	bl := s.backlog
	var produced float64
	if !bl.Produced {
		r0 := s.runs[0]
		fmt.Fprintf(b.log, "harness: [%s] producing %d × %d B (%s, %d lite topics) to %s ...\n",
			r0.Scenario, bl.Messages, b.cfg.size, bl.Mode, bl.LiteTopics, bl.Topic)
		heap0 := b.tgt.heapInUse()
		rate, err := b.tgt.produceBacklog(ctx, bl.Topic, bl.Mode, bl.RunID, bl.Messages, bl.LiteTopics, b.cfg.size)
		if err == nil && bl.Mode == "lite" {
			// Every send was answered OK: the producer sent to
			// min(messages, k) lite topics; rmqfake counts what it holds.
			bl.Filled = min(bl.Messages, bl.LiteTopics)
			if b.tgt.fake != nil {
				bl.Heap = b.tgt.heapInUse()
				bl.BacklogHeap = int64(bl.Heap) - int64(heap0)
				bl.Filled = b.tgt.liteTopicsHolding(bl.Topic)
			}
		}
		if err != nil {
			var refused *client.StatusError
			if ctx.Err() != nil || !errors.As(err, &refused) || client.IsRetriable(err) {
				// Interrupted, no answer from the broker (a proxy down) or
				// one that may pass (throttled, a timeout): the run ends,
				// and -resume repeats the step.
				return err
			}
			// The broker refused the backlog (2026-12-02: 100,000 lite
			// topics with vm.max_map_count at 65,530, "create mapped file
			// failed"): the step's runs fail with its answer and the other
			// steps go on, instead of the whole run ending there.
			fmt.Fprintf(b.log, "harness: [%s] the broker refused the backlog (%v): its %d runs are recorded as failed (delete their lines from results.jsonl for -resume to run them again)\n", r0.Scenario, err, len(s.runs))
			for _, r := range s.runs {
				*done++
				r.Broker = -1
				r.Result = result{Peer: r.Peer.Program, Variant: r.Peer.Variant, Mode: r.Mode, Error: "the backlog was not produced: " + err.Error()}
				b.runs = append(b.runs, r)
				b.record(r)
			}
			return nil
		}
		fmt.Fprintf(b.log, "harness: produced at %.0f msg/s\n", rate)
		if bl.Mode == "lite" {
			fmt.Fprintf(b.log, "harness: %d lite topics hold the backlog", bl.Filled)
			if b.tgt.fake != nil {
				fmt.Fprintf(b.log, " (counted on rmqfake); rmqfake's heap in use %.1f MB, %.1f MB more than before the backlog (%.0f B/msg)",
					float64(bl.Heap)/(1<<20), float64(bl.BacklogHeap)/(1<<20), float64(bl.BacklogHeap)/float64(bl.Messages))
			}
			fmt.Fprintln(b.log)
		}
		bl.Produced = true
		produced = rate
	}
	for _, r := range s.runs {
		r.Produced = produced // the open scenario's capacity needs it
		r.Filled, r.Heap, r.BacklogHeap = bl.Filled, bl.Heap, bl.BacklogHeap
		*done++
		b.runOne(ctx, r, *done, total, nil)
	}
	return nil
}

func (b *bench) openStep(ctx context.Context, s *step, done *int, total int) error {
	r := s.runs[0]
	*done++
	if s.fraction > 0 {
		capacity := b.capacity(r.Peer, r.Mode, r.Concurrency)
		if capacity <= 0 {
			fmt.Fprintf(b.log, "harness: [%d/%d] %s %s: no drained rate to offer a fraction of (run drain first); skipped\n", *done, total, r.Scenario, r.Peer.Name())
			return nil
		}
		r.Offered = s.fraction * capacity
	}
	// The warm-up is 5 s of the load, and at least the peer's own warm-up
	// (the JVM's JIT needs its 30,000 messages whatever the rate).
	r.Warmup = max(int(r.Offered*5), b.warmupFor(r.Peer))
	r.Messages = r.Warmup + int(r.Offered*r.Window.Seconds())
	r.Window += 30 * time.Second // the peer ends at Messages; the window is a guard
	b.runOne(ctx, r, *done, total, func(ready <-chan struct{}, exited <-chan struct{}) (func() string, error) {
		// One probe message, so that the peer is ready (subscribed, first
		// message seen) before the paced load starts.
		if _, probe := b.tgt.producePaced(ctx, r.Topic, r.Mode, r.ID, 1, r.LiteTopics, b.cfg.size, 1000, probeShape(r.Shape)); <-probe != nil {
			return nil, errors.New("the probe message could not be produced")
		}
		select {
		case <-ready:
		case <-exited:
			return nil, errors.New("the peer exited before its first message")
		case <-time.After(2 * time.Minute):
			return nil, errors.New("the peer did not receive the probe message within 2 min")
		}
		p, errc := b.tgt.producePaced(ctx, r.Topic, r.Mode, r.ID, r.Messages-1, r.LiteTopics, b.cfg.size, r.Offered, r.Shape)
		return func() string {
			var msg string
			select {
			case err := <-errc:
				if err != nil {
					msg = err.Error()
				}
			case <-time.After(10 * time.Second):
				msg = "the producer had not finished when the peer did"
			}
			lag := time.Duration(p.lateMax.Load())
			r.Lag = lag
			if msg == "" && lag > time.Second {
				msg = "the producer fell more than 1 s behind its schedule: the load was not the offered one"
			}
			if msg != "" {
				r.LoadError = msg
			}
			return fmt.Sprintf("producer: %d sent, %d failed, worst lag behind schedule %s %s",
				p.sent.Load(), p.failed.Load(), lag.Round(time.Millisecond), msg)
		}, nil
	})
	return nil
}

// probeShape keeps the probe on a cold lite topic.
func probeShape(shape string) string {
	if shape == "hot" {
		return "cold"
	}
	return shape
}

// capacity is what the broker can both take and serve for p in mode at
// concurrency conc: the median drained rate of p (c) and the median rate the
// mode's backlogs were produced at (p), combined as two loads on one broker,
// 1/(1/c + 1/p). On this machine's 2 cores the broker is the bound of both:
// offered a fraction of the drained rate alone, the producer fell behind its
// schedule in 13 of 16 open and hot runs (2026-12-01). Without a recorded
// producer rate (results from before it was recorded) it is c alone.
func (b *bench) capacity(p peer, mode string, conc int) float64 {
	var rates, produced []float64
	for _, r := range b.runs {
		if r.Scenario != scDrain || r.Mode != mode || r.Result.Error != "" {
			continue
		}
		if r.Produced > 0 {
			produced = append(produced, r.Produced)
		}
		if r.Peer.Name() == p.Name() && r.Concurrency == conc {
			rates = append(rates, r.Result.rate())
		}
	}
	if len(rates) == 0 {
		return 0
	}
	c := median(rates)
	if len(produced) == 0 {
		return c
	}
	return 1 / (1/c + 1/median(produced))
}

// recordUnlessInterrupted records r, unless the harness itself was
// interrupted (ctx ended: a signal), in which case r measured nothing and is
// left out of results.jsonl, so that -resume runs its step again instead of
// keeping a failure the interruption made. It reports whether it recorded.
func (b *bench) recordUnlessInterrupted(ctx context.Context, r *run, desc string) bool {
	if ctx.Err() != nil {
		fmt.Fprintf(b.log, "harness: %s interrupted; not recorded (a resumed run repeats its step)\n", desc)
		return false
	}
	b.record(r)
	return true
}

// loadFunc starts an open-loop load once the peer runs; the function it
// returns, called after the peer exits, describes the producer's run.
type loadFunc func(ready <-chan struct{}, exited <-chan struct{}) (func() string, error)

func (b *bench) runOne(ctx context.Context, r *run, n, total int, load loadFunc) {
	r.LogPath = filepath.Join(b.cfg.out, "logs", fmt.Sprintf("%03d-%s-%s-%s.log", n, r.Scenario, r.Peer.slug(), r.Mode))
	desc := fmt.Sprintf("[%d/%d] %s %s %s c=%d", n, total, r.Scenario, r.Peer.Name(), r.Mode, r.Concurrency)
	if r.Offered > 0 {
		desc += fmt.Sprintf(" offered %.0f/s (%s)", r.Offered, r.Shape)
	}
	fmt.Fprintf(b.log, "harness: %s ...\n", desc)
	b.runs = append(b.runs, r)
	r.Broker = -1
	if b.tgt.cpu != nil {
		period := 2 * time.Second
		if b.cfg.quick {
			period = time.Second
		}
		r.BrokerBase, r.Settle = b.tgt.cpu.settle(ctx, period, 30*time.Second)
	}
	sp, err := startPeer(ctx, b.bins[r.Peer.Program], r, b.tgt.endpoint, b.tgt.brokerAddr, b.cfg.peerTimeout)
	if err != nil {
		r.Result = result{Peer: r.Peer.Program, Variant: r.Peer.Variant, Mode: r.Mode, Error: err.Error()}
		b.recordUnlessInterrupted(ctx, r, desc)
		return
	}
	var after func() string
	if load != nil {
		if after, err = load(sp.ready, sp.done); err != nil {
			_ = sp.cmd.Process.Kill()
		}
	}
	r.Result = sp.wait(r)
	if err != nil && r.Result.Error == "" {
		r.Result.Error = err.Error()
	}
	if after != nil {
		appendLog(r.LogPath, after())
		if r.LoadError != "" && r.Result.Error == "" {
			r.Result.Error = r.LoadError
		}
	}
	if b.tgt.cpu != nil && r.Result.WindowStartNs > 0 && r.Result.WindowEndNs > r.Result.WindowStartNs {
		from, to := time.Unix(0, r.Result.WindowStartNs), time.Unix(0, r.Result.WindowEndNs)
		// The window may end a moment before the last sample: wait for one.
		time.Sleep(200 * time.Millisecond)
		if cpu, ok := b.tgt.cpu.between(from, to); ok {
			r.Broker = cpu - r.BrokerBase*to.Sub(from).Seconds()
		}
	}
	if !b.recordUnlessInterrupted(ctx, r, desc) {
		return
	}
	if r.Result.Error != "" {
		fmt.Fprintf(b.log, "harness: %s FAILED: %s (log %s)\n", desc, r.Result.Error, r.LogPath)
		b.watch(ctx, r)
		return
	}
	broker := "n/a"
	if r.Broker >= 0 {
		broker = fmt.Sprintf("%.1f µs/msg", r.Result.perMsg(r.Broker)*1e6)
	}
	fmt.Fprintf(b.log, "harness: %s: %.0f msg/s over %.1f s (%d msgs), client %.1f µs/msg, broker %s\n", desc,
		r.Result.rate(), r.Result.Seconds, r.Result.Messages, r.Result.perMsg(r.Result.CPUSeconds)*1e6, broker)
}

func appendLog(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// goBenchmarks runs the in-process Go benchmarks of the emulator scenario
// and keeps their result lines; then the RSS test of the bench module.
func (b *bench) goBenchmarks(ctx context.Context) error {
	count := fmt.Sprint(b.cfg.goBenchCount)
	type gb struct{ dir, pkg, pattern, benchtime, count string }
	benches := []gb{
		{b.cfg.repo, "./rmqfake", "BenchmarkProduceReceiveAck(Lite)?", "", count},
		// Runner against loop at 100 lite topics: the larger counts of
		// that benchmark need -benchtime of at least their lite topics
		// (they skip otherwise); BenchmarkScaleLiteTopics covers scale.
		{b.cfg.repo, ".", "BenchmarkRunnerVsLoop/.*/lite=100", "", count},
		// Issue 9's scale targets: 1,000,000 lite topics through the
		// emulator, the Runner and the fair-share throttle within 20% of
		// 100; the emulator's bytes per stored message and per lite topic.
		{b.cfg.repo, ".", "BenchmarkScaleLiteTopics", "100000x", "1"},
		{b.cfg.repo, "./rmqfake", "BenchmarkScaleMemory", "1x", "1"},
	}
	if b.cfg.quick {
		benches = benches[:2]
	}
	for _, g := range benches {
		fmt.Fprintf(b.log, "harness: [emulator] go test -bench %s %s ...\n", g.pattern, g.pkg)
		args := []string{"test", "-run", "^$", "-bench", "^" + g.pattern + "$", "-count", g.count, "-timeout", "60m"}
		if g.benchtime != "" {
			args = append(args, "-benchtime", g.benchtime)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, g.pkg)...)
		cmd.Dir = g.dir
		out, err := cmd.CombinedOutput()
		appendFile(filepath.Join(b.cfg.out, "logs", "gobench.log"), out)
		if err != nil {
			b.goBench = append(b.goBench, fmt.Sprintf("%s %s: FAILED: %v", g.pkg, g.pattern, err))
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "Benchmark") {
				b.goBench = append(b.goBench, line)
			}
		}
	}
	if !b.cfg.quick {
		b.profile = runProfiles(ctx, b.cfg.repo, b.cfg.out, b.log)
	}
	fmt.Fprintln(b.log, "harness: [memory] TestRSS10kInFlight ...")
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^TestRSS10kInFlight$", "-v", ".")
	cmd.Dir = filepath.Join(b.cfg.repo, "bench")
	cmd.Env = append(os.Environ(), "RMQFLOW_BENCH=1", "RMQFLOW_ENDPOINT="+b.tgt.endpoint)
	out, err := cmd.CombinedOutput()
	appendFile(filepath.Join(b.cfg.out, "logs", "rss.log"), out)
	for _, line := range strings.Split(string(out), "\n") {
		if t := strings.TrimSpace(line); strings.Contains(t, "RSS") || strings.HasPrefix(t, "---") {
			b.rss = append(b.rss, t)
		}
	}
	if err != nil {
		b.rss = append(b.rss, "FAILED: "+err.Error())
	}
	return nil
}

func appendFile(path string, data []byte) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(data)
}
