package rmqflow_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// callbackMeter is a metric.Meter that counts the callbacks registered
// through it and not yet unregistered.
type callbackMeter struct {
	metric.Meter
	live atomic.Int64
}

type countedRegistration struct {
	metric.Registration
	m    *callbackMeter
	done atomic.Bool
}

func (r *countedRegistration) Unregister() error {
	if r.done.CompareAndSwap(false, true) {
		r.m.live.Add(-1)
	}
	return r.Registration.Unregister()
}

func (m *callbackMeter) RegisterCallback(f metric.Callback, insts ...metric.Observable) (metric.Registration, error) {
	reg, err := m.Meter.RegisterCallback(f, insts...)
	if err != nil {
		return nil, err
	}
	m.live.Add(1)
	return &countedRegistration{Registration: reg, m: m}, nil
}

// TestSourceCloseUnregistersMetrics (issue 24, point 4): NewSource registers
// the queue-depth callback with the Connection's Meter; Close unregisters
// it, whether the source ran or never started, so a process that opens and
// closes sources does not keep every closed source (and its queue) alive
// through the meter, nor report their depth for ever. Before the fix the 4
// sources below left 4 callbacks registered and the closed sources' depth
// was still collected.
func TestSourceCloseUnregistersMetrics(t *testing.T) {
	fake := fakeLite(t)
	reader := sdkmetric.NewManualReader()
	meter := &callbackMeter{Meter: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")}
	ctx := rmqtest.Context(t, 30*time.Second)
	cfg := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: fake.Addr(), Meter: meter},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second}
	var srcs []*rmqflow.Source[string]
	for i := range 4 {
		src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // two run, two never start
			if err := src.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		srcs = append(srcs, src)
	}
	if n := meter.live.Load(); n != 4 {
		t.Fatalf("%d callbacks registered by 4 sources, want 4", n)
	}
	if n := depthPoints(t, reader); n == 0 {
		t.Fatalf("no %s data point while the sources are open", rmqflow.MetricQueueDepth)
	}
	for _, src := range srcs {
		if err := src.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := meter.live.Load(); n != 0 {
		t.Errorf("%d callbacks still registered after every source closed, want 0", n)
	}
	if n := depthPoints(t, reader); n != 0 {
		t.Errorf("%d %s data points collected after every source closed, want 0", n, rmqflow.MetricQueueDepth)
	}
}

// depthPoints collects reader and counts the queue-depth data points.
func depthPoints(t *testing.T, reader *sdkmetric.ManualReader) int {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range rm.ScopeMetrics {
		for _, m := range s.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == rmqflow.MetricQueueDepth {
				n += len(g.DataPoints)
			}
		}
	}
	return n
}
