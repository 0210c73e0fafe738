// Package backoff is the exponential backoff and the context-aware sleep that
// the client and the connector share.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff doubles from Min to Max, with up to 25% jitter taken off each step.
// The zero value is not useful; use New.
type Backoff struct{ min, max, cur time.Duration }

// New returns a backoff from min to max.
func New(min, max time.Duration) *Backoff { return &Backoff{min: min, max: max} }

// Next returns the next delay.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	return b.cur - time.Duration(rand.Int64N(int64(b.cur/4)+1))
}

// Reset starts over from Min.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep sleeps d or until ctx ends; it reports whether the full d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
