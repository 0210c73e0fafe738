package rmqfake_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestQueryAssignment answers as the 5.5.0 proxy does (notes/research/
// push-consumers.md §1): a FIFO group gets one assignment per queue; a
// normal group, a lite group and an unknown group one assignment with id -1;
// the queue carries the request's topic and endpoints, READ_WRITE, broker id
// 0, no accepted message types, the same on every call; an unknown topic is
// TOPIC_NOT_FOUND.
func TestQueryAssignment(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	must(t, s.CreateTopic("t-fifo4", rmqfake.TopicFIFO, rmqfake.Queues(4)))
	must(t, s.CreateGroup("g-fifo4", rmqfake.FIFO()))
	c := newClient(t, s, client.Config{})
	stub := v2.NewMessagingServiceClient(c.Conn())
	eps := &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: "10.1.2.3", Port: 9876}}}
	ask := func(topic, group string) *v2.QueryAssignmentResponse {
		t.Helper()
		resp, err := stub.QueryAssignment(c.OutgoingContext(ctxT(t)), &v2.QueryAssignmentRequest{
			Topic: &v2.Resource{Name: topic}, Group: &v2.Resource{Name: group}, Endpoints: eps})
		must(t, err)
		return resp
	}
	for _, tc := range []struct {
		topic, group string
		ids          []int32
	}{
		{"t-fifo4", "g-fifo4", []int32{0, 1, 2, 3}},
		{"t-fifo4", normalGroup, []int32{-1}},
		{normalTopic, normalGroup, []int32{-1}},
		{liteTopic, liteGroup, []int32{-1}},
		{normalTopic, "no-such-group", []int32{-1}},
	} {
		resp := ask(tc.topic, tc.group)
		if resp.GetStatus().GetCode() != v2.Code_OK || len(resp.GetAssignments()) != len(tc.ids) {
			t.Fatalf("%s/%s: %v with %d assignments, want OK with %d", tc.topic, tc.group, resp.GetStatus(), len(resp.GetAssignments()), len(tc.ids))
		}
		for i, a := range resp.GetAssignments() {
			mq := a.GetMessageQueue()
			if mq.GetId() != tc.ids[i] || mq.GetTopic().GetName() != tc.topic || mq.GetPermission() != v2.Permission_READ_WRITE ||
				mq.GetBroker().GetId() != 0 || mq.GetBroker().GetEndpoints().GetAddresses()[0].GetHost() != "10.1.2.3" || len(mq.GetAcceptMessageTypes()) != 0 {
				t.Errorf("%s/%s assignment %d: %v", tc.topic, tc.group, i, mq)
			}
		}
		if again := ask(tc.topic, tc.group); again.String() != resp.String() {
			t.Errorf("%s/%s: a second call answered differently:\n%v\n%v", tc.topic, tc.group, resp, again)
		}
	}
	if resp := ask("no-such-topic", normalGroup); resp.GetStatus().GetCode() != v2.Code_TOPIC_NOT_FOUND {
		t.Errorf("unknown topic: %v, want TOPIC_NOT_FOUND", resp.GetStatus())
	}
}

// TestAutoRenewedReceive: a receive with auto_renew (what push consumers
// send) keeps its messages invisible past the 60 s the proxy pops with, as
// the proxy's renewal does, and the receive's handle still acks them; when
// the client terminates, the messages it still holds come back a second
// later with one more attempt.
func TestAutoRenewedReceive(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	p := producer(t, s)
	for _, b := range []string{"acked", "held"} {
		send(t, p, &client.Message{Topic: normalTopic, Body: []byte(b)})
	}
	c := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: normalGroup, Subscriptions: []client.Subscription{{Topic: normalTopic}}})
	req := normalReq(10 * time.Second) // ignored with AutoRenew, as by the proxy
	req.AutoRenew = true
	by := map[string]*client.ReceivedMessage{}
	for len(by) < 2 {
		for _, m := range receiveNow(t, c, req) {
			by[string(m.Body)] = m
		}
	}
	clk.Advance(2 * time.Hour)
	if g := s.Stats().Groups[normalGroup]; g.InFlight != 2 {
		t.Fatalf("2 h after an auto-renewed receive: %+v, want both in flight", g.Counts)
	}
	ackAll(t, c, normalGroup, normalTopic, []*client.ReceivedMessage{by["acked"]})
	if err := c.NotifyClientTermination(ctxT(t), normalGroup); err != nil {
		t.Fatal(err)
	}
	if g := s.Stats().Groups[normalGroup]; g.InFlight != 1 || g.Acked != 1 {
		t.Fatalf("right after the termination: %+v, want the held message in flight for 1 s more", g.Counts)
	}
	clk.Advance(time.Second)
	c2 := normalConsumer(t, s)
	back := receiveNow(t, c2, normalReq(10*time.Second))
	if len(back) != 1 || string(back[0].Body) != "held" || back[0].DeliveryAttempt != 2 {
		t.Fatalf("after the termination: %v (attempt %d), want [held] on attempt 2", bodies(back), back[0].DeliveryAttempt)
	}
	ackAll(t, c2, normalGroup, normalTopic, back)
}

// TestForwardFIFOToDLQ: a FIFO push consumer whose own retries are used up
// forwards the message to the DLQ with its FIFO handle; the message is
// dead-lettered and acked, and the queue moves on to the next message.
func TestForwardFIFOToDLQ(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	must(t, s.CreateTopic("t-fifo", rmqfake.TopicFIFO, rmqfake.Queues(1)))
	must(t, s.CreateGroup("g-fifo", rmqfake.FIFO()))
	p := producer(t, s)
	for _, b := range []string{"1", "2"} {
		send(t, p, &client.Message{Topic: "t-fifo", MessageGroup: "o", Body: []byte(b)})
	}
	c := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-fifo", Subscriptions: []client.Subscription{{Topic: "t-fifo"}}})
	req := client.ReceiveRequest{Group: "g-fifo", Topic: "t-fifo", BatchSize: 1, AutoRenew: true, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second}
	first := receiveNow(t, c, req)
	if err := c.ForwardToDeadLetterQueue(ctxT(t), client.DeadLetterRequest{Group: "g-fifo", Topic: "t-fifo",
		MessageID: first[0].MessageID, ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatalf("forward a FIFO message to the DLQ: %v", err)
	}
	if g := s.Stats().Groups["g-fifo"]; g.DeadLettered != 1 || g.Acked != 1 {
		t.Errorf("after the forward: %+v, want 1 dead-lettered and acked", g.Counts)
	}
	next := receiveNow(t, c, req)
	if string(next[0].Body) != "2" {
		t.Errorf("after the forward the queue delivered %q, want 2", next[0].Body)
	}
}

// TestAutoRenewedLiteNackWithoutLiteTopic: the official Java 5.2.0
// LitePushConsumer of a lite group that is not FIFO nacks a failed message
// with ChangeInvisibleDuration (1 s) naming no lite topic. The 5.5.0 broker
// does not apply that to the lite topic (conformance scenario y) and the
// proxy stops renewing the message, so it comes back when the pop's 60 s
// end (the Java flow lite-push-retry on 5.5.0: 59.7 to 60.2 s after the
// failure), also when the nack comes after the proxy's first renewal (at
// 50 s), which the 5.5.0 proxy sends without the lite topic too. An ack
// without the lite topic is not applied either, and a message neither acked
// nor changed comes back at 60 s too: the proxy's renewals name no lite
// topic (conformance scenario z: 60.0 to 60.2 s on 5.5.0). Before the fixes
// the messages stayed invisible for rmqfake's whole 3 h.
func TestAutoRenewedLiteNackWithoutLiteTopic(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	p := producer(t, s)
	c := newClient(t, s, client.Config{})
	sess, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: exactGroup,
		Subscriptions: []client.Subscription{{Topic: liteTopic}}})
	must(t, err)
	for _, lt := range []string{"early", "late"} {
		must(t, sess.SubscribeLite(ctxT(t), liteTopic, lt, nil))
	}
	for _, b := range []string{"nack", "nack2", "ack"} {
		send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "early", Body: []byte(b)})
	}
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "late", Body: []byte("late")})
	must(t, sess.SubscribeLite(ctxT(t), liteTopic, "later", nil))
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "later", Body: []byte("later")})
	req := client.ReceiveRequest{Group: exactGroup, Topic: liteTopic, Lite: true, AutoRenew: true, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second}
	by := map[string]*client.ReceivedMessage{}
	for len(by) < 5 {
		for _, m := range receiveNow(t, c, req) {
			by[string(m.Body)] = m
		}
	}
	nack := func(m *client.ReceivedMessage) {
		t.Helper()
		if _, err := c.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: exactGroup, Topic: m.Topic,
			MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, InvisibleDuration: time.Second}); err != nil {
			t.Fatalf("nack %s without its lite topic: %v", m.Body, err)
		}
	}
	nack(by["nack"])
	nack(by["nack2"])
	res, err := c.Ack(ctxT(t), exactGroup, liteTopic, []client.AckEntry{{MessageID: by["ack"].MessageID, ReceiptHandle: by["ack"].ReceiptHandle}})
	must(t, err)
	must(t, res[0].Err)
	clk.Advance(55 * time.Second)
	nack(by["late"]) // after the proxy's first renewal, at 50 s
	inFlight := func(when string, want int64) {
		t.Helper()
		if g := s.Stats().Groups[exactGroup]; g.InFlight != want {
			t.Fatalf("%s: %+v, want %d in flight", when, g.Counts, want)
		}
	}
	inFlight("55 s after the pop", 5)
	clk.Advance(4*time.Second + 999*time.Millisecond)
	inFlight("just before 60 s", 5)
	clk.Advance(time.Millisecond)
	inFlight("at 60 s", 0)
	var back []*client.ReceivedMessage
	for len(back) < 5 {
		back = append(back, receiveNow(t, c, req)...)
	}
	got := bodies(back)
	slices.Sort(got)
	if fmt.Sprint(got) != "[ack late later nack nack2]" {
		t.Fatalf("back at 60 s: %v, want all five (the ack without the lite topic did not take, the renewals do not reach a lite topic)", got)
	}
	for _, m := range back {
		if m.DeliveryAttempt != 2 {
			t.Errorf("%s back with attempt %d, want 2", m.Body, m.DeliveryAttempt)
		}
	}
	ackAll(t, c, exactGroup, liteTopic, back)
	inFlight("after the acks", 0)
}
