package rmqfake

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// callMeta is what the proxy reads from a request's headers.
type callMeta struct {
	clientID string
	ns       string
	language string
	version  string
	dateTime string
	authz    string
}

// metaKey carries the callMeta the unary interceptor read, so that the
// handler does not read the headers again.
type metaKey struct{}

func metaOf(ctx context.Context) callMeta {
	if m, ok := ctx.Value(metaKey{}).(*callMeta); ok {
		return *m
	}
	get := func(k string) string {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	m := callMeta{
		clientID: get("x-mq-client-id"),
		ns:       get("x-mq-namespace"),
		language: get("x-mq-language"),
		version:  get("x-mq-client-version"),
		dateTime: get("x-mq-date-time"),
		authz:    get("authorization"),
	}
	return m
}

// peerOf is the address of the client (rendered only where it is used: the
// born host of a message sent without one).
func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// languages are the values of the broker's LanguageCode enum; x-mq-language
// must be one of them (GOLANG is not: "No enum constant").
var languages = map[string]bool{
	"JAVA": true, "CPP": true, "DOTNET": true, "PYTHON": true, "DELPHI": true, "ERLANG": true, "RUBY": true,
	"OTHER": true, "HTTP": true, "GO": true, "PHP": true, "OMS": true, "RUST": true, "NODE_JS": true,
}

func checkLanguage(lang string) *failure {
	if languages[lang] {
		return nil
	}
	return fail(v2.Code_INTERNAL_SERVER_ERROR, "No enum constant org.apache.rocketmq.remoting.protocol.LanguageCode.%s", lang)
}

// authenticator checks the signature RocketMQ clients send:
//
//	authorization: MQv2-HMAC-SHA1 Credential=<AK>//Rocketmq, SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secret, x-mq-date-time)>
type authenticator struct {
	secrets map[string]string // access key -> secret
}

func newAuthenticator(creds map[string]string) *authenticator {
	if len(creds) == 0 {
		return nil
	}
	return &authenticator{secrets: creds}
}

// check returns nil when m is signed by a known key (or auth is off). The
// failure never repeats the secret or the expected signature.
func (a *authenticator) check(m callMeta) *failure {
	if a == nil {
		return nil
	}
	const scheme = "MQv2-HMAC-SHA1 "
	if !strings.HasPrefix(m.authz, scheme) {
		return fail(v2.Code_UNAUTHORIZED, "authorization header is missing or not MQv2-HMAC-SHA1")
	}
	var ak, sig, signed string
	for _, part := range strings.Split(strings.TrimPrefix(m.authz, scheme), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			ak, _, _ = strings.Cut(v, "/")
		case "Signature":
			sig = v
		case "SignedHeaders":
			signed = v
		}
	}
	secret, ok := a.secrets[ak]
	if ak == "" || !ok {
		return fail(v2.Code_UNAUTHORIZED, "unknown access key %q", ak)
	}
	if signed != "x-mq-date-time" || m.dateTime == "" {
		return fail(v2.Code_UNAUTHORIZED, "the signature must cover x-mq-date-time")
	}
	h := hmac.New(sha1.New, []byte(secret))
	h.Write([]byte(m.dateTime))
	want := h.Sum(nil)
	got, err := hex.DecodeString(strings.ToLower(sig))
	if err != nil || !hmac.Equal(got, want) {
		return fail(v2.Code_UNAUTHORIZED, "check signature failed for access key %q", ak)
	}
	return nil
}
