package rmqflow

import (
	"math"
	"sync"
	"time"
)

// keyOfMessage is the throttling key of a message: its lite topic, or its
// topic for normal messages.
func keyOfMessage(m *Metadata) string {
	if m.LiteTopic != "" {
		return m.LiteTopic
	}
	return m.Topic
}

// RateLimitConfig configures LiteTopicRateLimit.
type RateLimitConfig struct {
	// PerSecond is the sustained rate each lite topic may be acked at.
	// Required.
	PerSecond float64
	// Burst is how many messages a quiet lite topic may take at once.
	// Default: max(1, PerSecond).
	Burst int
	// MinDefer is the shortest deferral. Default 1 s.
	MinDefer time.Duration
	// IdleAfter forgets a lite topic's bucket after this long without
	// messages, bounding memory with many lite topics. Default 10 min.
	IdleAfter time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// LiteTopicRateLimit returns a policy that lets each lite topic through at
// most PerSecond messages a second (token bucket); a message over the rate is
// deferred until its lite topic has a token again. Lite topics do not share
// their budgets: a hot one is slowed without touching the others.
func LiteTopicRateLimit[T any](cfg RateLimitConfig) (ThrottlePolicy[T], error) {
	if cfg.PerSecond <= 0 || math.IsInf(cfg.PerSecond, 0) || math.IsNaN(cfg.PerSecond) {
		return nil, optionError("PerSecond", "must be a positive rate")
	}
	if cfg.Burst < 0 || cfg.MinDefer < 0 || cfg.IdleAfter < 0 {
		return nil, optionError("RateLimitConfig", "Burst, MinDefer and IdleAfter must not be negative")
	}
	if cfg.Burst == 0 {
		cfg.Burst = max(1, int(cfg.PerSecond))
	}
	if cfg.MinDefer == 0 {
		cfg.MinDefer = time.Second
	}
	if cfg.IdleAfter == 0 {
		cfg.IdleAfter = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rl := &rateLimiter{cfg: cfg, buckets: map[string]*bucket{}}
	return ThrottlePolicyFunc[T](func(m *AckableMessage[T]) Decision { return rl.decide(keyOfMessage(&m.Meta)) }), nil
}

type bucket struct {
	tokens float64
	last   time.Time
}

type rateLimiter struct {
	cfg       RateLimitConfig
	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

func (r *rateLimiter) decide(key string) Decision {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(now)
	b, ok := r.buckets[key]
	if !ok {
		b = &bucket{tokens: float64(r.cfg.Burst), last: now}
		r.buckets[key] = b
	}
	b.tokens = math.Min(float64(r.cfg.Burst), b.tokens+now.Sub(b.last).Seconds()*r.cfg.PerSecond)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return Ack()
	}
	wait := time.Duration((1 - b.tokens) / r.cfg.PerSecond * float64(time.Second))
	return Defer(max(wait, r.cfg.MinDefer), "rate-limit")
}

// sweep drops idle buckets, at most once per IdleAfter.
func (r *rateLimiter) sweep(now time.Time) {
	if now.Sub(r.lastSweep) < r.cfg.IdleAfter {
		return
	}
	r.lastSweep = now
	for k, b := range r.buckets {
		if now.Sub(b.last) >= r.cfg.IdleAfter {
			delete(r.buckets, k)
		}
	}
}

// FairShareConfig configures FairShare.
type FairShareConfig struct {
	// Window is how much recent throughput counts. Default 10 s.
	Window time.Duration
	// Slack is how far above its fair share (total / active lite topics) a
	// lite topic may go before it is deferred. Default 1.5.
	Slack float64
	// MinCount is how many acks a lite topic may take in a window before it
	// can be throttled at all, so that a quiet system throttles no one.
	// Default 10.
	MinCount int
	// Defer is how long an over-share message is deferred. It pauses the
	// whole lite topic on the broker (docs/broker-semantics.md, scenario e).
	// Default 10 s.
	Defer time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// FairShare returns a policy that defers a lite topic while it takes more than
// its share of recent throughput: with n lite topics active in the last
// Window, a lite topic whose acks exceed Slack × total/n (and MinCount) is
// deferred, which hands the fetch budget to the others. Unlike a global rate
// limit it costs the cold lite topics nothing.
func FairShare[T any](cfg FairShareConfig) (ThrottlePolicy[T], error) {
	switch {
	case cfg.Window < 0 || cfg.Slack < 0 || cfg.MinCount < 0 || cfg.Defer < 0:
		return nil, optionError("FairShareConfig", "fields must not be negative")
	case cfg.Slack != 0 && cfg.Slack < 1:
		return nil, optionError("Slack", "must be at least 1")
	}
	if cfg.Window == 0 {
		cfg.Window = 10 * time.Second
	}
	if cfg.Slack == 0 {
		cfg.Slack = 1.5
	}
	if cfg.MinCount == 0 {
		cfg.MinCount = 10
	}
	if cfg.Defer == 0 {
		cfg.Defer = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	fs := &fairShare{cfg: cfg, slot: cfg.Window / fairSlots, counts: map[string]*[fairSlots]int{}}
	return ThrottlePolicyFunc[T](func(m *AckableMessage[T]) Decision { return fs.decide(keyOfMessage(&m.Meta)) }), nil
}

// fairSlots splits the window into slots that expire one by one.
const fairSlots = 10

type fairShare struct {
	cfg    FairShareConfig
	slot   time.Duration
	mu     sync.Mutex
	epoch  int64 // index of the current slot
	counts map[string]*[fairSlots]int
	total  [fairSlots]int
}

func (f *fairShare) decide(key string) Decision {
	now := f.cfg.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(now.UnixNano() / int64(f.slot))
	c := f.counts[key]
	mine := 0
	if c != nil {
		for _, n := range c {
			mine += n
		}
	}
	total := 0
	for _, n := range f.total {
		total += n
	}
	active := len(f.counts)
	if c == nil {
		active++
	}
	if mine >= f.cfg.MinCount && float64(mine) > f.cfg.Slack*float64(total)/float64(active) {
		return Defer(f.cfg.Defer, "fair-share")
	}
	if c == nil {
		c = new([fairSlots]int)
		f.counts[key] = c
	}
	i := f.epoch % fairSlots
	c[i]++
	f.total[i]++
	return Ack()
}

// advance moves to slot epoch, clearing the slots that fell out of the window
// and forgetting lite topics with no count left.
func (f *fairShare) advance(epoch int64) {
	if epoch <= f.epoch {
		return
	}
	steps := min(epoch-f.epoch, fairSlots)
	for s := int64(1); s <= steps; s++ {
		i := (f.epoch + s) % fairSlots
		f.total[i] = 0
		for k, c := range f.counts {
			c[i] = 0
			if *c == ([fairSlots]int{}) {
				delete(f.counts, k)
			}
		}
	}
	f.epoch = epoch
}
