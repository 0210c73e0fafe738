package rmqflow

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

type loggerLike = *slog.Logger

// entry is one fetched message waiting in the queue.
type entry struct {
	msg        *client.ReceivedMessage
	bind       *binding
	receivedAt time.Time
	// bad is set for a message that lacks what an ack needs; it is emitted
	// with this error and never renewed or released.
	bad *MalformedMessageError

	mu        sync.Mutex // held while the entry is renewed or taken
	handle    string     // newest receipt handle
	visibleAt time.Time  // when the invisibility ends (local clock)
	taken     bool       // emitted or given back: the renewer leaves it alone
}

// queue is the source's bounded FIFO, with a share per binding. Fetchers
// reserve room in their binding's share before polling and ask the broker
// for no more than they reserved, so that no binding holds more than its
// share (2 × MaxMessageNum × FetchConcurrency) and a binding whose share is full
// stops receiving while the others go on.
type queue struct {
	mu       sync.Mutex
	items    []*entry
	share    int              // slots per binding
	least    int              // the free slots a reservation waits for
	held     map[*binding]int // per binding: queued plus reserved
	waiting  int              // reservations waiting for room
	closed   bool
	drain    bool
	err      error         // why the source ended, returned by take once empty
	notEmpty chan struct{} // closed and replaced when items arrive
	notFull  chan struct{} // closed and replaced when room appears
}

// newQueue returns a queue of share slots per binding whose reservations,
// of batch slots each, wait for a quarter of a batch (at least one slot).
func newQueue(share, batch int) *queue {
	return &queue{share: share, least: min(max(1, batch/4), share), held: map[*binding]int{},
		notEmpty: make(chan struct{}), notFull: make(chan struct{})}
}

// reserve waits until a quarter batch of slots is free in b's share and
// reserves up to n of them; it returns how many it reserved, 0 when the
// queue closed, drains, or ctx ended. Waiting for a quarter batch avoids a
// storm of tiny polls while the queue drains; a share three-quarters full
// still fills up.
func (q *queue) reserve(ctx context.Context, b *binding, n int) int {
	for {
		q.mu.Lock()
		if q.closed || q.drain {
			q.mu.Unlock()
			return 0
		}
		if free := q.share - q.held[b]; free >= q.least {
			got := min(n, free)
			q.held[b] += got
			q.mu.Unlock()
			return got
		}
		wait := q.notFull
		q.waiting++
		q.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-wait:
		}
		q.mu.Lock()
		q.waiting--
		q.mu.Unlock()
		if ctx.Err() != nil {
			return 0
		}
	}
}

// put adds es (no more than n, which the caller enforces) and frees what is
// left of b's reservation of n slots. Entries that arrive after close are
// still queued so that close returns them for release.
func (q *queue) put(b *binding, es []*entry, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held[b] -= n - len(es)
	if len(es) < n {
		q.roomFor(b)
	}
	if len(es) == 0 {
		return
	}
	q.items = append(q.items, es...)
	close(q.notEmpty)
	q.notEmpty = make(chan struct{})
}

func (q *queue) wakeFull() {
	close(q.notFull)
	q.notFull = make(chan struct{})
}

// roomFor wakes the waiting reservations (q.mu held) if b's share has room
// for one; with none waiting it costs nothing.
func (q *queue) roomFor(b *binding) {
	if q.waiting > 0 && q.share-q.held[b] >= q.least {
		q.wakeFull()
	}
}

// take pops the head, waiting for one.
func (q *queue) take(ctx context.Context) (*entry, error) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return nil, ErrSourceClosed
		}
		if len(q.items) > 0 {
			e := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.held[e.bind]--
			q.roomFor(e.bind)
			q.mu.Unlock()
			e.mu.Lock()
			e.taken = true
			e.mu.Unlock()
			return e, nil
		}
		if q.drain {
			err := q.err
			q.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return nil, ErrSourceClosed
		}
		wait := q.notEmpty
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
}

// scan returns the queued entries to renew, soonest expiry first, and
// removes and returns those queued for longer than maxAge at now (to be
// given back). Malformed entries are neither. The k-th soonest expiry (k
// from 0) is due when its invisibility ends before now+lead(k), and with
// it every sooner one; lead(k) is at most most.
func (q *queue) scan(now time.Time, lead func(k int) time.Duration, most, maxAge time.Duration) (renew, old []*entry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	type due struct {
		e   *entry
		end time.Time // e.visibleAt, read under e.mu
	}
	var dues []due
	kept := q.items[:0]
	for _, e := range q.items {
		if e.bad != nil {
			kept = append(kept, e)
			continue
		}
		e.mu.Lock()
		switch {
		case now.Sub(e.receivedAt) > maxAge:
			e.taken = true
			q.held[e.bind]--
			old = append(old, e)
		case e.visibleAt.Before(now.Add(most)):
			dues = append(dues, due{e, e.visibleAt})
			kept = append(kept, e)
		default:
			kept = append(kept, e)
		}
		e.mu.Unlock()
	}
	clear(q.items[len(kept):])
	q.items = kept
	if len(old) > 0 {
		q.wakeFull()
	}
	slices.SortStableFunc(dues, func(a, b due) int { return a.end.Compare(b.end) })
	n := 0
	for i, d := range dues {
		if d.end.Before(now.Add(lead(i))) {
			n = i + 1
		}
	}
	for _, d := range dues[:n] {
		renew = append(renew, d.e)
	}
	return renew, old
}

// dropFollowers removes and returns the entries of e's binding queued behind
// it with its ordering key (lite topic, or FIFO message group): e was not
// emitted, and on the broker they come after it. Entries without a key
// have no order to keep.
func (q *queue) dropFollowers(e *entry) []*entry {
	lite, group := e.msg.LiteTopic, e.msg.MessageGroup
	if lite == "" && group == "" {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var dropped []*entry
	kept := q.items[:0]
	for _, f := range q.items {
		if f.bind == e.bind && f.msg.LiteTopic == lite && f.msg.MessageGroup == group {
			f.mu.Lock()
			f.taken = true
			f.mu.Unlock()
			q.held[f.bind]--
			dropped = append(dropped, f)
			continue
		}
		kept = append(kept, f)
	}
	clear(q.items[len(kept):])
	q.items = kept
	if len(dropped) > 0 {
		q.roomFor(e.bind)
	}
	return dropped
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// closeWhenEmpty stops new reservations; take returns ErrSourceClosed once the
// queue is empty.
func (q *queue) closeWhenEmpty() { _ = q.fail(nil) }

// fail is closeWhenEmpty with a reason: once the queue is empty, take returns
// err (the first one given) instead of ErrSourceClosed. It reports whether
// err is that first one.
func (q *queue) fail(err error) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	first := q.err == nil && err != nil && !q.closed
	if q.err == nil {
		q.err = err
	}
	q.drain = true
	close(q.notEmpty)
	q.notEmpty = make(chan struct{})
	q.wakeFull()
	return first
}

// close empties the queue and returns what it held.
func (q *queue) close() []*entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	left := q.items
	q.items = nil
	clear(q.held)
	close(q.notEmpty)
	q.notEmpty = make(chan struct{})
	q.wakeFull()
	return left
}
