package conformance

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// LiteTopicS and ExclusiveGroupS are scenario s's LITE main topic and the
// exclusive lite group bound to it (lite.sub.model=Exclusive).
const (
	LiteTopicS      = "rmqflow-lite-s"
	ExclusiveGroupS = "rmqflow-lite-s-g"
)

// ExclusiveLiteTakeover (s): two lite consumers of an exclusive lite group.
// A subscribes lite topic x (PARTIAL_ADD); then B does: A is sent
// NotifyUnsubscribeLite for x on its Telemetry stream (B is not). B adds x
// once more: B, which holds it, is sent the notice itself — the broker picks
// whom to tell by the group alone — while A, which no longer holds x, hears
// nothing more. Both clients are rmqflow's client package, which logs each
// notice it gets; the scenario reads those log lines.
func ExclusiveLiteTakeover(t *testing.T, e *Env) {
	x := rmqtest.Unique("s")
	a, b := &notices{}, &notices{}
	ca, cb := e.noticeClient(t, a), e.noticeClient(t, b)
	add := func(c *client.Client) {
		t.Helper()
		if err := c.SyncLiteSubscription(rmqtest.Context(t, 10*time.Second), client.LiteSyncRequest{
			Action: client.LitePartialAdd, Topic: LiteTopicS, Group: ExclusiveGroupS, LiteTopics: []string{x}}); err != nil {
			t.Fatalf("PARTIAL_ADD %s: %v", x, err)
		}
	}
	add(ca)
	add(cb)
	if !a.await(x, 1, 15*time.Second) {
		t.Fatalf("A was not told it lost %s when B subscribed it (A got %v)", x, a.topics())
	}
	add(cb)
	if !b.await(x, 1, 15*time.Second) {
		t.Fatalf("B was not told when it added %s once more (B got %v)", x, b.topics())
	}
	if got := a.count(x); got != 1 {
		t.Errorf("A was told %d times, want once: it no longer held %s", got, x)
	}
	if got := b.count(x); got != 1 {
		t.Errorf("B was told %d times, want once", got)
	}
}

// noticeClient opens a lite consumer session of ExclusiveGroupS whose
// client reports each NotifyUnsubscribeLite it gets to n.
func (e *Env) noticeClient(t *testing.T, n *notices) *client.Client {
	t.Helper()
	n.ch = make(chan struct{}, 16)
	c, err := client.New(client.Config{Endpoints: e.Target.Endpoint, Logger: slog.New(n)})
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	sess, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.LiteSimpleConsumer,
		Group: ExclusiveGroupS, Subscriptions: []client.Subscription{{Topic: LiteTopicS}}})
	if err != nil {
		t.Fatalf("lite consumer session: %v", err)
	}
	// The proxy tells only a consumer it has registered for the group: a
	// heartbeat now rather than at the session's first tick.
	if err := c.Heartbeat(rmqtest.Context(t, 10*time.Second), ExclusiveGroupS, client.ClientType(sess.WireType())); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	return c
}

// notices is a slog.Handler that records the lite topics of the client's
// "broker unsubscribed a lite topic" lines.
type notices struct {
	mu   sync.Mutex
	lite []string
	ch   chan struct{}
}

const noticeLine = "rocketmq: broker unsubscribed a lite topic"

func (n *notices) Enabled(context.Context, slog.Level) bool { return true }
func (n *notices) WithAttrs([]slog.Attr) slog.Handler       { return n }
func (n *notices) WithGroup(string) slog.Handler            { return n }

func (n *notices) Handle(_ context.Context, r slog.Record) error {
	if r.Message != noticeLine {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "lite_topic" {
			n.mu.Lock()
			n.lite = append(n.lite, a.Value.String())
			n.mu.Unlock()
			select {
			case n.ch <- struct{}{}:
			default:
			}
		}
		return true
	})
	return nil
}

func (n *notices) count(x string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, l := range n.lite {
		if l == x {
			k++
		}
	}
	return k
}

func (n *notices) topics() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.lite...)
}

// await waits until x was noticed want times, or d passes.
func (n *notices) await(x string, want int, d time.Duration) bool {
	deadline := time.After(d)
	for n.count(x) < want {
		select {
		case <-n.ch:
		case <-deadline:
			return false
		}
	}
	return true
}
