package rmqflow

import (
	"testing"
	"time"
)

// rejoinDue's clock arithmetic: a run of empty receives starts no earlier
// than the last message another fetcher got, the wait doubles after each
// re-join, an idle run re-joins at most maxRejoins times, only the first
// re-join of a run says so, and a message starts over.
func TestRejoinDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var b binding
	const base = 30 * time.Second
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
		{100, 102, 0, true, false},  // 61 s; next wait 120 s
		{102, 221, 0, false, false}, // 119 s
		{221, 223, 0, true, false},  // 121 s; next wait 240 s
		{223, 462, 0, false, false}, // 239 s
		{462, 464, 0, true, false},  // 241 s: the 4th and last of this run
		{464, 2000, 0, false, false},
		{2000, 9000, 0, false, false}, // idle for hours: no more
		{9000, 9001, 1, false, false}, // a message: back to 30 s
		{9001, 9030, 0, false, false},
		{9030, 9032, 0, true, true}, // next wait 60 s
		// No receive out from 9032 to 9100 (the queue was full, or receives
		// failed): that time does not count, the run starts over at 9100.
		{9100, 9105, 0, false, false},
		{9105, 9159, 0, false, false}, // 59 s
		{9159, 9161, 0, true, false},  // 61 s
		// A run begun from another fetcher's message (polled before it),
		// then a pause: the pause does not count either.
		{9161, 9170, 2, false, false},
		{9165, 9172, 0, false, false}, // the run starts at 9170
		{9600, 9605, 0, false, false}, // polled 428 s after the last empty answer: starts over at 9600
		{9605, 9631, 0, true, true},   // 31 s
	}
	for i, s := range steps {
		due, first := b.rejoinDue(at(s.polled), at(s.now), s.n, base)
		if due != s.due || first != s.first {
			t.Fatalf("step %d (polled %d s, answered %d s, %d messages): due %v first %v, want %v %v", i, s.polled, s.now, s.n, due, first, s.due, s.first)
		}
	}
	if maxLiteRejoins != 4 {
		t.Errorf("maxLiteRejoins = %d; the steps above and the docs say 4", maxLiteRejoins)
	}
}

// LiteRejoinAfter's default is 30 s whatever the InvisibleDuration; a value
// set stays as set.
func TestLiteRejoinAfterDefault(t *testing.T) {
	for _, c := range []struct{ invisible, set, want time.Duration }{
		{10 * time.Second, 0, DefaultLiteRejoinAfter},
		{0, 0, 30 * time.Second},
		{5 * time.Minute, 0, DefaultLiteRejoinAfter},
		{10 * time.Second, 45 * time.Second, 45 * time.Second},
		{10 * time.Second, -1, -1},
	} {
		got := SourceConfig{InvisibleDuration: c.invisible, LiteRejoinAfter: c.set}.withDefaults().LiteRejoinAfter
		if got != c.want {
			t.Errorf("InvisibleDuration %v, LiteRejoinAfter %v: default %v, want %v", c.invisible, c.set, got, c.want)
		}
	}
}
