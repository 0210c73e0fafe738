package rmqflow

import (
	"container/list"
	"context"
	"errors"
	"fmt"
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

// ErrAlreadyDeadLettered is Throttle.Process's error for a message whose
// valve fired and that was delivered from the group's dead-letter queue
// already: it is not forwarded there again, nor acked; it comes back when
// its invisibility ends.
var ErrAlreadyDeadLettered = errors.New("rmqflow: a safety valve fired for a message delivered from the dead-letter queue; not forwarded again")

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

// ValveAction is what happens to a message once a safety valve fired, when
// no dead-letter function took it (Runner.SetDeadLetter). No ValveAction but
// ValveAck ever acks, and the zero value is the default.
type ValveAction uint8

const (
	// ValveDeadLetterQueue moves the message to its group's dead-letter
	// queue on the broker, %DLQ%<group>, where it can be read back
	// (ForwardMessageToDeadLetterQueue, as the official push consumers do
	// once their retries are spent). When the forward fails nothing is
	// acked: the message comes back when its invisibility ends, and the
	// broker's own retry limit takes it to the same queue. The default.
	//
	// On RocketMQ 5.5.0 a lite message in %DLQ%<group> is also dispatched
	// into its lite topic again and cannot be acked for good
	// (docs/broker-semantics.md, scenario g): to park lite messages for
	// good, give the Runner a dead-letter function, such as DeadLetterToSink
	// with a topic of your own.
	ValveDeadLetterQueue ValveAction = iota
	// ValveAck acks the message: it is dropped (logged at ERROR level with
	// its handle, and counted). This is the reference connector's valve;
	// choose it only when losing a message that kept failing is what you
	// want.
	ValveAck
)

func (a ValveAction) String() string {
	switch a {
	case ValveDeadLetterQueue:
		return "dead-letter-queue"
	case ValveAck:
		return "ack"
	}
	return fmt.Sprintf("ValveAction(%d)", uint8(a))
}

// ThrottleConfig holds the safety valves of a Throttle and of a Runner's
// deferrals (RunnerConfig.ErrorValves). A valve forbids deferring a message
// once more; what then happens to it depends on the stage: Throttle.Admit
// admits it (the work decides), and Throttle.Process and a Runner do what
// OnValve says (by default the broker's dead-letter queue), unless a
// Runner's dead-letter function takes it. No valve acks unless OnValve is
// ValveAck.
//
// A message is judged by its own returns: the deferrals, releases and
// leaves decided for it (by its handler, an error, or the throttle's
// policy), counted in this process. A message of a lite topic (or of a
// message group) that is delivered again only because an earlier one of
// its lite topic was deferred — held back behind it — is not charged for
// that, and neither is a failed ack; nor is the broker's delivery attempt
// of such a message read, which grows with every return of the lite topic's
// head (docs/broker-semantics.md, scenarios e and o). For a message without
// lite topic or message group, whose broker attempt counts its own
// deliveries only, the valve takes the larger of that attempt and its own
// count, so that it holds across restarts.
type ThrottleConfig struct {
	// MaxDeliveryAttempt: once a message's own delivery count (its own
	// returns + 1, see above) reaches it, the valve max-delivery-attempt
	// fires. Default 16, the broker's default retry limit. Where the
	// group's own limit is known (a Runner reads it from the broker's
	// settings: retry limit + 1 deliveries), the valve fires at that limit
	// when it is lower; for a message of a lite topic or message group, at
	// half of it (rounded up), because its successors are delivered again
	// with it every time it comes back and spend the same budget on the
	// broker (docs/grpc-connector.md, "Sizing a lite group's retry limit").
	MaxDeliveryAttempt int32
	// MaxDeferDuration caps every deferral (the reference's
	// max-invisible-duration). Default 30 min.
	MaxDeferDuration time.Duration
	// MaxDefers: after this many deferrals, releases or leaves of one
	// message decided here, the valve max-defers fires. Default 16.
	MaxDefers int
	// MaxDeferredAge: once a message is older than this (since its born
	// time), the valve max-deferred-age fires. It survives restarts because
	// the age travels with the message. Default 24 h.
	MaxDeferredAge time.Duration
	// DeferTrackerCapacity bounds the messages whose own returns are
	// remembered (oldest forgotten first). Default 100,000.
	DeferTrackerCapacity int
	// OnValve is what happens to a message once a valve fired and no
	// dead-letter function took it: ValveDeadLetterQueue (default: the
	// group's dead-letter queue on the broker) or ValveAck (dropped).
	OnValve ValveAction
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
	case c.OnValve != ValveDeadLetterQueue && c.OnValve != ValveAck:
		return optionError("OnValve", "unknown action")
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
	// AckedByValve: the policy chose defer but a safety valve fired, and
	// ThrottleConfig.OnValve is ValveAck: the message was acked (dropped).
	AckedByValve
	// Failed: the ack, the deferral or the forward to the dead-letter queue
	// failed (the error says why); nothing changed on the broker as far as
	// this process knows, and the message comes back when its invisibility
	// ends.
	Failed
	// DeadLettered: the policy chose defer but a safety valve fired, and
	// the message was moved to its group's dead-letter queue on the broker
	// (ThrottleConfig.OnValve ValveDeadLetterQueue, the default).
	DeadLettered
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
	case DeadLettered:
		return "dead-lettered"
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

// Process decides for m and carries the decision out: ack, or defer. When a
// safety valve forbids the deferral, m goes where ThrottleConfig.OnValve
// says: by default to its group's dead-letter queue on the broker
// (DeadLettered); acked (AckedByValve) only with ValveAck. On an error the
// outcome is Failed: the RPC did not take, and the message comes back when
// its invisibility ends. A policy that returns the zero Decision gets
// (Failed, ErrNoDecision), and nothing is sent.
func (t *Throttle[T]) Process(ctx context.Context, m *AckableMessage[T]) (Outcome, error) {
	act, _, err := t.apply(ctx, m, 0)
	switch act {
	case actDeferred:
		return Deferred, nil
	case actFailed:
		return Failed, err
	case actValve:
		if t.cfg.OnValve != ValveAck && m.Meta.DeadLettered() {
			// A delivery from the dead-letter queue already (a lite
			// message on 5.5.0: scenario g): another forward would only
			// add a copy.
			return Failed, fmt.Errorf("%w: %s", ErrAlreadyDeadLettered, m.Handle)
		}
		if t.cfg.OnValve != ValveAck {
			if err := t.acker.forwardToDeadLetterQueue(ctx, m.Handle, ownAttempt(&m.Meta, t.valves.deferrals(m.Handle.MessageID)), t.valves.maxAttempt(m.Handle.Group, ordered(&m.Meta))); err != nil {
				return Failed, err
			}
			t.valves.forget(m.Handle.MessageID)
			return DeadLettered, nil
		}
		t.valves.forget(m.Handle.MessageID)
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
// later. A message a valve no longer lets the throttle defer is admitted:
// its work decides what becomes of it. Deferring before an expensive stage is what keeps a hot lite topic
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
// returns what it did and, when deferred, for how long. returns is the
// count of m's own returns decided elsewhere (a Runner's handler decisions);
// the throttle adds its own deferrals of m.
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
	if valve := t.valves.firedAfter(&m.Meta, m.Handle, returns+t.valves.deferrals(m.Handle.MessageID)); valve != "" {
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

// maxAttempt is the own delivery count at which the max-delivery-attempt
// valve fires for a message of group; ordered: the message has a lite topic
// or a message group, whose successors spend the group's budget with it.
func (v *valves) maxAttempt(group string, ordered bool) int32 {
	var g int32
	if v.groupMax != nil {
		g = v.groupMax(group)
	}
	return DeliveryLimit(v.cfg.MaxDeliveryAttempt, g, ordered)
}

// ordered reports whether the broker hands m out in order behind the
// earlier messages of its lite topic or message group, and so delivers it
// again whenever one of them comes back: its delivery attempt is then not
// its own.
func ordered(m *Metadata) bool { return m.LiteTopic != "" || m.MessageGroup != "" }

// ownAttempt is a message's own delivery count, given its own returns so far
// (see ThrottleConfig): own+1, or, for a message outside any order, the
// broker's attempt when that is larger (its deliveries elsewhere, before a
// restart, count too).
func ownAttempt(m *Metadata, own int) int32 {
	return ownDeliveries(own, ordered(m), m.DeliveryAttempt)
}

// fired names the safety valve that forbids deferring the message h names,
// or "".
func (v *valves) fired(meta *Metadata, h ReceiptHandle) string {
	return v.firedAfter(meta, h, v.defers.count(h.MessageID))
}

// firedAfter names the safety valve that forbids deferring once more a
// message with own returns decided for it so far (not its hold-backs behind
// an earlier message of its lite topic, nor its failed acks), or "".
func (v *valves) firedAfter(meta *Metadata, h ReceiptHandle, own int) string {
	switch {
	case ownAttempt(meta, own) >= v.maxAttempt(h.Group, ordered(meta)):
		return "max-delivery-attempt"
	case v.defers.count(h.MessageID) >= v.cfg.MaxDefers:
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
