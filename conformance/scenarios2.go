package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// ChangeInvisibleDurationNewHandle (d): ChangeInvisibleDuration returns a new
// receipt handle; then see what an ack with the OLD handle does.
func ChangeInvisibleDurationNewHandle(t *testing.T, e *Env) {
	const s = "d"
	topic := rmqtest.LiteTopic(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("d")
	SendLite(t, p, topic, run+"-1", "1")
	SendLite(t, p, topic, run+"-2", "2")
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 2)
	if len(got) != 2 {
		t.Fatalf("received %d of 2", len(got))
	}
	for i, m := range got {
		newHandle, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: rmqtest.LiteGroup(s), Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle,
			LiteTopic: m.LiteTopic, InvisibleDuration: 30 * time.Second,
		})
		if err != nil {
			t.Fatalf("change invisible: %v", err)
		}
		if newHandle == "" || newHandle == m.ReceiptHandle {
			t.Fatalf("new handle %q, old %q: want a different, non-empty handle", newHandle, m.ReceiptHandle)
		}
		if i == 0 {
			oldErr := AckHandle(t, c, rmqtest.LiteGroup(s), m, m.ReceiptHandle)
			t.Logf("OBSERVED ack with OLD handle after change: code %v err %v", Code(oldErr), oldErr)
			newErr := AckHandle(t, c, rmqtest.LiteGroup(s), m, newHandle)
			t.Logf("OBSERVED then ack with NEW handle: code %v err %v", Code(newErr), newErr)
		} else {
			newErr := AckHandle(t, c, rmqtest.LiteGroup(s), m, newHandle)
			t.Logf("OBSERVED ack with NEW handle only: code %v err %v", Code(newErr), newErr)
			oldErr := AckHandle(t, c, rmqtest.LiteGroup(s), m, m.ReceiptHandle)
			t.Logf("OBSERVED then ack with OLD handle: code %v err %v", Code(oldErr), oldErr)
		}
	}
	// Whatever the acks said, are the messages gone?
	left := Collect(rmqtest.Context(t, 45*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 2)
	for _, m := range left {
		t.Logf("OBSERVED redelivered after the acks: %s lite %s attempt %d", m.MessageID, m.LiteTopic, m.DeliveryAttempt)
		_ = AckOne(t, c, rmqtest.LiteGroup(s), m)
	}
}

// LiteTopicOrderingAndBlocking (e): order and blocking within one lite topic
// while one of its messages is in flight or deferred.
func LiteTopicOrderingAndBlocking(t *testing.T, e *Env) {
	const s = "e"
	topic := rmqtest.LiteTopic(s)
	group := rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("e")
	hot, other := run+"-hot", run+"-other"
	for i := 0; i < 5; i++ {
		SendLite(t, p, topic, hot, fmt.Sprint(i))
	}
	SendLite(t, p, topic, other, "o")
	req := LiteReq(s, 30*time.Second)
	req.BatchSize = 1
	first := Collect(rmqtest.Context(t, 30*time.Second), t, c, req, OfRun(run), 1)
	if len(first) != 1 {
		t.Fatal("nothing received")
	}
	t.Logf("OBSERVED first (batch 1): lite %s body %s", first[0].LiteTopic, first[0].Body)
	// With one hot message in flight, what else comes?
	req.BatchSize = 32
	more := Collect(rmqtest.Context(t, 12*time.Second), t, c, req, OfRun(run), 6)
	for _, m := range more {
		t.Logf("OBSERVED while first in flight: lite %s body %s", m.LiteTopic, m.Body)
	}
	all := append(first, more...)
	for _, m := range all {
		_ = AckOne(t, c, group, m)
	}
	rest := Collect(rmqtest.Context(t, 12*time.Second), t, c, req, OfRun(run), 6-len(all))
	for _, m := range rest {
		t.Logf("OBSERVED after acking those: lite %s body %s", m.LiteTopic, m.Body)
		_ = AckOne(t, c, group, m)
	}
}

// SuspendAndDeliveryAttempt (f): does suspend=true on ChangeInvisibleDuration
// increment delivery_attempt on the next delivery?
func SuspendAndDeliveryAttempt(t *testing.T, e *Env) {
	const s = "f"
	topic := rmqtest.LiteTopic(s)
	group := rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("f")
	SendLite(t, p, topic, run+"-suspend", "s")
	SendLite(t, p, topic, run+"-plain", "p")
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 2)
	if len(got) != 2 {
		t.Fatalf("received %d of 2", len(got))
	}
	for _, m := range got {
		_, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: group, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle,
			LiteTopic: m.LiteTopic, InvisibleDuration: MinInvisible, Suspend: string(m.Body) == "s",
		})
		if err != nil {
			t.Fatalf("change invisible: %v", err)
		}
	}
	t0 := time.Now()
	again := Collect(rmqtest.Context(t, 4*MinInvisible), t, c, LiteReq(s, 30*time.Second), OfRun(run), 2)
	for _, m := range again {
		t.Logf("OBSERVED after defer (suspend=%v): attempt %d after %v", string(m.Body) == "s", m.DeliveryAttempt, time.Since(t0).Round(100*time.Millisecond))
		_ = AckOne(t, c, group, m)
	}
}

// MaxRetriesThenDLQ (g): what happens after the group's max retries.
func MaxRetriesThenDLQ(t *testing.T, e *Env) {
	t.Run("lite", func(t *testing.T) {
		t.Parallel()
		const s = "g"
		topic := rmqtest.LiteTopic(s)
		c := e.LiteConsumer(t, s)
		p := e.Producer(t, topic)
		run := rmqtest.Unique("g")
		SendLite(t, p, topic, run, "x")
		deadline := rmqtest.Context(t, 90*time.Second)
		for deadline.Err() == nil {
			got := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, LiteReq(s, MinInvisible), OfRun(run), 1)
			if len(got) == 0 {
				t.Logf("OBSERVED no more deliveries within %v", 3*MinInvisible)
				break
			}
			t.Logf("OBSERVED delivery attempt %d id %s topic %s lite %s props %v", got[0].DeliveryAttempt, got[0].MessageID, got[0].Topic, got[0].LiteTopic, got[0].Properties)
		}
		qs, err := c.QueryRoute(rmqtest.Context(t, 5*time.Second), "%DLQ%"+rmqtest.LiteGroup(s))
		t.Logf("OBSERVED DLQ route: %d queues, err %v", len(qs), err)
	})
	t.Run("normal", func(t *testing.T) {
		t.Parallel()
		const s = "g"
		topic := rmqtest.NormalTopic(s)
		c := e.NormalConsumer(t, s)
		p := e.Producer(t, topic)
		run := rmqtest.Unique("g")
		SendNormal(t, p, topic, run, "x")
		deadline := rmqtest.Context(t, 90*time.Second)
		for deadline.Err() == nil {
			got := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, NormalReq(s, MinInvisible), OfRun(run), 1)
			if len(got) == 0 {
				t.Logf("OBSERVED no more deliveries within %v", 3*MinInvisible)
				break
			}
			t.Logf("OBSERVED delivery attempt %d id %s topic %s lite %s props %v", got[0].DeliveryAttempt, got[0].MessageID, got[0].Topic, got[0].LiteTopic, got[0].Properties)
		}
		qs, err := c.QueryRoute(rmqtest.Context(t, 5*time.Second), "%DLQ%"+rmqtest.NormalGroup(s))
		t.Logf("OBSERVED DLQ route: %d queues, err %v", len(qs), err)
	})
}

// MixedBatchAck (h): one AckMessage with valid, already-acked, expired and
// garbage handles.
func MixedBatchAck(t *testing.T, e *Env) {
	const s = "h"
	topic := rmqtest.LiteTopic(s)
	group := rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("h")
	for _, k := range []string{"valid", "acked", "expired"} {
		SendLite(t, p, topic, run+"-"+k, k)
	}
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, MinInvisible), OfRun(run), 3)
	if len(got) != 3 {
		t.Fatalf("received %d of 3", len(got))
	}
	by := map[string]*client.ReceivedMessage{}
	for _, m := range got {
		by[string(m.Body)] = m
	}
	// valid and acked get a long invisibility; expired keeps the 10 s.
	for _, k := range []string{"valid", "acked"} {
		m := by[k]
		h, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: group, Topic: topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic, InvisibleDuration: 60 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		m.ReceiptHandle = h
	}
	if err := AckOne(t, c, group, by["acked"]); err != nil {
		t.Fatalf("first ack: %v", err)
	}
	// Wait for "expired" to come back, so that its first handle is stale.
	re := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, LiteReq(s, 30*time.Second), func(m *client.ReceivedMessage) bool { return m.MessageID == by["expired"].MessageID }, 1)
	if len(re) != 1 {
		t.Fatal("expired message not redelivered")
	}
	entries := []client.AckEntry{Entry(by["valid"]), Entry(by["acked"]), Entry(by["expired"]),
		{MessageID: by["valid"].MessageID, ReceiptHandle: "garbage-handle", LiteTopic: by["valid"].LiteTopic}}
	res, err := c.Ack(rmqtest.Context(t, 10*time.Second), group, topic, entries)
	t.Logf("OBSERVED mixed ack rpc err: %v", err)
	for i, r := range res {
		t.Logf("OBSERVED entry %d (%s): code %v err %v", i, []string{"valid", "acked", "expired", "garbage"}[i], Code(r.Err), r.Err)
	}
	_ = AckOne(t, c, group, re[0])
}

// Limits (i): batch over 32, invisible duration under 10 s or over 12 h, an
// illegal lite topic name, an unknown group.
func Limits(t *testing.T, e *Env) {
	const s = "i"
	topic := rmqtest.LiteTopic(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("i")
	for i := 0; i < 40; i++ {
		SendLite(t, p, topic, fmt.Sprintf("%s-%02d", run, i), "x")
	}
	req := LiteReq(s, 30*time.Second)
	req.BatchSize = 64
	ctx := rmqtest.Context(t, 30*time.Second)
	var first []*client.ReceivedMessage
	for len(first) == 0 && ctx.Err() == nil {
		msgs, err := c.Receive(ctx, req)
		t.Logf("OBSERVED batch 64 -> %d messages, err %v", len(msgs), err)
		first = msgs
	}
	rest := Collect(rmqtest.Context(t, 30*time.Second), t, c, req, OfRun(run), 40)
	for _, m := range append(first, rest...) {
		_ = AckOne(t, c, rmqtest.LiteGroup(s), m)
	}
	for _, d := range []time.Duration{5 * time.Second, 9 * time.Second, 13 * time.Hour} {
		r := LiteReq(s, d)
		_, err := c.Receive(rmqtest.Context(t, 30*time.Second), r)
		t.Logf("OBSERVED receive invisible %v: code %v err %v", d, Code(err), err)
	}
	for _, lite := range []string{"bad topic!", "", string(make([]byte, 65)), "a.b"} {
		res, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: topic, LiteTopic: lite, Body: []byte("x")})
		var rerr error
		if len(res) > 0 {
			rerr = res[0].Err
		}
		t.Logf("OBSERVED send lite topic %q: rpc %v entry code %v %v", lite, err, Code(rerr), rerr)
	}
	r := LiteReq(s, 30*time.Second)
	r.Group = "rmqflow-no-such-group"
	_, err := c.Receive(rmqtest.Context(t, 30*time.Second), r)
	t.Logf("OBSERVED receive unknown group: code %v err %v", Code(err), err)
	u := e.Client(t)
	_, err = u.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "rmqflow-no-such-group",
		Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true})
	t.Logf("OBSERVED session unknown group: code %v err %v", Code(err), err)
	res, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: "rmqflow-no-such-topic", Body: []byte("x")})
	t.Logf("OBSERVED send unknown topic: %v %v", res, err)
}

// AckOnlyClient (j): must an ack-only client open Telemetry or sync a lite
// subscription before it may ack?
func AckOnlyClient(t *testing.T, e *Env) {
	const s = "j"
	topic := rmqtest.LiteTopic(s)
	group := rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("j")
	for _, k := range []string{"bare", "producer", "nosync"} {
		SendLite(t, p, topic, run+"-"+k, k)
	}
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 3)
	if len(got) != 3 {
		t.Fatalf("received %d of 3", len(got))
	}
	for _, m := range got {
		var acker *client.Client
		switch string(m.Body) {
		case "bare":
			acker = e.Client(t)
		case "producer":
			acker = e.Producer(t, topic)
		case "nosync":
			acker = e.Client(t)
			_, err := acker.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: group,
				Subscriptions: []client.Subscription{{Topic: topic}}})
			if err != nil {
				t.Fatal(err)
			}
		}
		err := AckOne(t, acker, group, m)
		t.Logf("OBSERVED ack by %s client: code %v err %v", m.Body, Code(err), err)
		h, err := acker.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: group, Topic: topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic, InvisibleDuration: MinInvisible})
		t.Logf("OBSERVED change-invisible by %s client after ack: code %v err %v handle %q", m.Body, Code(err), err, h)
	}
	left := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, LiteReq(s, 30*time.Second), OfRun(run), 3)
	for _, m := range left {
		t.Logf("OBSERVED redelivered: %s attempt %d", m.Body, m.DeliveryAttempt)
		_ = AckOne(t, c, group, m)
	}
}

// BatchSendOfLiteMessages (k): a SendMessage carrying several lite messages.
func BatchSendOfLiteMessages(t *testing.T, e *Env) {
	const s = "k"
	topic := rmqtest.LiteTopic(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("k")
	ctx := rmqtest.Context(t, 10*time.Second)
	res, err := p.Send(ctx, &client.Message{Topic: topic, LiteTopic: run + "-1", Body: []byte("1")}, &client.Message{Topic: topic, LiteTopic: run + "-2", Body: []byte("2")})
	t.Logf("OBSERVED batch send: %+v %v", res, err)
	got := Collect(rmqtest.Context(t, 20*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 2)
	t.Logf("OBSERVED received %d of the 2", len(got))
	for _, m := range got {
		_ = AckOne(t, c, rmqtest.LiteGroup(s), m)
	}
}
