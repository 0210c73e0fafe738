package rmqkuiper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/lf-edge/ekuiper/contract/v2/api"
	"github.com/valyala/fastjson"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// Meta keys a row carries besides rmqflow's attributes (rocketmq_topic,
// rocketmq_lite_topic, rocketmq_message_id, ...: rmqflow.Metadata.Attributes).
const (
	// MetaSeq is the row's place in its rule's ingest order: the sinks ack up
	// to the highest one they delivered.
	MetaSeq = "rocketmq_seq"
	// MetaHandle is the receipt handle as JSON (rmqflow.ReceiptHandle), in
	// ack-mode external only: encoding it hands the delivery over.
	MetaHandle = rmqflow.AttrHandle
	// MetaProperties is the message's user properties, a map.
	MetaProperties = "rocketmq_properties"
)

// Ack modes of the source.
const (
	// AckSink (default): the rule's rocketmq and rocketmq_ack sinks ack, up to
	// the highest rocketmq_seq they delivered (ledger.go).
	AckSink = "sink"
	// AckIngest acks each message as it is ingested: at most once, for rules
	// whose output may be lost.
	AckIngest = "ingest"
	// AckExternal acks nothing here: each row carries its receipt handle in
	// meta(rocketmq_handle), and whoever gets it acks it (with rmqflow's
	// AckPool, in another process). A message nobody acks comes back after
	// its invisibility: the reference connector's lite mode, plus the handle.
	AckExternal = "external"
)

// sourceConf is the source's configuration.
type sourceConf struct {
	src     rmqflow.SourceConfig
	ackMode string
	maxAge  time.Duration
	// idleAck is how long the source must have ingested nothing before it
	// asks the rule's metrics whether the pending rows were all dropped
	// (idle.go); 0 turns that off.
	idleAck time.Duration
	// splitJSON: the stream's FORMAT is JSON, and the source gives each
	// element of a JSON array payload its own row and seq.
	splitJSON bool
	// throttle, when set, defers over-share lite topics before ingest.
	throttle *rmqflow.FairShareConfig
	// maxAttempt and onValve are the safety valve of the messages whose
	// rows keep failing (and of the throttle's deferrals): valve.go.
	maxAttempt int32
	onValve    rmqflow.ValveAction
	// deadLetterTopic, when set, is where a message whose valve fired is
	// parked (rmqflow.DeadLetterToSink) instead of where onValve says.
	deadLetterTopic string
}

// DefaultIdleAck is the default idle-ack.
const DefaultIdleAck = 2 * time.Second

// DefaultPendingMaxAge is how long an ingested message may wait for its
// rule's sinks, renewed, before it is left to come back.
const DefaultPendingMaxAge = time.Hour

// commonSourceKeys are keys eKuiper passes to every source.
var commonSourceKeys = map[string]bool{"datasource": true, "format": true, "key": true, "schemaId": true,
	"delimiter": true, "decompression": true, "payloadFormat": true, "payloadField": true, "payloadSchemaId": true,
	"payloadBatchField": true, "interval": true, "bufferLength": true, "connectionSelector": true, "streamName": true,
	"sourceType": true, "timestampFormat": true, "strictValidation": true, "retainSize": true, "timestamp": true,
	"shared": true, "confKey": true, "type": true}

func parseSource(m map[string]any) (sourceConf, []string, error) {
	p := newProps(m)
	var c sourceConf
	conn := p.connection()
	topic := p.required("datasource")
	group := p.required("consumer-group")
	sc := rmqflow.SourceConfig{Connection: conn,
		FetchConcurrency:  p.integer("fetch-concurrency"),
		AwaitDuration:     p.duration("await-duration"),
		InvisibleDuration: p.duration("invisible-duration"),
		MaxMessageNum:     p.integer("max-message-num"),
		RenewalAheadTime:  p.duration("renewal-ahead-time"),
		// Receiving retries transient errors without end; a permanent one
		// ends the rmqflow source, and this source opens a new one.
		MaxOutage: rmqflow.Forever,
	}
	switch mode := p.str("mode"); mode {
	case "", "lite":
		sc.Lite = []rmqflow.LiteBinding{{Topic: topic, Group: group, LiteTopics: p.strings("lite-topics")}}
		if p.str("filter-expression") != "" {
			p.fail("filter-expression", "only in simple mode")
		}
	case "simple":
		sc.Mode, sc.Topic, sc.Group = rmqflow.ModeSimple, topic, group
		expr := p.str("filter-expression")
		switch ft := p.str("filter-type"); ft {
		case "", "tag":
			if expr != "" {
				sc.Filter = client.TagFilter(expr)
			}
		case "sql":
			if expr == "" {
				p.fail("filter-expression", "required with filter-type sql")
			}
			sc.Filter = client.SQLFilter(expr)
		default:
			p.fail("filter-type", "want tag or sql, got %q", ft)
		}
	default:
		p.fail("mode", "want lite or simple, got %q", mode)
	}
	c.ackMode = p.str("ack-mode")
	switch c.ackMode {
	case "":
		c.ackMode = AckSink
	case AckSink, AckIngest, AckExternal:
	default:
		p.fail("ack-mode", "want sink, ingest or external, got %q", c.ackMode)
	}
	if c.ackMode == AckSink {
		// eKuiper puts a rate-limiting node after a source with interval: it
		// holds the latest row, counted as processed, where the idle check
		// cannot see it.
		if v, ok := p.m["interval"]; ok && !zeroValue(v) {
			p.fail("interval", "ack-mode sink takes each message as it comes (a rate limiter holds rows the ack check cannot see): leave interval unset")
		}
		// payloadFormat/payloadField make several rows of one decoded row,
		// all with its one rocketmq_seq.
		for _, k := range []string{"payloadFormat", "payloadField"} {
			if v, ok := p.m[k]; ok && !zeroValue(v) {
				p.fail(k, "ack-mode sink gives each row its own %s, which %s would share among several rows: leave it unset", MetaSeq, k)
			}
		}
	}
	c.maxAge = p.duration("pending-max-age")
	if c.maxAge == 0 {
		c.maxAge = DefaultPendingMaxAge
	}
	c.idleAck = DefaultIdleAck
	if _, set := p.m["idle-ack"]; set {
		c.idleAck = p.duration("idle-ack")
	}
	if c.idleAck < 0 {
		p.fail("idle-ack", "must not be negative (0 turns it off)")
	}
	if c.ackMode == AckSink {
		// Rows wait for their rule's sinks: keep them invisible meanwhile.
		sc.Leases = rmqflow.LeaseConfig{Enabled: true, MaxExtension: c.maxAge}
	}
	c.maxAttempt = rmqflow.DefaultMaxDeliveryAttempt
	if n := p.integer("max-delivery-attempt"); n < 0 || n > math.MaxInt32 {
		p.fail("max-delivery-attempt", "want 1 or more (0 for the default, %d), got %d", rmqflow.DefaultMaxDeliveryAttempt, n)
	} else if n > 0 {
		c.maxAttempt = int32(n)
	}
	c.onValve = parseOnValve(p)
	if c.deadLetterTopic = p.str("dead-letter-topic"); c.deadLetterTopic != "" {
		switch {
		case c.ackMode != AckSink:
			p.fail("dead-letter-topic", "only with ack-mode sink: in ack-mode %s the source gives no message up", c.ackMode)
		case c.onValve == rmqflow.ValveAck:
			p.fail("dead-letter-topic", "on-valve %s acks (drops) the messages dead-letter-topic would park: set one of them", OnValveAck)
		case c.deadLetterTopic == topic:
			p.fail("dead-letter-topic", "is the stream's own datasource %s: a parked message would come back to this stream; name a NORMAL topic of its own", topic)
		}
	}
	format := strings.ToLower(p.str("format"))
	c.splitJSON = format == "" || format == "json"
	if p.boolean("throttle") {
		c.throttle = &rmqflow.FairShareConfig{Window: p.duration("throttle-window"), Slack: p.float("throttle-slack"),
			MinCount: p.integer("throttle-min-count"), Defer: p.duration("throttle-defer")}
		if _, err := rmqflow.FairShare[[]byte](*c.throttle); err != nil && p.err == nil {
			p.err = fmt.Errorf("rocketmq: throttle: %w", err)
		}
	}
	if p.err != nil {
		return c, nil, p.err
	}
	if err := sc.Validate(); err != nil {
		return c, nil, fmt.Errorf("rocketmq: %w", err)
	}
	c.src = sc
	return c, p.unknown(commonSourceKeys), nil
}

// source is the eKuiper source "rocketmq": a BytesSource whose payloads
// eKuiper decodes with the stream's FORMAT.
type source struct {
	conf sourceConf
	// props is the configuration eKuiper handed Provision (checkConfKey).
	props map[string]any

	mu     sync.Mutex
	sess   *session
	led    *ledger
	sinks  int     // the rule's acking sinks (ack-mode sink)
	def    ruleDef // the definition the rule check approved (ack-mode sink)
	sch    api.StatusChangeHandler
	cancel context.CancelFunc
	done   chan struct{}
	log    api.Logger
	// group is what the broker said of the consumer group, once asked.
	group *rmqflow.GroupSettings
}

// session is one rmqflow source, its throttle and its valve; a permanent
// receive error ends it and the source opens another.
type session struct {
	src *rmqflow.Source[[]byte]
	th  *rmqflow.Throttle[[]byte]
	v   *valve
	dlq *rmqflow.Sink // dead-letter-topic's sink; nil: none
}

// NewSource returns a new "rocketmq" source (modules.RegisterSource).
func NewSource() api.Source { return &source{} }

// Validate is eKuiper's check of a conf key added over its REST API
// (PUT /metadata/sources/rocketmq/confKeys/{key}): one that holds a plain
// secret-key is refused before it is stored.
func (s *source) Validate(props map[string]any) error { return plainSecret(props) }

func (s *source) Provision(ctx api.StreamContext, configs map[string]any) error {
	c, unknown, err := parseSource(configs)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		ctx.GetLogger().Warnf("rocketmq source: unknown configuration keys %v (ignored)", unknown)
	}
	s.conf, s.props = c, maps.Clone(configs)
	return nil
}

// ruleCheckTimeout bounds how long Connect waits for eKuiper's REST API to
// answer the rule check.
const ruleCheckTimeout = time.Minute

// Connect checks the rule (ack-mode sink), opens the rmqflow source and joins
// the rule's ledger. An error fails the rule; eKuiper's restart strategy
// (rmqflow-sql sets one) starts it again.
func (s *source) Connect(ctx api.StreamContext, sch api.StatusChangeHandler) error {
	sch(api.ConnectionConnecting, "")
	s.log = ctx.GetLogger()
	fail := func(err error) error {
		sch(api.ConnectionDisconnected, err.Error())
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, ruleCheckTimeout)
	err := checkConfKey(cctx, ctx.GetOpId(), s.props)
	cancel()
	if err != nil {
		return fail(err)
	}
	if s.conf.ackMode == AckSink {
		if strings.HasPrefix(ctx.GetRuleId(), "$$") {
			return fail(&RuleError{Rule: ctx.GetRuleId(), Reason: `a SHARED stream's source runs outside the rules that read it: use SHARED="false", or ack-mode ingest`})
		}
		cctx, cancel := context.WithTimeout(ctx, ruleCheckTimeout)
		def, err := fetchRule(cctx, ctx.GetRuleId())
		cancel()
		if err != nil {
			return fail(err)
		}
		held, err := s.heldBack(ctx, def)
		if err != nil {
			return fail(err)
		}
		n, err := checkRule(def, held)
		if err != nil {
			return fail(err)
		}
		cctx, cancel = context.WithTimeout(ctx, ruleCheckTimeout)
		err = confirmRule(cctx, def)
		cancel()
		if err != nil {
			return fail(err)
		}
		s.sinks, s.def = n, def
	}
	sess, err := s.open(ctx)
	if err != nil {
		return fail(err)
	}
	var led *ledger
	if s.conf.ackMode == AckSink {
		led = ledgerOf(ledgerKey{ctx.GetRuleId(), ctx.GetRunId()})
		if err := led.attach(s, rmqAcker{sess.src.Acker(), sess.v}, s.sinks); err != nil {
			sess.close(ctx)
			return fail(err)
		}
	}
	s.mu.Lock()
	s.sess, s.led, s.sch = sess, led, sch
	s.mu.Unlock()
	sch(api.ConnectionConnected, "")
	return nil
}

// heldBack is heldBack's answer for this stream and rule. In simple mode,
// and only when the rule's SQL has a window that waits for rows
// (COUNTWINDOW, STATEWINDOW), it asks the broker whether the consumer group is a FIFO
// group: the settings the broker answers a consumer session with say so.
func (s *source) heldBack(ctx context.Context, def ruleDef) (string, error) {
	if s.conf.src.Mode != rmqflow.ModeSimple {
		return heldBack(s.conf, false), nil
	}
	calls := windowCalls(sqlTokens(def.SQL))
	if _, ok := calls["countwindow"]; !ok {
		if _, ok := calls["statewindow"]; !ok {
			return "", nil
		}
	}
	g, err := s.groupOf(ctx)
	if err != nil {
		return "", fmt.Errorf("rocketmq: asking whether group %s is a FIFO group: %w", s.conf.src.Group, err)
	}
	return heldBack(s.conf, g.FIFO), nil
}

// groupOf is what the broker says of the source's consumer group, asked
// once (askGroup).
func (s *source) groupOf(ctx context.Context) (rmqflow.GroupSettings, error) {
	if s.group != nil {
		return *s.group, nil
	}
	g, err := s.askGroup(ctx)
	if err != nil {
		return g, err
	}
	s.group = &g
	return g, nil
}

// open starts an rmqflow source (and its throttle), with the valve of its
// messages.
func (s *source) open(ctx context.Context) (*session, error) {
	v := &valve{maxAttempt: s.conf.maxAttempt, onValve: s.conf.onValve, returns: ownReturns, log: s.log}
	if g, err := s.groupOf(ctx); err != nil {
		// The broker's own limit may then dead-letter a message delivered
		// again behind its lite topic's head before the valve fires.
		s.log.Warnf("rocketmq source: the group's retry limit is unknown (%v): a failing message is given up on after max-delivery-attempt %d own deliveries", err, s.conf.maxAttempt)
	} else {
		v.groupMax, v.fifo = g.MaxDeliveryAttempts, g.FIFO
	}
	var dlq *rmqflow.Sink
	if t := s.conf.deadLetterTopic; t != "" {
		// Opened and checked before the source starts: a topic the broker
		// refuses, or one that cannot store a parked copy (a LITE or FIFO
		// topic), fails the rule before any message is received.
		sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: s.conf.src.Connection, Topic: t})
		if err == nil {
			if err = rmqflow.CheckDeadLetterSink(ctx, sink); err != nil {
				_ = sink.Close(context.WithoutCancel(ctx))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("rocketmq: dead-letter-topic %s: %w", t, err)
		}
		dlq, v.park, v.parkTopic = sink, rmqflow.DeadLetterToSink[[]byte](sink), t
	}
	src, err := rmqflow.NewSource(s.conf.src, rmqflow.BytesDecoder())
	if err == nil {
		if err = src.Start(ctx); err != nil {
			_ = src.Close(context.WithoutCancel(ctx))
		}
	}
	if err != nil {
		if dlq != nil {
			_ = dlq.Close(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	sess := &session{src: src, v: v, dlq: dlq}
	if s.conf.throttle != nil {
		policy, err := rmqflow.FairShare[[]byte](*s.conf.throttle)
		if err == nil {
			// Its own valves are a backstop: the source asks its valve
			// first, which counts the throttle's deferrals and the rule's
			// failures alike (run). A valve that fires admits.
			sess.th, err = rmqflow.NewThrottle(src.Acker(), policy, rmqflow.ThrottleConfig{MaxDeliveryAttempt: s.conf.maxAttempt})
		}
		if err != nil {
			sess.close(ctx)
			return nil, err
		}
	}
	return sess, nil
}

func (sess *session) close(ctx context.Context) {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stop()
	_ = sess.src.Close(cctx)
	if sess.dlq != nil {
		_ = sess.dlq.Close(cctx)
	}
}

// Subscribe starts ingesting and returns.
func (s *source) Subscribe(ctx api.StreamContext, ingest api.BytesIngest, ingestError api.ErrorIngest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		return errors.New("rocketmq: Subscribe before Connect")
	}
	if s.cancel != nil {
		return errors.New("rocketmq: subscribed twice")
	}
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel, s.done = cancel, make(chan struct{})
	go s.run(runCtx, ctx, ingest, ingestError)
	return nil
}

// reopenBackoff bounds the wait between attempts to open a new rmqflow
// source after a permanent receive error.
var reopenBackoff = [2]time.Duration{time.Second, time.Minute}

func (s *source) run(ctx context.Context, sctx api.StreamContext, ingest api.BytesIngest, ingestError api.ErrorIngest) {
	defer close(s.done)
	s.mu.Lock()
	sess, led := s.sess, s.led
	s.mu.Unlock()
	if led != nil && s.conf.idleAck > 0 {
		idleDone := make(chan struct{})
		go func() {
			defer close(idleDone)
			s.settleIdleLoop(ctx, sctx, led, s.conf.idleAck)
		}()
		defer func() { <-idleDone }()
	}
	if led != nil {
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			watchRule(ctx, sctx, s.def, led, defWatchTimes)
		}()
		defer func() { <-watchDone }()
	}
	for {
		m, err := sess.src.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if sess = s.reopen(ctx, sctx, sess, err); sess == nil {
				return
			}
			continue
		}
		// A message parked before whose ack did not take has its one
		// copy: it is only acked.
		if wasParked(m.Handle) {
			sess.v.ackParked(ctx, sess.src.Acker(), m.Handle)
			continue
		}
		// The throttle may defer a message only while its valve lets it
		// be returned once more; a message it may not is ingested.
		if sess.th != nil && !sess.v.fired(m.Handle) {
			admitted, err := sess.th.Admit(ctx, m)
			if err != nil {
				sctx.GetLogger().Warnf("rocketmq source: throttle: %v", err)
			}
			if !admitted {
				if err == nil {
					sess.v.returned(m.Handle) // deferred on the broker: it comes back later
				}
				continue
			}
		}
		s.ingest(ctx, sctx, sess, m, ingest)
	}
}

// reopen reports a receive error that ended sess, gives back what the rule
// had not settled, and opens a new rmqflow source, waiting longer after each
// failure. It returns nil when ctx ends first.
func (s *source) reopen(ctx context.Context, sctx api.StreamContext, sess *session, cause error) *session {
	s.sch(api.ConnectionDisconnected, cause.Error())
	if s.led != nil {
		if err := s.led.detach(ctx, s); err != nil {
			sctx.GetLogger().Warnf("rocketmq source: %v", err)
		}
	}
	sess.close(ctx)
	for wait := reopenBackoff[0]; ; wait = min(2*wait, reopenBackoff[1]) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		next, err := s.open(ctx)
		if err == nil && s.led != nil {
			if err = s.led.attach(s, rmqAcker{next.src.Acker(), next.v}, s.sinks); err != nil {
				next.close(ctx)
			}
		}
		if err != nil {
			sctx.GetLogger().Warnf("rocketmq source: reopening: %v", err)
			continue
		}
		s.mu.Lock()
		s.sess = next
		s.mu.Unlock()
		s.sch(api.ConnectionConnected, "")
		return next
	}
}

// ingest hands eKuiper the rows of one message, each with a fresh meta map.
func (s *source) ingest(ctx context.Context, sctx api.StreamContext, sess *session, m *rmqflow.AckableMessage[[]byte], ingest api.BytesIngest) {
	rows, ok := splitRows(m.Value, s.conf.splitJSON)
	if !ok {
		s.malformed(ctx, sctx, sess, m)
		return
	}
	base := metaOf(m)
	var seqs []int64
	switch s.conf.ackMode {
	case AckSink:
		var keep *rmqflow.AckableMessage[[]byte]
		if sess.v.park != nil {
			keep = m // to park it if its valve fires
		}
		seqs = s.led.addMsg(m.Handle, keep, len(rows), m.Meta.DeadLettered())
	case AckIngest:
		if err := sess.src.Acker().Ack(ctx, m.Handle); err != nil {
			sctx.GetLogger().Warnf("rocketmq source: ack of %s at ingest: %v", m.Meta.MessageID, err)
		}
	case AckExternal:
		if b, err := m.Handle.MarshalJSON(); err == nil {
			base[MetaHandle] = string(b)
		}
	}
	for i, row := range rows {
		meta := maps.Clone(base)
		if seqs != nil {
			meta[MetaSeq] = seqs[i]
		}
		ingest(sctx, row, meta, m.Meta.ReceivedAt)
	}
}

// malformed handles a payload that is not JSON in a JSON stream: eKuiper
// would drop it and a later delivery would ack it, so in ack-mode sink it
// fails as a row would: it is left to come back, and once its valve fired
// it goes where on-valve says (the dead-letter queue by default); in
// ack-mode ingest it is acked and dropped.
func (s *source) malformed(ctx context.Context, sctx api.StreamContext, sess *session, m *rmqflow.AckableMessage[[]byte]) {
	switch s.conf.ackMode {
	case AckSink:
		if m.Meta.DeadLettered() {
			sess.src.Acker().Leave(m.Handle) // nothing removes it
		} else {
			sess.v.failed(ctx, sess.src.Acker(), m.Handle, m)
		}
		sctx.GetLogger().Warnf("rocketmq source: message %s (attempt %d) is not a JSON object or array of objects: left to come back until its valve fires (max-delivery-attempt, on-valve)",
			m.Meta.MessageID, m.Meta.DeliveryAttempt)
	case AckIngest:
		_ = sess.src.Acker().Ack(ctx, m.Handle)
		sctx.GetLogger().Warnf("rocketmq source: message %s is not a JSON object or array of objects: dropped", m.Meta.MessageID)
	}
}

// metaOf is a message's metadata as meta(...) reads it.
func metaOf(m *rmqflow.AckableMessage[[]byte]) map[string]any {
	meta := make(map[string]any, 16)
	for k, v := range m.Meta.Attributes() {
		meta[k] = v
	}
	meta[rmqflow.AttrDeliveryAttempt] = int64(m.Meta.DeliveryAttempt)
	if len(m.Meta.Properties) > 0 {
		props := make(map[string]any, len(m.Meta.Properties))
		for k, v := range m.Meta.Properties {
			props[k] = v
		}
		meta[MetaProperties] = props
	}
	return meta
}

// splitRows gives the rows of a payload: with split (a JSON stream), a JSON
// array's elements one by one, an object as it is, and !ok for anything
// else; without split, the payload as it is.
func splitRows(b []byte, split bool) ([][]byte, bool) {
	if !split {
		return [][]byte{b}, true
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return nil, false
	}
	switch t[0] {
	case '{':
		if !decodable(t) {
			return nil, false
		}
		return [][]byte{t}, true
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(t, &elems); err != nil {
			return nil, false
		}
		if len(elems) == 0 {
			return [][]byte{t}, true // no row; a later delivery acks it
		}
		rows := make([][]byte, len(elems))
		for i, e := range elems {
			e = bytes.TrimSpace(e)
			if len(e) == 0 || e[0] != '{' || !decodable(e) {
				return nil, false
			}
			rows[i] = e
		}
		return rows, true
	}
	return nil, false
}

// decodable reports whether eKuiper's JSON decoder (fastjson) takes row: it
// refuses more than fastjson.MaxDepth levels of nesting, which Go's
// json.Valid allows; such a row would be dropped by eKuiper and then acked
// by progress, unprocessed.
func decodable(row []byte) bool {
	var p fastjson.Parser
	_, err := p.ParseBytes(row)
	return err == nil
}

// Close stops ingesting and gives back what the rule had not settled.
func (s *source) Close(ctx api.StreamContext) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	s.mu.Lock()
	sess, led := s.sess, s.led
	s.sess, s.led, s.cancel = nil, nil, nil
	s.mu.Unlock()
	var err error
	if led != nil {
		cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = led.detach(cctx, s)
		stop()
	}
	if sess != nil {
		sess.close(ctx)
	}
	return err
}
