package conformance

import (
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// BatchSendOfLiteMessages (k): one SendMessage RPC carrying several lite
// messages is answered OK, yet none of them reaches its lite topic, whether
// they name different lite topics or the same one. The client therefore sends
// lite messages one per RPC, and those all arrive; a lite topic's records
// cannot share a call, so the Sink sends them one after another.
func BatchSendOfLiteMessages(t *testing.T, e *Env) {
	const s = "k"
	topic := rmqtest.LiteTopic(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("k")

	// Raw: two lite messages in one request, as the protocol allows.
	req := &v2.SendMessageRequest{}
	for _, lite := range []string{run + "-raw1", run + "-raw2"} {
		lt := lite
		req.Messages = append(req.Messages, &v2.Message{
			Topic: &v2.Resource{Name: topic},
			SystemProperties: &v2.SystemProperties{
				MessageId: client.NewMessageID(), LiteTopic: &lt, MessageType: v2.MessageType_LITE,
				BornTimestamp: timestamppb.Now(), BornHost: "rmqflow-test", BodyEncoding: v2.Encoding_IDENTITY,
			},
			Body: []byte(lite),
		})
	}
	ctx := rmqtest.Context(t, 10*time.Second)
	resp, err := v2.NewMessagingServiceClient(p.Conn()).SendMessage(p.OutgoingContext(ctx), req)
	if err != nil {
		t.Fatalf("raw batch send: %v", err)
	}
	if resp.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("raw batch send status %v, want OK", resp.GetStatus())
	}

	// Raw: two messages of one lite topic in one request.
	same := run + "-same"
	req = &v2.SendMessageRequest{}
	for _, body := range []string{same + "-1", same + "-2"} {
		lt := same
		req.Messages = append(req.Messages, &v2.Message{
			Topic: &v2.Resource{Name: topic},
			SystemProperties: &v2.SystemProperties{
				MessageId: client.NewMessageID(), LiteTopic: &lt, MessageType: v2.MessageType_LITE,
				BornTimestamp: timestamppb.Now(), BornHost: "rmqflow-test", BodyEncoding: v2.Encoding_IDENTITY,
			},
			Body: []byte(body),
		})
	}
	resp, err = v2.NewMessagingServiceClient(p.Conn()).SendMessage(p.OutgoingContext(ctx), req)
	if err != nil {
		t.Fatalf("raw same-lite-topic batch send: %v", err)
	}
	if resp.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("raw same-lite-topic batch send status %v, want OK", resp.GetStatus())
	}

	// Through the client: the same two lite topics' worth, one RPC each.
	res, err := p.Send(ctx, &client.Message{Topic: topic, LiteTopic: run + "-c1", Body: []byte("c1")},
		&client.Message{Topic: topic, LiteTopic: run + "-c2", Body: []byte("c2")})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("client send: %v %+v", err, res)
	}
	got := Collect(rmqtest.Context(t, 20*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 4)
	seen := map[string]bool{}
	for _, m := range got {
		seen[string(m.Body)] = true
		_ = AckOne(t, c, rmqtest.LiteGroup(s), m)
	}
	if !seen["c1"] || !seen["c2"] {
		t.Errorf("client-sent lite messages received: %v, want c1 and c2", seen)
	}
	if seen[run+"-raw1"] || seen[run+"-raw2"] {
		t.Errorf("raw batch of lite messages was delivered (%v): the broker changed; revisit client.Send", seen)
	}
	if seen[same+"-1"] || seen[same+"-2"] {
		t.Errorf("raw batch of one lite topic's messages was delivered (%v): the broker changed; revisit the Sink's one lite record per call", seen)
	}
}
