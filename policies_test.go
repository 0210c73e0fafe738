package rmqflow

import (
	"errors"
	"testing"
	"time"
)

// manualClock is a settable clock for policy tests.
type manualClock struct{ t time.Time }

func (c *manualClock) Now() time.Time          { return c.t }
func (c *manualClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func msg(lite string) *AckableMessage[string] {
	return &AckableMessage[string]{Meta: Metadata{Topic: "main", LiteTopic: lite, MessageID: lite + "-id"}}
}

func TestLiteTopicRateLimit(t *testing.T) {
	clk := &manualClock{t: time.Unix(1000, 0)}
	p, err := LiteTopicRateLimit[string](RateLimitConfig{PerSecond: 2, Burst: 2, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// A burst of 2 passes, the third is deferred by at least MinDefer.
	for i := 0; i < 2; i++ {
		if d := p.Decide(msg("hot")); d.Kind() != DecisionAck {
			t.Fatalf("message %d of the burst deferred: %v", i, d)
		}
	}
	d := p.Decide(msg("hot"))
	if d.Delay() < time.Second || d.Reason() != "rate-limit" {
		t.Fatalf("third message: %+v, want a deferral of at least 1s", d)
	}
	// Another lite topic has its own budget.
	if d := p.Decide(msg("cold")); d.Kind() != DecisionAck {
		t.Fatalf("cold lite topic deferred: %+v", d)
	}
	// Half a second later the hot topic has one token again.
	clk.Advance(500 * time.Millisecond)
	if d := p.Decide(msg("hot")); d.Kind() != DecisionAck {
		t.Fatalf("after refill: %+v", d)
	}
	if _, err := LiteTopicRateLimit[string](RateLimitConfig{}); err == nil {
		t.Error("zero rate accepted")
	}
}

func TestFairShareDefersOnlyTheHotTopic(t *testing.T) {
	clk := &manualClock{t: time.Unix(1000, 0)}
	p, err := FairShare[string](FairShareConfig{Window: 10 * time.Second, Slack: 1.5, MinCount: 5, Defer: 7 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// Alone, a topic is never over its share.
	for i := 0; i < 50; i++ {
		if d := p.Decide(msg("hot")); d.Kind() != DecisionAck {
			t.Fatalf("a lone lite topic was deferred at message %d", i)
		}
	}
	// Cold topics arrive: hot (50 of 54) is far over 1.5 × 54/5.
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		if d := p.Decide(msg(c)); d.Kind() != DecisionAck {
			t.Fatalf("cold %s deferred: %+v", c, d)
		}
	}
	if d := p.Decide(msg("hot")); d.Delay() != 7*time.Second || d.Reason() != "fair-share" {
		t.Fatalf("hot after cold arrived: %+v, want a 7s fair-share deferral", d)
	}
	// After the window passes, the counts are forgotten.
	clk.Advance(11 * time.Second)
	if d := p.Decide(msg("hot")); d.Kind() != DecisionAck {
		t.Fatalf("hot after the window: %+v", d)
	}
	if _, err := FairShare[string](FairShareConfig{Slack: 0.5}); err == nil {
		t.Error("slack below 1 accepted")
	}
}

func TestThrottleValves(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_000_000, 0)}
	th := newValves(ThrottleConfig{}.withDefaults(), clk.Now)
	m := msg("l")
	m.Meta.BornTime = clk.Now()
	m.Handle.MessageID = "id-1"
	m.Meta.DeliveryAttempt = 1
	if v := th.fired(&m.Meta, m.Handle); v != "" {
		t.Fatalf("fresh message: valve %q fired", v)
	}
	m.Meta.DeliveryAttempt = DefaultMaxDeliveryAttempt
	if v := th.fired(&m.Meta, m.Handle); v != "max-delivery-attempt" {
		t.Fatalf("attempt 16: valve %q", v)
	}
	m.Meta.DeliveryAttempt = 1 // the broker's count reset (scenario e)
	for i := 0; i < DefaultMaxDefers; i++ {
		th.count("id-1")
	}
	if v := th.fired(&m.Meta, m.Handle); v != "max-defers" {
		t.Fatalf("after %d defers: valve %q", DefaultMaxDefers, v)
	}
	th.forget("id-1")
	clk.Advance(DefaultMaxDeferredAge)
	if v := th.fired(&m.Meta, m.Handle); v != "max-deferred-age" {
		t.Fatalf("a day old: valve %q", v)
	}
}

func TestDeferTrackerIsBounded(t *testing.T) {
	d := newDeferTracker(3)
	for _, id := range []string{"a", "b", "c", "d"} {
		d.add(id)
	}
	if d.count("a") != 0 || d.count("d") != 1 || d.len() != 3 {
		t.Fatalf("len %d: want the oldest forgotten and 3 kept", d.len())
	}
}

// TestDeferTrackerKeepsLiveCounts: forgetting an id and counting it again
// must not leave a stale slot whose eviction deletes the live count
// (capacity 3: add X, forget X, add X, add Y, add Z kept X at 0).
func TestDeferTrackerKeepsLiveCounts(t *testing.T) {
	d := newDeferTracker(3)
	d.add("X")
	d.forget("X")
	d.add("X")
	d.add("Y")
	d.add("Z")
	if d.count("X") != 1 || d.count("Y") != 1 || d.count("Z") != 1 || d.len() != 3 {
		t.Fatalf("X=%d Y=%d Z=%d len=%d, want 1 1 1 3", d.count("X"), d.count("Y"), d.count("Z"), d.len())
	}
	// The least recently counted id goes first: X counted again stays.
	d.add("X")
	d.add("W")
	if d.count("X") != 2 || d.count("Y") != 0 || d.len() != 3 {
		t.Fatalf("after X again and W: X=%d Y=%d len=%d, want 2 0 3", d.count("X"), d.count("Y"), d.len())
	}
}

// TestNoDecisionEverAcksByAccident: Defer with a non-positive duration
// releases, the zero Decision is DecisionNone, and only Ack acks.
func TestNoDecisionEverAcksByAccident(t *testing.T) {
	for _, tc := range []struct {
		d    Decision
		want DecisionKind
	}{
		{Decision{}, DecisionNone},
		{Defer(0, "x"), DecisionRelease},
		{Defer(-time.Hour, "x"), DecisionRelease},
		{Defer(time.Second, "x"), DecisionDefer},
		{Release(), DecisionRelease},
		{Leave(), DecisionLeave},
		{Settled(), DecisionSettled},
		{Ack(), DecisionAck},
	} {
		if tc.d.Kind() != tc.want {
			t.Errorf("%v: kind %v, want %v", tc.d, tc.d.Kind(), tc.want)
		}
	}
}

func TestConfigErrorsNameTheOption(t *testing.T) {
	base := SourceConfig{Connection: Connection{Endpoints: "127.0.0.1:1"}, Lite: []LiteBinding{{Topic: "t", Group: "g"}}}
	cases := map[string]func(c *SourceConfig){
		"Endpoints":         func(c *SourceConfig) { c.Endpoints = "nope" },
		"Lite":              func(c *SourceConfig) { c.Lite = nil },
		"FetchConcurrency":  func(c *SourceConfig) { c.FetchConcurrency = -1 },
		"AwaitDuration":     func(c *SourceConfig) { c.AwaitDuration = time.Second },
		"InvisibleDuration": func(c *SourceConfig) { c.InvisibleDuration = 5 * time.Second },
		"MaxMessageNum":     func(c *SourceConfig) { c.MaxMessageNum = 33 },
		"RenewalAheadTime":  func(c *SourceConfig) { c.RenewalAheadTime = time.Hour },
		"Topic":             func(c *SourceConfig) { c.Mode = ModeSimple },
	}
	for option, mutate := range cases {
		c := base
		mutate(&c)
		_, err := NewSource(c, StringDecoder())
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != option {
			t.Errorf("%s: got %v, want an OptionError naming %s", option, err, option)
		}
	}
	if _, err := NewSource[string](base, nil); err == nil {
		t.Error("nil decoder accepted")
	}
	src, err := NewSource(base, StringDecoder())
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c := src.cfg; c.FetchConcurrency != 1 || c.AwaitDuration != 20*time.Second || c.InvisibleDuration != 60*time.Second ||
		c.MaxMessageNum != 32 || c.RenewalAheadTime != 5*time.Second {
		t.Errorf("defaults not the reference connector's: %+v", c)
	}
	_ = src.Close(t.Context())
}

func TestErrorBackoffFor(t *testing.T) {
	c := RunnerConfig{ErrorBackoff: time.Second, ErrorBackoffMax: 10 * time.Second}
	for attempt, want := range map[int32]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 40: 10 * time.Second} {
		if got := c.ErrorBackoffFor(attempt); got != want {
			t.Errorf("attempt %d: %v, want %v", attempt, got, want)
		}
	}
}

func TestDecoders(t *testing.T) {
	if _, err := StringDecoder().Decode([]byte{0xff}, nil); err == nil {
		t.Error("invalid UTF-8 decoded")
	}
	type v struct{ A int }
	got, err := JSONDecoder[v]().Decode([]byte(`{"A":3}`), nil)
	if err != nil || got.A != 3 {
		t.Errorf("JSON: %+v %v", got, err)
	}
	var de *DecodeError
	if _, err := JSONDecoder[v]().Decode([]byte(`{`), nil); !errors.As(err, &de) {
		t.Errorf("bad JSON: %v, want a DecodeError", err)
	}
}
