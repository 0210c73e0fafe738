package rmqflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
)

// TestOptionErrorNamesTheField pins docs/grpc-connector.md's "a negative or
// out-of-range value is an OptionError naming the option": each field of
// RunnerConfig, FairShareConfig and RateLimitConfig set negative alone is
// refused with an *OptionError whose Option is that field's name (not the
// struct's).
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
		"Concurrency":     func(c *rmqflow.RunnerConfig) { c.Concurrency = -1 },
		"MaxHeld":         func(c *rmqflow.RunnerConfig) { c.MaxHeld = -1 },
		"ErrorBackoff":    func(c *rmqflow.RunnerConfig) { c.ErrorBackoff = -time.Second },
		"ErrorBackoffMax": func(c *rmqflow.RunnerConfig) { c.ErrorBackoffMax = -time.Second },
		"ShutdownTimeout": func(c *rmqflow.RunnerConfig) { c.ShutdownTimeout = -time.Second },
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
}
