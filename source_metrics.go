package rmqflow

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metric names of the source's safety checks; docs/metrics.md describes each.
const (
	MetricReleased  = "rmqflow.source.released"
	MetricMalformed = "rmqflow.source.malformed"
	// MetricLiteRejoins counts re-joins of idle wildcard lite bindings
	// (SourceConfig.LiteRejoinAfter).
	MetricLiteRejoins = "rmqflow.source.lite_rejoins"
	// MetricLiteDispatchKicks counts the calls of
	// SourceConfig.LiteDispatchKick, by outcome.
	MetricLiteDispatchKicks = "rmqflow.source.lite_dispatch_kicks"
)

// sourceMetrics are the source's own instruments, beside the shared ones.
type sourceMetrics struct {
	releasedC  metric.Int64Counter
	malformedC metric.Int64Counter
	rejoinsC   metric.Int64Counter
	kicksC     metric.Int64Counter
}

func newSourceMetrics(m metric.Meter) *sourceMetrics {
	if m == nil {
		m = noop.NewMeterProvider().Meter("rmqflow")
	}
	x := &sourceMetrics{}
	x.releasedC, _ = m.Int64Counter(MetricReleased, metric.WithUnit(unitMessages), metric.WithDescription("fetched messages the source gave back to the group instead of emitting them, by reason"))
	x.malformedC, _ = m.Int64Counter(MetricMalformed, metric.WithUnit(unitMessages), metric.WithDescription("messages emitted with ErrMalformedMessage (no receipt handle, topic or message id)"))
	x.rejoinsC, _ = m.Int64Counter(MetricLiteRejoins, metric.WithUnit("{rejoin}"), metric.WithDescription("re-joins of wildcard lite groups whose receives came back empty for SourceConfig.LiteRejoinAfter"))
	x.kicksC, _ = m.Int64Counter(MetricLiteDispatchKicks, metric.WithUnit("{request}"), metric.WithDescription("calls of SourceConfig.LiteDispatchKick after a wildcard lite binding joined its group, by outcome"))
	return x
}

func (x *sourceMetrics) released(ctx context.Context, reason string, n int) {
	if n > 0 {
		x.releasedC.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", reason)))
	}
}

func (x *sourceMetrics) malformed(ctx context.Context) { x.malformedC.Add(ctx, 1) }

func (x *sourceMetrics) rejoined(ctx context.Context, b *binding) {
	x.rejoinsC.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", b.topic), attribute.String("group", b.group)))
}

func (x *sourceMetrics) kicked(ctx context.Context, b *binding, ok bool) {
	outcome := "ok"
	if !ok {
		outcome = "failed"
	}
	x.kicksC.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", b.topic), attribute.String("group", b.group), attribute.String("outcome", outcome)))
}
