package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
)

// meter is the OpenTelemetry meter the peer hands to rmqflow
// (Connection.Meter) to observe what the library does not return to its
// caller: every ReceiveMessage records rmqflow.source.receive.duration once,
// and a non-empty one adds its messages to rmqflow.source.fetched right
// after; every acked entry adds one to rmqflow.ack.results with its outcome.
// Everything else is a no-op.
type meter struct {
	noop.Meter
	t     *peerkit.Tracker
	acked func(ok bool) // nil: ack results are not needed

	defers sync.Map // reason -> *atomic.Int64: rmqflow.throttle.defers, for the log
}

// deferrals returns the deferrals counted so far by reason, for stderr.
func (m *meter) deferrals() string {
	var b strings.Builder
	m.defers.Range(func(k, v any) bool {
		fmt.Fprintf(&b, " %s=%d", k, v.(*atomic.Int64).Load())
		return true
	})
	if b.Len() == 0 {
		return " none"
	}
	return b.String()
}

func (m *meter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	if name == rmqflow.MetricReceiveLatency {
		return receives{t: m.t}, nil
	}
	return m.Meter.Float64Histogram(name, opts...)
}

func (m *meter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	switch name {
	case rmqflow.MetricFetched:
		return fetched{t: m.t}, nil
	case rmqflow.MetricAcks:
		if m.acked != nil {
			return ackResults{f: m.acked}, nil
		}
	case rmqflow.MetricDefers:
		return deferCounter{m: m}, nil
	}
	return m.Meter.Int64Counter(name, opts...)
}

// receives counts each ReceiveMessage as an empty one until fetched says
// otherwise.
type receives struct {
	noop.Float64Histogram
	t *peerkit.Tracker
}

func (r receives) Record(context.Context, float64, ...metric.RecordOption) { r.t.AddReceives(1, 1) }

type fetched struct {
	noop.Int64Counter
	t *peerkit.Tracker
}

func (f fetched) Add(_ context.Context, n int64, _ ...metric.AddOption) {
	if n > 0 {
		f.t.AddReceives(0, -1)
		f.t.Arrived()
	}
}

type deferCounter struct {
	noop.Int64Counter
	m *meter
}

func (d deferCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	set := metric.NewAddConfig(opts).Attributes()
	v, _ := set.Value("reason")
	c, _ := d.m.defers.LoadOrStore(v.AsString(), new(atomic.Int64))
	c.(*atomic.Int64).Add(n)
}

type ackResults struct {
	noop.Int64Counter
	f func(ok bool)
}

func (a ackResults) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	set := metric.NewAddConfig(opts).Attributes()
	v, _ := set.Value("outcome")
	for ; n > 0; n-- {
		a.f(v.AsString() == "ok")
	}
}

// fifo attributes ack results to messages: the Runner acks a message after
// its handler returns Ack() and tells no one when the ack returns, so the
// peer queues each message as its handler returns and takes the oldest off
// at each ack result. The ack pool batches one (group, topic)'s acks in the
// order they were queued, with a few RPCs on the wire at once, so the
// attribution can swap messages among the acks in flight (their latencies by
// a few ms), never the count.
type fifo struct {
	mu sync.Mutex
	q  []peerkit.Delivery
	h  int
}

func (q *fifo) push(d peerkit.Delivery) {
	q.mu.Lock()
	q.q = append(q.q, d)
	q.mu.Unlock()
}

func (q *fifo) pop() (peerkit.Delivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.h == len(q.q) {
		return peerkit.Delivery{}, false
	}
	d := q.q[q.h]
	q.q[q.h] = peerkit.Delivery{}
	q.h++
	if q.h > 1024 && q.h*2 > len(q.q) {
		q.q = append(q.q[:0], q.q[q.h:]...)
		q.h = 0
	}
	return d, true
}
