package rmqflow

import "time"

// SetRunnerClock makes r's order blocks and safety valves follow a test clock
// (such as rmqfake.ManualClock). Call it before Run.
func SetRunnerClock[T any](r *Runner[T], now func() time.Time) {
	r.now = now
	r.valves.now = now
}

// RunnerHeld is how many messages r took from its source and has not settled.
func RunnerHeld[T any](r *Runner[T]) int64 { return r.held.Load() }

// RunnerMaxHeld is r's bound on the messages it holds.
func RunnerMaxHeld[T any](r *Runner[T]) int { return r.cfg.MaxHeld }
