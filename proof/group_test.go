//go:build proof

package proof

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestGroupFourProcesses: four processes of one wildcard lite group consume
// one stream on the real broker at the same time (4,000 messages over 80 lite
// topics, RMQFLOW_GROUP_MESSAGES). Their logs, merged by handle time, must
// show every lite topic handled in order across processes, and every message
// handled exactly once — except the in-flight messages of the one process
// that is SIGKILLed part-way (a fifth process takes its place), which may be
// handled once more by another process: at most one per lite topic and at
// most its Runner's MaxHeld (the crash window, see assertCrash).
func TestGroupFourProcesses(t *testing.T) {
	ep := rmqtest.Endpoint(t)
	n := envInt(t, "RMQFLOW_GROUP_MESSAGES", 4_000)
	ctx := rmqtest.Context(t, 15*time.Minute)
	rng := seeded(t)
	child, _ := binaries(t)
	dir := workDir(t)
	const procs, concurrency = 4, 8
	topic, group := rmqtest.LiteTopic("group4"), rmqtest.LiteGroup("group4")
	prefix := rmqtest.Unique("g")
	exp := Expected{Prefix: prefix, Lites: max(1, n/50), Messages: n}
	t0 := time.Now()

	consumer := func(name string) (*proc, string) {
		log := filepath.Join(dir, name+".log")
		return start(t, dir, name, child, "consume", "-endpoint", ep, "-topic", topic, "-group", group,
			"-prefix", prefix, "-log", log, "-concurrency", strconv.Itoa(concurrency), "-invisible", "10s", "-work", "4ms"), log
	}
	var ps []*proc
	var logs []string
	for i := 0; i < procs; i++ {
		p, l := consumer(fmt.Sprintf("p%d", i+1))
		ps, logs = append(ps, p), append(logs, l)
	}
	producer := start(t, dir, "producer", child, "produce", "-endpoint", ep, "-topic", topic,
		"-prefix", prefix, "-lites", strconv.Itoa(exp.Lites), "-n", strconv.Itoa(n))

	total := func() int64 {
		var s int64
		for _, p := range ps {
			s += p.handled.Load()
		}
		return s
	}
	// Kill one process once 40..70% of the stream was handled.
	killAt := int64(float64(n) * (0.4 + 0.3*rng.Float64()))
	victim := rng.IntN(procs)
	killed := false
	tl := newTail(exp)
	stall := time.NewTimer(90 * time.Second)
	defer stall.Stop()
	tick := time.NewTicker(100 * time.Millisecond) // the logs of four processes are read on a tick
	defer tick.Stop()
	producerExited := producer.exited
	for tl.distinct() < n {
		select {
		case <-tick.C:
		case <-producerExited:
			producer.wait(t, time.Second)
			producerExited = nil
			continue
		case <-ctx.Done():
			t.Fatalf("%v with %d of %d messages seen", ctx.Err(), tl.distinct(), n)
		case <-stall.C:
			t.Fatalf("nothing handled for 90 s; %d of %d messages seen", tl.distinct(), n)
		}
		for i, p := range ps {
			select {
			case <-p.exited:
				if !p.killed {
					t.Fatalf("%s exited (%v); stderr:\n%s", p.name, p.waitErr, p.stderrTail())
				}
			default:
			}
			if err := tl.read(logs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if !killed && total() >= killAt {
			ps[victim].kill()
			killed = true
			t.Logf("killed %s after it handled %d (all: %d)", ps[victim].name, ps[victim].handled.Load(), total())
			p, l := consumer("p5")
			ps, logs = append(ps, p), append(logs, l)
		}
		stall.Reset(90 * time.Second)
	}
	producer.wait(t, time.Minute)
	for _, p := range ps {
		if !p.killed {
			p.stop(t, time.Minute)
		}
	}
	var runs []Run
	for i, p := range ps {
		recs, err := ReadLog(logs[i])
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, Run{Name: p.name, Killed: p.killed, Records: recs})
	}
	r := CheckConcurrent(exp, runs)
	per := make([]string, len(runs))
	for i, run := range runs {
		per[i] = fmt.Sprintf("%s %d", run.Name, len(run.Records))
	}
	window := min(max(4*concurrency, rmqflow.DefaultRunnerMaxHeld), exp.Lites) // min(MaxHeld, lite topics)
	t.Logf("multi-process group: %v; handled per process [%s]; duplicate bound %d; %v",
		r, strings.Join(per, ", "), window, time.Since(t0).Round(100*time.Millisecond))
	if r.Lost != 0 {
		t.Errorf("%d messages lost, e.g. %v", r.Lost, r.LostSample)
	}
	if r.Unknown != 0 || r.ViolationCount != 0 {
		t.Errorf("%d order/exactly-once violations, %d unknown:\n%s", r.ViolationCount, r.Unknown, strings.Join(r.Violations, "\n"))
	}
	if r.Dups > window {
		t.Errorf("%d duplicates; only the killed process's in-flight window (%d) may be handled twice", r.Dups, window)
	}
	active := 0
	for _, run := range runs {
		if len(run.Records) > 0 {
			active++
		}
	}
	if active < procs {
		t.Errorf("only %d of %d processes handled anything: the group did not share the stream", active, len(runs))
	}
}
