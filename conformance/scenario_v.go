package conformance

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// WildcardRejoin (v): a wildcard consumer that leaves its group
// (COMPLETE_REMOVE) and joins again (COMPLETE_ADD), as client.Session.Rejoin
// does, gets a backlog sent while it was out from the full dispatch its
// joining schedules, 5 to 15 s later: nothing else can deliver it, since a
// message that finds a wildcard group without members schedules nothing on
// 5.5.0, and the re-join comes 21 s after the message (past any full
// dispatch scheduled before). The message it held across the re-join is
// neither redelivered nor overtaken by its lite topic's next message, its
// invisibility can still be changed and it acks; after Session.Rejoin a new
// message arrives at once. A receive while out of the group gets nothing
// and no error. This is what the Source's re-join of an idle
// wildcard binding (SourceConfig.LiteRejoinAfter) relies on.
func WildcardRejoin(t *testing.T, e *Env) {
	const s = "v"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	p := e.Producer(t, topic)
	// No periodic COMPLETE_ADD (every 30 s by default) while the scenario
	// keeps the client out of its group: only the scenario's own syncs.
	c := e.ClientWith(t, client.Config{LiteSyncInterval: time.Hour})
	sess, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: group, Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true,
	})
	if err != nil {
		t.Fatalf("lite consumer session: %v", err)
	}
	run := rmqtest.Unique("v")
	req := LiteReq(s, 60*time.Second)

	// Joined: a message sent now arrives; it is held (not acked), and a
	// second one waits behind it in its lite topic.
	SendLite(t, p, topic, run+"-held", "held")
	held := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run), 1)
	if len(held) != 1 {
		t.Fatal("the first message did not arrive within 40 s")
	}
	SendLite(t, p, topic, run+"-held", "next")

	// Out of the group: a message sent now finds no member.
	if err := c.SyncLiteSubscription(rmqtest.Context(t, 10*time.Second), client.LiteSyncRequest{Action: client.LiteCompleteRemove, Topic: topic, Group: group}); err != nil {
		t.Fatalf("COMPLETE_REMOVE: %v", err)
	}
	// A receive while out of the group, as a Source's other fetchers make
	// while one of them re-joins: nothing (the held message's next waits
	// behind it), and no error a Source would take for permanent.
	out, rerr := c.Receive(rmqtest.Context(t, poll+10*time.Second), req)
	t.Logf("a receive while out of the group: %d messages, error %v (code %d)", len(out), rerr, Code(rerr))
	if rerr != nil {
		t.Errorf("a receive while out of the group failed: %v", rerr)
	}
	for _, m := range out {
		if OfRun(run)(m) {
			t.Errorf("a receive while out of the group got %q of %s (attempt %d)", m.Body, m.LiteTopic, m.DeliveryAttempt)
		}
	}
	SendLite(t, p, topic, run+"-backlog", "backlog")
	time.Sleep(21 * time.Second) // waiting out any full dispatch scheduled before: an absence, no event to await
	if err := c.SyncLiteSubscription(rmqtest.Context(t, 10*time.Second), client.LiteSyncRequest{Action: client.LiteCompleteAdd, Topic: topic, Group: group}); err != nil {
		t.Fatalf("COMPLETE_ADD: %v", err)
	}
	t0 := time.Now()
	got := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run), 1)
	waited := time.Since(t0)
	if len(got) != 1 {
		t.Fatal("the backlog sent while the consumer was out did not arrive within 40 s of its re-join")
	}
	if got[0].LiteTopic != run+"-backlog" {
		t.Fatalf("after the re-join got %q of %s (attempt %d), want the backlog: the held lite topic was released", got[0].Body, got[0].LiteTopic, got[0].DeliveryAttempt)
	}
	t.Logf("backlog delivered %v after the re-join", waited.Round(100*time.Millisecond))
	if waited < 3*time.Second {
		t.Errorf("backlog delivered %v after the re-join: want the full dispatch's delay (several seconds)", waited)
	}
	if err := AckOne(t, c, group, got[0]); err != nil {
		t.Error(err)
	}

	// The held message: renewed and acked across the re-join; then its
	// lite topic's next message comes.
	h := held[0]
	nh, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{Group: group, Topic: h.Topic,
		MessageID: h.MessageID, ReceiptHandle: h.ReceiptHandle, LiteTopic: h.LiteTopic, InvisibleDuration: 30 * time.Second})
	if err != nil {
		t.Fatalf("renewing the held message after the re-join: %v", err)
	}
	if err := AckHandle(t, c, group, h, nh); err != nil {
		t.Fatalf("ack of the held message after the re-join: %v", err)
	}
	next := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run), 1)
	if len(next) != 1 || string(next[0].Body) != "next" || next[0].DeliveryAttempt != 1 {
		t.Fatalf("after the held message's ack got %v, want its lite topic's next message, attempt 1", next)
	}
	if err := AckOne(t, c, group, next[0]); err != nil {
		t.Error(err)
	}

	// Session.Rejoin does the same in one call, and the session goes on
	// receiving: a message sent after it arrives at once.
	if err := sess.Rejoin(rmqtest.Context(t, 10*time.Second), topic); err != nil {
		t.Fatalf("Rejoin: %v", err)
	}
	t1 := time.Now()
	SendLite(t, p, topic, run+"-after", "after")
	after := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run+"-after"), 1)
	if len(after) != 1 {
		t.Fatal("a message sent after Rejoin did not arrive within 40 s")
	}
	if d := time.Since(t1); d > 3*time.Second {
		t.Errorf("a message sent after Rejoin took %v, want at once (its arrival is dispatched to a member)", d.Round(100*time.Millisecond))
	}
	if err := AckOne(t, c, group, after[0]); err != nil {
		t.Error(err)
	}
}
