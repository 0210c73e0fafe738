package client

import (
	"context"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPollerRepeatsLostAttempts: after a poll whose answer was lost (no
// status and no message came back: a transport failure, a deadline, a
// stream that ended empty, or PROXY_TIMEOUT) the next poll repeats its
// attempt id and queue; after any answer — messages, MESSAGE_NOT_FOUND,
// another status, or a message followed by a failure — the next poll is a
// new attempt. The route has two queues, which plain polls take in turn.
func TestPollerRepeatsLostAttempts(t *testing.T) {
	statusOf := func(c v2.Code) *v2.ReceiveMessageResponse {
		return &v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: ackStatus(c)}}
	}
	message := &v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Message{Message: &v2.Message{
		Topic: &v2.Resource{Name: "t"}, SystemProperties: &v2.SystemProperties{MessageId: "m", ReceiptHandle: ptr("h")}}}}
	// Each answer sends its responses, then ends the stream with err.
	type answer struct {
		send []*v2.ReceiveMessageResponse
		err  error
	}
	cases := []struct {
		name   string
		answer answer
		repeat bool
	}{
		{"UNAVAILABLE", answer{err: status.Error(codes.Unavailable, "down")}, true},
		{"DEADLINE_EXCEEDED", answer{err: status.Error(codes.DeadlineExceeded, "late")}, true},
		{"stream ended with nothing", answer{}, true},
		{"PROXY_TIMEOUT", answer{send: []*v2.ReceiveMessageResponse{statusOf(v2.Code_PROXY_TIMEOUT)}}, true},
		{"messages", answer{send: []*v2.ReceiveMessageResponse{statusOf(v2.Code_OK), message}}, false},
		{"MESSAGE_NOT_FOUND", answer{send: []*v2.ReceiveMessageResponse{statusOf(v2.Code_MESSAGE_NOT_FOUND)}}, false},
		{"TOO_MANY_REQUESTS", answer{send: []*v2.ReceiveMessageResponse{statusOf(v2.Code_TOO_MANY_REQUESTS)}}, false},
		{"a message, then UNAVAILABLE", answer{send: []*v2.ReceiveMessageResponse{statusOf(v2.Code_OK), message}, err: status.Error(codes.Unavailable, "cut")}, false},
		{"a message without a status", answer{send: []*v2.ReceiveMessageResponse{message}}, false},
	}
	var (
		mu    sync.Mutex
		next  answer
		reqs  []*v2.ReceiveMessageRequest
		queue = func(id int32) *v2.MessageQueue {
			return &v2.MessageQueue{Topic: &v2.Resource{Name: "t"}, Id: id, Permission: v2.Permission_READ_WRITE, Broker: &v2.Broker{Name: "b"}}
		}
	)
	f := &fakeServer{
		queryRoute: func(context.Context, *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
			return &v2.QueryRouteResponse{Status: okStatus(), MessageQueues: []*v2.MessageQueue{queue(0), queue(1)}}, nil
		},
		receive: func(r *v2.ReceiveMessageRequest, st v2.MessagingService_ReceiveMessageServer) error {
			mu.Lock()
			a := next
			next = answer{send: []*v2.ReceiveMessageResponse{statusOf(v2.Code_MESSAGE_NOT_FOUND)}}
			reqs = append(reqs, r)
			mu.Unlock()
			for _, resp := range a.send {
				if err := st.Send(resp); err != nil {
					return err
				}
			}
			return a.err
		},
	}
	next = answer{send: []*v2.ReceiveMessageResponse{statusOf(v2.Code_MESSAGE_NOT_FOUND)}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f)})
	req := ReceiveRequest{Group: "g", Topic: "t", InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := c.NewPoller()
			for range 2 { // the queue cursor moves on: a repeat must still go to the lost poll's queue
				if _, err := p.Receive(t.Context(), req); err != nil {
					t.Fatalf("plain poll: %v", err)
				}
			}
			mu.Lock()
			next = tc.answer
			mu.Unlock()
			_, _ = p.Receive(t.Context(), req)
			_, _ = p.Receive(t.Context(), req)
			mu.Lock()
			first, second := reqs[len(reqs)-2], reqs[len(reqs)-1]
			mu.Unlock()
			same := first.GetAttemptId() == second.GetAttemptId()
			if first.GetAttemptId() == "" || same != tc.repeat {
				t.Errorf("attempt ids %q then %q: repeated %v, want %v", first.GetAttemptId(), second.GetAttemptId(), same, tc.repeat)
			}
			if tc.repeat && first.GetMessageQueue().GetId() != second.GetMessageQueue().GetId() {
				t.Errorf("the repeated attempt went to queue %d, the lost one to %d", second.GetMessageQueue().GetId(), first.GetMessageQueue().GetId())
			}
		})
	}
}
