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
		"retry=N", "bind=TOPIC", "wildcard", "exclusive"} {
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
