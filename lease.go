package rmqflow

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// DefaultLeaseMaxExtension is how long a lease keeps an emitted message
// invisible by default.
const DefaultLeaseMaxExtension = time.Hour

// LeaseConfig turns on leases (beyond the Flink connector, like the Pub/Sub
// Go client's lease extension): every message a source emits with a decoded
// value (m.Err == nil; under a Runner, every message, since its handler
// decides also for one that did not decode) keeps being renewed, RenewalAheadTime before its
// invisibility ends, until MaxExtension has passed since it was emitted or
// the lease ends. Renewals go soonest expiry first, up to the source's
// RenewalConcurrency at once, and a crowd of them starts earlier, by what
// the renewals before each take at the measured pace (see
// SourceConfig.RenewalAheadTime); one the broker refuses as an expired handle
// ends the lease (the message comes back; a Runner does not start it if it
// has not yet, nor a copy of which the source received a newer delivery),
// and one answered after the
// invisibility it was to extend had ended is counted in
// rmqflow.renewals.late and logged. A lease ends when the delivery is, through the source's
// ack pool (any Acker from NewAcker on a holder of that pool, the pool's own
// methods, or Source.Acker — they behave the same):
//   - acked (Ack, AckAsync), deferred or released (ChangeInvisibleDuration,
//     Acker.Release), or left (Acker.Leave: no RPC, the message comes back
//     when its current invisibility ends);
//   - or handed off: encoding the handle (MarshalBinary, MarshalJSON) ends
//     the lease and encodes the newest receipt handle, so that the holder of
//     the bytes owns the delivery from then on. It has what is left of the
//     current invisibility (up to InvisibleDuration) to ack it or to extend
//     it with ChangeInvisibleDuration; nothing in this process renews it any
//     more.
//
// Renewal changes the broker's receipt handle; every ack of a leased delivery
// uses the newest one, and an ack or a change that overlaps a renewal waits
// for the renewal to finish (on a normal topic an ack with a superseded
// handle answers OK without taking effect, docs/broker-semantics.md,
// scenario d). An ack arriving from another process cannot end a lease here:
// hand the handle off by encoding it instead of copying its fields.
type LeaseConfig struct {
	// Enabled turns leases on. Off by default.
	Enabled bool
	// MaxExtension bounds how long after emission a message is renewed.
	// Default 1 h.
	MaxExtension time.Duration
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.MaxExtension == 0 {
		c.MaxExtension = DefaultLeaseMaxExtension
	}
	return c
}

func (c LeaseConfig) validate() error {
	if c.MaxExtension < 0 {
		return optionError("Leases.MaxExtension", "must not be negative")
	}
	return nil
}

type leaseKey struct{ namespace, group, topic, messageID string }

func keyOf(h ReceiptHandle) leaseKey { return leaseKey{h.Namespace, h.Group, h.Topic, h.MessageID} }

// lease is one emitted delivery. lock is held across a renewal RPC and while
// an ack, a change or a hand-off takes the newest handle, so that nothing
// acks a handle a renewal is about to supersede.
type lease struct {
	lock   chan struct{} // one slot: a mutex that waits with a context
	h      ReceiptHandle // the newest handle; guarded by lock
	ended  atomic.Bool   // no more renewals
	ending atomic.Int32  // ends waiting for lock: no renewal starts meanwhile
	// lost is set once the broker has let the delivery go while it was
	// leased: a renewal was refused as an expired handle, or the source
	// received a newer delivery of the message (the broker handed it out
	// again). Its holder no longer owns it (Runner: lostDelivery).
	lost atomic.Bool
	t    *leaseTable

	// guarded by the table's mu
	first     string   // the broker handle the delivery was emitted with
	renewed   []string // the handles renewals gave it, oldest first
	visibleAt time.Time
	until     time.Time
	renewing  bool // a renewal is dispatched (waiting for a slot or on the wire)
}

func (l *lease) acquire(ctx context.Context) error {
	select {
	case l.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *lease) unlock() { <-l.lock }

// end ends the lease and returns its newest handle, waiting (bounded by ctx)
// for a renewal on the wire; h is the caller's handle, whose other fields
// are kept.
func (l *lease) end(ctx context.Context, h ReceiptHandle) (ReceiptHandle, error) {
	l.ending.Add(1)
	defer l.ending.Add(-1)
	if err := l.acquire(ctx); err != nil {
		return h, notSent(err)
	}
	defer l.unlock()
	l.finish()
	h.Handle = l.h.Handle
	h.owner = nil
	return h, nil
}

// tryEnd is end when no renewal holds the lease; false when one does.
func (l *lease) tryEnd(h ReceiptHandle) (ReceiptHandle, bool) {
	select {
	case l.lock <- struct{}{}:
	default:
		return h, false
	}
	defer l.unlock()
	l.finish()
	h.Handle = l.h.Handle
	h.owner = nil
	return h, true
}

// leave ends the lease without waiting for anything.
func (l *lease) leave() {
	select {
	case l.lock <- struct{}{}:
		defer l.unlock()
		l.finish()
	default: // a renewal is on the wire: its handle stays known (see finish)
		l.ended.Store(true)
	}
}

// finish ends the lease (l.lock held). A lease never renewed leaves the
// table at once: every copy of its handle carries its newest receipt
// handle, so a later ack needs nothing from it. A renewed one stays as a
// tombstone until its invisibility has passed, so that a later ack with an
// older copy (a retry after a failed ack, say) still sends the newest
// handle.
func (l *lease) finish() {
	l.ended.Store(true)
	l.t.forget(l)
}

// leaseTable renews the emitted messages of one source. An ended lease that
// was renewed stays as a tombstone until its invisibility has passed, so
// that a late second ack of the delivery (with the handle it was emitted
// with) still uses its newest handle; one never renewed is forgotten when it
// ends (lease.finish), so that the table holds about what is in flight.
//
// Each tick of its clock it renews the leases due (RenewalAheadTime before
// their invisibility ends, earlier when many end together: see due),
// soonest expiry first, up to the source's RenewalConcurrency at once (the
// slots it shares with the queue's renewer); a lease whose renewal is still
// on the wire is not sent again.
type leaseTable struct {
	cfg       LeaseConfig
	invisible time.Duration
	ahead     time.Duration
	pool      *ackPool
	log       loggerLike
	metrics   *metrics
	slots     *renewSlots
	clk       clock // the source's; set before run starts (SetSourceClock in tests)

	// rpcCtx (the source's) bounds the renewals on the wire: they are not
	// cancelled when the source stops (cut short, one might change the
	// handle on the broker without this process learning the new one, and
	// a later ack would use a superseded handle), only when Close gives up
	// waiting for them.
	rpcCtx context.Context
	wg     sync.WaitGroup // the renewals dispatched

	mu     sync.Mutex
	leases map[leaseKey]*lease

	// beforeRenew, when set (tests: SetLeaseRenewHook), is called before
	// each renewal RPC, with the lease held: a test makes renewals late.
	beforeRenew func(h ReceiptHandle, visibleAt time.Time)
}

func newLeaseTable(cfg LeaseConfig, invisible, ahead time.Duration, pool *ackPool, log loggerLike, m *metrics,
	slots *renewSlots, clk clock, rpcCtx context.Context) *leaseTable {
	return &leaseTable{cfg: cfg, invisible: invisible, ahead: ahead, pool: pool, log: log, metrics: m,
		slots: slots, clk: clk, rpcCtx: rpcCtx, leases: map[leaseKey]*lease{}}
}

func (t *leaseTable) now() time.Time { return t.clk.now() }

// add leases h's delivery, invisible until visibleAt, and returns its lease.
func (t *leaseTable) add(h ReceiptHandle, visibleAt time.Time) *lease {
	h.owner = nil
	l := &lease{lock: make(chan struct{}, 1), h: h, t: t, first: h.Handle,
		visibleAt: visibleAt, until: t.now().Add(t.cfg.MaxExtension)}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := keyOf(h)
	if old := t.leases[k]; old != nil && !old.ended.Load() && old.first != h.Handle {
		// A newer delivery of a message still leased: the broker let the
		// old one go (its invisibility ended: renewals came too late), so
		// the old copy is superseded; it is renewed no more, and its
		// handles stay its own (lookup), never the new delivery's.
		old.lost.Store(true)
		old.ended.Store(true)
	}
	t.leases[k] = l
	return l
}

// lookup returns the lease of h's delivery (live or ended), or nil when h is
// not one of its handles.
func (t *leaseTable) lookup(h ReceiptHandle) *lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases[keyOf(h)]
	if !ok || (h.Handle != l.first && !slices.Contains(l.renewed, h.Handle)) {
		return nil
	}
	return l
}

// forget drops l (ended, l.lock held) unless a renewal changed its handle.
func (t *leaseTable) forget(l *lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(l.renewed) > 0 {
		return
	}
	if k := keyOf(l.h); t.leases[k] == l {
		delete(t.leases, k)
	}
}

// handOff implements handOffer: the lease ends and h leaves with the newest
// handle. It waits for a renewal of the delivery on the wire.
func (t *leaseTable) handOff(h ReceiptHandle) ReceiptHandle {
	l := t.lookup(h)
	if l == nil {
		return h
	}
	nh, _ := l.end(context.Background(), h)
	return nh
}

// len is the number of live leases.
func (t *leaseTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.leases {
		if !l.ended.Load() {
			n++
		}
	}
	return n
}

// run renews the leases until ctx ends, then waits for the renewals it
// dispatched (Close cancels them, through rpcCtx, when its own context ends
// first).
func (t *leaseTable) run(ctx context.Context) {
	defer t.wg.Wait()
	tick := make(chan struct{}, 1)
	for {
		stop := t.clk.afterFunc(renewTick(t.ahead), func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			stop()
			return
		case <-tick:
		}
		t.dispatch(ctx, t.due(t.now()))
	}
}

// dispatch renews due (soonest expiry first), each as soon as a slot is
// free, without waiting for the answers; it returns when every lease has
// been sent off, or when ctx ends (the rest are not renewed).
func (t *leaseTable) dispatch(ctx context.Context, due []*lease) {
	p := newRenewalPass("lease", t.log, t.metrics)
	defer p.dispatched()
	for i, l := range due {
		if t.slots.acquire(ctx) != nil {
			t.mu.Lock()
			for _, l := range due[i:] {
				l.renewing = false
			}
			t.mu.Unlock()
			return
		}
		p.add()
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer t.slots.release()
			t.renew(l, p)
		}()
	}
}

// due returns the leases to renew now, soonest expiry first, and marks them
// renewing; it ends those past MaxExtension and forgets ended ones whose
// invisibility has passed. A lease is due RenewalAheadTime before its
// invisibility ends, earlier in a crowd (renewSlots.lead: the k-th soonest
// expiry waits for k renewals before it), and with it every lease that
// expires sooner. A lease whose renewal is still dispatched is not due
// again (it still counts toward the crowd).
func (t *leaseTable) due(now time.Time) []*lease {
	most := mostLead(t.invisible, t.ahead)
	lead := t.slots.lead(t.ahead, most)
	t.mu.Lock()
	defer t.mu.Unlock()
	var near []*lease
	for k, l := range t.leases {
		if !l.ended.Load() && now.After(l.until) {
			l.ended.Store(true)
		}
		if l.ended.Load() {
			if now.After(l.visibleAt) && !l.renewing {
				delete(t.leases, k)
			}
			continue
		}
		if l.visibleAt.Sub(now) <= most {
			near = append(near, l)
		}
	}
	slices.SortFunc(near, func(a, b *lease) int { return a.visibleAt.Compare(b.visibleAt) })
	n := 0
	for i, l := range near {
		if l.visibleAt.Sub(now) <= lead(i) {
			n = i + 1
		}
	}
	var out []*lease
	for _, l := range near[:n] {
		if !l.renewing {
			l.renewing = true
			out = append(out, l)
		}
	}
	return out
}

// renew extends l, holding its lock across the RPC, and reports the answer
// to its pass.
func (t *leaseTable) renew(l *lease, p *renewalPass) {
	ctx := t.rpcCtx
	name := l.h.String() // no renewal changes what it shows, and none but this one runs
	t.mu.Lock()
	deadline := l.visibleAt
	t.mu.Unlock()
	var lateBy time.Duration
	defer func() {
		t.mu.Lock()
		l.renewing = false
		t.mu.Unlock()
		p.answered(ctx, name, lateBy)
	}()
	if l.acquire(ctx) != nil {
		return
	}
	defer l.unlock()
	if l.ended.Load() || l.ending.Load() > 0 {
		return // ended, or about to: an ack or a change is waiting for the handle
	}
	if t.beforeRenew != nil {
		t.beforeRenew(l.h, deadline)
	}
	t0 := t.now()
	nh, err := t.pool.changeInvisibleRaw(ctx, l.h, t.invisible)
	if answered := t.now(); ctx.Err() == nil {
		t.slots.observe(answered.Sub(t0))
		if answered.After(deadline) {
			lateBy = answered.Sub(deadline)
		}
	}
	t.metrics.renewed(ctx, "lease", err)
	switch {
	case errors.Is(err, client.ErrInvalidReceiptHandle):
		// The broker has let the delivery go (its invisibility ended, or a
		// newer handle replaced this one): renewing it again would fail the
		// same way every tick. The lease ends; an ack of it fails the same
		// way, which tells the caller the message comes back.
		t.log.Warn("rmqflow: lease lost: the broker refused its renewal as an expired receipt handle; the message will be delivered again",
			"handle", name)
		l.lost.Store(true)
		l.finish()
		return
	case err != nil:
		if ctx.Err() == nil {
			t.log.Warn("rmqflow: lease renewal failed", "handle", name, "err", err)
		}
		return
	}
	l.h = nh
	t.mu.Lock()
	defer t.mu.Unlock()
	l.renewed = append(l.renewed, nh.Handle)
	l.visibleAt = t0.Add(t.invisible)
}
