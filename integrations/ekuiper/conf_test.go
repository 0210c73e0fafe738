package rmqkuiper

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
)

// TestParseSource: the reference connector's option names map onto the
// rmqflow source; durations take "30s" or milliseconds; bad values name the
// key.
func TestParseSource(t *testing.T) {
	c, unknown, err := parseSource(map[string]any{"endpoints": "127.0.0.1:8081", "datasource": "agents",
		"consumer-group": "agents-g", "await-duration": "5s", "invisible-duration": 30000, "max-message-num": 16,
		"fetch-concurrency": "2", "format": "json", "typo-key": 1})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.src
	if sc.Lite[0].Topic != "agents" || sc.Lite[0].Group != "agents-g" || sc.AwaitDuration != 5*time.Second ||
		sc.InvisibleDuration != 30*time.Second || sc.MaxMessageNum != 16 || sc.FetchConcurrency != 2 {
		t.Fatalf("parsed %+v", sc)
	}
	if c.ackMode != AckSink || !sc.Leases.Enabled || sc.Leases.MaxExtension != DefaultPendingMaxAge {
		t.Fatalf("ack mode %q, leases %+v", c.ackMode, sc.Leases)
	}
	if len(unknown) != 1 || unknown[0] != "typo-key" {
		t.Fatalf("unknown keys %v", unknown)
	}
	for key, bad := range map[string]map[string]any{
		"endpoints":          {"datasource": "t", "consumer-group": "g"},
		"consumer-group":     {"endpoints": "h:1", "datasource": "t"},
		"mode":               {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "mode": "push"},
		"ack-mode":           {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "ack-mode": "later"},
		"await-duration":     {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "await-duration": "soon"},
		"secret-key":         {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "access-key": "ak"},
		"InvisibleDuration":  {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "invisible-duration": "1s"},
		"filter-expression":  {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "mode": "simple", "filter-type": "sql"},
	} {
		_, _, err := parseSource(bad)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming it", key, err)
		}
	}
	var ce *ConfError
	if _, _, err := parseSource(map[string]any{}); !errors.As(err, &ce) {
		t.Errorf("an empty configuration: %v, want a *ConfError", err)
	}
	var oe *rmqflow.OptionError
	if _, _, err := parseSource(map[string]any{"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "max-message-num": 99}); !errors.As(err, &oe) {
		t.Errorf("max-message-num 99: %v, want rmqflow's *OptionError", err)
	}
}

// TestParseSink: topic is required, lite-topic and lite-topic-field exclude
// each other, and eKuiper's own action keys are not reported as unknown.
func TestParseSink(t *testing.T) {
	c, unknown, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "answers", "lite-topic-field": "lite",
		"sendSingle": true, "bufferLength": 1024})
	if err != nil || c.liteTopicField != "lite" || !c.ack || len(unknown) != 0 {
		t.Fatalf("conf %+v, unknown %v, err %v", c, unknown, err)
	}
	if _, _, err := parseSink(map[string]any{"endpoints": "h:1"}); err == nil || !strings.Contains(err.Error(), "topic") {
		t.Errorf("no topic: %v", err)
	}
	if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", "lite-topic": "a", "lite-topic-field": "b"}); err == nil {
		t.Error("lite-topic with lite-topic-field accepted")
	}
	if c, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", "ack": false}); err != nil || c.ack {
		t.Errorf("ack false: %+v, %v", c, err)
	}
}

// TestLedger: a sink's progress acks everything up to it, once every acking
// sink of the rule passed it; failed rows leave the ledger.
func TestLedgerOrder(t *testing.T) {
	l := &ledger{rule: "r", marks: map[string]int64{}, now: time.Now}
	for i := 0; i < 5; i++ {
		l.add(rmqflow.ReceiptHandle{MessageID: string(rune('a' + i))})
	}
	l.join("s1")
	l.join("s2")
	if err := l.delivered(t.Context(), "s1", 4); err != nil {
		t.Fatal(err)
	}
	if n := l.pendingCount(); n != 5 {
		t.Fatalf("one of two sinks reported: %d pending, want 5", n)
	}
	if err := l.failed(t.Context(), []int64{2}); err != nil {
		t.Fatal(err)
	}
	if err := l.delivered(t.Context(), "s2", 3); err != nil {
		t.Fatal(err)
	}
	if n := l.pendingCount(); n != 2 { // 4 and 5 stay: s2 is at 3
		t.Fatalf("%d pending, want 2", n)
	}
}
