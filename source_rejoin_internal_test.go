package rmqflow

import (
	"testing"
	"time"
)

// rejoinDue's clock arithmetic: a run of empty receives starts no earlier
// than the last message another fetcher got, the wait doubles to its cap, and
// only the first re-join of a run says so.
func TestRejoinDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var b binding
	const base, max = 30 * time.Second, 100 * time.Second
	steps := []struct {
		polled, now, n int
		due, first     bool
	}{
		{0, 5, 0, false, false},     // the run starts at 0
		{5, 10, 3, false, false},    // a message at 10 (another fetcher)
		{0, 20, 0, false, false},    // polled before it: the run starts at 10
		{20, 39, 0, false, false},   // 29 s
		{39, 41, 0, true, true},     // 31 s: the first re-join; next wait 60 s
		{41, 100, 0, false, false},  // 59 s
		{100, 102, 0, true, false},  // 61 s; next wait 100 s (the cap)
		{102, 201, 0, false, false}, // 99 s
		{201, 203, 0, true, false},  // 101 s; the wait stays at the cap
		{203, 302, 0, false, false},
		{302, 304, 0, true, false},
		{304, 305, 1, false, false}, // a message: back to 30 s
		{305, 334, 0, false, false},
		{334, 336, 0, true, true},
	}
	for i, s := range steps {
		due, first := b.rejoinDue(at(s.polled), at(s.now), s.n, base, max)
		if due != s.due || first != s.first {
			t.Fatalf("step %d (polled %d s, answered %d s, %d messages): due %v first %v, want %v %v", i, s.polled, s.now, s.n, due, first, s.due, s.first)
		}
	}
}
