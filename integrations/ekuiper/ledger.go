package rmqkuiper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow"
)

// A ledger holds the messages one rule's rocketmq source ingested and that
// no sink has settled yet, in ingest order (rocketmq_seq). The rule's acking
// sinks each report the highest seq they delivered; every message up to the
// lowest of those reports is done — delivered, or dropped by the rule's SQL
// before a later row was delivered — and is acked.
//
// That inference holds because a rule processes its rows in order: one
// rocketmq stream per rule, concurrency 1, no buffer-full discarding, and
// windows in processing time (docs/ekuiper.md lists what breaks it).
type ledger struct {
	rule string

	mu      sync.Mutex
	acker   *rmqflow.Acker // the source's; nil while no source is attached
	source  any            // the attached source, to detach only itself
	next    int64
	pending []pendingMsg // ascending seq
	// marks is each acking sink's highest delivered seq; a sink that has
	// delivered nothing yet holds every ack back.
	marks map[string]int64
	// maxAge is how long a message may stay pending: its source stops
	// renewing it then (Leases.MaxExtension) and it comes back, so the
	// ledger forgets it.
	maxAge time.Duration
	now    func() time.Time
}

type pendingMsg struct {
	seq int64
	at  time.Time
	h   rmqflow.ReceiptHandle
}

var ledgers = struct {
	sync.Mutex
	m map[string]*ledger
}{m: map[string]*ledger{}}

// ledgerOf returns rule's ledger, making it on first use (by the source or a
// sink, whichever starts first).
func ledgerOf(rule string) *ledger {
	ledgers.Lock()
	defer ledgers.Unlock()
	l := ledgers.m[rule]
	if l == nil {
		l = &ledger{rule: rule, marks: map[string]int64{}, now: time.Now}
		ledgers.m[rule] = l
	}
	return l
}

// errTwoSources: a rule reading two rocketmq streams cannot tell whose rows
// a window's seq names.
var errTwoSources = errors.New("rocketmq: a rule reads at most one rocketmq stream when its sinks ack (ack-mode sink)")

// attach makes src the ledger's source.
func (l *ledger) attach(src any, acker *rmqflow.Acker, maxAge time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.source != nil && l.source != src {
		return fmt.Errorf("rule %s: %w", l.rule, errTwoSources)
	}
	l.source, l.acker, l.maxAge = src, acker, maxAge
	return nil
}

// detach ends src's part: the messages still pending go back to the group
// at once (they were not settled), and the ledger forgets them.
func (l *ledger) detach(ctx context.Context, src any) error {
	l.mu.Lock()
	if l.source != src {
		l.mu.Unlock()
		return nil
	}
	pending, acker := l.pending, l.acker
	l.pending, l.source, l.acker = nil, nil, nil
	l.mu.Unlock()
	var first error
	for _, p := range pending {
		if err := acker.Release(ctx, p.h); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// add records an ingested message and returns its seq. Messages pending for
// longer than maxAge are forgotten: their source no longer renews them, and
// they come back as new rows.
func (l *ledger) add(h rmqflow.ReceiptHandle) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.maxAge > 0 {
		n := 0
		for n < len(l.pending) && now.Sub(l.pending[n].at) > l.maxAge {
			n++
		}
		l.pending = l.pending[n:]
	}
	l.next++
	l.pending = append(l.pending, pendingMsg{seq: l.next, at: now, h: h})
	return l.next
}

// join registers an acking sink; until it reports, nothing is acked.
func (l *ledger) join(sink string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.marks[sink]; !ok {
		l.marks[sink] = 0
	}
}

func (l *ledger) leave(sink string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.marks, sink)
}

// delivered records that sink delivered every row up to seq, and acks what
// every acking sink has now passed. It waits for those acks; a failed ack
// leaves its message to come back.
func (l *ledger) delivered(ctx context.Context, sink string, seq int64) error {
	l.mu.Lock()
	if seq > l.marks[sink] {
		l.marks[sink] = seq
	}
	low := seq
	for _, m := range l.marks {
		low = min(low, m)
	}
	n := sort.Search(len(l.pending), func(i int) bool { return l.pending[i].seq > low })
	done := l.pending[:n:n]
	l.pending = l.pending[n:]
	acker := l.acker
	l.mu.Unlock()
	if acker == nil || len(done) == 0 {
		return nil
	}
	futures := make([]*rmqflow.AckFuture, len(done))
	for i, p := range done {
		futures[i] = acker.AckAsync(context.WithoutCancel(ctx), p.h)
	}
	var first error
	for _, f := range futures {
		select {
		case <-f.Done():
			if err := f.Err(); err != nil && first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// failed gives the messages of seqs back to the group at once: a sink could
// not deliver their rows, so they are delivered again (as new rows).
func (l *ledger) failed(ctx context.Context, seqs []int64) error {
	want := map[int64]bool{}
	for _, s := range seqs {
		want[s] = true
	}
	l.mu.Lock()
	var back []rmqflow.ReceiptHandle
	kept := l.pending[:0]
	for _, p := range l.pending {
		if want[p.seq] {
			back = append(back, p.h)
		} else {
			kept = append(kept, p)
		}
	}
	l.pending = kept
	acker := l.acker
	l.mu.Unlock()
	if acker == nil {
		return nil
	}
	var first error
	for _, h := range back {
		if err := acker.Release(ctx, h); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// pendingCount is how many messages wait to be settled (tests, status).
func (l *ledger) pendingCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}
