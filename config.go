package rmqflow

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of SourceConfig, named and valued after the Flink connector's
// options (fetch-concurrency, await-duration, invisible-duration,
// max-message-num, renewal-ahead-time). In every rmqflow config struct a zero
// field means "use the default".
const (
	DefaultFetchConcurrency  = 1
	DefaultAwaitDuration     = 20 * time.Second
	DefaultInvisibleDuration = 60 * time.Second
	DefaultMaxMessageNum     = 32
	DefaultRenewalAheadTime  = 5 * time.Second
	// MinInvisibleDuration is the broker's minimum on ReceiveMessage.
	MinInvisibleDuration = 10 * time.Second
	// MaxInvisibleDuration is the broker's maximum.
	MaxInvisibleDuration = 12 * time.Hour
)

// Connection is how to reach a RocketMQ 5 proxy. It is shared by sources,
// sinks and ack pools.
type Connection struct {
	// Endpoints is "host:port" or "host:port;host:port". Required.
	Endpoints string
	// Namespace of topics and groups; empty for none.
	Namespace string
	// Credentials sign requests; zero means anonymous. Never logged.
	Credentials client.Credentials
	// TLS enables TLS; nil means plaintext.
	TLS *tls.Config
	// RequestTimeout bounds each RPC. Zero means client.DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives diagnostics. Nil means slog.Default().
	Logger *slog.Logger
	// Meter records the metrics listed in docs/metrics.md. Nil means no metrics.
	Meter metric.Meter
}

func (c Connection) clientConfig() client.Config {
	return client.Config{
		Endpoints:      c.Endpoints,
		Namespace:      c.Namespace,
		Credentials:    c.Credentials,
		TLS:            c.TLS,
		RequestTimeout: c.RequestTimeout,
		Logger:         c.logger(),
	}
}

func (c Connection) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// key identifies a connection configuration without holding its secrets:
// the access secret and the security token enter only as a SHA-256 digest.
func (c Connection) key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(c.Credentials.AccessSecret), c.Credentials.AccessSecret,
		len(c.Credentials.SecurityToken), c.Credentials.SecurityToken)
	return fmt.Sprintf("%s|%s|%s|%s|%t|%v", c.Endpoints, c.Namespace, c.Credentials.AccessKey,
		hex.EncodeToString(h.Sum(nil)[:16]), c.TLS != nil, c.RequestTimeout)
}

func (c Connection) validate() error {
	if _, err := client.ParseEndpoints(c.Endpoints); err != nil {
		return optionError("Endpoints", err.Error())
	}
	if c.Credentials.AccessKey == "" && c.Credentials.AccessSecret != "" {
		return optionError("Credentials", "AccessSecret is set but AccessKey is empty")
	}
	if c.RequestTimeout < 0 {
		return optionError("RequestTimeout", "must not be negative")
	}
	return nil
}

// OptionError is an invalid configuration value; Option names it.
type OptionError struct {
	Option string
	Reason string
}

func (e *OptionError) Error() string { return "rmqflow: invalid " + e.Option + ": " + e.Reason }

func optionError(option, reason string) error { return &OptionError{Option: option, Reason: reason} }
