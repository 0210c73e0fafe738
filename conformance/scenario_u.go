package conformance

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// Scenario u's LITE main topic (lite.topic.expiration 1 minute) and the exact
// lite group bound to it; and the broker settings the scenario needs, which
// scripts/rocketmq.sh writes into broker.conf and TestFake gives rmqfake.
const (
	LiteTopicU  = "rmqflow-lite-u"
	ExactGroupU = "rmqflow-lite-u-g"
	// MinLiteTTL is broker.conf minLiteTTl for the conformance run: 0, so that
	// a 1-minute TTL is not held back by the 15-minute default.
	MinLiteTTL = time.Duration(0)
	// LiteTTLCheckInterval is broker.conf liteTtlCheckInterval for the
	// conformance run (the 5.5.0 default is 2 min). Not shorter: the same
	// scan deletes a lite topic whose queue it finds empty 6 times in a row,
	// TTL or not (scripts/rocketmq.sh).
	LiteTTLCheckInterval = 20 * time.Second
)

// LiteTopicTTLExpiry (u): on a LITE main topic with lite.topic.expiration = 1
// (minute), a lite topic whose last message is more than a minute old is
// deleted with its unconsumed messages at the next TTL scan, silently; a
// younger one is kept. Read back through an exact subscription from the
// first offset (OffsetMin): the deleted lite topic gives only the message
// sent after the deletion, the kept one its message from before the
// subscription, which shows that an exact subscription from MIN does read
// what predates it.
func LiteTopicTTLExpiry(t *testing.T, e *Env) {
	run := rmqtest.Unique("u")
	expired, kept := run+"-expired", run+"-kept"
	p := e.Producer(t, LiteTopicU)
	SendLite(t, p, LiteTopicU, expired, "old")
	sentOld := time.Now()
	// The TTL counts from a lite topic's last store time: "old" is past the
	// minute at the first scan after sentOld+1 min, and scans run every
	// LiteTTLCheckInterval. There is no event to await (the deletion is
	// silent), so wait out that bound.
	deleted := sentOld.Add(time.Minute + 2*LiteTTLCheckInterval + 5*time.Second)
	// "kept" is sent late enough to stay under a minute old until Collect
	// is done (a minute after it is sent, at least, with the scan's period).
	time.Sleep(time.Until(deleted.Add(-15 * time.Second)))
	SendLite(t, p, LiteTopicU, kept, "kept")
	time.Sleep(time.Until(deleted))
	SendLite(t, p, LiteTopicU, expired, "again")

	c := e.Client(t)
	s, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: ExactGroupU, Subscriptions: []client.Subscription{{Topic: LiteTopicU}},
	})
	if err != nil {
		t.Fatalf("lite consumer session: %v", err)
	}
	from := &client.OffsetOption{Policy: ptrTo(client.OffsetMin)}
	for _, lt := range []string{expired, kept} {
		if err := s.SubscribeLite(rmqtest.Context(t, 10*time.Second), LiteTopicU, lt, from); err != nil {
			t.Fatalf("subscribe %s from MIN: %v", lt, err)
		}
	}
	req := client.ReceiveRequest{Group: ExactGroupU, Topic: LiteTopicU, Lite: true, InvisibleDuration: MinInvisible, LongPollingTimeout: poll}
	got := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run), 2)
	seen := map[string]bool{}
	for _, m := range got {
		seen[string(m.Body)] = true
		_ = AckOne(t, c, ExactGroupU, m)
	}
	if seen["old"] {
		t.Errorf("the lite topic idle for more than its 1-minute TTL still delivered its old message (got %v); "+
			"a broker needs broker.conf minLiteTTl=%d and liteTtlCheckInterval=%d, which scripts/rocketmq.sh up writes: restart one started before 2026-12-01",
			seen, MinLiteTTL.Milliseconds(), LiteTTLCheckInterval.Milliseconds())
	}
	if !seen["again"] {
		t.Errorf("the message sent to the deleted lite topic after its deletion was not delivered (got %v)", seen)
	}
	if !seen["kept"] {
		t.Errorf("the lite topic under its TTL lost its message (got %v)", seen)
	}
}

func ptrTo[T any](v T) *T { return &v }
