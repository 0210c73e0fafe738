package rmqfake_test

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestDLQCopyAttempts: a dead-lettered copy carries the reconsume times of
// the message it was made from plus one, as the 5.5.0 broker's send-back
// makes it (AbstractSendMessageProcessor: reconsumeTimes of the stored
// message + 1), so a consumer of %DLQ%<group> sees delivery attempt
// reconsume + 2. Measured with the official Java client 5.2.0 on RocketMQ
// 5.5.0 (officialclient_test TestOfficialJavaFlows/dlq): a normal message
// dead-lettered by the proxy after 2 attempts (group retry=1) is read from the
// DLQ with attempt 4; a FIFO message the client forwards after its own 2
// attempts, with attempt 2. rmqfake gave both attempt 1.
func TestDLQCopyAttempts(t *testing.T) {
	t.Parallel()
	s, clk := start(t) // normalGroup has RetryMax 2: three deliveries
	must(t, s.CreateGroup("g-dlq-reader"))
	c := normalConsumer(t, s)
	p := producer(t, s)
	id := send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})[0]
	for range 3 {
		receiveNow(t, c, normalReq(10*time.Second))
		clk.Advance(10 * time.Second)
	}
	res := receiveAsync(c, normalReq(10*time.Second)) // dead-letters it
	waitPollers(t, s, 1)
	clk.Advance(5 * time.Second)
	if r := <-res; r.err != nil || len(r.msgs) != 0 {
		t.Fatalf("fourth poll: %d messages, %v; want none", len(r.msgs), r.err)
	}
	// Its last copy had reconsume 3: the DLQ copy has 4, attempt 5.
	readDLQ(t, s, "%DLQ%"+normalGroup, id, 5)

	// A FIFO message forwarded at its first delivery (reconsume 0): attempt 2.
	must(t, s.CreateTopic("t-fifo", rmqfake.TopicFIFO, rmqfake.Queues(1)))
	must(t, s.CreateGroup("g-fifo", rmqfake.FIFO()))
	fid := send(t, p, &client.Message{Topic: "t-fifo", MessageGroup: "o", Body: []byte("f")})[0]
	fc := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-fifo", Subscriptions: []client.Subscription{{Topic: "t-fifo"}}})
	first := receiveNow(t, fc, client.ReceiveRequest{Group: "g-fifo", Topic: "t-fifo", BatchSize: 1, AutoRenew: true, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second})
	if err := fc.ForwardToDeadLetterQueue(ctxT(t), client.DeadLetterRequest{Group: "g-fifo", Topic: "t-fifo",
		MessageID: first[0].MessageID, ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatalf("forward: %v", err)
	}
	readDLQ(t, s, "%DLQ%g-fifo", fid, 2)
}

// readDLQ receives dlq with a group of its own and checks that message id is
// there with the given delivery attempt.
func readDLQ(t *testing.T, s *rmqfake.Server, dlq, id string, attempt int32) {
	t.Helper()
	r := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-dlq-reader", Subscriptions: []client.Subscription{{Topic: dlq}}})
	got := receiveNow(t, r, client.ReceiveRequest{Group: "g-dlq-reader", Topic: dlq, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second})
	if len(got) != 1 || got[0].MessageID != id || got[0].DeliveryAttempt != attempt {
		for _, m := range got {
			t.Logf("from %s: id %s attempt %d", dlq, m.MessageID, m.DeliveryAttempt)
		}
		t.Fatalf("%s: %d messages, want %s with delivery attempt %d", dlq, len(got), id, attempt)
	}
}
