//go:build proof

package proof

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// arrivals records when each lite topic's first message reached a consumer.
type arrivals struct {
	mu    sync.Mutex
	first map[string]time.Time
	ch    chan struct{} // signalled on every new lite topic
}

func newArrivals() *arrivals {
	return &arrivals{first: map[string]time.Time{}, ch: make(chan struct{}, 1)}
}

func (a *arrivals) add(lite string) {
	a.mu.Lock()
	if _, ok := a.first[lite]; !ok {
		a.first[lite] = time.Now()
	}
	a.mu.Unlock()
	select {
	case a.ch <- struct{}{}:
	default:
	}
}

// firstOf returns the earliest arrival among lites.
func (a *arrivals) firstOf(lites []string) (time.Time, string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var best time.Time
	var which string
	for _, l := range lites {
		if at, ok := a.first[l]; ok && (best.IsZero() || at.Before(best)) {
			best, which = at, l
		}
	}
	return best, which, !best.IsZero()
}

// TestProxyRestartResubscribes is defect #15 of issue 8: after the proxy alone
// restarts, a wildcard lite consumer must receive new messages well before the
// next periodic subscription sync (30 s by default). Two consumers go through
// one restart:
//
//   - a bare client.Session with LiteSyncInterval = 1 h, so that only a
//     resync on reconnect can bring it back within the bound (the session fix
//     itself);
//   - a rmqflow.Source with the defaults (the user-facing promise: it resumes
//     without user action).
//
// After the restart a fresh producer sends one message to a fresh lite topic
// of each main topic every 500 ms; each consumer must receive one within
// resumeBound of the proxy serving again.
func TestProxyRestartResubscribes(t *testing.T) {
	ep := rmqtest.Endpoint(t)
	const resumeBound = 20 * time.Second
	ctx := rmqtest.Context(t, 4*time.Minute)
	run := rmqtest.Unique("px")
	srcTopic, srcGroup := rmqtest.LiteTopic("proxy"), rmqtest.LiteGroup("proxy")
	cTopic, cGroup := rmqtest.LiteTopic("proxy-c"), rmqtest.LiteGroup("proxy-c")

	// The bare session consumer.
	bare := newArrivals()
	// The clients' WARN lines while the proxy is down go to the test log.
	logger := slog.New(slog.NewTextHandler(newTWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cc, err := client.New(client.Config{Endpoints: ep, LiteSyncInterval: time.Hour, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close(context.Background())
	if _, err := cc.OpenSession(ctx, client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: cGroup, LiteWildcard: true,
		Subscriptions: []client.Subscription{{Topic: cTopic}}, LongPollingTimeout: 5 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	cctx, stopConsumers := context.WithCancel(ctx)
	defer func() { stopConsumers(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for cctx.Err() == nil {
			msgs, err := cc.Receive(cctx, client.ReceiveRequest{Group: cGroup, Topic: cTopic, Lite: true,
				BatchSize: 32, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second})
			if err != nil {
				// The proxy is down or the session is not back yet: poll again
				// soon, so that the receive loop is never what delays the test.
				select {
				case <-cctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			var entries []client.AckEntry
			for _, m := range msgs {
				bare.add(m.LiteTopic)
				entries = append(entries, client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic})
			}
			if len(entries) > 0 {
				_, _ = cc.Ack(cctx, cGroup, cTopic, entries)
			}
		}
	}()

	// The Source consumer.
	srcArr := newArrivals()
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{
		Connection:        rmqflow.Connection{Endpoints: ep, Logger: logger},
		Lite:              []rmqflow.LiteBinding{{Topic: srcTopic, Group: srcGroup}},
		InvisibleDuration: 10 * time.Second, AwaitDuration: 5 * time.Second,
	}, rmqflow.BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		_ = src.Close(context.Background())
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range src.Messages(cctx) {
			if err != nil {
				return
			}
			srcArr.add(m.Meta.LiteTopic)
			_ = src.Acker().Ack(cctx, m.Handle)
		}
	}()

	// Both consumers receive before the restart.
	send := func(sctx context.Context, topic, lite string) error {
		p, err := client.New(client.Config{Endpoints: ep})
		if err != nil {
			return err
		}
		defer p.Close(context.Background())
		res, err := p.Send(sctx, &client.Message{Topic: topic, LiteTopic: lite, Body: []byte(lite)})
		if err != nil {
			return err
		}
		return res[0].Err
	}
	waitFor := func(a *arrivals, lites []string, deadline time.Time) (time.Time, string, bool) {
		for {
			if at, which, ok := a.firstOf(lites); ok {
				return at, which, true
			}
			select {
			case <-a.ch:
			case <-time.After(time.Until(deadline)):
				return time.Time{}, "", false
			case <-ctx.Done():
				return time.Time{}, "", false
			}
		}
	}
	preC, preS := run+"-c-pre", run+"-s-pre"
	if err := send(ctx, cTopic, preC); err != nil {
		t.Fatal(err)
	}
	if err := send(ctx, srcTopic, preS); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := waitFor(bare, []string{preC}, time.Now().Add(30*time.Second)); !ok {
		t.Fatal("the bare session received nothing before the restart")
	}
	if _, _, ok := waitFor(srcArr, []string{preS}, time.Now().Add(30*time.Second)); !ok {
		t.Fatal("the source received nothing before the restart")
	}

	restartProxy(t)
	back := time.Now()

	// A fresh lite topic per main topic every 500 ms, until both consumers
	// have one or the bound has passed by 15 s (to measure how late).
	var postC, postS []string
	var sendErrs int
	stopAt := back.Add(resumeBound + 15*time.Second)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var atC, atS time.Time
	for i := 0; time.Now().Before(stopAt); i++ {
		lc, ls := fmt.Sprintf("%s-c-%d", run, i), fmt.Sprintf("%s-s-%d", run, i)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := send(sctx, cTopic, lc); err == nil {
			postC = append(postC, lc)
		} else {
			sendErrs++
		}
		if err := send(sctx, srcTopic, ls); err == nil {
			postS = append(postS, ls)
		} else {
			sendErrs++
		}
		cancel()
		if at, _, ok := bare.firstOf(postC); ok && atC.IsZero() {
			atC = at
		}
		if at, _, ok := srcArr.firstOf(postS); ok && atS.IsZero() {
			atS = at
		}
		if !atC.IsZero() && !atS.IsZero() {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	report := func(name string, at time.Time) {
		if at.IsZero() {
			t.Errorf("%s: no message sent after the proxy restart arrived within %v of the proxy serving again (bound %v)",
				name, time.Since(back).Round(time.Second), resumeBound)
			return
		}
		d := at.Sub(back)
		t.Logf("%s: first message after the restart arrived %v after the proxy served again (bound %v)", name, d.Round(100*time.Millisecond), resumeBound)
		if d > resumeBound {
			t.Errorf("%s: resumed after %v, more than the bound %v", name, d.Round(100*time.Millisecond), resumeBound)
		}
	}
	report("bare session (LiteSyncInterval 1h)", atC)
	report("Source (defaults)", atS)
	t.Logf("sends after the restart: %d to the session's topic, %d to the source's, %d failed", len(postC), len(postS), sendErrs)
}

// tWriter sends log lines to the test log (shown with -v or on failure) until
// the test's cleanup, then drops them.
type tWriter struct {
	t    *testing.T
	done *atomic.Bool
}

func newTWriter(t *testing.T) tWriter {
	w := tWriter{t: t, done: new(atomic.Bool)}
	t.Cleanup(func() { w.done.Store(true) })
	return w
}

func (w tWriter) Write(b []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}
