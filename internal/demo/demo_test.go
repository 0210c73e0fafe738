package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestDemoOnEmulator runs a small demo on rmqfake: every message is acked in
// both runs, the throttle defers only the hot session, and the report and
// chart are produced.
func TestDemoOnEmulator(t *testing.T) {
	s := rmqfake.NewForTest(t)
	if err := s.CreateTopic("demo", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("demo-g", rmqfake.LiteBind("demo"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, err := Run(ctx, Config{Conn: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "demo", Group: "demo-g",
		Sessions: 6, PerSession: 3, Hot: 120, Workers: 2, ModelCall: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 || !results[0].Baseline || results[1].Throttled || !results[2].Throttled {
		t.Fatalf("%d runs: want the baseline, throttle off, throttle on", len(results))
	}
	if len(results[0].Hot().Latencies) != 0 || len(results[0].Cold()) != 6*3 {
		t.Errorf("baseline: hot %d, cold %d acked; want 0 and %d", len(results[0].Hot().Latencies), len(results[0].Cold()), 6*3)
	}
	for _, r := range results[1:] {
		acked := 0
		for _, tp := range r.Topics {
			acked += tp.Acked
			if !tp.Hot && tp.Deferred != 0 {
				t.Errorf("cold session %s deferred %d times", tp.LiteTopic, tp.Deferred)
			}
		}
		if acked != 120+6*3 {
			t.Errorf("throttled=%v: acked %d, want %d", r.Throttled, acked, 120+6*3)
		}
	}
	if results[2].Hot().Deferred == 0 {
		t.Error("the throttle never deferred the hot session")
	}
	var table, svg bytes.Buffer
	WriteTable(&table, results)
	if !strings.Contains(table.String(), "(hot)") || !strings.Contains(table.String(), "all cold sessions") {
		t.Errorf("table:\n%s", table.String())
	}
	if err := WriteLatencyChart(&svg, results); err != nil || !strings.HasPrefix(svg.String(), "<svg") {
		t.Errorf("chart: %v %q", err, svg.String())
	}
}
