package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/brokeradmin"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// The fixtures of scenario aa: a LITE main topic read by three wildcard
// groups, and a normal group.
const (
	KickTopic       = "rmqflow-lite-kick"
	KickGroup       = "rmqflow-lite-kick-g"        // left to the broker
	KickGroupWide   = "rmqflow-lite-kick-group-g"  // dispatched as a group
	KickGroupClient = "rmqflow-lite-kick-client-g" // dispatched for its client id
	KickNormalGroup = "rmqflow-normal-kick-g"
	kickLiteTopics  = 3
	// KickEvery is how often the scenario repeats the request from a
	// consumer's join until its first message, as rmqflow's Source does.
	KickEvery = 250 * time.Millisecond
	// KickFirstWithin is the most a kicked consumer may wait for its first
	// message, counted from just before it joined (issue 25: ≤ 2 s).
	KickFirstWithin = 2 * time.Second
	// JoinDispatchDelay is the broker's wait before a new wildcard client's
	// first full dispatch (LiteCtlListenerImpl.onRegister, 5000 ms), which
	// a consumer left alone waits at least.
	JoinDispatchDelay = 5 * time.Second
)

// TriggerLiteDispatch (aa): the broker's admin request triggerLiteDispatch
// (remoting 200079, to the broker's own port; rmqfake's
// Server.TriggerLiteDispatch) refuses an unknown group (26,
// SUBSCRIPTION_GROUP_NOT_EXIST) and a group that is not a lite group (29,
// INVALID_PARAMETER). With a backlog of 3 lite topics sent while no
// consumer was there, one consumer of each of three wildcard groups joins
// at once: the one left alone gets its first message 5 s or more after it
// joined (the broker's first full dispatch for a new client); the one
// whose group is dispatched on request right after its join and every
// 250 ms until its first message gets it within 2 s; the one dispatched
// for its client id alone waits as long as the first: on 5.5.0 a wildcard
// client's own lite topic set is empty, so that request dispatches
// nothing. docs/operations-lite.md, "A new consumer's first message".
func TriggerLiteDispatch(t *testing.T, e *Env) {
	kick := e.Target.LiteDispatch
	if kick == nil {
		t.Fatalf("target %s has no LiteDispatch", e.Target.Name)
	}
	ctx := rmqtest.Context(t, 10*time.Second)
	err := kick(ctx, "rmqflow-no-such-group-z", "")
	var ae *brokeradmin.Error
	if !errors.Is(err, brokeradmin.ErrGroupNotFound) || !errors.As(err, &ae) || !strings.Contains(ae.Remark, "rmqflow-no-such-group-z") {
		t.Errorf("unknown group: %v, want response code 26 naming the group", err)
	}
	err2 := kick(ctx, KickNormalGroup, "")
	if !errors.Is(err2, brokeradmin.ErrNotLiteGroup) {
		t.Errorf("normal group: %v, want response code 29 (not a LITE group)", err2)
	}
	t.Logf("refusals: %v; %v", err, err2)

	p := e.Producer(t, KickTopic)
	run := rmqtest.Unique("aa")
	for i := range kickLiteTopics {
		SendLite(t, p, KickTopic, fmt.Sprintf("%s-%d", run, i), "x")
	}

	type result struct {
		first  time.Duration // from just before the join; 0: none
		all    int
		kicks  int
		kickOK int
		slow   time.Duration // the longest request
	}
	var wg sync.WaitGroup
	res := map[string]*result{}
	var mu sync.Mutex
	for _, g := range []string{KickGroup, KickGroupWide, KickGroupClient} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &result{}
			defer func() { mu.Lock(); res[g] = r; mu.Unlock() }()
			start := time.Now()
			c := e.Client(t)
			_, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
				Type: client.LiteSimpleConsumer, Group: g, Subscriptions: []client.Subscription{{Topic: KickTopic}}, LiteWildcard: true,
			})
			if err != nil {
				t.Errorf("lite consumer session of %s: %v", g, err)
				return
			}
			first := make(chan struct{})
			kicked := make(chan struct{})
			go func() {
				defer close(kicked)
				var clientID string
				switch g {
				case KickGroup:
					return
				case KickGroupClient:
					clientID = c.ID()
				}
				tk := time.NewTicker(KickEvery)
				defer tk.Stop()
				deadline := time.After(2 * JoinDispatchDelay)
				for {
					kctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					k0 := time.Now()
					err := kick(kctx, g, clientID)
					r.slow = max(r.slow, time.Since(k0))
					cancel()
					r.kicks++
					if err != nil {
						t.Errorf("%s: triggerLiteDispatch: %v", g, err)
					} else {
						r.kickOK++
					}
					select {
					case <-first:
						return
					case <-deadline:
						return
					case <-tk.C:
					}
				}
			}()
			rctx, cancel := context.WithDeadline(context.Background(), start.Add(30*time.Second))
			defer cancel()
			req := client.ReceiveRequest{Group: g, Topic: KickTopic, Lite: true, InvisibleDuration: 30 * time.Second, LongPollingTimeout: poll}
			for r.all < kickLiteTopics {
				if dl, _ := rctx.Deadline(); time.Until(dl) < poll+500*time.Millisecond {
					break
				}
				msgs, err := c.Receive(rctx, req)
				if err != nil {
					if rctx.Err() == nil {
						t.Errorf("receive %s: %v", g, err)
					}
					break
				}
				at := time.Since(start)
				var es []client.AckEntry
				for _, m := range msgs {
					es = append(es, Entry(m))
					if !strings.HasPrefix(m.LiteTopic, run) {
						continue // left over by an earlier run
					}
					if r.all == 0 {
						r.first = at
						close(first)
					}
					r.all++
				}
				if len(es) > 0 {
					actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
					if _, err := c.Ack(actx, g, KickTopic, es); err != nil {
						t.Errorf("ack %s: %v", g, err)
					}
					acancel()
				}
			}
			if r.all == 0 {
				close(first)
			}
			<-kicked
		}()
	}
	wg.Wait()
	for _, g := range []string{KickGroup, KickGroupWide, KickGroupClient} {
		r := res[g]
		t.Logf("%s: first message %v after the join, %d of %d messages, %d requests (%d answered OK, the longest in %v)",
			g, r.first.Round(10*time.Millisecond), r.all, kickLiteTopics, r.kicks, r.kickOK, r.slow.Round(100*time.Microsecond))
		if r.all != kickLiteTopics {
			t.Errorf("%s: %d of %d messages within 30 s of the join", g, r.all, kickLiteTopics)
		}
	}
	if r := res[KickGroup]; r.all > 0 && r.first < JoinDispatchDelay {
		t.Errorf("left alone: first message %v after the join, want the broker's %v at least", r.first.Round(10*time.Millisecond), JoinDispatchDelay)
	}
	if r := res[KickGroupWide]; r.all > 0 && r.first > KickFirstWithin {
		t.Errorf("group dispatched on request: first message %v after the join, want %v at most", r.first.Round(10*time.Millisecond), KickFirstWithin)
	}
	if r := res[KickGroupClient]; r.all > 0 && r.first < JoinDispatchDelay {
		t.Errorf("dispatched for its client id: first message %v after the join, want the broker's %v at least (a wildcard client has no lite topics of its own)", r.first.Round(10*time.Millisecond), JoinDispatchDelay)
	}
}
