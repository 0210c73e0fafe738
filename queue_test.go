package rmqflow

import (
	"context"
	"testing"
	"time"
)

func queuedEntries(b *binding, n int) []*entry {
	es := make([]*entry, n)
	for i := range es {
		es[i] = &entry{bind: b}
	}
	return es
}

// TestQueueTakeAllocatesNothing: with no fetcher waiting for room, taking a
// message neither allocates nor wakes anyone.
func TestQueueTakeAllocatesNothing(t *testing.T) {
	b := &binding{}
	q := newQueue(64, 32)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		n := q.reserve(ctx, b, 32)
		q.put(b, queuedEntries(b, n), n) // the entries' own allocations are counted below
		for range n {
			if _, err := q.take(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	// One reserve, put and 32 takes: the 32 entries, their slice, the items
	// slice growing, and one notEmpty channel per put. A channel per take
	// would add 32.
	if allocs > 40 {
		t.Errorf("%.0f allocations per batch of 32 taken, want ≤ 40 (no channel per take)", allocs)
	}
}

// TestQueueTakeWakesWaitingReserve: a reservation waiting on a full share
// wakes once a quarter batch is free, with that room.
func TestQueueTakeWakesWaitingReserve(t *testing.T) {
	b := &binding{}
	q := newQueue(8, 8) // least: 2 slots
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := q.reserve(ctx, b, 8)
	q.put(b, queuedEntries(b, n), n)
	got := make(chan int, 1)
	go func() { got <- q.reserve(ctx, b, 8) }()
	for { // until the reservation waits (no event to await)
		q.mu.Lock()
		w := q.waiting
		q.mu.Unlock()
		if w == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	q.mu.Lock()
	wake := q.notFull
	q.mu.Unlock()
	if _, err := q.take(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
		t.Fatal("one slot free (less than a quarter batch) woke the waiting reservation")
	default:
	}
	if _, err := q.take(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 2 {
			t.Errorf("reserved %d, want the 2 free slots", n)
		}
	case <-ctx.Done():
		t.Fatal("a reservation waiting for room was not woken when a quarter batch freed")
	}
}
