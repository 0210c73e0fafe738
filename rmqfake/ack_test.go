package rmqfake_test

import (
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
)

// One AckMessage with a valid, an already-acked, an expired and a garbage
// handle on a normal topic answers MULTIPLE_RESULTS with one result each
// (scenario h); an ack naming an unknown group answers OK, as the broker does,
// and acks nothing (scenario p): the valid entry's ack after it still
// finds the message in flight.
func TestMixedAckNormal(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	p := producer(t, s)
	c := normalConsumer(t, s)
	for _, b := range []string{"valid", "acked", "expired"} {
		send(t, p, &client.Message{Topic: normalTopic, Body: []byte(b)})
	}
	by := map[string]*client.ReceivedMessage{}
	for len(by) < 3 {
		for _, m := range receiveNow(t, c, normalReq(10*time.Second)) {
			by[string(m.Body)] = m
		}
	}
	for _, k := range []string{"valid", "acked"} {
		h, err := c.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: normalGroup, Topic: normalTopic,
			MessageID: by[k].MessageID, ReceiptHandle: by[k].ReceiptHandle, InvisibleDuration: time.Minute})
		must(t, err)
		by[k].ReceiptHandle = h
	}
	ackAll(t, c, normalGroup, normalTopic, []*client.ReceivedMessage{by["acked"]})
	clk.Advance(10 * time.Second) // "expired" comes back
	again := receiveNow(t, c, normalReq(time.Minute))

	res, err := c.Ack(ctxT(t), "no-such-group", normalTopic, []client.AckEntry{entry(by["valid"])})
	must(t, err)
	if res[0].Err != nil {
		t.Errorf("ack naming an unknown group: %v, want OK", res[0].Err)
	}
	if g := s.Stats().Groups[normalGroup]; g.Acked != 1 || g.InFlight != 2 {
		t.Errorf("after the unknown group's ack: %+v, want 1 acked, 2 in flight", g.Counts)
	}
	raw, err := v2.NewMessagingServiceClient(c.Conn()).AckMessage(c.OutgoingContext(ctxT(t)), &v2.AckMessageRequest{
		Group: &v2.Resource{Name: normalGroup}, Topic: &v2.Resource{Name: normalTopic},
		Entries: []*v2.AckMessageEntry{
			{MessageId: by["valid"].MessageID, ReceiptHandle: by["valid"].ReceiptHandle},
			{MessageId: by["acked"].MessageID, ReceiptHandle: by["acked"].ReceiptHandle},
			{MessageId: by["expired"].MessageID, ReceiptHandle: by["expired"].ReceiptHandle},
			{MessageId: by["valid"].MessageID, ReceiptHandle: "garbage-handle"},
		}})
	must(t, err)
	want := []v2.Code{v2.Code_OK, v2.Code_OK, v2.Code_INVALID_RECEIPT_HANDLE, v2.Code_INTERNAL_SERVER_ERROR}
	if raw.GetStatus().GetCode() != v2.Code_MULTIPLE_RESULTS || len(raw.GetEntries()) != 4 {
		t.Fatalf("mixed ack: %v with %d entries", raw.GetStatus(), len(raw.GetEntries()))
	}
	for i, e := range raw.GetEntries() {
		if e.GetStatus().GetCode() != want[i] {
			t.Errorf("entry %d: %v, want %v", i, e.GetStatus(), want[i])
		}
	}
	ackAll(t, c, normalGroup, normalTopic, again)
	if g := s.Stats().Groups[normalGroup]; g.Acked != 3 || g.InFlight != 0 {
		t.Errorf("after the acks: %+v", g.Counts)
	}
	res, err = c.Ack(ctxT(t), normalGroup, normalTopic, nil)
	if err != nil || res != nil {
		t.Errorf("empty ack through the client: %v %v", res, err)
	}
	empty, err := v2.NewMessagingServiceClient(c.Conn()).AckMessage(c.OutgoingContext(ctxT(t)), &v2.AckMessageRequest{
		Group: &v2.Resource{Name: normalGroup}, Topic: &v2.Resource{Name: normalTopic}})
	if err != nil || empty.GetStatus().GetCode() != v2.Code_INTERNAL_SERVER_ERROR {
		t.Errorf("raw empty ack: %v %v", empty.GetStatus(), err)
	}
}
