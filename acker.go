package rmqflow

import (
	"context"
	"time"
)

// Acker is what user code calls when the work on a message is done: Ack it,
// or ChangeInvisibleDuration to have it delivered again later. It routes
// through an AckPool; an Acker from Source.Acker also consults the source's
// lease table, so that it acks with the newest receipt handle and stops
// renewing the message.
type Acker struct {
	pool   *AckPool
	leases *leaseTable
}

// NewAcker returns an Acker over pool, for handles that came from another
// process (no lease table).
func NewAcker(pool *AckPool) *Acker { return &Acker{pool: pool} }

// Ack acks the delivery h names and waits for the broker's answer. See
// AckPool.Ack for the meaning of its errors.
func (a *Acker) Ack(ctx context.Context, h ReceiptHandle) error {
	return a.pool.Ack(ctx, a.current(h, true))
}

// AckAsync queues the ack and returns its future.
func (a *Acker) AckAsync(ctx context.Context, h ReceiptHandle) *AckFuture {
	return a.pool.AckAsync(ctx, a.current(h, true))
}

// ChangeInvisibleDuration makes the message invisible for d from now (0 makes
// it visible at once) and returns the handle with the broker's new receipt
// handle. A leased message stops being renewed: it was handed back.
func (a *Acker) ChangeInvisibleDuration(ctx context.Context, h ReceiptHandle, d time.Duration) (ReceiptHandle, error) {
	return a.pool.ChangeInvisibleDuration(ctx, a.current(h, true), d)
}

// current returns the newest handle for h's delivery, dropping its lease
// when release is set.
func (a *Acker) current(h ReceiptHandle, release bool) ReceiptHandle {
	if a.leases == nil {
		return h
	}
	return a.leases.take(h, release)
}

// Stats returns the counters of the acker's pool.
func (a *Acker) Stats() AckPoolStats { return a.pool.Stats() }
