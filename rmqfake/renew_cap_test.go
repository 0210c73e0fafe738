package rmqfake_test

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// TestLiteRenewCap: a lite push consumer holding more than 100 auto-renewed,
// unacked messages has its auto_renew receives refused (FORBIDDEN), as by the
// proxy (maxLiteRenewNumPerChannel); acking them lifts it.
func TestLiteRenewCap(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	for i := range 102 {
		send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "cap" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Body: []byte("x")})
	}
	c := liteConsumer(t, s)
	req := liteReq(10 * time.Second)
	req.AutoRenew = true
	var held []*client.ReceivedMessage
	for len(held) <= 100 {
		held = append(held, receiveNow(t, c, req)...)
	}
	if _, err := c.Receive(ctxT(t), req); codeOf(err) != client.CodeForbidden {
		t.Fatalf("a receive while holding %d auto-renewed messages: %v, want FORBIDDEN", len(held), err)
	}
	ackAll(t, c, liteGroup, liteTopic, held)
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "cap-after", Body: []byte("x")})
	if got := receiveNow(t, c, req); len(got) != 1 {
		t.Errorf("after the acks: %d messages, want 1", len(got))
	}
}
