package rmqflow

import "time"

// SetSourceClock makes s follow a test clock (such as rmqfake.ManualClock)
// instead of the wall clock. Call it before Start.
func SetSourceClock[T any](s *Source[T], now func() time.Time, afterFunc func(time.Duration, func()) (stop func() bool)) {
	s.clk = clock{now: now, afterFunc: afterFunc}
}
