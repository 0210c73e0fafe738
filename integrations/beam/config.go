package rmqio

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// Connection is where and how workers connect. It travels inside the
// pipeline (Beam serializes a DoFn's exported fields into the job), so it
// names the environment variables that hold the credentials on the workers,
// never the credentials themselves.
type Connection struct {
	// Endpoints is the proxy's gRPC access point, "host:port" (or several
	// separated by ";"). Required.
	Endpoints string
	// Namespace of topics and groups; empty for none.
	Namespace string
	// AccessKeyEnv and SecretKeyEnv name the worker environment variables
	// holding the access key and secret; empty for anonymous access.
	AccessKeyEnv, SecretKeyEnv string
	// TLS turns TLS on; CAFile, when set, is a PEM file on the workers whose
	// certificates are trusted instead of the system's.
	TLS    bool
	CAFile string
	// RequestTimeout bounds each RPC; zero means rmqflow's default.
	RequestTimeout time.Duration
}

func (c Connection) validate() error {
	switch {
	case c.Endpoints == "":
		return errors.New("rmqio: Connection.Endpoints is required")
	case (c.AccessKeyEnv == "") != (c.SecretKeyEnv == ""):
		return errors.New("rmqio: Connection.AccessKeyEnv and SecretKeyEnv go together")
	case c.CAFile != "" && !c.TLS:
		return errors.New("rmqio: Connection.CAFile needs TLS")
	}
	if _, err := client.ParseEndpoints(c.Endpoints); err != nil {
		return fmt.Errorf("rmqio: Connection.Endpoints: %w", err)
	}
	return nil
}

// rmqflow resolves the connection on a worker: credentials from its
// environment, the CA file from its disk.
func (c Connection) rmqflow() (rmqflow.Connection, error) {
	out := rmqflow.Connection{Endpoints: c.Endpoints, Namespace: c.Namespace, RequestTimeout: c.RequestTimeout}
	if c.AccessKeyEnv != "" {
		ak, sk := os.Getenv(c.AccessKeyEnv), os.Getenv(c.SecretKeyEnv)
		if ak == "" || sk == "" {
			return out, fmt.Errorf("rmqio: the worker's environment lacks %s or %s", c.AccessKeyEnv, c.SecretKeyEnv)
		}
		out.Credentials = client.Credentials{AccessKey: ak, AccessSecret: sk}
	}
	if c.TLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return out, fmt.Errorf("rmqio: CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return out, fmt.Errorf("rmqio: CA file %s holds no PEM certificate", c.CAFile)
			}
			tc.RootCAs = pool
		}
		out.TLS = tc
	}
	return out, nil
}

// ReadConfig configures Read.
type ReadConfig struct {
	Connection
	// Lite mode (the default): MainTopic is a LITE main topic and Group a
	// lite group bound to it (a wildcard group, or an exact one with
	// LiteTopics). Simple mode: Topic and Group, with FilterTag or
	// FilterSQL.
	Simple     bool
	MainTopic  string
	LiteTopics []string
	Topic      string
	Group      string
	FilterTag  string
	FilterSQL  string
	// Source tuning, with rmqflow's defaults when zero.
	FetchConcurrency  int
	AwaitDuration     time.Duration
	InvisibleDuration time.Duration
	MaxMessageNum     int
	RenewalAheadTime  time.Duration
	// Shards is how many restrictions Read starts with: runners without
	// dynamic splitting (Flink) run that many readers in parallel, each with
	// its own consumer. Default 1.
	Shards int
	// WatermarkLag: the output watermark is wall time minus this lag.
	// Messages stored earlier than that (a backlog, a redelivery) are late
	// data for windows. Default 5 s.
	WatermarkLag time.Duration
	// MaxBundleMessages and MaxBundleTime bound one bundle: then Read
	// checkpoints itself and resumes at once. Defaults 1,000 and 1 s.
	MaxBundleMessages int
	MaxBundleTime     time.Duration
	// IdleResume is how long Read waits to resume after a bundle that found
	// no message. Default 1 s.
	IdleResume time.Duration
	// StopAfterIdle, when positive, ends the read (the restriction is done)
	// once no message came for this long (since the reader's last message,
	// or the read's start, whichever is later: a worker's source kept from
	// an earlier job does not end a new read at once): for bounded tests
	// and batch backfills. Zero reads for ever.
	StopAfterIdle time.Duration
	// IdleClose is how long a worker keeps a reader's source that no bundle
	// uses (its restriction moved to another worker, or the job ended)
	// before closing it, which gives back what it fetched and had not
	// emitted. Default 1 min.
	IdleClose time.Duration
}

// Defaults of ReadConfig.
const (
	DefaultWatermarkLag      = 5 * time.Second
	DefaultMaxBundleMessages = 1000
	DefaultMaxBundleTime     = time.Second
	DefaultIdleResume        = time.Second
)

func (c ReadConfig) withDefaults() ReadConfig {
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.WatermarkLag == 0 {
		c.WatermarkLag = DefaultWatermarkLag
	}
	if c.MaxBundleMessages == 0 {
		c.MaxBundleMessages = DefaultMaxBundleMessages
	}
	if c.MaxBundleTime == 0 {
		c.MaxBundleTime = DefaultMaxBundleTime
	}
	if c.IdleResume == 0 {
		c.IdleResume = DefaultIdleResume
	}
	return c
}

func (c ReadConfig) validate() error {
	if err := c.Connection.validate(); err != nil {
		return err
	}
	switch {
	case c.Simple && (c.Topic == "" || c.Group == ""):
		return errors.New("rmqio: ReadConfig.Topic and Group are required in simple mode")
	case !c.Simple && (c.MainTopic == "" || c.Group == ""):
		return errors.New("rmqio: ReadConfig.MainTopic and Group are required in lite mode")
	case c.FilterTag != "" && c.FilterSQL != "":
		return errors.New("rmqio: ReadConfig.FilterTag and FilterSQL exclude each other")
	case c.Shards < 0, c.MaxBundleMessages < 0, c.MaxBundleTime < 0, c.IdleResume < 0, c.WatermarkLag < 0, c.StopAfterIdle < 0, c.IdleClose < 0:
		return errors.New("rmqio: ReadConfig: Shards, MaxBundleMessages, MaxBundleTime, IdleResume, WatermarkLag, StopAfterIdle and IdleClose must not be negative")
	}
	// The source's own checks (an *rmqflow.OptionError naming the field).
	return c.sourceConfigWith(rmqflow.Connection{Endpoints: c.Endpoints}).Validate()
}

// sourceConfig is the rmqflow source of one reader on a worker.
func (c ReadConfig) sourceConfig() (rmqflow.SourceConfig, error) {
	conn, err := c.Connection.rmqflow()
	if err != nil {
		return rmqflow.SourceConfig{}, err
	}
	return c.sourceConfigWith(conn), nil
}

func (c ReadConfig) sourceConfigWith(conn rmqflow.Connection) rmqflow.SourceConfig {
	sc := rmqflow.SourceConfig{Connection: conn, FetchConcurrency: c.FetchConcurrency, AwaitDuration: c.AwaitDuration,
		InvisibleDuration: c.InvisibleDuration, MaxMessageNum: c.MaxMessageNum, RenewalAheadTime: c.RenewalAheadTime}
	if c.Simple {
		sc.Mode, sc.Topic, sc.Group = rmqflow.ModeSimple, c.Topic, c.Group
		switch {
		case c.FilterSQL != "":
			sc.Filter = client.SQLFilter(c.FilterSQL)
		case c.FilterTag != "":
			sc.Filter = client.TagFilter(c.FilterTag)
		}
	} else {
		sc.Lite = []rmqflow.LiteBinding{{Topic: c.MainTopic, Group: c.Group, LiteTopics: c.LiteTopics}}
	}
	return sc
}

// refused names a refusal of the connection's credentials by the broker at
// endpoints (where the refused request went) in err, so that the job's error
// says what to fix: the broker refuses every request signed with them, and
// no retry of the bundle can help.
func refused(c Connection, endpoints string, err error) error {
	if !errors.Is(err, client.ErrUnauthorized) && !errors.Is(err, client.ErrForbidden) {
		return err
	}
	who := "no credentials (anonymous access)"
	if c.AccessKeyEnv != "" {
		who = fmt.Sprintf("the credentials of %s and %s", c.AccessKeyEnv, c.SecretKeyEnv)
	}
	return fmt.Errorf("rmqio: the broker at %s refused %s (Connection.AccessKeyEnv, SecretKeyEnv): %w", endpoints, who, err)
}
