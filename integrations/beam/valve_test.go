package rmqio

import (
	"context"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
)

// TestValveLimit: a valve fires at MaxDeliveryAttempt own deliveries (16 by
// default), lowered to the group's own limit and, for Retry and a lite
// message, to half of it; a lite message's own count is its returns + 1 whatever its
// broker attempt, an unordered one's the larger of the two.
func TestValveLimit(t *testing.T) {
	ctx := context.Background()
	lite := rmqflow.ReceiptHandle{Endpoints: "127.0.0.1:1", Group: "valve-g", Topic: "valve", LiteTopic: "l", MessageID: "01VALVELITE"}
	plain := rmqflow.ReceiptHandle{Endpoints: "127.0.0.1:1", Group: "valve-g", Topic: "valve", MessageID: "01VALVEPLAIN"}
	groupLimits.mu.Lock()
	groupLimits.m["127.0.0.1:1\x00\x00valve-g\x00valve"] = groupLimitEntry{limit: 4, at: time.Now()}
	groupLimits.mu.Unlock()
	conn := Connection{Endpoints: "127.0.0.1:1"}
	if l := valveLimit(ctx, conn, lite, "", 0, true); l != 2 {
		t.Errorf("Retry's lite limit %d, want 2 (half the group's 4)", l)
	}
	if l := valveLimit(ctx, conn, lite, "", 0, false); l != 4 {
		t.Errorf("Throttle's lite limit %d, want the group's 4", l)
	}
	if l := valveLimit(ctx, conn, lite, "", 1, true); l != 1 {
		t.Errorf("lite limit with MaxDeliveryAttempt 1: %d", l)
	}
	if l := valveLimit(ctx, conn, plain, "", 0, true); l != rmqflow.DefaultMaxDeliveryAttempt {
		t.Errorf("plain limit %d, want the default (the broker judges its own deliveries)", l)
	}
	if n := ownDeliveries(lite, "", 9); n != 1 {
		t.Errorf("a lite message on broker attempt 9 with no return of its own: %d deliveries, want 1", n)
	}
	ownReturns.add(lite)
	defer ownReturns.forget(lite)
	if n := ownDeliveries(lite, "", 9); n != 2 {
		t.Errorf("after one return: %d, want 2", n)
	}
	if n := ownDeliveries(plain, "", 3); n != 3 {
		t.Errorf("a plain message on broker attempt 3: %d, want 3", n)
	}
	if n := ownDeliveries(plain, "mg", 3); n != 1 {
		t.Errorf("a message of a message group on broker attempt 3: %d, want 1", n)
	}
	r := &returnCounts{max: 10, m: map[string]int{}}
	for i := range 25 {
		r.add(rmqflow.ReceiptHandle{Group: "g", MessageID: string(rune('A' + i))})
	}
	if len(r.m) != 10 || r.count(rmqflow.ReceiptHandle{Group: "g", MessageID: "Y"}) != 1 || r.count(rmqflow.ReceiptHandle{Group: "g", MessageID: "A"}) != 0 {
		t.Errorf("counts of capacity 10 after 25 messages: %d kept", len(r.m))
	}
}
