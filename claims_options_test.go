package rmqflow_test

import (
	"context"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
)

// TestOptionErrorNamesTheField pins docs/grpc-connector.md's "a negative or
// out-of-range value is an OptionError naming the option": each numeric
// field of RunnerConfig, FairShareConfig, RateLimitConfig, SourceConfig,
// SinkConfig, ThrottleConfig and AckPoolConfig set negative alone is refused
// with an *OptionError whose Option is that field's name (not the struct's).
func TestOptionErrorNamesTheField(t *testing.T) {
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	h := func(context.Context, *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		return rmqflow.Ack(), nil
	}
	check := func(what, option string, err error) {
		t.Helper()
		var oe *rmqflow.OptionError
		switch {
		case !errors.As(err, &oe):
			t.Errorf("%s: %v, want an *OptionError", what, err)
		case oe.Option != option:
			t.Errorf("%s: OptionError names %q, want %q", what, oe.Option, option)
		case !strings.Contains(err.Error(), option):
			t.Errorf("%s: message %q does not name %s", what, err, option)
		}
	}
	runner := map[string]func(*rmqflow.RunnerConfig){
		"Concurrency":           func(c *rmqflow.RunnerConfig) { c.Concurrency = -1 },
		"MaxHeld":               func(c *rmqflow.RunnerConfig) { c.MaxHeld = -1 },
		"ErrorBackoff":          func(c *rmqflow.RunnerConfig) { c.ErrorBackoff = -time.Second },
		"ErrorBackoffMax":       func(c *rmqflow.RunnerConfig) { c.ErrorBackoffMax = -time.Second },
		"ShutdownTimeout":       func(c *rmqflow.RunnerConfig) { c.ShutdownTimeout = -time.Second },
		"MaxDeadLetterFailures": func(c *rmqflow.RunnerConfig) { c.MaxDeadLetterFailures = -1 },
	}
	for option, set := range runner {
		var c rmqflow.RunnerConfig
		set(&c)
		_, err := rmqflow.NewRunner(src, h, c)
		check("RunnerConfig."+option, option, err)
	}
	fair := map[string]func(*rmqflow.FairShareConfig){
		"Window":   func(c *rmqflow.FairShareConfig) { c.Window = -time.Second },
		"Slack":    func(c *rmqflow.FairShareConfig) { c.Slack = -1 },
		"MinCount": func(c *rmqflow.FairShareConfig) { c.MinCount = -1 },
		"Defer":    func(c *rmqflow.FairShareConfig) { c.Defer = -time.Second },
	}
	for option, set := range fair {
		var c rmqflow.FairShareConfig
		set(&c)
		_, err := rmqflow.FairShare[string](c)
		check("FairShareConfig."+option, option, err)
	}
	rate := map[string]func(*rmqflow.RateLimitConfig){
		"Burst":     func(c *rmqflow.RateLimitConfig) { c.Burst = -1 },
		"MinDefer":  func(c *rmqflow.RateLimitConfig) { c.MinDefer = -time.Second },
		"IdleAfter": func(c *rmqflow.RateLimitConfig) { c.IdleAfter = -time.Second },
	}
	for option, set := range rate {
		c := rmqflow.RateLimitConfig{PerSecond: 10}
		set(&c)
		_, err := rmqflow.LiteTopicRateLimit[string](c)
		check("RateLimitConfig."+option, option, err)
	}
	base := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}}
	source := map[string]func(*rmqflow.SourceConfig){
		"FetchConcurrency":         func(c *rmqflow.SourceConfig) { c.FetchConcurrency = -1 },
		"AwaitDuration":            func(c *rmqflow.SourceConfig) { c.AwaitDuration = -time.Second },
		"InvisibleDuration":        func(c *rmqflow.SourceConfig) { c.InvisibleDuration = -time.Second },
		"MaxMessageNum":            func(c *rmqflow.SourceConfig) { c.MaxMessageNum = -1 },
		"RenewalAheadTime":         func(c *rmqflow.SourceConfig) { c.RenewalAheadTime = -time.Second },
		"RenewalConcurrency":       func(c *rmqflow.SourceConfig) { c.RenewalConcurrency = -1 },
		"ReleaseInvisibleDuration": func(c *rmqflow.SourceConfig) { c.ReleaseInvisibleDuration = -time.Second },
		"LiteRejoinAfter":          func(c *rmqflow.SourceConfig) { c.LiteRejoinAfter = 5 * time.Second },
		"UndecodableInvisibleDuration": func(c *rmqflow.SourceConfig) {
			c.UndecodableInvisibleDuration = -time.Second
		},
	}
	for option, set := range source {
		c := base
		set(&c)
		s, err := rmqflow.NewSource(c, rmqflow.StringDecoder())
		if err == nil {
			_ = s.Close(context.Background())
		}
		check("SourceConfig."+option, option, err)
		check("SourceConfig.Validate "+option, option, c.Validate())
	}
	sink := map[string]func(*rmqflow.SinkConfig){
		"MaxAttempts": func(c *rmqflow.SinkConfig) { c.MaxAttempts = -1 },
		"Concurrency": func(c *rmqflow.SinkConfig) { c.Concurrency = -1 },
		"BatchSize":   func(c *rmqflow.SinkConfig) { c.BatchSize = -1 },
		"Linger":      func(c *rmqflow.SinkConfig) { c.Linger = -time.Second },
		// Sizes that overflowed the queue's allocation (a panic in NewSink)
		// and a secret without its key (refused by the client, after
		// Validate had passed it).
		"Concurrency ": func(c *rmqflow.SinkConfig) { c.Concurrency = math.MaxInt },
		"BatchSize ":   func(c *rmqflow.SinkConfig) { c.BatchSize = math.MaxInt },
		"Credentials":  func(c *rmqflow.SinkConfig) { c.Credentials.AccessSecret = "s" },
	}
	for option, set := range sink {
		option := strings.TrimSpace(option)
		c := rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"}, Topic: "t"}
		set(&c)
		s, err := rmqflow.NewSink(context.Background(), c) // refused before it dials
		if err == nil {
			_ = s.Close(context.Background())
		}
		check("SinkConfig."+option, option, err)
		check("SinkConfig.Validate "+option, option, c.Validate())
	}
	// The valid configurations the tables start from pass Validate.
	for what, err := range map[string]error{
		"SourceConfig":   base.Validate(),
		"SinkConfig":     rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"}, Topic: "t"}.Validate(),
		"ThrottleConfig": rmqflow.ThrottleConfig{}.Validate(),
		"AckPoolConfig":  rmqflow.AckPoolConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"}}.Validate(),
	} {
		if err != nil {
			t.Errorf("%s.Validate of a valid configuration: %v", what, err)
		}
	}
	policy := rmqflow.ThrottlePolicyFunc[string](func(*rmqflow.AckableMessage[string]) rmqflow.Decision { return rmqflow.Ack() })
	throttle := map[string]func(*rmqflow.ThrottleConfig){
		"MaxDeliveryAttempt": func(c *rmqflow.ThrottleConfig) { c.MaxDeliveryAttempt = -1 },
		"MaxDeferDuration":   func(c *rmqflow.ThrottleConfig) { c.MaxDeferDuration = -time.Second },
		"MaxDefers":          func(c *rmqflow.ThrottleConfig) { c.MaxDefers = -1 },
		"MaxDeferredAge":     func(c *rmqflow.ThrottleConfig) { c.MaxDeferredAge = -time.Second },
	}
	for option, set := range throttle {
		var c rmqflow.ThrottleConfig
		set(&c)
		_, err := rmqflow.NewThrottle(src.Acker(), policy, c)
		check("ThrottleConfig."+option, option, err)
		check("ThrottleConfig.Validate "+option, option, c.Validate())
	}
	pool := map[string]func(*rmqflow.AckPoolConfig){
		"MaxBatch":     func(c *rmqflow.AckPoolConfig) { c.MaxBatch = -1 },
		"Linger":       func(c *rmqflow.AckPoolConfig) { c.Linger = -time.Second },
		"MaxAttempts":  func(c *rmqflow.AckPoolConfig) { c.MaxAttempts = -1 },
		"MaxInFlight":  func(c *rmqflow.AckPoolConfig) { c.MaxInFlight = -1 },
		"MaxBatch ":    func(c *rmqflow.AckPoolConfig) { c.MaxBatch = math.MaxInt }, // panicked in the first Ack
		"MaxInFlight ": func(c *rmqflow.AckPoolConfig) { c.MaxInFlight = math.MaxInt },
		"IdleTimeout":  func(c *rmqflow.AckPoolConfig) { c.IdleTimeout = -time.Second },
		"MaxQueues":    func(c *rmqflow.AckPoolConfig) { c.MaxQueues = -1 },
		"Credentials":  func(c *rmqflow.AckPoolConfig) { c.Credentials = nil; c.Connection.Credentials.AccessSecret = "s" },
	}
	for option, set := range pool {
		option := strings.TrimSpace(option)
		c := rmqflow.AckPoolConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"}}
		set(&c)
		p, err := rmqflow.AcquireAckPool(c)
		if err == nil {
			_ = p.Release(context.Background())
		}
		check("AckPoolConfig."+option, option, err)
		check("AckPoolConfig.Validate "+option, option, c.Validate())
	}
}

// TestOptionsTablesComplete pins docs/grpc-connector.md's options tables to
// the code: every exported field of each config struct is named there (in
// backquotes), so a new option cannot go undocumented.
func TestOptionsTablesComplete(t *testing.T) {
	b, err := os.ReadFile("docs/grpc-connector.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, v := range []any{rmqflow.Connection{}, rmqflow.SourceConfig{}, rmqflow.LiteBinding{}, rmqflow.LeaseConfig{},
		rmqflow.RunnerConfig{}, rmqflow.SinkConfig{}, rmqflow.ThrottleConfig{}, rmqflow.FairShareConfig{},
		rmqflow.RateLimitConfig{}, rmqflow.AckPoolConfig{}} {
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() || f.Anonymous {
				continue
			}
			if !strings.Contains(doc, "`"+f.Name+"`") {
				t.Errorf("%s.%s is not in docs/grpc-connector.md", typ.Name(), f.Name)
			}
		}
	}
}
