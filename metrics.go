package rmqflow

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metric names; docs/metrics.md describes each.
const (
	MetricFetched        = "rmqflow.source.fetched"
	MetricEmitted        = "rmqflow.source.emitted"
	MetricDecodeFailed   = "rmqflow.source.decode_failed"
	MetricReceiveLatency = "rmqflow.source.receive.duration"
	MetricQueueDepth     = "rmqflow.source.queue.depth"
	MetricAcks           = "rmqflow.ack.results"
	MetricAckBatchSize   = "rmqflow.ack.batch.size"
	MetricDefers         = "rmqflow.throttle.defers"
	MetricRenewals       = "rmqflow.renewals"
	MetricRenewalsLate   = "rmqflow.renewals.late"
	MetricSends          = "rmqflow.sink.sends"
	MetricDeadLettered   = "rmqflow.runner.dead_lettered"
	MetricDeadLetterRisk = "rmqflow.runner.dead_letter_risk"
)

// unitMessages is the unit of every instrument that counts messages (UCUM
// annotation syntax, as OpenTelemetry's conventions use).
const unitMessages = "{message}"

type metrics struct {
	fetchedC   metric.Int64Counter
	emittedC   metric.Int64Counter
	decodeC    metric.Int64Counter
	receiveH   metric.Float64Histogram
	acksC      metric.Int64Counter
	ackBatchH  metric.Int64Histogram
	defersC    metric.Int64Counter
	renewalsC  metric.Int64Counter
	lateC      metric.Int64Counter
	sendsC     metric.Int64Counter
	deadC      metric.Int64Counter
	riskC      metric.Int64Counter
	queueGauge metric.Int64ObservableGauge
	meter      metric.Meter
}

func newMetrics(m metric.Meter) *metrics {
	if m == nil {
		m = noop.NewMeterProvider().Meter("rmqflow")
	}
	x := &metrics{meter: m}
	// Instrument creation only fails for invalid names, which these are not;
	// a failed instrument is a no-op one.
	x.fetchedC, _ = m.Int64Counter(MetricFetched, metric.WithUnit(unitMessages), metric.WithDescription("messages received from the broker"))
	x.emittedC, _ = m.Int64Counter(MetricEmitted, metric.WithUnit(unitMessages), metric.WithDescription("messages handed out by Next"))
	x.decodeC, _ = m.Int64Counter(MetricDecodeFailed, metric.WithUnit(unitMessages), metric.WithDescription("messages whose body did not decode"))
	x.receiveH, _ = m.Float64Histogram(MetricReceiveLatency, metric.WithUnit("s"), metric.WithDescription("ReceiveMessage call duration, long polling included"))
	x.acksC, _ = m.Int64Counter(MetricAcks, metric.WithUnit("{ack}"), metric.WithDescription("ack results by outcome: ok, invalid_handle, failed"))
	x.ackBatchH, _ = m.Int64Histogram(MetricAckBatchSize, metric.WithUnit("{entry}"), metric.WithDescription("entries per AckMessage RPC"))
	x.defersC, _ = m.Int64Counter(MetricDefers, metric.WithUnit(unitMessages), metric.WithDescription("messages deferred by a throttle"))
	x.renewalsC, _ = m.Int64Counter(MetricRenewals, metric.WithUnit("{renewal}"), metric.WithDescription("invisibility renewals by kind (queue, lease) and outcome"))
	x.lateC, _ = m.Int64Counter(MetricRenewalsLate, metric.WithUnit("{renewal}"), metric.WithDescription("renewals answered after the invisibility they were to extend had ended (they overran RenewalAheadTime), by kind (queue, lease)"))
	x.sendsC, _ = m.Int64Counter(MetricSends, metric.WithUnit(unitMessages), metric.WithDescription("messages sent by sinks, by outcome"))
	x.deadC, _ = m.Int64Counter(MetricDeadLettered, metric.WithUnit(unitMessages), metric.WithDescription("messages a runner gave up on, by the safety valve that fired and where they went (function-failed: a failed dead-letter function, the message comes back)"))
	x.riskC, _ = m.Int64Counter(MetricDeadLetterRisk, metric.WithUnit(unitMessages), metric.WithDescription("messages a runner held back behind their lite topic's head after the deliveries their group allows: the broker may dead-letter them"))
	return x
}

// observeQueue registers the queue-depth gauge for a source and returns
// what unregisters it (the source's Close): a registered callback keeps the
// source reachable from the meter and reported for as long as the meter
// lives.
func (x *metrics) observeQueue(depth func() int) (unregister func()) {
	g, err := x.meter.Int64ObservableGauge(MetricQueueDepth, metric.WithUnit(unitMessages), metric.WithDescription("messages fetched but not yet emitted"))
	if err != nil {
		return func() {}
	}
	x.queueGauge = g
	reg, err := x.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, int64(depth()))
		return nil
	}, g)
	if err != nil || reg == nil {
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { _ = reg.Unregister() }) }
}

func (x *metrics) fetched(ctx context.Context, n int, b *binding) {
	if n > 0 {
		x.fetchedC.Add(ctx, int64(n), metric.WithAttributes(attribute.String("topic", b.topic), attribute.String("group", b.group)))
	}
}

func (x *metrics) emitted(ctx context.Context)      { x.emittedC.Add(ctx, 1) }
func (x *metrics) decodeFailed(ctx context.Context) { x.decodeC.Add(ctx, 1) }

func (x *metrics) receiveLatency(ctx context.Context, d time.Duration) {
	x.receiveH.Record(ctx, d.Seconds())
}

func (x *metrics) ackBatch(ctx context.Context, n int) { x.ackBatchH.Record(ctx, int64(n)) }

func (x *metrics) acked(ctx context.Context, err error) {
	x.acksC.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", ackOutcome(err))))
}

func ackOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, client.ErrInvalidReceiptHandle):
		return "invalid_handle"
	default:
		return "failed"
	}
}

func (x *metrics) deferred(ctx context.Context, reason string) {
	x.defersC.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
}

func (x *metrics) renewed(ctx context.Context, kind string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	x.renewalsC.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind), attribute.String("outcome", outcome)))
}

func (x *metrics) renewalLate(ctx context.Context, kind string) {
	x.lateC.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
}

func (x *metrics) sent(ctx context.Context, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	x.sendsC.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

func (x *metrics) deadLettered(ctx context.Context, valve, to string) {
	x.deadC.Add(ctx, 1, metric.WithAttributes(attribute.String("valve", valve), attribute.String("to", to)))
}

func (x *metrics) deadLetterRisk(ctx context.Context) {
	x.riskC.Add(ctx, 1)
}
