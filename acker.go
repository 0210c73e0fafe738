package rmqflow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Acker is what user code calls when the work on a message is done: Ack it,
// ChangeInvisibleDuration to have it delivered again later, Release it to
// have it delivered again at once, or Leave it. It routes through an
// AckPool holder, so every Acker of one pool behaves the same: Source.Acker
// is NewAcker over the source's pool. Acks and changes of a leased delivery
// (see LeaseConfig) use its newest receipt handle and end its lease.
//
// An Acker counts its calls in progress; Source.Close waits for those of the
// source's Acker before releasing the pool.
type Acker struct {
	pool    *AckPool
	pending pending
}

// NewAcker returns an Acker over pool, for any handle whose endpoints the
// pool is configured for.
func NewAcker(pool *AckPool) *Acker { return &Acker{pool: pool} }

// Ack acks the delivery h names and waits for the broker's answer, returning
// by ctx's deadline. See AckPool.Ack for the meaning of its errors.
func (a *Acker) Ack(ctx context.Context, h ReceiptHandle) error {
	return a.AckAsync(ctx, h).wait(ctx)
}

// AckAsync queues the ack and returns its future; see AckPool.AckAsync.
func (a *Acker) AckAsync(ctx context.Context, h ReceiptHandle) *AckFuture {
	a.pending.begin()
	return a.pool.s.ackAsync(ctx, h, a.pending.end)
}

// ackThen queues the ack of h as AckAsync does and calls then with its
// result once it is known, without starting a goroutine: on the goroutine
// that completes the ack (a batcher's, or the caller's when the ack fails at
// once), so then must not block. The Acker counts the ack as in progress
// until then has been called or is about to be.
func (a *Acker) ackThen(ctx context.Context, h ReceiptHandle, then func(error)) {
	a.pending.begin()
	t := &thenAck{a: a, then: then}
	// No done channel: nobody waits on this future. One allocation for t,
	// one for its method value, where a closure over a future and a
	// counter took five.
	t.f.after = t.completed
	a.pool.s.submitAck(ctx, h, &t.f)
	t.met()
}

// thenAck is an ack of Acker.ackThen in progress.
type thenAck struct {
	f    AckFuture
	a    *Acker
	then func(error)
	meet atomic.Int32 // the second of submitAck's return and the completion calls then
}

func (t *thenAck) met() {
	if t.meet.Add(1) == 2 {
		t.then(t.f.err)
	}
}

func (t *thenAck) completed() {
	t.met()
	t.a.pending.end()
}

// ChangeInvisibleDuration makes the message invisible for d from now (0
// makes it visible at once) and returns the handle with the broker's new
// receipt handle; the message's lease, if any, ends. A negative d is an error
// (an *OptionError) and nothing happens: no deferral ever acks. ctx bounds
// the call.
func (a *Acker) ChangeInvisibleDuration(ctx context.Context, h ReceiptHandle, d time.Duration) (ReceiptHandle, error) {
	a.pending.begin()
	defer a.pending.end()
	return a.pool.s.changeInvisible(ctx, h, d)
}

// Release makes the message visible to its group again at once
// (ChangeInvisibleDuration 0) and ends its lease, if any. ctx bounds the
// call.
func (a *Acker) Release(ctx context.Context, h ReceiptHandle) error {
	_, err := a.ChangeInvisibleDuration(ctx, h, 0)
	return err
}

// DeadLetter moves the message to its group's dead-letter queue on the
// broker, %DLQ%<group> (ForwardMessageToDeadLetterQueue): the broker stores
// a copy there, where it can be read back, and acks the delivery. It ends
// the message's lease, if any. On RocketMQ 5.5.0 a lite message's copy is
// dispatched into its lite topic again (docs/broker-semantics.md, scenario
// g). ctx bounds the call.
func (a *Acker) DeadLetter(ctx context.Context, h ReceiptHandle) error {
	return a.forwardToDeadLetterQueue(ctx, h, h.DeliveryAttempt, 0)
}

func (a *Acker) forwardToDeadLetterQueue(ctx context.Context, h ReceiptHandle, attempt, maxAttempts int32) error {
	a.pending.begin()
	defer a.pending.end()
	return a.pool.s.forwardToDeadLetterQueue(ctx, h, attempt, maxAttempts)
}

// Leave ends the message's lease, if any, and sends nothing: the message
// comes back to its group when its current invisibility ends. Without a
// lease it does nothing.
func (a *Acker) Leave(h ReceiptHandle) { a.pool.s.leave(h) }

// Stats returns the counters of the acker's pool.
func (a *Acker) Stats() AckPoolStats { return a.pool.Stats() }

// pending counts calls in progress; wait returns when there are none.
type pending struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (p *pending) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		p.idle = make(chan struct{})
	}
	p.n++
}

func (p *pending) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n--
	if p.n == 0 {
		close(p.idle)
	}
}

// wait waits until no call is in progress, or ctx ends.
func (p *pending) wait(ctx context.Context) error {
	p.mu.Lock()
	if p.n == 0 {
		p.mu.Unlock()
		return nil
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
