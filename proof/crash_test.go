//go:build proof

package proof

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// crashPlan is one crash-suite run: a producer child sends Messages lite
// messages over Lites lite topics while consumer children run one after
// another; every consumer but the last is SIGKILLed mid-stream.
type crashPlan struct {
	endpoint     string
	topic, group string
	messages     int
	lites        int
	kills        int
	concurrency  int           // Runner concurrency of each child
	work         time.Duration // simulated work per message, uniform in 0..work
	// proxyRestartRun is the index of the consumer run during which the
	// real broker's proxy is restarted (after the producer finished); -1
	// for none.
	proxyRestartRun int
	stall           time.Duration // longest a child may go without handling anything
}

// crashResult is what runCrash measured.
type crashResult struct {
	report        *Report
	resumedAfter  time.Duration // first message handled after the proxy served again
	restarted     bool
	produceTook   time.Duration
	took          time.Duration
	killedHandled []int64
}

// runCrash runs the plan and returns the ledger's verdict. The kill points are
// drawn from rng: run i is killed once it has handled a uniform 50..100% of
// messages/(kills+1), so that the last, clean run finishes about a third of
// the stream.
func runCrash(t *testing.T, ctx context.Context, rng *rand.Rand, p crashPlan) crashResult {
	t.Helper()
	child, _ := binaries(t)
	dir := workDir(t)
	prefix := rmqtest.Unique("c")
	exp := Expected{Prefix: prefix, Lites: p.lites, Messages: p.messages}
	t0 := time.Now()
	var res crashResult

	producer := start(t, dir, "producer", child, "produce", "-endpoint", p.endpoint, "-topic", p.topic,
		"-prefix", prefix, "-lites", strconv.Itoa(p.lites), "-n", strconv.Itoa(p.messages))
	producerDone := false
	waitProducer := func() {
		if !producerDone {
			producer.wait(t, 10*time.Minute)
			producerDone = true
			res.produceTook = producer.exitAt.Sub(t0)
		}
	}
	consumerArgs := func(log string) []string {
		return []string{"consume", "-endpoint", p.endpoint, "-topic", p.topic, "-group", p.group, "-prefix", prefix,
			"-log", log, "-concurrency", strconv.Itoa(p.concurrency), "-invisible", "10s", "-work", p.work.String()}
	}
	var runs []Run
	var logs []string
	per := float64(p.messages) / float64(p.kills+1)
	for i := 0; i < p.kills; i++ {
		name := fmt.Sprintf("run%02d", i+1)
		log := filepath.Join(dir, name+".log")
		c := start(t, dir, name, child, consumerArgs(log)...)
		target := int64(per * (0.5 + rng.Float64()/2))
		// A run takes at most its share of what is left: a run that went
		// past its target (the restart run handles on while the restart
		// script stops the proxy: 2,972 of 5,000 in one run, 2026-12-01)
		// must not leave the later runs waiting for messages that are gone.
		// The handled counts include duplicates, so left is a lower bound.
		var done int64
		for _, h := range res.killedHandled {
			done += h
		}
		left := max(0, int64(p.messages)-done)
		target = min(target, left/int64(p.kills-i+1))
		if i == p.proxyRestartRun {
			// Restart the proxy half-way through this run, once every
			// message is stored (the producer would otherwise see the
			// restart too), then require the consumer to go on by itself.
			c.waitHandled(t, ctx, target/2, p.stall)
			waitProducer()
			restartProxy(t)
			back := time.Now()
			h := c.handled.Load()
			c.waitHandled(t, ctx, h+1, p.stall)
			res.resumedAfter = time.Since(back)
			res.restarted = true
			target = max(target, c.handled.Load()+int64(p.concurrency))
		}
		c.waitHandled(t, ctx, target, p.stall)
		c.kill()
		res.killedHandled = append(res.killedHandled, c.handled.Load())
		runs = append(runs, Run{Name: name, Killed: true})
		logs = append(logs, log)
	}

	// The clean run: until every message was handled somewhere, then SIGTERM.
	tl := newTail(exp)
	for _, l := range logs {
		if err := tl.read(l); err != nil {
			t.Fatal(err)
		}
	}
	name := "final"
	log := filepath.Join(dir, name+".log")
	c := start(t, dir, name, child, consumerArgs(log)...)
	producerExited := producer.exited
	stallTimer := time.NewTimer(p.stall)
	defer stallTimer.Stop()
	for tl.distinct() < p.messages {
		select {
		case <-c.changed:
			if err := tl.read(log); err != nil {
				t.Fatal(err)
			}
			stallTimer.Reset(p.stall)
		case <-producerExited:
			waitProducer()
			producerExited = nil // read once
		case <-c.exited:
			t.Fatalf("the final run exited (%v); stderr:\n%s", c.waitErr, c.stderrTail())
		case <-stallTimer.C:
			t.Errorf("the final run handled nothing for %v with %d of %d messages seen; stderr:\n%s", p.stall, tl.distinct(), p.messages, c.stderrTail())
			c.kill()
			goto check
		case <-ctx.Done():
			t.Errorf("%v with %d of %d messages seen", ctx.Err(), tl.distinct(), p.messages)
			c.kill()
			goto check
		}
	}
	waitProducer()
	c.stop(t, time.Minute)
check:
	runs = append(runs, Run{Name: name, Killed: c.killed})
	logs = append(logs, log)
	for i := range runs {
		recs, err := ReadLog(logs[i])
		if err != nil {
			t.Fatalf("%s: %v", logs[i], err)
		}
		runs[i].Records = recs
	}
	res.report = CheckSequential(exp, runs)
	res.took = time.Since(t0)
	return res
}

// assertCrash checks the verdict: nothing lost or unknown, order held in
// every run, and duplicates within the in-flight window.
//
// The bound, from the Runner's crash window (its doc comment and
// docs/grpc-connector.md, "Delivery semantics"): the child writes its record
// and returns Ack; the worker sends the ack and moves on, but the lite topic
// stays owned until the broker answered it, and every message from its
// handling until that answer holds one of RunnerConfig.MaxHeld's tokens. So at
// a SIGKILL the messages handled (or being handled) but not confirmed are at
// most one per lite topic and at most MaxHeld: min(MaxHeld, lite topics) per
// kill (the Concurrency being handled are among them). A proxy restart makes
// acks fail; a failed ack holds its lite topic back until the message comes
// back, so it adds at most one more handling per lite topic, again at most
// MaxHeld.
func assertCrash(t *testing.T, p crashPlan, res crashResult) {
	t.Helper()
	r := res.report
	maxHeld := max(4*p.concurrency, rmqflow.DefaultRunnerMaxHeld) // the child's RunnerConfig.MaxHeld (default)
	perKill := min(maxHeld, p.lites)
	bound := p.kills * perKill
	if res.restarted {
		bound += perKill
	}
	t.Logf("duplicate bound: %d kills × min(MaxHeld %d, lite topics %d) = %d per kill%s; duplicates by run %v",
		p.kills, maxHeld, p.lites, perKill, map[bool]string{true: " + one window for the proxy restart", false: ""}[res.restarted], r.DupsByRun)
	t.Logf("crash suite (%s): %v; duplicate bound %d; produced in %v, whole run %v; handled at each kill %v",
		p.endpoint, r, bound, res.produceTook.Round(100*time.Millisecond), res.took.Round(100*time.Millisecond), res.killedHandled)
	if res.restarted {
		t.Logf("proxy restarted during run %d; the consumer handled its next message %v after the proxy served again",
			p.proxyRestartRun+1, res.resumedAfter.Round(100*time.Millisecond))
	}
	if r.Lost != 0 {
		t.Errorf("%d messages lost, e.g. %v", r.Lost, r.LostSample)
	}
	if r.Unknown != 0 || r.ViolationCount != 0 {
		t.Errorf("%d order/integrity violations, %d unknown messages:\n%s", r.ViolationCount, r.Unknown, strings.Join(r.Violations, "\n"))
	}
	if r.Dups > bound {
		t.Errorf("%d duplicates, more than the in-flight bound %d", r.Dups, bound)
	}
	// Per kill: a duplicate shows in a run after the kill (or restart) that
	// left it unconfirmed, so the runs up to j carry at most the windows of
	// the kills before j.
	cum := 0
	for j, d := range r.DupsByRun {
		cum += d
		allowed := j * perKill
		if res.restarted && j >= p.proxyRestartRun {
			allowed += perKill
		}
		if cum > allowed {
			t.Errorf("runs 1..%d handled %d duplicates, more than the %d their earlier kills allow", j+1, cum, allowed)
		}
	}
	if r.Killed != p.kills || r.Runs != p.kills+1 {
		t.Errorf("%d runs, %d killed; want %d and %d", r.Runs, r.Killed, p.kills+1, p.kills)
	}
}

// TestCrashEmulator: 200,000 messages (RMQFLOW_CRASH_MESSAGES) over 2,000 lite
// topics through the standalone emulator (rmqflow broker, its own process),
// consumed by children that are SIGKILLed ten times (RMQFLOW_CRASH_KILLS).
func TestCrashEmulator(t *testing.T) {
	_, cli := binaries(t)
	n := envInt(t, "RMQFLOW_CRASH_MESSAGES", 200_000)
	ctx := rmqtest.Context(t, 20*time.Minute)
	dir := workDir(t)
	// -fast-lite-dispatch: a restarted consumer gets the lite topics with a
	// backlog at once instead of on the emulator's 5..20 s full-dispatch scan
	// (the real-broker run has the broker's own timing).
	broker := start(t, dir, "broker", cli, "broker", "-listen", "127.0.0.1:0",
		"-fixtures", filepath.Join(repoRoot(t), "scripts", "rocketmq", "fixtures.txt"), "-fast-lite-dispatch")
	var ep string
	select {
	case line := <-broker.lines:
		// "rmqfake listening on 127.0.0.1:PORT (...)"
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "rmqfake" {
			t.Fatalf("broker said %q", line)
		}
		ep = f[3]
	case <-broker.exited:
		t.Fatalf("rmqflow broker exited: %v\n%s", broker.waitErr, broker.stderrTail())
	case <-time.After(30 * time.Second):
		t.Fatal("rmqflow broker did not start")
	}
	defer broker.stop(t, 10*time.Second)
	p := crashPlan{
		endpoint: ep, topic: rmqtest.LiteTopic("crash"), group: rmqtest.LiteGroup("crash"),
		messages: n, lites: max(1, n/100), kills: envInt(t, "RMQFLOW_CRASH_KILLS", 10),
		concurrency: 128, proxyRestartRun: -1, stall: 60 * time.Second,
	}
	res := runCrash(t, ctx, seeded(t), p)
	assertCrash(t, p, res)
}

// TestCrashRealBroker: 5,000 messages (RMQFLOW_CRASH_REAL_MESSAGES) over 100
// lite topics on the real broker, ten kills, and the proxy restarted during
// the sixth run: the consumer must resume by itself.
func TestCrashRealBroker(t *testing.T) {
	ep := rmqtest.Endpoint(t)
	n := envInt(t, "RMQFLOW_CRASH_REAL_MESSAGES", 5_000)
	ctx := rmqtest.Context(t, 20*time.Minute)
	p := crashPlan{
		endpoint: ep, topic: rmqtest.LiteTopic("crash"), group: rmqtest.LiteGroup("crash"),
		messages: n, lites: max(1, n/50), kills: envInt(t, "RMQFLOW_CRASH_KILLS", 10),
		concurrency: 16, work: 2 * time.Millisecond, proxyRestartRun: 5, stall: 90 * time.Second,
	}
	res := runCrash(t, ctx, seeded(t), p)
	assertCrash(t, p, res)
}
