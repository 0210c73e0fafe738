package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// missCosts are a cell's medians: rate and what it paid per message.
type missCosts struct {
	rate, client, broker, recv, ack float64
}

// missCostsOf is the cell's medians, or false with fewer than min(3, reps)
// successful runs.
func (b *bench) missCostsOf(scenario, name, mode string, conc int) (missCosts, bool) {
	p, ok := findPeer(name)
	if !ok {
		return missCosts{}, false
	}
	cl := b.cellOf(scenario, p, mode, conc)
	r := cl.of(rate)
	if r.N < max(1, min(3, b.cfg.reps)) {
		return missCosts{}, false
	}
	return missCosts{
		rate:   r.Median,
		client: cl.of(func(r *run) float64 { return perMsgOrNaN(r, r.Result.CPUSeconds) * 1e6 }).Median,
		broker: cl.of(func(r *run) float64 { return perMsgOrNaN(r, r.Broker) * 1e6 }).Median,
		recv:   cl.of(func(r *run) float64 { return perMsgOrNaN(r, float64(r.Result.ReceiveRPCs)) }).Median,
		ack:    cl.of(func(r *run) float64 { return perMsgOrNaN(r, float64(r.Result.AckRPCs)) }).Median,
	}, true
}

// profileOf is " " and the profile line of the benchmark whose name starts
// with prefix (its name and a space), or "" without one.
func (b *bench) profileOf(prefix string) string {
	for _, l := range b.profile {
		if strings.HasPrefix(l, "Profile "+prefix) {
			return " " + strings.TrimPrefix(l, "Profile ") + "."
		}
	}
	return ""
}

// against compares a's medians with b's, names in backquotes.
func against(a, b missCosts, an, bn string) string {
	return fmt.Sprintf("`%s` drained %s msg/s against `%s`'s %s; per message it paid %s against %s µs of client CPU, %s against %s µs of broker CPU, %s against %s receive RPCs and %s against %s ack RPCs",
		an, num(a.rate, 0), bn, num(b.rate, 0), num(a.client, 1), num(b.client, 1), num(a.broker, 1), num(b.broker, 1),
		num(a.recv, 3), num(b.recv, 3), num(a.ack, 3), num(b.ack, 3))
}

// missesSection explains each target the targets table marks missed with
// this run's own numbers: what the peer paid per message against the one it
// is measured by, and what that points at. Nothing when all are met.
func (b *bench) missesSection(w io.Writer) {
	var out []string
	c := b.cfg.concurrency
	if b.has(scDrain) {
		for _, mode := range []string{"lite", "normal"} {
			loop, okL := b.missCostsOf(scDrain, "rmqflow/loop", mode, c)
			raw, okR := b.missCostsOf(scDrain, "raw/raw", mode, c)
			if okL && okR && safeDiv(loop.rate, raw.rate) < 0.9 {
				out = append(out, fmt.Sprintf("**Source + AckAsync ≥ 0.9× raw, %s: %s×.** %s. The raw loop decodes nothing, queues nothing and renews nothing.",
					mode, num(safeDiv(loop.rate, raw.rate), 2), against(loop, raw, "rmqflow/loop", "raw/raw")))
			}
			if !okL {
				continue
			}
			for _, name := range []string{"rmqflow/runner", "rmqflow/runner-pipelined", "rmqflow/runner-throttle"} {
				r, ok := b.missCostsOf(scDrain, name, mode, c)
				if !ok || safeDiv(r.rate, loop.rate) >= 0.8 {
					continue
				}
				s := fmt.Sprintf("**`%s` ≥ 0.8× Source + AckAsync, %s: %s×.** %s.", name, mode, num(safeDiv(r.rate, loop.rate), 2), against(r, loop, name, "rmqflow/loop"))
				if mode == "lite" {
					s += fmt.Sprintf(" A Runner works a lite topic one message at a time, and the backlog spreads over %d lite topics", b.cfg.liteTopics)
					if name != "rmqflow/runner-pipelined" {
						s += "; without PipelineAcks a lite topic's next message starts only once the broker answered its predecessor's ack"
					}
					s += "."
				}
				if h, okH := b.missCostsOf(scHandler, name, mode, 16); okH {
					if hl, okHL := b.missCostsOf(scHandler, "rmqflow/loop", mode, 16); okHL {
						s += fmt.Sprintf(" With a 5 ms handler (e) it drained %s against the loop's %s msg/s (%s×): work per message hides the difference.",
							num(h.rate, 0), num(hl.rate, 0), num(safeDiv(h.rate, hl.rate), 2))
					}
				}
				out = append(out, s)
			}
		}
	}
	if b.has(scEmu) && len(b.goBench) > 0 {
		cpu := benchMetric(b.goBench, "BenchmarkProduceReceiveAck", "cpu-µs/msg")
		got := benchMetric(b.goBench, "BenchmarkProduceReceiveAck", "msg/s")
		n := float64(runtime.NumCPU())
		if !math.IsNaN(cpu) && cpu > 0 && (cpu > 10 || got < 100_000) {
			out = append(out, fmt.Sprintf("**The emulator's 100,000 msg/s and 10 µs of CPU per message.** BenchmarkProduceReceiveAck used %s µs of CPU per message: producer, consumer, gRPC both ways over loopback and rmqfake, all in one process. %s CPUs then allow at most %s msg/s (it measured %s); 100,000 msg/s would need at most %s µs per message here.",
				num(cpu, 1), num(n, 0), num(n*1e6/cpu, 0), num(got, 0), num(n*1e6/100_000, 0))+b.profileOf("BenchmarkProduceReceiveAck "))
		}
		few, many := benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=100", "msg/s"), benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=1000000", "msg/s")
		if !math.IsNaN(few) && !math.IsNaN(many) && many/few < 0.8 {
			out = append(out, fmt.Sprintf("**1,000,000 lite topics within 20%% of 100: %s×.** %s against %s msg/s; %s against %s µs of CPU per message, with %s against %s MB of backlog held.",
				num(many/few, 2), num(many, 0), num(few, 0),
				num(benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=1000000", "cpu-µs/msg"), 1), num(benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=100", "cpu-µs/msg"), 1),
				num(benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=1000000", "MB-backlog"), 1), num(benchMetric(b.goBench, "BenchmarkScaleLiteTopics/lite=100", "MB-backlog"), 1))+
				b.profileOf("BenchmarkScaleLiteTopics/lite=100 ")+b.profileOf("BenchmarkScaleLiteTopics/lite=1000000 "))
		}
	}
	failed, detail := false, ""
	for _, l := range b.rss {
		switch {
		case strings.HasPrefix(l, "--- FAIL"), strings.HasPrefix(l, "FAILED"):
			failed = true
		case strings.HasPrefix(l, "RSS with") && detail == "":
			detail = l
		}
	}
	if failed && detail != "" {
		out = append(out, "**RSS with 10,000 1-KiB messages in flight.** The test measured: "+detail+".")
	}
	if len(out) == 0 {
		return
	}
	fmt.Fprintf(w, "## What the missed targets come down to (this run's numbers)\n\n")
	for _, s := range out {
		fmt.Fprintf(w, "- %s\n", s)
	}
	fmt.Fprintln(w)
}

// explain prints the misses section of the finished run in dir (-explain
// DIR): its plan (from run.json's flags and seed) restored from
// results.jsonl, and the emulator's lines read back from its logs. It runs
// nothing and writes nothing, so that a report written by an earlier
// harness can get the section from the same recorded numbers.
func explain(dir string, stdout, stderr io.Writer) int {
	rf, err := readRunFile(dir)
	if err != nil {
		fmt.Fprintln(stderr, "harness:", err)
		return 2
	}
	cfg, err := parseConfig(append(slices.Clone(rf.Args), "-out", dir, "-seed", strconv.FormatUint(rf.Seed, 10)), stderr)
	if err != nil {
		fmt.Fprintln(stderr, "harness: -explain:", err)
		return 2
	}
	b := &bench{cfg: cfg, log: stderr, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)), stamp: rf.Stamp}
	saved, err := loadSaved(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		fmt.Fprintln(stderr, "harness: -explain:", err)
		return 1
	}
	for _, s := range b.plan() {
		if !restore(s, saved) {
			fmt.Fprintf(stderr, "harness: -explain %s: a step was not recorded; finish the run first (-resume)\n", dir)
			return 1
		}
		b.runs = append(b.runs, s.runs...)
	}
	if b.has(scEmu) {
		b.goBench = logLines(filepath.Join(dir, "logs", "gobench.log"), "", func(l string) bool { return strings.HasPrefix(l, "Benchmark") })
		b.rss = logLines(filepath.Join(dir, "logs", "rss.log"), "=== RUN", func(l string) bool { return strings.Contains(l, "RSS") || strings.HasPrefix(l, "---") })
		b.profile = profileLines(dir)
	}
	b.missesSection(stdout)
	return 0
}

// logLines returns the trimmed lines of path that keep accepts; with from
// set, only those after the last line starting with it (the log's last run).
func logLines(path, from string, keep func(string) bool) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	lines := strings.Split(string(data), "\n")
	if from != "" {
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.HasPrefix(strings.TrimSpace(lines[i]), from) {
				lines = lines[i:]
				break
			}
		}
	}
	var out []string
	for _, l := range lines {
		if t := strings.TrimSpace(l); keep(t) {
			out = append(out, t)
		}
	}
	return out
}
