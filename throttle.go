package rmqflow

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Decision is what to do with a message whose work is done: ack it, or defer
// it (make it invisible for Defer, after which the broker delivers it again).
type Decision struct {
	// Defer, when positive, defers the message by this long; zero acks it.
	Defer time.Duration
	// Reason labels a deferral in logs and metrics.
	Reason string
	// settled: the message was already acked or deferred by its handler.
	settled bool
}

// Ack is the decision to ack.
func Ack() Decision { return Decision{} }

// Settled tells a Runner that the handler acked or deferred the message
// itself (for instance through Throttle.Process), so the runner does nothing.
func Settled() Decision { return Decision{settled: true} }

// Defer is the decision to defer by d (for a reason shown in metrics).
func Defer(d time.Duration, reason string) Decision { return Decision{Defer: d, Reason: reason} }

// ThrottlePolicy decides, per message, to ack or to defer it. Policies are
// called from many goroutines at once and must be safe for that.
type ThrottlePolicy[T any] interface {
	Decide(m *AckableMessage[T]) Decision
}

// ThrottlePolicyFunc adapts a function to a ThrottlePolicy.
type ThrottlePolicyFunc[T any] func(m *AckableMessage[T]) Decision

// Decide calls f.
func (f ThrottlePolicyFunc[T]) Decide(m *AckableMessage[T]) Decision { return f(m) }

// Defaults of ThrottleConfig.
const (
	DefaultMaxDeliveryAttempt   = 16
	DefaultMaxDeferDuration     = 30 * time.Minute
	DefaultMaxDefers            = 16
	DefaultMaxDeferredAge       = 24 * time.Hour
	DefaultDeferTrackerCapacity = 100_000
)

// ThrottleConfig holds the throttle's safety valves. Each valve, when it
// fires, acks the message instead of deferring it, so that throttling never
// sends a message to the dead-letter queue.
type ThrottleConfig struct {
	// MaxDeliveryAttempt: at or above this broker delivery attempt, ack
	// instead of defer (the reference connector's valve). Default 16, the
	// broker's default retry limit.
	MaxDeliveryAttempt int32
	// MaxDeferDuration caps every deferral (the reference's
	// max-invisible-duration). Default 30 min.
	MaxDeferDuration time.Duration
	// MaxDefers: after this many deferrals of one message by this throttle,
	// ack instead. The broker's attempt count is not a reliable deferral
	// count on lite topics (docs/broker-semantics.md, scenario e), so this
	// valve counts in-process. Default 16.
	MaxDefers int
	// MaxDeferredAge: once a message is older than this (since its born
	// time), ack instead of defer. It survives restarts because the age
	// travels with the message. Default 24 h.
	MaxDeferredAge time.Duration
	// DeferTrackerCapacity bounds the messages MaxDefers remembers (oldest
	// forgotten first). Default 100,000.
	DeferTrackerCapacity int
}

func (c ThrottleConfig) withDefaults() ThrottleConfig {
	if c.MaxDeliveryAttempt == 0 {
		c.MaxDeliveryAttempt = DefaultMaxDeliveryAttempt
	}
	if c.MaxDeferDuration == 0 {
		c.MaxDeferDuration = DefaultMaxDeferDuration
	}
	if c.MaxDefers == 0 {
		c.MaxDefers = DefaultMaxDefers
	}
	if c.MaxDeferredAge == 0 {
		c.MaxDeferredAge = DefaultMaxDeferredAge
	}
	if c.DeferTrackerCapacity == 0 {
		c.DeferTrackerCapacity = DefaultDeferTrackerCapacity
	}
	return c
}

func (c ThrottleConfig) validate() error {
	switch {
	case c.MaxDeliveryAttempt < 0:
		return optionError("MaxDeliveryAttempt", "must not be negative")
	case c.MaxDeferDuration < 0 || c.MaxDeferDuration > MaxInvisibleDuration:
		return optionError("MaxDeferDuration", "must be within 0..12h")
	case c.MaxDefers < 0:
		return optionError("MaxDefers", "must not be negative")
	case c.MaxDeferredAge < 0:
		return optionError("MaxDeferredAge", "must not be negative")
	case c.DeferTrackerCapacity < 0:
		return optionError("DeferTrackerCapacity", "must not be negative")
	}
	return nil
}

// Outcome is what a throttle did with a message.
type Outcome int

const (
	// Acked: the policy chose ack.
	Acked Outcome = iota + 1
	// Deferred: the message was made invisible; it will be delivered again.
	Deferred
	// AckedByValve: the policy chose defer but a safety valve acked instead.
	AckedByValve
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Deferred:
		return "deferred"
	case AckedByValve:
		return "acked-by-valve"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Throttle applies a ThrottlePolicy at the end of a pipeline, with safety
// valves. It is safe for concurrent use.
type Throttle[T any] struct {
	acker   *Acker
	policy  ThrottlePolicy[T]
	cfg     ThrottleConfig
	defers  *deferTracker
	metrics *metrics
	now     func() time.Time
}

// NewThrottle builds a throttle stage that acks or defers through acker.
func NewThrottle[T any](acker *Acker, policy ThrottlePolicy[T], cfg ThrottleConfig) (*Throttle[T], error) {
	if acker == nil {
		return nil, optionError("Acker", "required")
	}
	if policy == nil {
		return nil, optionError("Policy", "required")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var m *metrics
	if acker.pool != nil {
		m = acker.pool.metrics
	} else {
		m = newMetrics(nil)
	}
	return &Throttle[T]{acker: acker, policy: policy, cfg: cfg, defers: newDeferTracker(cfg.DeferTrackerCapacity), metrics: m, now: time.Now}, nil
}

// Process decides for m and carries the decision out: ack, or defer (unless
// a safety valve acks instead). The error is the ack's or the deferral's.
func (t *Throttle[T]) Process(ctx context.Context, m *AckableMessage[T]) (Outcome, error) {
	deferred, valve, err := t.apply(ctx, m)
	switch {
	case deferred:
		return Deferred, err
	case valve:
		return AckedByValve, t.acker.Ack(ctx, m.Handle)
	default:
		return Acked, t.acker.Ack(ctx, m.Handle)
	}
}

// Admit runs the policy before the work instead of after it: when the policy
// defers m (and no safety valve forbids it), Admit defers it and returns
// false; otherwise it returns true and m goes on to be processed and acked
// later. Deferring before an expensive stage is what keeps a hot lite topic
// from taking the workers from the others.
func (t *Throttle[T]) Admit(ctx context.Context, m *AckableMessage[T]) (bool, error) {
	deferred, _, err := t.apply(ctx, m)
	return !deferred, err
}

// apply asks the policy and defers m when it says so and no valve fires.
func (t *Throttle[T]) apply(ctx context.Context, m *AckableMessage[T]) (deferred, valveFired bool, err error) {
	d := t.policy.Decide(m)
	if d.Defer <= 0 {
		t.defers.forget(m.Handle.MessageID)
		return false, false, nil
	}
	if valve := t.valve(m); valve != "" {
		t.defers.forget(m.Handle.MessageID)
		t.metrics.deferred(ctx, "valve:"+valve)
		return false, true, nil
	}
	if _, err := t.acker.ChangeInvisibleDuration(ctx, m.Handle, min(d.Defer, t.cfg.MaxDeferDuration)); err != nil {
		return true, false, err
	}
	t.defers.add(m.Handle.MessageID)
	reason := d.Reason
	if reason == "" {
		reason = "policy"
	}
	t.metrics.deferred(ctx, reason)
	return true, false, nil
}

// valve names the safety valve that forbids deferring m, or "".
func (t *Throttle[T]) valve(m *AckableMessage[T]) string {
	switch {
	case m.Meta.DeliveryAttempt >= t.cfg.MaxDeliveryAttempt:
		return "max-delivery-attempt"
	case t.defers.count(m.Handle.MessageID) >= t.cfg.MaxDefers:
		return "max-defers"
	case !m.Meta.BornTime.IsZero() && t.now().Sub(m.Meta.BornTime) >= t.cfg.MaxDeferredAge:
		return "max-deferred-age"
	}
	return ""
}

// deferTracker counts deferrals per message id, forgetting the oldest ids
// beyond its capacity.
type deferTracker struct {
	mu     sync.Mutex
	cap    int
	counts map[string]int
	order  []string // insertion order, a ring of cap ids
	next   int
}

func newDeferTracker(capacity int) *deferTracker {
	return &deferTracker{cap: capacity, counts: map[string]int{}}
}

func (d *deferTracker) add(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.counts[id]; !ok {
		if len(d.order) < d.cap {
			d.order = append(d.order, id)
		} else {
			delete(d.counts, d.order[d.next])
			d.order[d.next] = id
			d.next = (d.next + 1) % d.cap
		}
	}
	d.counts[id]++
}

func (d *deferTracker) count(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[id]
}

func (d *deferTracker) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// The id stays in the ring until overwritten; deleting the count is enough.
	delete(d.counts, id)
}
