package rmqfake_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

func TestCredentials(t *testing.T) {
	t.Parallel()
	s, _ := start(t, rmqfake.Credentials("AK1", "secret-1"), rmqfake.Credentials("AK2", "secret-2"))

	for _, cr := range []client.Credentials{{AccessKey: "AK1", AccessSecret: "secret-1"}, {AccessKey: "AK2", AccessSecret: "secret-2"}} {
		p := newClient(t, s, client.Config{Credentials: cr})
		if _, err := p.OpenSession(ctxT(t), client.SessionConfig{Type: client.Producer}); err != nil {
			t.Fatalf("%s: session: %v", cr.AccessKey, err)
		}
		send(t, p, &client.Message{Topic: normalTopic, Body: []byte("signed")})
	}

	for name, cr := range map[string]client.Credentials{
		"wrong secret": {AccessKey: "AK1", AccessSecret: "secret-2"},
		"unknown key":  {AccessKey: "AK3", AccessSecret: "secret-1"},
		"anonymous":    {},
	} {
		c := newClient(t, s, client.Config{Credentials: cr, RequestTimeout: 500 * time.Millisecond})
		_, err := c.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: []byte("x")})
		if !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: send: %v, want UNAUTHORIZED", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error names a secret: %v", name, err)
		}
		if _, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.Producer}); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: session: %v, want UNAUTHORIZED", name, err)
		}
	}
	if got := s.Stats().Topics[normalTopic].Sent; got != 2 {
		t.Errorf("topic has %d messages, want only the 2 signed ones", got)
	}
}

// Receipt handles carry no credential: a handle received by a signed client
// names neither its key nor its secret, and another key's client acks it.
func TestHandlesCarryNoCredentials(t *testing.T) {
	t.Parallel()
	s, _ := start(t, rmqfake.Credentials("AK-RECEIVER", "receiver-secret"), rmqfake.Credentials("AK-ACKER", "acker-secret"))
	p := newClient(t, s, client.Config{Credentials: client.Credentials{AccessKey: "AK-RECEIVER", AccessSecret: "receiver-secret"}})
	send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})
	c := newClient(t, s, client.Config{Credentials: client.Credentials{AccessKey: "AK-RECEIVER", AccessSecret: "receiver-secret"}})
	_, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.SimpleConsumer, Group: normalGroup, Subscriptions: []client.Subscription{{Topic: normalTopic}}})
	must(t, err)
	m := receiveNow(t, c, normalReq(time.Minute))[0]
	for _, secret := range []string{"AK-RECEIVER", "receiver-secret", c.ID()} {
		if strings.Contains(m.ReceiptHandle, secret) {
			t.Errorf("receipt handle %q contains %q", m.ReceiptHandle, secret)
		}
	}
	acker := newClient(t, s, client.Config{Credentials: client.Credentials{AccessKey: "AK-ACKER", AccessSecret: "acker-secret"}})
	ackAll(t, acker, normalGroup, normalTopic, []*client.ReceivedMessage{m})
	if g := s.Stats().Groups[normalGroup]; g.Acked != 1 {
		t.Errorf("acked %d, want 1", g.Acked)
	}
}
