package rmqkuiper

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/lf-edge/ekuiper/contract/v2/api"

	"github.com/rmqflow/rmqflow"
)

// metaKey is where eKuiper puts a row's meta when the rule option
// sendMetaToSink is on.
const metaKey = "__meta"

// commonSinkKeys are the action keys eKuiper itself reads (or passes to
// every sink).
var commonSinkKeys = map[string]bool{"bufferLength": true, "concurrency": true, "omitIfEmpty": true,
	"sendSingle": true, "dataTemplate": true, "format": true, "schemaId": true, "delimiter": true, "fields": true,
	"excludeFields": true, "dataField": true, "enableCache": true, "memoryCacheThreshold": true,
	"maxDiskCache": true, "bufferPageSize": true, "resendInterval": true, "cleanCacheAtStop": true,
	"resendAlterQueue": true, "resendPriority": true, "resendIndicatorField": true, "resendDestination": true,
	"batchSize": true, "lingerInterval": true, "compression": true, "encryption": true, "hasHeader": true,
	"runAsync": true, "resourceId": true, "header": true}

// sinkConf is the rocketmq sink's configuration.
type sinkConf struct {
	sink rmqflow.SinkConfig
	// Where each record's parts come from: a fixed value or a row field.
	liteTopic, liteTopicField   string
	tag, tagField               string
	keysField, groupField       string
	propertyFields              []string
	ack                         bool
}

func parseSink(m map[string]any) (sinkConf, []string, error) {
	p := newProps(m)
	c := sinkConf{sink: rmqflow.SinkConfig{Connection: p.connection(), Topic: p.required("topic"),
		MaxAttempts: p.integer("max-attempts"), Concurrency: p.integer("send-concurrency"),
		BatchSize: p.integer("send-batch-size"), Linger: p.duration("send-linger")}}
	c.liteTopic, c.liteTopicField = p.str("lite-topic"), p.str("lite-topic-field")
	c.tag, c.tagField = p.str("tag"), p.str("tag-field")
	c.keysField, c.groupField = p.str("keys-field"), p.str("message-group-field")
	c.propertyFields = p.strings("property-fields")
	c.ack = true
	if _, set := p.m["ack"]; set {
		c.ack = p.boolean("ack")
	}
	if c.liteTopic != "" && c.liteTopicField != "" {
		p.fail("lite-topic-field", "lite-topic and lite-topic-field exclude each other")
	}
	if p.err != nil {
		return c, nil, p.err
	}
	if err := c.sink.Validate(); err != nil {
		return c, nil, fmt.Errorf("rocketmq: %w", err)
	}
	return c, p.unknown(commonSinkKeys), nil
}

// sink is the eKuiper sink "rocketmq": each row becomes a message (its
// fields as a JSON object, without the reserved keys), and once a call's
// messages are stored the rule's messages up to the highest rocketmq_seq
// among its rows are acked.
type sink struct {
	conf sinkConf

	mu   sync.Mutex
	s    *rmqflow.Sink
	led  *ledger
	name string
}

// NewSink returns a new "rocketmq" sink (modules.RegisterSink).
func NewSink() api.Sink { return &sink{} }

func (k *sink) Provision(ctx api.StreamContext, configs map[string]any) error {
	c, unknown, err := parseSink(configs)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		ctx.GetLogger().Warnf("rocketmq sink: unknown configuration keys %v (ignored)", unknown)
	}
	k.conf = c
	return nil
}

func (k *sink) Connect(ctx api.StreamContext, sch api.StatusChangeHandler) error {
	sch(api.ConnectionConnecting, "")
	s, err := rmqflow.NewSink(ctx, k.conf.sink)
	if err != nil {
		sch(api.ConnectionDisconnected, err.Error())
		return err
	}
	k.mu.Lock()
	k.s = s
	if k.conf.ack {
		k.name = sinkName(ctx)
		k.led = ledgerOf(ctx.GetRuleId())
		k.led.join(k.name)
	}
	k.mu.Unlock()
	sch(api.ConnectionConnected, "")
	return nil
}

// sinkName names an acking sink within its rule.
func sinkName(ctx api.StreamContext) string {
	return ctx.GetOpId() + "/" + strconv.Itoa(ctx.GetInstanceId())
}

func (k *sink) Collect(ctx api.StreamContext, item api.MessageTuple) error {
	return k.write(ctx, []map[string]any{item.ToMap()})
}

func (k *sink) CollectList(ctx api.StreamContext, items api.MessageTupleList) error {
	return k.write(ctx, items.ToMaps())
}

// write sends rows as one call and settles them: on success the rule's
// ledger acks up to their highest seq; on failure their messages go back
// to the group at once and the error fails the call.
func (k *sink) write(ctx api.StreamContext, rows []map[string]any) error {
	seqs := make([]int64, 0, len(rows))
	for _, row := range rows {
		if seq, ok := rowSeq(row); ok {
			seqs = append(seqs, seq)
		}
	}
	recs := make([]rmqflow.Record, 0, len(rows))
	for _, row := range rows {
		rec, err := k.record(row)
		if err != nil {
			k.settle(ctx, seqs, err)
			return err
		}
		recs = append(recs, rec)
	}
	_, errs := k.s.Send(ctx, recs...)
	for i, err := range errs {
		if err != nil {
			err = fmt.Errorf("rocketmq sink: row %d of %d: %w", i+1, len(recs), err)
			k.settle(ctx, seqs, err)
			return err
		}
	}
	k.settle(ctx, seqs, nil)
	return nil
}

// settle tells the rule's ledger how the rows of seqs went.
func (k *sink) settle(ctx context.Context, seqs []int64, failure error) {
	if k.led == nil || len(seqs) == 0 {
		return
	}
	if failure != nil {
		_ = k.led.failed(ctx, seqs)
		return
	}
	_ = k.led.delivered(ctx, k.name, slicesMax(seqs))
}

func slicesMax(s []int64) int64 {
	m := s[0]
	for _, v := range s[1:] {
		m = max(m, v)
	}
	return m
}

// rowSeq finds a row's rocketmq_seq: a selected column of that name, or the
// meta eKuiper adds with sendMetaToSink.
func rowSeq(row map[string]any) (int64, bool) {
	if v, ok := row[MetaSeq]; ok {
		return toInt64(v)
	}
	if meta, ok := row[metaKey].(map[string]any); ok {
		if v, ok := meta[MetaSeq]; ok {
			return toInt64(v)
		}
	}
	return 0, false
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		return int64(x), true
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}

// record builds the message of a row: its fields but the reserved ones as
// a JSON object, with the lite topic, tag, keys, group and properties the
// configuration names.
func (k *sink) record(row map[string]any) (rmqflow.Record, error) {
	body := make(map[string]any, len(row))
	for f, v := range row {
		if f == metaKey || f == MetaSeq || strings.HasPrefix(f, rmqflow.AttrPrefix) {
			continue
		}
		body[f] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		return rmqflow.Record{}, fmt.Errorf("rocketmq sink: encoding a row: %w", err)
	}
	rec := rmqflow.Record{Body: b, LiteTopic: k.conf.liteTopic, Tag: k.conf.tag}
	field := func(name, what string) (string, error) {
		v, ok := row[name]
		if !ok || v == nil {
			return "", fmt.Errorf("rocketmq sink: the row has no field %q for the %s", name, what)
		}
		if s, ok := v.(string); ok {
			return s, nil
		}
		return fmt.Sprint(v), nil
	}
	if k.conf.liteTopicField != "" {
		if rec.LiteTopic, err = field(k.conf.liteTopicField, "lite topic"); err != nil {
			return rec, err
		}
	}
	if k.conf.tagField != "" {
		if rec.Tag, err = field(k.conf.tagField, "tag"); err != nil {
			return rec, err
		}
	}
	if k.conf.keysField != "" {
		keys, err := field(k.conf.keysField, "keys")
		if err != nil {
			return rec, err
		}
		rec.Keys = strings.Fields(keys)
	}
	if k.conf.groupField != "" {
		if rec.MessageGroup, err = field(k.conf.groupField, "message group"); err != nil {
			return rec, err
		}
	}
	if len(k.conf.propertyFields) > 0 {
		rec.Properties = make(map[string]string, len(k.conf.propertyFields))
		for _, f := range k.conf.propertyFields {
			if v, ok := row[f]; ok && v != nil {
				rec.Properties[f] = fmt.Sprint(v)
			}
		}
	}
	return rec, nil
}

func (k *sink) Close(ctx api.StreamContext) error {
	k.mu.Lock()
	s, led, name := k.s, k.led, k.name
	k.s, k.led = nil, nil
	k.mu.Unlock()
	if led != nil {
		led.leave(name)
	}
	if s == nil {
		return nil
	}
	return s.Close(ctx)
}
