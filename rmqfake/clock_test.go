package rmqfake_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/rmqfake"
)

func TestManualClockRunsTimersInOrder(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := rmqfake.NewManualClock(start)
	var got []string
	var at []time.Duration
	record := func(name string) func() {
		return func() {
			got = append(got, name)
			at = append(at, c.Now().Sub(start))
		}
	}
	c.AfterFunc(3*time.Second, record("3s"))
	c.AfterFunc(time.Second, record("1s"))
	stopped := c.AfterFunc(2*time.Second, record("2s"))
	c.AfterFunc(time.Second, record("1s-second"))
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if stopped.Stop() {
		t.Error("second Stop returned true")
	}
	if c.Pending() != 3 {
		t.Fatalf("pending %d, want 3", c.Pending())
	}
	c.Advance(2 * time.Second)
	if want := "[1s 1s-second]"; fmtSlice(got) != want {
		t.Fatalf("after 2s ran %v, want %s", got, want)
	}
	if at[0] != time.Second || at[1] != time.Second {
		t.Errorf("timers saw Now at %v, want 1s each", at)
	}
	if c.Now().Sub(start) != 2*time.Second {
		t.Errorf("now %v after Advance(2s)", c.Now().Sub(start))
	}
	c.Advance(time.Hour)
	if want := "[1s 1s-second 3s]"; fmtSlice(got) != want {
		t.Fatalf("after 1h ran %v, want %s", got, want)
	}
	if c.Pending() != 0 {
		t.Errorf("pending %d after all ran", c.Pending())
	}
}

func TestManualClockTimerMayScheduleAnother(t *testing.T) {
	c := rmqfake.NewManualClock(time.Unix(0, 0))
	fired := 0
	var tick func()
	tick = func() {
		fired++
		c.AfterFunc(time.Minute, tick)
	}
	c.AfterFunc(time.Minute, tick)
	c.Advance(30 * time.Minute)
	if fired != 30 {
		t.Fatalf("a timer rescheduling itself every minute fired %d times in 30 min, want 30", fired)
	}
}

func TestManualClockWaitPending(t *testing.T) {
	c := rmqfake.NewManualClock(time.Unix(0, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.WaitPending(ctx, 2) }()
	c.AfterFunc(time.Second, func() {})
	c.AfterFunc(time.Second, func() {})
	if err := <-done; err != nil {
		t.Fatalf("WaitPending: %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := c.WaitPending(short, 3); err == nil {
		t.Error("WaitPending(3) with 2 timers returned nil")
	}
}

func fmtSlice(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

// ExampleManualClock lets a 30-minute invisibility pass at once.
func ExampleManualClock() {
	clk := rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	clk.AfterFunc(30*time.Minute, func() { fmt.Println("invisibility over at", clk.Now().Format(time.TimeOnly)) })
	clk.Advance(30 * time.Minute)
	// Output: invisibility over at 00:30:00
}
