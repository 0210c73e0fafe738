package rmqflow

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// DecisionKind is what a Decision does with a message.
type DecisionKind uint8

const (
	// DecisionNone is the zero Decision: not a decision. A Runner treats a
	// handler that returns it as a failed handler, and a Throttle refuses
	// it, so that a forgotten return value never acks by accident.
	DecisionNone DecisionKind = iota
	// DecisionAck acks the message: the work is done.
	DecisionAck
	// DecisionDefer makes the message invisible for Delay; the broker then
	// delivers it again.
	DecisionDefer
	// DecisionRelease makes the message visible again at once
	// (ChangeInvisibleDuration to 0).
	DecisionRelease
	// DecisionLeave does nothing on the broker: the message comes back when
	// its current invisibility ends.
	DecisionLeave
	// DecisionSettled says the handler already acked or deferred the message
	// itself.
	DecisionSettled
)

func (k DecisionKind) String() string {
	switch k {
	case DecisionNone:
		return "none"
	case DecisionAck:
		return "ack"
	case DecisionDefer:
		return "defer"
	case DecisionRelease:
		return "release"
	case DecisionLeave:
		return "leave"
	case DecisionSettled:
		return "settled"
	}
	return fmt.Sprintf("DecisionKind(%d)", uint8(k))
}

// Decision is what to do with a message whose work is done (or, from a
// ThrottlePolicy, with a message before or after its work). Build it with
// Ack, Defer, Release, Leave or Settled; the zero Decision is DecisionNone,
// which never acks. No Decision but Ack() ever acks.
type Decision struct {
	kind   DecisionKind
	delay  time.Duration
	reason string
}

// Ack is the decision to ack.
func Ack() Decision { return Decision{kind: DecisionAck} }

// Defer is the decision to make the message invisible for d, for a reason
// shown in logs and metrics. A d of zero or less (a retry time already
// past) releases the message: it is visible again at once. A deferral never
// acks.
func Defer(d time.Duration, reason string) Decision {
	if d <= 0 {
		return Decision{kind: DecisionRelease, reason: reason}
	}
	return Decision{kind: DecisionDefer, delay: d, reason: reason}
}

// Release is the decision to make the message visible again at once, so that
// the group gets it back promptly.
func Release() Decision { return Decision{kind: DecisionRelease, reason: "release"} }

// Leave is the decision to do nothing on the broker: the message comes back
// when its invisibility ends (and its lease, if any, ends now).
func Leave() Decision { return Decision{kind: DecisionLeave} }

// Settled tells a Runner that the handler acked or deferred the message
// itself (for instance through Throttle.Process), so the runner does nothing
// more with it and goes on with its lite topic's next message. To keep a
// lite topic's order when the message was deferred, return Defer and let the
// runner defer it instead.
func Settled() Decision { return Decision{kind: DecisionSettled} }

// Kind says what the decision does.
func (d Decision) Kind() DecisionKind { return d.kind }

// Delay is the deferral of a DecisionDefer; zero for every other kind.
func (d Decision) Delay() time.Duration { return d.delay }

// Reason labels a deferral or release in logs and metrics.
func (d Decision) Reason() string { return d.reason }

func (d Decision) String() string {
	switch d.kind {
	case DecisionDefer:
		return fmt.Sprintf("defer %v (%s)", d.delay, d.reason)
	case DecisionRelease:
		return fmt.Sprintf("release (%s)", d.reason)
	}
	return d.kind.String()
}

// ErrNoDecision is the error of a zero Decision: a handler or policy returned
// Decision{} instead of Ack(), Defer(...), Release(), Leave() or Settled().
var ErrNoDecision = errors.New("rmqflow: the zero Decision is not a decision (return Ack(), Defer(...), Release(), Leave() or Settled())")

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
	// broker's default retry limit. A Runner lowers it to the group's own
	// limit and compares it with its own count of the message's deliveries
	// as well, because on lite topics the broker's attempt restarts at 1
	// while its dead-letter count does not (docs/grpc-connector.md).
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

// Validate reports what NewThrottle would refuse in c.
func (c ThrottleConfig) Validate() error { return c.validate() }

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
	// Acked: the policy chose ack, and the ack succeeded.
	Acked Outcome = iota + 1
	// Deferred: the message was made invisible (or released); it will be
	// delivered again.
	Deferred
	// AckedByValve: the policy chose defer but a safety valve acked instead.
	AckedByValve
	// Failed: the ack or the deferral failed (the error says why); nothing
	// changed on the broker as far as this process knows, and the message
	// comes back when its invisibility ends.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Deferred:
		return "deferred"
	case AckedByValve:
		return "acked-by-valve"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Throttle applies a ThrottlePolicy at the end of a pipeline, with safety
// valves. It is safe for concurrent use.
type Throttle[T any] struct {
	acker   *Acker
	policy  ThrottlePolicy[T]
	cfg     ThrottleConfig
	valves  *valves
	metrics *metrics
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
	return &Throttle[T]{acker: acker, policy: policy, cfg: cfg, valves: newValves(cfg, time.Now), metrics: m}, nil
}

// Process decides for m and carries the decision out: ack, or defer (unless
// a safety valve acks instead). On an error the outcome is Failed: the RPC
// did not take, and the message comes back when its invisibility ends. A
// policy that returns the zero Decision gets (Failed, ErrNoDecision), and
// nothing is sent.
func (t *Throttle[T]) Process(ctx context.Context, m *AckableMessage[T]) (Outcome, error) {
	act, _, err := t.apply(ctx, m, 0)
	switch act {
	case actDeferred:
		return Deferred, nil
	case actFailed:
		return Failed, err
	}
	if err := t.acker.Ack(ctx, m.Handle); err != nil {
		return Failed, err
	}
	if act == actValve {
		return AckedByValve, nil
	}
	return Acked, nil
}

// Admit runs the policy before the work instead of after it: when the policy
// defers m (and no safety valve forbids it), Admit defers it and returns
// false; otherwise it returns true and m goes on to be processed and acked
// later. Deferring before an expensive stage is what keeps a hot lite topic
// from taking the workers from the others. When the deferral fails, Admit
// returns false and the error: the message comes back when its invisibility
// ends.
func (t *Throttle[T]) Admit(ctx context.Context, m *AckableMessage[T]) (bool, error) {
	act, _, err := t.apply(ctx, m, 0)
	switch act {
	case actDeferred:
		return false, nil
	case actFailed:
		if errors.Is(err, ErrNoDecision) {
			return true, err // nothing was deferred: let the work decide
		}
		return false, err
	}
	return true, nil
}

// throttle actions.
type throttleAct int

const (
	actAck      throttleAct = iota // the policy chose ack
	actValve                       // the policy chose defer; a valve forbids it
	actDeferred                    // deferred (or released) on the broker
	actFailed                      // nothing done: the deferral failed or no decision
)

// apply asks the policy and defers m when it says so and no valve fires. It
// returns what it did and, when deferred, for how long.
func (t *Throttle[T]) apply(ctx context.Context, m *AckableMessage[T], returns int) (throttleAct, time.Duration, error) {
	d := t.policy.Decide(m)
	var delay time.Duration
	switch d.kind {
	case DecisionAck:
		t.valves.forget(m.Handle.MessageID)
		return actAck, 0, nil
	case DecisionDefer:
		delay = min(d.delay, t.cfg.MaxDeferDuration)
	case DecisionRelease:
	default:
		return actFailed, 0, fmt.Errorf("%w: the throttle policy returned %v", ErrNoDecision, d.kind)
	}
	if valve := t.valves.firedAfter(&m.Meta, m.Handle, returns); valve != "" {
		t.valves.forget(m.Handle.MessageID)
		t.metrics.deferred(ctx, "valve:"+valve)
		return actValve, 0, nil
	}
	if _, err := t.acker.ChangeInvisibleDuration(ctx, m.Handle, delay); err != nil {
		return actFailed, 0, err
	}
	t.valves.count(m.Handle.MessageID)
	reason := d.reason
	if reason == "" {
		reason = "policy"
	}
	t.metrics.deferred(ctx, reason)
	return actDeferred, delay, nil
}

// valves are the safety valves shared by the throttle and the Runner's error
// path: each names a reason not to defer a message once more.
type valves struct {
	cfg    ThrottleConfig
	defers *deferTracker
	now    func() time.Time
	// groupMax, when set, is the group's own delivery limit (see
	// Source.groupMaxAttempts): MaxDeliveryAttempt is lowered to it, so that
	// the valve fires before the broker dead-letters the message.
	groupMax func(group string) int32
}

func newValves(cfg ThrottleConfig, now func() time.Time) *valves {
	return &valves{cfg: cfg, defers: newDeferTracker(cfg.DeferTrackerCapacity), now: now}
}

// maxAttempt is the delivery attempt at which the max-delivery-attempt valve
// fires for group.
func (v *valves) maxAttempt(group string) int32 {
	limit := v.cfg.MaxDeliveryAttempt
	if v.groupMax != nil {
		if g := v.groupMax(group); g > 0 && g < limit {
			limit = g
		}
	}
	return limit
}

// fired names the safety valve that forbids deferring the message h names,
// or "".
func (v *valves) fired(meta *Metadata, h ReceiptHandle) string { return v.firedAfter(meta, h, 0) }

// firedAfter is fired for a message known to have been given back returns
// times before this delivery: it was delivered at least returns+1 times,
// whatever attempt the broker reports. On a lite topic the broker's attempt
// restarts at 1 whenever a batch holds a message never delivered before,
// while the broker dead-letters by its own running count, which also grows
// for every message held back behind a deferred head (docs/broker-semantics.md,
// scenarios e, g and o).
func (v *valves) firedAfter(meta *Metadata, h ReceiptHandle, returns int) string {
	id := h.MessageID
	switch {
	case max(meta.DeliveryAttempt, int32(min(returns, math.MaxInt32-1))+1) >= v.maxAttempt(h.Group):
		return "max-delivery-attempt"
	case v.defers.count(id) >= v.cfg.MaxDefers:
		return "max-defers"
	case !meta.BornTime.IsZero() && v.now().Sub(meta.BornTime) >= v.cfg.MaxDeferredAge:
		return "max-deferred-age"
	}
	return ""
}

// count records one more deferral of id; forget drops its count.
func (v *valves) count(id string)         { v.defers.add(id) }
func (v *valves) forget(id string)        { v.defers.forget(id) }
func (v *valves) deferrals(id string) int { return v.defers.count(id) }

// deferTracker counts deferrals per message id. Beyond its capacity it
// forgets the id least recently counted (an LRU list): a count is never
// evicted while a more recently counted id is kept.
type deferTracker struct {
	mu     sync.Mutex
	cap    int
	counts map[string]*list.Element // of *deferCount
	lru    *list.List               // front: least recently counted
}

type deferCount struct {
	id string
	n  int
}

func newDeferTracker(capacity int) *deferTracker {
	return &deferTracker{cap: capacity, counts: map[string]*list.Element{}, lru: list.New()}
}

func (d *deferTracker) add(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.counts[id]; ok {
		e.Value.(*deferCount).n++
		d.lru.MoveToBack(e)
		return
	}
	if d.cap <= 0 {
		return
	}
	for d.lru.Len() >= d.cap {
		oldest := d.lru.Front()
		delete(d.counts, oldest.Value.(*deferCount).id)
		d.lru.Remove(oldest)
	}
	d.counts[id] = d.lru.PushBack(&deferCount{id: id, n: 1})
}

func (d *deferTracker) count(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.counts[id]; ok {
		return e.Value.(*deferCount).n
	}
	return 0
}

func (d *deferTracker) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.counts[id]; ok {
		delete(d.counts, id)
		d.lru.Remove(e)
	}
}

func (d *deferTracker) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.counts)
}
