package conformance

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// WildcardRejoin (v): a wildcard consumer that leaves its group
// (COMPLETE_REMOVE) and joins again (COMPLETE_ADD), as client.Session.Rejoin
// does, gets a backlog that built up while it was out from a full dispatch 5
// to 15 s later (scenario m: the one its joining schedules, or the one the
// message that found no client scheduled), not at once; the message
// it received before it left can still be acked, and its session goes on
// receiving new messages at once. This is what the Source's re-join of an
// idle wildcard binding (SourceConfig.LiteRejoinAfter) relies on.
func WildcardRejoin(t *testing.T, e *Env) {
	const s = "v"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	p := e.Producer(t, topic)
	c := e.Client(t)
	sess, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: group, Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true,
	})
	if err != nil {
		t.Fatalf("lite consumer session: %v", err)
	}
	run := rmqtest.Unique("v")
	req := LiteReq(s, 60*time.Second)

	// Joined: a message sent now arrives (after the join's own full
	// dispatch at most).
	SendLite(t, p, topic, run+"-held", "held")
	held := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run), 1)
	if len(held) != 1 {
		t.Fatal("the first message did not arrive within 40 s")
	}

	// Out of the group: a message sent now finds no client.
	ctx := rmqtest.Context(t, 10*time.Second)
	if err := c.SyncLiteSubscription(ctx, client.LiteSyncRequest{Action: client.LiteCompleteRemove, Topic: topic, Group: group}); err != nil {
		t.Fatalf("COMPLETE_REMOVE: %v", err)
	}
	SendLite(t, p, topic, run+"-backlog", "backlog")
	if err := c.SyncLiteSubscription(ctx, client.LiteSyncRequest{Action: client.LiteCompleteAdd, Topic: topic, Group: group}); err != nil {
		t.Fatalf("COMPLETE_ADD: %v", err)
	}
	t0 := time.Now()
	got := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run+"-backlog"), 1)
	waited := time.Since(t0)
	if len(got) != 1 {
		t.Fatal("the backlog sent while the consumer was out did not arrive within 40 s of its re-join")
	}
	t.Logf("backlog delivered %v after the re-join", waited.Round(100*time.Millisecond))
	if waited < 3*time.Second {
		t.Errorf("backlog delivered %v after the re-join: want the full dispatch's delay (several seconds)", waited)
	}
	if err := AckOne(t, c, group, held[0]); err != nil {
		t.Errorf("ack of the message received before the re-join: %v", err)
	}
	if err := AckOne(t, c, group, got[0]); err != nil {
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
	t.Logf("a message sent after Rejoin delivered in %v", time.Since(t1).Round(100*time.Millisecond))
	if err := AckOne(t, c, group, after[0]); err != nil {
		t.Error(err)
	}
}
