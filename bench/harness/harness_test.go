package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMedianAndSpread(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	s := spreadOf([]float64{10, 30, 20})
	if s.Median != 20 || s.Min != 10 || s.Max != 30 || s.N != 3 {
		t.Errorf("spreadOf = %+v", s)
	}
	if got := spreadStr(s, 0); got != "20 (10–30)" {
		t.Errorf("spreadStr = %q", got)
	}
	if got := num(1234567.891, 1); got != "1,234,567.9" {
		t.Errorf("num = %q", got)
	}
	if got := num(math.NaN(), 1); got != "–" {
		t.Errorf("num(NaN) = %q", got)
	}
}

// The broker's CPU over a window is cut out of the samples by linear
// interpolation at both ends.
func TestCPUBetweenInterpolates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &cpuSampler{samples: []cpuSample{{t0, 10}, {t0.Add(time.Second), 11}, {t0.Add(2 * time.Second), 13}}}
	got, ok := c.between(t0.Add(500*time.Millisecond), t0.Add(1500*time.Millisecond))
	if !ok || math.Abs(got-1.5) > 1e-9 { // 10.5 → 12.0
		t.Errorf("between = %v, %v, want 1.5", got, ok)
	}
	if _, ok := c.between(t0.Add(time.Second), t0.Add(time.Hour)); ok {
		t.Error("a window past the last sample must not be measured")
	}
	c.failedAt = []time.Time{t0.Add(time.Second)}
	if _, ok := c.between(t0.Add(500*time.Millisecond), t0.Add(1500*time.Millisecond)); ok {
		t.Error("a window with a failed sample (a JVM gone) must not be measured")
	}
}

func TestProcCPUReadsThisProcess(t *testing.T) {
	// Burn some CPU, then this process's own utime+stime must show it.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	v, err := procCPU(os.Getpid(), clockTicks())
	if err != nil {
		t.Fatalf("reading /proc/self's stat: %v (the harness needs Linux for broker CPU)", err)
	}
	if v <= 0 {
		t.Errorf("procCPU of a process that burned CPU = %v, want > 0", v)
	}
}

func fakeRun(scenario, name, mode string, conc int, msgs int, secs float64) *run {
	p, ok := findPeer(name)
	if !ok {
		panic(name)
	}
	return &run{Scenario: scenario, Peer: p, Mode: mode, Concurrency: conc,
		Result: result{Messages: msgs, Seconds: secs, CPUSeconds: -1, ReceiveRPCs: -1, AckRPCs: -1, EmptyReceives: -1}, Broker: -1}
}

// The targets table compares medians, and says "no" when a target is
// missed.
func TestTargetsTable(t *testing.T) {
	b := &bench{cfg: config{reps: 1, concurrency: 4, scenarios: []string{scDrain}, peers: allPeers}}
	for _, rate := range []int{1000, 1100, 900} { // raw median 1000
		b.runs = append(b.runs, fakeRun(scDrain, "raw/raw", "lite", 4, rate, 1))
	}
	b.runs = append(b.runs,
		fakeRun(scDrain, "rmqflow/loop", "lite", 4, 950, 1),   // 0.95× raw: met
		fakeRun(scDrain, "rmqflow/runner", "lite", 4, 700, 1), // 0.74× loop: missed
		fakeRun(scDrain, "official/lite-push", "lite", 4, 500, 1),
		fakeRun(scDrain, "java/lite-push", "lite", 4, 400, 1))
	failed := fakeRun(scDrain, "official/lite-push", "lite", 4, 5000, 1)
	failed.Result.Error = "boom" // a failed run never counts
	b.runs = append(b.runs, failed)
	var w bytes.Buffer
	b.targetsTable(&w)
	out := w.String()
	for _, want := range []string{
		"| rmqflow Source + AckAsync ≥ 0.9× raw | lite | 0.95× | yes |",
		"| Runner ≥ 0.8× Source + AckAsync | lite | 0.74× | **no** |",
		"| rmqflow ≥ 1.5× the strongest official Go (`official/lite-push`) | lite | 1.90× | yes |",
		"| rmqflow ahead of the strongest Java (`java/lite-push`) | lite | 2.38× | yes |",
		"| Runner + throttle ≥ 0.8× Source + AckAsync | lite | not measured (fewer than 1 successful runs) | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("targets table lacks %q:\n%s", want, out)
		}
	}
}

func TestDrainTableShowsSpreadAndUnobservable(t *testing.T) {
	b := &bench{cfg: config{reps: 1, concurrency: 4, scenarios: []string{scDrain}, peers: allPeers}}
	b.runs = append(b.runs, fakeRun(scDrain, "raw/raw", "normal", 4, 1000, 1), fakeRun(scDrain, "raw/raw", "normal", 4, 3000, 1),
		fakeRun(scDrain, "official/push", "normal", 4, 500, 1))
	var w bytes.Buffer
	b.drainTable(&w, scDrain, "normal", 4, "t")
	out := w.String()
	if !strings.Contains(out, "| `raw/raw` | 2,000 (1,000–3,000) | 1.00× | – | – | – | – | – |") {
		t.Errorf("raw row wrong:\n%s", out)
	}
	if !strings.Contains(out, "| `official/push` | 500 | 0.25× |") {
		t.Errorf("official/push row wrong:\n%s", out)
	}
	if !strings.Contains(out, "| `java/simple` | failed (see below)") {
		t.Errorf("a peer without a successful run must say so:\n%s", out)
	}
}

func TestParseConfig(t *testing.T) {
	var errs bytes.Buffer
	c, err := parseConfig([]string{"-emulator", "-quick", "-peers", "rmqflow/runner,raw"}, &errs)
	if err != nil {
		t.Fatal(err)
	}
	if c.reps != 1 || c.window != 3*time.Second || len(c.scenarios) != 1 || c.scenarios[0] != scDrain {
		t.Errorf("-quick did not set the smoke defaults: %+v", c)
	}
	if len(c.peers) != 2 || c.peers[0].Name() != "rmqflow/runner" || c.peers[1].Name() != "raw/raw" {
		t.Errorf("peers = %v", c.peers)
	}
	if _, err := parseConfig([]string{"-emulator", "-peers", "nope"}, &errs); err == nil || !strings.Contains(err.Error(), "unknown \"nope\"") {
		t.Errorf("unknown peer: %v", err)
	}
	if _, err := parseConfig([]string{"-emulator", "-scenarios", "drain,bogus"}, &errs); err == nil {
		t.Error("unknown scenario accepted")
	}
	if _, err := parseConfig(nil, &errs); err == nil && c.endpoint == "" {
		t.Log("RMQFLOW_ENDPOINT set in the environment")
	}
}

// The hot shape gives the hot lite topic 10× the rate of each cold one.
func TestPacedLiteTopicHotShape(t *testing.T) {
	k, n := 100, 10900
	counts := map[string]int{}
	cold := 0
	for i := 0; i < n; i++ {
		counts[pacedLiteTopic("hot", "r", i, k, &cold)]++
	}
	if len(counts) != 100 || counts["r-hot"] != 1000 || counts["r-0"] != 100 || counts["r-98"] != 100 {
		t.Errorf("%d topics, hot %d, r-0 %d, r-98 %d", len(counts), counts["r-hot"], counts["r-0"], counts["r-98"])
	}
	counts = map[string]int{}
	for i := 0; i < 990; i++ {
		counts[pacedLiteTopic("cold", "r", i, k, &cold)]++
	}
	if len(counts) != 99 || counts["r-hot"] != 0 || counts["r-5"] != 10 {
		t.Errorf("cold shape: %d topics, %v", len(counts), counts["r-5"])
	}
}

// With repetitions, a cell whose runs mostly failed does not judge a target.
func TestTargetsNeedEnoughRuns(t *testing.T) {
	b := &bench{cfg: config{reps: 5, concurrency: 4, scenarios: []string{scDrain}, peers: allPeers}}
	for i := 0; i < 5; i++ {
		b.runs = append(b.runs, fakeRun(scDrain, "raw/raw", "normal", 4, 1000, 1))
		r := fakeRun(scDrain, "rmqflow/loop", "normal", 4, 2000, 1)
		if i > 1 {
			r.Result.Error = "failed"
		}
		b.runs = append(b.runs, r)
	}
	var w bytes.Buffer
	b.targetsTable(&w)
	if !strings.Contains(w.String(), "| rmqflow Source + AckAsync ≥ 0.9× raw | normal | not measured (fewer than 3 successful runs) | – |") {
		t.Errorf("2 of 5 runs judged a target:\n%s", w.String())
	}
	w.Reset()
	b.drainTable(&w, scDrain, "normal", 4, "t")
	if !strings.Contains(w.String(), "| 2/5 |") {
		t.Errorf("the runs column must say 2/5:\n%s", w.String())
	}
}

// The watchdog acts on the proxy's signs of degradation, not on a peer's own
// failures, and never on the emulator.
func TestWatchdogSigns(t *testing.T) {
	for err, want := range map[string]bool{
		"rocketmq: ReceiveMessage: ILLEGAL_POLLING_TIME (40018): The deadline time remaining is not enough": true,
		"telemetry: settings handshake timed out":                                                           true,
		"rpc error: code = Unavailable desc = connection refused":                                           true,
		"3 foreign messages": false,
		"the producer fell more than 1 s behind its schedule": false,
		"": false,
	} {
		if got := degraded(err); got != want {
			t.Errorf("degraded(%q) = %v, want %v", err, got, want)
		}
	}
	b := &bench{tgt: &target{}, cfg: config{}}
	b.tgt.fake = nil
	b.cfg.noWatchdog = true
	b.watch(t.Context(), &run{Result: result{Error: "ILLEGAL_POLLING_TIME"}})
	if len(b.restarts) != 0 {
		t.Fatal("the watchdog restarted the proxy although -no-watchdog was set")
	}
}

// The in-process targets read the Go benchmarks' own result lines.
func TestBenchMetric(t *testing.T) {
	lines := []string{
		"BenchmarkProduceReceiveAck-2   	  200000	      8000 ns/op	    120000 msg/s	        12.5 cpu-µs/msg",
		"BenchmarkProduceReceiveAck-2   	  200000	      8000 ns/op	    100000 msg/s	        14.5 cpu-µs/msg",
		"BenchmarkProduceReceiveAckLite-2   	  200000	      8000 ns/op	    50000 msg/s",
		"BenchmarkScaleLiteTopics/lite=100-2   	  100000	      8000 ns/op	    40000 msg/s",
		"BenchmarkScaleLiteTopics/lite=1000000-2   	  100000	      8000 ns/op	    36000 msg/s",
		"BenchmarkScaleMemory/msgs=200000/lite=1000000-2 	1	0 ns/op	 700 B/msg-lite	 250 B/idle-lite-topic",
	}
	for _, c := range []struct {
		name, unit string
		want       float64
	}{
		{"BenchmarkProduceReceiveAck", "msg/s", 110000},
		{"BenchmarkProduceReceiveAck", "cpu-µs/msg", 13.5},
		{"BenchmarkScaleLiteTopics/lite=100", "msg/s", 40000},
		{"BenchmarkScaleLiteTopics/lite=1000000", "msg/s", 36000},
		{"BenchmarkScaleMemory", "B/idle-lite-topic", 250},
	} {
		if got := benchMetric(lines, c.name, c.unit); got != c.want {
			t.Errorf("benchMetric(%s, %s) = %v, want %v", c.name, c.unit, got, c.want)
		}
	}
	if got := benchMetric(lines, "BenchmarkRunnerVsLoop", "msg/s"); !math.IsNaN(got) {
		t.Errorf("a benchmark that did not run has %v, want NaN", got)
	}
	b := &bench{cfg: config{scenarios: []string{scEmu}}, goBench: lines, rss: []string{"--- FAIL: TestRSS10kInFlight (3.00s)"}}
	var out bytes.Buffer
	b.targetsTable(&out)
	for _, want := range []string{"| rmqfake ≥ 100,000 msg/s", "110,000.0 msg/s | yes", "13.5 µs | **no**", "| 0.9× | yes", "fails | **no**"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("targets table lacks %q:\n%s", want, out.String())
		}
	}
}

// An open run offers a fraction of what the broker can both take and serve:
// the peer's drained rate and the backlog producer's rate, combined as two
// loads on one broker (1/(1/drained + 1/produced)); a drain run recorded
// before the producer's rate was (Produced 0) counts for the drained rate only.
func TestOpenCapacityCombinesDrainAndProduce(t *testing.T) {
	b := &bench{}
	for _, c := range []struct {
		rate, produced int
	}{{6000, 2000}, {6000, 0}, {4000, 3000}} {
		r := fakeRun(scDrain, "rmqflow/loop", "lite", 4, c.rate, 1)
		r.Produced = float64(c.produced)
		b.runs = append(b.runs, r)
	}
	other := fakeRun(scDrain, "raw/raw", "lite", 4, 9000, 1)
	other.Produced = 1000 // another peer's backlog: the producer's rate is the mode's
	b.runs = append(b.runs, other)
	p, _ := findPeer("rmqflow/loop")
	// drained median 6,000; produced median of 2,000, 3,000, 1,000 = 2,000
	if got, want := b.capacity(p, "lite", 4), 1/(1/6000.0+1/2000.0); math.Abs(got-want) > 1e-9 {
		t.Errorf("capacity = %.1f, want %.1f", got, want)
	}
	// no producer rate recorded: the drained rate alone
	b.runs = b.runs[1:2]
	if got := b.capacity(p, "lite", 4); got != 6000 {
		t.Errorf("capacity without a producer rate = %.1f, want 6000", got)
	}
	if got := b.capacity(p, "normal", 4); got != 0 {
		t.Errorf("capacity with no drain run = %.1f, want 0", got)
	}
}

// The misses section explains a missed target with the run's own medians,
// and says nothing of a met one.
func TestMissesSection(t *testing.T) {
	b := &bench{cfg: config{reps: 1, concurrency: 4, liteTopics: 100, scenarios: []string{scDrain, scEmu}, peers: allPeers}}
	withCosts := func(r *run, cpuS float64, recv, ack int64) *run {
		r.Result.CPUSeconds, r.Result.ReceiveRPCs, r.Result.AckRPCs, r.Broker = cpuS, recv, ack, cpuS*3
		return r
	}
	b.runs = append(b.runs,
		withCosts(fakeRun(scDrain, "raw/raw", "lite", 4, 1000, 1), 0.03, 40, 20),
		withCosts(fakeRun(scDrain, "rmqflow/loop", "lite", 4, 950, 1), 0.04, 45, 25),    // 0.95× raw: met
		withCosts(fakeRun(scDrain, "rmqflow/runner", "lite", 4, 600, 1), 0.036, 60, 70)) // 0.63× loop: missed
	b.goBench = []string{
		"BenchmarkProduceReceiveAck-2   	   58880	     23612 ns/op	  43.37 MB/s	        38.20 cpu-µs/msg	     42356 msg/s",
	}
	var w bytes.Buffer
	b.missesSection(&w)
	out := w.String()
	for _, want := range []string{
		"**`rmqflow/runner` ≥ 0.8× Source + AckAsync, lite: 0.63×.** `rmqflow/runner` drained 600 msg/s against `rmqflow/loop`'s 950; per message it paid 60.0 against 42.1 µs of client CPU",
		"0.100 against 0.047 receive RPCs and 0.117 against 0.026 ack RPCs",
		"the backlog spreads over 100 lite topics",
		"BenchmarkProduceReceiveAck used 38.2 µs of CPU per message",
		fmt.Sprintf("at most %d µs per message here", runtime.NumCPU()*10),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("misses section lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "≥ 0.9× raw") {
		t.Errorf("a met target explained:\n%s", out)
	}
}

// -explain reads a finished run back (its plan from run.json, its runs from
// results.jsonl) and prints the misses section; an unfinished run is refused.
func TestExplainReadsARunBack(t *testing.T) {
	dir := t.TempDir()
	args := []string{"-emulator", "-quick", "-scenarios", "drain", "-peers", "rmqflow/loop,rmqflow/runner,raw"}
	rf := runFile{Args: args, Seed: 42, Stamp: "0101-000000", Started: time.Now().UTC()}
	if err := writeRunFile(dir, rf); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig(append(slices.Clone(args), "-out", dir, "-seed", "42"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)), stamp: rf.Stamp}
	var lines []byte
	steps := b.plan()
	for i, s := range steps {
		for _, r := range s.runs {
			msgs := map[string]int{"raw/raw": 1000, "rmqflow/loop": 950, "rmqflow/runner": 500}[r.Peer.Name()]
			r.Result = result{Messages: msgs, Seconds: 1, CPUSeconds: 0.04, ReceiveRPCs: 40, AckRPCs: 20, EmptyReceives: 0}
			r.Broker = 0.1
			if i < len(steps)-1 || r != s.runs[len(s.runs)-1] { // the last run stays unrecorded at first
				lines = append(append(lines, b.recordLine(r)...), '\n')
			}
		}
	}
	results := filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(results, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := run1([]string{"-explain", dir}, &out, &errs); code == 0 || !strings.Contains(errs.String(), "not recorded") {
		t.Fatalf("an unfinished run: exit %d, %q", code, errs.String())
	}
	last := steps[len(steps)-1].runs[len(steps[len(steps)-1].runs)-1]
	if err := os.WriteFile(results, append(append(lines, b.recordLine(last)...), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errs.Reset()
	if code := run1([]string{"-explain", dir}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if !strings.Contains(out.String(), "**`rmqflow/runner` ≥ 0.8× Source + AckAsync, lite: 0.53×.**") {
		t.Fatalf("misses section:\n%s", out.String())
	}
}
