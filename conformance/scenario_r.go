package conformance

import (
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DelayTopicR and DelayGroupR are scenario r's DELAY topic and its group.
const (
	DelayTopicR = "rmqflow-delay-r"
	DelayGroupR = "rmqflow-delay-r-g"
)

// RecallDelayed (r): two messages are sent alone to a DELAY topic, due in
// 8 s; each send answers a recall handle. RecallMessage with the first one's
// handle answers OK with its message id, and OK again the second time; a
// handle that is not base64 answers INTERNAL_SERVER_ERROR "recall handle is
// invalid". When they are due only the second is delivered; recalling it
// then answers INTERNAL_SERVER_ERROR "timestamp invalid". (The broker runs
// with recallMessageEnable=true; 5.5.0's default is false, and then every
// recall fails "operation is forbidden".)
func RecallDelayed(t *testing.T, e *Env) {
	run := rmqtest.Unique("r")
	p := e.Producer(t, DelayTopicR)
	stub := v2.NewMessagingServiceClient(p.Conn())
	due := time.Now().Add(8 * time.Second)
	send := func(body string) *v2.SendResultEntry {
		t.Helper()
		resp, err := stub.SendMessage(p.OutgoingContext(rmqtest.Context(t, 10*time.Second)), &v2.SendMessageRequest{Messages: []*v2.Message{{
			Topic: &v2.Resource{Name: DelayTopicR}, Body: []byte(body),
			SystemProperties: &v2.SystemProperties{MessageId: client.NewMessageID(), MessageType: v2.MessageType_DELAY, Keys: []string{run},
				BodyEncoding: v2.Encoding_IDENTITY, BornTimestamp: timestamppb.Now(), BornHost: "127.0.0.1", DeliveryTimestamp: timestamppb.New(due)},
		}}})
		if err != nil || resp.GetStatus().GetCode() != v2.Code_OK || len(resp.GetEntries()) != 1 {
			t.Fatalf("send %s: %v %v", body, err, resp.GetStatus())
		}
		if resp.GetEntries()[0].GetRecallHandle() == "" {
			t.Fatalf("send %s: no recall handle for a delayed message", body)
		}
		return resp.GetEntries()[0]
	}
	recall := func(h string) *v2.RecallMessageResponse {
		t.Helper()
		resp, err := stub.RecallMessage(p.OutgoingContext(rmqtest.Context(t, 10*time.Second)), &v2.RecallMessageRequest{Topic: &v2.Resource{Name: DelayTopicR}, RecallHandle: h})
		if err != nil {
			t.Fatalf("recall: %v", err)
		}
		return resp
	}
	gone, kept := send("recalled"), send("kept")
	for i := range 2 {
		if r := recall(gone.GetRecallHandle()); r.GetStatus().GetCode() != v2.Code_OK || r.GetMessageId() != gone.GetMessageId() {
			t.Fatalf("recall %d: %v, message id %q; want OK with %q", i+1, r.GetStatus(), r.GetMessageId(), gone.GetMessageId())
		}
	}
	if r := recall("not base64!"); r.GetStatus().GetCode() != v2.Code_INTERNAL_SERVER_ERROR || !strings.Contains(r.GetStatus().GetMessage(), "recall handle is invalid") {
		t.Errorf("recall with a handle that is not one: %v, want INTERNAL_SERVER_ERROR \"recall handle is invalid\"", r.GetStatus())
	}
	c := e.Client(t)
	if _, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.SimpleConsumer, Group: DelayGroupR,
		Subscriptions: []client.Subscription{{Topic: DelayTopicR}}}); err != nil {
		t.Fatalf("consumer session: %v", err)
	}
	req := client.ReceiveRequest{Group: DelayGroupR, Topic: DelayTopicR, InvisibleDuration: 30 * time.Second, LongPollingTimeout: poll}
	got := Collect(rmqtest.Context(t, time.Until(due)+20*time.Second), t, c, req, OfRun(run), 2)
	if strings.Join(bodies(got), " ") != "kept" {
		t.Fatalf("delivered %v, want only the message not recalled", bodies(got))
	}
	if time.Now().Before(due.Add(-time.Second)) {
		t.Errorf("the delayed message came %v before its time", time.Until(due))
	}
	if err := AckOne(t, c, DelayGroupR, got[0]); err != nil {
		t.Error(err)
	}
	if r := recall(kept.GetRecallHandle()); r.GetStatus().GetCode() != v2.Code_INTERNAL_SERVER_ERROR || !strings.Contains(r.GetStatus().GetMessage(), "timestamp invalid") {
		t.Errorf("recall after delivery: %v, want INTERNAL_SERVER_ERROR \"timestamp invalid\"", r.GetStatus())
	}
}
