package conformance

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// ReleaseWithZeroInvisibleDuration (l): ChangeInvisibleDuration accepts 0 (its
// minimum is 0, unlike ReceiveMessage's 10 s), and the message is delivered
// again at once — well before the 30 s it was received with — with attempt 2.
// Sources release their queue this way on Close.
func ReleaseWithZeroInvisibleDuration(t *testing.T, e *Env) {
	const s = "l"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("l")
	SendLite(t, p, topic, run, "x")
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 1)
	if len(got) != 1 {
		t.Fatal("message not received")
	}
	m := got[0]
	if _, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
		Group: group, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic,
	}); err != nil {
		t.Fatalf("change invisible duration to 0: %v", err)
	}
	t0 := time.Now()
	back := Collect(rmqtest.Context(t, 20*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 1)
	if len(back) != 1 {
		t.Fatal("released message not delivered again within 20 s")
	}
	t.Logf("released message back after %v with attempt %d", time.Since(t0).Round(10*time.Millisecond), back[0].DeliveryAttempt)
	if back[0].MessageID != m.MessageID || back[0].DeliveryAttempt != 2 {
		t.Errorf("got %s attempt %d, want %s attempt 2", back[0].MessageID, back[0].DeliveryAttempt, m.MessageID)
	}
	if err := AckOne(t, c, group, back[0]); err != nil {
		t.Error(err)
	}
}
