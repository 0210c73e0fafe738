package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/rmqflow/rmqflow"
)

// counts is what the consumer's source did, for the status line a stalled
// run leaves in its stderr: every ReceiveMessage (empty or not), the
// messages they brought, those handed to the Runner, and the ack results.
type counts struct {
	receives, fetched, emitted, acksOK, acksOther atomic.Int64
}

// status prints one line of counts every period until ctx ends.
func (c *counts) status(ctx context.Context, w io.Writer, period time.Duration, handled *atomic.Int64) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fmt.Fprintf(w, "child: status handled=%d receives=%d fetched=%d emitted=%d acks_ok=%d acks_other=%d\n",
			handled.Load(), c.receives.Load(), c.fetched.Load(), c.emitted.Load(), c.acksOK.Load(), c.acksOther.Load())
	}
}

// countingMeter hands rmqflow counters that feed counts; everything else is
// a no-op.
type countingMeter struct {
	noop.Meter
	c *counts
}

func (m countingMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	if name == rmqflow.MetricReceiveLatency {
		return histCount{n: &m.c.receives}, nil
	}
	return m.Meter.Float64Histogram(name, opts...)
}

func (m countingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	switch name {
	case rmqflow.MetricFetched:
		return counter{n: &m.c.fetched}, nil
	case rmqflow.MetricEmitted:
		return counter{n: &m.c.emitted}, nil
	case rmqflow.MetricAcks:
		return ackCounter{c: m.c}, nil
	}
	return m.Meter.Int64Counter(name, opts...)
}

type histCount struct {
	noop.Float64Histogram
	n *atomic.Int64
}

func (h histCount) Record(context.Context, float64, ...metric.RecordOption) { h.n.Add(1) }

type counter struct {
	noop.Int64Counter
	n *atomic.Int64
}

func (c counter) Add(_ context.Context, v int64, _ ...metric.AddOption) { c.n.Add(v) }

type ackCounter struct {
	noop.Int64Counter
	c *counts
}

func (a ackCounter) Add(_ context.Context, v int64, opts ...metric.AddOption) {
	cfg := metric.NewAddConfig(opts)
	attrs := cfg.Attributes()
	if o, ok := attrs.Value(attribute.Key("outcome")); ok && o.AsString() == "ok" {
		a.c.acksOK.Add(v)
		return
	}
	a.c.acksOther.Add(v)
}
