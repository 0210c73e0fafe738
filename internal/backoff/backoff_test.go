package backoff

import (
	"context"
	"testing"
	"time"
)

func TestBackoffDoublesWithinJitterAndCaps(t *testing.T) {
	b := New(100*time.Millisecond, 400*time.Millisecond)
	for i, base := range []time.Duration{100, 200, 400, 400} {
		base *= time.Millisecond
		d := b.Next()
		if d > base || d < base*3/4 {
			t.Fatalf("step %d: %v, want within [%v, %v]", i, d, base*3/4, base)
		}
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("after Reset: %v", d)
	}
}

func TestSleepStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported a full hour on a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep of 1ms did not complete")
	}
}
