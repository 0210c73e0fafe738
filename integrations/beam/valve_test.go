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
// broker attempt, an unordered one's the larger of the two (the counting
// itself is rmqflow.ReturnTracker's, tested in the core).
func TestValveLimit(t *testing.T) {
	ctx := context.Background()
	lite := rmqflow.ReceiptHandle{Endpoints: "127.0.0.1:1", Group: "valve-g", Topic: "valve", LiteTopic: "l", MessageID: "01VALVELITE", DeliveryAttempt: 9}
	plain := rmqflow.ReceiptHandle{Endpoints: "127.0.0.1:1", Group: "valve-g", Topic: "valve", MessageID: "01VALVEPLAIN", DeliveryAttempt: 3}
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
	if n := ownDeliveries(lite, ""); n != 1 {
		t.Errorf("a lite message on broker attempt 9 with no return of its own: %d deliveries, want 1", n)
	}
	ownReturns.Add(lite)
	defer ownReturns.Forget(lite)
	if n := ownDeliveries(lite, ""); n != 2 {
		t.Errorf("after one return: %d, want 2", n)
	}
	if n := ownDeliveries(plain, ""); n != 3 {
		t.Errorf("a plain message on broker attempt 3: %d, want 3", n)
	}
	if n := ownDeliveries(plain, "mg"); n != 1 {
		t.Errorf("a message of a message group on broker attempt 3: %d, want 1", n)
	}
}
