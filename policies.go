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
	switch {
	case cfg.Burst < 0:
		return nil, optionError("Burst", "must not be negative")
	case cfg.MinDefer < 0:
		return nil, optionError("MinDefer", "must not be negative")
	case cfg.IdleAfter < 0:
		return nil, optionError("IdleAfter", "must not be negative")
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
// Window over the time it has been active in it, at least Window/10) exceeds
// Slack × the rate of the active lite topics taken together (all their acks
// in the window over the sum of their active times: the mean of their rates
// weighted by how long each has been active), and whose acks exceed MinCount,
// is deferred, which hands the fetch budget to the others. A lite topic alone
// is never deferred. A lite topic back from a deferral counts as active since
// it was deferred (it wanted service all through the pause), so the backlog it
// returns with is not taken for a high rate: it keeps about its share instead
// of being deferred again after a few messages (TestFairShareHotTopicKeepsItsShare). Rates, not counts, are compared, so lite topics at the
// same rate that became active at different times (as a backlog drain hands
// them out) are all at their share. Unlike a global rate limit it costs the
// cold lite topics nothing.
//
// Cost: O(1) per message under one mutex — a map lookup, a ring of 10 slot
// counts per lite topic expired lazily, O(10) arithmetic, and two steps of
// an incremental sweep that forgets lite topics idle for a window; O(10) per
// slot (Window/10). No pass over all lite topics ever runs, so 1,000,000
// lite topics cost no pause. Memory: ~100 B per lite topic seen in the last
// window or so (a deferred one until a window after its deferral ended), plus
// its name.
func FairShare[T any](cfg FairShareConfig) (ThrottlePolicy[T], error) {
	switch {
	case cfg.Window < 0:
		return nil, optionError("Window", "must not be negative")
	case cfg.MinCount < 0:
		return nil, optionError("MinCount", "must not be negative")
	case cfg.Defer < 0:
		return nil, optionError("Defer", "must not be negative")
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
	fs := &fairShare{cfg: cfg, slot: max(int64(cfg.Window/fairSlots), 1), index: map[string]int32{}, epoch: math.MinInt64 / 2}
	return ThrottlePolicyFunc[T](func(m *AckableMessage[T]) Decision { return fs.decide(keyOfMessage(&m.Meta)) }), nil
}

// fairSlots splits the window into slots that expire one by one.
const fairSlots = 10

// fairTopic is one lite topic's acks in the window. Its slots are expired
// lazily, when it is next seen.
type fairTopic struct {
	key   string
	slots [fairSlots]int32
	sum   int64 // the sum of slots
	since int64 // when its acks in the window began (Unix ns)
	last  int64 // the slot of its last ack; active while in the window
	// from is when its own active time began: since, or, for a lite topic
	// that comes back from this policy's deferral, when it was deferred (it
	// wanted service all through the pause).
	from     int64
	deferred int64 // when this policy last deferred it (Unix ns), 0 if never
}

// fairShare keeps, besides each lite topic's counts, per slot of the window:
// the acks, the active lite topics whose last ack is in it (they go inactive
// when it expires) and the lite topics whose activity began in it (young:
// their active time starts at since; once that slot expires they are old and
// their active time is the whole window). That makes the pooled rate, total
// acks over the summed active time, O(fairSlots) to compute.
type fairShare struct {
	cfg   FairShareConfig
	slot  int64 // ns
	mu    sync.Mutex
	epoch int64 // the current slot
	index map[string]int32
	all   []fairTopic

	total      [fairSlots]int64 // acks per slot
	totalSum   int64
	lastCount  [fairSlots]int   // active lite topics by the slot of their last ack
	active     int              // the sum of lastCount
	youngCount [fairSlots]int   // lite topics by the slot their activity began in
	youngOff   [fairSlots]int64 // the sum of their since − the slot's start
	old        int              // active lite topics whose activity began before the window
	cursor     int              // of the incremental sweep
}

func (f *fairShare) decide(key string) Decision {
	now := f.cfg.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(now / f.slot)
	f.sweep(2)
	var t *fairTopic
	if i, ok := f.index[key]; ok {
		t = &f.all[i]
		f.expire(t)
	}
	if t != nil && t.sum >= int64(f.cfg.MinCount) && f.active >= 2 {
		windowStart := (f.epoch - fairSlots + 1) * f.slot
		rate := float64(t.sum) / float64(max(now-max(t.from, windowStart), f.slot))
		if rate > f.cfg.Slack*f.pooledRate(now) {
			t.deferred = now
			return Defer(f.cfg.Defer, "fair-share")
		}
	}
	if t == nil {
		f.index[key] = int32(len(f.all))
		f.all = append(f.all, fairTopic{key: key, last: math.MinInt64 / 2})
		t = &f.all[len(f.all)-1]
	}
	cur := f.epoch % fairSlots
	switch {
	case t.sum == 0: // (re)starts its activity now
		t.since, t.from = now, now
		if t.deferred != 0 && now-t.deferred <= int64(f.cfg.Defer+f.cfg.Window) {
			// Back from a deferral: the messages it takes at once are its
			// demand of the whole pause, not a new high rate.
			t.from = t.deferred
		}
		f.youngCount[cur]++
		f.youngOff[cur] += now - f.epoch*f.slot
		f.active++
		f.lastCount[cur]++
	case t.last != f.epoch:
		f.lastCount[t.last%fairSlots]--
		f.lastCount[cur]++
	}
	t.last = f.epoch
	t.slots[cur]++
	t.sum++
	f.total[cur]++
	f.totalSum++
	return Ack()
}

// pooledRate is the active lite topics' acks in the window over the sum of
// their active times in it (acks per ns).
func (f *fairShare) pooledRate(now int64) float64 {
	windowStart := (f.epoch - fairSlots + 1) * f.slot
	span := float64(f.old) * float64(now-windowStart)
	for e := f.epoch - fairSlots + 1; e <= f.epoch; e++ {
		i := e % fairSlots
		span += float64(f.youngCount[i])*float64(now-e*f.slot) - float64(f.youngOff[i])
	}
	if span <= 0 {
		return math.Inf(1)
	}
	return float64(f.totalSum) / span
}

// expire clears t's slots that fell out of the window since its last ack.
func (f *fairShare) expire(t *fairTopic) {
	if t.last >= f.epoch || t.sum == 0 {
		return
	}
	if t.last <= f.epoch-fairSlots { // inactive: all of it expired
		t.slots, t.sum = [fairSlots]int32{}, 0
		return
	}
	for e := t.last + 1; e <= f.epoch; e++ {
		i := e % fairSlots
		t.sum -= int64(t.slots[i])
		t.slots[i] = 0
	}
}

// advance moves to slot epoch, expiring the slots that fell out of the
// window: their young lite topics become old, the lite topics whose last ack
// was in them become inactive. O(fairSlots).
func (f *fairShare) advance(epoch int64) {
	if epoch <= f.epoch {
		return
	}
	if epoch-f.epoch >= fairSlots {
		f.total, f.lastCount, f.youngCount, f.youngOff = [fairSlots]int64{}, [fairSlots]int{}, [fairSlots]int{}, [fairSlots]int64{}
		f.totalSum, f.active, f.old = 0, 0, 0
		f.epoch = epoch
		return
	}
	for e := f.epoch + 1; e <= epoch; e++ {
		i := e % fairSlots // the slot e − fairSlots expires
		f.old += f.youngCount[i]
		f.youngCount[i], f.youngOff[i] = 0, 0
		f.old -= f.lastCount[i]
		f.active -= f.lastCount[i]
		f.lastCount[i] = 0
		f.totalSum -= f.total[i]
		f.total[i] = 0
	}
	f.epoch = epoch
}

// sweep looks at up to n lite topics and forgets those inactive for a window.
func (f *fairShare) sweep(n int) {
	for ; n > 0 && len(f.all) > 0; n-- {
		if f.cursor >= len(f.all) {
			f.cursor = 0
		}
		t := &f.all[f.cursor]
		if t.last > f.epoch-fairSlots || (t.deferred != 0 && f.epoch*f.slot-t.deferred <= int64(f.cfg.Defer+f.cfg.Window)) {
			f.cursor++
			continue
		}
		delete(f.index, t.key)
		last := len(f.all) - 1
		if f.cursor != last {
			f.all[f.cursor] = f.all[last]
			f.index[f.all[f.cursor].key] = int32(f.cursor)
		}
		f.all[last] = fairTopic{}
		f.all = f.all[:last]
	}
}
