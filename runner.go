package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Handler processes one message and says what to do with it: Ack(),
// Defer(d, reason), or an error (handled per RunnerConfig.OnError).
type Handler[T any] func(ctx context.Context, m *AckableMessage[T]) (Decision, error)

// ErrorPolicy is what a Runner does with a message whose handler failed.
type ErrorPolicy int

const (
	// ErrorDefer defers the message with exponential backoff by delivery
	// attempt (ErrorBackoff × 2^(attempt-1), at most ErrorBackoffMax). The
	// default.
	ErrorDefer ErrorPolicy = iota
	// ErrorLeave does nothing: the message comes back when its invisibility
	// ends.
	ErrorLeave
)

// ShutdownMode is how a Runner stops when its context ends.
type ShutdownMode int

const (
	// ShutdownRelease stops receiving, gives every message not yet handled
	// back to the group at once, and waits for the handlers in flight. The
	// default.
	ShutdownRelease ShutdownMode = iota
	// ShutdownFinish stops receiving and handles every message already
	// fetched before returning.
	ShutdownFinish
)

// Defaults of RunnerConfig.
const (
	DefaultRunnerConcurrency = 8
	DefaultErrorBackoff      = time.Second
	DefaultErrorBackoffMax   = 10 * time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
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
	// Shutdown is ShutdownRelease (default) or ShutdownFinish.
	Shutdown ShutdownMode
	// ShutdownTimeout bounds the shutdown; then handlers' contexts are
	// cancelled. Default 30 s.
	ShutdownTimeout time.Duration
}

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
	return c
}

func (c RunnerConfig) validate() error {
	switch {
	case c.Concurrency < 0:
		return optionError("Concurrency", "must not be negative")
	case c.OnError != ErrorDefer && c.OnError != ErrorLeave:
		return optionError("OnError", "unknown policy")
	case c.Shutdown != ShutdownRelease && c.Shutdown != ShutdownFinish:
		return optionError("Shutdown", "unknown mode")
	case c.ErrorBackoff < 0 || c.ErrorBackoffMax < 0 || c.ShutdownTimeout < 0:
		return optionError("RunnerConfig", "durations must not be negative")
	}
	return nil
}

// Runner is the loop of a plain Go service: it starts a Source, runs the
// handler on each message with bounded concurrency, one message of a lite
// topic at a time and in order (messages of different lite topics run in
// parallel), and acks or defers each as the handler says.
type Runner[T any] struct {
	src      *Source[T]
	handle   Handler[T]
	cfg      RunnerConfig
	throttle *Throttle[T]
}

// SetThrottle makes the runner admit every message through t before its
// handler (Throttle.Admit): a message the policy defers is deferred and never
// reaches the handler, so a hot lite topic cannot take the workers from the
// others. Call it before Run.
func (r *Runner[T]) SetThrottle(t *Throttle[T]) { r.throttle = t }

// NewRunner builds a runner over src (not yet started).
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
	return &Runner[T]{src: src, handle: h, cfg: cfg}, nil
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

// Run starts the source and handles messages until ctx ends, then shuts down
// as RunnerConfig.Shutdown says and closes the source. It returns nil after a
// clean shutdown, or the error that stopped it.
func (r *Runner[T]) Run(ctx context.Context) error {
	if err := r.src.Start(ctx); err != nil {
		return errors.Join(err, r.src.Close(context.WithoutCancel(ctx)))
	}
	acker := r.src.Acker()
	d := &dispatcher[T]{r: r, acker: acker, buffered: make(chan struct{}, r.cfg.Concurrency*4)}
	return d.run(ctx)
}

// dispatcher routes messages to per-key FIFOs and runs handlers.
type dispatcher[T any] struct {
	r        *Runner[T]
	acker    *Acker
	buffered chan struct{} // one token per message held by the runner

	mu    sync.Mutex
	keys  map[string][]*AckableMessage[T]
	busy  map[string]bool
	ready chan string
	wg    sync.WaitGroup
}

func (d *dispatcher[T]) run(ctx context.Context) error {
	r := d.r
	d.keys = map[string][]*AckableMessage[T]{}
	d.busy = map[string]bool{}
	d.ready = make(chan string, cap(d.buffered)+1)

	// Handlers get a context that outlives ctx by ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
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
	switch r.cfg.Shutdown {
	case ShutdownFinish:
		r.src.Drain()
		for {
			m, err := r.src.Next(sctx)
			if err != nil {
				break
			}
			d.buffered <- struct{}{}
			d.enqueue(m)
		}
		d.waitIdle(sctx)
	default:
		errs = append(errs, d.releaseBuffered(sctx))
	}
	close(d.ready)
	d.wg.Wait()
	errs = append(errs, r.src.Close(sctx))
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
	d.mu.Lock()
	d.keys[k] = append(d.keys[k], m)
	schedule := !d.busy[k]
	if schedule {
		d.busy[k] = true
	}
	d.mu.Unlock()
	if schedule {
		d.ready <- k
	}
}

func (d *dispatcher[T]) work(ctx context.Context) {
	for k := range d.ready {
		for {
			d.mu.Lock()
			q := d.keys[k]
			if len(q) == 0 {
				delete(d.keys, k)
				delete(d.busy, k)
				d.mu.Unlock()
				break
			}
			m := q[0]
			q[0] = nil
			d.keys[k] = q[1:]
			d.mu.Unlock()
			d.process(ctx, m)
			<-d.buffered
		}
	}
}

func (d *dispatcher[T]) process(ctx context.Context, m *AckableMessage[T]) {
	r := d.r
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if r.throttle != nil {
		admitted, err := r.throttle.Admit(actx, m)
		if err != nil {
			r.src.log.Warn("rmqflow: throttle could not defer a message", "handle", m.Handle.String(), "err", err)
		}
		if !admitted {
			return
		}
	}
	dec, err := r.handle(ctx, m)
	if err != nil {
		if r.cfg.OnError == ErrorLeave {
			return
		}
		dec = Defer(r.cfg.ErrorBackoffFor(m.Meta.DeliveryAttempt), "handler-error")
	}
	switch {
	case dec.settled:
		return
	case dec.Defer > 0:
		_, err = d.acker.ChangeInvisibleDuration(actx, m.Handle, dec.Defer)
	default:
		err = d.acker.Ack(actx, m.Handle)
	}
	if err != nil {
		r.src.log.Warn("rmqflow: runner could not settle a message", "handle", m.Handle.String(), "err", err)
	}
}

// releaseBuffered gives back the messages the runner holds but has not
// started, at once.
func (d *dispatcher[T]) releaseBuffered(ctx context.Context) error {
	// The keys map holds only messages no worker has started: a worker pops
	// a message before it runs it. Take them all; a worker that later picks
	// an emptied key finds nothing and marks it idle.
	d.mu.Lock()
	var left []*AckableMessage[T]
	for k, q := range d.keys {
		left = append(left, q...)
		d.keys[k] = nil
	}
	d.mu.Unlock()
	var errs []error
	for _, m := range left {
		if _, err := d.acker.ChangeInvisibleDuration(ctx, m.Handle, d.r.src.cfg.ReleaseInvisibleDuration); err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", m.Handle.MessageID, err))
		}
		<-d.buffered
	}
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
