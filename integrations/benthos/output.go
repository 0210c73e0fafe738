package rmqbenthos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

func outputSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Sends messages to RocketMQ 5 topics over gRPC: normal, FIFO or lite (one lite topic per tenant, session or conversation).").
		Description(`
Each message becomes one RocketMQ message. The topic, lite topic, tag, keys, message group and properties are interpolated per message, so that one output can answer into the lite topic each message names (`+"`${! meta(\"rocketmq_lite_topic\") }`"+`).

A send that fails with a retriable error is retried up to `+"`max_attempts`"+` times under the same message id, so a retry after a lost response does not make a second message with a new id. Within a batch each message gets its own result: a message the broker refuses fails alone, and the rest of its batch is acknowledged.

Lite messages go one per SendMessage call (the 5.5.0 broker loses lite messages sent in a batch); others share calls of up to 32.
`).
		Fields(connectionFields()...).
		Fields(
			service.NewInterpolatedStringField("topic").Description("The destination topic (the LITE main topic for lite messages)."),
			service.NewInterpolatedStringField("lite_topic").Description("The lite topic; empty sends a normal (or FIFO) message.").Default(""),
			service.NewInterpolatedStringField("tag").Description("The message's tag; empty for none.").Default(""),
			service.NewInterpolatedStringField("keys").Description("The message's keys, separated by spaces; empty for none.").Default(""),
			service.NewInterpolatedStringField("message_group").Description("The FIFO message group; empty for none.").Default("").Advanced(),
			service.NewInterpolatedStringMapField("properties").Description("User properties to set on each message.").Default(map[string]any{}),
			service.NewMetadataFilterField("metadata").Description("Which metadata keys of each message to send as user properties (none unless set; `"+MetaHandle+"` and the other `rocketmq_` keys never are, nor the properties the broker reserves, such as the `INNER_MULTI_DISPATCH` of a received lite message).").Optional(),
			service.NewIntField("max_attempts").Description("The tries of a send that fails with a retriable error, all under one message id.").Default(rmqflow.DefaultSinkMaxAttempts),
			service.NewOutputMaxInFlightField().Default(64),
			service.NewBatchPolicyField("batching"),
		).
		Example("Answer into the caller's lite topic", "Sends each message to the main topic `replies`, into the lite topic its input message came from.", `
output:
  rocketmq:
    endpoints: 127.0.0.1:8081
    topic: replies
    lite_topic: ${! meta("rocketmq_lite_topic") }
`)
}

type output struct {
	conn        rmqflow.Connection
	topic       *service.InterpolatedString
	liteTopic   *service.InterpolatedString
	tag         *service.InterpolatedString
	keys        *service.InterpolatedString
	group       *service.InterpolatedString
	properties  map[string]*service.InterpolatedString
	metadata    *service.MetadataFilter
	maxAttempts int

	mu     sync.Mutex
	sinks  map[string]*openSink // by topic
	closed bool
}

// openSink is a topic's sink, opened once: callers for the topic wait for
// done; others do not (a topic whose route is slow to come stalls only its
// own messages).
type openSink struct {
	done   chan struct{}
	s      *rmqflow.Sink
	err    error
	gaveUp bool // the opener's context ended: a waiter opens it itself
}

func newOutput(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
	var (
		o   = &output{sinks: map[string]*openSink{}}
		pol service.BatchPolicy
		mif int
		err error
	)
	if o.conn, err = parseConnection(conf, mgr.Logger()); err != nil {
		return nil, pol, 0, err
	}
	for name, dst := range map[string]**service.InterpolatedString{"topic": &o.topic, "lite_topic": &o.liteTopic, "tag": &o.tag, "keys": &o.keys, "message_group": &o.group} {
		if *dst, err = conf.FieldInterpolatedString(name); err != nil {
			return nil, pol, 0, err
		}
	}
	if s, ok := o.topic.Static(); ok && s == "" {
		return nil, pol, 0, errors.New("topic is required")
	}
	if o.properties, err = conf.FieldInterpolatedStringMap("properties"); err != nil {
		return nil, pol, 0, err
	}
	if conf.Contains("metadata") {
		if o.metadata, err = conf.FieldMetadataFilter("metadata"); err != nil {
			return nil, pol, 0, err
		}
	}
	if o.maxAttempts, err = conf.FieldInt("max_attempts"); err != nil {
		return nil, pol, 0, err
	}
	if o.maxAttempts < 1 {
		return nil, pol, 0, errors.New("max_attempts must be at least 1")
	}
	if mif, err = conf.FieldMaxInFlight(); err != nil {
		return nil, pol, 0, err
	}
	if pol, err = conf.FieldBatchPolicy("batching"); err != nil {
		return nil, pol, 0, err
	}
	return o, pol, mif, nil
}

// Connect checks the static topic's route, so that a wrong endpoint or topic
// shows at start; a topic interpolated per message is opened when first used.
func (o *output) Connect(ctx context.Context) error {
	if t, ok := o.topic.Static(); ok {
		_, err := o.sink(ctx, t)
		return err
	}
	return nil
}

// sink returns the sink of topic, opening it on first use, without holding
// the lock while it opens. A failed open is forgotten (the next call tries
// again); its waiters get its error, or try again themselves when it was
// the opener's context that ended.
func (o *output) sink(ctx context.Context, topic string) (*rmqflow.Sink, error) {
	for {
		o.mu.Lock()
		if o.closed {
			o.mu.Unlock()
			return nil, service.ErrNotConnected
		}
		e := o.sinks[topic]
		if e == nil {
			break // this call opens it, below, still holding the lock
		}
		o.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil && e.gaveUp && ctx.Err() == nil {
			continue // the opener gave up, not this caller
		}
		return e.s, e.err
	}
	e := &openSink{done: make(chan struct{})}
	o.sinks[topic] = e
	o.mu.Unlock()
	defer close(e.done)
	s, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: o.conn, Topic: topic, MaxAttempts: o.maxAttempts})
	o.mu.Lock()
	overtaken := err == nil && o.closed
	if err != nil && o.sinks[topic] == e {
		delete(o.sinks, topic)
	}
	if overtaken {
		e.err = service.ErrNotConnected
	} else {
		e.s, e.err = s, err
		e.gaveUp = err != nil && ctx.Err() != nil
	}
	o.mu.Unlock()
	if overtaken {
		// Close ran while it opened: it waits (done) for this close.
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, service.ErrNotConnected
	}
	return s, err
}

func (o *output) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	futures := make([]*rmqflow.SendFuture, len(batch))
	errs := make([]error, len(batch))
	for i, msg := range batch {
		topic, rec, err := o.record(msg)
		if err == nil {
			var s *rmqflow.Sink
			if s, err = o.sink(ctx, topic); err == nil {
				futures[i] = s.Write(ctx, rec)
			}
		}
		errs[i] = err
	}
	for i, f := range futures {
		if f != nil {
			_, errs[i] = f.Wait(ctx)
		}
	}
	var berr *service.BatchError
	for i, err := range errs {
		if err == nil {
			continue
		}
		if berr == nil {
			berr = service.NewBatchError(batch, fmt.Errorf("rocketmq output: %w", err))
		}
		berr.Failed(i, err)
	}
	if berr == nil {
		return nil
	}
	if len(batch) == 1 {
		return errs[0]
	}
	return berr
}

// record builds the topic and record of msg.
func (o *output) record(msg *service.Message) (string, rmqflow.Record, error) {
	var rec rmqflow.Record
	topic, err := o.topic.TryString(msg)
	if err != nil {
		return "", rec, fmt.Errorf("topic: %w", err)
	}
	if topic == "" {
		return "", rec, errors.New("topic: interpolated to the empty string")
	}
	if rec.LiteTopic, err = o.liteTopic.TryString(msg); err != nil {
		return "", rec, fmt.Errorf("lite_topic: %w", err)
	}
	if rec.Tag, err = o.tag.TryString(msg); err != nil {
		return "", rec, fmt.Errorf("tag: %w", err)
	}
	keys, err := o.keys.TryString(msg)
	if err != nil {
		return "", rec, fmt.Errorf("keys: %w", err)
	}
	rec.Keys = strings.Fields(keys)
	if rec.MessageGroup, err = o.group.TryString(msg); err != nil {
		return "", rec, fmt.Errorf("message_group: %w", err)
	}
	if o.metadata != nil || len(o.properties) > 0 {
		rec.Properties = map[string]string{}
	}
	if o.metadata != nil {
		_ = o.metadata.Walk(msg, func(k, v string) error {
			if !strings.HasPrefix(k, rmqflow.AttrPrefix) && !client.IsSystemProperty(k) {
				rec.Properties[k] = v
			}
			return nil
		})
	}
	for k, p := range o.properties {
		v, err := p.TryString(msg)
		if err != nil {
			return "", rec, fmt.Errorf("properties.%s: %w", k, err)
		}
		rec.Properties[k] = v
	}
	if rec.Body, err = msg.AsBytes(); err != nil {
		return "", rec, err
	}
	return topic, rec, nil
}

func (o *output) Close(ctx context.Context) error {
	o.mu.Lock()
	entries := o.sinks
	o.sinks, o.closed = map[string]*openSink{}, true
	o.mu.Unlock()
	var errs []error
	var opening []*openSink
	for _, e := range entries {
		select {
		case <-e.done:
			if e.s != nil {
				errs = append(errs, e.s.Close(ctx))
			}
		default:
			opening = append(opening, e)
		}
	}
	// A sink still opening is closed by its opener, which sees closed;
	// Close waits for that while its ctx lasts.
	for _, e := range opening {
		select {
		case <-e.done:
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		}
	}
	return errors.Join(errs...)
}
