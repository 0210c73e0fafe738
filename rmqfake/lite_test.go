package rmqfake_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// An exact lite group receives only the lite topics its client subscribed,
// from where an OffsetOption says.
func TestExactLiteSubscription(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	c := newClient(t, s, client.Config{})
	sess, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: exactGroup,
		Subscriptions: []client.Subscription{{Topic: liteTopic}}})
	must(t, err)
	req := client.ReceiveRequest{Group: exactGroup, Topic: liteTopic, Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second}
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "a", Body: []byte("a1")})
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "b", Body: []byte("b1")})
	must(t, sess.SubscribeLite(ctxT(t), liteTopic, "a", nil))
	got := receiveNow(t, c, req)
	if fmtSlice(bodies(got)) != "[a1]" {
		t.Fatalf("subscribed to a, got %v", bodies(got))
	}
	ackAll(t, c, exactGroup, liteTopic, got)

	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "b", Body: []byte("b2")})
	maxPolicy := client.OffsetMax
	must(t, sess.SubscribeLite(ctxT(t), liteTopic, "b", &client.OffsetOption{Policy: &maxPolicy}))
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "b", Body: []byte("b3")})
	got = receiveNow(t, c, req)
	if fmtSlice(bodies(got)) != "[b3]" {
		t.Fatalf("subscribed to b from MAX, got %v, want only b3", bodies(got))
	}
	ackAll(t, c, exactGroup, liteTopic, got)

	minPolicy := client.OffsetMin
	must(t, sess.SubscribeLite(ctxT(t), liteTopic, "b", &client.OffsetOption{Policy: &minPolicy}))
	got = receiveNow(t, c, req)
	if fmtSlice(bodies(got)) != "[b1 b2 b3]" {
		t.Fatalf("b from MIN: %v", bodies(got))
	}
	ackAll(t, c, exactGroup, liteTopic, got)

	must(t, sess.UnsubscribeLite(ctxT(t), liteTopic, "a"))
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "a", Body: []byte("a2")})
	if st := s.Stats().Groups[exactGroup].LiteTopics["a"]; st.Backlog != 1 {
		t.Fatalf("a after unsubscribing: %+v, want its message waiting", st)
	}

	// A wildcard group refuses PARTIAL_ADD, as 5.5.0 does.
	err = c.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: liteTopic, Group: liteGroup, LiteTopics: []string{"a"}})
	if codeOf(err) != client.CodeInternalServerError {
		t.Errorf("PARTIAL_ADD on a wildcard group: %v, want INTERNAL_SERVER_ERROR", err)
	}
	err = c.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: liteTopic, Group: exactGroup, LiteTopics: []string{"bad name!"}})
	if !errors.Is(err, client.ErrIllegalLiteTopic) {
		t.Errorf("PARTIAL_ADD of an illegal name: %v", err)
	}
}

// A wildcard client receives only after its COMPLETE_ADD, and a backlog
// that built up before it reaches it only with the broker's full dispatch
// (5 to 15 s) unless FastLiteDispatch is set.
func TestWildcardNeedsSyncAndFullDispatch(t *testing.T) {
	t.Parallel()
	clk := rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := rmqfake.NewForTest(t, rmqfake.WithClock(clk))
	must(t, s.CreateTopic(liteTopic, rmqfake.TopicLite))
	must(t, s.CreateGroup(liteGroup, rmqfake.LiteBind(liteTopic), rmqfake.Wildcard()))
	p := producer(t, s)
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "early", Body: []byte("backlog")})
	c := liteConsumer(t, s)
	res := receiveAsync(c, liteReq(time.Minute))
	waitPollers(t, s, 1)
	clk.Advance(5 * time.Second) // the poll's window: the backlog is not dispatched yet
	if r := <-res; r.err != nil || len(r.msgs) != 0 {
		t.Fatalf("before the full dispatch: %v, %v", bodies(r.msgs), r.err)
	}
	clk.Advance(15 * time.Second)
	got := receiveNow(t, c, liteReq(time.Minute))
	if fmtSlice(bodies(got)) != "[backlog]" {
		t.Fatalf("after the full dispatch: %v", bodies(got))
	}
	ackAll(t, c, liteGroup, liteTopic, got)

	// Without a sync, a lite session of the wildcard group gets nothing.
	nosync := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: liteGroup, Subscriptions: []client.Subscription{{Topic: liteTopic}}})
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "late", Body: []byte("late")})
	res = receiveAsync(nosync, liteReq(time.Minute))
	waitPollers(t, s, 1)
	clk.Advance(5 * time.Second)
	if r := <-res; r.err != nil || len(r.msgs) != 0 {
		t.Fatalf("client without COMPLETE_ADD got %v, %v", bodies(r.msgs), r.err)
	}
	got = receiveNow(t, c, liteReq(time.Minute))
	if fmtSlice(bodies(got)) != "[late]" {
		t.Fatalf("synced client: %v", bodies(got))
	}
}

// The lite quirks of docs/broker-semantics.md, on the manual clock: the old
// handle acks after ChangeInvisibleDuration (d); a mixed ack batch (h); a
// batch send of lite messages is never delivered (k); and a lite message past
// its retries comes back from %DLQ%<group> and cannot be acked for good (g).
func TestLiteQuirks(t *testing.T) {
	t.Parallel()
	s, clk := start(t) // liteGroup: RetryMax 1
	p := producer(t, s)
	c := liteConsumer(t, s)

	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "d", Body: []byte("d")})
	m := receiveNow(t, c, liteReq(time.Minute))[0]
	nh, err := c.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: liteGroup, Topic: liteTopic,
		MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: "d", InvisibleDuration: 10 * time.Second})
	must(t, err)
	if nh == m.ReceiptHandle {
		t.Fatal("ChangeInvisibleDuration returned the same handle")
	}
	res, err := c.Ack(ctxT(t), liteGroup, liteTopic, []client.AckEntry{entry(m), {MessageID: m.MessageID, ReceiptHandle: nh, LiteTopic: "d"},
		{MessageID: m.MessageID, ReceiptHandle: "garbage-handle", LiteTopic: "d"}})
	must(t, err)
	if res[0].Err != nil || res[1].Err != nil || codeOf(res[2].Err) != client.CodeInternalServerError {
		t.Fatalf("old handle, new handle, garbage: %v / %v / %v", res[0].Err, res[1].Err, res[2].Err)
	}
	clk.Advance(time.Minute)
	if st := s.Stats().Groups[liteGroup]; st.Backlog != 0 || st.Acked != 1 {
		t.Fatalf("after acking with the old handle: %+v", st.Counts)
	}

	// (g) attempts 1 and 2 from the main topic, then from %DLQ% with attempt 1.
	id := send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "g", Body: []byte("g")})[0]
	dlq := "%DLQ%" + liteGroup
	var seen []string
	var last *client.ReceivedMessage
	for i := 0; i < 3; i++ {
		last = receiveNow(t, c, liteReq(10*time.Second))[0]
		seen = append(seen, last.Topic+"#"+string(rune('0'+last.DeliveryAttempt)))
		if last.MessageID != id {
			t.Fatalf("delivery %d: id %s, want %s", i, last.MessageID, id)
		}
		if i < 2 {
			clk.Advance(10 * time.Second)
		}
	}
	if want := "[" + liteTopic + "#1 " + liteTopic + "#2 " + dlq + "#1]"; fmtSlice(seen) != want {
		t.Fatalf("deliveries %v, want %s", seen, want)
	}
	if err := ackOneErr(t, c, last.Topic, last); codeOf(err) != client.CodeInternalServerError {
		t.Errorf("ack naming %s: %v, want INTERNAL_SERVER_ERROR", dlq, err)
	}
	if err := ackOneErr(t, c, liteTopic, last); err != nil {
		t.Errorf("ack naming the main topic: %v, want OK", err)
	}
	clk.Advance(10 * time.Second)
	back := receiveNow(t, c, liteReq(time.Minute))[0]
	if back.Topic != dlq || back.DeliveryAttempt != 2 {
		t.Errorf("after the 'ack': topic %s attempt %d, want it back from %s with attempt 2", back.Topic, back.DeliveryAttempt, dlq)
	}
	if d := s.Stats().Groups[liteGroup].DeadLettered; d != 1 {
		t.Errorf("dead-lettered %d, want 1", d)
	}
}

func ackOneErr(t *testing.T, c *client.Client, topic string, m *client.ReceivedMessage) error {
	t.Helper()
	res, err := c.Ack(ctxT(t), liteGroup, topic, []client.AckEntry{entry(m)})
	if err != nil {
		return err
	}
	return res[0].Err
}

// A FIFO group consumes each queue in order, one batch in flight per queue.
func TestFIFOGroup(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-fifo", rmqfake.TopicFIFO, rmqfake.Queues(1)))
	must(t, s.CreateGroup("g-fifo", rmqfake.FIFO()))
	p := producer(t, s)
	for _, b := range []string{"1", "2", "3"} {
		send(t, p, &client.Message{Topic: "t-fifo", MessageGroup: "order-7", Body: []byte(b)})
	}
	c := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-fifo", Subscriptions: []client.Subscription{{Topic: "t-fifo"}}})
	req := client.ReceiveRequest{Group: "g-fifo", Topic: "t-fifo", BatchSize: 1, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second}
	first := receiveNow(t, c, req)
	if string(first[0].Body) != "1" || first[0].MessageGroup != "order-7" {
		t.Fatalf("first: %q group %q", first[0].Body, first[0].MessageGroup)
	}
	if g := s.Stats().Groups["g-fifo"]; g.InFlight != 1 || g.Backlog != 2 {
		t.Fatalf("while 1 is in flight: %+v", g.Counts)
	}
	clk.Advance(10 * time.Second) // not acked: it comes back first
	again := receiveNow(t, c, req)
	if string(again[0].Body) != "1" || again[0].DeliveryAttempt != 2 {
		t.Fatalf("after expiry: %q attempt %d, want 1 attempt 2", again[0].Body, again[0].DeliveryAttempt)
	}
	ackAll(t, c, "g-fifo", "t-fifo", again)
	req.BatchSize = 32
	rest := receiveNow(t, c, req)
	if fmtSlice(bodies(rest)) != "[2 3]" {
		t.Fatalf("rest: %v", bodies(rest))
	}
	ackAll(t, c, "g-fifo", "t-fifo", rest)
}

// A lite topic dropped while idle keeps its exact subscribers when it comes
// back: a wildcard group consuming the same main topic does not free their
// messages.
func TestExactSubscriberSurvivesIdleLiteTopic(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	wild := liteConsumer(t, s)
	exact := newClient(t, s, client.Config{})
	sess, err := exact.OpenSession(ctxT(t), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: exactGroup,
		Subscriptions: []client.Subscription{{Topic: liteTopic}}})
	must(t, err)
	must(t, sess.SubscribeLite(ctxT(t), liteTopic, "shared", nil))
	req := client.ReceiveRequest{Group: exactGroup, Topic: liteTopic, Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second}
	for round, body := range []string{"first", "second"} {
		send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "shared", Body: []byte(body)})
		w := receiveNow(t, wild, liteReq(time.Minute))
		ackAll(t, wild, liteGroup, liteTopic, w)
		e := receiveNow(t, exact, req)
		if fmtSlice(bodies(e)) != "["+body+"]" {
			t.Fatalf("round %d: exact subscriber got %v, want [%s]", round, bodies(e), body)
		}
		ackAll(t, exact, exactGroup, liteTopic, e)
		if n := len(s.Stats().Topics[liteTopic].LiteTopics); n != 0 {
			t.Fatalf("round %d: %d lite topics held after both groups acked", round, n)
		}
	}
}
