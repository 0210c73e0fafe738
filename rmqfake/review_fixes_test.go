package rmqfake_test

import (
	"context"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestAutoRenewEdges: an ack naming another group leaves the auto-renewal
// on (the client's termination still gives the message back in a second);
// a failed change gives it the 60 s of a pop, not rmqfake's 3 h; a receive
// stream that breaks part-way leaves nothing held for the client (the sent
// message comes back on the termination, the unsent one a second after the
// break).
func TestAutoRenewEdges(t *testing.T) {
	t.Parallel()
	t.Run("ack naming another group", func(t *testing.T) {
		s, clk := start(t)
		c := normalConsumer(t, s)
		send(t, producer(t, s), &client.Message{Topic: normalTopic, Body: []byte("x")})
		req := normalReq(10 * time.Second)
		req.AutoRenew = true
		got := receiveNow(t, c, req)
		res, err := c.Ack(ctxT(t), "no-such-group", normalTopic, []client.AckEntry{entry(got[0])})
		if err != nil || res[0].Err != nil {
			t.Fatalf("ack under another group: %v %v", err, res)
		}
		must(t, c.NotifyClientTermination(ctxT(t), normalGroup))
		clk.Advance(2 * time.Second)
		if g := s.Stats().Groups[normalGroup]; g.InFlight != 0 || g.Backlog != 1 {
			t.Errorf("2 s after the termination: %+v, want the message back", g.Counts)
		}
	})
	t.Run("failed change", func(t *testing.T) {
		s, clk := start(t)
		c := normalConsumer(t, s)
		send(t, producer(t, s), &client.Message{Topic: normalTopic, Body: []byte("x")})
		req := normalReq(10 * time.Second)
		req.AutoRenew = true
		got := receiveNow(t, c, req)
		_, err := c.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: normalGroup, Topic: "no-such-topic",
			MessageID: got[0].MessageID, ReceiptHandle: got[0].ReceiptHandle, InvisibleDuration: time.Hour})
		if err == nil {
			t.Fatal("a change naming an unknown topic succeeded")
		}
		clk.Advance(61 * time.Second)
		if g := s.Stats().Groups[normalGroup]; g.InFlight != 0 {
			t.Errorf("61 s after a failed change ended the renewal: %+v, want the message visible again", g.Counts)
		}
	})
	t.Run("broken stream", func(t *testing.T) {
		s, clk := start(t)
		c := normalConsumer(t, s)
		p := producer(t, s)
		send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})
		send(t, p, &client.Message{Topic: normalTopic, Body: []byte("y")})
		s.BreakReceiveStreams(1)
		req := normalReq(10 * time.Second)
		req.AutoRenew = true
		if _, err := c.Receive(ctxT(t), req); err == nil {
			t.Fatal("the broken receive succeeded")
		}
		must(t, c.NotifyClientTermination(ctxT(t), normalGroup))
		clk.Advance(2 * time.Second)
		if g := s.Stats().Groups[normalGroup]; g.InFlight != 0 || g.Backlog != 2 {
			t.Errorf("2 s after the broken receive and the termination: %+v, want both back", g.Counts)
		}
	})
}

// TestTransactionSentTwice: a transactional message sent twice under one id
// (a retried send) is one half message: a rollback leaves nothing stored and
// no timer.
func TestTransactionSentTwice(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-txn", rmqfake.TopicTransaction))
	c := session(t, s, client.SessionConfig{Type: client.Producer, Topics: []string{"t-txn"}})
	stub := v2.NewMessagingServiceClient(c.Conn())
	for range 2 {
		resp, err := stub.SendMessage(c.OutgoingContext(ctxT(t)), &v2.SendMessageRequest{Messages: []*v2.Message{{
			Topic: &v2.Resource{Name: "t-txn"}, Body: []byte("b"),
			SystemProperties: &v2.SystemProperties{MessageId: "dup", MessageType: v2.MessageType_TRANSACTION, BodyEncoding: v2.Encoding_IDENTITY},
		}}})
		if err != nil || resp.GetStatus().GetCode() != v2.Code_OK {
			t.Fatalf("send: %v %v", err, resp.GetStatus())
		}
	}
	resp, err := stub.EndTransaction(c.OutgoingContext(ctxT(t)), &v2.EndTransactionRequest{Topic: &v2.Resource{Name: "t-txn"},
		MessageId: "dup", TransactionId: "dup", Resolution: v2.TransactionResolution_ROLLBACK})
	if err != nil || resp.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("rollback: %v %v", err, resp.GetStatus())
	}
	clk.Advance(time.Hour)
	if st := s.Stats(); st.StoredBytes != 0 || st.Timers != 0 {
		t.Errorf("after the rollback: StoredBytes %d, Timers %d; want 0 and 0", st.StoredBytes, st.Timers)
	}
}

// TestTransactionCheckSkipsEndedStreams: a producer whose Telemetry stream
// ended (its session is kept for SessionExpiry) is not asked about an open
// transaction; the producer whose stream is open is, every time.
func TestTransactionCheckSkipsEndedStreams(t *testing.T) {
	t.Parallel()
	for i := range 5 {
		s, clk := start(t)
		must(t, s.CreateTopic("t-txn", rmqfake.TopicTransaction))
		typ := v2.ClientType_PRODUCER
		st := &v2.Settings{ClientType: &typ, PubSub: &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: []*v2.Resource{{Name: "t-txn"}}}}}
		dead := newClient(t, s, client.Config{})
		dctx, cancel := context.WithCancel(dead.OutgoingContext(ctxT(t)))
		if _, err := telemetry(t, dead, dctx, st); err != nil {
			t.Fatal(err)
		}
		cancel()
		must(t, s.WaitFor(ctxT(t), func(st rmqfake.Stats) bool { return st.Streams == 0 }))
		live := newClient(t, s, client.Config{})
		stream, err := v2.NewMessagingServiceClient(live.Conn()).Telemetry(live.OutgoingContext(ctxT(t)))
		must(t, err)
		must(t, stream.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: st}}))
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		_, err = v2.NewMessagingServiceClient(live.Conn()).SendMessage(live.OutgoingContext(ctxT(t)), &v2.SendMessageRequest{Messages: []*v2.Message{{
			Topic: &v2.Resource{Name: "t-txn"}, Body: []byte("b"),
			SystemProperties: &v2.SystemProperties{MessageId: "x", MessageType: v2.MessageType_TRANSACTION, BodyEncoding: v2.Encoding_IDENTITY},
		}}})
		must(t, err)
		clk.Advance(6 * time.Second)
		cmd, err := stream.Recv()
		if err != nil || cmd.GetRecoverOrphanedTransactionCommand().GetTransactionId() != "x" {
			t.Fatalf("run %d: the live producer got %v, %v; want the check of x", i, cmd, err)
		}
	}
}

// TestForwardOnceOnly: a FIFO message acked, or forwarded already, is not
// dead-lettered (again) by a forward.
func TestForwardOnceOnly(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	must(t, s.CreateTopic("t-fifo", rmqfake.TopicFIFO, rmqfake.Queues(1)))
	must(t, s.CreateGroup("g-fifo", rmqfake.FIFO()))
	p := producer(t, s)
	send(t, p, &client.Message{Topic: "t-fifo", MessageGroup: "o", Body: []byte("a")})
	send(t, p, &client.Message{Topic: "t-fifo", MessageGroup: "o", Body: []byte("b")})
	fc := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-fifo", Subscriptions: []client.Subscription{{Topic: "t-fifo"}}})
	got := receiveNow(t, fc, client.ReceiveRequest{Group: "g-fifo", Topic: "t-fifo", BatchSize: 2, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second})
	if len(got) != 2 {
		t.Fatalf("got %d messages, want 2", len(got))
	}
	ackAll(t, fc, "g-fifo", "t-fifo", got[:1])
	forward := func(m *client.ReceivedMessage) error {
		return fc.ForwardToDeadLetterQueue(ctxT(t), client.DeadLetterRequest{Group: "g-fifo", Topic: "t-fifo", MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle})
	}
	if err := forward(got[1]); err != nil {
		t.Fatalf("first forward of b: %v", err)
	}
	if err := forward(got[1]); err == nil {
		t.Error("a second forward of b succeeded")
	}
	if err := forward(got[0]); err == nil {
		t.Error("a forward of the acked a succeeded")
	}
	if g := s.Stats().Groups["g-fifo"]; g.DeadLettered != 1 {
		t.Errorf("%d dead-lettered, want 1", g.DeadLettered)
	}
}
