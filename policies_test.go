package rmqflow

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
	// Alone, a topic is never over its share: 25/s for 2 s.
	for i := 0; i < 50; i++ {
		if d := p.Decide(msg("hot")); d.Kind() != DecisionAck {
			t.Fatalf("a lone lite topic was deferred at message %d", i)
		}
		clk.Advance(40 * time.Millisecond)
	}
	// Cold topics arrive at 4/s each while hot goes on at 25/s: once they
	// have been active for a slot, hot (25/s) is over 1.5 × the mean rate.
	var hot Decision
	for i := 0; i < 50 && hot.Kind() != DecisionDefer; i++ {
		if i%6 == 0 {
			for _, c := range []string{"c1", "c2", "c3", "c4"} {
				if d := p.Decide(msg(c)); d.Kind() != DecisionAck {
					t.Fatalf("cold %s deferred: %+v", c, d)
				}
			}
		}
		hot = p.Decide(msg("hot"))
		clk.Advance(40 * time.Millisecond)
	}
	if hot.Delay() != 7*time.Second || hot.Reason() != "fair-share" {
		t.Fatalf("hot within 2 s of the cold topics' arrival: %+v, want a 7s fair-share deferral", hot)
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

// TestThrottleValves: the valves judge a message by its own returns. A lite
// message's broker attempt, inflated by returns of the earlier messages of
// its lite topic (scenarios e, o), fires nothing; a normal message's attempt
// is its own and does; a group's own limit lowers the attempt valve, to half
// of it for a lite message (its successors spend the same budget).
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
	m.Meta.DeliveryAttempt = 40 // held back behind its lite topic's head
	if v := th.fired(&m.Meta, m.Handle); v != "" {
		t.Fatalf("lite message at broker attempt 40 with no returns of its own: valve %q fired", v)
	}
	normal := *m
	normal.Meta.LiteTopic, normal.Handle.LiteTopic = "", ""
	normal.Meta.DeliveryAttempt = DefaultMaxDeliveryAttempt
	if v := th.fired(&normal.Meta, normal.Handle); v != "max-delivery-attempt" {
		t.Fatalf("normal message at attempt 16: valve %q", v)
	}
	for i := 0; i < DefaultMaxDeliveryAttempt-1; i++ {
		th.count("id-1")
	}
	if v := th.fired(&m.Meta, m.Handle); v != "max-delivery-attempt" {
		t.Fatalf("lite message with 15 returns of its own: valve %q", v)
	}
	th.count("id-1")
	if v := th.firedAfter(&m.Meta, m.Handle, 0); v != "max-defers" {
		t.Fatalf("after %d defers: valve %q", DefaultMaxDefers, v)
	}
	th.forget("id-1")
	th.groupMax = func(string) int32 { return 5 }
	if v := th.firedAfter(&m.Meta, m.Handle, 2); v != "max-delivery-attempt" {
		t.Fatalf("lite message, group of 5 deliveries, 2 returns of its own: valve %q, want half the group's limit (3)", v)
	}
	if v := th.firedAfter(&m.Meta, m.Handle, 1); v != "" {
		t.Fatalf("lite message, group of 5 deliveries, 1 return of its own: valve %q", v)
	}
	normal.Meta.DeliveryAttempt = 4
	if v := th.firedAfter(&normal.Meta, normal.Handle, 0); v != "" {
		t.Fatalf("normal message at attempt 4, group of 5 deliveries: valve %q", v)
	}
	normal.Meta.DeliveryAttempt = 5
	if v := th.firedAfter(&normal.Meta, normal.Handle, 0); v != "max-delivery-attempt" {
		t.Fatalf("normal message at attempt 5, group of 5 deliveries: valve %q, want the whole group limit", v)
	}
	th.groupMax = nil
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

// fairSim drives a FairShare policy with a fake clock: every tick of 10 ms,
// each started lite topic sends the messages its rate owes it (a topic is
// paused while deferred, as the broker would). It returns the deferrals per
// topic and the time of each topic's first deferral.
type fairSim struct {
	p        ThrottlePolicy[string]
	clk      *manualClock
	rate     map[string]float64   // messages per second
	start    map[string]time.Time // when the topic starts sending
	owed     map[string]float64
	paused   map[string]time.Time
	defers   map[string]int
	firstDef map[string]time.Duration
	admitted map[string]int
	t0       time.Time
}

func newFairSim(t *testing.T, cfg FairShareConfig) *fairSim {
	t.Helper()
	// Not aligned with the slots, so that waves start mid-slot.
	clk := &manualClock{t: time.Unix(1000, 370*int64(time.Millisecond))}
	cfg.Now = clk.Now
	p, err := FairShare[string](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fairSim{p: p, clk: clk, t0: clk.t, rate: map[string]float64{}, start: map[string]time.Time{},
		owed: map[string]float64{}, paused: map[string]time.Time{}, defers: map[string]int{}, firstDef: map[string]time.Duration{},
		admitted: map[string]int{}}
}

func (s *fairSim) add(topic string, rate float64, after time.Duration) {
	s.rate[topic] = rate
	s.start[topic] = s.t0.Add(after)
}

func (s *fairSim) run(d time.Duration) {
	const tick = 10 * time.Millisecond
	topics := make([]string, 0, len(s.rate))
	for k := range s.rate {
		topics = append(topics, k)
	}
	slices.Sort(topics)
	for end := s.clk.t.Add(d); s.clk.t.Before(end); s.clk.Advance(tick) {
		for _, k := range topics {
			if s.clk.t.Before(s.start[k]) || s.clk.t.Before(s.paused[k]) {
				continue
			}
			s.owed[k] += s.rate[k] * tick.Seconds()
			for s.owed[k] >= 1 {
				d := s.p.Decide(msg(k))
				if d.Kind() == DecisionDefer {
					s.defers[k]++
					if _, ok := s.firstDef[k]; !ok {
						s.firstDef[k] = s.clk.t.Sub(s.t0)
					}
					s.paused[k] = s.clk.t.Add(d.Delay())
					s.owed[k] = 0
					break
				}
				s.owed[k]--
				s.admitted[k]++
			}
		}
	}
}

// TestFairShareEqualRatesInWavesAreNeverDeferred: 100 lite topics at the
// same rate that start in 5 waves over the first window (as a backlog drain
// hands them out) are all at their fair share; an early topic's larger count
// is not a larger rate.
func TestFairShareEqualRatesInWavesAreNeverDeferred(t *testing.T) {
	s := newFairSim(t, FairShareConfig{})
	for i := range 100 {
		wave := i % 5
		s.add(fmt.Sprintf("l%03d", i), 20, time.Duration(wave)*2*time.Second+time.Duration(wave)*130*time.Millisecond)
	}
	s.run(35 * time.Second)
	if len(s.defers) != 0 {
		t.Fatalf("equal-rate topics deferred: %v", s.defers)
	}
}

// TestFairShareDefersAHotTopicPromptly: one lite topic at 10× the rate of
// 99 others is deferred within the first window; the cold ones never are.
func TestFairShareDefersAHotTopicPromptly(t *testing.T) {
	for _, coldWaves := range []bool{false, true} {
		s := newFairSim(t, FairShareConfig{})
		s.add("hot", 100, 0)
		for i := range 99 {
			var after time.Duration
			if coldWaves {
				after = time.Duration(i%5) * 1700 * time.Millisecond
			}
			s.add(fmt.Sprintf("c%03d", i), 10, after)
		}
		s.run(35 * time.Second)
		first, ok := s.firstDef["hot"]
		if !ok || first > 10*time.Second {
			t.Errorf("waves=%v: hot first deferred at %v (deferred=%v), want within the 10 s window", coldWaves, first, ok)
		}
		if s.defers["hot"] < 2 {
			t.Errorf("waves=%v: hot deferred %d times in 35 s, want it kept deferred", coldWaves, s.defers["hot"])
		}
		if len(s.defers) != 1 {
			t.Errorf("waves=%v: cold topics deferred: %v", coldWaves, s.defers)
		}
	}
}

// TestFairShareHotTopicKeepsItsShare: a hot lite topic is slowed to about
// its share, not starved: back from a deferral it is still a lite topic that
// wanted service all along, so the messages it then takes at once are not
// mistaken for a new, high rate. (Before, its active time restarted at its
// return with a floor of Window/10, so it was deferred again after about
// MinCount × Slack messages: 1.6 msgs/s against the others' 10.)
func TestFairShareHotTopicKeepsItsShare(t *testing.T) {
	s := newFairSim(t, FairShareConfig{})
	s.add("hot", 100, 0)
	for i := range 99 {
		s.add(fmt.Sprintf("c%03d", i), 10, 0)
	}
	s.run(120 * time.Second)
	hot := float64(s.admitted["hot"]) / 120
	t.Logf("hot admitted at %.1f msgs/s, deferred %d times", hot, s.defers["hot"])
	if hot < 5 || hot > 15 {
		t.Errorf("hot lite topic admitted at %.1f msgs/s (deferred %d times); want about its share, 5..15 (the others: 10)", hot, s.defers["hot"])
	}
	if len(s.defers) != 1 {
		t.Errorf("cold topics deferred: %v", s.defers)
	}
}

// TestFairShareLoneTopicSpeedingUp: a lite topic alone, or all topics
// speeding up together, is never over its share.
func TestFairShareLoneTopicSpeedingUp(t *testing.T) {
	s := newFairSim(t, FairShareConfig{})
	s.add("a", 5, 0)
	s.run(12 * time.Second)
	s.rate["a"] = 200
	s.run(12 * time.Second)
	if len(s.defers) != 0 {
		t.Fatalf("a lone topic speeding up was deferred: %v", s.defers)
	}
}

// BenchmarkFairShareDecide: the per-message cost with many active lite
// topics at 100,000 msg/s (fake clock, 10 µs per message), the per-slot
// pass amortized in.
func BenchmarkFairShareDecide(b *testing.B) {
	for _, lites := range []int{100, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("lite=%d", lites), func(b *testing.B) {
			clk := &manualClock{t: time.Unix(1000, 0)}
			p, err := FairShare[string](FairShareConfig{Now: clk.Now})
			if err != nil {
				b.Fatal(err)
			}
			msgs := make([]*AckableMessage[string], lites)
			for i := range msgs {
				msgs[i] = msg(fmt.Sprintf("l%07d", i))
			}
			// Warm up one window so every lite topic is active.
			for i := range 10 * lites {
				p.Decide(msgs[i%lites])
				clk.Advance(10 * time.Microsecond)
			}
			b.ResetTimer()
			deferred := 0
			for i := range b.N {
				if p.Decide(msgs[i%lites]).Kind() == DecisionDefer {
					deferred++
				}
				clk.Advance(10 * time.Microsecond)
			}
			b.ReportMetric(float64(deferred), "defers")
		})
	}
}

// TestFairShareBookkeeping: under random traffic over many windows the
// incremental counters agree with a recount over the lite topics (active
// count, young + old, acks in the window), and the sweep forgets every lite
// topic idle for a window (a deferred one a window after its deferral
// ended).
func TestFairShareBookkeeping(t *testing.T) {
	clk := &manualClock{t: time.Unix(5000, 123)}
	fs := &fairShare{cfg: FairShareConfig{Window: time.Second, Slack: 1.5, MinCount: 3, Defer: time.Second, Now: clk.Now},
		slot: int64(100 * time.Millisecond), index: map[string]int32{}, epoch: math.MinInt64 / 2}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 200_000 {
		fs.decide(fmt.Sprintf("l%d", rng.IntN(300)))
		if rng.IntN(10) == 0 {
			clk.Advance(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
		if rng.IntN(20_000) == 0 {
			clk.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond) // idle gap
		}
		if step%997 != 0 {
			continue
		}
		active, sum, young := 0, int64(0), 0
		for i := range fs.all {
			tp := &fs.all[i]
			if tp.last <= fs.epoch-fairSlots {
				continue
			}
			fs.expire(tp)
			active++
			sum += tp.sum
			if tp.since/fs.slot > fs.epoch-fairSlots {
				young++
			}
		}
		ys := 0
		for _, n := range fs.youngCount {
			ys += n
		}
		if active != fs.active || sum != fs.totalSum || young != ys || fs.old != active-young {
			t.Fatalf("step %d: recount active %d acks %d young %d; counters active %d acks %d young %d old %d",
				step, active, sum, young, fs.active, fs.totalSum, ys, fs.old)
		}
	}
	clk.Advance(3 * time.Second) // a window past the pause of a lite topic deferred last (Defer + Window)
	for range 2 * len(fs.all) {
		fs.decide("new")
	}
	if len(fs.all) != 1 || len(fs.index) != 1 {
		t.Fatalf("after an idle window: %d lite topics kept (index %d), want 1", len(fs.all), len(fs.index))
	}
}
