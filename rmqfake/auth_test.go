package rmqfake_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

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

// TestAuthAnswersAsTheProxy: a malformed or wrong authorization header is
// refused with the 5.5.0 proxy's UNAUTHORIZED texts (its parsing: the first
// word and SignedHeaders unchecked, the user up to Credential's first '/');
// a correctly signed date of any age is accepted, as the proxy has no window
// on it; and a refused Telemetry command gets one status, then the stream
// ends.
func TestAuthAnswersAsTheProxy(t *testing.T) {
	t.Parallel()
	s, _ := start(t, rmqfake.Credentials("AK1", "secret-1"))
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	stub := v2.NewMessagingServiceClient(conn)
	sign := func(secret, date string) string {
		h := hmac.New(sha1.New, []byte(secret))
		h.Write([]byte(date))
		return hex.EncodeToString(h.Sum(nil))
	}
	const date = "20000101T000000Z" // 26 years old: still accepted
	good := "MQv2-HMAC-SHA1 Credential=AK1//Rocketmq, SignedHeaders=x-mq-date-time, Signature=" + sign("secret-1", date)
	ctxWith := func(authz, dt string) context.Context {
		kv := []string{"x-mq-client-id", "auth-test", "x-mq-language", "GO", "x-mq-protocol", "v2"}
		if authz != "" {
			kv = append(kv, "authorization", authz)
		}
		if dt != "" {
			kv = append(kv, "x-mq-date-time", dt)
		}
		return metadata.NewOutgoingContext(ctxT(t), metadata.Pairs(kv...))
	}
	for _, c := range []struct {
		name, authz, date, want string
	}{
		{"signed long ago", good, date, ""},
		{"any first word, no SignedHeaders", "X Credential=AK1, Signature=" + sign("secret-1", date), date, ""},
		{"no header", "", date, "username cannot be null."},
		{"no date", good, "", "datetime is null."},
		{"no space", "MQv2-HMAC-SHA1", date, "authentication header is incorrect."},
		{"a part without =", "MQv2-HMAC-SHA1 Credential=AK1, junk", date, "authentication keyValues length is incorrect, actual length=1."},
		{"credential of slashes", "MQv2-HMAC-SHA1 Credential=//, Signature=00", date, "authentication credential length is incorrect, actual length=0."},
		{"signature not hex", "MQv2-HMAC-SHA1 Credential=AK1, Signature=xyz", date, "create authentication context error."},
		{"no user", "MQv2-HMAC-SHA1 Credential=/Rocketmq, Signature=00", date, "username cannot be null."},
		{"unknown user", "MQv2-HMAC-SHA1 Credential=AK9//Rocketmq, Signature=" + sign("secret-1", date), date, "User:AK9 is not found."},
		{"wrong secret", "MQv2-HMAC-SHA1 Credential=AK1//Rocketmq, Signature=" + sign("secret-2", date), date, "check signature failed."},
		{"other date signed", good, "20000101T000001Z", "check signature failed."},
		{"no signature", "MQv2-HMAC-SHA1 Credential=AK1//Rocketmq", date, "check signature failed."},
	} {
		resp, err := stub.QueryRoute(ctxWith(c.authz, c.date), &v2.QueryRouteRequest{Topic: &v2.Resource{Name: normalTopic},
			Endpoints: &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: "127.0.0.1", Port: 8081}}}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		st := resp.GetStatus()
		switch {
		case c.want == "" && st.GetCode() != v2.Code_OK:
			t.Errorf("%s: %v, want OK", c.name, st)
		case c.want != "" && (st.GetCode() != v2.Code_UNAUTHORIZED || st.GetMessage() != c.want):
			t.Errorf("%s: %v, want UNAUTHORIZED %q", c.name, st, c.want)
		}
	}
	tel, err := stub.Telemetry(ctxWith("", date))
	must(t, err)
	typ := v2.ClientType_PRODUCER
	must(t, tel.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: &v2.Settings{ClientType: &typ}}}))
	cmd, err := tel.Recv()
	if err != nil || cmd.GetStatus().GetCode() != v2.Code_UNAUTHORIZED {
		t.Fatalf("refused Telemetry: %v, %v; want one UNAUTHORIZED status", cmd, err)
	}
	if _, err := tel.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after the refusal: %v, want the stream ended (EOF)", err)
	}
}
