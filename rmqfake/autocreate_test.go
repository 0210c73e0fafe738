package rmqfake_test

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// In auto-create mode the first use creates a topic of the message's type
// and a group (a wildcard lite group for a lite consumer).
func TestAutoCreate(t *testing.T) {
	t.Parallel()
	s := rmqfake.NewForTest(t, rmqfake.AutoCreate(), rmqfake.FastLiteDispatch())
	c := session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "auto-g",
		Subscriptions: []client.Subscription{{Topic: "auto-lite"}}, LiteWildcard: true})
	p := producer(t, s)
	send(t, p, &client.Message{Topic: "auto-lite", LiteTopic: "x", Body: []byte("lite")})
	send(t, p, &client.Message{Topic: "auto-normal", Body: []byte("normal")})
	send(t, p, &client.Message{Topic: "auto-fifo", MessageGroup: "g1", Body: []byte("fifo")})
	st := s.Stats()
	for name, want := range map[string]rmqfake.TopicType{"auto-lite": rmqfake.TopicLite, "auto-normal": rmqfake.TopicNormal, "auto-fifo": rmqfake.TopicFIFO} {
		if st.Topics[name].Type != want {
			t.Errorf("%s: type %v, want %v", name, st.Topics[name].Type, want)
		}
	}
	got := receiveNow(t, c, client.ReceiveRequest{Group: "auto-g", Topic: "auto-lite", Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if len(got) != 1 || string(got[0].Body) != "lite" {
		t.Fatalf("auto-created lite group got %v", bodies(got))
	}
	n := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "auto-n", Subscriptions: []client.Subscription{{Topic: "auto-normal"}}})
	got = receiveNow(t, n, client.ReceiveRequest{Group: "auto-n", Topic: "auto-normal", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if len(got) != 1 || string(got[0].Body) != "normal" {
		t.Fatalf("auto-created normal group got %v", bodies(got))
	}
	if _, err := p.QueryRoute(ctxT(t), "auto-routed"); err != nil {
		t.Errorf("route of a new topic in auto-create mode: %v", err)
	}
}

// Without auto-create nothing appears by itself.
func TestNoAutoCreateByDefault(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	if _, err := p.Send(ctxT(t), &client.Message{Topic: "nope", Body: []byte("x")}); codeOf(err) != client.CodeMessagePropertyConflict {
		t.Errorf("send to an unknown topic: %v", err)
	}
	c := newClient(t, s, client.Config{RequestTimeout: time.Second})
	if _, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.SimpleConsumer, Group: "nope-g", Subscriptions: []client.Subscription{{Topic: normalTopic}}}); err == nil {
		t.Error("session for an unknown group opened")
	}
	if _, ok := s.Stats().Topics["nope"]; ok {
		t.Error("topic nope was created")
	}
}
