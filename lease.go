package rmqflow

import (
	"context"
	"sync"
	"time"
)

// DefaultLeaseMaxExtension is how long a lease keeps an emitted message
// invisible by default.
const DefaultLeaseMaxExtension = time.Hour

// LeaseConfig turns on the in-process lease table (beyond the Flink
// connector, like the Pub/Sub Go client's lease extension): every message a
// source emits keeps being renewed, RenewalAheadTime before its invisibility
// ends, until it is acked or deferred through the source's Acker or
// MaxExtension has passed since it was received.
//
// Renewal changes the broker's receipt handle; the Acker acks with the newest
// one. A handle that has left the process (serialized, sent to another
// service) is frozen at what it was then: this process cannot tell its new
// holder about later handles, and the holder cannot tell this process it
// acked, so the lease goes on renewing it until MaxExtension. On RocketMQ
// 5.5.0 the frozen handle still acks a lite message, but on a normal topic an
// ack with a handle older than the last renewal answers OK and does not take
// (docs/broker-semantics.md, scenario d): keep leases off for messages that
// leave the process.
type LeaseConfig struct {
	// Enabled turns leases on. Off by default.
	Enabled bool
	// MaxExtension bounds how long after receipt a message is renewed.
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

type leaseKey struct{ group, topic, messageID string }

type lease struct {
	h         ReceiptHandle
	visibleAt time.Time
	until     time.Time
}

// leaseTable renews emitted, unacked messages.
type leaseTable struct {
	cfg       LeaseConfig
	invisible time.Duration
	ahead     time.Duration
	pool      *AckPool
	log       loggerLike
	metrics   *metrics

	mu     sync.Mutex
	leases map[leaseKey]*lease
}

func newLeaseTable(cfg LeaseConfig, invisible, ahead time.Duration, pool *AckPool, log loggerLike, m *metrics) *leaseTable {
	return &leaseTable{cfg: cfg, invisible: invisible, ahead: ahead, pool: pool, log: log, metrics: m, leases: map[leaseKey]*lease{}}
}

func keyOf(h ReceiptHandle) leaseKey { return leaseKey{h.Group, h.Topic, h.MessageID} }

func (t *leaseTable) add(h ReceiptHandle, visibleAt time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leases[keyOf(h)] = &lease{h: h, visibleAt: visibleAt, until: time.Now().Add(t.cfg.MaxExtension)}
}

// take returns the newest handle of h's delivery (h itself when it has no
// lease) and, with release, ends the lease.
func (t *leaseTable) take(h ReceiptHandle, release bool) ReceiptHandle {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases[keyOf(h)]
	if !ok {
		return h
	}
	if release {
		delete(t.leases, keyOf(h))
	}
	return l.h
}

// len is the number of live leases.
func (t *leaseTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.leases)
}

func (t *leaseTable) run(ctx context.Context) {
	tick := time.NewTicker(min(max(t.ahead/4, 50*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, l := range t.due(time.Now()) {
			t.renew(ctx, l)
		}
	}
}

// due returns copies of the leases to renew now and drops expired ones.
func (t *leaseTable) due(now time.Time) []lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []lease
	for k, l := range t.leases {
		if now.After(l.until) {
			delete(t.leases, k)
			continue
		}
		if l.visibleAt.Sub(now) <= t.ahead {
			out = append(out, *l)
		}
	}
	return out
}

func (t *leaseTable) renew(ctx context.Context, l lease) {
	t0 := time.Now()
	nh, err := t.pool.ChangeInvisibleDuration(ctx, l.h, t.invisible)
	t.metrics.renewed(ctx, "lease", err)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("rmqflow: lease renewal failed", "handle", l.h.String(), "err", err)
		}
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Still leased, and not acked with this very handle meanwhile?
	if cur, ok := t.leases[keyOf(l.h)]; ok && cur.h.Handle == l.h.Handle {
		cur.h = nh
		cur.visibleAt = t0.Add(t.invisible)
	}
}
