package conformance

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FIFOTopicP and FIFOGroupP are scenario p's FIFO topic (one queue) and group.
const (
	FIFOTopicP = "rmqflow-fifo-p"
	FIFOGroupP = "rmqflow-fifo-p-g"
)

// ForgedRequests (p): requests a careless or hostile client can send.
//   - Acks of a FIFO message whose handle names a queue the topic does not
//     have (-1, 1) or an offset the queue never had (-1, a million past the
//     end) answer INTERNAL_SERVER_ERROR, each in its own entry, and skip
//     nothing: the real handle still acks the first message and the other
//     two then arrive in order, on their first attempt.
//   - An ack and a ChangeInvisibleDuration naming a group that does not
//     exist answer OK (the change with a new handle) and touch nothing of the
//     real group.
//   - A ReceiveMessage with batch_size 0 waits out its long poll and answers
//     MESSAGE_NOT_FOUND although a message is there; batch_size -1 answers
//     INTERNAL_SERVER_ERROR at once ("Illegal Capacity: -1").
//   - A delivery timestamp outside protobuf's range (±MaxInt64 s, 1e15 s)
//     is INTERNAL_SERVER_ERROR ("Timestamp is not valid"), not a time in the
//     past delivered at once.
//   - PullMessage, UpdateOffset, GetOffset and QueryOffset answer gRPC
//     Unimplemented ("Method apache.rocketmq.v2.MessagingService/<name> is
//     unimplemented"): the proxy does not serve them.
func ForgedRequests(t *testing.T, e *Env) {
	const s = "p"
	run := rmqtest.Unique("p")
	p := e.Producer(t, FIFOTopicP, rmqtest.NormalTopic(s))
	for _, b := range []string{"1", "2", "3"} {
		res, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: FIFOTopicP, MessageGroup: run, Keys: []string{run}, Body: []byte(b)})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("send %s to %s: %v", b, FIFOTopicP, err)
		}
	}
	c := e.Client(t)
	if _, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.SimpleConsumer, Group: FIFOGroupP,
		Subscriptions: []client.Subscription{{Topic: FIFOTopicP}}}); err != nil {
		t.Fatalf("FIFO consumer session: %v", err)
	}
	req := client.ReceiveRequest{Group: FIFOGroupP, Topic: FIFOTopicP, BatchSize: 1, InvisibleDuration: 30 * time.Second, LongPollingTimeout: poll}
	first := Collect(rmqtest.Context(t, 30*time.Second), t, c, req, OfRun(run), 1)
	if len(first) != 1 || string(first[0].Body) != "1" {
		t.Fatalf("first FIFO receive: %v, want [1]", bodies(first))
	}
	m := first[0]

	forged := map[string]string{
		"queue -1":        forgeFIFO(t, m.ReceiptHandle, "queue", "-1"),
		"queue 1":         forgeFIFO(t, m.ReceiptHandle, "queue", "1"),
		"offset -1":       forgeFIFO(t, m.ReceiptHandle, "offset", "-1"),
		"offset past end": forgeFIFO(t, m.ReceiptHandle, "offset", "1000000000"),
	}
	var es []client.AckEntry
	var names []string
	for name, h := range forged {
		names = append(names, name)
		es = append(es, client.AckEntry{MessageID: m.MessageID, ReceiptHandle: h})
	}
	res, err := c.Ack(rmqtest.Context(t, 10*time.Second), FIFOGroupP, FIFOTopicP, es)
	if err != nil {
		t.Fatalf("ack of forged handles: %v", err)
	}
	for i, r := range res {
		if Code(r.Err) != client.CodeInternalServerError {
			t.Errorf("ack with a forged handle (%s): %v, want INTERNAL_SERVER_ERROR", names[i], r.Err)
		}
	}

	const nope = "rmqflow-no-such-group"
	if r, err := c.Ack(rmqtest.Context(t, 10*time.Second), nope, FIFOTopicP, []client.AckEntry{Entry(m)}); err != nil || r[0].Err != nil {
		t.Errorf("ack naming a group that does not exist: %v %v, want OK", err, r)
	}
	if h, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{Group: nope, Topic: FIFOTopicP,
		MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, InvisibleDuration: MinInvisible}); err != nil || h == "" {
		t.Errorf("change invisible naming a group that does not exist: %q %v, want OK with a handle", h, err)
	}
	// The real group's message is untouched: its own handle acks it, and
	// the rest follows in order.
	if err := AckOne(t, c, FIFOGroupP, m); err != nil {
		t.Fatalf("ack of the real handle after the forged ones: %v", err)
	}
	req.BatchSize = 32
	rest := Collect(rmqtest.Context(t, 20*time.Second), t, c, req, OfRun(run), 2)
	if strings.Join(bodies(rest), " ") != "2 3" {
		t.Fatalf("after the forged acks the FIFO queue delivered %v, want [2 3]", bodies(rest))
	}
	for _, r := range rest {
		if r.DeliveryAttempt != 1 {
			t.Errorf("message %s arrived on attempt %d, want 1", r.Body, r.DeliveryAttempt)
		}
		if err := AckOne(t, c, FIFOGroupP, r); err != nil {
			t.Errorf("ack %s: %v", r.Body, err)
		}
	}

	// batch_size 0 and -1, with a message waiting.
	nc := e.NormalConsumer(t, s)
	SendNormal(t, p, rmqtest.NormalTopic(s), run, "n")
	stub := v2.NewMessagingServiceClient(nc.Conn())
	for _, bs := range []int32{0, -1} {
		code, n, took := rawReceive(t, stub, nc, s, bs)
		switch {
		case bs == 0 && (code != v2.Code_MESSAGE_NOT_FOUND || n != 0 || took < poll-time.Second):
			t.Errorf("batch_size 0: %v with %d messages after %v, want MESSAGE_NOT_FOUND after the %v poll", code, n, took, poll)
		case bs < 0 && (code != v2.Code_INTERNAL_SERVER_ERROR || n != 0 || took > 2*time.Second):
			t.Errorf("batch_size %d: %v with %d messages after %v, want INTERNAL_SERVER_ERROR at once", bs, code, n, took)
		}
	}
	if got := Collect(rmqtest.Context(t, 30*time.Second), t, nc, NormalReq(s, 30*time.Second), OfRun(run), 1); len(got) != 1 {
		t.Errorf("the normal message was not delivered after the batch_size 0 and -1 polls")
	} else if err := AckOne(t, nc, rmqtest.NormalGroup(s), got[0]); err != nil {
		t.Error(err)
	}

	// The pull and offset RPCs are not served to gRPC clients.
	octx := nc.OutgoingContext(rmqtest.Context(t, 10*time.Second))
	offsetRPCs := map[string]func() error{
		"UpdateOffset": func() error { _, err := stub.UpdateOffset(octx, &v2.UpdateOffsetRequest{}); return err },
		"GetOffset":    func() error { _, err := stub.GetOffset(octx, &v2.GetOffsetRequest{}); return err },
		"QueryOffset":  func() error { _, err := stub.QueryOffset(octx, &v2.QueryOffsetRequest{}); return err },
		"PullMessage": func() error {
			st, err := stub.PullMessage(octx, &v2.PullMessageRequest{})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		},
	}
	for name, call := range offsetRPCs {
		err := call()
		if want := "Method apache.rocketmq.v2.MessagingService/" + name + " is unimplemented"; status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != want {
			t.Errorf("%s: %v, want gRPC Unimplemented %q", name, err, want)
		}
	}

	for _, sec := range []int64{math.MaxInt64, math.MinInt64, 1e15} {
		_, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: rmqtest.NormalTopic(s), Keys: []string{run}, Body: []byte("x"), DeliveryTime: time.Unix(sec, 0)})
		if Code(err) != client.CodeInternalServerError || !strings.Contains(err.Error(), "Timestamp is not valid") {
			t.Errorf("delivery at %d s: %v, want INTERNAL_SERVER_ERROR \"Timestamp is not valid\"", sec, err)
		}
	}
}

// forgeFIFO rewrites the queue id or queue offset of a FIFO receipt handle.
// The two targets write handles differently: rmqfake's start with "F1"
// (F1 kind popTime invisible queue offset seq), the broker's are
// "ckOffset popTime invisible reviveQueue topicType broker queue offset ...".
func forgeFIFO(t *testing.T, h, field, v string) string {
	t.Helper()
	f := strings.Split(h, " ")
	queue, offset := 6, 7
	if f[0] == "F1" {
		queue, offset = 4, 5
	}
	i := map[string]int{"queue": queue, "offset": offset}[field]
	if len(f) <= i {
		t.Fatalf("receipt handle %q: no %s field", h, field)
	}
	f[i] = v
	return strings.Join(f, " ")
}

// rawReceive sends one ReceiveMessage with the given batch size on the
// scenario's normal topic and returns its status, how many messages it
// carried and how long it took.
func rawReceive(t *testing.T, stub v2.MessagingServiceClient, c *client.Client, s string, batch int32) (v2.Code, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.OutgoingContext(context.Background()), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	st, err := stub.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{
		Group:            &v2.Resource{Name: rmqtest.NormalGroup(s)},
		MessageQueue:     &v2.MessageQueue{Topic: &v2.Resource{Name: rmqtest.NormalTopic(s)}},
		FilterExpression: &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"},
		BatchSize:        batch, InvisibleDuration: durationpb.New(MinInvisible), LongPollingTimeout: durationpb.New(poll),
	})
	if err != nil {
		t.Fatalf("batch_size %d: %v", batch, err)
	}
	code, n := v2.Code_CODE_UNSPECIFIED, 0
	for {
		r, err := st.Recv()
		if err != nil {
			return code, n, time.Since(t0)
		}
		switch x := r.GetContent().(type) {
		case *v2.ReceiveMessageResponse_Status:
			code = x.Status.GetCode()
		case *v2.ReceiveMessageResponse_Message:
			n++
		}
	}
}
