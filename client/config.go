package client

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// Defaults of [Config]. A zero field in Config always means "use the default".
const (
	// DefaultRequestTimeout bounds every unary RPC whose context has no earlier
	// deadline (the Java client's requestTimeout, 3 s).
	DefaultRequestTimeout = 3 * time.Second
	// DefaultHeartbeatInterval is how often a session sends Heartbeat (the
	// official clients use 10 s).
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultLiteSyncInterval is how often a lite session re-sends its complete
	// lite subscription (the Java client uses 30 s).
	DefaultLiteSyncInterval = 30 * time.Second
)

// Credentials sign every request with HMAC-SHA1 when AccessKey is set. They are
// never logged, never put into errors and never written into receipt handles.
type Credentials struct {
	AccessKey    string
	AccessSecret string
	// SecurityToken is sent as x-mq-session-token when set (STS credentials).
	SecurityToken string
}

// String hides the secret so that a Credentials printed by mistake leaks nothing.
func (c Credentials) String() string {
	if c.AccessKey == "" {
		return "Credentials{}"
	}
	return "Credentials{AccessKey: " + c.AccessKey + ", AccessSecret: <redacted>}"
}

// GoString hides the secret from %#v as well.
func (c Credentials) GoString() string { return c.String() }

// Format hides the secret from every verb (%d, %x, %q ... included).
func (c Credentials) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte(c.String())) }

// redactedCredentials is what Credentials marshal and log as.
type redactedCredentials struct {
	AccessKey     string `json:"accessKey,omitempty"`
	AccessSecret  string `json:"accessSecret,omitempty"`
	SecurityToken string `json:"securityToken,omitempty"`
}

func (c Credentials) redacted() redactedCredentials {
	r := redactedCredentials{AccessKey: c.AccessKey}
	if c.AccessSecret != "" {
		r.AccessSecret = "<redacted>"
	}
	if c.SecurityToken != "" {
		r.SecurityToken = "<redacted>"
	}
	return r
}

// MarshalJSON hides the secret and the security token from encoding/json
// (a config marshalled or logged as JSON by mistake leaks nothing).
func (c Credentials) MarshalJSON() ([]byte, error) { return json.Marshal(c.redacted()) }

// LogValue hides the secret and the security token from log/slog handlers.
func (c Credentials) LogValue() slog.Value {
	r := c.redacted()
	return slog.GroupValue(slog.String("accessKey", r.AccessKey), slog.String("accessSecret", r.AccessSecret),
		slog.String("securityToken", r.SecurityToken))
}

// Config configures a [Client]. Only Endpoints is required.
type Config struct {
	// Endpoints is the proxy's gRPC access point: "host:port", or several as
	// "host:port;host:port" (requests are balanced round-robin over them).
	Endpoints string
	// Namespace scopes topics and groups (x-mq-namespace and every Resource).
	// Empty means no namespace.
	Namespace string
	// Credentials sign requests; zero means anonymous.
	Credentials Credentials
	// TLS enables TLS with this configuration; nil means plaintext.
	TLS *tls.Config
	// RequestTimeout bounds each unary RPC. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// ClientID identifies this client to the broker (x-mq-client-id). Empty means
	// a fresh id of the form host@pid@n@random.
	ClientID string
	// Logger receives diagnostics. Nil means slog.Default().
	Logger *slog.Logger
	// HeartbeatInterval is how often sessions send Heartbeat. Zero means
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// LiteSyncInterval is how often lite sessions re-send their complete
	// subscription. Zero means DefaultLiteSyncInterval.
	LiteSyncInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.LiteSyncInterval == 0 {
		c.LiteSyncInterval = DefaultLiteSyncInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if _, err := ParseEndpoints(c.Endpoints); err != nil {
		return err
	}
	if c.RequestTimeout < 0 {
		return &ConfigError{Option: "RequestTimeout", Reason: "must not be negative"}
	}
	if c.HeartbeatInterval < 0 {
		return &ConfigError{Option: "HeartbeatInterval", Reason: "must not be negative"}
	}
	if c.LiteSyncInterval < 0 {
		return &ConfigError{Option: "LiteSyncInterval", Reason: "must not be negative"}
	}
	if c.Credentials.AccessKey == "" && c.Credentials.AccessSecret != "" {
		return &ConfigError{Option: "Credentials", Reason: "AccessSecret is set but AccessKey is empty"}
	}
	return nil
}

// Address is one host and port of an access point.
type Address struct {
	Host string
	Port int
}

func (a Address) String() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// Endpoints is a parsed access point: one or more addresses.
type Endpoints []Address

// String renders the endpoints in the "host:port;host:port" form ParseEndpoints reads.
func (e Endpoints) String() string {
	parts := make([]string, len(e))
	for i, a := range e {
		parts[i] = a.String()
	}
	return strings.Join(parts, ";")
}

// ParseEndpoints parses "host:port" or "host:port;host:port". Every address needs
// a host and a port in 1..65535; an empty list is an error.
func ParseEndpoints(s string) (Endpoints, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, &ConfigError{Option: "Endpoints", Reason: "empty; want host:port[;host:port...]"}
	}
	var out Endpoints
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		host, portStr, err := net.SplitHostPort(part)
		if err != nil {
			return nil, &ConfigError{Option: "Endpoints", Reason: fmt.Sprintf("%q: want host:port", part)}
		}
		port, err := strconv.Atoi(portStr)
		if err != nil || port < 1 || port > 65535 {
			return nil, &ConfigError{Option: "Endpoints", Reason: fmt.Sprintf("%q: port must be 1..65535", part)}
		}
		if host == "" {
			return nil, &ConfigError{Option: "Endpoints", Reason: fmt.Sprintf("%q: host is empty", part)}
		}
		if strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
			return nil, &ConfigError{Option: "Endpoints", Reason: fmt.Sprintf("%q: host contains a space or control character", part)}
		}
		out = append(out, Address{Host: host, Port: port})
	}
	if len(out) == 0 {
		return nil, &ConfigError{Option: "Endpoints", Reason: "no address in " + strconv.Quote(s)}
	}
	return out, nil
}

// proto renders the endpoints as the protocol's Endpoints message.
func (e Endpoints) proto() *v2.Endpoints {
	scheme := v2.AddressScheme_IPv4
	addrs := make([]*v2.Address, len(e))
	for i, a := range e {
		ip := net.ParseIP(a.Host)
		switch {
		case ip == nil:
			scheme = v2.AddressScheme_DOMAIN_NAME
		case ip.To4() == nil && scheme != v2.AddressScheme_DOMAIN_NAME:
			scheme = v2.AddressScheme_IPv6
		}
		addrs[i] = &v2.Address{Host: a.Host, Port: int32(a.Port)}
	}
	return &v2.Endpoints{Scheme: scheme, Addresses: addrs}
}
