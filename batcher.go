package rmqflow

import (
	"context"
	"errors"
	"sync"
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
type batcher struct {
	key     batchKey
	c       *client.Client
	cfg     AckPoolConfig
	metrics *metrics
	stats   *poolStats
	rpcCtx  context.Context

	in      chan ackReq
	stop    chan struct{}  // closed by close
	slots   chan struct{}  // one token per ack RPC on the wire
	flights sync.WaitGroup // the flushes on the wire

	mu         sync.Mutex
	closed     bool
	submitting sync.WaitGroup // submits between the closed check and their send
}

func newBatcher(k batchKey, c *client.Client, p *ackPool) *batcher {
	return &batcher{key: k, c: c, cfg: p.cfg, metrics: p.metrics, stats: &p.stats, rpcCtx: p.rpcCtx,
		in: make(chan ackReq, p.cfg.MaxBatch*4), stop: make(chan struct{}), slots: make(chan struct{}, p.cfg.MaxInFlight)}
}

// submit queues r, waiting for room no longer than ctx allows.
func (b *batcher) submit(ctx context.Context, r ackReq) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrPoolReleased
	}
	b.submitting.Add(1)
	b.mu.Unlock()
	defer b.submitting.Done()
	select {
	case b.in <- r:
		return nil
	case <-ctx.Done():
		return notSent(ctx.Err())
	case <-b.stop:
		return ErrPoolReleased
	}
}

// close stops the batcher: what was queued is still sent.
func (b *batcher) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
}

// run collects batches and sends each on its own goroutine once one of the
// MaxInFlight slots is free; it returns when close has been called and
// everything queued has been sent and answered.
func (b *batcher) run() {
	defer b.flights.Wait()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
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
		select {
		case r := <-b.in:
			batch = append(batch, r)
		case <-b.stop:
			<-b.slots
			b.finish(nil)
			return
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
