package rmqflow

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// TestMetadataIsACopy (#22): Metadata's keys and properties are the
// message's own copies; changing them changes nothing else.
func TestMetadataIsACopy(t *testing.T) {
	rm := &client.ReceivedMessage{Keys: []string{"k1"}, Properties: map[string]string{"p": "1"}}
	md := metadataOf(rm, time.Now())
	md.Keys[0] = "changed"
	md.Properties["p"] = "changed"
	md.Properties["new"] = "x"
	if rm.Keys[0] != "k1" || rm.Properties["p"] != "1" || len(rm.Properties) != 1 {
		t.Fatalf("changing Metadata changed the received message: keys %v, properties %v", rm.Keys, rm.Properties)
	}
}
