package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Handler processes one message and says what to do with it: Ack(),
// Defer(d, reason), or an error (handled per RunnerConfig.OnError).
type Handler[T any] func(ctx context.Context, m *AckableMessage[T]) (Decision, error)

// ErrorPolicy is what a Runner does with a message whose handler failed.
type ErrorPolicy int

const (
	// ErrorDefer defers the message with exponential backoff by its own
	// delivery count (ErrorBackoff × 2^(n-1), at most ErrorBackoffMax, where
	// n is 1 + the returns decided for the message so far: see
	// ThrottleConfig). The default.
	ErrorDefer ErrorPolicy = iota
	// ErrorLeave does nothing on the broker: the message comes back when
	// its invisibility ends. Leaving counts toward RunnerConfig.ErrorValves
	// like a deferral, so a message that keeps failing is dead-lettered in
	// the end.
	ErrorLeave
)

// ShutdownMode is how a Runner stops when its context ends.
type ShutdownMode int

const (
	// ShutdownRelease starts no new message once Run's context ends, waits
	// for the handlers in flight and their acks, then gives every message
	// not started back to the group (visible again after ReleaseDelay) and
	// closes the source. A handler that releases or defers its message
	// during the shutdown (for instance when ShutdownTimeout cancelled its
	// context) gives it at least ReleaseDelay too. The default.
	ShutdownRelease ShutdownMode = iota
	// ShutdownFinish stops receiving and handles every message already
	// fetched before returning.
	ShutdownFinish
)

// ReleaseDelay is the least invisibility a Runner shutting down in release
// mode gives the messages it did not start (the source's
// ReleaseInvisibleDuration when longer). It releases them once the handlers
// in flight are done, right before its source closes; the source still
// polls until then, and a message visible at once would be received again by
// it, and if that answer were in transit when Close cuts the receive, the
// message would stay invisible for a whole InvisibleDuration (on rmqfake
// about 1 shutdown in 30 lost a message that way with a 0 s release;
// TestRunnerShutdownReleaseStartsNothingNew). On RocketMQ 5.5.0, stopping the
// receives before releasing is no cure: lite topics released while their
// only subscriber is connected but not polling were not dispatched to a new
// consumer within 48 s.
const ReleaseDelay = time.Second

// Defaults of RunnerConfig.
const (
	DefaultRunnerConcurrency = 8
	DefaultErrorBackoff      = time.Second
	DefaultErrorBackoffMax   = 10 * time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
	// DefaultMaxDeadLetterFailures is the default of
	// RunnerConfig.MaxDeadLetterFailures: a park that failed 3 times in a
	// row for one message is taken for one that cannot succeed (a topic
	// that refuses every copy), not for a passing outage.
	DefaultMaxDeadLetterFailures = 3
)

// RunnerConfig configures a Runner. Zero fields take the defaults.
type RunnerConfig struct {
	// Concurrency is the most handlers running at once. Default 8.
	Concurrency int
	// OnError is ErrorDefer (default) or ErrorLeave.
	OnError ErrorPolicy
	// ErrorBackoff and ErrorBackoffMax shape ErrorDefer. Defaults 1 s, 10 min.
	ErrorBackoff    time.Duration
	ErrorBackoffMax time.Duration
	// ErrorValves are the safety valves of every return the runner makes
	// (a failed handler, a handler's Defer, Release or Leave), with the
	// fields and defaults of the throttle's: once a message's own returns
	// reach MaxDeliveryAttempt (lowered to the group's limit; see
	// ThrottleConfig) or MaxDefers, or it is older than MaxDeferredAge, it
	// is given up on instead of returned again, so that no message loops
	// for ever: handed to the dead-letter function (Runner.SetDeadLetter),
	// or else sent where ErrorValves.OnValve says — by default the group's
	// dead-letter queue on the broker; acked (dropped) only with ValveAck.
	// A message is judged by its own returns only: being held back behind
	// an earlier message of its lite topic, or a failed ack, does not count.
	// MaxDeferDuration caps each deferral.
	ErrorValves ThrottleConfig
	// MaxDeadLetterFailures is how many times the dead-letter function
	// (Runner.SetDeadLetter) may fail (return an error, or panic) for one
	// message before the runner stops calling it for that message and
	// sends it where ErrorValves.OnValve says instead — by default the
	// group's dead-letter queue on the broker; if that fails too, the
	// message is left to come back, never acked unless OnValve is
	// ValveAck. Each failure defers the message by min(ErrorBackoffMax,
	// ErrorValves.MaxDeferDuration) first. A park topic that refuses every
	// copy (one of the wrong type, deleted, or denied since
	// CheckDeadLetterSink passed) would otherwise bring the message, and
	// block its lite topic, for ever. Counted per message id in this
	// runner (up to ErrorValves.DeferTrackerCapacity ids). Default
	// DefaultMaxDeadLetterFailures (3).
	MaxDeadLetterFailures int
	// Shutdown is ShutdownRelease (default) or ShutdownFinish.
	Shutdown ShutdownMode
	// ShutdownTimeout bounds the shutdown; then handlers' contexts are
	// cancelled. Default 30 s.
	ShutdownTimeout time.Duration
	// MaxHeld is the most messages the runner holds at once: waiting for a
	// worker, being handled, or waiting for the broker to answer their ack.
	// Default max(Concurrency × 4, DefaultRunnerMaxHeld). A worker is free
	// as soon as it sent its ack, so the acks awaiting their answer (an ack
	// waits up to the ack pool's Linger to share an RPC) would otherwise
	// take the room of the messages that keep the workers busy; and since a
	// lite topic runs one message at a time, throughput needs many lite
	// topics held at once: the default has room for a receive batch of
	// each of 128 lite topics (see DefaultRunnerMaxHeld). One lite topic
	// never takes more than a receive batch (SourceConfig.MaxMessageNum) of
	// it: the broker hands out one batch of a lite topic at a time
	// (docs/broker-semantics.md, scenario e), so a hot lite topic's backlog
	// stays on the broker and the others keep their room
	// (TestRunnerHotLiteTopicLeavesRoomForCold).
	MaxHeld int
	// PipelineAcks lets a lite topic's (or message group's) next message
	// start as soon as its predecessor's handler returned Ack, without
	// waiting for the broker's answer to that ack. The messages of a lite
	// topic still run one at a time and in order, and an ack that fails
	// still holds back the lite topic's messages not yet started until the
	// failed one has come back. But those that started while its ack was on
	// the wire have run, and the failed one runs again after them, together
	// with those of them it came with in one receive (the broker moves a
	// lite topic's offset only up to the first unacked message of a
	// receive): duplicates out of order (TestRunnerPipelineAcksFailedAck).
	// Worth it with fast handlers over few lite topics, where waiting for
	// each answer is most of a message's time (BenchmarkRunnerVsLoop).
	// Default false: a lite topic's next message starts only after its
	// predecessor's ack was answered OK.
	PipelineAcks bool
	// Hints name, in the runner's give-up log lines, the settings its user
	// has: an integration sets them to its own config keys, so that its
	// user reads a key they can set, not a Go API. Zero fields name the Go
	// API.
	Hints RunnerHints
}

// RunnerHints are the names a Runner's give-up log lines use for the
// settings that decide what becomes of a message given up on (see
// RunnerConfig.ErrorValves).
type RunnerHints struct {
	// DeadLetter names how to park such a message in a place of one's own,
	// as in "set <DeadLetter> to park it elsewhere". Default
	// "Runner.SetDeadLetter".
	DeadLetter string
	// Drop names the setting that acks (drops) such a message, as in
	// "acking (dropping) it as <Drop> says". Default
	// "ErrorValves.OnValve = ValveAck".
	Drop string
}

// DefaultRunnerMaxHeld is the least default of RunnerConfig.MaxHeld: room
// for a receive batch (SourceConfig.MaxMessageNum, 32) of each of 128 lite
// topics at once. The broker hands out one batch of a lite topic at a time,
// and once the runner's room is used up the source's queue fills and its
// receives stop, so the lite topics not yet handed out wait on the broker
// while the workers run the few held, one message at a time each
// (TestRunnerHoldsABatchOfEveryLiteTopic: 100 lite topics × 32). With 1024,
// a drain over 100 lite topics (issue 25, point 5) kept the source's queue
// full and received smaller batches, 0.045 receive RPCs a message against
// 0.031 at 4096, and ran well below a plain Source loop's rate
// (docs/benchmarks.md). Every message held is renewed; a runner full of
// messages taken at once renews them earlier than RenewalAheadTime, so
// that 16 renewals at a time get through them all before they end
// (TestRunnerRenewsACrowdInTime).
const DefaultRunnerMaxHeld = 4096

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultRunnerConcurrency
	}
	if c.ErrorBackoff == 0 {
		c.ErrorBackoff = DefaultErrorBackoff
	}
	if c.ErrorBackoffMax == 0 {
		c.ErrorBackoffMax = DefaultErrorBackoffMax
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = max(c.Concurrency*4, DefaultRunnerMaxHeld)
	}
	if c.MaxDeadLetterFailures == 0 {
		c.MaxDeadLetterFailures = DefaultMaxDeadLetterFailures
	}
	if c.Hints.DeadLetter == "" {
		c.Hints.DeadLetter = "Runner.SetDeadLetter"
	}
	if c.Hints.Drop == "" {
		c.Hints.Drop = "ErrorValves.OnValve = ValveAck"
	}
	return c
}

func (c RunnerConfig) validate() error {
	switch {
	case c.Concurrency < 0:
		return optionError("Concurrency", "must not be negative")
	case c.MaxHeld < 0:
		return optionError("MaxHeld", "must not be negative")
	case c.OnError != ErrorDefer && c.OnError != ErrorLeave:
		return optionError("OnError", "unknown policy")
	case c.Shutdown != ShutdownRelease && c.Shutdown != ShutdownFinish:
		return optionError("Shutdown", "unknown mode")
	case c.ErrorBackoff < 0:
		return optionError("ErrorBackoff", "must not be negative")
	case c.ErrorBackoffMax < 0:
		return optionError("ErrorBackoffMax", "must not be negative")
	case c.ShutdownTimeout < 0:
		return optionError("ShutdownTimeout", "must not be negative")
	case c.MaxDeadLetterFailures < 0:
		return optionError("MaxDeadLetterFailures", "must not be negative")
	}
	if err := c.ErrorValves.validate(); err != nil {
		var oe *OptionError
		if errors.As(err, &oe) {
			return optionError("ErrorValves."+oe.Option, oe.Reason)
		}
		return err
	}
	return nil
}

// DeadLetterFunc parks a message that the runner gives up on: its handler
// kept failing (or deferring) until a safety valve of RunnerConfig.ErrorValves
// fired. DeadLetterToSink makes one that writes the message to a topic of
// your own. cause is the handler's last error (or names the valve when the
// handler deferred). Returning nil acks the message; an error (or a panic,
// recovered) keeps it: the runner defers it by ErrorBackoffMax (at most
// ErrorValves.MaxDeferDuration), and when it comes back the handler runs
// again, and the function too if the handler fails or defers again (the
// valve has fired for good) — up to RunnerConfig.MaxDeadLetterFailures
// failures (3); then the message goes where ErrorValves.OnValve says.
type DeadLetterFunc[T any] func(ctx context.Context, m *AckableMessage[T], cause error) error

// Runner is the loop of a plain Go service: it starts a Source, runs the
// handler on each message with bounded concurrency, one message of a lite
// topic (or message group) at a time and in order (messages of different
// lite topics run in parallel), and acks, defers, releases or leaves each as
// the handler says.
//
// Order: once a message of a lite topic ends without an ack (deferred,
// released, left, failed, or deferred by the throttle), the runner does not
// run that lite topic's later messages before it: those it holds are
// deferred until the first one is due back, and it goes on with the lite
// topic only when that message has come back (or, if it never does, after
// the source's InvisibleDuration more). On the broker the lite topic is
// blocked behind its unacked head anyway (docs/broker-semantics.md,
// scenario e).
//
// A held message whose delivery the broker let go (its renewal was refused
// as expired, or the source received a newer delivery of it: a renewal came
// too late) is never started: the runner skips it and holds its lite topic
// back behind it as above, and a newer copy of it is its return
// (TestRunnerSkipsALostDelivery, TestRunnerTakesTheNewCopyOfAStaleHead). A
// handler already running when its delivery is lost runs to its end; its
// ack fails and holds the lite topic back likewise.
//
// Acks: a worker sends its message's ack and takes up other work at once,
// without waiting for the broker's answer; but the lite topic stays owned
// until that answer came: its next message starts only after its
// predecessor's ack was answered OK, so no message runs while an earlier
// one of its lite topic may still come back (RunnerConfig.PipelineAcks
// trades that for speed). A failed ack (refused, expired
// handle, or sent with its outcome unknown) counts as a message that ended
// without an ack: it is expected back, and the lite topic's later messages
// are held back behind it as above. If the ack did take effect after all
// (outcome unknown, or its answer lost), the message never comes back: the
// lite topic goes on with the first of its messages the broker hands out
// after the failure, since the broker would have handed out the failed one
// first (TestRunnerAckAppliedButReportedFailed). Messages waiting for their ack count toward
// RunnerConfig.MaxHeld, and shutdown waits for them (within
// ShutdownTimeout).
//
// Handler panics are recovered and treated as handler errors.
type Runner[T any] struct {
	src        *Source[T]
	handle     Handler[T]
	cfg        RunnerConfig
	throttle   *Throttle[T]
	deadLetter DeadLetterFunc[T]
	valves     *valves
	// returns counts, per message id, the deliveries the runner gave back
	// (deferred, released, left, held back, or whose ack failed) and has not
	// acked since: each one brings the message back once more, whatever
	// attempt the broker reports. The valves do not read it (a message is
	// judged by its own returns: valves.defers); it tells when the broker
	// may dead-letter a message held back behind its lite topic's head
	// (warnDeadLetterRisk).
	returns *deferTracker
	// parked holds the message ids the dead-letter function took (it
	// returned nil) whose ack has not been answered OK: such a message that
	// comes back (its ack failed, or it is a copy from the broker's
	// dead-letter queue, which cannot be acked for good on 5.5.0) is acked
	// again without running the handler or the function: parked once.
	parked *deferTracker
	// parkFailures counts, per message id, the dead-letter function's
	// failures for it; at RunnerConfig.MaxDeadLetterFailures the message
	// goes where ErrorValves.OnValve says instead.
	parkFailures *deferTracker
	now          func() time.Time
	held         atomic.Int64 // messages taken from the source and not yet settled
}

// SetThrottle makes the runner admit every message through t before its
// handler (Throttle.Admit): a message the policy defers is deferred and never
// reaches the handler, so a hot lite topic cannot take the workers from the
// others. A message the throttle's valves no longer let it defer is admitted
// and handled. Call it before Run.
//
// The throttle's MaxDeliveryAttempt valve is then lowered to the group's own
// limit (from the broker's settings) when that is smaller, as the runner's
// own is, and it counts the runner's returns of a message with its own.
func (r *Runner[T]) SetThrottle(t *Throttle[T]) {
	if t != nil && t.valves.groupMax == nil {
		t.valves.groupMax = r.src.groupMaxAttempts
	}
	r.throttle = t
}

// SetDeadLetter sets what happens to a message the runner gives up on (see
// RunnerConfig.ErrorValves): f parks it, and the runner acks it once f
// returned nil; after RunnerConfig.MaxDeadLetterFailures failures of f for
// one message (3), it goes where OnValve says instead. Without f, such a
// message goes where
// RunnerConfig.ErrorValves.OnValve says: by default the group's dead-letter
// queue on the broker, never acked unless OnValve is ValveAck. Either way it
// is logged (its handle, never its body) and counted in
// rmqflow.runner.dead_lettered. Call it before Run.
func (r *Runner[T]) SetDeadLetter(f DeadLetterFunc[T]) { r.deadLetter = f }

// NewRunner builds a runner over src, which must not have started yet. Run
// starts it; or start it yourself after NewRunner, to learn at once whether it
// could (an unknown topic or group, a refused subscription), and Run then
// runs the started source. NewRunner turns on src's leases (SourceConfig.Leases, with its
// defaults unless set): every message the runner holds — waiting behind its
// lite topic's head, in its handler, or waiting for its ack's answer — is
// renewed RenewalAheadTime before its invisibility ends (earlier when many
// end together, as a batch of each of many lite topics taken at once does:
// see SourceConfig.RenewalAheadTime), up to Leases.MaxExtension (1 h)
// after it was taken, so that none comes back while the runner still has
// it.
func NewRunner[T any](src *Source[T], h Handler[T], cfg RunnerConfig) (*Runner[T], error) {
	if src == nil {
		return nil, optionError("Source", "required")
	}
	if h == nil {
		return nil, optionError("Handler", "required")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.ErrorValves = cfg.ErrorValves.withDefaults()
	if err := src.useLeases(); err != nil {
		return nil, err
	}
	v := newValves(cfg.ErrorValves, time.Now)
	v.groupMax = src.groupMaxAttempts
	capacity := cfg.ErrorValves.DeferTrackerCapacity
	return &Runner[T]{src: src, handle: h, cfg: cfg, valves: v, returns: newDeferTracker(capacity), parked: newDeferTracker(capacity),
		parkFailures: newDeferTracker(capacity), now: func() time.Time { return src.clk.now() }}, nil
}

// ErrorBackoffFor is the deferral ErrorDefer applies at a delivery attempt.
func (c RunnerConfig) ErrorBackoffFor(attempt int32) time.Duration {
	c = c.withDefaults()
	d := c.ErrorBackoff
	for i := int32(1); i < attempt && d < c.ErrorBackoffMax; i++ {
		d *= 2
	}
	return min(max(d, 0), c.ErrorBackoffMax)
}

// Run starts the source (unless it runs already: see NewRunner) and handles
// messages until ctx ends, then shuts down as RunnerConfig.Shutdown says and
// closes the source. It returns nil after a clean shutdown, or the error that
// stopped it (such as a permanent error of the source).
func (r *Runner[T]) Run(ctx context.Context) error {
	if !r.src.isRunning() {
		if err := r.src.Start(ctx); err != nil {
			return errors.Join(err, r.src.Close(context.WithoutCancel(ctx)))
		}
	}
	acker := r.src.Acker()
	d := &dispatcher[T]{r: r, acker: acker, runCtx: ctx, buffered: make(chan struct{}, r.cfg.MaxHeld)}
	return d.run(ctx)
}

// keyState is one ordering key's FIFO in the dispatcher.
type keyState[T any] struct {
	queue []*AckableMessage[T]
	busy  bool // a worker owns the key, or the ack of its last message is pending (without PipelineAcks)
	block *keyBlock
}

// keyBlock holds a key back after a message of it ended unacked.
type keyBlock struct {
	head  string    // message id of the message that will come back
	seq   uint64    // when head started (dispatcher.started): the earliest unacked message wins
	since time.Time // when the block began
	// headAfter: a copy of head received after it is head's return: since,
	// or, for a delivery the broker had already let go (lostDelivery), when
	// that copy was received (a newer copy may be held already).
	headAfter time.Time
	until     time.Time // when it is due back
	expire    time.Time // give up waiting for it
}

// dispatcher routes messages to per-key FIFOs and runs handlers.
type dispatcher[T any] struct {
	r        *Runner[T]
	acker    *Acker
	runCtx   context.Context // Run's: once it ends, ShutdownRelease starts no new message
	buffered chan struct{}   // one token per message held by the runner (queued, handled or being acked)
	ackCtx   context.Context

	mu      sync.Mutex
	keys    map[string]*keyState[T]
	ready   chan string // keys a worker may take; never full: a busy key holds a token
	closing bool        // ready is (about to be) closed
	wg      sync.WaitGroup
	sweeps  int
	started uint64 // messages started so far: their order, for keyBlock.seq
}

func (d *dispatcher[T]) run(ctx context.Context) error {
	r := d.r
	d.keys = map[string]*keyState[T]{}
	d.ready = make(chan string, cap(d.buffered)+1)

	// Handlers and acks get a context that outlives ctx by ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	d.ackCtx = hctx
	for i := 0; i < r.cfg.Concurrency; i++ {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.work(hctx)
		}()
	}

	// Pull until ctx ends (or the source closes under us).
	var pullErr error
pull:
	for {
		select {
		case d.buffered <- struct{}{}:
		case <-ctx.Done():
			break pull
		}
		m, err := r.src.Next(ctx)
		if err != nil {
			<-d.buffered
			if ctx.Err() == nil && !errors.Is(err, ErrSourceClosed) {
				pullErr = err
			}
			break
		}
		d.enqueue(m)
	}

	// Shutdown.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	defer scancel()
	stopTimer := context.AfterFunc(sctx, hcancel)
	defer stopTimer()
	var errs []error
	if pullErr != nil {
		errs = append(errs, pullErr)
	}
	// Once ShutdownTimeout is used up, giving back and closing share one
	// releaseGrace more (made when first needed), so Run overruns it by at
	// most that.
	var (
		grace       context.Context
		graceCancel context.CancelFunc = func() {}
	)
	defer func() { graceCancel() }()
	graceCtx := func() context.Context {
		if sctx.Err() == nil {
			return sctx
		}
		if grace == nil {
			grace, graceCancel = context.WithTimeout(context.WithoutCancel(ctx), releaseGrace)
		}
		return grace
	}
	var unstarted []*AckableMessage[T]
	switch r.cfg.Shutdown {
	case ShutdownFinish:
		r.src.Drain()
	finish:
		for {
			// The token first: a message is taken from the source only
			// when there is room for it, so none is held outside both.
			select {
			case d.buffered <- struct{}{}:
			case <-sctx.Done():
				break finish
			}
			m, err := r.src.Next(sctx)
			if err != nil {
				<-d.buffered
				break
			}
			d.enqueue(m)
		}
	default:
		unstarted = d.takeUnstarted()
	}
	// Wait for the handlers in flight and the acks pending.
	d.waitIdle(sctx)
	if r.cfg.Shutdown == ShutdownFinish && sctx.Err() != nil {
		// Out of time: what was fetched and not started goes back.
		unstarted = d.takeUnstarted()
	}
	if len(unstarted) > 0 {
		// Released only now, right before the source closes: a message
		// visible again while the source still polls would be received
		// again and could be lost in a receive that Close cuts short; and
		// a lite topic's later messages must not reach another consumer
		// while its head is still being handled. Their leases kept them
		// invisible meanwhile. A shutdown that used up ShutdownTimeout
		// still gets a few seconds to give them back.
		errs = append(errs, d.giveBack(graceCtx(), unstarted))
	}
	d.mu.Lock()
	d.closing = true
	close(d.ready)
	d.mu.Unlock()
	d.wg.Wait()
	// A handler cut off by the timeout may have released its message just
	// now, and the source may have received it again meanwhile: closing the
	// source gives such messages back, which needs a live context too.
	errs = append(errs, r.src.Close(graceCtx()))
	return errors.Join(errs...)
}

func (d *dispatcher[T]) key(m *AckableMessage[T]) string {
	switch {
	case m.Meta.LiteTopic != "":
		return "l:" + m.Meta.LiteTopic
	case m.Meta.MessageGroup != "":
		return "g:" + m.Meta.MessageGroup
	default:
		return "m:" + m.Meta.MessageID // no ordering
	}
}

func (d *dispatcher[T]) enqueue(m *AckableMessage[T]) {
	k := d.key(m)
	d.r.held.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweepLocked()
	st := d.keys[k]
	if st == nil {
		st = &keyState[T]{}
		d.keys[k] = st
	}
	st.queue = append(st.queue, m)
	if !st.busy {
		st.busy = true
		d.scheduleLocked(k)
	}
}

// scheduleLocked hands busy key k, whose queue is not empty, to a worker.
// The send never blocks: every key in ready is busy, every busy key holds
// at least one token of buffered (a message queued, handled or being
// acked), and ready has room for one key per token.
func (d *dispatcher[T]) scheduleLocked(k string) {
	d.ready <- k
}

// sweepLocked now and then forgets idle keys whose block expired, so that a
// great many lite topics that once failed do not pile up.
func (d *dispatcher[T]) sweepLocked() {
	d.sweeps++
	if d.sweeps < 1024 {
		return
	}
	d.sweeps = 0
	now := d.r.now()
	for k, st := range d.keys {
		if !st.busy && len(st.queue) == 0 && (st.block == nil || now.After(st.block.expire)) {
			delete(d.keys, k)
		}
	}
}

// settled gives back the token of a message the runner no longer holds.
func (d *dispatcher[T]) settled() {
	d.r.held.Add(-1)
	<-d.buffered
}

func (d *dispatcher[T]) work(ctx context.Context) {
	for k := range d.ready {
		d.runKey(ctx, k)
	}
}

// halted reports whether workers must start no new message: Run's context
// ended and the shutdown releases what was not started. The check reads the
// context itself, so a worker takes no message from its key once the
// caller's cancel returned; one that took its message just before runs it.
func (d *dispatcher[T]) halted() bool {
	return d.r.cfg.Shutdown == ShutdownRelease && d.runCtx.Err() != nil
}

// runKey runs key k's queue until it is empty or a message of it awaits its
// ack; the ack's completion (acked) schedules the key again.
func (d *dispatcher[T]) runKey(ctx context.Context, k string) {
	for {
		d.mu.Lock()
		st := d.keys[k]
		if len(st.queue) > 0 && d.halted() {
			// Left queued for takeUnstarted; giveBack releases it.
			st.busy = false
			d.mu.Unlock()
			return
		}
		if len(st.queue) == 0 {
			st.busy = false
			if st.block == nil {
				delete(d.keys, k)
			}
			d.mu.Unlock()
			return
		}
		m := st.queue[0]
		st.queue[0] = nil
		st.queue = st.queue[1:]
		d.started++
		seq := d.started
		if m.lostDelivery() {
			// The broker let this delivery go while it waited here (its
			// renewal came too late): it has been handed out again, to this
			// runner or another consumer of the group. Running it would
			// handle it alongside (or after) its new copy and its lite
			// topic's later messages; acking or deferring it can no longer
			// work. Skip it, and hold the key back behind it as behind a
			// message that ended unacked (unless it already waits for an
			// earlier one): its new copy comes first on the broker.
			now := d.r.now()
			d.setBlock(st, m, seq, now, now, now)
			d.mu.Unlock()
			d.r.src.log.Info("rmqflow: runner skips a message whose delivery the broker let go while it waited (its renewal came too late); it is delivered again, and its lite topic waits for it",
				"handle", m.Handle.String())
			d.leave(m)
			d.settled()
			continue
		}
		hold, leave := time.Duration(-1), false
		if b := st.block; b != nil {
			now := d.r.now()
			switch {
			case m.Meta.MessageID == b.head && m.Meta.ReceivedAt.After(b.headAfter):
				st.block = nil // the head is back (not a copy received before it failed)
			case m.Meta.ReceivedAt.After(b.since) && d.ordered(k, m):
				// m was received after the head ended unacked, and the head
				// did not come before it: the broker hands a lite topic (a
				// FIFO group's message group) out in order from its first
				// unacked message,
				// so the head is done there: its ack took effect after all
				// (a failure with the outcome unknown or the answer lost),
				// it was dead-lettered, or it came back and ran before this
				// block was set (a late failure under PipelineAcks).
				// Holding m back would only return it again and again, each
				// return a delivery attempt, until the broker dead-letters it.
				st.block = nil
			case now.After(b.expire):
				// m was received before the head failed: on the broker it
				// is behind the head, which was never acked here. Never
				// run it out of order: leave it to come back behind it.
				leave = true
			default:
				hold = max(b.until.Sub(now), minHoldBack)
			}
		}
		d.mu.Unlock()
		switch {
		case leave:
			d.warnDeadLetterRisk(ctx, m)
			d.leave(m)
			d.r.returns.add(m.Meta.MessageID)
		case hold >= 0:
			d.warnDeadLetterRisk(ctx, m)
			d.holdBack(ctx, m, hold)
			d.r.returns.add(m.Meta.MessageID)
		default:
			var ended time.Time
			switch out, until := d.process(ctx, m, &ended); out {
			case outAck:
				if d.r.cfg.PipelineAcks {
					// The key goes on at once; the answer only settles m.
					d.acker.ackThen(d.ackCtx, m.Handle, func(err error) { d.ackedPipelined(k, m, seq, err) })
					continue
				}
				// The worker is free at once; the key stays busy until the
				// broker answered, so that its next message never starts
				// before this one is known acked.
				d.acker.ackThen(d.ackCtx, m.Handle, func(err error) { d.acked(k, st, m, seq, err) })
				return
			case outBlocked:
				d.r.returns.add(m.Meta.MessageID)
				d.blockLocked(st, m, seq, ended, until)
			}
		}
		d.settled()
	}
}

// ordered reports whether the broker hands key k (m's) out in order from
// its first unacked message: a lite topic always; a message group only on a
// FIFO group (on another group its messages come in any order, and the
// runner's hold-back is all that orders them).
func (d *dispatcher[T]) ordered(k string, m *AckableMessage[T]) bool {
	return strings.HasPrefix(k, "l:") || d.r.src.fifoGroup(m.Handle.Group)
}

// blockLocked holds st back behind m, which ended unacked at since (before
// any deferral of it was sent) and is due back at until. It takes d.mu.
func (d *dispatcher[T]) blockLocked(st *keyState[T], m *AckableMessage[T], seq uint64, since, until time.Time) {
	now := d.r.now()
	d.mu.Lock()
	d.setBlock(st, m, seq, now, since, until)
	d.mu.Unlock()
}

// setBlock blocks st behind m, started as seq, unless st is already blocked
// behind an earlier message that has not come back: the earliest unacked
// message of a key is the one it waits for. (Without PipelineAcks a key has
// one message unresolved at a time, and st is never blocked here.) Call it
// with d.mu held.
func (d *dispatcher[T]) setBlock(st *keyState[T], m *AckableMessage[T], seq uint64, now, since, until time.Time) {
	if b := st.block; b != nil && b.seq < seq && !now.After(b.expire) {
		return
	}
	after := since
	if m.lostDelivery() {
		// The broker let m's delivery go before it ended here: a copy of m
		// received since m was is its new delivery, even one already held.
		after = m.Meta.ReceivedAt
	}
	st.block = &keyBlock{head: m.Meta.MessageID, seq: seq, since: since, headAfter: after, until: until, expire: until.Add(d.r.src.cfg.InvisibleDuration)}
}

// acked is the completion of m's ack, on the goroutine that completed it:
// it must not block. A failed ack blocks the key behind m exactly as a
// message that ended unacked does: m comes back (unless the ack took effect
// after all, an outcome-unknown failure), and the key's later messages are
// held back until it has, or until a later one arrives first (m is done on
// the broker), or until its invisibility has passed.
func (d *dispatcher[T]) acked(k string, st *keyState[T], m *AckableMessage[T], seq uint64, err error) {
	if err != nil {
		d.r.src.log.Warn("rmqflow: runner could not ack a message; it will be delivered again, and its lite topic waits for it",
			"handle", m.Handle.String(), "err", err)
		d.r.returns.add(m.Meta.MessageID)
		now := d.r.now()
		d.blockLocked(st, m, seq, now, now)
	} else {
		d.r.returns.forget(m.Meta.MessageID)
		d.r.parked.forget(m.Meta.MessageID)
	}
	d.settled()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(st.queue) > 0 && !d.closing && !d.halted() {
		d.scheduleLocked(k)
		return
	}
	st.busy = false
	if len(st.queue) == 0 && st.block == nil {
		delete(d.keys, k)
	}
}

// ackedPipelined is the completion of m's ack under PipelineAcks: the key
// did not wait for it. A failed ack blocks the key behind m as acked does,
// for the messages of the key not started yet.
func (d *dispatcher[T]) ackedPipelined(k string, m *AckableMessage[T], seq uint64, err error) {
	if err != nil {
		d.r.returns.add(m.Meta.MessageID)
		now := d.r.now()
		d.mu.Lock()
		st := d.keys[k]
		if st == nil { // the key ran dry meanwhile: keep its block
			st = &keyState[T]{}
			d.keys[k] = st
		}
		d.setBlock(st, m, seq, now, now, now)
		d.mu.Unlock()
		// Logged once the block is in place: a reader of the log (and
		// TestRunnerPipelineAcksFailedAck) may rely on it.
		d.r.src.log.Warn("rmqflow: runner could not ack a message; it will be delivered again, after the later messages of its lite topic that already ran (PipelineAcks)",
			"handle", m.Handle.String(), "err", err)
	} else {
		d.r.returns.forget(m.Meta.MessageID)
		d.r.parked.forget(m.Meta.MessageID)
	}
	d.settled()
}

// warnDeadLetterRisk logs and counts m, about to be returned only because an
// earlier message of its lite topic (or message group) has not come back,
// when that return may spend the last delivery the broker allows it: the
// broker may then dead-letter it although it did not fail here. Its
// delivery count on the broker is at least the larger of its attempt and
// the runner's count of its returns + 1 (the lite attempt restarts at 1 when
// a batch holds a new message: docs/broker-semantics.md, scenario e).
func (d *dispatcher[T]) warnDeadLetterRisk(ctx context.Context, m *AckableMessage[T]) {
	limit := d.r.src.groupMaxAttempts(m.Handle.Group)
	if limit <= 0 {
		return
	}
	n := max(m.Meta.DeliveryAttempt, int32(min(d.r.returns.count(m.Meta.MessageID), math.MaxInt32-1))+1)
	if n < limit {
		return
	}
	d.r.src.metrics.deadLetterRisk(ctx)
	d.r.src.log.Warn("rmqflow: runner holds a message back behind an earlier one of its lite topic that has not come back, and it has had the deliveries its group allows: the broker may move it to the dead-letter queue although it has not failed here (raise the group's retry limit: docs/grpc-connector.md, \"Sizing a lite group's retry limit\")",
		"handle", m.Handle.String(), "deliveries", n, "group_max_deliveries", limit)
}

// minHoldBack is the shortest deferral of a message held back behind its
// key's unacked head: long enough for the head to come back first.
const minHoldBack = time.Second

// holdBack defers m, a later message of a key whose head is due back at
// now+hold, so that it comes back behind the head.
func (d *dispatcher[T]) holdBack(ctx context.Context, m *AckableMessage[T], hold time.Duration) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if _, err := d.acker.ChangeInvisibleDuration(actx, m.Handle, hold); err != nil {
		d.r.src.log.Warn("rmqflow: runner could not hold a message back behind its lite topic's head; it comes back when its invisibility ends",
			"handle", m.Handle.String(), "err", err)
		return
	}
	d.r.src.metrics.deferred(actx, "hold-back")
}

// settleTimeout bounds each ack or deferral the runner sends.
const settleTimeout = 30 * time.Second

// outcome is how process left a message.
type outcome int

const (
	outSettled outcome = iota // settled (or the handler settled it): the key goes on
	outBlocked                // ended without an ack: the key waits for it to come back
	outAck                    // to be acked: the key waits for the ack's result
)

// process admits, handles and settles m, all but its ack: it reports outAck
// for the caller to send. For outBlocked, until is when m is due back, and
// *ended when it ended here, before any deferral of it was sent: a return
// of m may be received as soon as its deferral took effect, before the
// deferral's answer (the head-is-back check of runKey compares with it;
// taking the time after the answer held a deferred message back behind
// itself: TestRunnerDeferReasons counted a hold-back under load).
func (d *dispatcher[T]) process(ctx context.Context, m *AckableMessage[T], ended *time.Time) (out outcome, until time.Time) {
	r := d.r
	*ended = r.now()
	if r.parked.count(m.Meta.MessageID) > 0 {
		// Parked by the dead-letter function already; its ack did not take.
		r.src.log.Warn("rmqflow: runner acks again a message its dead-letter function already parked (its ack did not take)",
			"handle", m.Handle.String())
		return outAck, time.Time{}
	}
	// actx bounds the admission and the deferrals: made only for a message
	// that may need it, not for a plain ack (a timer per message).
	var actx context.Context
	if r.throttle != nil {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		actx = tctx
		act, delay, err := r.throttle.apply(actx, m, r.valves.deferrals(m.Meta.MessageID))
		switch act {
		case actDeferred:
			return outBlocked, r.now().Add(delay)
		case actFailed:
			if !errors.Is(err, ErrNoDecision) {
				r.src.log.Warn("rmqflow: throttle could not defer a message; it comes back when its invisibility ends",
					"handle", m.Handle.String(), "err", err)
				d.leave(m)
				return outBlocked, r.now().Add(r.src.cfg.InvisibleDuration)
			}
			r.src.log.Warn("rmqflow: throttle policy made no decision; the message is admitted", "handle", m.Handle.String())
		}
	}
	dec, err := d.call(ctx, m)
	*ended = r.now()
	if err == nil && dec.kind == DecisionNone {
		err = ErrNoDecision
	}
	if err == nil && dec.kind == DecisionSettled {
		return outSettled, time.Time{}
	}
	if err == nil && dec.kind != DecisionLeave && dec.kind != DecisionDefer && dec.kind != DecisionRelease {
		r.valves.forget(m.Meta.MessageID)
		return outAck, time.Time{}
	}
	if actx == nil {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
	}
	if err != nil {
		if r.cfg.OnError == ErrorLeave {
			return d.leaveOrDeadLetter(actx, ctx, m, err)
		}
		return d.deferOrDeadLetter(actx, ctx, m, Defer(r.cfg.ErrorBackoffFor(d.attempts(m)), "handler-error"), err)
	}
	if dec.kind == DecisionLeave {
		return d.leaveOrDeadLetter(actx, ctx, m, nil)
	}
	return d.deferOrDeadLetter(actx, ctx, m, dec, nil)
}

// attempts is the count the error backoff grows with: the message's own
// delivery count (see ThrottleConfig), not its lite topic's.
func (d *dispatcher[T]) attempts(m *AckableMessage[T]) int32 {
	own := d.r.valves.deferrals(m.Meta.MessageID)
	if d.r.throttle != nil {
		own += d.r.throttle.valves.deferrals(m.Meta.MessageID)
	}
	return ownAttempt(&m.Meta, own)
}

// call runs the handler, turning a panic into an error.
func (d *dispatcher[T]) call(ctx context.Context, m *AckableMessage[T]) (dec Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			d.r.src.log.Error("rmqflow: handler panicked; treated as a handler error",
				"handle", m.Handle.String(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			dec, err = Decision{}, fmt.Errorf("rmqflow: handler panicked: %v", p)
		}
	}()
	return d.r.handle(ctx, m)
}

// valveFired reports which safety valve fires for m, or "". None fires while
// Run shuts down: what a handler gives back then (a Release or an error as
// its context is cancelled, as the integrations do when they close) was not
// worked, and dead-lettering it would drop it unprocessed; it comes back, and
// the valves judge it on its next delivery (a real failure while
// ShutdownFinish drains comes back too).
func (d *dispatcher[T]) valveFired(m *AckableMessage[T]) string {
	if d.runCtx.Err() != nil {
		return ""
	}
	own := d.r.valves.deferrals(m.Meta.MessageID)
	if d.r.throttle != nil {
		own += d.r.throttle.valves.deferrals(m.Meta.MessageID)
	}
	return d.r.valves.firedAfter(&m.Meta, m.Handle, own)
}

// deferOrDeadLetter defers (or releases) m as dec says unless a safety valve
// fires, in which case m is dead-lettered. cause is the handler's error, if
// any.
func (d *dispatcher[T]) deferOrDeadLetter(actx, hctx context.Context, m *AckableMessage[T], dec Decision, cause error) (outcome, time.Time) {
	r := d.r
	if valve := d.valveFired(m); valve != "" {
		if cause == nil {
			cause = fmt.Errorf("rmqflow: deferred too often (%s)", valve)
		}
		return d.deadLetterMsg(actx, hctx, m, cause, valve)
	}
	delay := min(dec.delay, r.cfg.ErrorValves.MaxDeferDuration)
	if d.runCtx.Err() != nil {
		// Shutting down: the source still polls until it closes, and a
		// message visible at once would be received again and could be cut
		// off in transit (see ReleaseDelay).
		delay = max(delay, min(ReleaseDelay, r.cfg.ErrorValves.MaxDeferDuration))
	}
	if _, err := d.acker.ChangeInvisibleDuration(actx, m.Handle, delay); err != nil {
		r.src.log.Warn("rmqflow: runner could not defer a message; it comes back when its invisibility ends",
			"handle", m.Handle.String(), "err", err)
		d.leave(m)
		return outBlocked, r.now().Add(r.src.cfg.InvisibleDuration)
	}
	r.valves.count(m.Meta.MessageID)
	reason := dec.reason
	if reason == "" {
		reason = "handler"
	}
	r.src.metrics.deferred(actx, reason)
	return outBlocked, r.now().Add(delay)
}

// leaveOrDeadLetter leaves m (it comes back when its invisibility ends)
// unless a safety valve fires, in which case m is dead-lettered. Leaving
// counts as a deferral for the valves: a message left over and over would
// otherwise loop for ever.
func (d *dispatcher[T]) leaveOrDeadLetter(actx, hctx context.Context, m *AckableMessage[T], cause error) (outcome, time.Time) {
	r := d.r
	if valve := d.valveFired(m); valve != "" {
		if cause == nil {
			cause = fmt.Errorf("rmqflow: left too often (%s)", valve)
		}
		return d.deadLetterMsg(actx, hctx, m, cause, valve)
	}
	d.leave(m)
	r.valves.count(m.Meta.MessageID)
	return outBlocked, r.now().Add(r.src.cfg.InvisibleDuration)
}

// deadLetterMsg hands m to the dead-letter function, or else (no function,
// or it failed RunnerConfig.MaxDeadLetterFailures times for m) sends it
// where ErrorValves.OnValve says, and reports what the key does next: outAck
// when m is to be acked (the function parked it, or ValveAck), outSettled
// when the broker's dead-letter queue took it, outBlocked when m is to come
// back.
func (d *dispatcher[T]) deadLetterMsg(actx, hctx context.Context, m *AckableMessage[T], cause error, valve string) (outcome, time.Time) {
	r := d.r
	id := m.Meta.MessageID
	if r.deadLetter != nil && r.parkFailures.count(id) < r.cfg.MaxDeadLetterFailures {
		err := d.callDeadLetter(hctx, m, cause)
		if err == nil {
			r.src.metrics.deadLettered(actx, valve, "function")
			r.parked.add(id)
			r.parkFailures.forget(id)
			r.valves.forget(id)
			return outAck, time.Time{}
		}
		r.src.metrics.deadLettered(actx, valve, "function-failed")
		r.parkFailures.add(id)
		if n := r.parkFailures.count(id); n < r.cfg.MaxDeadLetterFailures {
			r.src.log.Warn("rmqflow: dead-letter function failed; the message is deferred and tried again",
				"handle", m.Handle.String(), "failures", n, "max_failures", r.cfg.MaxDeadLetterFailures, "err", err)
			delay := min(r.cfg.ErrorBackoffMax, r.cfg.ErrorValves.MaxDeferDuration)
			if _, err := d.acker.ChangeInvisibleDuration(actx, m.Handle, delay); err != nil {
				d.leave(m)
				return outBlocked, r.now().Add(r.src.cfg.InvisibleDuration)
			}
			return outBlocked, r.now().Add(delay)
		}
		r.src.log.Error(fmt.Sprintf("rmqflow: dead-letter function failed %d times for a message (%s): it goes where it would go without one instead (on-valve %s)",
			r.cfg.MaxDeadLetterFailures, r.cfg.Hints.DeadLetter, r.cfg.ErrorValves.OnValve),
			"handle", m.Handle.String(), "valve", valve, "cause", cause, "err", err)
		cause = fmt.Errorf("%w; the dead-letter function failed %d times: %w", cause, r.cfg.MaxDeadLetterFailures, err)
	}
	switch {
	case r.cfg.ErrorValves.OnValve == ValveAck:
		r.src.metrics.deadLettered(actx, valve, "dropped")
		r.src.log.Error("rmqflow: giving up on a message: a safety valve fired; acking (dropping) it as "+r.cfg.Hints.Drop+" says",
			"handle", m.Handle.String(), "valve", valve, "cause", cause)
		r.parked.add(id)
	case m.Meta.DeadLettered():
		// Already a delivery from the dead-letter queue (a lite message on
		// RocketMQ 5.5.0 comes back from it: scenario g): forwarding it
		// again would only add a copy. Leave it to the broker.
		r.src.metrics.deadLettered(actx, valve, "left")
		r.src.log.Error("rmqflow: giving up on a message delivered from the dead-letter queue: a safety valve fired; it is left to the broker (not acked); set "+r.cfg.Hints.DeadLetter+" to park such messages",
			"handle", m.Handle.String(), "valve", valve, "cause", cause)
		d.leave(m)
		return outBlocked, r.now().Add(r.src.cfg.InvisibleDuration)
	default:
		err := d.acker.forwardToDeadLetterQueue(actx, m.Handle, ownAttempt(&m.Meta, d.r.valves.deferrals(id)), r.valves.maxAttempt(m.Handle.Group, ordered(&m.Meta)))
		if err != nil {
			r.src.metrics.deadLettered(actx, valve, "left")
			r.src.log.Error("rmqflow: giving up on a message: a safety valve fired, and it could not be moved to the dead-letter queue; not acked: it comes back when its invisibility ends, and the broker's own retry limit takes it there",
				"handle", m.Handle.String(), "valve", valve, "cause", cause, "err", err)
			d.leave(m)
			return outBlocked, r.now().Add(r.src.cfg.InvisibleDuration)
		}
		r.src.metrics.deadLettered(actx, valve, "broker-dlq")
		r.src.log.Warn("rmqflow: gave up on a message: a safety valve fired; moved to its group's dead-letter queue %DLQ%<group> (set "+r.cfg.Hints.DeadLetter+" to park it elsewhere)",
			"handle", m.Handle.String(), "valve", valve, "cause", cause)
		r.valves.forget(id)
		r.returns.forget(id)
		r.parkFailures.forget(id)
		return outSettled, time.Time{}
	}
	r.valves.forget(id)
	r.parkFailures.forget(id)
	return outAck, time.Time{}
}

func (d *dispatcher[T]) callDeadLetter(ctx context.Context, m *AckableMessage[T], cause error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("rmqflow: dead-letter function panicked: %v", p)
		}
	}()
	return d.r.deadLetter(ctx, m, cause)
}

// leave gives up the runner's hold on m without an RPC: its lease (if any)
// ends, and it comes back when its invisibility ends.
func (d *dispatcher[T]) leave(m *AckableMessage[T]) {
	d.acker.Leave(m.Handle)
}

// releaseGrace bounds giving back the unstarted messages when the shutdown
// already used up its ShutdownTimeout.
const releaseGrace = 5 * time.Second

// takeUnstarted takes the messages the runner holds but has not started out
// of their keys and gives back their tokens; giveBack releases them.
func (d *dispatcher[T]) takeUnstarted() []*AckableMessage[T] {
	// The keys hold only messages no worker has started: a worker pops a
	// message before it runs it. Take them all; a worker that later finds
	// its key emptied marks it idle.
	d.mu.Lock()
	var left []*AckableMessage[T]
	for _, st := range d.keys {
		left = append(left, st.queue...)
		st.queue = nil
	}
	d.mu.Unlock()
	for range left {
		d.r.held.Add(-1)
		<-d.buffered
	}
	return left
}

// giveBack makes the unstarted messages visible to the group again after
// ReleaseDelay (or the source's ReleaseInvisibleDuration when longer).
//
// The releases run concurrently, as many at once as the source renews (each
// may wait for its message's renewal in flight, to use the newest handle): one
// after the other, 30 messages whose renewals took 2 s each gave back 5 to 12
// within the grace (TestRunnerShutdownGivesBackPromptly).
func (d *dispatcher[T]) giveBack(ctx context.Context, left []*AckableMessage[T]) error {
	errs := make([]error, len(left))
	var wg sync.WaitGroup
	slots := make(chan struct{}, max(d.r.src.cfg.RenewalConcurrency, 1))
	for i, m := range left {
		if m.lostDelivery() {
			continue // the broker let it go already: nothing to give back
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if _, err := d.acker.ChangeInvisibleDuration(ctx, m.Handle, max(d.r.src.cfg.ReleaseInvisibleDuration, ReleaseDelay)); err != nil {
				errs[i] = fmt.Errorf("release %s: %w", m.Handle.MessageID, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitIdle waits until every buffered message was handled or ctx ends.
func (d *dispatcher[T]) waitIdle(ctx context.Context) {
	for i := 0; i < cap(d.buffered); i++ {
		select {
		case d.buffered <- struct{}{}:
		case <-ctx.Done():
			return
		}
	}
	for i := 0; i < cap(d.buffered); i++ {
		<-d.buffered
	}
}
