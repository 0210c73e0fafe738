package rmqfake_test

import (
	"testing"

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
