package rmqkuiper

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/lf-edge/ekuiper/contract/v2/api"
	"github.com/lf-edge/ekuiper/v2/pkg/cast"
	"github.com/lf-edge/ekuiper/v2/pkg/modules"
)

// ackSink is the eKuiper sink "rocketmq_ack". Alone, it only acks: each
// call acks the rule's messages up to the highest rocketmq_seq of its rows.
// With "after": {"<sink>": {<that sink's properties>}} it wraps that sink
// (any registered sink: rest, mqtt, log, ...), hands it the rows first
// (without rocketmq_seq, __meta and rocketmq_* fields), and acks only when it
// succeeded. eKuiper runs a rule's actions side by side, each on its own
// goroutine and channel, so a separate rocketmq_ack action could ack before
// another action delivered: wrap the real output instead.
type ackSink struct {
	inner api.Sink
	kind  string

	mu   sync.Mutex
	ack  *ackPart
	errc error
}

// NewAckSink returns a new "rocketmq_ack" sink (modules.RegisterSink).
func NewAckSink() api.Sink { return &ackSink{} }

func (a *ackSink) Provision(ctx api.StreamContext, configs map[string]any) error {
	p := newProps(configs)
	ackingActionKeys(p)
	if p.err != nil {
		return p.err
	}
	if after, ok := p.get("after"); ok {
		m, isMap := after.(map[string]any)
		if !isMap || len(m) != 1 {
			return &ConfError{Key: "after", Reason: `want one sink, as {"rest": {...}}`}
		}
		for kind, v := range m {
			props, isObj := v.(map[string]any)
			if !isObj {
				return &ConfError{Key: "after." + kind, Reason: "want an object of the sink's properties"}
			}
			if err := wrappedSinkSafe(kind, props); err != nil {
				return err
			}
			newSink, known := modules.Sinks[kind]
			if !known {
				return &ConfError{Key: "after", Reason: fmt.Sprintf("no sink %q is registered", kind)}
			}
			inner := newSink()
			switch inner.(type) {
			case api.TupleCollector, api.BytesCollector:
			default:
				return &ConfError{Key: "after", Reason: fmt.Sprintf("sink %q collects neither tuples nor bytes", kind)}
			}
			if err := inner.Provision(ctx, props); err != nil {
				return fmt.Errorf("rocketmq_ack: after.%s: %w", kind, err)
			}
			a.inner, a.kind = inner, kind
		}
	}
	if unknown := p.unknown(commonSinkKeys); len(unknown) > 0 {
		ctx.GetLogger().Warnf("rocketmq_ack sink: unknown configuration keys %v (ignored)", unknown)
	}
	return nil
}

func (a *ackSink) Connect(ctx api.StreamContext, sch api.StatusChangeHandler) error {
	if a.inner != nil {
		if err := a.inner.Connect(ctx, sch); err != nil {
			err = fmt.Errorf("rocketmq_ack: after.%s: %w", a.kind, err)
			a.mu.Lock()
			a.errc = err
			a.mu.Unlock()
			return err
		}
	} else {
		sch(api.ConnectionConnected, "")
	}
	a.mu.Lock()
	a.ack = joinLedger(ctx)
	a.mu.Unlock()
	return nil
}

func (a *ackSink) Collect(ctx api.StreamContext, item api.MessageTuple) error {
	return a.deliver(ctx, []map[string]any{item.ToMap()})
}

func (a *ackSink) CollectList(ctx api.StreamContext, items api.MessageTupleList) error {
	return a.deliver(ctx, items.ToMaps())
}

// deliver hands the rows to the wrapped sink, if any, and settles them.
func (a *ackSink) deliver(ctx api.StreamContext, rows []map[string]any) error {
	a.mu.Lock()
	ack, cerr := a.ack, a.errc
	a.mu.Unlock()
	if ack == nil {
		if cerr != nil {
			return fmt.Errorf("rocketmq_ack: not connected: %w", cerr)
		}
		return errors.New("rocketmq_ack: not connected")
	}
	clean := make([]map[string]any, len(rows))
	for i, r := range rows {
		clean[i] = stripReserved(r)
	}
	var err error
	switch in := a.inner.(type) {
	case nil:
	case api.TupleCollector:
		if len(clean) == 1 {
			err = in.Collect(ctx, mapTuple(clean[0]))
		} else {
			err = in.CollectList(ctx, mapTuples(clean))
		}
	case api.BytesCollector:
		var b []byte
		if len(clean) == 1 {
			b, err = json.Marshal(clean[0])
		} else {
			b, err = json.Marshal(clean)
		}
		if err == nil {
			err = in.Collect(ctx, &rawTuple{b: b})
		}
	}
	if err != nil {
		err = fmt.Errorf("rocketmq_ack: after.%s: %w", a.kind, err)
	}
	return ack.settle(ctx, rows, err)
}

func (a *ackSink) Close(ctx api.StreamContext) error {
	a.mu.Lock()
	ack := a.ack
	a.ack = nil
	a.mu.Unlock()
	ack.close()
	if a.inner != nil {
		return a.inner.Close(ctx)
	}
	return nil
}

// wrappedSinkSafe refuses a sink wrapped by rocketmq_ack ("after") whose
// Collect returns before its rows are durable or delivered: the ack would
// follow a write that can still be lost. file buffers rows until its roll
// (rollingInterval, rollingCount) or close; mqtt at qos 0, its default,
// publishes without waiting for the MQTT broker. (The qos is read as the
// mqtt sink reads it.) rocketmq and rocketmq_ack ack by themselves.
func wrappedSinkSafe(kind string, props map[string]any) error {
	switch kind {
	case "rocketmq", "rocketmq_ack":
		return &ConfError{Key: "after", Reason: kind + " acks by itself: use it as its own action"}
	case "file":
		return &ConfError{Key: "after.file", Reason: "the file sink buffers rows until it rolls the file or closes, so its rows would be acked before they are written: not safe to ack after"}
	case "mqtt":
		var c struct {
			Qos byte `json:"qos"`
		}
		if err := cast.MapToStruct(props, &c); err != nil {
			return &ConfError{Key: "after.mqtt.qos", Reason: fmt.Sprintf("want 1 or 2: %v", err)}
		}
		if c.Qos == 0 {
			return &ConfError{Key: "after.mqtt.qos", Reason: `at qos 0 (the mqtt sink's default) a publish is not confirmed by the MQTT broker, so its rows would be acked unsent: set "qos": 1 or 2`}
		}
	}
	return nil
}

// rawTuple is the JSON handed to a wrapped bytes sink.
type rawTuple struct{ b []byte }

func (r *rawTuple) Raw() []byte      { return r.b }
func (r *rawTuple) Replace(b []byte) { r.b = b }

// mapTuple is one row handed to a wrapped tuple sink.
type mapTuple map[string]any

func (t mapTuple) Value(key, _ string) (any, bool) { v, ok := t[key]; return v, ok }
func (t mapTuple) ToMap() map[string]any           { return t }

// mapTuples is the rows of one call handed to a wrapped tuple sink.
type mapTuples []map[string]any

func (l mapTuples) Len() int                 { return len(l) }
func (l mapTuples) ToMaps() []map[string]any { return l }
func (l mapTuples) RangeOfTuples(f func(int, api.MessageTuple) bool) {
	for i, m := range l {
		if !f(i, mapTuple(m)) {
			return
		}
	}
}
