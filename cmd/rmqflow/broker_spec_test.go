package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestBrokerSpecWordsTakeEffect: every word of the -topic and -group SPEC
// grammar the help documents is accepted, and the ones the emulator can show
// take effect through the path runBroker uses (resources, then create): a
// transaction topic, a lite topic with ttl=MINUTES (deleted once idle past
// it), an exclusive group (a second client's PARTIAL_ADD takes the lite
// topic from the first), all in the -namespace given. Before the fix
// create() dropped ttl and exclusive: the spec was accepted and built a
// plain topic and group.
func TestBrokerSpecWordsTakeEffect(t *testing.T) {
	var help bytes.Buffer
	brokerHelp(&help)
	text := strings.Join(strings.Fields(help.String()), " ")
	for _, w := range []string{"normal", "lite", "fifo", "delay", "transaction", "queues=N", "ttl=MINUTES",
		"retry=N", "bind=TOPIC", "wildcard", "exclusive", "event-cap=N"} {
		if !strings.Contains(text, w) {
			t.Errorf("the broker help does not document the SPEC word %q", w)
		}
	}

	fs, f := brokerFlagSet(&bytes.Buffer{})
	const ns = "spec-ns"
	args := []string{"-namespace", ns,
		"-topic", "t-n:normal:queues=8", "-topic", "t-f:fifo", "-topic", "t-d:delay", "-topic", "t-tx:transaction",
		"-topic", "t-ttl:lite:ttl=1", "-topic", "t-x:lite",
		"-group", "g-f:fifo:retry=3", "-group", "g-ttl:bind=t-ttl:wildcard", "-group", "g-x:bind=t-x:exclusive"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	res, err := f.resources()
	if err != nil {
		t.Fatal(err)
	}
	clk := rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := rmqfake.NewForTest(t, rmqfake.WithClock(clk), rmqfake.FastLiteDispatch())
	if err := create(s, res, f.namespace); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	for name, typ := range map[string]rmqfake.TopicType{"t-n": rmqfake.TopicNormal, "t-f": rmqfake.TopicFIFO,
		"t-d": rmqfake.TopicDelay, "t-tx": rmqfake.TopicTransaction, "t-ttl": rmqfake.TopicLite, "t-x": rmqfake.TopicLite} {
		if got, ok := st.Topics[ns+"%"+name]; !ok || got.Type != typ {
			t.Errorf("topic %s: %+v (found %v), want a %s topic in namespace %s", name, got.Type, ok, typ, ns)
		}
	}
	for _, g := range []string{"g-f", "g-ttl", "g-x"} {
		if _, ok := st.Groups[ns+"%"+g]; !ok {
			t.Errorf("group %s not created in namespace %s", g, ns)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(sc client.SessionConfig) *client.Client {
		c, err := client.New(client.Config{Endpoints: s.Addr(), Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		if _, err := c.OpenSession(ctx, sc); err != nil {
			t.Fatalf("open %v session: %v", sc.Type, err)
		}
		return c
	}

	// exclusive: the second client's PARTIAL_ADD takes lite topic x from
	// the first, so one subscription is left, not two.
	for i := 0; i < 2; i++ {
		c := open(client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "g-x", Subscriptions: []client.Subscription{{Topic: "t-x"}}})
		if err := c.SyncLiteSubscription(ctx, client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: "t-x", Group: "g-x", LiteTopics: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Stats().LiteSubscriptions; n != 1 {
		t.Errorf("exclusive: two clients of g-x added lite topic x, %d subscriptions held, want 1 (the second took it over)", n)
	}

	// ttl=1: a lite topic idle past its TTL (and MinLiteTTL, 15 min) is
	// deleted by the scan 15 min after start.
	p := open(client.SessionConfig{Type: client.Producer})
	if _, err := p.Send(ctx, &client.Message{Topic: "t-ttl", LiteTopic: "a", Body: []byte("a1")}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Stats().Topics[ns+"%t-ttl"].LiteTopics["a"]; !ok {
		t.Fatal("lite topic a not stored")
	}
	clk.Advance(15 * time.Minute)
	if _, ok := s.Stats().Topics[ns+"%t-ttl"].LiteTopics["a"]; ok {
		t.Error("ttl=1: lite topic a, idle 15 min, still held after the TTL scan")
	}
}

// TestBrokerLiteDispatchFlags: the lite dispatch knobs reach the server: a
// group SPEC's event-cap=N caps its clients' event sets, and
// -max-client-event-count the others'; -lite-event-check-interval and
// -lite-full-dispatch-delay time the full dispatch that brings the rest.
func TestBrokerLiteDispatchFlags(t *testing.T) {
	fs, f := brokerFlagSet(&bytes.Buffer{})
	args := []string{"-max-client-event-count", "12", "-lite-event-check-interval", "1s", "-lite-full-dispatch-delay", "3s",
		"-topic", "t:lite", "-group", "g10:bind=t:wildcard:event-cap=10", "-group", "g:bind=t:wildcard"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	res, err := f.resources()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.options()
	if err != nil {
		t.Fatal(err)
	}
	clk := rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := rmqfake.NewForTest(t, append(opts[1:], rmqfake.WithClock(clk))...) // opts[0] is -listen
	if err := create(s, res, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(sc client.SessionConfig) *client.Client {
		c, err := client.New(client.Config{Endpoints: s.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		if _, err := c.OpenSession(ctx, sc); err != nil {
			t.Fatalf("open %v session: %v", sc.Type, err)
		}
		return c
	}
	var cg *client.Client
	for _, g := range []string{"g10", "g"} {
		cg = open(client.SessionConfig{Type: client.LiteSimpleConsumer, Group: g, Subscriptions: []client.Subscription{{Topic: "t"}}, LiteWildcard: true})
	}
	clk.Advance(5 * time.Second) // the joins' full dispatches
	p := open(client.SessionConfig{Type: client.Producer})
	for i := range 30 {
		if _, err := p.Send(ctx, &client.Message{Topic: "t", LiteTopic: "l" + strings.Repeat("x", i), Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	events := func() (int, int) { g := s.Stats().Groups; return g["g10"].LiteEvents, g["g"].LiteEvents }
	if a, b := events(); a != 10 || b != 12 {
		t.Fatalf("after 30 lite topics got a message: %d and %d in the event sets, want 10 (event-cap=10) and 12 (-max-client-event-count)", a, b)
	}
	msgs, err := cg.Receive(ctx, client.ReceiveRequest{Group: "g", Topic: "t", Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if err != nil || len(msgs) != 12 {
		t.Fatalf("receive of g: %d messages, %v; want 12", len(msgs), err)
	}
	// The full dispatch is due 3 s after the refusals, run by the 1 s scan.
	clk.Advance(2 * time.Second)
	if _, b := events(); b != 0 {
		t.Fatalf("2 s after the refusals: %d lite topics in g's set, want 0", b)
	}
	clk.Advance(time.Second)
	if _, b := events(); b != 12 {
		t.Fatalf("3 s after the refusals: %d lite topics in g's set, want 12 (the full dispatch offers the 30 lite topics not acked, up to the cap)", b)
	}
}
