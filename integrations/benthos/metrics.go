package rmqbenthos

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/rmqflow/rmqflow"
)

// Benthos metrics of the input: rmqflow's give-up counters
// (docs/metrics.md), in the stream's own metrics.
const (
	// MetricDeadLettered counts the messages the input gave up on once a
	// safety valve fired, with the labels valve (max-delivery-attempt,
	// max-defers, max-deferred-age) and to: broker-dlq (moved to the group's
	// dead-letter queue, the default), topic (parked in dead_letter.topic),
	// topic-failed (the write to dead_letter.topic failed: the message comes
	// back, and after 3 such failures goes to the group's dead-letter queue,
	// counted again there), left (not acked: it comes back) or dropped
	// (acked, dead_letter.drop).
	MetricDeadLettered = "rocketmq_dead_lettered"
	// MetricDeadLetterRisk counts the messages held back behind an earlier
	// message of their lite topic after the deliveries their group allows:
	// the broker may move them to its dead-letter queue although they did
	// not fail (see max_messages).
	MetricDeadLetterRisk = "rocketmq_dead_letter_risk"
)

// benthosMeter is the input's rmqflow.Connection.Meter: it records rmqflow's
// give-up counters as the Benthos metrics above; every other instrument is
// a no-op (Benthos counts what its inputs read and its outputs send itself).
type benthosMeter struct {
	noop.Meter
	dead, risk *service.MetricCounter
}

func newBenthosMeter(m *service.Metrics) *benthosMeter {
	return &benthosMeter{dead: m.NewCounter(MetricDeadLettered, "valve", "to"), risk: m.NewCounter(MetricDeadLetterRisk)}
}

func (m *benthosMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	switch name {
	case rmqflow.MetricDeadLettered:
		return benthosCounter{c: m.dead, keys: []attribute.Key{"valve", "to"}}, nil
	case rmqflow.MetricDeadLetterRisk:
		return benthosCounter{c: m.risk}, nil
	}
	return m.Meter.Int64Counter(name, opts...)
}

// benthosCounter adds to a Benthos counter whose label values are the
// attributes keys of each increment.
type benthosCounter struct {
	noop.Int64Counter
	c    *service.MetricCounter
	keys []attribute.Key
}

func (c benthosCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	attrs := metric.NewAddConfig(opts).Attributes()
	values := make([]string, len(c.keys))
	for i, k := range c.keys {
		if v, ok := attrs.Value(k); ok {
			values[i] = v.Emit()
		}
		if k == "to" {
			// The input's only dead-letter function parks in dead_letter.topic.
			switch values[i] {
			case "function":
				values[i] = "topic"
			case "function-failed":
				values[i] = "topic-failed"
			}
		}
	}
	c.c.Incr(n, values...)
}
