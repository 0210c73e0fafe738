package rmqfake_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// A 30-minute invisible duration runs in milliseconds on the manual clock:
// the message stays in flight until the last millisecond, then comes back
// with attempt 2 and a new handle, and its old handle has expired.
func TestThirtyMinuteInvisibilityOnManualClock(t *testing.T) {
	t.Parallel()
	for _, lite := range []bool{false, true} {
		name := map[bool]string{false: "normal", true: "lite"}[lite]
		t.Run(name, func(t *testing.T) {
			t0 := time.Now()
			s, clk := start(t)
			p := producer(t, s)
			var c *client.Client
			var req client.ReceiveRequest
			group, topic := normalGroup, normalTopic
			if lite {
				c, req, group, topic = liteConsumer(t, s), liteReq(30*time.Minute), liteGroup, liteTopic
				send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "conv-1", Body: []byte("x")})
			} else {
				c, req = normalConsumer(t, s), normalReq(30*time.Minute)
				send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})
			}
			first := receiveNow(t, c, req)
			if len(first) != 1 || first[0].DeliveryAttempt != 1 {
				t.Fatalf("first delivery: %d messages, attempt %d", len(first), first[0].DeliveryAttempt)
			}
			counts := func() rmqfake.Counts { return s.Stats().Groups[group].Counts }
			clk.Advance(30*time.Minute - time.Millisecond)
			if c := counts(); c.InFlight != 1 || c.Backlog != 0 {
				t.Fatalf("1 ms before the end: %+v, want 1 in flight", c)
			}
			clk.Advance(time.Millisecond)
			if c := counts(); c.InFlight != 0 || c.Backlog != 1 {
				t.Fatalf("at the end: %+v, want it back in the backlog", c)
			}
			again := receiveNow(t, c, req)
			m := again[0]
			if m.MessageID != first[0].MessageID || m.DeliveryAttempt != 2 || m.ReceiptHandle == first[0].ReceiptHandle {
				t.Errorf("redelivery: id %s attempt %d (same handle: %v); want id %s attempt 2 and a new handle",
					m.MessageID, m.DeliveryAttempt, m.ReceiptHandle == first[0].ReceiptHandle, first[0].MessageID)
			}
			res, err := c.Ack(ctxT(t), group, topic, []client.AckEntry{entry(first[0]), entry(m)})
			must(t, err)
			if !errors.Is(res[0].Err, client.ErrInvalidReceiptHandle) || res[1].Err != nil {
				t.Errorf("acks of the expired and the new handle: %v, %v; want INVALID_RECEIPT_HANDLE, OK", res[0].Err, res[1].Err)
			}
			if c := counts(); c.Acked != 1 || c.InFlight != 0 || c.Backlog != 0 {
				t.Errorf("after the ack: %+v", c)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("took %v of real time", d)
			}
		})
	}
}

// A long poll parks until a message arrives, and ends when its window passes
// on the server's clock; it does not spin meanwhile.
func TestLongPollFollowsTheClock(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	c := normalConsumer(t, s)
	p := producer(t, s)

	res := receiveAsync(c, normalReq(time.Minute))
	waitPollers(t, s, 1)
	id := send(t, p, &client.Message{Topic: normalTopic, Body: []byte("wake")})[0]
	r := <-res
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].MessageID != id {
		t.Fatalf("parked poll after a send: %d messages, %v", len(r.msgs), r.err)
	}
	ackAll(t, c, normalGroup, normalTopic, r.msgs)

	res = receiveAsync(c, normalReq(time.Minute))
	waitPollers(t, s, 1)
	clk.Advance(5*time.Second - time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("poll returned before its 5 s window: %v", r)
	default:
	}
	if n := s.Stats().Pollers; n != 1 {
		t.Fatalf("%d parked polls, want 1", n)
	}
	clk.Advance(time.Millisecond)
	if r := <-res; r.err != nil || len(r.msgs) != 0 {
		t.Fatalf("empty poll: %d messages, %v", len(r.msgs), r.err)
	}
}

// Deferring the head of a lite topic by 30 minutes pauses that lite topic
// only; when the deferral ends the head comes back first, with the rest.
func TestLiteDeferralPausesOneLiteTopic(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	c := liteConsumer(t, s)
	p := producer(t, s)
	for _, b := range []string{"h0", "h1", "h2"} {
		send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "hot", Body: []byte(b)})
	}
	one := liteReq(time.Minute)
	one.BatchSize = 1
	head := receiveNow(t, c, one)[0]
	_, err := c.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: liteGroup, Topic: liteTopic,
		MessageID: head.MessageID, ReceiptHandle: head.ReceiptHandle, LiteTopic: "hot", InvisibleDuration: 30 * time.Minute})
	must(t, err)
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "cold", Body: []byte("c0")})
	clk.Advance(29 * time.Minute)
	got := receiveNow(t, c, liteReq(time.Minute))
	if len(got) != 1 || got[0].LiteTopic != "cold" {
		t.Fatalf("while hot is deferred got %v, want only cold", bodies(got))
	}
	ackAll(t, c, liteGroup, liteTopic, got)
	if st := s.Stats().Topics[liteTopic].LiteTopics["hot"]; st.InFlight != 1 || st.Backlog != 2 {
		t.Fatalf("hot while deferred: %+v, want 1 in flight and 2 waiting", st.Counts)
	}
	clk.Advance(time.Minute)
	back := receiveNow(t, c, liteReq(time.Minute))
	if fmtSlice(bodies(back)) != "[h0 h1 h2]" || back[0].DeliveryAttempt != 1 {
		t.Fatalf("after the deferral got %v (head attempt %d), want [h0 h1 h2] with attempt 1", bodies(back), back[0].DeliveryAttempt)
	}
	ackAll(t, c, liteGroup, liteTopic, back)
}

// After RetryMax redeliveries a normal message goes to %DLQ%<group> and is
// not delivered again.
func TestMaxRetriesThenDLQOnManualClock(t *testing.T) {
	t.Parallel()
	s, clk := start(t) // normalGroup has RetryMax 2: three deliveries
	c := normalConsumer(t, s)
	p := producer(t, s)
	id := send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})[0]
	for attempt := int32(1); attempt <= 3; attempt++ {
		m := receiveNow(t, c, normalReq(10*time.Second))[0]
		if m.MessageID != id || m.DeliveryAttempt != attempt {
			t.Fatalf("delivery %d: id %s attempt %d", attempt, m.MessageID, m.DeliveryAttempt)
		}
		clk.Advance(10 * time.Second)
	}
	// The next pop finds it past its attempts and dead-letters it, as the
	// proxy does; the poll then waits out its window.
	res := receiveAsync(c, normalReq(10*time.Second))
	waitPollers(t, s, 1)
	clk.Advance(5 * time.Second)
	if r := <-res; r.err != nil || len(r.msgs) != 0 {
		t.Fatalf("fourth poll: %d messages, %v; want none", len(r.msgs), r.err)
	}
	st := s.Stats()
	if g := st.Groups[normalGroup]; g.DeadLettered != 1 || g.Backlog != 0 || g.InFlight != 0 {
		t.Fatalf("group after 3 deliveries: %+v, want 1 dead-lettered and nothing left", g.Counts)
	}
	if d := st.Topics["%DLQ%"+normalGroup]; d.Stored != 1 {
		t.Fatalf("DLQ topic holds %d messages, want 1", d.Stored)
	}
	if qs, err := c.QueryRoute(ctxT(t), "%DLQ%"+normalGroup); err != nil || len(qs) != 1 {
		t.Fatalf("DLQ route: %d queues, %v", len(qs), err)
	}
}

// A delayed message becomes visible at its delivery time on the server's
// clock.
func TestDelayedMessage(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-delay", rmqfake.TopicDelay))
	c := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: normalGroup,
		Subscriptions: []client.Subscription{{Topic: "t-delay"}}})
	p := producer(t, s)
	at := clk.Now().Add(time.Hour)
	send(t, p, &client.Message{Topic: "t-delay", DeliveryTime: at, Body: []byte("later")})
	if _, err := p.Send(ctxT(t), &client.Message{Topic: normalTopic, DeliveryTime: at, Body: []byte("x")}); client.Code(codeOf(err)) != client.CodeMessagePropertyConflict {
		t.Errorf("delayed message to a normal topic: %v, want MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", err)
	}
	if st := s.Stats().Topics["t-delay"]; st.Scheduled != 1 {
		t.Fatalf("scheduled %d, want 1", st.Scheduled)
	}
	clk.Advance(time.Hour)
	m := receiveNow(t, c, client.ReceiveRequest{Group: normalGroup, Topic: "t-delay", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})[0]
	if string(m.Body) != "later" || !m.DeliveryTime.Equal(at.Truncate(time.Millisecond)) {
		t.Errorf("got %q with delivery time %v, want later at %v", m.Body, m.DeliveryTime, at)
	}
}

func bodies(ms []*client.ReceivedMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	return out
}

func codeOf(err error) client.Code {
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return -1
}

// ChangeInvisibleDuration to 0 releases a message at once, without the
// clock moving (scenario l), on normal topics too.
func TestReleaseWithZero(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := normalConsumer(t, s)
	p := producer(t, s)
	send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})
	m := receiveNow(t, c, normalReq(30*time.Minute))[0]
	if _, err := c.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: normalGroup, Topic: normalTopic,
		MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	again := receiveNow(t, c, normalReq(30*time.Minute))[0]
	if again.MessageID != m.MessageID || again.DeliveryAttempt != 2 {
		t.Fatalf("released message: %s attempt %d", again.MessageID, again.DeliveryAttempt)
	}
	ackAll(t, c, normalGroup, normalTopic, []*client.ReceivedMessage{again})
	if g := s.Stats().Groups[normalGroup]; g.InFlight != 0 || g.Backlog != 0 || g.Acked != 1 {
		t.Errorf("after the ack: %+v", g.Counts)
	}
}
