package rmqio

import (
	"context"
	"testing"

	"github.com/rmqflow/rmqflow"
)

// TestDeadLetteredPassesThrough: a message read from the group's
// dead-letter topic is flagged DeadLettered by Read, and Throttle lets it
// through without asking its policy (it cannot be deferred away: docs/beam.md).
func TestDeadLetteredPassesThrough(t *testing.T) {
	h := rmqflow.ReceiptHandle{Endpoints: "127.0.0.1:1", Group: "g", Topic: "%DLQ%g", LiteTopic: "l", MessageID: "01DLQ",
		Handle: "h", DeliveryAttempt: 1}
	el, err := fromRMQ(&rmqflow.AckableMessage[[]byte]{Value: []byte("x"), Handle: h,
		Meta: rmqflow.Metadata{Topic: "%DLQ%g", LiteTopic: "l", MessageID: "01DLQ", DeliveryAttempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !el.DeadLettered {
		t.Fatal("a message from the dead-letter topic is not flagged DeadLettered")
	}
	var out []AckableMessage
	fn := &throttleFn{} // no throttle set up: its policy must not be asked
	if err := fn.ProcessElement(context.Background(), el, func(m AckableMessage) { out = append(out, m) }); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].MessageID != "01DLQ" {
		t.Fatalf("Throttle emitted %v, want the dead-lettered message", out)
	}
}
