package rmqfake_test

import (
	"context"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// Fixture names the tests of this package use.
const (
	normalTopic = "t-normal"
	normalGroup = "g-normal"
	liteTopic   = "t-lite"
	liteGroup   = "g-lite"
	exactGroup  = "g-exact"
)

// start returns a server with a normal topic and group and a LITE topic with
// a wildcard group and an exact group, driven by a manual clock.
func start(t *testing.T, opts ...rmqfake.Option) (*rmqfake.Server, *rmqfake.ManualClock) {
	t.Helper()
	clk := rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := rmqfake.NewForTest(t, append([]rmqfake.Option{rmqfake.WithClock(clk), rmqfake.FastLiteDispatch()}, opts...)...)
	must(t, s.CreateTopic(normalTopic, rmqfake.TopicNormal))
	must(t, s.CreateGroup(normalGroup, rmqfake.RetryMax(2)))
	must(t, s.CreateTopic(liteTopic, rmqfake.TopicLite))
	must(t, s.CreateGroup(liteGroup, rmqfake.LiteBind(liteTopic), rmqfake.Wildcard(), rmqfake.RetryMax(1)))
	must(t, s.CreateGroup(exactGroup, rmqfake.LiteBind(liteTopic)))
	return s, clk
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, s *rmqfake.Server, cfg client.Config) *client.Client {
	t.Helper()
	cfg.Endpoints = s.Addr()
	c, err := client.New(cfg)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func session(t *testing.T, s *rmqfake.Server, sc client.SessionConfig) *client.Client {
	t.Helper()
	c := newClient(t, s, client.Config{})
	if _, err := c.OpenSession(ctxT(t), sc); err != nil {
		t.Fatalf("open %v session: %v", sc.Type, err)
	}
	return c
}

func producer(t *testing.T, s *rmqfake.Server) *client.Client {
	return session(t, s, client.SessionConfig{Type: client.Producer})
}

func normalConsumer(t *testing.T, s *rmqfake.Server) *client.Client {
	return session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: normalGroup,
		Subscriptions: []client.Subscription{{Topic: normalTopic}}})
}

func liteConsumer(t *testing.T, s *rmqfake.Server) *client.Client {
	return session(t, s, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: liteGroup,
		Subscriptions: []client.Subscription{{Topic: liteTopic}}, LiteWildcard: true})
}

func send(t *testing.T, p *client.Client, msgs ...*client.Message) []string {
	t.Helper()
	res, err := p.Send(ctxT(t), msgs...)
	must(t, err)
	ids := make([]string, len(res))
	for i, r := range res {
		must(t, r.Err)
		ids[i] = r.MessageID
	}
	return ids
}

func normalReq(invisible time.Duration) client.ReceiveRequest {
	return client.ReceiveRequest{Group: normalGroup, Topic: normalTopic, InvisibleDuration: invisible, LongPollingTimeout: 5 * time.Second}
}

func liteReq(invisible time.Duration) client.ReceiveRequest {
	return client.ReceiveRequest{Group: liteGroup, Topic: liteTopic, Lite: true, InvisibleDuration: invisible, LongPollingTimeout: 5 * time.Second}
}

// receiveNow receives what is available at once; it fails the test if the
// poll would have to wait (the manual clock does not move by itself).
func receiveNow(t *testing.T, c *client.Client, req client.ReceiveRequest) []*client.ReceivedMessage {
	t.Helper()
	msgs, err := c.Receive(ctxT(t), req)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(msgs) == 0 {
		t.Fatal("receive returned nothing")
	}
	return msgs
}

func entry(m *client.ReceivedMessage) client.AckEntry {
	return client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}
}

func ackAll(t *testing.T, c *client.Client, group, topic string, msgs []*client.ReceivedMessage) {
	t.Helper()
	es := make([]client.AckEntry, len(msgs))
	for i, m := range msgs {
		es[i] = entry(m)
	}
	res, err := c.Ack(ctxT(t), group, topic, es)
	must(t, err)
	for _, r := range res {
		must(t, r.Err)
	}
}

// receiveAsync starts a receive and returns where its result arrives.
func receiveAsync(c *client.Client, req client.ReceiveRequest) <-chan received {
	ch := make(chan received, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		msgs, err := c.Receive(ctx, req)
		ch <- received{msgs, err}
	}()
	return ch
}

type received struct {
	msgs []*client.ReceivedMessage
	err  error
}

func waitPollers(t *testing.T, s *rmqfake.Server, n int) {
	t.Helper()
	if err := s.WaitForPollers(ctxT(t), n); err != nil {
		t.Fatalf("waiting for %d parked polls: %v", n, err)
	}
}
