package rmqflow

import "time"

// SetSourceClock makes s follow a test clock (such as rmqfake.ManualClock)
// instead of the wall clock. Call it before Start.
func SetSourceClock[T any](s *Source[T], now func() time.Time, afterFunc func(time.Duration, func()) (stop func() bool)) {
	s.clk = clock{now: now, afterFunc: afterFunc}
	if s.leases != nil {
		s.leases.clk = s.clk
	}
}

// SetLeaseRenewHook makes s's lease table call f before each lease
// renewal RPC, with the delivery's handle and when its invisibility ends by
// the source's reckoning; f may block to make the renewal late. Call it
// before Start, after NewRunner (which turns leases on).
func SetLeaseRenewHook[T any](s *Source[T], f func(h ReceiptHandle, visibleAt time.Time)) {
	s.leases.beforeRenew = f
}

// SetSinkFlushHook makes s call sealed each time a Flush has taken its
// snapshot: records written after sealed was called are not waited for.
func SetSinkFlushHook(s *Sink, sealed func()) {
	s.mu.Lock()
	s.flushSealed = sealed
	s.mu.Unlock()
}
