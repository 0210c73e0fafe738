package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// num formats x with thousands separators and prec decimals; "–" for NaN.
func num(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	s := fmt.Sprintf("%.*f", prec, math.Abs(x))
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if x < 0 {
		b.WriteByte('-')
	}
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}

// spreadStr is "median (min–max)", or just the median for one run.
func spreadStr(s spread, prec int) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 || s.Min == s.Max {
		return num(s.Median, prec)
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.Median, prec), num(s.Min, prec), num(s.Max, prec))
}

func rate(r *run) float64 { return r.Result.rate() }

// strongest is the peer cell of program in scenario/mode/conc with the
// highest median rate.
func (b *bench) strongest(program, scenario, mode string, conc int) (peer, spread) {
	var best peer
	var bs spread
	for _, p := range allPeers {
		if p.Program != program {
			continue
		}
		s := b.cellOf(scenario, p, mode, conc).of(rate)
		if s.N > 0 && s.Median > bs.Median {
			best, bs = p, s
		}
	}
	return best, bs
}

// planned counts the runs of a cell, failed ones too.
func (b *bench) planned(scenario string, p peer, mode string, conc int) int {
	n := 0
	for _, r := range b.runs {
		if r.Scenario == scenario && r.Peer.Name() == p.Name() && r.Mode == mode && r.Concurrency == conc {
			n++
		}
	}
	return n
}

func (b *bench) cellOf(scenario string, p peer, mode string, conc int) cell {
	var c cell
	for _, r := range b.runs {
		if r.Result.Error == "" && r.Scenario == scenario && r.Peer.Name() == p.Name() && r.Mode == mode && r.Concurrency == conc {
			c.runs = append(c.runs, r)
		}
	}
	return c
}

func (b *bench) writeReport() error {
	var w bytes.Buffer
	b.reportTo(&w)
	path := b.cfg.report
	if path == "" {
		path = filepath.Join(b.cfg.out, "benchmarks.md")
	}
	if err := os.WriteFile(path, w.Bytes(), 0o644); err != nil {
		return err
	}
	base := strings.TrimSuffix(path, filepath.Ext(path))
	for _, mode := range []string{"lite", "normal"} {
		if err := b.writeDrainChart(base+"-"+mode+".svg", mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(b.log, "harness: report written to %s\n", path)
	return nil
}

func (b *bench) reportTo(w io.Writer) {
	c := b.cfg
	host, _ := os.Hostname()
	where := "an in-process rmqfake"
	if !c.emulator {
		where = "a real RocketMQ 5.5.0 started by scripts/rocketmq.sh on the same machine (name server, broker and proxy: three JVMs)"
	}
	fmt.Fprintf(w, "# Benchmarks\n\n")
	fmt.Fprintf(w, "Written by `make bench` (bench/harness) on %s, %s; every number below is one the harness printed in that run.\n\n",
		b.firstStart.UTC().Format("2006-01-02 15:04 UTC"), time.Since(b.started).Round(time.Minute))
	if len(b.resumed) > 0 {
		var at []string
		for _, t := range b.resumed {
			at = append(at, t.UTC().Format("2006-01-02 15:04 UTC"))
		}
		fmt.Fprintf(w, "The run was interrupted and resumed (`-resume`) at %s; the broker may have been restarted in between. %d of its %d runs were recorded before the last resumption and are kept as recorded; a step cut short ran again whole; the duration above is the last part's.\n\n",
			strings.Join(at, ", "), b.restored, len(b.runs))
		if len(slices.Compact(slices.Clone(b.commits))) > 1 {
			if changed := measuredChanges(b.cfg.repo, b.commits, b.cfg.emulator); len(changed) > 0 {
				fmt.Fprintf(w, "**The parts measured different code**: commits %s, in order; what differs: %s.\n\n", strings.Join(b.commits, ", "), strings.Join(changed, ", "))
			} else {
				fmt.Fprintf(w, "The parts ran on commits %s, in order, which differ only in files the benchmark does not measure (tests, documentation, the emulator in a broker run, the integrations).\n\n", strings.Join(b.commits, ", "))
			}
		}
	}
	fmt.Fprintf(w, "- Machine: %s/%s, %d CPUs, host %s, %s; peers and broker share it.\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), host, runtime.Version())
	fmt.Fprintf(w, "- Target: %s.\n", where)
	fmt.Fprintf(w, "- Command: `go run ./harness %s` (in bench/), seed %d.\n", strings.Join(c.args, " "), c.seed)
	if len(b.commits) > 0 {
		fmt.Fprintf(w, "- Code: commit %s.\n", b.commits[len(b.commits)-1])
	}
	fmt.Fprintf(w, "- Workload: %s-byte bodies; lite backlogs spread over %d lite topics of one LITE main topic (a wildcard group per peer); normal backlogs on a topic with 8 queues.\n", num(float64(c.size), 0), c.liteTopics)
	fmt.Fprintf(w, "- Hygiene: the topics and groups are created for this run alone. A drain batch is one backlog on a topic of its own, read by each peer of the batch on a group of its own (on the real broker every group reads the whole topic), one peer after the other in a random order (`pos_in_batch` in results.jsonl); on the emulator each peer gets a backlog of its own. An open-loop or hot-tenant run has a topic of its own. A peer that sees a message not of its run fails. Drain batches repeat %d times; each table says how many runs a cell had (ok/planned) and gives the median and (min–max) over them.\n", c.reps)
	fmt.Fprintf(w, "- Windows: each run is timed after an untimed warm-up (%s acks; Java peers %s, for the JIT) and stops after %s or its warm-up plus %s messages, whichever comes first; the backlog holds 10%% more than the largest goal plus 5,000, so no window ends by running out of messages, and a lite backlog at least one message per lite topic.\n",
		num(float64(c.warmup), 0), num(float64(c.javaWarmup), 0), c.window, num(float64(c.windowMsgs), 0))
	fmt.Fprintf(w, "- Concurrency C means, per peer: receives in flight (`rmqflow/loop`: FetchConcurrency; `raw`; the official SimpleConsumers, whose acks run in parallel beside them); handler workers (`rmqflow/runner*`: Runner.Concurrency, with FetchConcurrency C); consumption threads (the push consumers; the Go client acks inside them, one at a time each). bench/README.md gives each peer's settings and why.\n")
	fmt.Fprintf(w, "- CPU: *client* is the peer process's user+system CPU over its window; *broker* is the three JVMs' CPU (from /proc/<pid>/stat, sampled every 100 ms) over the same window, less the rate they ran at once settled before the run (the harness waits, up to 30 s, until two consecutive periods agree; idle before the first run: %.1f%% of one CPU); it is left blank when a sample failed. Both per message acked.\n", b.idleCPU*100)
	fmt.Fprintf(w, "- What batching saves: one AckMessage RPC for many messages saves gRPC calls and the client's and proxy's cost per call, not the broker's work per message: the 5.5.0 proxy acks the entries one by one unless it runs with `enableBatchAck=true` (off by default, and never for lite acks; docs/broker-semantics.md, scenario h). The broker CPU column is the cost that is left.\n")
	fmt.Fprintf(w, "- Peer stderr and each run's exact command line are kept in the run's log directory; results.jsonl holds every run.\n\n")

	fmt.Fprintf(w, "Peers (bench/README.md says how each is configured and why that is its strongest setting):\n\n")
	if c.emulator {
		fmt.Fprintf(w, "(On the emulator the official clients' push consumers are left out: rmqfake does not serve QueryAssignment yet.)\n\n")
	}
	for _, p := range c.peers {
		fmt.Fprintf(w, "- `%s`: %s (%s)\n", p.Name(), p.Label, strings.Join(p.Modes, ", "))
	}
	fmt.Fprintln(w)

	b.targetsTable(w)
	b.missesSection(w)
	if b.has(scDrain) {
		for _, mode := range []string{"lite", "normal"} {
			b.drainTable(w, scDrain, mode, c.concurrency, fmt.Sprintf("(a) Drain a backlog: %s, concurrency %d", mode, c.concurrency))
		}
		fmt.Fprintf(w, "![drain, lite](benchmarks-lite.svg) ![drain, normal](benchmarks-normal.svg)\n\n")
	}
	if b.has(scSweep) {
		b.sweepTable(w)
	}
	if b.has(scOpen) {
		b.openTable(w)
	}
	if b.has(scHot) {
		b.hotTable(w)
	}
	if b.has(scTopics) {
		b.topicsTable(w)
	}
	if b.has(scHandler) {
		for _, mode := range []string{"lite", "normal"} {
			b.drainTable(w, scHandler, mode, 16, fmt.Sprintf("(e) A 5 ms handler: %s, concurrency 16", mode))
		}
	}
	if b.has(scRenewal) {
		b.renewalTable(w)
	}
	if b.has(scEmu) {
		fmt.Fprintf(w, "## (g) The emulator alone, and memory\n\nIn-process Go benchmarks (client and rmqfake in one process), `-count %d`:\n\n```\n%s\n```\n\n",
			c.goBenchCount, strings.Join(b.goBench, "\n"))
		fmt.Fprintf(w, "`TestRSS10kInFlight` (bench module): a process holding 10,000 received 1-KiB messages unacked:\n\n```\n%s\n```\n\n", strings.Join(b.rss, "\n"))
	}
	if n := b.failures(); n > 0 {
		fmt.Fprintf(w, "## Failed runs\n\n")
		for _, r := range b.runs {
			if r.Result.Error != "" {
				fmt.Fprintf(w, "- %s %s %s c=%d: %s (log `%s`)\n", r.Scenario, r.Peer.Name(), r.Mode, r.Concurrency, r.Result.Error, filepath.Base(r.LogPath))
			}
		}
		fmt.Fprintln(w)
	}
	if len(b.restarts) > 0 {
		fmt.Fprintf(w, "## Proxy restarts by the watchdog\n\n")
		for _, rs := range b.restarts {
			how := fmt.Sprintf("took %s", rs.Took.Round(time.Second))
			if rs.Err != "" {
				how = "failed: " + rs.Err
			}
			fmt.Fprintf(w, "- after %s: %s\n", rs.After, how)
		}
		fmt.Fprintln(w)
	}
}

func (b *bench) drainTable(w io.Writer, scenario, mode string, conc int, title string) {
	fmt.Fprintf(w, "## %s\n\n", title)
	fmt.Fprint(w, "p50 / p99: receive → ack returned. e2e: produce (born timestamp) → ack returned; in a drain that is mostly how long the message sat in the backlog before this peer started, so compare it only within a run, and read the open-loop table for latency.\n\n")
	fmt.Fprintln(w, "| peer | msgs/s | vs raw | client CPU µs/msg | broker CPU µs/msg | receive RPC/msg | ack RPC/msg | empty receives | p50 / p99 ms | e2e p50 / p99 ms | peak RSS MB | start-up s | runs ok/planned |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	rawRate := 0.0
	rawPeer, _ := findPeer("raw/raw")
	if s := b.cellOf(scenario, rawPeer, mode, conc).of(rate); s.N > 0 {
		rawRate = s.Median
	}
	for _, p := range b.cfg.peers {
		if !p.supports(mode) {
			continue
		}
		c := b.cellOf(scenario, p, mode, conc)
		if len(c.runs) == 0 {
			fmt.Fprintf(w, "| `%s` | failed (see below) ||||||||||||\n", p.Name())
			continue
		}
		rs := c.of(rate)
		vs := "–"
		// The raw loop sleeps through a batch's handlers before its next
		// receive: with a handler it is no ceiling.
		if rawRate > 0 && scenario != scHandler {
			vs = num(rs.Median/rawRate, 2) + "×"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s | %d/%d |\n", p.Name(), spreadStr(rs, 0), vs,
			spreadStr(c.of(func(r *run) float64 { return perMsgOrNaN(r, r.Result.CPUSeconds) * 1e6 }), 1),
			spreadStr(c.of(func(r *run) float64 { return perMsgOrNaN(r, r.Broker) * 1e6 }), 1),
			spreadStr(c.of(func(r *run) float64 { return perMsgOrNaN(r, float64(r.Result.ReceiveRPCs)) }), 3),
			spreadStr(c.of(func(r *run) float64 { return perMsgOrNaN(r, float64(r.Result.AckRPCs)) }), 3),
			spreadStr(c.of(func(r *run) float64 { return orNaN(float64(r.Result.EmptyReceives)) }), 0),
			num(c.of(func(r *run) float64 { return r.Result.P50ms }).Median, 1), num(c.of(func(r *run) float64 { return r.Result.P99ms }).Median, 1),
			num(c.of(func(r *run) float64 { return r.Result.E2EP50ms }).Median, 1), num(c.of(func(r *run) float64 { return r.Result.E2EP99ms }).Median, 1),
			num(c.of(func(r *run) float64 { return float64(r.Result.RSSBytes) / (1 << 20) }).Median, 0),
			num(c.of(func(r *run) float64 { return r.Result.Startup }).Median, 1), len(c.runs), b.planned(scenario, p, mode, conc))
	}
	fmt.Fprintln(w)
}

func orNaN(x float64) float64 {
	if x < 0 {
		return nan()
	}
	return x
}

func (b *bench) sweepTable(w io.Writer) {
	fmt.Fprintf(w, "## (a) Concurrency sweep (msgs/s, median over %d run(s), window %s)\n\n", b.cfg.sweepReps, b.cfg.window/3)
	for _, mode := range []string{"lite", "normal"} {
		fmt.Fprintf(w, "%s:\n\n| peer |", mode)
		for _, c := range b.cfg.sweep {
			fmt.Fprintf(w, " c=%d |", c)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(b.cfg.sweep)))
		for _, p := range b.cfg.peers {
			if !p.supports(mode) {
				continue
			}
			fmt.Fprintf(w, "| `%s` |", p.Name())
			for _, c := range b.cfg.sweep {
				fmt.Fprintf(w, " %s |", spreadStr(b.cellOf(scSweep, p, mode, c).of(rate), 0))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
}

func (b *bench) openTable(w io.Writer) {
	fmt.Fprintf(w, "## (b) Open loop: offered load at 50%% and 90%% of each peer's capacity\n\n")
	fmt.Fprint(w, "A peer's capacity here is what the broker can both take and serve: its median drained rate *c* (table (a)) and the median rate the mode's backlogs were produced at *p*, combined as two loads on the one broker, 1/(1/*c* + 1/*p*). The producer offers messages at a fixed rate whatever the consumer does (after one probe message has reached the peer); a run whose producer fell more than 1 s behind its schedule failed (the load was not the one offered). Latency is produce (born timestamp) → ack returned.\n\n")
	fmt.Fprintln(w, "| peer | mode | offered msgs/s | acked msgs/s | e2e p50 ms | e2e p99 ms | client CPU µs/msg | broker CPU µs/msg | producer's worst lag |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range b.runs {
		if r.Scenario != scOpen {
			continue
		}
		if r.Result.Error != "" {
			fmt.Fprintf(w, "| `%s` | %s | %s | failed ||||| %s |\n", r.Peer.Name(), r.Mode, num(r.Offered, 0), r.Lag.Round(time.Millisecond))
			continue
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Peer.Name(), r.Mode, num(r.Offered, 0), num(rate(r), 0),
			num(r.Result.E2EP50ms, 1), num(r.Result.E2EP99ms, 1), num(perMsgOrNaN(r, r.Result.CPUSeconds)*1e6, 1), num(perMsgOrNaN(r, r.Broker)*1e6, 1), r.Lag.Round(time.Millisecond))
	}
	fmt.Fprintln(w)
}

func (b *bench) hotTable(w io.Writer) {
	fmt.Fprintf(w, "## (c) Hot tenant\n\n")
	fmt.Fprintf(w, "99 cold lite topics at %.0f msgs/s each; *hot* adds one lite topic at %.0f msgs/s (10× a cold one, and more than the %.0f msgs/s one lite topic can do with a %v handler one message at a time); the Runner has 32 workers and a %v handler. Latency is produce → ack. A hot run's peer goes on after the load ends, until the hot topic's backlog is worked off or its window guard ends (the hot topic is run one message at a time, each after the previous one's ack is answered): so the table gives the acks counted on cold and on hot lite topics, not a rate.\n\n", hotColdRate, 10*hotColdRate, float64(time.Second/hotHandler), hotHandler, hotHandler)
	fmt.Fprintln(w, "| peer | load | rep | cold acked | hot acked | cold e2e p99 ms | hot e2e p99 ms | cold p99 vs no-hot run (same rep) | change RPCs/msg |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range b.runs {
		if r.Scenario != scHot {
			continue
		}
		if r.Result.Error != "" {
			fmt.Fprintf(w, "| `%s` | %s | %d | failed ||||||\n", r.Peer.Name(), r.Shape, r.Rep)
			continue
		}
		vs := "–"
		if r.Shape == "hot" {
			if base := b.hotBase(r.Peer, r.Rep); base > 0 {
				vs = num(r.Result.ColdE2EP99ms/base, 2) + "×"
			}
		}
		fmt.Fprintf(w, "| `%s` | %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Peer.Name(), r.Shape, r.Rep, num(float64(r.Result.ColdAcked), 0), num(float64(r.Result.HotAcked), 0), num(r.Result.ColdE2EP99ms, 1),
			num(r.Result.HotE2EP99ms, 1), vs, num(perMsgOrNaN(r, float64(r.Result.ChangeRPCs)), 3))
	}
	fmt.Fprintln(w)
}

// hotBase is the cold p99 of p's run without the hot topic in repetition rep.
func (b *bench) hotBase(p peer, rep int) float64 {
	for _, r := range b.runs {
		if r.Scenario == scHot && r.Peer.Name() == p.Name() && r.Shape == "cold" && r.Rep == rep && r.Result.Error == "" {
			return r.Result.ColdE2EP99ms
		}
	}
	return 0
}

func (b *bench) topicsTable(w io.Writer) {
	fmt.Fprintf(w, "## (d) Lite-topic count\n\n")
	profiles := b.cfg.liteProfiles
	for _, p := range b.profiles {
		fmt.Fprintf(w, "- Lite dispatch profile `%s`: %s.\n", p.Name, formatLiteSettings(p.Settings))
	}
	if len(b.profiles) > 0 {
		fmt.Fprintf(w, "\nEach run is one wildcard group over a backlog of about one window of messages spread over its lite topics; the broker's lite dispatch hands a client at most its event set of lite topics at a time and the rest on its scan (docs/operations-lite.md). `scripts/rocketmq.sh` starts the broker with a profile (`RMQ_LITE_PROFILE`); ")
		if b.cfg.emulator {
			fmt.Fprintf(w, "on the emulator each profile ran on a new rmqfake with the values rmqfake models (`MaxClientEventCount`, `LiteEventCheckInterval`, `LiteFullDispatchDelay`).\n\n")
		} else {
			fmt.Fprintf(w, "the harness restarted the broker %d times for them (a fresh store each time).\n\n", b.brokerRestarts)
		}
	}
	if b.restoreNote != "" {
		fmt.Fprintf(w, "**The broker was not restored at the end:** %s.\n\n", b.restoreNote)
	}
	// Lite topics filled: those the backlog put a message in (on the
	// emulator counted in rmqfake; on a broker, those the producer sent to,
	// every send answered OK). On the emulator, rmqfake's heap after the
	// backlog was produced and what the backlog added, per message.
	emu := b.cfg.emulator
	fmt.Fprintf(w, "A step's backlog puts at least one message in each of its lite topics (*lite topics filled*: ")
	if emu {
		fmt.Fprintf(w, "counted in rmqfake once the backlog was produced). *rmqfake heap MB*: the harness process's heap in use after a collection, once the backlog was produced (rmqfake's, with the backlogs of the steps before it that their peers did not read); *backlog B/msg*: what producing the backlog added to it, per message (bodies of %d B included).\n\n", b.cfg.size)
	} else {
		fmt.Fprintf(w, "those the producer sent to, every send answered OK).\n\n")
	}
	head, rule := "| peer | profile | lite topics | lite topics filled | msgs/s | peak RSS MB | start-up s (to the first message) | client CPU µs/msg | broker CPU µs/msg |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"
	if emu {
		head, rule = head+" rmqfake heap MB | backlog B/msg |", rule+"---:|---:|"
	}
	fmt.Fprintf(w, "%s\n%s\n", head, rule)
	memory := func(r *run) string {
		if !emu {
			return ""
		}
		return fmt.Sprintf(" %s | %s |", num(float64(r.Heap)/(1<<20), 0), num(backlogPerMsg(r), 0))
	}
	for _, r := range b.runs {
		if r.Scenario != scTopics {
			continue
		}
		if r.Result.Error != "" {
			fmt.Fprintf(w, "| `%s` | %s | %s | %s | failed |||||%s\n", r.Peer.Name(), r.Profile, num(float64(r.LiteTopics), 0), num(float64(r.Filled), 0), memory(r))
			continue
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s |%s\n", r.Peer.Name(), r.Profile, num(float64(r.LiteTopics), 0), num(float64(r.Filled), 0), num(rate(r), 0),
			num(float64(r.Result.RSSBytes)/(1<<20), 0), num(r.Result.Startup, 1), num(perMsgOrNaN(r, r.Result.CPUSeconds)*1e6, 1), num(perMsgOrNaN(r, r.Broker)*1e6, 1), memory(r))
	}
	fmt.Fprintln(w)
	if emu {
		b.emulatorLiteTopicMemory(w)
	}
	// Side by side: each peer's rate at each count under every profile,
	// and each profile's rate at a count as a share of its rate at the
	// smallest count (issue 25's goals: 10,000 lite topics ≥ 0.8×,
	// 100,000 ≥ 0.25× of 100, the first message ≤ 2 s; on rmqfake
	// 1,000,000 within 20% of 100); with one profile, that profile alone.
	two := len(profiles) >= 2
	title := "Side by side"
	if !two {
		title = "Each count against the smallest"
	}
	fmt.Fprintf(w, "### %s: msgs/s (× the same profile's rate at %s lite topics; start-up s)\n\n| peer | lite topics |", title, num(float64(slices.Min(b.cfg.topicCounts)), 0))
	for _, p := range profiles {
		fmt.Fprintf(w, " `%s` |", p)
	}
	if two {
		fmt.Fprintf(w, " `%s` ÷ `%s` |\n|---|---:|%s---:|\n", profiles[len(profiles)-1], profiles[0], strings.Repeat("---:|", len(profiles)))
	} else {
		fmt.Fprintf(w, "\n|---|---:|%s\n", strings.Repeat("---:|", len(profiles)))
	}
	find := func(p peer, profile string, k int) *run {
		for _, r := range b.runs {
			if r.Scenario == scTopics && r.Peer.Name() == p.Name() && r.Profile == profile && r.LiteTopics == k && r.Result.Error == "" {
				return r
			}
		}
		return nil
	}
	base := slices.Min(b.cfg.topicCounts)
	for _, p := range b.peersFor("lite", "rmqflow/loop", "rmqflow/runner", "rmqflow/runner-throttle", "raw/raw") {
		for _, k := range b.cfg.topicCounts {
			fmt.Fprintf(w, "| `%s` | %s |", p.Name(), num(float64(k), 0))
			for _, prof := range profiles {
				r := find(p, prof, k)
				if r == nil {
					fmt.Fprintf(w, " – |")
					continue
				}
				share := ""
				if b0 := find(p, prof, base); b0 != nil && k != base && rate(b0) > 0 {
					share = fmt.Sprintf(" (%s×)", num(rate(r)/rate(b0), 2))
				}
				fmt.Fprintf(w, " %s%s; %s s |", num(rate(r), 0), share, num(r.Result.Startup, 1))
			}
			first, last := find(p, profiles[0], k), find(p, profiles[len(profiles)-1], k)
			if !two {
				fmt.Fprintln(w)
			} else if first != nil && last != nil && rate(first) > 0 {
				fmt.Fprintf(w, " %s× |\n", num(rate(last)/rate(first), 1))
			} else {
				fmt.Fprintf(w, " – |\n")
			}
		}
	}
	fmt.Fprintln(w)
}

// backlogPerMsg is what r's backlog added to rmqfake's heap, per message
// (NaN when not measured).
func backlogPerMsg(r *run) float64 {
	if r.Backlog == nil || r.Backlog.Messages == 0 || r.BacklogHeap <= 0 {
		return nan()
	}
	return float64(r.BacklogHeap) / float64(r.Backlog.Messages)
}

// emulatorLiteTopicMemory says what a lite topic costs rmqfake: at each
// count, how much more each backlog message took than at the smallest
// count (the same messages, over fewer lite topics), times the messages,
// per lite topic filled. The median over the peers' backlogs.
func (b *bench) emulatorLiteTopicMemory(w io.Writer) {
	base := slices.Min(b.cfg.topicCounts)
	for _, prof := range b.cfg.liteProfiles {
		perMsg := func(k int) (float64, float64, float64) {
			var ms, fs, ns []float64
			for _, r := range b.runs {
				if r.Scenario == scTopics && r.Profile == prof && r.LiteTopics == k && !math.IsNaN(backlogPerMsg(r)) && r.Filled > 0 {
					ms, fs, ns = append(ms, backlogPerMsg(r)), append(fs, float64(r.Filled)), append(ns, float64(r.Backlog.Messages))
				}
			}
			if len(ms) == 0 {
				return nan(), 0, 0
			}
			return median(ms), median(fs), median(ns)
		}
		m0, _, _ := perMsg(base)
		for _, k := range b.cfg.topicCounts {
			mk, filled, n := perMsg(k)
			if k == base || math.IsNaN(m0) || math.IsNaN(mk) {
				continue
			}
			fmt.Fprintf(w, "- rmqfake, profile `%s`, %s lite topics: the backlog took %s B/msg against %s over %s lite topics: (%s − %s) × %s messages ÷ %s lite topics filled ≈ %s B per lite topic (small backlogs make this noisy).\n",
				prof, num(float64(k), 0), num(mk, 0), num(m0, 0), num(float64(base), 0), num(mk, 0), num(m0, 0), num(n, 0), num(filled, 0), num((mk-m0)*n/filled, 0))
		}
	}
	fmt.Fprintln(w)
}

func (b *bench) renewalTable(w io.Writer) {
	fmt.Fprintf(w, "## (f) Renewal: messages held longer than the invisible duration\n\n")
	fmt.Fprint(w, "Invisible duration 10 s, a 400 ms handler, concurrency 4, up to 32 messages per receive: a message can wait 12.8 s for its turn. A peer that does not renew sees its messages come back (*redelivered*: received again) and its late acks fail. The push consumers' invisibility is renewed by the client and proxy (the peer's 10 s does not apply to them).\n\n")
	fmt.Fprintln(w, "| peer | mode | msgs acked in window | msgs/s | redelivered | failed acks | change RPCs | result |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---|")
	for _, r := range b.runs {
		if r.Scenario != scRenewal {
			continue
		}
		res := "ok"
		if r.Result.Error != "" {
			res = "failed: " + r.Result.Error
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", r.Peer.Name(), r.Mode, num(float64(r.Result.Messages), 0), num(rate(r), 1),
			num(float64(r.Result.Redelivered), 0), num(orNaN(float64(r.Result.AckFailures)), 0), num(orNaN(float64(r.Result.ChangeRPCs)), 0), res)
	}
	fmt.Fprintln(w)
}

// targetsTable checks issue 9's real-broker targets against the medians.
func (b *bench) targetsTable(w io.Writer) {
	if !b.has(scDrain) {
		b.emulatorTargets(w, true)
		return
	}
	c := b.cfg.concurrency
	fmt.Fprintf(w, "## Targets (medians of the drain runs, concurrency %d)\n\n| target | mode | measured | met |\n|---|---|---:|---|\n", c)
	row := func(name, mode string, v, want float64) {
		if v <= 0 || math.IsNaN(v) {
			fmt.Fprintf(w, "| %s | %s | not measured (fewer than %d successful runs) | – |\n", name, mode, max(1, min(3, b.cfg.reps)))
			return
		}
		met := "yes"
		if v < want {
			met = "**no**"
		}
		fmt.Fprintf(w, "| %s | %s | %s× | %s |\n", name, mode, num(v, 2), met)
	}
	// A cell counts when at least min(3, reps) of its runs succeeded.
	need := max(1, min(3, b.cfg.reps))
	med := func(name, mode string) float64 {
		p, ok := findPeer(name)
		if !ok {
			return 0
		}
		s := b.cellOf(scDrain, p, mode, c).of(rate)
		if s.N < need {
			return 0
		}
		return s.Median
	}
	for _, mode := range []string{"lite", "normal"} {
		loop, raw := med("rmqflow/loop", mode), med("raw/raw", mode)
		row("rmqflow Source + AckAsync ≥ 0.9× raw", mode, safeDiv(loop, raw), 0.9)
		row("Runner ≥ 0.8× Source + AckAsync", mode, safeDiv(med("rmqflow/runner", mode), loop), 0.8)
		row("Runner with PipelineAcks ≥ 0.8× Source + AckAsync", mode, safeDiv(med("rmqflow/runner-pipelined", mode), loop), 0.8)
		if mode == "lite" {
			row("Runner + throttle ≥ 0.8× Source + AckAsync", mode, safeDiv(med("rmqflow/runner-throttle", mode), loop), 0.8)
		}
		best := max(loop, med("rmqflow/runner", mode), med("rmqflow/runner-pipelined", mode))
		if p, s := b.strongest("official", scDrain, mode, c); s.N >= need {
			row(fmt.Sprintf("rmqflow ≥ 1.5× the strongest official Go (`%s`)", p.Name()), mode, safeDiv(best, s.Median), 1.5)
		}
		if p, s := b.strongest("java", scDrain, mode, c); s.N >= need {
			row(fmt.Sprintf("rmqflow ahead of the strongest Java (`%s`)", p.Name()), mode, safeDiv(best, s.Median), 1.0)
		}
	}
	if b.has(scHot) {
		// Lower is better here: the median over repetitions of the cold
		// topics' p99 with the hot topic over the same repetition's p99
		// without it.
		if p, ok := findPeer("rmqflow/runner-throttle"); ok {
			var ratios []float64
			for _, r := range b.runs {
				if r.Scenario == scHot && r.Peer.Name() == p.Name() && r.Shape == "hot" && r.Result.Error == "" {
					if base := b.hotBase(p, r.Rep); base > 0 {
						ratios = append(ratios, r.Result.ColdE2EP99ms/base)
					}
				}
			}
			if len(ratios) == 0 {
				fmt.Fprintf(w, "| hot tenant: cold p99 with the throttle ≤ 1.2× the no-hot run | lite | not measured | – |\n")
			} else {
				m := median(ratios)
				met := "yes"
				if m > 1.2 {
					met = "**no**"
				}
				fmt.Fprintf(w, "| hot tenant: cold p99 with the throttle ≤ 1.2× the no-hot run | lite | %s× (%d reps) | %s |\n", num(m, 2), len(ratios), met)
			}
		}
	}
	if b.has(scRenewal) {
		for _, r := range b.runs {
			if r.Scenario == scRenewal && r.Peer.Program == "rmqflow" {
				met := "yes"
				if r.Result.Error != "" || r.Result.Redelivered != 0 || r.Result.AckFailures > 0 {
					met = "**no**"
				}
				fmt.Fprintf(w, "| renewal: `%s` loses no message to an expired invisibility (redelivered, failed acks) | %s | %d, %d | %s |\n",
					r.Peer.Name(), r.Mode, r.Result.Redelivered, r.Result.AckFailures, met)
			}
		}
	}
	b.emulatorTargets(w, false)
	fmt.Fprintln(w)
}

// emulatorTargets adds the in-process targets (the emulator scenario's Go
// benchmarks and the RSS test) to the targets table; with header it starts
// a table of its own.
func (b *bench) emulatorTargets(w io.Writer, header bool) {
	if !b.has(scEmu) || len(b.goBench)+len(b.rss) == 0 {
		return
	}
	if header {
		fmt.Fprintf(w, "## Targets (in process)\n\n| target | mode | measured | met |\n|---|---|---:|---|\n")
		defer fmt.Fprintln(w)
	}
	row := func(name string, v float64, unit string, ok func(float64) bool) {
		if math.IsNaN(v) {
			fmt.Fprintf(w, "| %s | emulator | not measured | – |\n", name)
			return
		}
		met := "yes"
		if !ok(v) {
			met = "**no**"
		}
		fmt.Fprintf(w, "| %s | emulator | %s%s | %s |\n", name, num(v, 1), unit, met)
	}
	row("rmqfake ≥ 100,000 msg/s produce→receive→ack, client in process", benchMetric(b.goBench, "BenchmarkProduceReceiveAck", "msg/s"), " msg/s", func(v float64) bool { return v >= 100_000 })
	row("CPU ≤ 10 µs per message (client and emulator together)", benchMetric(b.goBench, "BenchmarkProduceReceiveAck", "cpu-µs/msg"), " µs", func(v float64) bool { return v <= 10 })
	few, many := benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=100", "msg/s"), benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=1000000", "msg/s")
	row("Runner + fair share, 1,000,000 lite topics within 20% of 100", many/few, "×", func(v float64) bool { return v >= 0.8 })
	row("rmqfake ≤ 1,024 B per stored lite message beyond its body", benchMetric(b.goBench, "BenchmarkScaleMemory", "B/msg-lite"), " B", func(v float64) bool { return v <= 1024 })
	row("rmqfake ≤ 300 B per idle lite topic", benchMetric(b.goBench, "BenchmarkScaleMemory", "B/idle-lite-topic"), " B", func(v float64) bool { return v <= 300 })
	rss := "not measured"
	met := "–"
	for _, l := range b.rss {
		switch {
		case strings.HasPrefix(l, "--- PASS"):
			rss, met = "passes", "yes"
		case strings.HasPrefix(l, "--- FAIL"), strings.HasPrefix(l, "FAILED"):
			rss, met = "fails", "**no**"
		}
	}
	fmt.Fprintf(w, "| RSS with 10,000 1-KiB messages in flight ≤ 1.5 × payload + 20 MB (`TestRSS10kInFlight`) | emulator | %s | %s |\n", rss, met)
}

// benchMetric is the median, over the result lines of benchmark name (or of
// its sub-benchmarks), of the value reported with unit; NaN when none has
// it. The "-<GOMAXPROCS>" suffix of a result's name is ignored.
func benchMetric(lines []string, name, unit string) float64 {
	var vs []float64
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		n := f[0]
		if i := strings.LastIndexByte(n, '-'); i > 0 && strings.Trim(n[i+1:], "0123456789") == "" {
			n = n[:i]
		}
		if n != name && !strings.HasPrefix(n, name+"/") {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			if f[i+1] == unit {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					vs = append(vs, v)
				}
			}
		}
	}
	if len(vs) == 0 {
		return math.NaN()
	}
	return median(vs)
}

func safeDiv(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// writeDrainChart draws the drain medians of mode as bars with min–max
// whiskers.
func (b *bench) writeDrainChart(path, mode string) error {
	type bar struct {
		label       string
		med, lo, hi float64
		color       string
	}
	var bars []bar
	colors := map[string]string{"rmqflow": "#337ab7", "raw": "#5bc0de", "official": "#d9534f", "java": "#f0ad4e"}
	for _, p := range b.cfg.peers {
		if !p.supports(mode) {
			continue
		}
		s := b.cellOf(scDrain, p, mode, b.cfg.concurrency).of(rate)
		if s.N > 0 {
			bars = append(bars, bar{p.Name(), s.Median, s.Min, s.Max, colors[p.Program]})
		}
	}
	if len(bars) == 0 {
		return nil
	}
	top := slices.MaxFunc(bars, func(a, b bar) int { return int(a.hi - b.hi) }).hi * 1.1
	const rowH, left, width = 28, 230, 460
	h := len(bars)*rowH + 50
	var s bytes.Buffer
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+width+90, h)
	fmt.Fprintf(&s, `<text x="10" y="18" font-size="14">Drain, %s: msgs/s acked (median, min–max whiskers)</text>`+"\n", mode)
	for i, br := range bars {
		y := 30 + i*rowH
		wpx := func(v float64) float64 { return v / top * width }
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-6, y+16, br.label)
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%.1f" height="20" fill="%s"/>`+"\n", left, y+2, wpx(br.med), br.color)
		fmt.Fprintf(&s, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#333"/>`+"\n", left+wpx(br.lo), left+wpx(br.hi), y+12, y+12)
		fmt.Fprintf(&s, `<text x="%.1f" y="%d">%s</text>`+"\n", left+wpx(br.hi)+6, y+16, num(br.med, 0))
	}
	s.WriteString("</svg>\n")
	return os.WriteFile(path, s.Bytes(), 0o644)
}

// printSummary prints the drain medians and the targets to stdout.
func printSummary(w io.Writer, b *bench) {
	b.targetsTable(w)
	if b.has(scDrain) {
		for _, mode := range []string{"lite", "normal"} {
			b.drainTable(w, scDrain, mode, b.cfg.concurrency, "drain "+mode)
		}
	}
}
