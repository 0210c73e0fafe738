package rmqkuiper

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/lf-edge/ekuiper/contract/v2/api"
	"github.com/lf-edge/ekuiper/v2/pkg/modules"

	"github.com/rmqflow/rmqflow"
)

// ackSink is the eKuiper sink "rocketmq_ack". Alone, it only acks: each
// call acks the rule's messages up to the highest rocketmq_seq of its rows.
// With "after": {"<sink>": {<that sink's properties>}} it wraps that sink
// (any registered sink: rest, mqtt, log, ...), hands it the rows first, and
// acks only when it succeeded: eKuiper runs a rule's actions side by side
// with no order between them, so a separate rocketmq_ack action could ack
// before the other action delivered.
type ackSink struct {
	mu    sync.Mutex
	inner api.Sink
	kind  string
	props map[string]any
	led   *ledger
	name  string
}

// NewAckSink returns a new "rocketmq_ack" sink (modules.RegisterSink).
func NewAckSink() api.Sink { return &ackSink{} }

func (a *ackSink) Provision(ctx api.StreamContext, configs map[string]any) error {
	p := newProps(configs)
	after, ok := p.get("after")
	if ok {
		m, isMap := after.(map[string]any)
		if !isMap || len(m) != 1 {
			return &ConfError{Key: "after", Reason: `want one sink, as {"rest": {...}}`}
		}
		for kind, v := range m {
			props, _ := v.(map[string]any)
			if props == nil && v != nil {
				return &ConfError{Key: "after." + kind, Reason: "want an object of the sink's properties"}
			}
			newSink, known := modules.Sinks[kind]
			if !known {
				return &ConfError{Key: "after", Reason: fmt.Sprintf("no sink %q is registered", kind)}
			}
			if kind == "rocketmq" || kind == "rocketmq_ack" {
				return &ConfError{Key: "after", Reason: kind + " acks by itself: use it as its own action"}
			}
			a.inner, a.kind, a.props = newSink(), kind, props
		}
		if err := a.inner.Provision(ctx, a.props); err != nil {
			return fmt.Errorf("rocketmq_ack: after.%s: %w", a.kind, err)
		}
	}
	if unknown := p.unknown(commonSinkKeys); len(unknown) > 0 {
		ctx.GetLogger().Warnf("rocketmq_ack sink: unknown configuration keys %v (ignored)", unknown)
	}
	if a.inner != nil {
		switch a.inner.(type) {
		case api.TupleCollector, api.BytesCollector:
		default:
			return &ConfError{Key: "after", Reason: fmt.Sprintf("sink %q collects neither tuples nor bytes", a.kind)}
		}
	}
	return nil
}

func (a *ackSink) Connect(ctx api.StreamContext, sch api.StatusChangeHandler) error {
	if a.inner != nil {
		if c, ok := a.inner.(api.Connector); ok {
			if err := c.Connect(ctx, sch); err != nil {
				return fmt.Errorf("rocketmq_ack: after.%s: %w", a.kind, err)
			}
		} else {
			sch(api.ConnectionConnected, "")
		}
	} else {
		sch(api.ConnectionConnected, "")
	}
	a.mu.Lock()
	a.name = sinkName(ctx)
	a.led = ledgerOf(ctx.GetRuleId())
	a.led.join(a.name)
	a.mu.Unlock()
	return nil
}

func (a *ackSink) Collect(ctx api.StreamContext, item api.MessageTuple) error {
	rows := []map[string]any{item.ToMap()}
	if tc, ok := a.inner.(api.TupleCollector); ok {
		return a.settle(ctx, rows, tc.Collect(ctx, item))
	}
	return a.settle(ctx, rows, a.collectBytes(ctx, rows))
}

func (a *ackSink) CollectList(ctx api.StreamContext, items api.MessageTupleList) error {
	rows := items.ToMaps()
	if tc, ok := a.inner.(api.TupleCollector); ok {
		return a.settle(ctx, rows, tc.CollectList(ctx, items))
	}
	return a.settle(ctx, rows, a.collectBytes(ctx, rows))
}

// collectBytes hands a bytes sink the rows as JSON (one object per row, a
// list for several), without the reserved keys.
func (a *ackSink) collectBytes(ctx api.StreamContext, rows []map[string]any) error {
	bc, ok := a.inner.(api.BytesCollector)
	if !ok {
		return nil // no inner sink: only ack
	}
	clean := make([]map[string]any, len(rows))
	for i, r := range rows {
		clean[i] = stripReserved(r)
	}
	var b []byte
	var err error
	if len(clean) == 1 {
		b, err = json.Marshal(clean[0])
	} else {
		b, err = json.Marshal(clean)
	}
	if err != nil {
		return fmt.Errorf("rocketmq_ack: encoding rows: %w", err)
	}
	return bc.Collect(ctx, &rawTuple{b: b})
}

// settle acks the rows' messages after a success and gives them back after a
// failure, and returns the inner sink's error.
func (a *ackSink) settle(ctx api.StreamContext, rows []map[string]any, failure error) error {
	var seqs []int64
	for _, r := range rows {
		if s, ok := rowSeq(r); ok {
			seqs = append(seqs, s)
		}
	}
	if len(seqs) == 0 {
		if failure == nil && len(rows) > 0 {
			return errors.New("rocketmq_ack: the rows carry no rocketmq_seq: select it (meta(rocketmq_seq) AS rocketmq_seq, or max(...) in a window) or set the rule option sendMetaToSink")
		}
		return failure
	}
	if failure != nil {
		_ = a.led.failed(ctx, seqs)
		return failure
	}
	return a.led.delivered(ctx, a.name, slicesMax(seqs))
}

func stripReserved(row map[string]any) map[string]any {
	out := make(map[string]any, len(row))
	for f, v := range row {
		if f == metaKey || f == MetaSeq || strings.HasPrefix(f, rmqflow.AttrPrefix) {
			continue
		}
		out[f] = v
	}
	return out
}

// rawTuple is the bytes handed to a wrapped bytes sink.
type rawTuple struct{ b []byte }

func (r *rawTuple) Raw() []byte        { return r.b }
func (r *rawTuple) Replace(b []byte)   { r.b = b }

func (a *ackSink) Close(ctx api.StreamContext) error {
	a.mu.Lock()
	led, name := a.led, a.name
	a.led = nil
	a.mu.Unlock()
	if led != nil {
		led.leave(name)
	}
	if a.inner != nil {
		return a.inner.Close(ctx)
	}
	return nil
}
