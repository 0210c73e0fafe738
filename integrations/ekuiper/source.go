package rmqkuiper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lf-edge/ekuiper/contract/v2/api"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// Meta keys a row carries besides rmqflow's attributes (rocketmq_topic,
// rocketmq_lite_topic, rocketmq_message_id, ...: rmqflow.Metadata.Attributes).
const (
	// MetaSeq is the row's place in its rule's ingest order: the sinks ack up
	// to the highest one they delivered.
	MetaSeq = "rocketmq_seq"
	// MetaHandle is the receipt handle as JSON (rmqflow.ReceiptHandle).
	MetaHandle = rmqflow.AttrHandle
	// MetaProperties is the message's user properties, a map.
	MetaProperties = "rocketmq_properties"
)

// Ack modes of the source.
const (
	// AckSink (default): the rule's rocketmq and rocketmq_ack sinks ack, up to
	// the highest rocketmq_seq they delivered.
	AckSink = "sink"
	// AckIngest acks each message as it is ingested: at most once, for
	// rules whose sinks are not RocketMQ's.
	AckIngest = "ingest"
	// AckNever acks nothing: every message comes back after its
	// invisibility (the reference connector's lite mode; for tests).
	AckNever = "never"
)

// sourceConf is the source's configuration.
type sourceConf struct {
	src     rmqflow.SourceConfig
	ackMode string
	maxAge  time.Duration
	// throttle, when set, defers over-share lite topics before ingest.
	throttle *rmqflow.FairShareConfig
}

// DefaultPendingMaxAge is how long an ingested message may wait for its
// rule's sinks before it is given back.
const DefaultPendingMaxAge = time.Hour

// commonSourceKeys are keys eKuiper passes to every source.
var commonSourceKeys = map[string]bool{"datasource": true, "format": true, "key": true, "schemaId": true,
	"delimiter": true, "decompression": true, "payloadFormat": true, "payloadField": true, "payloadSchemaId": true,
	"payloadBatchField": true, "interval": true, "bufferLength": true, "connectionSelector": true, "streamName": true,
	"sourceType": true, "timestampFormat": true, "strictValidation": true}

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
	case AckSink, AckIngest, AckNever:
	default:
		p.fail("ack-mode", "want sink, ingest or never, got %q", c.ackMode)
	}
	c.maxAge = p.duration("pending-max-age")
	if c.maxAge == 0 {
		c.maxAge = DefaultPendingMaxAge
	}
	if c.ackMode == AckSink {
		// Rows wait for their rule's sinks: keep them invisible meanwhile.
		sc.Leases = rmqflow.LeaseConfig{Enabled: true, MaxExtension: c.maxAge}
	}
	if p.boolean("throttle") {
		c.throttle = &rmqflow.FairShareConfig{Window: p.duration("throttle-window"), Slack: p.float("throttle-slack"),
			MinCount: p.integer("throttle-min-count"), Defer: p.duration("throttle-defer")}
		if _, err := rmqflow.FairShare[[]byte](*c.throttle); err != nil && p.err == nil {
			p.err = err
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

	mu     sync.Mutex
	src    *rmqflow.Source[[]byte]
	th     *rmqflow.Throttle[[]byte]
	led    *ledger
	cancel context.CancelFunc
	done   chan struct{}
}

// NewSource returns a new "rocketmq" source (modules.RegisterSource).
func NewSource() api.Source { return &source{} }

func (s *source) Provision(ctx api.StreamContext, configs map[string]any) error {
	c, unknown, err := parseSource(configs)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		ctx.GetLogger().Warnf("rocketmq source: unknown configuration keys %v (ignored)", unknown)
	}
	s.conf = c
	return nil
}

func (s *source) Connect(ctx api.StreamContext, sch api.StatusChangeHandler) error {
	sch(api.ConnectionConnecting, "")
	src, err := rmqflow.NewSource(s.conf.src, rmqflow.BytesDecoder())
	if err != nil {
		sch(api.ConnectionDisconnected, err.Error())
		return err
	}
	if err := src.Start(ctx); err != nil {
		_ = src.Close(context.WithoutCancel(ctx))
		sch(api.ConnectionDisconnected, err.Error())
		return err
	}
	var th *rmqflow.Throttle[[]byte]
	if s.conf.throttle != nil {
		policy, err := rmqflow.FairShare[[]byte](*s.conf.throttle)
		if err == nil {
			th, err = rmqflow.NewThrottle(src.Acker(), policy, rmqflow.ThrottleConfig{})
		}
		if err != nil {
			_ = src.Close(context.WithoutCancel(ctx))
			return err
		}
	}
	var led *ledger
	if s.conf.ackMode == AckSink {
		led = ledgerOf(ctx.GetRuleId())
		if err := led.attach(s, src.Acker(), s.conf.maxAge); err != nil {
			_ = src.Close(context.WithoutCancel(ctx))
			sch(api.ConnectionDisconnected, err.Error())
			return err
		}
	}
	s.mu.Lock()
	s.src, s.th, s.led = src, th, led
	s.mu.Unlock()
	sch(api.ConnectionConnected, "")
	return nil
}

// Subscribe starts ingesting and returns.
func (s *source) Subscribe(ctx api.StreamContext, ingest api.BytesIngest, ingestError api.ErrorIngest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.src == nil {
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

func (s *source) run(ctx context.Context, sctx api.StreamContext, ingest api.BytesIngest, ingestError api.ErrorIngest) {
	defer close(s.done)
	for {
		m, err := s.src.Next(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, rmqflow.ErrSourceClosed) {
				ingestError(sctx, err)
			}
			return
		}
		if s.th != nil {
			admitted, err := s.th.Admit(ctx, m)
			if err != nil {
				sctx.GetLogger().Warnf("rocketmq source: throttle: %v", err)
			}
			if !admitted {
				continue // deferred on the broker: it comes back later
			}
		}
		meta := make(map[string]any, 16)
		for k, v := range m.Meta.Attributes() {
			meta[k] = v
		}
		if len(m.Meta.Properties) > 0 {
			props := make(map[string]any, len(m.Meta.Properties))
			for k, v := range m.Meta.Properties {
				props[k] = v
			}
			meta[MetaProperties] = props
		}
		if b, err := m.Handle.MarshalJSON(); err == nil {
			meta[MetaHandle] = string(b)
		}
		switch s.conf.ackMode {
		case AckSink:
			meta[MetaSeq] = s.led.add(m.Handle)
		case AckIngest:
			if err := s.src.Acker().Ack(ctx, m.Handle); err != nil {
				sctx.GetLogger().Warnf("rocketmq source: ack of %s at ingest: %v", m.Meta.MessageID, err)
			}
		}
		ingest(sctx, m.Value, meta, m.Meta.ReceivedAt)
	}
}

// Close stops ingesting and gives back what the rule had not settled.
func (s *source) Close(ctx api.StreamContext) error {
	s.mu.Lock()
	src, cancel, done, led := s.src, s.cancel, s.done, s.led
	s.src, s.cancel, s.led = nil, nil, nil
	s.mu.Unlock()
	if src == nil {
		return nil
	}
	if cancel != nil {
		cancel()
		<-done
	}
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stop()
	var first error
	if led != nil {
		first = led.detach(cctx, s)
	}
	if err := src.Close(cctx); err != nil && first == nil {
		first = err
	}
	return first
}
