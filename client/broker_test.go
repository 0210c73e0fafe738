package client_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// Tests against the real RocketMQ 5.5.0 broker (RMQFLOW_ENDPOINT), on the
// fixtures reserved for this package. They run one after another: a filtered
// poll consumes (skips) the group's non-matching messages, so two tests
// polling rmqflow-normal-client-g at once could take each other's messages.

const (
	liteTopic   = "rmqflow-lite-client"
	liteGroup   = "rmqflow-lite-client-g"
	normalTopic = "rmqflow-normal-client"
	normalGroup = "rmqflow-normal-client-g"
	exactTopic  = "rmqflow-lite-x"
	exactGroup  = "rmqflow-lite-x-g"

	poll      = 5 * time.Second  // the proxy's minimum long-polling time
	invisible = 10 * time.Second // the broker's minimum invisible duration
)

func ptr[T any](v T) *T { return &v }

// brokerClient returns a client of the real broker, closed when the test ends.
func brokerClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: rmqtest.Endpoint(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// withSession returns a client with an open session of cfg.
func withSession(t *testing.T, cfg client.SessionConfig) (*client.Client, *client.Session) {
	t.Helper()
	c := brokerClient(t)
	s, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatalf("OpenSession(%v, %s): %v", cfg.Type, cfg.Group, err)
	}
	return c, s
}

func producer(t *testing.T, topic string) *client.Client {
	c, _ := withSession(t, client.SessionConfig{Type: client.Producer, Topics: []string{topic}})
	return c
}

func sendOK(t *testing.T, p *client.Client, m *client.Message) string {
	t.Helper()
	res, err := p.Send(rmqtest.Context(t, 10*time.Second), m)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if len(res) != 1 || res[0].Err != nil || res[0].MessageID == "" {
		t.Fatalf("Send result %+v", res)
	}
	return res[0].MessageID
}

func entryOf(m *client.ReceivedMessage) client.AckEntry {
	return client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}
}

// collect polls until want reports done or ctx leaves less than one poll. It
// returns every message received; the caller acks them.
func collect(ctx context.Context, t *testing.T, c *client.Client, req client.ReceiveRequest, done func([]*client.ReceivedMessage) bool) []*client.ReceivedMessage {
	t.Helper()
	var got []*client.ReceivedMessage
	for !done(got) {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < poll+500*time.Millisecond {
			break
		}
		msgs, err := c.Receive(ctx, req)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		got = append(got, msgs...)
	}
	return got
}

// ackAll acks msgs (one RPC per topic) and fails on any error.
func ackAll(t *testing.T, c *client.Client, group string, msgs []*client.ReceivedMessage) {
	t.Helper()
	byTopic := map[string][]client.AckEntry{}
	for _, m := range msgs {
		byTopic[m.Topic] = append(byTopic[m.Topic], entryOf(m))
	}
	for topic, entries := range byTopic {
		res, err := c.Ack(rmqtest.Context(t, 10*time.Second), group, topic, entries)
		if err != nil {
			t.Errorf("Ack: %v", err)
			continue
		}
		for _, r := range res {
			if r.Err != nil {
				t.Errorf("Ack %s: %v", r.MessageID, r.Err)
			}
		}
	}
}

func hasKey(m *client.ReceivedMessage, key string) bool { return slices.Contains(m.Keys, key) }

func codeOf(err error) client.Code {
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return -1
}

// TestNoGoroutineLeakRealBrokerLiteSession: a LiteSimpleConsumer wildcard
// session and a producer, used for one message, leave nothing running after
// Close. No t.Parallel (see leak_test.go).
func TestNoGoroutineLeakRealBrokerLiteSession(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	ep := rmqtest.Endpoint(t)
	ctx := rmqtest.Context(t, 60*time.Second)
	quiet := slog.New(slog.DiscardHandler)
	cons, err := client.New(client.Config{Endpoints: ep, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := client.New(client.Config{Endpoints: ep, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cons.Close(ctx); _ = prod.Close(ctx) }() // on early failure
	s, err := cons.OpenSession(ctx, client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: liteGroup,
		Subscriptions: []client.Subscription{{Topic: liteTopic}}, LiteWildcard: true,
	})
	if err != nil {
		t.Fatalf("lite session: %v", err)
	}
	if s.WireType() != v2.ClientType_LITE_PUSH_CONSUMER {
		t.Errorf("wire type %v, want the 5.5.0 fallback LITE_PUSH_CONSUMER", s.WireType())
	}
	if _, err := prod.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{liteTopic}}); err != nil {
		t.Fatalf("producer session: %v", err)
	}
	lite := rmqtest.Unique("leak")
	id := sendOK(t, prod, &client.Message{Topic: liteTopic, LiteTopic: lite, Body: []byte("leak-check")})
	req := client.ReceiveRequest{Group: liteGroup, Topic: liteTopic, Lite: true, InvisibleDuration: invisible, LongPollingTimeout: poll}
	got := collect(ctx, t, cons, req, func(ms []*client.ReceivedMessage) bool {
		return slices.ContainsFunc(ms, func(m *client.ReceivedMessage) bool { return m.MessageID == id })
	})
	ackAll(t, cons, liteGroup, got)
	i := slices.IndexFunc(got, func(m *client.ReceivedMessage) bool { return m.MessageID == id })
	if i < 0 {
		t.Fatalf("message %s to lite topic %s not received (%d others)", id, lite, len(got))
	}
	if m := got[i]; m.LiteTopic != lite || m.Topic != liteTopic || string(m.Body) != "leak-check" {
		t.Errorf("received %+v", m)
	}
	if err := cons.Close(ctx); err != nil {
		t.Errorf("consumer Close: %v", err)
	}
	if err := prod.Close(ctx); err != nil {
		t.Errorf("producer Close: %v", err)
	}
}
