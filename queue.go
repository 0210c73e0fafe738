package rmqflow

import (
	"context"
	"log/slog"
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

	mu        sync.Mutex // held while the entry is renewed or taken
	handle    string     // newest receipt handle
	visibleAt time.Time  // when the invisibility ends (local clock)
	taken     bool
}

// queue is the source's bounded FIFO. Fetchers reserve room before polling
// and ask the broker for no more than they reserved, so the queue never holds
// more than its capacity and a full queue stops receiving.
type queue struct {
	mu       sync.Mutex
	items    []*entry
	reserved int
	cap      int
	closed   bool
	drain    bool
	notEmpty chan struct{} // closed and replaced when items arrive
	notFull  chan struct{} // closed and replaced when room appears
}

func newQueue(capacity int) *queue {
	return &queue{cap: capacity, notEmpty: make(chan struct{}), notFull: make(chan struct{})}
}

// reserve waits until a quarter of n slots (at least one) is free and
// reserves up to n of them; it returns how many it reserved, 0 when the queue
// closed or ctx ended. Waiting for a quarter batch avoids a storm of tiny
// polls while the queue drains; a queue three-quarters full still fills up.
func (q *queue) reserve(ctx context.Context, n int) int {
	least := max(1, n/4)
	for {
		q.mu.Lock()
		if q.closed || q.drain {
			q.mu.Unlock()
			return 0
		}
		if free := q.cap - len(q.items) - q.reserved; free >= min(least, q.cap) {
			got := min(n, free)
			q.reserved += got
			q.mu.Unlock()
			return got
		}
		wait := q.notFull
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0
		case <-wait:
		}
	}
}

// put adds es and frees the reservation of n slots taken for them. Entries
// that arrive after close are still queued so that close returns them for
// release.
func (q *queue) put(es []*entry, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reserved -= n
	if len(es) == 0 {
		q.wakeFull()
		return
	}
	q.items = append(q.items, es...)
	close(q.notEmpty)
	q.notEmpty = make(chan struct{})
	if len(es) < n {
		q.wakeFull()
	}
}

func (q *queue) wakeFull() {
	close(q.notFull)
	q.notFull = make(chan struct{})
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
			q.wakeFull()
			q.mu.Unlock()
			e.mu.Lock()
			e.taken = true
			e.mu.Unlock()
			return e, nil
		}
		if q.drain {
			q.mu.Unlock()
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

// due returns the queued entries whose invisibility ends before t.
func (q *queue) due(t time.Time) []*entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*entry
	for _, e := range q.items {
		e.mu.Lock()
		if e.visibleAt.Before(t) {
			out = append(out, e)
		}
		e.mu.Unlock()
	}
	return out
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// closeWhenEmpty stops new reservations; take returns ErrSourceClosed once the
// queue is empty.
func (q *queue) closeWhenEmpty() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drain = true
	close(q.notEmpty)
	q.notEmpty = make(chan struct{})
	q.wakeFull()
}

// close empties the queue and returns what it held.
func (q *queue) close() []*entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	left := q.items
	q.items = nil
	close(q.notEmpty)
	q.notEmpty = make(chan struct{})
	q.wakeFull()
	return left
}
