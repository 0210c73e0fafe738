package rmqflow_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
)

// TestMetadataAttributes pins the attribute form of a delivery's metadata
// that the Benthos, Watermill and eKuiper integrations hand on: every field
// under its name, empty fields and zero times left out, times in UTC RFC
// 3339 with nanoseconds, keys space-separated, and no user property and no
// handle in it.
func TestMetadataAttributes(t *testing.T) {
	born := time.Date(2026, 12, 1, 10, 0, 0, 5, time.FixedZone("X", 3600))
	m := rmqflow.Metadata{Topic: "agents", LiteTopic: "chat-1", MessageID: "01ID", Tag: "t", Keys: []string{"k1", "k2"},
		Properties: map[string]string{"p": "v"}, MessageGroup: "g", BornTime: born, BornHost: "10.0.0.1",
		StoreTime: born.Add(time.Second), DeliveryAttempt: 3}
	want := map[string]string{
		rmqflow.AttrTopic: "agents", rmqflow.AttrLiteTopic: "chat-1", rmqflow.AttrMessageID: "01ID", rmqflow.AttrTag: "t",
		rmqflow.AttrKeys: "k1 k2", rmqflow.AttrMessageGroup: "g", rmqflow.AttrDeliveryAttempt: "3",
		rmqflow.AttrBornTime: "2026-12-01T09:00:00.000000005Z", rmqflow.AttrBornHost: "10.0.0.1",
		rmqflow.AttrStoreTime: "2026-12-01T09:00:01.000000005Z",
	}
	if got := m.Attributes(); !maps.Equal(got, want) {
		t.Fatalf("Attributes() = %v, want %v", got, want)
	}
	bare := rmqflow.Metadata{Topic: "%DLQ%g", MessageID: "01ID", DeliveryAttempt: 1}
	want = map[string]string{rmqflow.AttrTopic: "%DLQ%g", rmqflow.AttrMessageID: "01ID", rmqflow.AttrDeliveryAttempt: "1",
		rmqflow.AttrDeadLettered: "true"}
	if got := bare.Attributes(); !maps.Equal(got, want) {
		t.Fatalf("Attributes() of a bare dead-lettered message = %v, want %v", got, want)
	}
	for k := range m.Attributes() {
		if !strings.HasPrefix(k, rmqflow.AttrPrefix) {
			t.Errorf("attribute %s lacks the prefix %s", k, rmqflow.AttrPrefix)
		}
	}
}
