package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestSendKeepsLiteOrder: lite messages go one per RPC, yet the messages of
// one lite topic are stored (and so consumed) in the order given.
func TestSendKeepsLiteOrder(t *testing.T) {
	s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	if err := s.CreateTopic("main", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, _ := client.New(client.Config{Endpoints: s.Addr()})
	defer p.Close(ctx)
	if _, err := p.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{"main"}}); err != nil {
		t.Fatal(err)
	}
	var msgs []*client.Message
	for i := 0; i < 20; i++ {
		msgs = append(msgs, &client.Message{Topic: "main", LiteTopic: fmt.Sprintf("l%d", i%2), Body: []byte(fmt.Sprint(i))})
	}
	res, err := p.Send(ctx, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
	}
	c, _ := client.New(client.Config{Endpoints: s.Addr()})
	defer c.Close(ctx)
	if _, err := c.OpenSession(ctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "g",
		Subscriptions: []client.Subscription{{Topic: "main"}}, LiteWildcard: true}); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for n := 0; n < 20; {
		rs, err := c.Receive(ctx, client.ReceiveRequest{Group: "g", Topic: "main", Lite: true, InvisibleDuration: 30 * time.Second, LongPollingTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var entries []client.AckEntry
		for _, m := range rs {
			got[m.LiteTopic] = append(got[m.LiteTopic], string(m.Body))
			entries = append(entries, client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic})
			n++
		}
		if _, err := c.Ack(ctx, "g", "main", entries); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got["l0"]) != "[0 2 4 6 8 10 12 14 16 18]" || fmt.Sprint(got["l1"]) != "[1 3 5 7 9 11 13 15 17 19]" {
		t.Fatalf("order per lite topic: %v", got)
	}
}
