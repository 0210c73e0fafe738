package rmqfake

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"sync"
	"time"
)

// Like the proxy (ProxyAndTlsProtocolNegotiator), rmqfake serves plaintext
// and TLS on the same port: a connection whose first byte opens a TLS
// handshake is served over TLS with a self-signed certificate made on first
// use. The official RocketMQ clients dial TLS (without verifying the
// certificate) by default; the project's client dials plaintext unless
// Config.TLS is set.

type sniffListener struct {
	net.Listener
	tls *serverTLS
}

// serverTLS is a Server's certificate, made on first use and kept across
// Restart.
type serverTLS struct {
	once sync.Once
	cfg  *tls.Config
	err  error
}

func (t *serverTLS) config() (*tls.Config, error) {
	t.once.Do(func() {
		var cert tls.Certificate
		cert, t.err = selfSigned()
		t.cfg = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	})
	return t.cfg, t.err
}

// CertificatePEM returns the PEM of the self-signed certificate the server
// serves TLS with (made on the first call or the first TLS connection, kept
// across Restart). A client that trusts it as a root (tls.Config.RootCAs)
// verifies the server at 127.0.0.1, ::1 or localhost.
func (s *Server) CertificatePEM() ([]byte, error) {
	cfg, err := s.tls.config()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, der := range cfg.Certificates[0].Certificate {
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der}); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

func (l *sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, l: l}, nil
}

// sniffConn decides between TLS and plaintext on its first read or write
// (whichever comes first: the gRPC server writes its settings before it
// reads the client's preface), by reading the client's first byte.
type sniffConn struct {
	net.Conn
	l    *sniffListener
	once sync.Once
	rw   io.ReadWriter
	err  error
}

func (c *sniffConn) decide() error {
	c.once.Do(func() {
		var b [1]byte
		if _, err := io.ReadFull(c.Conn, b[:]); err != nil {
			c.err = err
			return
		}
		pc := &prefixConn{Conn: c.Conn, prefix: b[:]}
		if b[0] != 0x16 { // not a TLS handshake record
			c.rw = pc
			return
		}
		cfg, err := c.l.tls.config()
		if err != nil {
			c.err = err
			return
		}
		c.rw = tls.Server(pc, cfg)
	})
	return c.err
}

func (c *sniffConn) Read(p []byte) (int, error) {
	if err := c.decide(); err != nil {
		return 0, err
	}
	return c.rw.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error) {
	if err := c.decide(); err != nil {
		return 0, err
	}
	return c.rw.Write(p)
}

// prefixConn replays bytes already read before reading on.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "rmqfake"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
