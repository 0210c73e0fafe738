package rmqfake_test

import (
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestTransactions: a TRANSACTION message is a half message no consumer
// sees; EndTransaction COMMIT stores it, ROLLBACK drops it, a second end or
// an unknown transaction answers "cannot found transaction data", an empty
// transaction id INVALID_TRANSACTION_ID; a half message nobody ends is
// dropped after its 15 checks (6 s, then every 30 s); a TRANSACTION message to
// a normal topic is a type conflict.
func TestTransactions(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-txn", rmqfake.TopicTransaction))
	must(t, s.CreateGroup("g-txn"))
	c := session(t, s, client.SessionConfig{Type: client.Producer, Topics: []string{"t-txn"}})
	stub := v2.NewMessagingServiceClient(c.Conn())
	sendTxn := func(topic, id, body string) *v2.SendMessageResponse {
		t.Helper()
		resp, err := stub.SendMessage(c.OutgoingContext(ctxT(t)), &v2.SendMessageRequest{Messages: []*v2.Message{{
			Topic: &v2.Resource{Name: topic}, Body: []byte(body),
			SystemProperties: &v2.SystemProperties{MessageId: id, MessageType: v2.MessageType_TRANSACTION, BodyEncoding: v2.Encoding_IDENTITY},
		}}})
		must(t, err)
		return resp
	}
	end := func(id string, r v2.TransactionResolution) v2.Code {
		t.Helper()
		resp, err := stub.EndTransaction(c.OutgoingContext(ctxT(t)), &v2.EndTransactionRequest{Topic: &v2.Resource{Name: "t-txn"},
			MessageId: id, TransactionId: id, Resolution: r, Source: v2.TransactionSource_SOURCE_CLIENT})
		must(t, err)
		return resp.GetStatus().GetCode()
	}
	for _, id := range []string{"commit", "rollback", "unknown", "orphan"} {
		resp := sendTxn("t-txn", id, id)
		if resp.GetStatus().GetCode() != v2.Code_OK || resp.GetEntries()[0].GetTransactionId() != id {
			t.Fatalf("send %s: %v", id, resp)
		}
	}
	if code := sendTxn(normalTopic, "x", "x").GetStatus().GetCode(); code != v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE {
		t.Errorf("a transaction message to a normal topic: %v, want MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", code)
	}
	cons := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-txn", Subscriptions: []client.Subscription{{Topic: "t-txn"}}})
	req := client.ReceiveRequest{Group: "g-txn", Topic: "t-txn", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second}
	if st := s.Stats().Groups["g-txn"]; st.Backlog != 0 {
		t.Fatalf("half messages visible before their end: %+v", st.Counts)
	}
	for id, want := range map[string]v2.Code{"commit": v2.Code_OK, "rollback": v2.Code_OK, "unknown": v2.Code_OK, "nope": v2.Code_INTERNAL_SERVER_ERROR, "": v2.Code_INVALID_TRANSACTION_ID} {
		r := map[string]v2.TransactionResolution{"commit": v2.TransactionResolution_COMMIT, "rollback": v2.TransactionResolution_ROLLBACK}[id]
		if id == "nope" {
			r = v2.TransactionResolution_COMMIT
		}
		if got := end(id, r); got != want {
			t.Errorf("end %q: %v, want %v", id, got, want)
		}
	}
	if got := end("commit", v2.TransactionResolution_COMMIT); got != v2.Code_INTERNAL_SERVER_ERROR {
		t.Errorf("a second commit: %v, want INTERNAL_SERVER_ERROR (cannot found transaction data)", got)
	}
	got := receiveNow(t, cons, req)
	if len(got) != 1 || string(got[0].Body) != "commit" {
		t.Fatalf("after the ends: %v, want only the committed message", bodies(got))
	}
	ackAll(t, cons, "g-txn", "t-txn", got)
	// The two not ended ("unknown", "orphan") wait as half messages, are
	// checked (6 s, then every 30 s; their data stays known 30 s after each
	// check), and are dropped after the 15th check.
	held := s.Stats().StoredBytes
	if held <= 0 {
		t.Fatalf("StoredBytes %d with two half messages waiting", held)
	}
	clk.Advance(6*time.Second + 14*30*time.Second + 10*time.Second) // 10 s after the 15th check
	if s.Stats().StoredBytes != held {
		t.Errorf("the half messages were dropped before their last check ended")
	}
	if got := end("unknown", v2.TransactionResolution_ROLLBACK); got != v2.Code_OK {
		t.Errorf("rollback 10 s after the 15th check: %v, want OK", got)
	}
	clk.Advance(30 * time.Second)
	if n := s.Stats().StoredBytes; n != 0 {
		t.Errorf("StoredBytes %d after the 15 checks, want the orphan dropped", n)
	}
	if got := end("orphan", v2.TransactionResolution_COMMIT); got != v2.Code_INTERNAL_SERVER_ERROR {
		t.Errorf("commit after the orphan was dropped: %v, want INTERNAL_SERVER_ERROR", got)
	}
}
