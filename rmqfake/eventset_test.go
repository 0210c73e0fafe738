package rmqfake_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

const (
	capTopic = "t-cap"
	capGroup = "g-cap" // lite.sub.client.max.event.cnt=10
	allGroup = "g-all" // the server's cap
)

// capServer starts a server on a manual clock (the broker's lite dispatch
// unless opts say otherwise) with a LITE main topic, a wildcard group with
// an event-set cap of 10 and one without; one client joined each group,
// and the full dispatches their joins scheduled (5 s later, on the 10 s
// scan) have run.
func capServer(t *testing.T, opts ...rmqfake.Option) (s *rmqfake.Server, clk *rmqfake.ManualClock, p, c10, call *client.Client) {
	t.Helper()
	clk = rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s = rmqfake.NewForTest(t, append([]rmqfake.Option{rmqfake.WithClock(clk)}, opts...)...)
	must(t, s.CreateTopic(capTopic, rmqfake.TopicLite))
	must(t, s.CreateGroup(capGroup, rmqfake.LiteBind(capTopic), rmqfake.Wildcard(), rmqfake.LiteMaxEventCount(10)))
	must(t, s.CreateGroup(allGroup, rmqfake.LiteBind(capTopic), rmqfake.Wildcard()))
	p = producer(t, s)
	join := func(g string) *client.Client {
		return session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: g,
			Subscriptions: []client.Subscription{{Topic: capTopic}}, LiteWildcard: true})
	}
	c10, call = join(capGroup), join(allGroup)
	clk.Advance(10 * time.Second)
	return s, clk, p, c10, call
}

func capReq(group string) client.ReceiveRequest {
	return client.ReceiveRequest{Group: group, Topic: capTopic, Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second}
}

// sendSpread sends one message to each of n lite topics.
func sendSpread(t *testing.T, p *client.Client, n int) {
	t.Helper()
	for i := range n {
		send(t, p, &client.Message{Topic: capTopic, LiteTopic: fmt.Sprintf("l%02d", i), Body: []byte(fmt.Sprint(i))})
	}
}

// receiveOrWait receives for group g; when nothing is there, it lets the
// poll's window pass on the clock and returns nothing.
func receiveOrWait(t *testing.T, s *rmqfake.Server, clk *rmqfake.ManualClock, c *client.Client, g string) []*client.ReceivedMessage {
	t.Helper()
	res := receiveAsync(c, capReq(g))
	select {
	case r := <-res:
		must(t, r.err)
		return r.msgs
	case <-time.After(200 * time.Millisecond):
	}
	waitPollers(t, s, 1)
	clk.Advance(5 * time.Second)
	r := <-res
	must(t, r.err)
	return r.msgs
}

// takeAll receives and acks until a poll finds nothing (the clock then
// moved 5 s), and returns how many messages came.
func takeAll(t *testing.T, s *rmqfake.Server, clk *rmqfake.ManualClock, c *client.Client, g string) int {
	t.Helper()
	n := 0
	for {
		msgs := receiveOrWait(t, s, clk, c, g)
		if len(msgs) == 0 {
			return n
		}
		ackAll(t, c, g, capTopic, msgs)
		n += len(msgs)
	}
}

// A wildcard client's event set holds at most the group's
// lite.sub.client.max.event.cnt lite topics (the broker's
// maxClientEventCount, 100, without it): 40 lite topics that get a message
// each reach a client of the group capped at 10 ten at a time, one full
// dispatch (10 s after the refusal, on the 10 s scan) per ten; the group
// without a cap gets all 40 at once.
func TestLiteEventSetCap(t *testing.T) {
	t.Parallel()
	s, clk, p, c10, call := capServer(t)
	t0 := clk.Now()
	sendSpread(t, p, 40)
	if g := s.Stats().Groups; g[capGroup].LiteEvents != 10 || g[allGroup].LiteEvents != 40 {
		t.Fatalf("after the sends: %d and %d lite topics in the event sets, want 10 (cap 10) and 40", g[capGroup].LiteEvents, g[allGroup].LiteEvents)
	}
	got := []int{takeAll(t, s, clk, c10, capGroup)} // the clock moves 5 s
	if n := takeAll(t, s, clk, call, allGroup); n != 40 {
		t.Fatalf("group without a cap: %d messages at once, want 40", n)
	}
	for k := 1; k <= 5; k++ {
		clk.Set(t0.Add(time.Duration(k) * 10 * time.Second))
		got = append(got, takeAll(t, s, clk, c10, capGroup))
	}
	// At once: 10; then 10 at each full dispatch (t0+10, +20, +30 s: the
	// refusals at t0 scheduled one due at t0+10 s, each full dispatch that
	// filled the set the next).
	if want := "[10 10 10 10 0 0]"; fmt.Sprint(got) != want {
		t.Fatalf("capped group, per 10 s from the sends: %v, want %s", got, want)
	}
}

// The server's MaxClientEventCount sets the cap of groups without one, and
// LiteEventCheckInterval and LiteFullDispatchDelay the full dispatch's
// timing. The cap is read when a client's set is created: a group changed
// later keeps its client's set as it was until the client leaves and joins
// again.
func TestLiteEventSetKnobs(t *testing.T) {
	t.Parallel()
	s, clk, p, _, call := capServer(t, rmqfake.MaxClientEventCount(15),
		rmqfake.LiteEventCheckInterval(time.Second), rmqfake.LiteFullDispatchDelay(2*time.Second))
	events := func() int { return s.Stats().Groups[allGroup].LiteEvents }
	take := func(want int) {
		t.Helper()
		msgs := receiveNow(t, call, capReq(allGroup))
		if len(msgs) != want {
			t.Fatalf("received %d, want %d", len(msgs), want)
		}
		ackAll(t, call, allGroup, capTopic, msgs)
	}
	sendSpread(t, p, 60)
	if n := events(); n != 15 {
		t.Fatalf("after the sends: %d lite topics in the set, want the server's cap, 15", n)
	}
	must(t, s.CreateGroup(allGroup, rmqfake.LiteBind(capTopic), rmqfake.Wildcard(), rmqfake.LiteMaxEventCount(20)))
	take(15)
	clk.Advance(time.Second)
	if n := events(); n != 0 {
		t.Fatalf("1 s after the refusals: %d lite topics in the set, want 0 (the full dispatch is due 2 s after them)", n)
	}
	clk.Advance(time.Second)
	if n := events(); n != 15 {
		t.Fatalf("after the full dispatch: %d lite topics in the set, want 15 (its cap when it was created)", n)
	}
	take(15)
	for _, a := range []client.LiteAction{client.LiteCompleteRemove, client.LiteCompleteAdd} {
		must(t, call.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: a, Topic: capTopic, Group: allGroup}))
	}
	clk.Advance(2 * time.Second) // the full dispatch the last one's refusal scheduled
	if n := events(); n != 20 {
		t.Fatalf("after leaving and joining again: %d lite topics in the new set, want the group's new cap, 20", n)
	}
	take(20)
}

// CreateGroup refuses a cap below the broker's minimum, 10.
func TestLiteMaxEventCountBounds(t *testing.T) {
	t.Parallel()
	s := rmqfake.NewForTest(t)
	must(t, s.CreateTopic(capTopic, rmqfake.TopicLite))
	err := s.CreateGroup(capGroup, rmqfake.LiteBind(capTopic), rmqfake.Wildcard(), rmqfake.LiteMaxEventCount(9))
	if err == nil || !strings.Contains(err.Error(), "lite.sub.client.max.event.cnt") {
		t.Fatalf("cap 9: %v, want an error naming lite.sub.client.max.event.cnt", err)
	}
	must(t, s.CreateGroup(capGroup, rmqfake.LiteBind(capTopic), rmqfake.Wildcard(), rmqfake.LiteMaxEventCount(10)))
}

// FastLiteDispatch dispatches everything at once, caps or not.
func TestFastLiteDispatchIgnoresCap(t *testing.T) {
	t.Parallel()
	s, clk, p, c10, _ := capServer(t, rmqfake.FastLiteDispatch())
	sendSpread(t, p, 40)
	if n := takeAll(t, s, clk, c10, capGroup); n != 40 {
		t.Fatalf("FastLiteDispatch, cap 10: %d messages at once, want 40", n)
	}
}

// Events go to a group's clients in turn; a set whose client has taken
// nothing from it for 10 s is handed to the others at the next scan, and
// its client gets no new event for 10 s (the broker's maybeBlock and
// blacklist).
func TestLiteEventSetOfAnIdleClient(t *testing.T) {
	t.Parallel()
	s, clk, p, _, _ := capServer(t) // its allGroup client is a, which never polls
	b := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: allGroup,
		Subscriptions: []client.Subscription{{Topic: capTopic}}, LiteWildcard: true})
	clk.Advance(10 * time.Second) // b's join dispatch
	t0 := clk.Now()
	sendSpread(t, p, 4)
	if n := s.Stats().Groups[allGroup].LiteEvents; n != 4 {
		t.Fatalf("%d lite topics in the sets, want 4", n)
	}
	first := len(receiveNow(t, b, capReq(allGroup)))
	if first != 2 {
		t.Fatalf("b received %d at once, want 2 (events go to a and b in turn)", first)
	}
	// a polls never: at the scan 10 s past its set's creation its two lite
	// topics go to b.
	clk.Set(t0.Add(19 * time.Second))
	if n := s.Stats().Groups[allGroup].LiteEvents; n != 2 {
		t.Fatalf("at t0+19 s: %d lite topics in the sets, want a's 2", n)
	}
	clk.Set(t0.Add(20 * time.Second))
	if got := receiveNow(t, b, capReq(allGroup)); len(got) != 2 {
		t.Fatalf("after a's set was handed over: b received %d, want 2", len(got))
	}
	// a is blacklisted for 10 s: both new lite topics go to b.
	sendSpread(t, p, 6) // l04, l05 are new
	if got := receiveNow(t, b, capReq(allGroup)); len(got) != 2 {
		t.Fatalf("a blacklisted: b received %d, want both new lite topics", len(got))
	}
}

// A lite topic waiting in one client's set is offered again by a later
// event, to the next client in turn, which takes it into its own set (the
// broker de-duplicates within a client's set, not across the group): a
// member that polls no more holds a copy, not the lite topic. Two messages
// to one lite topic while a never polls: a's set and b's set each get it,
// and b receives both messages at once.
func TestLiteEventInSeveralSets(t *testing.T) {
	t.Parallel()
	s, clk, p, _, _ := capServer(t) // its allGroup client is a, which never polls
	b := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: allGroup,
		Subscriptions: []client.Subscription{{Topic: capTopic}}, LiteWildcard: true})
	clk.Advance(10 * time.Second) // b's join dispatch
	for i := range 2 {
		send(t, p, &client.Message{Topic: capTopic, LiteTopic: "l00", Body: []byte(fmt.Sprint(i))})
	}
	if n := s.Stats().Groups[allGroup].LiteEvents; n != 2 {
		t.Fatalf("after two messages to one lite topic: %d events in the group's sets, want 2 (one in a's set, one in b's)", n)
	}
	if got := receiveNow(t, b, capReq(allGroup)); len(got) != 2 {
		t.Fatalf("b received %d, want both messages of l00", len(got))
	}
	if n := s.Stats().Groups[allGroup].LiteEvents; n != 1 {
		t.Fatalf("after b's receive: %d events in the group's sets, want a's copy", n)
	}
}
