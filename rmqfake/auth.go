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
//
// as the 5.5.0 proxy parses it (DefaultAuthenticationContextBuilder; notes in
// notes/research/auth-acl.md): the first word is not checked, SignedHeaders
// is ignored, the user is Credential up to its first '/', and x-mq-date-time
// is signed as it is, with no window on its age. Every failure is
// UNAUTHORIZED with the proxy's own text.
type authenticator struct {
	users map[string]*authUser // by access key (user name)
	acl   []aclRule
	authz bool // a Normal user exists: ACLs apply (acl.go)
}

type authUser struct {
	secret          string
	super, disabled bool
}

// newAuthenticator returns nil (no checks) when there are no credentials
// and no users. Credentials are super users.
func newAuthenticator(creds map[string]string, users map[string]userConfig, acl []aclRule) *authenticator {
	if len(creds) == 0 && len(users) == 0 {
		return nil
	}
	a := &authenticator{users: map[string]*authUser{}, acl: acl}
	for ak, sk := range creds {
		a.users[ak] = &authUser{secret: sk, super: true}
	}
	for name, u := range users {
		a.users[name] = &authUser{secret: u.secret, super: u.super, disabled: u.disabled}
		if !u.super {
			a.authz = true
		}
	}
	return a
}

// check returns the user m is signed by, or a failure (nil, "" when auth is
// off). The failure never repeats the secret or the expected signature.
func (a *authenticator) check(m callMeta) (string, *failure) {
	if a == nil {
		return "", nil
	}
	user, f := a.authenticate(m)
	return user, f
}

func (a *authenticator) authenticate(m callMeta) (string, *failure) {
	unauthorized := func(format string, args ...any) (string, *failure) {
		return "", fail(v2.Code_UNAUTHORIZED, format, args...)
	}
	if m.authz == "" {
		return unauthorized("username cannot be null.")
	}
	if m.dateTime == "" {
		return unauthorized("datetime is null.")
	}
	_, rest, ok := strings.Cut(m.authz, " ")
	if !ok {
		return unauthorized("authentication header is incorrect.")
	}
	var ak string
	var sig []byte
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return unauthorized("authentication keyValues length is incorrect, actual length=1.")
		}
		switch k {
		case "Credential":
			pieces := javaSplit(v, '/')
			if len(pieces) == 0 {
				return unauthorized("authentication credential length is incorrect, actual length=0.")
			}
			ak = pieces[0]
		case "Signature":
			b, err := hex.DecodeString(v)
			if err != nil {
				return unauthorized("create authentication context error.")
			}
			sig = b
		}
	}
	if ak == "" {
		return unauthorized("username cannot be null.")
	}
	u, ok := a.users[ak]
	if !ok {
		return unauthorized("User:%s is not found.", ak)
	}
	if u.disabled {
		return unauthorized("User:%s is disabled.", ak)
	}
	h := hmac.New(sha1.New, []byte(u.secret))
	h.Write([]byte(m.dateTime))
	if sig == nil || !hmac.Equal(sig, h.Sum(nil)) {
		return unauthorized("check signature failed.")
	}
	return ak, nil
}

// javaSplit is Java's String.split on one character: trailing empty
// strings are removed (so "//" gives none).
func javaSplit(s string, sep byte) []string {
	if s == "" {
		return []string{""} // Java splits "" into one empty string
	}
	parts := strings.Split(s, string(sep))
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}
