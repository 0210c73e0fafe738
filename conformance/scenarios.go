package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// WildcardReceivesManyLiteTopics (a): one wildcard lite consumer receives the
// messages of many lite topics under its main topic, each carrying its lite
// topic, without subscribing to any of them by name.
func WildcardReceivesManyLiteTopics(t *testing.T, e *Env) {
	const s, topics = "a", 20
	topic := rmqtest.LiteTopic(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("a")
	want := map[string]string{}
	for i := 0; i < topics; i++ {
		lite := fmt.Sprintf("%s-%02d", run, i)
		want[SendLite(t, p, topic, lite, lite)] = lite
	}
	got := Collect(rmqtest.Context(t, 60*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), topics)
	if len(got) != topics {
		t.Fatalf("received %d of %d messages", len(got), topics)
	}
	seen := map[string]bool{}
	for _, m := range got {
		if want[m.MessageID] != m.LiteTopic || string(m.Body) != m.LiteTopic {
			t.Errorf("message %s: lite topic %q, body %q; sent to %q", m.MessageID, m.LiteTopic, m.Body, want[m.MessageID])
		}
		if m.Topic != topic {
			t.Errorf("message %s: topic %q, want the main topic %q", m.MessageID, m.Topic, topic)
		}
		if m.DeliveryAttempt != 1 {
			t.Errorf("message %s: first delivery has attempt %d, want 1", m.MessageID, m.DeliveryAttempt)
		}
		if got, want := m.Properties["INNER_MULTI_DISPATCH"], "%LMQ%$"+topic+"$"+m.LiteTopic; got != want {
			t.Errorf("message %s: INNER_MULTI_DISPATCH %q, want %q", m.MessageID, got, want)
		}
		seen[m.LiteTopic] = true
		if err := AckOne(t, c, rmqtest.LiteGroup(s), m); err != nil {
			t.Errorf("ack %s: %v", m.MessageID, err)
		}
	}
	if len(seen) != topics {
		t.Errorf("saw %d distinct lite topics, want %d", len(seen), topics)
	}
}

// AckByAnotherClient (b): a message received by one client is acked by another
// client (another client id) of the same group, and is not delivered again.
func AckByAnotherClient(t *testing.T, e *Env) {
	t.Run("lite", func(t *testing.T) {
		t.Parallel()
		const s = "b"
		topic := rmqtest.LiteTopic(s)
		recv := e.LiteConsumer(t, s)
		acker := e.LiteConsumer(t, s)
		p := e.Producer(t, topic)
		run := rmqtest.Unique("b")
		SendLite(t, p, topic, run, "x")
		got := Collect(rmqtest.Context(t, 30*time.Second), t, recv, LiteReq(s, MinInvisible), OfRun(run), 1)
		if len(got) != 1 {
			t.Fatal("message not received")
		}
		if recv.ID() == acker.ID() {
			t.Fatal("test needs two client ids")
		}
		if err := AckOne(t, acker, rmqtest.LiteGroup(s), got[0]); err != nil {
			t.Fatalf("ack by another client: %v", err)
		}
		Nothing(t, recv, LiteReq(s, MinInvisible), OfRun(run), MinInvisible+10*time.Second)
	})
	t.Run("normal", func(t *testing.T) {
		t.Parallel()
		const s = "b"
		topic := rmqtest.NormalTopic(s)
		recv := e.NormalConsumer(t, s)
		acker := e.NormalConsumer(t, s)
		p := e.Producer(t, topic)
		run := rmqtest.Unique("b")
		SendNormal(t, p, topic, run, "x")
		got := Collect(rmqtest.Context(t, 30*time.Second), t, recv, NormalReq(s, MinInvisible), OfRun(run), 1)
		if len(got) != 1 {
			t.Fatal("message not received")
		}
		if err := AckOne(t, acker, rmqtest.NormalGroup(s), got[0]); err != nil {
			t.Fatalf("ack by another client: %v", err)
		}
		Nothing(t, recv, NormalReq(s, MinInvisible), OfRun(run), MinInvisible+10*time.Second)
	})
}

// RedeliveryAfterInvisibleDuration (c): an unacked message comes back after its
// invisible duration with delivery_attempt incremented.
func RedeliveryAfterInvisibleDuration(t *testing.T, e *Env) {
	check := func(t *testing.T, c *client.Client, req client.ReceiveRequest, run string) {
		first := Collect(rmqtest.Context(t, 30*time.Second), t, c, req, OfRun(run), 1)
		if len(first) != 1 {
			t.Fatal("message not received")
		}
		t0 := time.Now()
		if first[0].DeliveryAttempt != 1 {
			t.Errorf("first delivery attempt %d, want 1", first[0].DeliveryAttempt)
		}
		again := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, req, OfRun(run), 1)
		if len(again) != 1 {
			t.Fatalf("message not redelivered within %v", 3*MinInvisible)
		}
		waited := time.Since(t0)
		m := again[0]
		t.Logf("redelivered after %v with attempt %d", waited.Round(100*time.Millisecond), m.DeliveryAttempt)
		if m.MessageID != first[0].MessageID {
			t.Errorf("redelivered id %s, want %s", m.MessageID, first[0].MessageID)
		}
		if m.DeliveryAttempt != 2 {
			t.Errorf("redelivery attempt %d, want 2", m.DeliveryAttempt)
		}
		if waited < req.InvisibleDuration-time.Second {
			t.Errorf("redelivered after %v, before the invisible duration %v", waited, req.InvisibleDuration)
		}
		if m.ReceiptHandle == first[0].ReceiptHandle {
			t.Error("redelivery reused the receipt handle")
		}
		if err := AckOne(t, c, req.Group, m); err != nil {
			t.Errorf("ack redelivered: %v", err)
		}
	}
	t.Run("lite", func(t *testing.T) {
		t.Parallel()
		const s = "c"
		c := e.LiteConsumer(t, s)
		p := e.Producer(t, rmqtest.LiteTopic(s))
		run := rmqtest.Unique("c")
		SendLite(t, p, rmqtest.LiteTopic(s), run, "x")
		check(t, c, LiteReq(s, MinInvisible), run)
	})
	t.Run("normal", func(t *testing.T) {
		t.Parallel()
		const s = "c"
		c := e.NormalConsumer(t, s)
		p := e.Producer(t, rmqtest.NormalTopic(s))
		run := rmqtest.Unique("c")
		SendNormal(t, p, rmqtest.NormalTopic(s), run, "x")
		check(t, c, NormalReq(s, MinInvisible), run)
	})
}
