package rmqflow

import (
	"context"
	"sync"
	"time"
)

// DefaultRenewalConcurrency is SourceConfig.RenewalConcurrency's default:
// with 40 ms per ChangeInvisibleDuration, 16 renewals at once get through
// 1,000 leases in 2.5 s, half of the default RenewalAheadTime.
const DefaultRenewalConcurrency = 16

// renewSlots bounds the renewal RPCs of one source on the wire at once
// (SourceConfig.RenewalConcurrency): queue and lease renewals share them.
// A channel's waiting senders are served in turn, so neither kind starves
// the other.
type renewSlots chan struct{}

func newRenewSlots(n int) renewSlots { return make(renewSlots, n) }

// acquire takes a slot, or fails when ctx ends first.
func (s renewSlots) acquire(ctx context.Context) error {
	if ctx.Err() != nil { // a stopped renewer starts nothing, even with a slot free
		return ctx.Err()
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s renewSlots) release() { <-s }

// renewTick is how often the renewers look for due messages: a quarter of
// RenewalAheadTime, within 50 ms .. 1 s.
func renewTick(ahead time.Duration) time.Duration {
	return min(max(ahead/4, 50*time.Millisecond), time.Second)
}

// renewalPass is one look of a renewer at what is due, renewed soonest
// expiry first, several at once. It counts the renewals that overran
// RenewalAheadTime — answered after the invisibility they were to extend
// had ended, by the source's reckoning — in rmqflow.renewals.late as each
// is answered, and logs them once, at WARN, when the last renewal of the
// pass is answered.
type renewalPass struct {
	kind    string // "queue" or "lease"
	log     loggerLike
	metrics *metrics

	mu      sync.Mutex
	pending int    // renewals not answered yet, plus one while the pass is still dispatching
	late    int    // renewals answered late
	first   string // the first late one, ReceiptHandle.String()
	worst   time.Duration
}

func newRenewalPass(kind string, log loggerLike, m *metrics) *renewalPass {
	return &renewalPass{kind: kind, log: log, metrics: m, pending: 1}
}

// add counts a renewal about to be sent.
func (p *renewalPass) add() {
	p.mu.Lock()
	p.pending++
	p.mu.Unlock()
}

// answered records the end of a renewal of the delivery described by handle
// (ReceiptHandle.String()): late by lateBy when lateBy > 0.
func (p *renewalPass) answered(ctx context.Context, handle string, lateBy time.Duration) {
	if lateBy > 0 {
		p.metrics.renewalLate(ctx, p.kind)
	}
	p.mu.Lock()
	if lateBy > 0 {
		if p.late == 0 {
			p.first = handle
		}
		p.late++
		p.worst = max(p.worst, lateBy)
	}
	p.pending--
	end := p.pending == 0
	p.mu.Unlock()
	if end {
		p.report()
	}
}

// dispatched marks the end of the pass's dispatching: no renewal is added
// after it.
func (p *renewalPass) dispatched() {
	p.mu.Lock()
	p.pending--
	end := p.pending == 0
	p.mu.Unlock()
	if end {
		p.report()
	}
}

func (p *renewalPass) report() {
	if p.late == 0 {
		return
	}
	p.log.Warn("rmqflow: renewals overran RenewalAheadTime: the invisibility they were to extend had ended before they were answered; those messages may be delivered again (raise RenewalAheadTime or RenewalConcurrency)",
		"kind", p.kind, "late", p.late, "handle", p.first, "late_by", p.worst.Round(time.Millisecond))
}
