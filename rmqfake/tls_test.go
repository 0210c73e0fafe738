package rmqfake_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
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

// A client that trusts CertificatePEM verifies the server, before and after
// a Restart (the certificate is kept); one that trusts another server's
// certificate does not.
func TestCertificatePEMVerifies(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	other, _ := start(t)
	pool := func(srv *rmqfake.Server) *x509.CertPool {
		pemBytes, err := srv.CertificatePEM()
		must(t, err)
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(pemBytes) {
			t.Fatalf("CertificatePEM is not PEM: %q", pemBytes)
		}
		return p
	}
	first, err := s.CertificatePEM()
	must(t, err)
	verified := newClient(t, s, client.Config{TLS: &tls.Config{RootCAs: pool(s)}, RequestTimeout: 2 * time.Second})
	if _, err := verified.QueryRoute(ctxT(t), normalTopic); err != nil {
		t.Fatalf("a client trusting CertificatePEM: %v", err)
	}
	must(t, s.Restart())
	again, err := s.CertificatePEM()
	must(t, err)
	if !bytes.Equal(first, again) {
		t.Error("the certificate changed across Restart")
	}
	after := newClient(t, s, client.Config{TLS: &tls.Config{RootCAs: pool(s)}, RequestTimeout: 2 * time.Second})
	if _, err := after.QueryRoute(ctxT(t), normalTopic); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	wrong := newClient(t, s, client.Config{TLS: &tls.Config{RootCAs: pool(other)}, RequestTimeout: time.Second})
	if _, err := wrong.QueryRoute(ctxT(t), normalTopic); err == nil {
		t.Error("a client trusting another server's certificate verified this one")
	}
}
