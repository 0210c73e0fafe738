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
	h ReceiptHandle
	f *AckFuture
}

// batcher coalesces the acks of one (endpoints, namespace, group, topic) into
// multi-entry AckMessage RPCs: a batch goes out when it reaches MaxBatch or
// when its first ack has waited Linger.
type batcher struct {
	key     batchKey
	c       *client.Client
	cfg     AckPoolConfig
	metrics *metrics
	stats   *poolStats

	mu     sync.RWMutex
	closed bool
	in     chan ackReq
}

// submit queues r; false once the batcher is closed.
func (b *batcher) submit(r ackReq) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	b.in <- r
	return true
}

func (b *batcher) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.in)
	}
}

func (b *batcher) run() {
	batch := make([]ackReq, 0, b.cfg.MaxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		r, open := <-b.in
		if !open {
			return
		}
		batch = append(batch[:0], r)
		timer.Reset(b.cfg.Linger)
	collect:
		for len(batch) < b.cfg.MaxBatch {
			select {
			case r, open := <-b.in:
				if !open {
					timer.Stop()
					b.flush(batch)
					return
				}
				batch = append(batch, r)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop() // Go 1.23+ timers: no stale tick survives Stop
		b.flush(batch)
	}
}

// ErrDuplicateAck is the result of the second of two acks of the same delivery
// submitted in one batch: the first is sent, the second is reported.
var ErrDuplicateAck = errors.New("rmqflow: the same receipt handle was acked twice in one batch")

// flush sends one batch, retrying a request-level retriable failure with
// bounded backoff, and completes every future with its own entry's result.
func (b *batcher) flush(batch []ackReq) {
	seen := make(map[string]bool, len(batch))
	reqs := make([]ackReq, 0, len(batch))
	for _, r := range batch {
		if seen[r.h.Handle] {
			r.f.complete(ErrDuplicateAck)
			continue
		}
		seen[r.h.Handle] = true
		reqs = append(reqs, r)
	}
	entries := make([]client.AckEntry, len(reqs))
	for i, r := range reqs {
		entries[i] = r.h.ackEntry()
	}
	ctx := context.Background()
	b.metrics.ackBatch(ctx, len(entries))
	bo := backoff.New(50*time.Millisecond, time.Second)
	var (
		res []client.AckResult
		err error
	)
	for attempt := 1; ; attempt++ {
		b.stats.rpcs.Add(1)
		res, err = b.c.Ack(ctx, b.key.group, b.key.topic, entries)
		if err == nil || attempt >= b.cfg.MaxAttempts || !client.IsRetriable(err) {
			break
		}
		time.Sleep(bo.Next())
	}
	for i, r := range reqs {
		e := err
		if e == nil {
			e = res[i].Err
		}
		b.metrics.acked(ctx, e)
		b.stats.acks.Add(1)
		if e != nil && errors.Is(e, client.ErrInvalidReceiptHandle) {
			b.stats.invalid.Add(1)
			b.cfg.logger().Info("rmqflow: ack of an expired receipt handle; the message will be delivered again",
				"handle", r.h.String())
		}
		r.f.complete(e)
	}
}
