package rmqflow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRenewalConcurrency is SourceConfig.RenewalConcurrency's default:
// with 40 ms per ChangeInvisibleDuration, 16 renewals at once get through
// 400 a second (1,000 in 2.5 s). A crowd that a pass cannot renew within
// RenewalAheadTime is started earlier (renewSlots.lead).
const DefaultRenewalConcurrency = 16

// renewalRTTPrior is the duration of a renewal RPC a source assumes until
// it has measured one: what a ChangeInvisibleDuration takes on a broker
// across a network (docs/grpc-connector.md).
const renewalRTTPrior = 40 * time.Millisecond

// renewSlots bounds the renewal RPCs of one source on the wire at once
// (SourceConfig.RenewalConcurrency): queue and lease renewals share them.
// A channel's waiting senders are served in turn, so neither kind starves
// the other. It also keeps the source's estimate of a renewal RPC's
// duration, which sets how early a crowd of renewals starts (lead).
type renewSlots struct {
	c   chan struct{}
	rtt atomic.Int64 // smoothed renewal RPC duration, ns: renewalRTTPrior until one is measured
}

func newRenewSlots(n int) *renewSlots {
	s := &renewSlots{c: make(chan struct{}, n)}
	s.rtt.Store(int64(renewalRTTPrior))
	return s
}

// acquire takes a slot, or fails when ctx ends first.
func (s *renewSlots) acquire(ctx context.Context) error {
	if ctx.Err() != nil { // a stopped renewer starts nothing, even with a slot free
		return ctx.Err()
	}
	select {
	case s.c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *renewSlots) release() { <-s.c }

// observe folds the duration of an answered renewal RPC into the estimate
// (an exponentially weighted mean, weight 1/8).
func (s *renewSlots) observe(d time.Duration) {
	for {
		old := s.rtt.Load()
		if s.rtt.CompareAndSwap(old, old+(int64(d)-old)/8) {
			return
		}
	}
}

// lead returns when, before its invisibility ends, the renewal of a
// renewer's k-th soonest expiry (k from 0) is due: RenewalAheadTime
// (ahead), plus twice the estimated RPC duration for each wave of
// RenewalConcurrency renewals due before it, at most most. A renewer
// renews soonest expiry first, so with n expiries crowded together the
// last waits for n/RenewalConcurrency waves: at 40 ms, 3,200 leases
// expiring at once take 8 s, more than the default 5 s ahead (TestRunnerRenewsACrowdInTime).
// Twice: under their own burst, on a loaded client, renewals went at half
// the pace of a lone one (rmqfake, -race, 2 busy cores: 16 at once of a
// 40 ms renewal took 42..81 ms each). A renewer renews every expiry up to
// the last one due, so that a crowd, whose last ones are due first, still
// goes soonest first.
func (s *renewSlots) lead(ahead, most time.Duration) func(k int) time.Duration {
	wave := 2 * time.Duration(s.rtt.Load())
	per := cap(s.c)
	return func(k int) time.Duration {
		return min(ahead+time.Duration(k/per)*wave, most)
	}
}

// mostLead bounds lead: half of InvisibleDuration (or RenewalAheadTime when
// that is longer), so that a renewed message is not due again at once.
func mostLead(invisible, ahead time.Duration) time.Duration { return max(ahead, invisible/2) }

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
