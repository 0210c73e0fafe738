package conformance

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// Scenario y's LITE main topic and its exact (not wildcard, not FIFO) lite
// group (scripts/rocketmq/fixtures.txt).
const (
	LiteTopicX  = "rmqflow-lite-nolt"
	ExactGroupX = "rmqflow-lite-nolt-g"
)

// ChangeWithoutLiteTopic (y): a ChangeInvisibleDuration of a lite message
// that does not name its lite topic (what the official Java 5.2.0
// LitePushConsumer sends to nack a failed message of a group that is not
// FIFO) is not applied to the lite topic. The 5.5.0 broker takes its lite
// path only when the request names a lite topic; otherwise it reads the
// handle as an orderly pop of the main topic's queue 0 and changes that
// (ChangeInvisibleTimeProcessor). So a message changed to 0 s is not
// released, one changed to 30 s is not held: both come back when the 10 s
// they were received with end, with attempt 2. The answer's status is not
// asserted: 5.5.0 answers OK, or INTERNAL_SERVER_ERROR when the lite
// offset is outside the main topic's queue 0 (its NO_MESSAGE).
func ChangeWithoutLiteTopic(t *testing.T, e *Env) {
	c := e.Client(t)
	s, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: ExactGroupX, Subscriptions: []client.Subscription{{Topic: LiteTopicX}},
	})
	if err != nil {
		t.Fatalf("lite consumer session: %v", err)
	}
	run := rmqtest.Unique("y")
	zero, long := run+"-zero", run+"-long"
	for _, lt := range []string{zero, long} {
		if err := s.SubscribeLite(rmqtest.Context(t, 10*time.Second), LiteTopicX, lt, nil); err != nil {
			t.Fatalf("subscribe %s: %v", lt, err)
		}
	}
	p := e.Producer(t, LiteTopicX)
	SendLite(t, p, LiteTopicX, zero, "zero")
	SendLite(t, p, LiteTopicX, long, "long")
	req := client.ReceiveRequest{Group: ExactGroupX, Topic: LiteTopicX, Lite: true, InvisibleDuration: MinInvisible, LongPollingTimeout: poll}
	// Each message's return is timed from its own receive: the two may come
	// in receives seconds apart.
	var got []*client.ReceivedMessage
	receivedAt := map[string]time.Time{}
	cctx := rmqtest.Context(t, 20*time.Second)
	for len(got) < 2 && cctx.Err() == nil {
		ms := Collect(cctx, t, c, req, OfRun(run), 1)
		now := time.Now()
		for _, m := range ms {
			receivedAt[m.LiteTopic] = now
		}
		got = append(got, ms...)
	}
	if len(got) != 2 || len(receivedAt) != 2 {
		t.Fatalf("received %d of 2 messages (lite topics %v)", len(got), receivedAt)
	}
	last := receivedAt[zero]
	if receivedAt[long].After(last) {
		last = receivedAt[long]
	}
	ids := map[string]string{}
	for _, m := range got {
		ids[m.LiteTopic] = m.MessageID
		d := map[string]time.Duration{zero: 0, long: 30 * time.Second}[m.LiteTopic]
		_, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: ExactGroupX, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, InvisibleDuration: d,
		})
		t.Logf("change of %s to %v without its lite topic: %v", m.LiteTopic, d, err)
	}
	back := map[string]time.Duration{}
	for len(back) < 2 && time.Since(last) < 25*time.Second {
		for _, m := range Collect(rmqtest.Context(t, 26*time.Second-time.Since(last)), t, c, req, OfRun(run), 1) {
			at := time.Since(receivedAt[m.LiteTopic])
			t.Logf("%s back after %v with attempt %d", m.LiteTopic, at.Round(10*time.Millisecond), m.DeliveryAttempt)
			if m.MessageID != ids[m.LiteTopic] || m.DeliveryAttempt != 2 {
				t.Errorf("%s: got %s attempt %d, want %s attempt 2", m.LiteTopic, m.MessageID, m.DeliveryAttempt, ids[m.LiteTopic])
			}
			if _, dup := back[m.LiteTopic]; !dup {
				back[m.LiteTopic] = at
			}
			_ = AckOne(t, c, ExactGroupX, m)
		}
	}
	if at, ok := back[zero]; !ok || at < MinInvisible-time.Second {
		t.Errorf("changed to 0 s without its lite topic: back after %v (ok %v), want not before %v (its receive's invisibility)", at, ok, MinInvisible-time.Second)
	}
	if at, ok := back[long]; !ok || at > 20*time.Second {
		t.Errorf("changed to 30 s without its lite topic: back after %v (ok %v), want within 20 s (its receive's 10 s, not 30 s)", at, ok)
	}
}
