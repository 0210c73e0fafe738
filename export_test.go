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

// SetSinkFlushHook makes s call sealed each time a Flush has taken its
// snapshot: records written after sealed was called are not waited for.
func SetSinkFlushHook(s *Sink, sealed func()) {
	s.mu.Lock()
	s.flushSealed = sealed
	s.mu.Unlock()
}
