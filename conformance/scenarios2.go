package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// ChangeInvisibleDurationNewHandle (d): ChangeInvisibleDuration returns a new
// receipt handle. On a lite topic the OLD handle still acks the message, from
// the same client or from another one, and a second ack with the other handle
// is OK too. On a normal topic an ack with the old handle answers OK but does
// not take: the message comes back when the new invisibility ends.
func ChangeInvisibleDurationNewHandle(t *testing.T, e *Env) {
	t.Run("lite", func(t *testing.T) {
		t.Parallel()
		changeInvisibleLite(t, e)
	})
	t.Run("normal", func(t *testing.T) {
		t.Parallel()
		changeInvisibleNormal(t, e)
	})
}

func changeInvisibleNormal(t *testing.T, e *Env) {
	const s = "d"
	topic, group := rmqtest.NormalTopic(s), rmqtest.NormalGroup(s)
	c := e.NormalConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("d")
	SendNormal(t, p, topic, run, "x")
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, NormalReq(s, 30*time.Second), OfRun(run), 1)
	if len(got) != 1 {
		t.Fatal("message not received")
	}
	m := got[0]
	newHandle, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
		Group: group, Topic: topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, InvisibleDuration: MinInvisible,
	})
	if err != nil || newHandle == "" || newHandle == m.ReceiptHandle {
		t.Fatalf("change invisible: handle %q, %v", newHandle, err)
	}
	if err := AckHandle(t, c, group, m, m.ReceiptHandle); err != nil {
		t.Fatalf("ack with the old handle: %v, want OK", err)
	}
	back := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, NormalReq(s, 30*time.Second), OfRun(run), 1)
	if len(back) != 1 {
		t.Fatal("the message did not come back: the old handle's ack took effect")
	}
	if back[0].DeliveryAttempt != 2 {
		t.Errorf("came back with attempt %d, want 2", back[0].DeliveryAttempt)
	}
	if err := AckOne(t, c, group, back[0]); err != nil {
		t.Error(err)
	}
}

func changeInvisibleLite(t *testing.T, e *Env) {
	const s = "d"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	other := e.Client(t) // no session: acks need none (scenario j)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("d")
	for _, k := range []string{"old-then-new", "new-then-old", "old-by-other"} {
		SendLite(t, p, topic, run+"-"+k, k)
	}
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 3)
	if len(got) != 3 {
		t.Fatalf("received %d of 3", len(got))
	}
	for _, m := range got {
		newHandle, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: group, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle,
			LiteTopic: m.LiteTopic, InvisibleDuration: MinInvisible,
		})
		if err != nil {
			t.Fatalf("change invisible: %v", err)
		}
		if newHandle == "" || newHandle == m.ReceiptHandle {
			t.Fatalf("new handle %q, old %q: want a different, non-empty handle", newHandle, m.ReceiptHandle)
		}
		var first, second error
		switch string(m.Body) {
		case "old-then-new":
			first = AckHandle(t, c, group, m, m.ReceiptHandle)
			second = AckHandle(t, c, group, m, newHandle)
		case "new-then-old":
			first = AckHandle(t, c, group, m, newHandle)
			second = AckHandle(t, c, group, m, m.ReceiptHandle)
		case "old-by-other":
			first = AckHandle(t, other, group, m, m.ReceiptHandle)
			second = AckHandle(t, other, group, m, newHandle)
		}
		if first != nil || second != nil {
			t.Errorf("%s: first ack %v, second ack %v; want both OK", m.Body, first, second)
		}
	}
	// The acks took effect: nothing comes back once the 10 s have passed.
	Nothing(t, c, LiteReq(s, 30*time.Second), OfRun(run), MinInvisible+10*time.Second)
}

// LiteTopicOrderingAndBlocking (e): a lite topic is consumed in order, one
// batch in flight at a time: while its head is in flight or deferred, nothing
// more of that lite topic is delivered (other lite topics flow); when the
// deferred head's invisibility ends it comes back first, with the rest of the
// lite topic behind it in the same poll, in order.
func LiteTopicOrderingAndBlocking(t *testing.T, e *Env) {
	const s = "e"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("e")
	hot, other := run+"-hot", run+"-other"
	for i := 0; i < 5; i++ {
		SendLite(t, p, topic, hot, fmt.Sprint(i))
	}
	one := LiteReq(s, 30*time.Second)
	one.BatchSize = 1
	head := Collect(rmqtest.Context(t, 30*time.Second), t, c, one, OfRun(run), 1)
	if len(head) != 1 || string(head[0].Body) != "0" {
		t.Fatalf("first delivery %v, want hot message 0", bodies(head))
	}
	SendLite(t, p, topic, other, "o")
	req := LiteReq(s, 30*time.Second)
	during := Collect(rmqtest.Context(t, 12*time.Second), t, c, req, OfRun(run), 2)
	if len(during) != 1 || during[0].LiteTopic != other {
		t.Fatalf("while the hot head is in flight got %v, want only the other lite topic's message", bodies(during))
	}
	if err := AckOne(t, c, group, during[0]); err != nil {
		t.Fatal(err)
	}
	// Defer the head: the hot lite topic stays blocked.
	h, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
		Group: group, Topic: topic, MessageID: head[0].MessageID, ReceiptHandle: head[0].ReceiptHandle, LiteTopic: hot, InvisibleDuration: MinInvisible,
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	back := Collect(rmqtest.Context(t, 30*time.Second), t, c, req, OfRun(run), 5)
	if got := bodies(back); fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("after deferring the head got %v, want [0 1 2 3 4]: the head first, then the rest in order", got)
	}
	if waited := time.Since(t0); waited < MinInvisible-time.Second {
		t.Errorf("deferred head back after %v, before its %v", waited, MinInvisible)
	}
	// Unlike a lone deferred message (scenario f: attempt 2), a deferred head
	// that comes back in one poll with the rest of its lite topic carries
	// delivery_attempt 1 again: the broker's count is not a reliable
	// deferral counter for lite topics.
	if back[0].MessageID != head[0].MessageID || back[0].DeliveryAttempt != 1 {
		t.Errorf("deferred head came back as %s attempt %d, want %s attempt 1", back[0].MessageID, back[0].DeliveryAttempt, head[0].MessageID)
	}
	_ = h
	for _, m := range back {
		if err := AckOne(t, c, group, m); err != nil {
			t.Error(err)
		}
	}
}

func bodies(ms []*client.ReceivedMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	return out
}

// SuspendAndDeliveryAttempt (f): ChangeInvisibleDuration with suspend=true
// still increments delivery_attempt on RocketMQ 5.5.0, exactly as without it.
func SuspendAndDeliveryAttempt(t *testing.T, e *Env) {
	const s = "f"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("f")
	SendLite(t, p, topic, run+"-suspend", "suspend")
	SendLite(t, p, topic, run+"-plain", "plain")
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 2)
	if len(got) != 2 {
		t.Fatalf("received %d of 2", len(got))
	}
	for _, m := range got {
		_, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: group, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle,
			LiteTopic: m.LiteTopic, InvisibleDuration: MinInvisible, Suspend: string(m.Body) == "suspend",
		})
		if err != nil {
			t.Fatalf("change invisible: %v", err)
		}
	}
	again := Collect(rmqtest.Context(t, 4*MinInvisible), t, c, LiteReq(s, 30*time.Second), OfRun(run), 2)
	if len(again) != 2 {
		t.Fatalf("%d of 2 deferred messages came back", len(again))
	}
	for _, m := range again {
		if m.DeliveryAttempt != 2 {
			t.Errorf("%s: attempt %d after one deferral, want 2", m.Body, m.DeliveryAttempt)
		}
		_ = AckOne(t, c, group, m)
	}
}

// MaxRetriesThenDLQ (g): after the group's max retries a normal message goes
// to %DLQ%<group> and is no longer delivered. A LITE message goes there too,
// but keeps its lite dispatch property, so the wildcard consumer receives it
// AGAIN, from topic %DLQ%<group>, with delivery_attempt back at 1. That
// delivery cannot be acked for good (see the assertions), so it keeps coming.
func MaxRetriesThenDLQ(t *testing.T, e *Env) {
	const s = "g" // groups with retry=1: a message is delivered twice
	deliveries := func(t *testing.T, c *client.Client, req client.ReceiveRequest, run string, n int) []*client.ReceivedMessage {
		var out []*client.ReceivedMessage
		for len(out) < n {
			got := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, req, OfRun(run), 1)
			if len(got) == 0 {
				break
			}
			t.Logf("delivery: attempt %d topic %s", got[0].DeliveryAttempt, got[0].Topic)
			out = append(out, got[0])
		}
		return out
	}
	t.Run("lite", func(t *testing.T) {
		t.Parallel()
		topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
		c := e.LiteConsumer(t, s)
		p := e.Producer(t, topic)
		run := rmqtest.Unique("g")
		id := SendLite(t, p, topic, run, "x")
		got := deliveries(t, c, LiteReq(s, MinInvisible), run, 3)
		if len(got) != 3 {
			t.Fatalf("got %d deliveries, want 3", len(got))
		}
		dlq := "%DLQ%" + group
		want := []struct {
			attempt int32
			topic   string
		}{{1, topic}, {2, topic}, {1, dlq}}
		for i, m := range got {
			if m.MessageID != id || m.LiteTopic != run || m.DeliveryAttempt != want[i].attempt || m.Topic != want[i].topic {
				t.Errorf("delivery %d: id %s lite %s attempt %d topic %s; want id %s lite %s attempt %d topic %s",
					i, m.MessageID, m.LiteTopic, m.DeliveryAttempt, m.Topic, id, run, want[i].attempt, want[i].topic)
			}
		}
		// That delivery cannot be acked for good: with its own topic the ack
		// fails; with the main topic it answers OK, yet the message returns.
		if err := AckOne(t, c, group, got[2]); Code(err) != client.CodeInternalServerError || !strings.Contains(err.Error(), "ack failed: status is abnormal") {
			t.Errorf("ack of the DLQ delivery with topic %s: %v, want INTERNAL_SERVER_ERROR \"ack failed: status is abnormal\"", got[2].Topic, err)
		}
		m := *got[2]
		m.Topic = topic
		if err := AckOne(t, c, group, &m); err != nil {
			t.Errorf("ack of the DLQ delivery with the main topic: %v, want OK", err)
		}
		back := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, LiteReq(s, MinInvisible), OfRun(run), 1)
		if len(back) != 1 || back[0].Topic != dlq {
			t.Fatalf("after acking the DLQ delivery got %d deliveries, want it back from %s", len(back), dlq)
		}
		t.Logf("back again: attempt %d topic %s", back[0].DeliveryAttempt, back[0].Topic)
		if back[0].DeliveryAttempt != 2 {
			t.Errorf("the DLQ delivery acked with the main topic came back with attempt %d, want 2", back[0].DeliveryAttempt)
		}
		_ = AckOne(t, c, group, back[0])
	})
	t.Run("normal", func(t *testing.T) {
		t.Parallel()
		topic, group := rmqtest.NormalTopic(s), rmqtest.NormalGroup(s)
		c := e.NormalConsumer(t, s)
		p := e.Producer(t, topic)
		run := rmqtest.Unique("g")
		SendNormal(t, p, topic, run, "x")
		got := deliveries(t, c, NormalReq(s, MinInvisible), run, 3)
		if len(got) != 2 || got[0].DeliveryAttempt != 1 || got[1].DeliveryAttempt != 2 {
			t.Fatalf("deliveries %d, want exactly attempts 1 and 2", len(got))
		}
		for _, m := range got {
			if m.Topic != topic {
				t.Errorf("delivered from %s, want %s", m.Topic, topic)
			}
		}
		qs, err := c.QueryRoute(rmqtest.Context(t, 5*time.Second), "%DLQ%"+group)
		if err != nil || len(qs) == 0 {
			t.Fatalf("DLQ topic route: %d queues, %v; want it created", len(qs), err)
		}
	})
}

// MixedBatchAck (h): one AckMessage with a valid, an already-acked, an expired
// and a garbage handle answers with one result per entry (the top-level
// status, MULTIPLE_RESULTS on 5.5.0, is not asserted): OK, OK (a second ack
// is not an error), INVALID_RECEIPT_HANDLE, and INTERNAL_SERVER_ERROR (the
// handle does not parse).
func MixedBatchAck(t *testing.T, e *Env) {
	const s = "h"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
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
	re := Collect(rmqtest.Context(t, 3*MinInvisible), t, c, LiteReq(s, 30*time.Second), func(m *client.ReceivedMessage) bool { return m.MessageID == by["expired"].MessageID }, 1)
	if len(re) != 1 {
		t.Fatal("expired message not redelivered")
	}
	entries := []client.AckEntry{Entry(by["valid"]), Entry(by["acked"]), Entry(by["expired"]),
		{MessageID: by["valid"].MessageID, ReceiptHandle: "garbage-handle", LiteTopic: by["valid"].LiteTopic}}
	res, err := c.Ack(rmqtest.Context(t, 10*time.Second), group, topic, entries)
	if err != nil {
		t.Fatalf("mixed ack: %v", err)
	}
	want := []client.Code{0, 0, client.CodeInvalidReceiptHandle, client.CodeInternalServerError}
	for i, r := range res {
		if Code(r.Err) != want[i] {
			t.Errorf("entry %d: %v, want code %v", i, r.Err, want[i])
		}
	}
	if len(res) > 2 && (res[2].Err == nil || !strings.Contains(res[2].Err.Error(), "receipt handle is expired")) {
		t.Errorf("expired entry: %v, want \"receipt handle is expired\"", res[2].Err)
	}
	_ = AckOne(t, c, group, re[0])
}

// Limits (i): a batch over 32 returns 32; invisible durations under 10 s or over
// 12 h are ILLEGAL_INVISIBLE_TIME; illegal lite topic names are
// ILLEGAL_LITE_TOPIC for the whole request; unknown groups and topics fail.
func Limits(t *testing.T, e *Env) {
	const s = "i"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("i")
	msgs := make([]*client.Message, 40)
	for i := range msgs {
		msgs[i] = &client.Message{Topic: topic, LiteTopic: fmt.Sprintf("%s-%02d", run, i), Body: []byte("x")}
	}
	if res, err := p.Send(rmqtest.Context(t, 20*time.Second), msgs...); err != nil || res[39].Err != nil {
		t.Fatalf("send: %v", err)
	}
	req := LiteReq(s, 30*time.Second)
	req.BatchSize = 64
	var all []*client.ReceivedMessage
	largest := 0
	ctx := rmqtest.Context(t, 30*time.Second)
	for len(all) < 40 && ctx.Err() == nil {
		msgs, err := c.Receive(ctx, req)
		if err != nil {
			t.Fatalf("receive batch 64: %v", err)
		}
		largest = max(largest, len(msgs))
		all = append(all, msgs...)
	}
	t.Logf("largest poll of 64: %d messages", largest)
	if largest > client.MaxBatchSize || largest < 2 {
		t.Errorf("largest poll of 64 returned %d messages, want 2..%d", largest, client.MaxBatchSize)
	}
	res, err := c.Ack(rmqtest.Context(t, 10*time.Second), group, topic, entries(all))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}

	for d, text := range map[time.Duration]string{5 * time.Second: "min is 10000", 9 * time.Second: "min is 10000", 12*time.Hour + time.Second: "max is 43200000"} {
		_, err := c.Receive(rmqtest.Context(t, 30*time.Second), LiteReq(s, d))
		if Code(err) != client.CodeIllegalInvisibleTime || !strings.Contains(err.Error(), text) {
			t.Errorf("receive with invisible %v: %v, want ILLEGAL_INVISIBLE_TIME %q", d, err, text)
		}
	}
	long := run + "-" + strings.Repeat("x", 64-len(run)-1) // 64 bytes: the longest name allowed
	if _, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: topic, LiteTopic: long, Body: []byte("x")}); err != nil {
		t.Errorf("send to a lite topic of 64 bytes: %v, want OK", err)
	} else if got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 1); len(got) != 1 || got[0].LiteTopic != long {
		t.Errorf("the message to a lite topic of 64 bytes was not delivered (%d)", len(got))
	} else if err := AckOne(t, c, group, got[0]); err != nil {
		t.Error(err)
	}
	if _, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: topic, Body: []byte("x")}); Code(err) != client.CodeMessagePropertyConflict {
		t.Errorf("send to a LITE topic with no lite topic: %v, want MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", err)
	}
	for _, lite := range []string{"bad topic!", "a.b", "ü", long + "x"} {
		_, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: topic, LiteTopic: lite, Body: []byte("x")})
		if Code(err) != client.CodeIllegalLiteTopic {
			t.Errorf("send to lite topic %q: %v, want ILLEGAL_LITE_TOPIC", lite, err)
		}
	}
	r := LiteReq(s, 30*time.Second)
	r.Group = "rmqflow-no-such-group"
	if _, err := c.Receive(rmqtest.Context(t, 30*time.Second), r); Code(err) != client.CodeConsumerGroupNotFound {
		t.Errorf("receive for an unknown group: %v, want CONSUMER_GROUP_NOT_FOUND", err)
	}
	u := e.Client(t)
	t0 := time.Now()
	_, err = u.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "rmqflow-no-such-group",
		Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "group not found") {
		t.Errorf("session for an unknown group: %v, want gRPC InvalidArgument \"group not found\"", err)
	} else if waited := time.Since(t0); waited > 5*time.Second {
		t.Errorf("session for an unknown group failed only after %v", waited)
	}
	if _, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: "rmqflow-no-such-topic", Body: []byte("x")}); Code(err) != client.CodeMessagePropertyConflict {
		t.Errorf("send to an unknown topic: %v, want MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", err)
	}
}

func entries(ms []*client.ReceivedMessage) []client.AckEntry {
	out := make([]client.AckEntry, len(ms))
	for i, m := range ms {
		out[i] = Entry(m)
	}
	return out
}

// AckOnlyClient (j): acking needs no Telemetry session and no lite
// subscription: a client that never opened a session acks fine. Changing
// invisibility does need a session that registered the client: a
// consumer's, or a producer's with a topic; without one (no session, or a
// producer's naming no topic) the proxy fails with INTERNAL_SERVER_ERROR.
func AckOnlyClient(t *testing.T, e *Env) {
	const s = "j"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("j")
	for _, k := range []string{"bare", "notopic", "producer", "nosync"} {
		SendLite(t, p, topic, run+"-"+k, k)
	}
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 4)
	if len(got) != 4 {
		t.Fatalf("received %d of 4", len(got))
	}
	for _, m := range got {
		var acker *client.Client
		switch string(m.Body) {
		case "bare":
			acker = e.Client(t)
		case "notopic":
			acker = e.Producer(t)
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
		h, err := acker.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: group, Topic: topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic, InvisibleDuration: 30 * time.Second})
		if string(m.Body) == "bare" || string(m.Body) == "notopic" {
			if Code(err) != client.CodeInternalServerError {
				t.Errorf("change-invisible by a %s client: %v, want INTERNAL_SERVER_ERROR", m.Body, err)
			}
			h = m.ReceiptHandle
		} else if err != nil {
			t.Errorf("change-invisible by a %s client: %v", m.Body, err)
		}
		if err := AckHandle(t, acker, group, m, h); err != nil {
			t.Errorf("ack by a %s client: %v", m.Body, err)
		}
	}
	Nothing(t, c, LiteReq(s, 30*time.Second), OfRun(run), MinInvisible+10*time.Second)
}
