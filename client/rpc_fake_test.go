package client

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func ackStatus(c v2.Code) *v2.Status { return &v2.Status{Code: c, Message: c.String()} }

func ackEntry(handle string, c v2.Code) *v2.AckMessageResultEntry {
	return &v2.AckMessageResultEntry{MessageId: "id-" + handle, ReceiptHandle: handle, Status: ackStatus(c)}
}

func TestAckResultsMatchRequestOrder(t *testing.T) {
	var answer atomic.Pointer[v2.AckMessageResponse]
	reqs := make(chan *v2.AckMessageRequest, 4)
	f := &fakeServer{ack: func(_ context.Context, r *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
		reqs <- r
		return answer.Load(), nil
	}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f), Namespace: "ns"})
	entries := []AckEntry{
		{MessageID: "id-h1", ReceiptHandle: "h1", LiteTopic: "lt1"},
		{MessageID: "id-h2", ReceiptHandle: "h2"},
		{MessageID: "id-h3", ReceiptHandle: "h3"},
	}
	check := func(t *testing.T, res []AckResult, want []*StatusError) {
		t.Helper()
		if len(res) != len(entries) {
			t.Fatalf("%d results for %d entries", len(res), len(entries))
		}
		for i, r := range res {
			if r.MessageID != entries[i].MessageID || r.ReceiptHandle != entries[i].ReceiptHandle {
				t.Errorf("result %d is for %s/%s, want %s/%s", i, r.MessageID, r.ReceiptHandle, entries[i].MessageID, entries[i].ReceiptHandle)
			}
			switch {
			case want[i] == nil && r.Err != nil:
				t.Errorf("result %d: %v, want success", i, r.Err)
			case want[i] != nil && !errors.Is(r.Err, want[i]):
				t.Errorf("result %d: %v, want %v", i, r.Err, want[i].Code)
			}
		}
	}

	t.Run("out of order, MULTIPLE_RESULTS", func(t *testing.T) {
		answer.Store(&v2.AckMessageResponse{Status: ackStatus(v2.Code_MULTIPLE_RESULTS), Entries: []*v2.AckMessageResultEntry{
			ackEntry("h3", v2.Code_OK), ackEntry("h1", v2.Code_INVALID_RECEIPT_HANDLE), ackEntry("h2", v2.Code_OK),
		}})
		res, err := c.Ack(t.Context(), "g", "topic", entries)
		if err != nil {
			t.Fatalf("Ack: %v", err)
		}
		check(t, res, []*StatusError{ErrInvalidReceiptHandle, nil, nil})
		r := <-reqs
		if r.GetGroup().GetName() != "g" || r.GetTopic().GetName() != "topic" || r.GetTopic().GetResourceNamespace() != "ns" || len(r.GetEntries()) != 3 {
			t.Fatalf("request %v", r)
		}
		for i, e := range r.GetEntries() {
			if e.GetReceiptHandle() != entries[i].ReceiptHandle || e.GetMessageId() != entries[i].MessageID {
				t.Errorf("request entry %d = %v", i, e)
			}
		}
		if r.GetEntries()[0].GetLiteTopic() != "lt1" || r.GetEntries()[1].LiteTopic != nil {
			t.Errorf("lite topics sent: %q, %v; want lt1 and unset", r.GetEntries()[0].GetLiteTopic(), r.GetEntries()[1].LiteTopic)
		}
	})

	t.Run("one entry missing", func(t *testing.T) {
		answer.Store(&v2.AckMessageResponse{Status: ackStatus(v2.Code_MULTIPLE_RESULTS), Entries: []*v2.AckMessageResultEntry{
			ackEntry("h3", v2.Code_INVALID_RECEIPT_HANDLE), ackEntry("h1", v2.Code_OK),
		}})
		res, err := c.Ack(t.Context(), "g", "topic", entries)
		if err != nil {
			t.Fatalf("Ack: %v", err)
		}
		check(t, res, []*StatusError{nil, ErrInternal, ErrInvalidReceiptHandle})
		<-reqs
	})

	t.Run("missing entry under an OK status", func(t *testing.T) {
		answer.Store(&v2.AckMessageResponse{Status: ackStatus(v2.Code_OK), Entries: []*v2.AckMessageResultEntry{
			ackEntry("h2", v2.Code_OK),
		}})
		res, err := c.Ack(t.Context(), "g", "topic", entries)
		if err != nil {
			t.Fatalf("Ack: %v", err)
		}
		check(t, res, []*StatusError{ErrInternal, nil, ErrInternal})
		<-reqs
	})

	t.Run("request-level failure", func(t *testing.T) {
		answer.Store(&v2.AckMessageResponse{Status: ackStatus(v2.Code_TOO_MANY_REQUESTS)})
		res, err := c.Ack(t.Context(), "g", "topic", entries)
		if !errors.Is(err, ErrTooManyRequests) || res != nil {
			t.Fatalf("Ack = %v, %v; want no results and TOO_MANY_REQUESTS", res, err)
		}
		<-reqs
	})

	t.Run("bad input", func(t *testing.T) {
		var ce *ConfigError
		if _, err := c.Ack(t.Context(), "", "topic", entries); !errors.As(err, &ce) {
			t.Errorf("empty group: %v", err)
		}
		if _, err := c.Ack(t.Context(), "g", "", entries); !errors.As(err, &ce) {
			t.Errorf("empty topic: %v", err)
		}
		if res, err := c.Ack(t.Context(), "g", "topic", nil); res != nil || err != nil {
			t.Errorf("no entries: %v, %v", res, err)
		}
		select {
		case r := <-reqs:
			t.Errorf("bad input reached the server: %v", r)
		default:
		}
	})
}

func TestSendSingleEntryAnswersWholeBatch(t *testing.T) {
	var answer atomic.Pointer[v2.SendMessageResponse]
	reqs := make(chan *v2.SendMessageRequest, 4)
	f := &fakeServer{send: func(_ context.Context, r *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
		reqs <- r
		return answer.Load(), nil
	}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f)})
	msgs := func() []*Message {
		return []*Message{
			{Topic: "t", Tag: "a", Keys: []string{"k1"}, Properties: map[string]string{"p": "1"}, Body: []byte("one")},
			{Topic: "t", Body: []byte("two")},
			{Topic: "t", Keys: []string{"k3", "k3b"}, Body: []byte("three")},
		}
	}
	entry := func(code v2.Code) *v2.SendResultEntry {
		return &v2.SendResultEntry{Status: ackStatus(code), MessageId: "server-batch-id", Offset: 42}
	}

	answer.Store(&v2.SendMessageResponse{Status: okStatus(), Entries: []*v2.SendResultEntry{entry(v2.Code_OK)}})
	res, err := c.Send(t.Context(), msgs()...)
	if err != nil || len(res) != 3 {
		t.Fatalf("Send = %v, %v; want 3 results", res, err)
	}
	r := <-reqs
	if len(r.GetMessages()) != 3 {
		t.Fatalf("one request with %d messages, want 3", len(r.GetMessages()))
	}
	ids := map[string]bool{}
	for i, sr := range res {
		pm := r.GetMessages()[i]
		if sr.Err != nil || sr.Offset != 42 {
			t.Errorf("result %d: %+v, want success at offset 42", i, sr)
		}
		if sr.MessageID == "" || sr.MessageID != pm.GetSystemProperties().GetMessageId() || ids[sr.MessageID] {
			t.Errorf("result %d id %q, want the distinct id sent (%q)", i, sr.MessageID, pm.GetSystemProperties().GetMessageId())
		}
		ids[sr.MessageID] = true
		if pm.GetSystemProperties().GetMessageType() != v2.MessageType_NORMAL || pm.GetTopic().GetName() != "t" {
			t.Errorf("message %d sent as %v to %v", i, pm.GetSystemProperties().GetMessageType(), pm.GetTopic())
		}
	}
	first := r.GetMessages()[0]
	if first.GetSystemProperties().GetTag() != "a" || !reflect.DeepEqual(first.GetSystemProperties().GetKeys(), []string{"k1"}) ||
		first.GetUserProperties()["p"] != "1" || string(first.GetBody()) != "one" || first.GetSystemProperties().GetBornTimestamp() == nil {
		t.Errorf("first message sent as %v", first)
	}
	if r.GetMessages()[1].GetSystemProperties().Tag != nil {
		t.Errorf("a message without tag was sent with tag %q", r.GetMessages()[1].GetSystemProperties().GetTag())
	}

	// A failing single entry fails every message of the batch.
	answer.Store(&v2.SendMessageResponse{Status: ackStatus(v2.Code_MULTIPLE_RESULTS), Entries: []*v2.SendResultEntry{entry(v2.Code_MESSAGE_BODY_TOO_LARGE)}})
	res, err = c.Send(t.Context(), msgs()...)
	if err != nil || len(res) != 3 {
		t.Fatalf("Send = %v, %v; want 3 results", res, err)
	}
	<-reqs
	for i, sr := range res {
		var se *StatusError
		if !errors.As(sr.Err, &se) || se.Code != CodeMessageBodyTooLarge {
			t.Errorf("result %d: %v, want MESSAGE_BODY_TOO_LARGE", i, sr.Err)
		}
	}

	// Fewer entries than messages (but more than one): the unanswered ones fail.
	answer.Store(&v2.SendMessageResponse{Status: okStatus(), Entries: []*v2.SendResultEntry{
		{Status: okStatus(), MessageId: "m0", Offset: 1}, {Status: ackStatus(v2.Code_TOO_MANY_REQUESTS), MessageId: "m1", Offset: 2},
	}})
	res, err = c.Send(t.Context(), msgs()...)
	if err != nil || len(res) != 3 {
		t.Fatalf("Send = %v, %v", res, err)
	}
	<-reqs
	if res[0].Err != nil || res[0].MessageID != "m0" || res[0].Offset != 1 || !errors.Is(res[1].Err, ErrTooManyRequests) || !errors.Is(res[2].Err, ErrInternal) {
		t.Errorf("results %+v", res)
	}

	// A request-level failure without entries is the call's error.
	answer.Store(&v2.SendMessageResponse{Status: ackStatus(v2.Code_TOPIC_NOT_FOUND)})
	if res, err := c.Send(t.Context(), msgs()...); !errors.Is(err, ErrTopicNotFound) || res != nil {
		t.Errorf("Send = %v, %v; want TOPIC_NOT_FOUND", res, err)
	}
	<-reqs

	// Messages of different topics are rejected before any RPC.
	var ce *ConfigError
	if _, err := c.Send(t.Context(), &Message{Topic: "a"}, &Message{Topic: "b"}); !errors.As(err, &ce) {
		t.Errorf("mixed topics: %v, want a *ConfigError", err)
	}
	select {
	case r := <-reqs:
		t.Errorf("a rejected batch reached the server: %v", r)
	default:
	}
}

// routeTo answers QueryRoute with one readable and writable queue of topic.
func routeTo(queue *v2.MessageQueue) func(context.Context, *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	return func(_ context.Context, r *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
		q := proto.Clone(queue).(*v2.MessageQueue)
		q.Topic = r.GetTopic()
		return &v2.QueryRouteResponse{Status: okStatus(), MessageQueues: []*v2.MessageQueue{q}}, nil
	}
}

func TestReceiveMessageNotFoundIsEmpty(t *testing.T) {
	f := &fakeServer{
		queryRoute: routeTo(&v2.MessageQueue{Id: 3, Permission: v2.Permission_READ_WRITE, Broker: &v2.Broker{Name: "b", Id: 0}}),
		receive: func(_ *v2.ReceiveMessageRequest, st v2.MessagingService_ReceiveMessageServer) error {
			return st.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: ackStatus(v2.Code_MESSAGE_NOT_FOUND)}})
		},
	}
	c := newTestClient(t, Config{Endpoints: startFake(t, f)})
	msgs, err := c.Receive(t.Context(), ReceiveRequest{Group: "g", Topic: "t", InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second})
	if err != nil || len(msgs) != 0 {
		t.Errorf("Receive on MESSAGE_NOT_FOUND = %v, %v; want no messages and nil", msgs, err)
	}
}

func TestReceiveMapsMessages(t *testing.T) {
	born := time.Date(2025, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	store := born.Add(time.Second)
	msg := func(i int32, lite string) *v2.Message {
		tag := "tag-" + lite
		return &v2.Message{
			Topic:          &v2.Resource{Name: "main-topic"},
			UserProperties: map[string]string{"p": lite},
			SystemProperties: &v2.SystemProperties{
				Tag: &tag, Keys: []string{"k-" + lite, "k2"}, MessageId: "mid-" + lite,
				ReceiptHandle: ptr("rh-" + lite), DeliveryAttempt: ptr(i), BornTimestamp: timestamppb.New(born),
				BornHost: "host-1", StoreTimestamp: timestamppb.New(store), QueueId: 3, QueueOffset: ptr(int64(100 + i)),
				InvisibleDuration: durationpb.New(15 * time.Second), LiteTopic: ptr(lite), BodyEncoding: v2.Encoding_IDENTITY,
				MessageType: v2.MessageType_LITE,
			},
			Body: []byte("body-" + lite),
		}
	}
	reqs := make(chan *v2.ReceiveMessageRequest, 1)
	queue := &v2.MessageQueue{Id: 3, Permission: v2.Permission_READ_WRITE, Broker: &v2.Broker{Name: "b", Id: 0}}
	f := &fakeServer{
		queryRoute: routeTo(queue),
		receive: func(r *v2.ReceiveMessageRequest, st v2.MessagingService_ReceiveMessageServer) error {
			reqs <- r
			for _, resp := range []*v2.ReceiveMessageResponse{
				{Content: &v2.ReceiveMessageResponse_Status{Status: okStatus()}},
				{Content: &v2.ReceiveMessageResponse_Message{Message: msg(1, "lite-a")}},
				{Content: &v2.ReceiveMessageResponse_Message{Message: msg(2, "lite-b")}},
				{Content: &v2.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.Now()}},
			} {
				if err := st.Send(resp); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c := newTestClient(t, Config{Endpoints: startFake(t, f), Namespace: "ns"})
	got, err := c.Receive(t.Context(), ReceiveRequest{
		Group: "g", Topic: "main-topic", Lite: true, Filter: TagFilter("x||y"),
		InvisibleDuration: 15 * time.Second, LongPollingTimeout: 5 * time.Second, BatchSize: 7,
	})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d messages, want 2", len(got))
	}
	for i, lite := range []string{"lite-a", "lite-b"} {
		m := got[i]
		want := &ReceivedMessage{
			Topic: "main-topic", LiteTopic: lite, MessageID: "mid-" + lite, Tag: "tag-" + lite,
			Keys: []string{"k-" + lite, "k2"}, Properties: map[string]string{"p": lite},
			ReceiptHandle: "rh-" + lite, DeliveryAttempt: int32(i + 1), InvisibleDuration: 15 * time.Second,
			BornTime: born, BornHost: "host-1", StoreTime: store, QueueID: 3, QueueOffset: int64(101 + i),
			Body: []byte("body-" + lite),
		}
		if !reflect.DeepEqual(m, want) {
			t.Errorf("message %d\n got %+v\nwant %+v", i, m, want)
		}
	}
	r := <-reqs
	if r.GetGroup().GetName() != "g" || r.GetGroup().GetResourceNamespace() != "ns" ||
		r.GetMessageQueue().GetId() != 3 || r.GetMessageQueue().GetTopic().GetName() != "main-topic" ||
		r.GetFilterExpression().GetType() != v2.FilterType_TAG || r.GetFilterExpression().GetExpression() != "x||y" ||
		r.GetBatchSize() != 7 || r.GetInvisibleDuration().AsDuration() != 15*time.Second ||
		r.GetLongPollingTimeout().AsDuration() != 5*time.Second || r.GetAttemptId() == "" {
		t.Errorf("receive request %v", r)
	}
}

func TestReceiveWithoutStatusFails(t *testing.T) {
	f := &fakeServer{receive: func(_ *v2.ReceiveMessageRequest, st v2.MessagingService_ReceiveMessageServer) error {
		return st.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Message{Message: &v2.Message{Topic: &v2.Resource{Name: "t"}}}})
	}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f)})
	q := &v2.MessageQueue{Topic: &v2.Resource{Name: "t"}, Permission: v2.Permission_READ}
	msgs, err := c.Receive(t.Context(), ReceiveRequest{Group: "g", Topic: "t", Queue: q, InvisibleDuration: 10 * time.Second})
	if !errors.Is(err, ErrInternal) || len(msgs) != 1 {
		t.Errorf("stream without status: %d messages, %v; want the message and INTERNAL_ERROR", len(msgs), err)
	}
}
