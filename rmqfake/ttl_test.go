package rmqfake_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestLiteTTL: a lite topic of a main topic with lite.topic.expiration is
// deleted — unconsumed messages and all — once its last message is older than
// the TTL and than MinLiteTTL (15 min), by the scan that runs every 2 min
// from 15 min after start; silently. A main topic without TTL keeps its lite
// topics; a lite topic deleted comes back with the next message.
func TestLiteTTL(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-ttl", rmqfake.TopicLite, rmqfake.LiteTTL(1)))
	must(t, s.CreateGroup("g-ttl", rmqfake.LiteBind("t-ttl"), rmqfake.Wildcard()))
	p := producer(t, s)
	backlog := func(topic, lite string) (int64, bool) {
		c, ok := s.Stats().Topics[topic].LiteTopics[lite]
		return c.Backlog, ok
	}
	send(t, p, &client.Message{Topic: "t-ttl", LiteTopic: "a", Body: []byte("a1")})
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "a", Body: []byte("kept")})
	used := s.Stats().StoredBytes

	clk.Advance(14 * time.Minute)
	send(t, p, &client.Message{Topic: "t-ttl", LiteTopic: "b", Body: []byte("b1")})
	clk.Advance(time.Minute) // T+15 min: the first scan
	if _, ok := backlog("t-ttl", "a"); ok {
		t.Errorf("lite topic a, idle 15 min with a 1 min TTL, was not deleted at the first scan")
	}
	if n, ok := backlog("t-ttl", "b"); !ok || n != 1 {
		t.Errorf("lite topic b, idle 1 min (under MinLiteTTL): backlog %d (held %v), want kept with 1", n, ok)
	}
	if n, ok := backlog(liteTopic, "a"); !ok || n != 1 {
		t.Errorf("a lite topic of a main topic without TTL: backlog %d (held %v), want kept", n, ok)
	}
	if now := s.Stats().StoredBytes; now >= used+int64(len("b1"))+rmqfake.MessageOverhead {
		t.Errorf("stored bytes %d after the deletion, want less than before it plus b1's (%d)", now, used)
	}
	clk.Advance(15 * time.Minute) // b idle 16 min: gone at the scan of T+30 min
	if _, ok := backlog("t-ttl", "b"); ok {
		t.Errorf("lite topic b still held 16 min after its last message")
	}

	// The next message brings the lite topic back, for its consumers.
	send(t, p, &client.Message{Topic: "t-ttl", LiteTopic: "a", Body: []byte("a2")})
	c := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "g-ttl",
		Subscriptions: []client.Subscription{{Topic: "t-ttl"}}, LiteWildcard: true})
	got := receiveNow(t, c, client.ReceiveRequest{Group: "g-ttl", Topic: "t-ttl", Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if fmtSlice(bodies(got)) != "[a2]" {
		t.Errorf("after the deletion the wildcard group got %v, want only [a2]", bodies(got))
	}
}

// TestLiteTTLForgetsExactSubscribers: a lite topic deleted for its TTL takes
// its exact subscribers' claim on its messages with it (they left its
// subscription silently). A later message of the same name, read and acked
// by a wildcard group, is freed; before the fix the deleted topic's old
// subscriber kept every later message of that name stored for good.
func TestLiteTTLForgetsExactSubscribers(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-ttl2", rmqfake.TopicLite, rmqfake.LiteTTL(1)))
	must(t, s.CreateGroup("g-ttl2", rmqfake.LiteBind("t-ttl2"), rmqfake.Wildcard()))
	must(t, s.CreateGroup("g-ttl2-exact", rmqfake.LiteBind("t-ttl2")))
	p := producer(t, s)
	ex := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "g-ttl2-exact",
		Subscriptions: []client.Subscription{{Topic: "t-ttl2"}}})
	must(t, ex.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: "t-ttl2", Group: "g-ttl2-exact", LiteTopics: []string{"x"}}))
	send(t, p, &client.Message{Topic: "t-ttl2", LiteTopic: "x", Body: []byte("x1")})
	clk.Advance(15 * time.Minute) // the first scan deletes x, idle 15 min
	if _, ok := s.Stats().Topics["t-ttl2"].LiteTopics["x"]; ok {
		t.Fatal("lite topic x not deleted at the first scan")
	}
	if n := s.Stats().LiteSubscriptions; n != 0 {
		t.Fatalf("%d lite subscriptions after x was deleted, want 0", n)
	}

	send(t, p, &client.Message{Topic: "t-ttl2", LiteTopic: "x", Body: []byte("x2")})
	w := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "g-ttl2",
		Subscriptions: []client.Subscription{{Topic: "t-ttl2"}}, LiteWildcard: true})
	got := receiveNow(t, w, client.ReceiveRequest{Group: "g-ttl2", Topic: "t-ttl2", Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if fmtSlice(bodies(got)) != "[x2]" {
		t.Fatalf("the wildcard group got %v, want [x2]", bodies(got))
	}
	ackAll(t, w, "g-ttl2", "t-ttl2", got)
	if st := s.Stats(); st.Topics["t-ttl2"].LiteTopics["x"].Backlog != 0 || st.Held != 0 {
		t.Errorf("after the wildcard group acked x2: x %+v, %d messages held; want none (freed)", st.Topics["t-ttl2"].LiteTopics["x"], st.Held)
	}
}

// TestFastLiteDispatchWithoutClients: with FastLiteDispatch a wildcard
// group's shared event set takes every lite topic with a backlog before any
// client joined (a joining client needs no walk of every lite topic); lite
// topics deleted for their TTL meanwhile leave it, and the client that joins
// afterwards gets only what is left.
func TestFastLiteDispatchWithoutClients(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-nocl", rmqfake.TopicLite, rmqfake.LiteTTL(1)))
	must(t, s.CreateGroup("g-nocl", rmqfake.LiteBind("t-nocl"), rmqfake.Wildcard()))
	p := producer(t, s)
	const n = 300
	for i := range n {
		send(t, p, &client.Message{Topic: "t-nocl", LiteTopic: fmt.Sprintf("l%03d", i), Body: []byte("old")})
	}
	if got := s.Stats().Groups["g-nocl"].LiteEvents; got != n {
		t.Fatalf("no client yet: %d lite topics in the shared set, want %d", got, n)
	}
	clk.Advance(16 * time.Minute) // the TTL scan deletes them all
	if got := s.Stats().Groups["g-nocl"].LiteEvents; got != 0 {
		t.Fatalf("after the TTL deleted every lite topic: %d in the shared set, want 0", got)
	}
	send(t, p, &client.Message{Topic: "t-nocl", LiteTopic: "l007", Body: []byte("new")})
	c := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "g-nocl",
		Subscriptions: []client.Subscription{{Topic: "t-nocl"}}, LiteWildcard: true})
	got := receiveNow(t, c, client.ReceiveRequest{Group: "g-nocl", Topic: "t-nocl", Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second, BatchSize: 32})
	if fmtSlice(bodies(got)) != "[new]" {
		t.Errorf("the client joining after the deletion got %v, want only [new]", bodies(got))
	}
}
