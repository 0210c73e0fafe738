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
	// Window is how much recent throughput counts: a lite topic's rate is its
	// acks in the window over the time it has been active in the window (at
	// least one tenth of the window). Default 10 s.
	Window time.Duration
	// Slack is how far above the mean rate of the active lite topics a lite
	// topic's rate may go before it is deferred. Default 1.5.
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
// its share of recent throughput: a lite topic whose rate (acks in the last
// Window over the time it has been active in it) exceeds Slack × the mean
// rate of the active lite topics, and whose acks exceed MinCount, is
// deferred, which hands the fetch budget to the others. Rates, not counts,
// are compared, so lite topics at the same rate that became active at
// different times (as a backlog drain hands them out) are all at their share.
// Unlike a global rate limit it costs the cold lite topics nothing.
//
// Cost: per message one map lookup and O(1) arithmetic under a mutex; once
// per slot (Window/10) one pass over the active lite topics, which expires
// the oldest slot and recomputes the mean rate. Memory: ~100 B per lite topic
// active in the window.
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
	fs := &fairShare{cfg: cfg, slot: max(cfg.Window/fairSlots, 1), topics: map[string]*fairTopic{}}
	return ThrottlePolicyFunc[T](func(m *AckableMessage[T]) Decision { return fs.decide(keyOfMessage(&m.Meta)) }), nil
}

// fairSlots splits the window into slots that expire one by one.
const fairSlots = 10

// fairTopic is one lite topic's acks in the window.
type fairTopic struct {
	slots [fairSlots]int32
	sum   int64 // the sum of slots
	since int64 // when its acks in the window began (Unix ns)
}

type fairShare struct {
	cfg    FairShareConfig
	slot   time.Duration
	mu     sync.Mutex
	epoch  int64 // index of the current slot
	topics map[string]*fairTopic
	// mean is the mean rate (acks per ns) of the lite topics active for at
	// least one slot, as of the start of the current slot; 0 while fewer than
	// two such lite topics exist (a lone lite topic is never over its share).
	mean float64
}

// rate is t's acks per ns at now: its count over the time it has been active
// in the window, at least one slot.
func (f *fairShare) rate(t *fairTopic, now int64) float64 {
	windowStart := (f.epoch - fairSlots + 1) * int64(f.slot)
	span := now - max(t.since, windowStart)
	return float64(t.sum) / float64(max(span, int64(f.slot)))
}

func (f *fairShare) decide(key string) Decision {
	now := f.cfg.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(now)
	t := f.topics[key]
	if t != nil && f.mean > 0 && t.sum >= int64(f.cfg.MinCount) && f.rate(t, now) > f.cfg.Slack*f.mean {
		return Defer(f.cfg.Defer, "fair-share")
	}
	if t == nil {
		t = &fairTopic{since: now}
		f.topics[key] = t
	}
	t.slots[f.epoch%fairSlots]++
	t.sum++
	return Ack()
}

// advance moves to the slot of now: it clears the slots that fell out of the
// window, forgets lite topics with no count left and takes the mean rate of
// the lite topics active for at least one slot. One pass over the lite
// topics, once per slot.
func (f *fairShare) advance(now int64) {
	epoch := now / int64(f.slot)
	if epoch <= f.epoch {
		return
	}
	steps := min(epoch-f.epoch, fairSlots)
	old := f.epoch
	f.epoch = epoch
	slotStart := epoch * int64(f.slot)
	var sum float64
	n := 0
	for k, t := range f.topics {
		for s := int64(1); s <= steps; s++ {
			i := (old + s) % fairSlots
			t.sum -= int64(t.slots[i])
			t.slots[i] = 0
		}
		if t.sum == 0 {
			delete(f.topics, k)
			continue
		}
		if slotStart-t.since >= int64(f.slot) {
			sum += f.rate(t, slotStart)
			n++
		}
	}
	f.mean = 0
	if n >= 2 {
		f.mean = sum / float64(n)
	}
}
