package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// docMetric is one row of docs/metrics.md's table.
type docMetric struct {
	name, kind, unit string
	keys             []string            // attribute keys
	values           map[string][]string // the values listed for a key, if any
}

// docMetrics parses the table of docs/metrics.md.
func docMetrics(t *testing.T) map[string]docMetric {
	t.Helper()
	b, err := os.ReadFile("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	parens := regexp.MustCompile(`\([^()]*\)`)
	tick := regexp.MustCompile("`([^`]+)`")
	rows := map[string]docMetric{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "| `rmqflow.") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 5 {
			t.Fatalf("docs/metrics.md row with %d cells: %s", len(cells), l)
		}
		d := docMetric{name: strings.Trim(cells[0], "`"), kind: cells[1], unit: strings.Trim(cells[2], "`"), values: map[string][]string{}}
		attrs := cells[3]
		for prev := ""; prev != attrs; {
			prev, attrs = attrs, parens.ReplaceAllString(attrs, "")
		}
		for _, part := range strings.Split(attrs, ", ") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			key, vals, _ := strings.Cut(part, " = ")
			k := tick.FindStringSubmatch(key)
			if k == nil {
				t.Fatalf("docs/metrics.md %s: attribute %q", d.name, part)
			}
			d.keys = append(d.keys, k[1])
			for _, v := range tick.FindAllStringSubmatch(vals, -1) {
				d.values[k[1]] = append(d.values[k[1]], v[1])
			}
		}
		rows[d.name] = d
	}
	return rows
}

// TestMetricsAsDocumented records through every instrument of the core, with
// the inputs that produce each documented attribute value, collects them
// with an OpenTelemetry SDK ManualReader and checks name, kind, unit and
// attributes against docs/metrics.md's table (and that the table lists
// every instrument).
func TestMetricsAsDocumented(t *testing.T) {
	ctx := context.Background()
	doc := docMetrics(t)
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	x := newMetrics(meter)
	sm := newSourceMetrics(meter)

	x.fetched(ctx, 2, &binding{topic: "t", group: "g"})
	x.emitted(ctx)
	x.decodeFailed(ctx)
	x.receiveLatency(ctx, 250*time.Millisecond)
	x.observeQueue(func() int { return 3 })
	for _, r := range doc[MetricReleased].values["reason"] {
		sm.released(ctx, r, 1)
	}
	sm.malformed(ctx)
	sm.rejoined(ctx, &binding{topic: "t", group: "g"})
	sm.kicked(ctx, &binding{topic: "t", group: "g"}, true)
	sm.kicked(ctx, &binding{topic: "t", group: "g"}, false)
	x.acked(ctx, nil)
	x.acked(ctx, fmt.Errorf("ack: %w", client.ErrInvalidReceiptHandle))
	x.acked(ctx, errors.New("broken"))
	x.ackBatch(ctx, 5)
	for _, r := range []string{"fair-share", "handler-error", "hold-back"} {
		x.deferred(ctx, r)
	}
	for _, v := range doc[MetricDeadLettered].values["valve"] {
		for _, to := range doc[MetricDeadLettered].values["to"] {
			x.deadLettered(ctx, v, to)
		}
	}
	x.deadLetterRisk(ctx)
	for _, kind := range []string{"queue", "lease"} {
		x.renewed(ctx, kind, nil)
		x.renewed(ctx, kind, errors.New("gone"))
		x.renewalLate(ctx, kind)
	}
	x.sent(ctx, nil)
	x.sent(ctx, errors.New("refused"))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range rm.ScopeMetrics {
		for _, m := range s.Metrics {
			seen[m.Name] = true
			d, ok := doc[m.Name]
			if !ok {
				t.Errorf("%s is recorded but not in docs/metrics.md", m.Name)
				continue
			}
			if m.Unit != d.unit {
				t.Errorf("%s: unit %q, docs/metrics.md says %q", m.Name, m.Unit, d.unit)
			}
			var kind string
			var sets []attribute.Set
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				kind = "counter"
				if !data.IsMonotonic {
					kind = "updown counter"
				}
				for _, p := range data.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Histogram[int64]:
				kind = "histogram"
				for _, p := range data.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				kind = "histogram"
				for _, p := range data.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				kind = "gauge"
				for _, p := range data.DataPoints {
					sets = append(sets, p.Attributes)
				}
			default:
				kind = fmt.Sprintf("%T", data)
			}
			if kind != d.kind {
				t.Errorf("%s: kind %s, docs/metrics.md says %s", m.Name, kind, d.kind)
			}
			got := map[string][]string{}
			for _, set := range sets {
				var keys []string
				for _, kv := range set.ToSlice() {
					keys = append(keys, string(kv.Key))
					if !slices.Contains(got[string(kv.Key)], kv.Value.Emit()) {
						got[string(kv.Key)] = append(got[string(kv.Key)], kv.Value.Emit())
					}
				}
				slices.Sort(keys)
				want := slices.Sorted(slices.Values(d.keys))
				if !slices.Equal(keys, want) {
					t.Errorf("%s: attributes %v, docs/metrics.md says %v", m.Name, keys, want)
				}
			}
			for key, want := range d.values {
				g := slices.Sorted(slices.Values(got[key]))
				if w := slices.Sorted(slices.Values(want)); !slices.Equal(g, w) {
					t.Errorf("%s{%s}: recorded %v, docs/metrics.md lists %v", m.Name, key, g, w)
				}
			}
		}
	}
	for name := range doc {
		if !seen[name] {
			t.Errorf("docs/metrics.md lists %s; nothing recorded it", name)
		}
	}
	for _, name := range []string{MetricFetched, MetricEmitted, MetricDecodeFailed, MetricReceiveLatency, MetricQueueDepth,
		MetricAcks, MetricAckBatchSize, MetricDefers, MetricRenewals, MetricRenewalsLate, MetricSends, MetricDeadLettered, MetricDeadLetterRisk, MetricReleased, MetricMalformed} {
		if _, ok := doc[name]; !ok {
			t.Errorf("constant %s is not in docs/metrics.md", name)
		}
	}
}
