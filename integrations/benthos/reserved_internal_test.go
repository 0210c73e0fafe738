package rmqbenthos

import (
	"testing"

	"github.com/rmqflow/rmqflow"
)

// TestReservedPropertiesNotMetadata: a producer's properties named like the
// delivery's metadata (rocketmq_dead_lettered, rocketmq_lite_topic,
// rocketmq_handle) do not reach the message's metadata: they would pass for
// the broker's word.
func TestReservedPropertiesNotMetadata(t *testing.T) {
	m := &rmqflow.AckableMessage[[]byte]{Value: []byte("x"), Meta: rmqflow.Metadata{Topic: "t", MessageID: "id1", DeliveryAttempt: 1,
		Properties: map[string]string{"rocketmq_dead_lettered": "true", "rocketmq_lite_topic": "other", "rocketmq_handle": "{}", "kept": "yes", "rocketmq_TRANSACTION_ID": "t1"}}}
	msg := (&input{}).message(m)
	for _, k := range []string{"rocketmq_dead_lettered", "rocketmq_lite_topic", "rocketmq_handle"} {
		if v, ok := msg.MetaGet(k); ok {
			t.Errorf("metadata %s = %q from a producer's property", k, v)
		}
	}
	for k, want := range map[string]string{"kept": "yes", "rocketmq_TRANSACTION_ID": "t1"} { // not an attribute name: kept
		if v, _ := msg.MetaGet(k); v != want {
			t.Errorf("the user property %s = %q, want %q", k, v, want)
		}
	}
	if v, _ := msg.MetaGet("rocketmq_topic"); v != "t" {
		t.Errorf("rocketmq_topic = %q", v)
	}
}
