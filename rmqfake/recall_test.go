package rmqfake_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestRecall: a delayed message sent alone gets a recall handle; recalled
// before its time it is never delivered, and recalling it again answers OK;
// a message not recalled is delivered; the broker's errors for a handle
// that is not one, another topic's handle, a handle past its time and a
// topic that is not DELAY.
func TestRecall(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-delay", rmqfake.TopicDelay))
	must(t, s.CreateTopic("t-delay2", rmqfake.TopicDelay))
	must(t, s.CreateGroup("g-delay"))
	p := producer(t, s)
	stub := v2.NewMessagingServiceClient(p.Conn())
	sendDelayed := func(body string, in time.Duration) *v2.SendResultEntry {
		t.Helper()
		resp, err := stub.SendMessage(p.OutgoingContext(ctxT(t)), &v2.SendMessageRequest{Messages: []*v2.Message{{
			Topic: &v2.Resource{Name: "t-delay"}, Body: []byte(body),
			SystemProperties: &v2.SystemProperties{MessageId: body + "-id", MessageType: v2.MessageType_DELAY, BodyEncoding: v2.Encoding_IDENTITY,
				DeliveryTimestamp: timestamppb.New(clk.Now().Add(in))},
		}}})
		must(t, err)
		if resp.GetStatus().GetCode() != v2.Code_OK {
			t.Fatalf("send %s: %v", body, resp.GetStatus())
		}
		return resp.GetEntries()[0]
	}
	recall := func(topic, handle string) (*v2.RecallMessageResponse, v2.Code) {
		t.Helper()
		resp, err := stub.RecallMessage(p.OutgoingContext(ctxT(t)), &v2.RecallMessageRequest{Topic: &v2.Resource{Name: topic}, RecallHandle: handle})
		must(t, err)
		return resp, resp.GetStatus().GetCode()
	}
	gone := sendDelayed("recalled", 10*time.Second)
	kept := sendDelayed("kept", 10*time.Second)
	raw, err := base64.URLEncoding.DecodeString(gone.GetRecallHandle())
	if err != nil || !strings.HasPrefix(string(raw), "v1 t-delay rmqfake ") || !strings.HasSuffix(string(raw), " recalled-id") {
		t.Fatalf("recall handle %q (%q): want base64url of v1 <topic> <broker> <ts> <id>", gone.GetRecallHandle(), raw)
	}
	for i := range 2 {
		if resp, code := recall("t-delay", gone.GetRecallHandle()); code != v2.Code_OK || resp.GetMessageId() != "recalled-id" {
			t.Fatalf("recall %d: %v %q, want OK with the message id", i+1, code, resp.GetMessageId())
		}
	}
	for name, tc := range map[string]struct {
		topic, handle, text string
		code                v2.Code
	}{
		"garbage":     {"t-delay", "not base64!", "recall handle is invalid", v2.Code_INTERNAL_SERVER_ERROR},
		"other topic": {"t-delay2", kept.GetRecallHandle(), "topic not match", v2.Code_INTERNAL_SERVER_ERROR},
		"normal":      {normalTopic, kept.GetRecallHandle(), "the expected type is NORMAL, but actual type is DELAY", v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
	} {
		resp, code := recall(tc.topic, tc.handle)
		if code != tc.code || !strings.Contains(resp.GetStatus().GetMessage(), tc.text) {
			t.Errorf("%s: %v %q, want %v %q", name, code, resp.GetStatus().GetMessage(), tc.code, tc.text)
		}
	}
	clk.Advance(10 * time.Second)
	if _, code := recall("t-delay", kept.GetRecallHandle()); code != v2.Code_INTERNAL_SERVER_ERROR {
		t.Errorf("recall at the delivery time: %v, want INTERNAL_SERVER_ERROR (timestamp invalid)", code)
	}
	c := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-delay", Subscriptions: []client.Subscription{{Topic: "t-delay"}}})
	got := receiveNow(t, c, client.ReceiveRequest{Group: "g-delay", Topic: "t-delay", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if len(got) != 1 || string(got[0].Body) != "kept" {
		t.Fatalf("delivered %v, want only the message not recalled", bodies(got))
	}
}
