package conformance

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// AutoRenewedLiteHeld (z): a lite message received with auto_renew (what
// the official push consumers send) and then neither acked nor changed is
// NOT kept invisible by the proxy's renewals: it comes back when the pop's
// 60 s end (the proxy's defaultInvisibleTimeMills), with attempt 2, while
// the receiving client is still connected. Read in the 5.5.0 sources: the
// proxy records an auto-renewed message for renewal without its lite topic
// (ReceiveMessageActivity builds the 7-argument MessageReceiptHandle), so
// its renewals (ReceiptHandleProcessor → changeInvisibleTime with a null
// lite topic) take the broker's non-lite path, as in scenario y, and never
// reach the lite topic's invisibility. The same holds when the receiving
// client leaves: the proxy's clear (CLEAR_GROUP, 1 s) goes through the same
// change, so a departed client's lite message also waits for its pop's 60 s.
// A normal message received the same way is held for the whole poll window
// (the proxy's renewals apply), the control that shows the 60 s is the lite
// topic's and not the receive's.
func AutoRenewedLiteHeld(t *testing.T, e *Env) {
	c := e.Client(t)
	s, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: ExactGroupX, Subscriptions: []client.Subscription{{Topic: LiteTopicX}},
	})
	if err != nil {
		t.Fatalf("lite consumer session: %v", err)
	}
	run := rmqtest.Unique("z")
	held, gone := run+"-held", run+"-gone"
	if err := s.SubscribeLite(rmqtest.Context(t, 10*time.Second), LiteTopicX, held, nil); err != nil {
		t.Fatalf("subscribe %s: %v", held, err)
	}
	nc := e.NormalConsumer(t, "z")
	p := e.Producer(t, LiteTopicX, rmqtest.NormalTopic("z"))
	ids := map[string]string{held: SendLite(t, p, LiteTopicX, held, "held")}
	nid := SendNormal(t, p, rmqtest.NormalTopic("z"), run, "held")

	auto := client.ReceiveRequest{Group: ExactGroupX, Topic: LiteTopicX, Lite: true, AutoRenew: true, InvisibleDuration: MinInvisible, LongPollingTimeout: poll}
	receivedAt := map[string]time.Time{}
	if first := Collect(rmqtest.Context(t, 30*time.Second), t, c, auto, OfRun(run), 1); len(first) != 1 || first[0].MessageID != ids[held] {
		t.Fatalf("auto-renewed lite receive: got %d messages, want %s", len(first), ids[held])
	}
	receivedAt[held] = time.Now()

	// A second client of the group receives gone's message the same way and
	// leaves (CLEAR_GROUP's 1 s, through the same lite-less change).
	d := e.Client(t)
	ds, err := d.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: ExactGroupX, Subscriptions: []client.Subscription{{Topic: LiteTopicX}},
	})
	if err != nil {
		t.Fatalf("second lite consumer session: %v", err)
	}
	if err := ds.SubscribeLite(rmqtest.Context(t, 10*time.Second), LiteTopicX, gone, nil); err != nil {
		t.Fatalf("subscribe %s: %v", gone, err)
	}
	ids[gone] = SendLite(t, p, LiteTopicX, gone, "gone")
	if first := Collect(rmqtest.Context(t, 30*time.Second), t, d, auto, OfRun(gone), 1); len(first) != 1 || first[0].MessageID != ids[gone] {
		t.Fatalf("second client's auto-renewed lite receive: got %d messages, want %s", len(first), ids[gone])
	}
	receivedAt[gone] = time.Now()
	if err := d.Close(rmqtest.Context(t, 10*time.Second)); err != nil {
		t.Fatalf("close the second client: %v", err)
	}
	left := time.Now()
	if err := s.SubscribeLite(rmqtest.Context(t, 10*time.Second), LiteTopicX, gone, nil); err != nil {
		t.Fatalf("subscribe %s: %v", gone, err)
	}

	nauto := NormalReq("z", MinInvisible)
	nauto.AutoRenew = true
	nfirst := Collect(rmqtest.Context(t, 30*time.Second), t, nc, nauto, OfRun(run), 1)
	if len(nfirst) != 1 || nfirst[0].MessageID != nid {
		t.Fatalf("auto-renewed normal receive: got %d messages, want %s", len(nfirst), nid)
	}
	nreceived := time.Now()

	// Neither lite message is acked or changed; the first client stays
	// connected. Poll (without auto_renew) until both are back or 85 s passed.
	lreq := client.ReceiveRequest{Group: ExactGroupX, Topic: LiteTopicX, Lite: true, InvisibleDuration: MinInvisible, LongPollingTimeout: poll}
	back := map[string]time.Duration{}
	cctx := rmqtest.Context(t, time.Until(receivedAt[held].Add(85*time.Second)))
	for len(back) < 2 && cctx.Err() == nil {
		for _, m := range Collect(cctx, t, c, lreq, OfRun(run), 1) {
			at := time.Since(receivedAt[m.LiteTopic])
			t.Logf("%s back %v after its auto-renewed receive (%v after the second client left), attempt %d",
				m.LiteTopic, at.Round(10*time.Millisecond), time.Since(left).Round(10*time.Millisecond), m.DeliveryAttempt)
			if m.MessageID != ids[m.LiteTopic] || m.DeliveryAttempt != 2 {
				t.Errorf("%s back: %s attempt %d, want %s attempt 2", m.LiteTopic, m.MessageID, m.DeliveryAttempt, ids[m.LiteTopic])
			}
			if _, dup := back[m.LiteTopic]; !dup {
				back[m.LiteTopic] = at
			}
			_ = AckOne(t, c, ExactGroupX, m)
		}
	}
	for _, lt := range []string{held, gone} {
		if at, ok := back[lt]; !ok || at < 55*time.Second || at > 75*time.Second {
			t.Errorf("%s: back after %v (ok %v), want at its pop's 60 s (55 to 75 s after its receive)", lt, at, ok)
		}
	}

	// The normal message is renewed by the proxy: not back for as long again.
	stale := NormalReq("z", MinInvisible)
	if got := Collect(rmqtest.Context(t, time.Until(nreceived.Add(80*time.Second))), t, nc, stale, OfRun(run), 1); len(got) > 0 {
		t.Errorf("the auto-renewed normal message came back after %v (attempt %d): the proxy's renewals should hold it",
			time.Since(nreceived).Round(10*time.Millisecond), got[0].DeliveryAttempt)
		_ = AckOne(t, nc, rmqtest.NormalGroup("z"), got[0])
	} else {
		t.Logf("auto-renewed normal message still held %v after its receive", time.Since(nreceived).Round(10*time.Millisecond))
	}
	if err := AckOne(t, nc, rmqtest.NormalGroup("z"), nfirst[0]); err != nil {
		t.Errorf("ack of the auto-renewed normal message with its receive's handle: %v", err)
	}
}
