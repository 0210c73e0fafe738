package rmqflow

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/backoff"
)

type ackReq struct {
	ctx context.Context
	h   ReceiptHandle
	f   *AckFuture
}

// batcher coalesces the acks of one (endpoints, namespace, group, topic) into
// multi-entry AckMessage RPCs, Nagle-style: while fewer than MaxInFlight RPCs
// are on the wire, what is queued leaves at once as one batch (an idle pool
// pays one RPC's latency per ack, no linger); while all are out, acks
// accumulate in the queue and leave together, up to MaxBatch per RPC, as soon
// as a slot frees. Under load the RPCs in flight are the linger. A positive
// Linger adds a wait for company before every batch, free slot or not.
//
// A batcher closes when its pool is released, when it has been idle for
// IdleTimeout, or to make room under MaxQueues; it first sends everything it
// holds. A submit registers with the batcher (register) under the pool's
// lock while the batcher is still in the pool's map, and a batcher leaves
// the map under that lock before it stops, so every registered submit either
// reaches the queue (and finish sends it) or is told errQueueClosed and goes
// to the batcher's successor.
type batcher struct {
	key     batchKey
	c       *client.Client
	pool    *ackPool
	cfg     AckPoolConfig
	metrics *metrics
	stats   *poolStats
	rpcCtx  context.Context

	in      chan ackReq
	stop    chan struct{}  // closed by close
	slots   chan struct{}  // one token per ack RPC on the wire
	flights sync.WaitGroup // the flushes on the wire
	lastUse atomic.Int64   // unix nanoseconds of the last register

	mu         sync.Mutex
	closed     bool
	stopErr    error          // what a submit cut short by stop returns; set before stop is closed
	submitting sync.WaitGroup // registered submits that have not yet returned
}

// errQueueClosed is returned by submit on a batcher that closed for
// idleness or MaxQueues: the ack was not queued, and goes to a new batcher.
var errQueueClosed = errors.New("rmqflow: ack queue closed")

func newBatcher(k batchKey, c *client.Client, p *ackPool) *batcher {
	b := &batcher{key: k, c: c, pool: p, cfg: p.cfg, metrics: p.metrics, stats: &p.stats, rpcCtx: p.rpcCtx,
		in: make(chan ackReq, p.cfg.MaxBatch*4), stop: make(chan struct{}), slots: make(chan struct{}, p.cfg.MaxInFlight)}
	b.lastUse.Store(time.Now().UnixNano())
	return b
}

// register announces a submit; the caller holds the pool's lock and found
// the batcher in the pool's map. Each register is followed by one submit.
func (b *batcher) register() {
	b.lastUse.Store(time.Now().UnixNano())
	b.submitting.Add(1)
}

// submit queues r, waiting for room no longer than ctx allows. It follows a
// register.
func (b *batcher) submit(ctx context.Context, r ackReq) error {
	defer b.submitting.Done()
	// Room in the queue takes the ack even once the batcher is closing: it
	// still sends what its queue holds.
	select {
	case b.in <- r:
		return nil
	default:
	}
	select {
	case b.in <- r:
		return nil
	case <-ctx.Done():
		return notSent(ctx.Err())
	case <-b.stop:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.stopErr
	}
}

// close stops the batcher: what was queued is still sent, and a submit
// waiting for room returns err (ErrPoolReleased, or errQueueClosed).
func (b *batcher) close(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.stopErr = err
		close(b.stop)
	}
}

// run collects batches and sends each on its own goroutine once one of the
// MaxInFlight slots is free; it returns when close has been called and
// everything queued has been sent and answered. It closes the batcher
// itself once no ack has come for IdleTimeout.
func (b *batcher) run() {
	defer b.flights.Wait()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var idle <-chan time.Time
	var idleTimer *time.Timer
	if b.cfg.IdleTimeout != Forever {
		idleTimer = time.NewTimer(b.cfg.IdleTimeout)
		defer idleTimer.Stop()
		idle = idleTimer.C
	}
	for {
		// A free slot first: while every RPC is out, acks wait in the queue
		// and leave together when one is answered.
		select {
		case b.slots <- struct{}{}:
		case <-b.stop:
			b.finish(nil)
			return
		}
		batch := make([]ackReq, 0, b.cfg.MaxBatch)
	wait:
		for {
			select {
			case r := <-b.in:
				batch = append(batch, r)
				break wait
			case <-b.stop:
				<-b.slots
				b.finish(nil)
				return
			case <-idle:
				if left := b.pool.closeIfIdle(b); left > 0 {
					idleTimer.Reset(left)
					continue
				}
				// Closed (by this or anything else): stop is closed, and
				// what a submit registered before that is still sent.
				<-b.slots
				b.finish(nil)
				return
			}
		}
		if idleTimer != nil {
			idleTimer.Reset(b.cfg.IdleTimeout) // Go 1.23+ timers: Reset drops a stale tick
		}
		if b.cfg.Linger <= 0 {
			// A slot is free: take what is queued (acks that waited for
			// this slot form the batch) and go.
		drain:
			for len(batch) < b.cfg.MaxBatch {
				select {
				case r := <-b.in:
					batch = append(batch, r)
				default:
					break drain
				}
			}
			b.send(batch)
			continue
		}
		timer.Reset(b.cfg.Linger)
	collect:
		for len(batch) < b.cfg.MaxBatch {
			select {
			case r := <-b.in:
				batch = append(batch, r)
			case <-timer.C:
				break collect
			case <-b.stop:
				timer.Stop()
				<-b.slots
				b.finish(batch)
				return
			}
		}
		timer.Stop() // Go 1.23+ timers: no stale tick survives Stop
		b.send(batch)
	}
}

// send flushes batch on its own goroutine, which frees the slot the caller
// took.
func (b *batcher) send(batch []ackReq) {
	b.flights.Add(1)
	go func() {
		defer b.flights.Done()
		defer func() { <-b.slots }()
		b.flush(batch)
	}()
}

// finish sends batch and everything still queued, once no submit can add
// more, still no more than MaxInFlight RPCs at once.
func (b *batcher) finish(batch []ackReq) {
	b.submitting.Wait()
	for {
	fill:
		for len(batch) < b.cfg.MaxBatch {
			select {
			case r := <-b.in:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			return
		}
		b.slots <- struct{}{}
		b.send(batch)
		batch = make([]ackReq, 0, b.cfg.MaxBatch)
	}
}

// smallBatch is the batch size up to which flush finds repeated handles by
// scanning rather than with a map (an allocation per RPC).
const smallBatch = 16

// indexOf is the index in reqs of the ack of handle, or -1; first indexes
// reqs when it is not nil.
func indexOf(first map[string]int, reqs []ackReq, handle string) int {
	if first != nil {
		if i, ok := first[handle]; ok {
			return i
		}
		return -1
	}
	for i := range reqs {
		if reqs[i].h.Handle == handle {
			return i
		}
	}
	return -1
}

// flush sends one batch, retrying a request-level retriable failure with
// bounded backoff, and completes every future with its own entry's result.
// Acks withdrawn or whose ctx ended while queued are not sent (ErrAckNotSent).
// Two acks of one receipt handle are sent once and both get that entry's
// result: the broker treats a repeated ack as success.
func (b *batcher) flush(batch []ackReq) {
	var first map[string]int // handle -> index in reqs; for big batches only
	if len(batch) > smallBatch {
		first = make(map[string]int, len(batch))
	}
	reqs := make([]ackReq, 0, len(batch))
	var dups [][]ackReq // per reqs index: later acks of the same handle
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			if r.f.state.CompareAndSwap(ackQueued, ackAbandoned) {
				r.f.complete(notSent(err))
				continue
			}
		}
		if !r.f.state.CompareAndSwap(ackQueued, ackSending) {
			r.f.complete(notSent(context.Canceled)) // withdrawn by a waiting Ack whose ctx ended
			continue
		}
		if i := indexOf(first, reqs, r.h.Handle); i >= 0 {
			dups[i] = append(dups[i], r)
			continue
		}
		if first != nil {
			first[r.h.Handle] = len(reqs)
		}
		reqs = append(reqs, r)
		dups = append(dups, nil)
	}
	if len(reqs) == 0 {
		return
	}
	entries := make([]client.AckEntry, len(reqs))
	for i, r := range reqs {
		entries[i] = r.h.ackEntry()
	}
	ctx := b.rpcCtx
	b.metrics.ackBatch(ctx, len(entries))
	bo := backoff.New(50*time.Millisecond, time.Second)
	var (
		res []client.AckResult
		err error
	)
	for attempt := 1; ; attempt++ {
		b.stats.rpcs.Add(1)
		res, err = b.c.Ack(ctx, b.key.group, b.key.topic, entries)
		if err == nil || attempt >= b.cfg.MaxAttempts || !client.IsRetriable(err) || ctx.Err() != nil {
			break
		}
		if !backoff.Sleep(ctx, bo.Next()) {
			break
		}
	}
	if err != nil && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		// The request may have reached the broker: say so, do not call it
		// failed.
		err = outcomeUnknown(err)
	}
	for i, r := range reqs {
		e := err
		if e == nil {
			e = res[i].Err
		}
		b.metrics.acked(context.Background(), e)
		b.stats.acks.Add(1)
		if e != nil && errors.Is(e, client.ErrInvalidReceiptHandle) {
			b.stats.invalid.Add(1)
			b.cfg.logger().Info("rmqflow: ack of an expired receipt handle; the message will be delivered again",
				"handle", r.h.String())
		}
		r.f.complete(e)
		for _, d := range dups[i] {
			d.f.complete(e)
		}
	}
}
