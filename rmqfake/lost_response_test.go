package rmqfake_test

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Verdict.ErrAfter lets the call take effect and fails it: the message is
// stored although the sender sees Unavailable (a lost response).
func TestInterceptErrAfterStoresAndFails(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	remove := s.Intercept("SendMessage", func(rmqfake.Call) rmqfake.Verdict {
		return rmqfake.Verdict{ErrAfter: status.Error(codes.Unavailable, "response lost")}
	})
	_, err := p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: []byte("x")})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("send under ErrAfter: %v, want Unavailable", err)
	}
	if got := s.Stats().Topics[normalTopic].Sent; got != 1 {
		t.Fatalf("topic holds %d messages after a lost response, want 1", got)
	}
	remove()
}

// Verdict.ErrAfter on ReceiveMessage: the poll pops, then fails instead of
// answering; what it popped stays in flight (a normal topic's message does
// not come back before its invisible duration ends), as when the broker
// popped and the answer was lost.
func TestInterceptErrAfterReceivePops(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	p := producer(t, s)
	send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})
	c := normalConsumer(t, s)
	remove := s.Intercept("ReceiveMessage", func(rmqfake.Call) rmqfake.Verdict {
		return rmqfake.Verdict{ErrAfter: status.Error(codes.DeadlineExceeded, "answer lost")}
	})
	req := client.ReceiveRequest{Group: normalGroup, Topic: normalTopic, InvisibleDuration: 30 * time.Second, LongPollingTimeout: 5 * time.Second}
	if msgs, err := c.Receive(ctxT(t), req); status.Code(err) != codes.DeadlineExceeded || len(msgs) != 0 {
		t.Fatalf("receive under ErrAfter: %d messages, %v; want none and DeadlineExceeded", len(msgs), err)
	}
	remove()
	if got := s.Stats().Groups[normalGroup].InFlight; got != 1 {
		t.Fatalf("%d messages in flight after the lost answer, want 1", got)
	}
	clk.Advance(31 * time.Second)
	msgs, err := c.Receive(ctxT(t), req)
	if err != nil || len(msgs) != 1 || msgs[0].DeliveryAttempt != 2 {
		t.Fatalf("after the invisible duration: %d messages, %v; want the message again, attempt 2", len(msgs), err)
	}
}
