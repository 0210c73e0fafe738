package rmqkuiper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	// Where each record's parts come from: a value (which may be an eKuiper
	// template such as "{{.session}}" with sendSingle, so not on an acking
	// sink) or a row field.
	liteTopic, liteTopicField string
	tag, tagField             string
	keys, keysField           string
	groupField                string
	propertyFields            []string
	ack                       bool
}

func parseSink(m map[string]any) (sinkConf, []string, error) {
	p := newProps(m)
	c := sinkConf{sink: rmqflow.SinkConfig{Connection: p.connection(), Topic: p.required("topic"),
		MaxAttempts: p.integer("max-attempts"), Concurrency: p.integer("send-concurrency"),
		BatchSize: p.integer("send-batch-size"), Linger: p.duration("send-linger")}}
	c.liteTopic, c.liteTopicField = p.str("lite-topic"), p.str("lite-topic-field")
	c.tag, c.tagField = p.str("tag"), p.str("tag-field")
	c.keys, c.keysField = p.str("keys"), p.str("keys-field")
	c.groupField = p.str("message-group-field")
	c.propertyFields = p.strings("property-fields")
	c.ack = true
	if _, set := p.m["ack"]; set {
		c.ack = p.boolean("ack")
	}
	for _, pair := range [][2]string{{"lite-topic", "lite-topic-field"}, {"tag", "tag-field"}, {"keys", "keys-field"}} {
		if p.str(pair[0]) != "" && p.str(pair[1]) != "" {
			p.fail(pair[1], "%s and %s exclude each other", pair[0], pair[1])
		}
	}
	if c.ack {
		ackingActionKeys(p)
	}
	// eKuiper evaluates every action property holding "{{" as a template
	// itself, in the transform node before the sink, over the call's data:
	// a list of rows unless sendSingle is true (which an acking sink
	// refuses). A template of row fields fails on a list, and eKuiper then
	// drops the rows with a log line; an acking sink's next delivery or the
	// idle check would ack their messages unwritten (seen on v2.4.0).
	if !p.boolean("sendSingle") {
		for _, k := range []string{"lite-topic", "tag", "keys"} {
			if strings.Contains(p.str(k), "{{") {
				p.fail(k, "eKuiper evaluates a template in an action property over the whole call (a list of rows unless sendSingle is true, which an acking sink refuses) and drops the rows when that fails: select the value in the SQL and name it in %s-field", k)
			}
		}
	}
	if p.err != nil {
		return c, nil, p.err
	}
	if err := c.sink.Validate(); err != nil {
		return c, nil, fmt.Errorf("rocketmq: %w", err)
	}
	return c, p.unknown(commonSinkKeys), nil
}

// guardedActionKeys are the eKuiper action options ackingActionKeys reads.
var guardedActionKeys = []string{"sendSingle", "enableCache", "runAsync", "concurrency", "batchSize", "lingerInterval", "dataTemplate", "dataField", "fields"}

// ackingActionKeys refuses the eKuiper action options under which an acking
// sink could ack a row it did not deliver, or report progress out of order.
func ackingActionKeys(p *props) {
	// eKuiper reads sink options in any capitalisation (mapstructure);
	// these checks read them as eKuiper documents them. Another spelling
	// of a guarded option would pass unseen: refuse it.
	for k := range p.m {
		for _, o := range guardedActionKeys {
			if k != o && strings.EqualFold(k, o) {
				p.fail(k, "write eKuiper's option %s exactly so (eKuiper reads it in any capitalisation; the acking checks read it as written)", o)
			}
		}
	}
	if p.boolean("sendSingle") {
		p.fail("sendSingle", "an acking sink takes the rows of one result together (a window's groups): leave sendSingle false")
	}
	if p.boolean("enableCache") {
		p.fail("enableCache", "an acking sink leaves failed rows to the broker to deliver again: leave enableCache false")
	}
	if p.boolean("runAsync") {
		p.fail("runAsync", "an acking sink acks after its write returned: leave runAsync false")
	}
	if p.integer("concurrency") > 1 {
		p.fail("concurrency", "an acking sink reports its progress in order: leave concurrency at 1")
	}
	// eKuiper puts a batching node before a sink with batchSize or
	// lingerInterval; it counts the rows it holds as processed, so the idle
	// check would take them for dropped and ack them.
	if p.integer("batchSize") > 0 {
		p.fail("batchSize", "an acking sink takes each result as it comes (a batching node holds rows the idle check cannot see): leave batchSize unset")
	}
	if v, ok := p.get("lingerInterval"); ok && !zeroValue(v) {
		p.fail("lingerInterval", "an acking sink takes each result as it comes (a batching node holds rows the idle check cannot see): leave lingerInterval unset")
	}
	// The rows must keep rocketmq_seq on their way into the sink.
	for _, k := range []string{"dataTemplate", "dataField"} {
		if p.str(k) != "" {
			p.fail(k, "an acking sink needs %s in every row, which %s would drop: shape the rows in the SQL instead", MetaSeq, k)
		}
	}
	if f := p.strings("fields"); len(f) > 0 && !slices.Contains(f, MetaSeq) {
		p.fail("fields", "an acking sink needs %s in every row: list it in fields", MetaSeq)
	}
}

// zeroValue reports whether an option's value is unset in effect: nil, 0,
// "", "0" or a zero duration.
func zeroValue(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case float64:
		return x == 0
	case int:
		return x == 0
	case int64:
		return x == 0
	case string:
		x = strings.TrimSpace(x)
		if x == "" || x == "0" {
			return true
		}
		d, err := time.ParseDuration(x)
		return err == nil && d == 0
	}
	return false
}

// sink is the eKuiper sink "rocketmq": each row becomes a message (its
// fields as a JSON object, without the reserved keys), and once a call's
// messages are stored the rule's messages up to the highest rocketmq_seq
// among its rows are acked.
type sink struct {
	conf sinkConf

	mu   sync.Mutex
	s    *rmqflow.Sink
	ack  *ackPart
	errc error // why Connect failed
}

// NewSink returns a new "rocketmq" sink (modules.RegisterSink).
func NewSink() api.Sink { return &sink{} }

// Validate is eKuiper's check of a sink conf key added over its REST API:
// one that holds a plain secret-key is refused before it is stored.
func (k *sink) Validate(props map[string]any) error { return plainSecret(props) }

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
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.errc = err
		sch(api.ConnectionDisconnected, err.Error())
		return err
	}
	k.s = s
	if k.conf.ack {
		k.ack = joinLedger(ctx)
	}
	sch(api.ConnectionConnected, "")
	return nil
}

// errNotConnected is what Collect returns after a failed Connect (eKuiper
// reports the Connect error and still hands the sink rows).
var errNotConnected = errors.New("rocketmq sink: not connected")

func (k *sink) Collect(ctx api.StreamContext, item api.MessageTuple) error {
	return k.write(ctx, []map[string]any{item.ToMap()})
}

func (k *sink) CollectList(ctx api.StreamContext, items api.MessageTupleList) error {
	return k.write(ctx, items.ToMaps())
}

// write sends rows as one call and settles them: on success the rule's
// ledger acks up to their highest seq; on failure their messages (and the
// rule's unsettled ones before them) are left to come back.
func (k *sink) write(ctx api.StreamContext, rows []map[string]any) error {
	k.mu.Lock()
	s, ack, cerr := k.s, k.ack, k.errc
	k.mu.Unlock()
	if s == nil {
		if cerr != nil {
			return fmt.Errorf("%w: %v", errNotConnected, cerr)
		}
		return errNotConnected
	}
	if err := ack.check(rows); err != nil {
		// Before sending (a retried call would send the rows again), and
		// failed in the ledger: the rule's messages are left to come back,
		// lest the idle check or a later delivery ack them unsent.
		return ack.settle(ctx, rows, err)
	}
	recs := make([]rmqflow.Record, 0, len(rows))
	for _, row := range rows {
		rec, err := k.record(ctx, row)
		if err != nil {
			return ack.settle(ctx, rows, err)
		}
		recs = append(recs, rec)
	}
	_, errs := s.Send(ctx, recs...)
	for i, err := range errs {
		if err != nil {
			return ack.settle(ctx, rows, fmt.Errorf("rocketmq sink: row %d of %d: %w", i+1, len(recs), err))
		}
	}
	return ack.settle(ctx, rows, nil)
}

// record builds the message of a row: its fields but the reserved ones as
// a JSON object, with the lite topic, tag, keys, group and properties the
// configuration names.
func (k *sink) record(ctx api.StreamContext, row map[string]any) (rmqflow.Record, error) {
	b, err := json.Marshal(stripReserved(row))
	if err != nil {
		return rmqflow.Record{}, fmt.Errorf("rocketmq sink: encoding a row: %w", err)
	}
	rec := rmqflow.Record{Body: b}
	part := func(value, field, what string) (string, error) {
		if field != "" {
			v, ok := row[field]
			if !ok || v == nil {
				return "", fmt.Errorf("rocketmq sink: the row has no field %q for the %s", field, what)
			}
			if s, ok := v.(string); ok {
				return s, nil
			}
			return fmt.Sprint(v), nil
		}
		if strings.Contains(value, "{{") {
			s, err := ctx.ParseTemplate(value, row)
			if err != nil {
				return "", fmt.Errorf("rocketmq sink: the %s template: %w", what, err)
			}
			return s, nil
		}
		return value, nil
	}
	if rec.LiteTopic, err = part(k.conf.liteTopic, k.conf.liteTopicField, "lite topic"); err != nil {
		return rec, err
	}
	if rec.Tag, err = part(k.conf.tag, k.conf.tagField, "tag"); err != nil {
		return rec, err
	}
	keys, err := part(k.conf.keys, k.conf.keysField, "keys")
	if err != nil {
		return rec, err
	}
	rec.Keys = strings.Fields(keys)
	if k.conf.groupField != "" {
		if rec.MessageGroup, err = part("", k.conf.groupField, "message group"); err != nil {
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
	s, ack := k.s, k.ack
	k.s, k.ack = nil, nil
	k.mu.Unlock()
	ack.close()
	if s == nil {
		return nil
	}
	return s.Close(ctx)
}

// ackPart is an acking sink's place in its rule's ledger.
type ackPart struct {
	led  *ledger
	name string
}

// joinLedger joins the ledger of ctx's rule run under the sink's op id and
// instance.
func joinLedger(ctx api.StreamContext) *ackPart {
	a := &ackPart{led: ledgerOf(ledgerKey{ctx.GetRuleId(), ctx.GetRunId()}),
		name: ctx.GetOpId() + "/" + strconv.Itoa(ctx.GetInstanceId())}
	a.led.join(a.name)
	return a
}

func (a *ackPart) close() {
	if a != nil {
		a.led.leave(a.name)
	}
}

// errNoSeq: the rule's rows reach an acking sink without rocketmq_seq, so
// it cannot tell what they cover.
var errNoSeq = errors.New("the rows carry no " + MetaSeq + ": select meta(" + MetaSeq + ") AS " + MetaSeq +
	" (max(meta(" + MetaSeq + ")) AS " + MetaSeq + " in a window) or set the rule option sendMetaToSink, and keep it through fields and templates")

// check refuses, before anything is sent, rows that cannot settle: none
// carries a rocketmq_seq while a rocketmq source feeds the run.
func (a *ackPart) check(rows []map[string]any) error {
	if a == nil || len(rows) == 0 || !a.led.hasSource() {
		return nil
	}
	for _, r := range rows {
		if _, ok := rowSeq(r); ok {
			return nil
		}
	}
	return fmt.Errorf("rocketmq: %w", errNoSeq)
}

// settle tells the ledger how a call's rows went and returns the call's
// result: failure itself, or an ack failure after a success (the rows were
// delivered; their messages come back, duplicates rather than losses).
func (a *ackPart) settle(ctx context.Context, rows []map[string]any, failure error) error {
	if a == nil {
		return failure
	}
	var top int64 = -1
	for _, r := range rows {
		if s, ok := rowSeq(r); ok && s > top {
			top = s
		}
	}
	if top < 0 {
		if failure != nil {
			// A failed call that names no seq: which rows it covered is
			// unknown, so every row the run ingested so far is left to come
			// back, lest the idle check or a later delivery ack them.
			a.led.failed(a.led.ingested())
			return failure
		}
		if len(rows) > 0 && a.led.hasSource() {
			return fmt.Errorf("rocketmq: %w", errNoSeq)
		}
		return nil
	}
	if failure != nil {
		a.led.failedOwn(ctx, top)
		return failure
	}
	if err := a.led.delivered(ctx, a.name, top); err != nil {
		return fmt.Errorf("rocketmq: delivered, but acking: %w", err)
	}
	return nil
}

// rowSeq finds a row's rocketmq_seq: a selected column of that name, or the
// meta eKuiper adds with sendMetaToSink (a map type of its own).
func rowSeq(row map[string]any) (int64, bool) {
	if v, ok := row[MetaSeq]; ok {
		return toInt64(v)
	}
	meta, ok := row[metaKey]
	if !ok || meta == nil {
		return 0, false
	}
	mv := reflect.ValueOf(meta)
	if mv.Kind() != reflect.Map || mv.Type().Key().Kind() != reflect.String {
		return 0, false
	}
	v := mv.MapIndex(reflect.ValueOf(MetaSeq).Convert(mv.Type().Key()))
	if !v.IsValid() {
		return 0, false
	}
	return toInt64(v.Interface())
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		return int64(x), x == float64(int64(x))
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}

// stripReserved is a row without the keys the rule carries for acking
// (rocketmq_seq, __meta) or the source's metadata (rocketmq_*).
func stripReserved(row map[string]any) map[string]any {
	out := make(map[string]any, len(row))
	for f, v := range row {
		if f == metaKey || strings.HasPrefix(f, rmqflow.AttrPrefix) {
			continue
		}
		out[f] = v
	}
	return out
}
