// Command harness is rmqflow's benchmark: it runs every peer (rmqflow's
// Source loop and Runner, a raw protocol loop, and the official Go and Java
// clients' consumers, each at its strongest) as child processes against one
// broker in one run, on topics and groups created for each run alone, in a
// randomized interleaved order, several repetitions per cell; it samples the
// broker's own CPU over every peer's timed window and writes the report
// (docs/benchmarks.md) with medians and spreads. `make bench` runs it on a
// broker it starts; bench/README.md describes the peers and their contract.
//
//	cd bench && go run ./harness -endpoint 127.0.0.1:18081 -report ../docs/benchmarks.md
//	cd bench && go run ./harness -quick        # a 2-minute smoke run
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rmqflow/rmqflow/rmqfake"
)

type config struct {
	args         []string // the harness's arguments (a resumed run's own)
	resume       *runFile // -resume: the run being continued
	endpoint     string
	emulator     bool
	brokerAddr   string
	repo         string
	out          string
	report       string
	quick        bool
	scenarios    []string
	peers        []peer
	reps         int
	sweepReps    int
	otherReps    int
	concurrency  int
	sweep        []int
	window       time.Duration
	windowMsgs   int
	warmup       int
	javaWarmup   int
	size         int
	liteTopics   int
	topicCounts  []int
	liteProfiles []string
	seed         uint64
	noWatchdog   bool
	peerTimeout  time.Duration
	goBenchCount int
	json         bool
}

const usage = `Usage: go run ./harness [flags]   (in bench/; make bench runs it)

Runs rmqflow and its peers against one broker in one run and writes the report.
Every peer run gets a topic and a group of its own; a peer that sees a message
not of its run fails the run. Scenarios (-scenarios, comma-separated):

  drain     (a) drain a backlog, lite and normal, every peer, -reps times,
            in a randomized interleaved order, at -concurrency
  sweep     (a) the same at concurrency 1, 4, 16, 64 (-sweep-reps times)
  open      (b) open-loop offered load at 50% and 90% of each peer's own
            drained rate (needs drain), produce->ack latency
  hot       (c) one lite topic at 10x the rate of 99 others: the cold topics'
            p99 with the Runner, throttle off and on, and with no hot topic
  topics    (d) 100 / 10,000 / 100,000 lite topics (-topic-counts; each
            gets a message): rate, RSS, start-up, the lite topics filled
            (and rmqfake's heap, on the emulator), under each broker lite
            dispatch profile of -lite-profiles
            (default,many: the 5.5.0 settings and scripts/rocketmq.sh's
            many-lite-topics profile, side by side; the broker is
            restarted between them)
  handler   (e) a 5 ms handler, concurrency 16
  renewal   (f) messages held longer than a 10 s invisible duration
  emulator  (g) rmqfake alone: the in-process Go benchmarks

-resume DIR continues an interrupted run; -explain DIR prints the section
that explains a finished run's missed targets, from its recorded numbers;
-profile DIR profiles the emulator's benchmarks into DIR/logs/profile.log
(where the CPU per message goes, which -explain quotes; the emulator
scenario of a full run does it itself).

Flags:
`

func main() {
	os.Exit(run1(os.Args[1:], os.Stdout, os.Stderr))
}

func run1(args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && (args[0] == "-explain" || args[0] == "--explain") {
		return explain(args[1], stdout, stderr)
	}
	if len(args) == 2 && (args[0] == "-profile" || args[0] == "--profile") {
		return profileMode(args[1], stdout, stderr)
	}
	var rf runFile
	resume, err := resumeArgs(args)
	if err == nil && resume != "" {
		if rf, err = readRunFile(resume); err == nil {
			args = append(slices.Clone(rf.Args), "-out", resume, "-seed", strconv.FormatUint(rf.Seed, 10))
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "harness:", err)
		return 2
	}
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "harness:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if resume != "" {
		cfg.resume, cfg.args = &rf, rf.Args
	} else {
		cfg.args = args
	}
	b, err := newBench(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "harness:", err)
		return 1
	}
	defer b.close()
	if err := b.runAll(ctx); err != nil {
		fmt.Fprintln(stderr, "harness:", err)
		return 1
	}
	if err := b.writeReport(); err != nil {
		fmt.Fprintln(stderr, "harness: report:", err)
		return 1
	}
	if cfg.json {
		for _, r := range b.runs {
			fmt.Fprintf(stdout, "%s\n", b.recordLine(r))
		}
	} else {
		printSummary(stdout, b)
	}
	if n := b.failures(); n > 0 {
		fmt.Fprintf(stderr, "harness: %d runs failed (see %s)\n", n, b.cfg.out)
		return 1
	}
	return 0
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("harness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	def := os.Getenv("RMQFLOW_ENDPOINT")
	fs.StringVar(&c.endpoint, "endpoint", def, "the broker's gRPC `host:port` (default $RMQFLOW_ENDPOINT); it must be the one scripts/rocketmq.sh runs, whose JVMs the harness samples")
	fs.StringVar(&c.brokerAddr, "broker-addr", os.Getenv("RMQFLOW_BROKER_ADDR"), "the broker's own remoting `host:port` (default $RMQFLOW_BROKER_ADDR, which scripts/with-broker.sh exports), for peers with kick=on")
	fs.BoolVar(&c.emulator, "emulator", false, "run on an in-process rmqfake instead (no broker CPU)")
	fs.StringVar(&c.repo, "repo", "", "rmqflow checkout `dir` (default: found from the working directory)")
	fs.StringVar(&c.out, "out", "", "`dir` for the run's results.jsonl and peer logs (default <repo>/.cache/bench/<time>)")
	fs.StringVar(&c.report, "report", "", "write the Markdown report to `path` (charts beside it)")
	fs.BoolVar(&c.quick, "quick", false, "a 2-minute smoke run: drain only, one repetition, 3 s windows")
	scen := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated `scenarios`")
	peers := fs.String("peers", "", "comma-separated `program/variant` peers (default all; see bench/README.md); program/variant+name=value passes the peer --name=value and makes it a peer of its own (rmqflow/runner+max-held=1024)")
	fs.IntVar(&c.reps, "reps", 5, "repetitions of each drain cell")
	fs.IntVar(&c.sweepReps, "sweep-reps", 1, "repetitions of each sweep cell")
	fs.IntVar(&c.otherReps, "other-reps", 3, "repetitions of each hot-tenant cell")
	fs.IntVar(&c.concurrency, "concurrency", 4, "concurrency of every peer in drain, open and renewal")
	sweep := fs.String("sweep", "1,4,16,64", "comma-separated concurrencies of the sweep")
	fs.DurationVar(&c.window, "window", 30*time.Second, "the longest timed window of a drain run")
	fs.IntVar(&c.windowMsgs, "window-messages", 200000, "a drain window also ends after this many messages")
	fs.IntVar(&c.warmup, "warmup", 5000, "untimed acks before the window (Go peers)")
	fs.IntVar(&c.javaWarmup, "java-warmup", 30000, "untimed acks before the window (Java peers: the JIT settles after about 25,000, bench/README.md)")
	fs.IntVar(&c.size, "size", 1024, "message body `bytes`")
	fs.IntVar(&c.liteTopics, "lite-topics", 100, "lite topics a lite backlog spreads over")
	counts := fs.String("topic-counts", "100,10000,100000", "lite topic counts of the topics scenario")
	profiles := fs.String("lite-profiles", "default,many", "the broker's lite dispatch `profiles` (scripts/rocketmq.sh RMQ_LITE_PROFILE; docs/operations-lite.md) the topics scenario runs under, side by side in the report; every other scenario runs under the first. The harness restarts the broker (down, up: a fresh store) to change them, and at the end restarts it with the profile it found (a broker found with settings of no profile is left with the last one, and the report says so); on the emulator, a new rmqfake with the same settings")
	fs.BoolVar(&c.noWatchdog, "no-watchdog", false, "do not restart the proxy after a run failed with a sign of a degraded proxy (ILLEGAL_POLLING_TIME, Telemetry handshake timeouts, …)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the run order (default: from the clock; printed)")
	fs.DurationVar(&c.peerTimeout, "peer-timeout", 4*time.Minute, "give up on a peer run after this long")
	fs.BoolVar(&c.json, "json", false, "print one JSON line per run (as in results.jsonl) instead of the summary tables")
	fs.String("resume", "", "continue the interrupted run whose output `dir` this is, with its own flags and seed: steps whose runs are all recorded are kept, the rest run (alone: no other flag)")
	fs.IntVar(&c.goBenchCount, "gobench-count", 5, "-count of the in-process Go benchmarks (emulator scenario)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.sweep, err = ints(*sweep); err != nil {
		return c, fmt.Errorf("-sweep: %w", err)
	}
	if c.topicCounts, err = ints(*counts); err != nil {
		return c, fmt.Errorf("-topic-counts: %w", err)
	}
	c.liteProfiles = nil
	for _, p := range strings.Split(*profiles, ",") {
		p = strings.TrimSpace(p)
		if p == "" || slices.Contains(c.liteProfiles, p) {
			return c, fmt.Errorf("-lite-profiles: empty or repeated profile in %q", *profiles)
		}
		c.liteProfiles = append(c.liteProfiles, p)
	}
	c.scenarios = strings.Split(*scen, ",")
	for _, s := range c.scenarios {
		if !slices.Contains(allScenarios, s) {
			return c, fmt.Errorf("-scenarios: unknown %q (want %s)", s, strings.Join(allScenarios, ", "))
		}
	}
	if *peers == "" {
		c.peers = allPeers
	} else {
		for _, n := range strings.Split(*peers, ",") {
			ps, err := findPeers(n)
			if err != nil {
				return c, err
			}
			if len(ps) == 0 {
				var names []string
				for _, p := range allPeers {
					names = append(names, p.Name())
				}
				return c, fmt.Errorf("-peers: unknown %q (want a program, rmqflow, raw, official or java, or one of %s, some with +option=value: bench/README.md)", n, strings.Join(names, ", "))
			}
			c.peers = append(c.peers, ps...)
		}
	}
	if c.quick {
		setIfUnset(fs, "scenarios", func() { c.scenarios = []string{scDrain} })
		setIfUnset(fs, "reps", func() { c.reps = 1 })
		setIfUnset(fs, "other-reps", func() { c.otherReps = 1 })
		setIfUnset(fs, "window", func() { c.window = 3 * time.Second })
		setIfUnset(fs, "window-messages", func() { c.windowMsgs = 20000 })
		setIfUnset(fs, "warmup", func() { c.warmup = 500 })
		setIfUnset(fs, "java-warmup", func() { c.javaWarmup = 2000 })
		setIfUnset(fs, "gobench-count", func() { c.goBenchCount = 1 })
	}
	if c.emulator {
		var kept []peer
		for _, p := range c.peers {
			if !p.Push {
				kept = append(kept, p)
			}
		}
		c.peers = kept
	}
	for _, p := range c.peers {
		switch {
		case !p.kicks():
		case c.emulator:
			return c, fmt.Errorf("-peers %s: kick=on needs the real broker's remoting port, which rmqfake has not (drop it with -emulator)", p.Name())
		case c.brokerAddr == "":
			return c, fmt.Errorf("-peers %s: kick=on needs the broker's remoting address: give -broker-addr (or RMQFLOW_BROKER_ADDR)", p.Name())
		}
	}
	if c.endpoint == "" && !c.emulator {
		return c, errors.New("give -endpoint (or RMQFLOW_ENDPOINT) or -emulator")
	}
	if c.reps < 1 || c.sweepReps < 1 || c.otherReps < 1 || c.concurrency < 1 || c.window <= 0 || c.windowMsgs < 1 || c.warmup < 0 || c.javaWarmup < 0 {
		return c, errors.New("-reps, -sweep-reps, -concurrency, -window and -window-messages must be positive, warm-ups not negative")
	}
	if c.liteTopics < 2 {
		return c, errors.New("-lite-topics must be at least 2")
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return c, nil
}

func setIfUnset(fs *flag.FlagSet, name string, set func()) {
	seen := false
	fs.Visit(func(f *flag.Flag) { seen = seen || f.Name == name })
	if !seen {
		set()
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// bench is one harness run.
type bench struct {
	cfg      config
	log      io.Writer
	tgt      *target
	bins     map[string][]string
	rng      *rand.Rand
	stamp    string
	seq      int
	runs     []*run
	goBench  []string // output lines of the in-process Go benchmarks
	rss      []string // TestRSS10kInFlight's lines
	profile  []string // runProfiles' lines (profile.go)
	started  time.Time
	results  *os.File
	idleCPU  float64   // the broker's CPU seconds per second when idle
	restarts []restart // the watchdog's proxy restarts

	// Lite dispatch profiles (liteprofile.go): those the run used, the
	// emulator's current one, the real broker's settings and profile (""
	// if none has them) before the run changed them, the profiles
	// scripts/rocketmq.sh knows, the real broker's profile now, how often
	// the run restarted the broker, and why it did not restore it at the
	// end (for the report).
	profiles       []liteProfile
	fakeProfile    string
	startSettings  map[string]string
	startProfile   string
	knownProfiles  []string
	brokerProfile  string
	brokerRestarts int
	restoreNote    string

	// A resumed run (resume.go): when the run first started, when it was
	// resumed, and the runs recorded before.
	firstStart time.Time
	resumed    []time.Time
	saved      map[string]saved
	restored   int
	commits    []string // the checkout's commit at the start and each resumption
}

func newBench(ctx context.Context, cfg config, logw io.Writer) (*bench, error) {
	repo, err := findRepo(cfg.repo)
	if err != nil {
		return nil, err
	}
	cfg.repo = repo
	b := &bench{cfg: cfg, log: logw, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
		stamp: time.Now().UTC().Format("0102-150405"), started: time.Now()}
	if b.cfg.out == "" {
		b.cfg.out = filepath.Join(repo, ".cache", "bench", b.stamp)
	}
	if err := os.MkdirAll(filepath.Join(b.cfg.out, "logs"), 0o755); err != nil {
		return nil, err
	}
	results := filepath.Join(b.cfg.out, "results.jsonl")
	rf := runFile{Args: cfg.args, Seed: cfg.seed, Stamp: b.stamp, Started: b.started.UTC()}
	if cfg.resume != nil {
		// The same plan (seed) and the same topic names (stamp), with the
		// runs already recorded kept.
		rf = *cfg.resume
		rf.Resumed = append(rf.Resumed, b.started.UTC())
		b.stamp, b.firstStart = rf.Stamp, rf.Started
		if b.saved, err = loadSaved(results); err != nil {
			return nil, err
		}
		b.results, err = os.OpenFile(results, os.O_WRONLY|os.O_APPEND, 0)
	} else {
		b.firstStart = b.started.UTC()
		b.results, err = os.Create(results)
	}
	if err != nil {
		return nil, err
	}
	rf.Commits = append(rf.Commits, commitOf(repo))
	b.resumed, b.commits = rf.Resumed, rf.Commits
	if err := writeRunFile(b.cfg.out, rf); err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "harness: seed %d, output in %s\n", cfg.seed, b.cfg.out)
	if cfg.resume != nil {
		fmt.Fprintf(logw, "harness: resuming the run of %s (%d runs recorded)\n", rf.Started.Format(time.RFC3339), len(b.saved))
	}
	var programs []string
	for _, p := range cfg.peers {
		if !slices.Contains(programs, p.Program) {
			programs = append(programs, p.Program)
		}
	}
	if b.bins, err = peerBins(ctx, repo, programs, logw); err != nil {
		return nil, err
	}
	b.tgt = &target{repo: repo, endpoint: cfg.endpoint, brokerAddr: cfg.brokerAddr}
	if cfg.emulator {
		fake, err := rmqfake.New(emulatorOptions()...)
		if err != nil {
			return nil, err
		}
		b.tgt.fake, b.tgt.endpoint = fake, fake.Addr()
	} else {
		pids, err := brokerPIDs(repo)
		if err != nil {
			return nil, fmt.Errorf("%w (the harness measures the broker that scripts/rocketmq.sh runs)", err)
		}
		if b.tgt.cpu, err = startCPUSampler(pids, 100*time.Millisecond, func() ([]int, error) { return brokerPIDs(repo) }); err != nil {
			return nil, err
		}
		// The broker's own idle cost (its timers, the name server's
		// heartbeats), taken out of every window so that a slow peer is
		// not charged for the broker idling beside it.
		idle := 5 * time.Second
		if cfg.quick {
			idle = 2 * time.Second
		}
		b.idleCPU, _ = b.tgt.cpu.settle(ctx, idle, 30*time.Second)
		fmt.Fprintf(logw, "harness: the broker idles at %.1f%% of one CPU\n", b.idleCPU*100)
	}
	return b, nil
}

// emulatorOptions are the options of the harness's rmqfake. Drain steps
// leave unconsumed backlogs behind (about 34 MB each; the topics scenario's
// 1,000,000 lite topics about 1.5 GB): a whole run would pass the default
// 1 GiB store limit, and its lite topics the default quota of 1,000,000 lite
// topics held (2026-12-03: the three 1,000,000 backlogs after three of 100
// were refused LITE_TOPIC_QUOTA_EXCEEDED). The emulator is measured, not
// protected: no limit.
func emulatorOptions() []rmqfake.Option {
	return []rmqfake.Option{rmqfake.Addr("127.0.0.1:0"), rmqfake.MaxStoredBytes(-1), rmqfake.MaxLiteTopics(-1)}
}

func (b *bench) close() {
	if b.tgt.cpu != nil {
		b.tgt.cpu.close()
	}
	if b.tgt.fake != nil {
		b.tgt.fake.Stop()
	}
	if b.results != nil {
		b.results.Close()
	}
}

func (b *bench) failures() int {
	n := 0
	for _, r := range b.runs {
		if r.Result.Error != "" {
			n++
		}
	}
	return n
}

func (b *bench) has(s string) bool { return slices.Contains(b.cfg.scenarios, s) }

// newID is a run id unique to this harness run: it names the run's topic,
// groups and (lite) lite topics.
func (b *bench) newID() string {
	b.seq++
	return fmt.Sprintf("bh%s-%d", strings.ReplaceAll(b.stamp, "-", ""), b.seq)
}

func (b *bench) warmupFor(p peer) int {
	if p.Program == "java" {
		return b.cfg.javaWarmup
	}
	return b.cfg.warmup
}

func (b *bench) peersFor(mode string, only ...string) []peer {
	var out []peer
	for _, p := range b.cfg.peers {
		// An A/B peer (options) goes where its variant goes.
		if p.supports(mode) && (len(only) == 0 || slices.Contains(only, p.Program+"/"+p.Variant)) {
			out = append(out, p)
		}
	}
	return out
}

// findRepo walks up from dir (or the working directory) to the checkout.
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

// record appends r to results.jsonl.
func (b *bench) record(r *run) {
	fmt.Fprintf(b.results, "%s\n", b.recordLine(r))
}

// recordLine is r as one JSON object.
func (b *bench) recordLine(r *run) []byte {
	line, _ := json.Marshal(map[string]any{
		"scenario": r.Scenario, "peer": r.Peer.Name(), "mode": r.Mode, "concurrency": r.Concurrency, "rep": r.Rep,
		"lite_topics": r.LiteTopics, "offered": r.Offered, "shape": r.Shape, "handler_delay": r.HandlerDelay.String(),
		"invisible": r.Invisible.String(), "id": r.ID, "pos_in_batch": r.Pos, "producer_lag": r.Lag.String(), "backlog_produced_per_s": r.Produced, "broker_cpu_seconds": r.Broker,
		"broker_baseline_cpu_per_second": r.BrokerBase, "broker_settle": r.Settle.String(), "result": r.Result, "log": r.LogPath,
		"lite_profile": r.Profile, "lite_topics_filled": r.Filled, "emulator_heap_bytes": r.Heap, "emulator_backlog_heap_bytes": r.BacklogHeap,
	})
	return line
}
