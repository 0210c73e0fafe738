package main

import (
	"testing"

	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
)

// A failed ack must not lose a message: A and B are acked, B's ack fails
// (its result comes first), A's succeeds; B comes back and its second ack
// succeeds. Both are credited, once each. (Crediting the failure to the
// oldest message, A, lost A for good: B's second ack then credited B twice.)
func TestFifoFailedAckLosesNoMessage(t *testing.T) {
	q := &fifo{}
	a, b := peerkit.Delivery{ID: "A"}, peerkit.Delivery{ID: "B"}
	q.push(a)
	q.push(b)
	got := map[string]int{}
	credit := func(ok bool) {
		if d, found := q.result(ok); found {
			got[d.ID]++
		}
	}
	credit(false) // B's
	credit(true)  // A's
	q.push(b)     // B redelivered
	credit(true)
	if got["A"] != 1 || got["B"] != 1 || len(got) != 2 {
		t.Errorf("credited %v, want A and B once each", got)
	}
	if _, found := q.result(true); found {
		t.Error("a further ok result credited a message: none is left uncredited")
	}
}
