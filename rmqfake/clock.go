package rmqfake

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Clock is the time source of a Server. Invisibility expiry, redelivery,
// delayed messages, long polling and injected latency all follow it, so a
// test with a [ManualClock] can let 30 minutes pass in a microsecond. gRPC
// deadlines set by clients stay in real time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a ManualClock, in the
	// goroutine that advances the clock) once d has elapsed on this clock.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not run yet and reports whether it did.
	Stop() bool
}

// RealClock returns the wall clock (time.Now, time.AfterFunc). It is the
// default of a Server.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// ManualClock is a Clock that moves only when told to. Timers due at or
// before the new time run synchronously inside Advance and Set, in the order
// of their due times. It is safe for concurrent use.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  timerHeap
	seq     uint64
	changed chan struct{} // closed and replaced whenever the timer set changes
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, changed: make(chan struct{})}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the clock reaches Now()+d. A d of zero or
// less still waits for the next Advance or Set.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f, index: -1}
	heap.Push(&c.timers, t)
	c.notifyLocked()
	return t
}

// Advance moves the clock forward by d, running every timer that falls due on
// the way at its own due time.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.Set(target)
}

// Set moves the clock to t (never backwards), running the timers due by then.
func (c *ManualClock) Set(t time.Time) {
	for {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].when.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		next := heap.Pop(&c.timers).(*manualTimer)
		if next.when.After(c.now) {
			c.now = next.when
		}
		c.notifyLocked()
		c.mu.Unlock()
		next.f()
	}
}

// Pending returns the number of timers waiting to run.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitPending blocks until at least n timers are waiting, or ctx ends. Tests
// use it to know that a long poll or an injected delay has started waiting on
// the clock before they Advance it.
func (c *ManualClock) WaitPending(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		ok, ch := len(c.timers) >= n, c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *ManualClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type manualTimer struct {
	c     *ManualClock
	when  time.Time
	seq   uint64
	f     func()
	index int // position in the heap, -1 when not in it
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	t.c.notifyLocked()
	return true
}

type timerHeap []*manualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].seq < h[j].seq
	}
	return h[i].when.Before(h[j].when)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*manualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}

// sleep waits d on clock c, or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, c Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	done := make(chan struct{})
	t := c.AfterFunc(d, func() { close(done) })
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
