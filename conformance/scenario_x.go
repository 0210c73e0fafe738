package conformance

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// The fixtures of scenario x: a LITE main topic and its wildcard group.
const (
	RestartTopic = "rmqflow-lite-restart"
	RestartGroup = "rmqflow-lite-restart-g"
	// restartLite lite topics get restartPer messages each; restartDead
	// consumers pop them all and then stop without acking or leaving.
	restartLite = 2
	restartPer  = 3
	restartDead = 4
	// RestartTick is the broker's liteEventCheckInterval (10 s by default,
	// rmqfake's too): the scan that moves events out of a set nobody takes
	// from and runs due full dispatches.
	RestartTick = 10 * time.Second
)

// RestartAfterKill (x): four consumers of a wildcard group pop the backlog
// of two lite topics (invisible 10 s, the least the broker accepts) and stop
// mid-stream without acking or leaving; then a new rmqflow.Source of the
// group starts.
//
// "killed": their connections end, as a SIGKILLed process's do. The 5.5.0
// proxy then takes a LITE_PUSH_CONSUMER client (what rmqflow announces to
// 5.5.0) out of its lite group (ClientActivity.handleGrpcCancel →
// offlineClientLiteSubscription: COMPLETE_REMOVE), and when the popped
// batches' invisibility ends the broker offers each lite topic to the
// group's one member left (QueueLevelConsumerOrderInfoLockManager.notifyLockIsFree).
// Asserted: every message comes within the invisible duration plus one
// scan (plus 3 s) of the Source's start, with attempt 2.
//
// "hung": they stay connected and poll no more, as a stopped or wedged
// process, or a Source nobody calls Next on, does: they stay members. Each
// freed lite topic then goes to a member picked at random, possibly a hung
// one, which holds it until a scan finds its set untouched for 10 s and
// offers it to another member, possibly hung too; the Source's re-join one
// InvisibleDuration into its idle run (SourceConfig.LiteRejoinAfter) makes
// the broker offer every lite topic with a backlog again 5 to 15 s later,
// again to members picked at random. How soon the Source gets something is
// left to those picks (observed on 5.5.0: 10 to 35 s); asserted: its first
// message, with attempt 2, within 60 s.
func RestartAfterKill(t *testing.T, e *Env) {
	t.Run("killed", func(t *testing.T) { restartAfter(t, e, true) })
	t.Run("hung", func(t *testing.T) { restartAfter(t, e, false) })
}

// restartAfter runs scenario x with consumers that are killed (their
// connections cut) or hang (connected, polling no more).
func restartAfter(t *testing.T, e *Env, kill bool) {
	p := e.Producer(t, RestartTopic)
	run := rmqtest.Unique("x")

	// The consumers that stop join before the sends, so that the messages'
	// events go to them.
	dead := make([]*client.Client, restartDead)
	cuts := make([]*cutter, restartDead)
	for i := range dead {
		cuts[i] = newCutter(t, e.Target.Endpoint)
		// Through a connection the scenario can cut. No periodic
		// COMPLETE_ADD: a hung process sends none.
		c, err := client.New(client.Config{Endpoints: cuts[i].addr(), RequestTimeout: 3 * time.Second, LiteSyncInterval: time.Hour})
		if err != nil {
			t.Fatalf("client.New: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_ = c.Close(ctx)
		})
		dead[i] = c
		if _, err := dead[i].OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
			Type: client.LiteSimpleConsumer, Group: RestartGroup, Subscriptions: []client.Subscription{{Topic: RestartTopic}}, LiteWildcard: true,
		}); err != nil {
			t.Fatalf("lite consumer session: %v", err)
		}
	}
	for i := range restartLite {
		for j := range restartPer {
			SendLite(t, p, RestartTopic, fmt.Sprintf("%s-%d", run, i), fmt.Sprint(j))
		}
	}
	// They pop every lite topic (the broker hands each to one of them) and
	// stop: no ack, no leaving; killed ones lose their connections.
	popped := popAll(t, dead, run)
	if popped.IsZero() {
		t.Fatalf("the stopping consumers did not pop all %d lite topics within 40 s", restartLite)
	}
	if kill {
		for _, c := range cuts {
			c.cut()
		}
	}

	started := time.Now()
	cfg := rmqflow.SourceConfig{
		Connection:        rmqflow.Connection{Endpoints: e.Target.Endpoint},
		Lite:              []rmqflow.LiteBinding{{Topic: RestartTopic, Group: RestartGroup}},
		InvisibleDuration: MinInvisible,
		AwaitDuration:     poll,
		// The first re-join when the stopped consumers' batches come free
		// (the default is 30 s).
		LiteRejoinAfter: MinInvisible,
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())

	limit := MinInvisible + RestartTick + 3*time.Second
	if !kill {
		limit = time.Minute
	}
	var first time.Duration
	got := map[string]bool{}
	for len(got) < restartLite*restartPer && (kill || first == 0) {
		m, err := src.Next(ctx)
		if err != nil {
			break
		}
		if !strings.HasPrefix(m.Meta.LiteTopic, run) {
			_ = src.Acker().Ack(ctx, m.Handle)
			continue
		}
		at := time.Since(started)
		if first == 0 {
			first = at
			t.Logf("first message %v after the Source started, %v after the last pop of the stopped consumers",
				first.Round(100*time.Millisecond), time.Since(popped).Round(100*time.Millisecond))
		}
		if m.Meta.DeliveryAttempt != 2 {
			t.Errorf("%s/%s: attempt %d, want 2", m.Meta.LiteTopic, m.Value, m.Meta.DeliveryAttempt)
		}
		if at > limit && kill {
			t.Errorf("%s/%s came %v after the Source started, want within %v", m.Meta.LiteTopic, m.Value, at.Round(100*time.Millisecond), limit)
		}
		got[m.Meta.LiteTopic+"/"+m.Value] = true
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
	t.Logf("%d of %d messages within %v of the start", len(got), restartLite*restartPer, time.Since(started).Round(100*time.Millisecond))
	if first == 0 {
		t.Fatalf("the restarted consumer got nothing within 60 s of its start")
	}
	if first > limit {
		t.Errorf("first message %v after the restarted consumer started, want within %v", first.Round(100*time.Millisecond), limit)
	}
	if kill && len(got) != restartLite*restartPer {
		t.Errorf("%d of %d messages within 60 s", len(got), restartLite*restartPer)
	}
}

// cutter forwards TCP connections to a target until cut, which ends them
// all and refuses new ones: to the broker, its client's process died.
type cutter struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  bool
}

func newCutter(t *testing.T, target string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln}
	t.Cleanup(c.cut)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			if c.done {
				c.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return c
}

func (c *cutter) addr() string { return c.ln.Addr().String() }

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	c.ln.Close()
	for _, n := range c.conns {
		n.Close()
	}
	c.conns = nil
}

// popAll polls with every client of dead (invisible MinInvisible, no acks)
// until together they have popped every lite topic of run, and returns when
// the last of them was popped (zero if not all were within 40 s).
func popAll(t *testing.T, dead []*client.Client, run string) time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		last time.Time
		wg   sync.WaitGroup
	)
	req := client.ReceiveRequest{Group: RestartGroup, Topic: RestartTopic, Lite: true, InvisibleDuration: MinInvisible, LongPollingTimeout: poll}
	for _, c := range dead {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				msgs, err := c.Receive(ctx, req)
				if err != nil {
					return
				}
				mu.Lock()
				for _, m := range msgs {
					if strings.HasPrefix(m.LiteTopic, run) {
						seen[m.LiteTopic] = true
						last = time.Now()
					} else {
						ackStray(t, c, RestartGroup, m)
					}
				}
				if len(seen) == restartLite {
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < restartLite {
		return time.Time{}
	}
	return last
}
