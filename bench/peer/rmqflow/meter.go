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
// after; every acked entry adds one to rmqflow.ack.results with its outcome;
// every renewal of a queued message adds one to rmqflow.renewals.
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
	case rmqflow.MetricRenewals:
		return renewals{t: m.t}, nil
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

// renewals counts the Source's own renewals of queued messages (kind
// "queue": ChangeInvisibleDuration RPCs sent on the Source's connection, not
// through the ack pool, so not in AckPoolStats.ChangeInvisible; the lease
// renewals, kind "lease", are).
type renewals struct {
	noop.Int64Counter
	t *peerkit.Tracker
}

func (r renewals) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	set := metric.NewAddConfig(opts).Attributes()
	if v, _ := set.Value("kind"); v.AsString() == "queue" {
		for ; n > 0; n-- {
			r.t.ChangeRPC()
		}
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
// its handler returns Ack() and tells no one when the ack returns, and the
// rmqflow.ack.results metric carries the outcome only (no message id), so
// the peer queues each message as its handler returns and credits each
// successful ack result to the oldest queued message not credited yet. A
// failed result credits nothing: the message whose ack failed stays
// uncredited (wherever it is in the queue) and comes back (redelivered), and
// its next successful ack credits one more. So the count of distinct
// messages credited is exact (each successful ack credits one uncredited
// message, and the message it belongs to is queued and uncredited unless it
// was credited already), and no message is lost; what can be wrong is which
// message an ack is credited to among those whose acks are in flight or
// failed, so a latency sample can belong to another message. A message
// acked successfully twice (redelivered after a successful ack) credits no
// message on its second ack only when none is left uncredited; otherwise it
// may credit a message whose own ack is still in flight a little early.
type fifo struct {
	mu       sync.Mutex
	q        []peerkit.Delivery
	h        int
	credited map[string]struct{}
}

func (q *fifo) push(d peerkit.Delivery) {
	q.mu.Lock()
	q.q = append(q.q, d)
	q.mu.Unlock()
}

// result attributes one ack result: ok, the oldest queued message not
// credited yet, now credited (found false when there is none); failed,
// nothing.
func (q *fifo) result(ok bool) (peerkit.Delivery, bool) {
	if !ok {
		return peerkit.Delivery{}, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.credited == nil {
		q.credited = map[string]struct{}{}
	}
	for q.h < len(q.q) {
		d := q.q[q.h]
		q.q[q.h] = peerkit.Delivery{}
		q.h++
		if q.h > 1024 && q.h*2 > len(q.q) {
			q.q = append(q.q[:0], q.q[q.h:]...)
			q.h = 0
		}
		if _, done := q.credited[d.ID]; done {
			continue // a copy of a message credited already
		}
		q.credited[d.ID] = struct{}{}
		return d, true
	}
	return peerkit.Delivery{}, false
}
