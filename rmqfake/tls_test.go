package rmqfake_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// One port serves plaintext and TLS, like the proxy.
func TestTLSAndPlaintextOnOnePort(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	secure := newClient(t, s, client.Config{TLS: &tls.Config{InsecureSkipVerify: true}})
	if _, err := secure.OpenSession(ctxT(t), client.SessionConfig{Type: client.Producer}); err != nil {
		t.Fatalf("TLS session: %v", err)
	}
	send(t, secure, &client.Message{Topic: normalTopic, Body: []byte("over tls")})
	c := normalConsumer(t, s) // plaintext
	m := receiveNow(t, c, normalReq(time.Minute))
	if string(m[0].Body) != "over tls" {
		t.Fatalf("got %q", m[0].Body)
	}
	ackAll(t, secure, normalGroup, normalTopic, m)
	strict := newClient(t, s, client.Config{TLS: &tls.Config{}, RequestTimeout: time.Second})
	if _, err := strict.QueryRoute(ctxT(t), normalTopic); err == nil {
		t.Error("a client verifying certificates accepted rmqfake's self-signed one")
	}
}
